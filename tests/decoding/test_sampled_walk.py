"""Correctors at T > 0: every walking family's sampled walk (`draftlab.corrector.walks`) keeps the target's law through
the real engine, and the harness has the power to catch the three ways to get it wrong.

The harness of tests/decoding/test_tree_sampling.py: a tiny random target (6 tokens), one prompt over STREAMS streams
through `SpeculativeEngine` (prefill, rounds of the corrector's proposal step with `walk="sampled"`, the min(1, p/q)
rule), and the joint law of the first three emitted tokens compared by Pearson chi-square with the exact joint
enumerated from the target's processed distributions, at T=1 and at T=0.7 / top-p 0.9 (α = 1e-3, fixed seeds). The
drafter proposes from a fixed logits table with fixed per-slot hidden states; each family's corrector is a small
random one whose zero-initialised output is drawn large, so its conditional rows differ from the drafter's marginals
and from one predecessor to the next. Planted bugs, on a pair-scoring stub whose rows depend strongly on the
predecessor (`PairTable`, walked by the shared `walks.pair_walk`): the residual over the K candidates only; q reported from the slot's marginal under the walk instead of the sampled predecessor's row; q
normalised at T=1 while the token is drawn from the processed row. Each must fail. Also: a corrector whose scores add
nothing proposes the drafter's top-K renormalised (its own row over the vocabulary for the vocabulary walkers); at T=0
the sampled arm equals its point-mass arm token for token; a sampled walk with another path rule is one line.
"""
from __future__ import annotations

import types

import pytest
import torch
from torch import nn

from draftlab.corrector import walks
from draftlab.corrector.base import Correction, Corrector, DraftBlock
from draftlab.corrector.dcoco import DCOCOArch, DCOCOCorrector
from draftlab.corrector.lilicorr import LiLiCorrArch, LiLiCorrCorrector
from draftlab.corrector.paths import greedy_path, path_tokens
from draftlab.corrector.proposal import CorrectorProposal
from draftlab.corrector.selector import CandidateSelector
from draftlab.corrector.sequential import DominoCorrector, DSparkCorrector, SequentialArch
from draftlab.decoding import SamplingParams, SpeculativeEngine
from draftlab.decoding import verify as verify_mod
from draftlab.decoding.verify import process_logits
from draftlab.errors import DraftlabError
from stubs import FixedDrafter
from test_tree_sampling import PROMPT, TABLE, V, check_law, exact_joint, prefix_logits, target, top_p_margin  # noqa: F401

pytestmark = pytest.mark.usefixtures("one_thread")

H, DE = 8, 4
STREAMS = 4000
FAMILIES = ("dcoco", "lilicorr", "dspark", "domino", "dflash2")
SETTINGS = [pytest.param(SamplingParams(temperature=1.0), id="T1"),
            pytest.param(SamplingParams(temperature=0.7, top_p=0.9), id="T0.7-top_p0.9")]
HIDDEN = torch.randn(TABLE.shape[0], H, generator=torch.Generator().manual_seed(3)) * 2.0  # slots 1..n


class SlotDrafter(FixedDrafter):
    """The fixed logits table with fixed hidden states per slot (a corrector reads both)."""

    def draft(self, state, ids, positions):
        out = super().draft(state, ids, positions)
        B, S = ids.shape
        out.hidden = torch.cat([torch.zeros(1, H), HIDDEN])[None].expand(B, S, -1).clone()
        return out


def corrector(family: str, scale: float = 1.0):
    """A small random corrector of `family` on V target ids (K = 3, LiLiCorr 4), its output layer drawn with std
    `scale` (0: left at its zero init, the scores then add nothing)."""
    torch.manual_seed(11)
    emb = nn.Embedding(V, DE)
    seq = lambda kind, **kw: SequentialArch(kind, H, V, V, DE, rank=4, **kw)  # noqa: E731
    if family == "dcoco":
        c, out = DCOCOCorrector(DCOCOArch(H, DE, V, k=3, dim=8, mlp_hidden=16), emb), "mlp_out"
    elif family == "lilicorr":
        c, out = LiLiCorrCorrector(LiLiCorrArch(H, DE, V, slots=TABLE.shape[0], k=4, width=8, factor_dim=8, heads=2),
                                   emb), "in_head"
    elif family == "dspark":
        c, out = DSparkCorrector(seq("dspark")), "out"
    elif family == "domino":
        drafter = types.SimpleNamespace(embed_tokens=emb, lm_head=nn.Linear(H, V, bias=False), draft_vocab=None)
        c, out = DominoCorrector(seq("domino"), drafter), "up"
    else:
        c, out = CandidateSelector(seq("dflash2", top_k=3)), "successor_codebook"
    with torch.no_grad():
        for p in getattr(c, out).parameters():
            p.normal_(0.0, scale) if scale else p.zero_()
        if family == "lilicorr" and not scale:  # LiLiCorr's init: every `in` the same vector, constant rows
            c.in_head.bias.copy_(torch.ones(8))
    return c.eval()


def decode(target, family, sp, seed, walk="sampled", streams=STREAMS, c=None):
    eng = SpeculativeEngine(target, SlotDrafter(TABLE, hidden_size=H),
                            CorrectorProposal(c or corrector(family, 3.0), walk=walk))
    res = eng.generate([PROMPT] * streams, 3, sp, eos_ids=[], generator=torch.Generator().manual_seed(seed))
    return torch.tensor([r[:3] for r in res.tokens]), res


@pytest.mark.parametrize("sp", SETTINGS)
@pytest.mark.parametrize("family", FAMILIES)
def test_every_sampled_walk_keeps_the_targets_law(target, prefix_logits, family, sp):
    if sp.top_p < 1:
        assert top_p_margin(prefix_logits, sp) > 1e-4
    toks, res = decode(target, family, sp, seed=300 + FAMILIES.index(family))
    assert sum(a[0] > 0 for a in res.accepted) > STREAMS // 10  # the walk's proposals are accepted
    pv = check_law(toks, exact_joint(prefix_logits, sp), f"{family}-sampled {sp}")
    print(f"{family}-sampled {sp}: p = {pv:.3g}")
    assert pv > 1e-3


# ---- the planted bugs ---------------------------------------------------------------------------------------------


def residual_over_candidates(p, q):
    """Bug: the residual kept on q's support (the K candidates) only."""
    return (p - q).clamp_min(0.0) * (q > 0)


def walk_with_marginal_q(first, pair, ids, sp, u):
    """Bug: each later slot's token drawn from its predecessor's row, but q reported as the slot's marginal under the
    walk (Σ_a q(a) q(b | a)) instead of that row."""
    N, n, K = ids.shape
    rows = torch.arange(N)
    j, q = walks.draw(first.float(), sp, u[:, 0])
    idx, qs, marg = [j], [q], q
    for p in range(n - 1):
        cond = process_logits(pair[:, p].float(), sp)  # [N, K, K] every predecessor's row
        j, _ = walks.draw(pair[rows, p, j].float(), sp, u[:, p + 1])
        marg = (marg[:, :, None] * cond).sum(1)
        idx.append(j)
        qs.append(marg)
    idx = torch.stack(idx, 1)
    return walks.SampledWalk(ids.gather(-1, idx[..., None]).squeeze(-1), torch.stack(qs, 1), ids)


def draw_reporting_t1(logits, sp, u):
    """Bug: the token drawn from the processed row, q reported as the row's softmax at T=1 without top-p."""
    probs = process_logits(logits, sp)
    return walks.inverse_cdf(probs, u), logits.float().softmax(-1)


class PairTable(Corrector):
    """A pair-scoring stub for the planted bugs: over the drafter's top-K, slot 1's row is ℓ_1 and slot p+1's row after
    candidate a is ℓ_{p+1} + STRENGTH·[b = a+1 mod K], so each predecessor prefers another successor and the
    conditional rows lie far from the slot's marginal. Its sampled walk is the shared `walks.pair_walk`."""

    STRENGTH = 3.0

    def __init__(self, k: int = 3):
        super().__init__()
        self.k = k
        self.anchor = nn.Parameter(torch.zeros(1))  # the device and dtype
        self.register_buffer("prefer", self.STRENGTH * torch.eye(k).roll(1, dims=1))  # [K(a), K(b)]

    def rows(self, block):
        ids, vals = block.candidates(self.k)  # [N, n, K]
        return ids, vals[:, 0], vals[:, 1:, None, :] + self.prefer  # first [N, K], pair [N, n−1, K, K]

    def propose(self, block, rule="greedy", lam=0.75, backend=None):
        ids, first, pair = self.rows(block)
        return Correction(path_tokens(greedy_path(pair, first), ids))

    def sample(self, block, sp, u):
        return walks.pair_walk(*self.rows(block)[1:], self.rows(block)[0], sp, u)


def test_the_stub_rows_lie_far_from_the_marginal():
    """Each planted bug must move >= 10% of the mass: the q-from-the-marginal bug moves what separates a conditional
    row from the slot's marginal, here >= 0.1 in total variation for some predecessor at both settings."""
    hidden, logits, slot0 = block(1)
    ids, first, pair = PairTable().rows(DraftBlock(hidden=hidden, slot0=slot0, logits=logits))
    for sp in (SamplingParams(temperature=1.0), SamplingParams(temperature=0.7, top_p=0.9)):
        q1, cond = process_logits(first[0], sp), process_logits(pair[0, 0], sp)
        marg = (q1[:, None] * cond).sum(0)
        assert float(((cond - marg).abs().sum(-1) / 2).max()) >= 0.1


BUGS = {"residual over the K candidates": (verify_mod, "residual", residual_over_candidates),
        "q from the slot's marginal": (walks, "pair_walk", walk_with_marginal_q),
        "q normalised apart from the draw": (walks, "draw", draw_reporting_t1)}


@pytest.mark.parametrize("bug", list(BUGS))
def test_each_planted_bug_fails_the_harness(target, prefix_logits, monkeypatch, bug):
    sp = SamplingParams(temperature=0.7, top_p=0.9)
    module, name, fn = BUGS[bug]
    joint = exact_joint(prefix_logits, sp)
    toks, _ = decode(target, "", sp, seed=400, c=PairTable())
    assert check_law(toks, joint, "the stub") > 1e-3  # the stub itself keeps the law: the failure below is the bug's
    monkeypatch.setattr(module, name, fn)
    toks, _ = decode(target, "", sp, seed=400, c=PairTable())
    try:
        pv = check_law(toks, joint, bug)
    except AssertionError:  # a continuation the target gives no mass was emitted: that fails the harness too
        pv = 0.0
    print(f"planted bug '{bug}': p = {pv:.3g}")
    assert pv < 1e-6


# ---- what the walk is, exactly ------------------------------------------------------------------------------------


def block(n_blocks=5):
    """A drafted block of the fixed drafter: (hidden [N, n, H], logits [N, n, V], slot0 [N])."""
    g = torch.Generator().manual_seed(5)
    return (HIDDEN[None].expand(n_blocks, -1, -1), TABLE[None].expand(n_blocks, -1, -1).clone(),
            torch.randint(0, V, (n_blocks,), generator=g))


@pytest.mark.parametrize("family", FAMILIES)
def test_scores_that_add_nothing_propose_the_drafters_rows(family):
    c = corrector(family, 0.0)
    hidden, logits, slot0 = block()
    sp = SamplingParams(temperature=0.8)
    u = torch.rand(hidden.shape[:2], generator=torch.Generator().manual_seed(1))
    w = c.sample(DraftBlock(hidden=hidden, slot0=slot0, logits=logits), sp, u)
    assert w.q.shape[:2] == (5, TABLE.shape[0]) and w.ids.shape == w.q.shape
    assert torch.allclose(w.q.sum(-1), torch.ones(5, TABLE.shape[0]), atol=1e-6)
    full = torch.zeros(5, TABLE.shape[0], V).scatter_add_(-1, w.ids, w.q)  # q over the target ids
    if family in ("dspark", "domino"):  # the vocabulary walkers: the drafter's own row
        want = process_logits(logits, sp)
    else:  # over K: the drafter's top-K renormalised
        K = w.ids.shape[-1]
        vals, idx = logits.topk(K, -1)
        want = torch.zeros_like(full).scatter_(-1, idx, process_logits(vals, sp))
    assert torch.allclose(full, want, atol=1e-5), family
    assert bool((full.gather(-1, w.tokens[..., None]) > 0).all())  # each token drawn where its row has mass


@pytest.mark.parametrize("family", FAMILIES)
def test_at_t0_the_sampled_arm_is_its_point_mass_arm(target, family):
    c = corrector(family, 3.0)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(1, V, (n,), generator=g).tolist() for n in (3, 5, 8)]
    outs = []
    for walk in ("", "sampled"):
        eng = SpeculativeEngine(target, SlotDrafter(TABLE, hidden_size=H), CorrectorProposal(c, walk=walk))
        outs.append(eng.generate(prompts, 12, SamplingParams(), eos_ids=[]).tokens)
    assert outs[0] == outs[1]


def test_a_sampled_walk_needs_the_greedy_rule():
    with pytest.raises(DraftlabError, match="globalsum path rule has no sampled walk") as e:
        CorrectorProposal(corrector("dcoco"), rule="globalsum", walk="sampled")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("family", ["dcoco", "dspark"])
def test_the_compiled_sampled_step_draws_what_the_eager_one_draws(target, family):
    """The round's uniforms are drawn outside the step from the run's generator, so the compiled proposal step (dynamo,
    eager backend: no inductor on 2 cores) proposes the eager step's tokens and rows from the same seed, at T=1 and
    T=0.7 / top-p 0.9 (one graph per sampling setting), and a compiled run is reproducible from its seed."""
    c = corrector(family, 3.0)
    d = SlotDrafter(TABLE, hidden_size=H)
    ids = torch.tensor([[2, 0, 0, 0], [5, 0, 0, 0]])
    draft = d.draft(d.new_state(2), ids, None)
    eager, compiled = CorrectorProposal(c, walk="sampled"), CorrectorProposal(c, walk="sampled")
    assert compiled.compile_steps("on", backend="eager") != "off"
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(1, V, (n,), generator=g).tolist() for n in (3, 5, 8, 4)]
    for sp in (SamplingParams(temperature=1.0), SamplingParams(temperature=0.7, top_p=0.9)):
        a, b = (p(draft, sp, torch.Generator().manual_seed(4)) for p in (eager, compiled))
        assert torch.equal(a.tokens, b.tokens) and torch.equal(a.q_vocab, b.q_vocab)
        assert torch.allclose(a.q, b.q, atol=1e-6)
        runs = [SpeculativeEngine(target, d, compiled).generate(prompts, 10, sp, eos_ids=[],
                                                                 generator=torch.Generator().manual_seed(9)).tokens
                for _ in range(2)]
        assert runs[0] == runs[1], (family, sp)


@pytest.mark.parametrize("arm, why", [("dcoco-globalsum-sampled", "only the greedy path rule has a sampled walk"),
                                      ("dflash-sampled", "dflash has no corrector walk to sample"),
                                      ("pld-sampled", "pld has no corrector walk to sample")])
def test_a_sampled_arm_without_a_walk_is_one_line(arm, why):
    """The arm grammar and the params check both say it in one line (a sampled arm at T=0 is allowed: its argmax)."""
    from pathlib import Path

    from draftlab.arms.grammar import arm_names, resolve
    from draftlab.errors import ConfigError
    from draftlab.params import build_params, compose_params

    with pytest.raises(DraftlabError, match=why) as e:
        resolve(arm)
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match=f"names '{arm}', which has no sampled walk") as e:
        build_params(compose_params([f"benchmark.arms=[ar,{arm}]"], Path(__file__).resolve().parents[2] / "conf"),
                     arms=arm_names())
    assert "\n" not in str(e.value) and "dcoco-sampled" in str(e.value)
    assert callable(resolve("dcoco-sampled-seeded")) and callable(resolve("dflash2-sampled"))
