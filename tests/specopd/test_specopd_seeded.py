"""SpecOPD on a seeded drafter (issue 20 item 5; SPEC §3 on SPEC §5): the per-slot q SpecOPD samples its
branches from and compares with p is the engine's proposal q on the same committed text (seeded block input,
seed bias, seed column -> the seed's target id); the branches are draws of that q, chunked or not; every
objective's step is finite and trains the seed bias; the Draft-OPD rollout seeds its rounds as the engine does
and its update recomputes the q it drafted with; a drafter whose head reads no seeds keeps the plain path."""
from __future__ import annotations

import pytest
import torch

from conftest import assert_reordered_close
from stubs import objective_terms, sharp_drafter
import draftlab.specopd.draft_opd as draft_opd_mod
import draftlab.specopd.terms as terms_mod
from draftlab.decoding.api import DrafterProposal
from draftlab.decoding.verify import SamplingParams
from draftlab.specopd.draft_opd import draft_opd_rollout
from draftlab.specopd.slots import block_rows, slot_logits
from draftlab.specopd.terms import block_q, specopd_terms
from draftlab.specopd.tree import branch_uniforms, sample_from, trunk_pass

S, W, MASK = 5, 4, 1
TAPS = [0, 2, 3]
VOCAB = torch.arange(3, 97, 3)  # 32 of the target's 97 ids: many seeds of the texts below lie outside it

pytestmark = pytest.mark.usefixtures("one_thread")


def seeded(target, vocab=VOCAB, seed_logit=True, seed_bias=0.5):
    d = sharp_drafter(target, S, TAPS, MASK, vocab, arch_kw={"seed": "lookup", "seed_logit": seed_logit,
                                                             "seed_bias": seed_bias})
    if seed_bias:
        with torch.no_grad():  # unequal per slot: a slot mix-up between SpecOPD and the engine would show
            d.seed_bias.copy_(torch.linspace(0.4, 1.6, S - 1))
    return d


def looping(L: int, seed: int) -> list[int]:
    """Tokens 3..40 (never MASK) that copy earlier spans now and then, so most anchors have seeds."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(3, 41, (L,), generator=g).tolist()
    for i in range(5, L):
        if torch.rand((), generator=g) < 0.5:
            x[i] = x[i - int(torch.randint(2, 5, (), generator=g))]
    return x


def batch_of(texts, anchors):
    L = max(map(len, texts))
    ids = torch.zeros(len(texts), L, dtype=torch.long)
    for b, t in enumerate(texts):
        ids[b, :len(t)] = torch.tensor(t)
    a = torch.tensor(anchors)
    return {"ids": ids, "seq_len": torch.tensor([len(t) for t in texts]), "anchors": a,
            "anchor_valid": torch.ones_like(a, dtype=torch.bool), "seq": torch.arange(len(texts))}


TEXTS = [looping(30, 1), looping(24, 2)]
ANCHORS = [[6, 11, 17, 22, 27], [5, 9, 14, 18, 21]]  # the last branches are cut short (W_b < W)


def engine_q(target, d, text: list[int], a: int, T: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The engine's block input [S] and proposal q [n, V] at anchor a of `text`: context = the target's taps of
    x_{<a}, the state's committed text x_{<=a} (slot 0 = x_a), `draft` then `DrafterProposal` at temperature T."""
    ctx = torch.tensor([text[:a]])
    st = d.new_state(1)
    d.extend_context(st, target(ctx, taps=TAPS).taps, torch.ones(1, a, dtype=torch.bool), torch.arange(a)[None])
    last = torch.tensor([text[a]])
    st.start([text[:a]], last)
    block = d.block_input(st, last)  # [1, S]
    out = d.draft(st, block, torch.arange(a, a + S)[None])
    return block[0], DrafterProposal()(out, SamplingParams(T), torch.Generator().manual_seed(0)).q[0]


@pytest.mark.parametrize("T", [1.0, 0.7])
def test_branch_q_is_the_engines_proposal_q(target, T):
    """SpecOPD's per-slot q (softmax(q_logits / T), what its branches are drawn from and its overlaps read)
    equals the engine's proposal q for the same committed text, slot by slot, over the target vocabulary."""
    d = seeded(target).eval()
    batch = batch_of(TEXTS, ANCHORS)
    trunk = trunk_pass(target, batch["ids"], batch["seq_len"], TAPS)
    with torch.no_grad():
        q_logits, vocab = block_q(d, trunk.taps, trunk.valid, batch["ids"], batch["anchors"], W, batch["seq_len"])
        _, seeds = block_rows(d, trunk.taps, trunk.valid, batch["ids"], batch["anchors"], W)
    assert vocab is None and q_logits.shape == (2, 5, W, target.vocab_size)  # the seed column: over the target's ids
    q = (q_logits / T).softmax(-1)
    worst, column_mass = 0.0, 0.0
    for b, text in enumerate(TEXTS):
        for j, a in enumerate(ANCHORS[b]):
            block, qe = engine_q(target, d, text, a, T)
            assert torch.equal(block[1:W + 1], seeds[b, j])  # the engine's block carries SpecOPD's seeds
            worst = max(worst, float((qe[:W] - q[b, j]).abs().max()))
            for i, s in enumerate(seeds[b, j].tolist()):  # mass on seeds outside the draft vocabulary (the column)
                if s != MASK and s not in VOCAB.tolist():
                    column_mass = max(column_mass, float(qe[i, s]))
    assert worst < 1e-5, worst
    assert column_mass > 0.05, column_mass  # the comparison covered the seed column, not only the draft vocabulary


def _capture_branches(monkeypatch):
    seen = []
    for name in ("branch_target_logits", "branch_target_hidden"):
        fn = getattr(terms_mod, name)

        def spy(target, trunk, anchors, branch, lengths, _fn=fn):
            seen.append(branch.clone())
            return _fn(target, trunk, anchors, branch, lengths)
        monkeypatch.setattr(terms_mod, name, spy)
    return seen


def test_branches_are_draws_of_the_engines_q_chunked_or_not(target, monkeypatch):
    """With the branch's own uniforms, SpecOPD's tokens are the inverse-CDF draws of the engine's q (so tokens
    outside the draft vocabulary come from the seed column), in the unchunked, row-chunked and vocabulary-
    chunked samplers alike."""
    d = seeded(target).eval()
    batch = batch_of(TEXTS, ANCHORS)
    seen = _capture_branches(monkeypatch)
    u = branch_uniforms(3, 1, batch["seq"], batch["anchors"], W)  # [B, A, W]
    for chunk, vchunk in ((0, 0), (0, 7), (5, 0), (3, 11)):
        specopd_terms(target, d, batch, W, 1.0, seed=3, step=1, chunk_rows=chunk, vocab_chunk=vchunk)
    ref = torch.stack([torch.stack([sample_from(engine_q(target, d, TEXTS[b], a, 1.0)[1][:W], u[b, j])
                                    for j, a in enumerate(ANCHORS[b])]) for b in range(2)])  # [B, A, W]
    assert len(seen) == 4
    for got in seen:
        assert torch.equal(got, ref)
    assert bool((~torch.isin(ref, VOCAB)).any())  # some branch token is a seed outside the draft vocabulary


@pytest.mark.parametrize("arm", ["specopd", "first_rejection", "offpolicy_tv", "sequential"])
def test_every_objective_trains_the_seeded_drafter_chunked_or_not(target, arm):
    """Each objective's loss on the seeded drafter is finite and in (0, 1), its gradient reaches the seed bias
    (and the network), and the row-chunked terms equal the unchunked ones."""
    d = seeded(target)
    batch = batch_of(TEXTS, ANCHORS)

    T = 0.5  # the tiny target's p is flat: at T=1 a q over 32 ids may cover p wherever it has mass (zero gradient)

    def run(chunk, vchunk):
        return objective_terms(arm, target, d, batch, W, T, chunk, vchunk)
        return specopd_terms(target, d, batch, W, T, seed=3, step=1, first_rejection=arm == "first_rejection",
                             chunk_rows=chunk, vocab_chunk=vchunk)

    grads = []
    for chunk, vchunk in ((0, 0), (4, 9)):
        d.zero_grad()
        t = run(chunk, vchunk)
        loss = t.numerator / t.count
        assert torch.isfinite(loss) and 0 < float(loss.detach()) < 1 and t.positions > 0
        loss.backward()
        assert d.seed_bias.grad is not None and float(d.seed_bias.grad.abs().sum()) > 0
        assert float(d.fc.weight.grad.abs().sum()) > 0
        grads.append((float(t.numerator.detach()), t.accept_prefix, d.seed_bias.grad.clone(), d.fc.weight.grad.clone()))
    (n0, a0, s0, f0), (n1, a1, s1, f1) = grads
    assert n1 == pytest.approx(n0, rel=1e-5, abs=1e-6) and a1 == a0
    rows = batch["anchors"].numel() * S  # the block rows each weight's gradient sums over
    assert_reordered_close(s1, s0, rows, "seed bias")
    assert_reordered_close(f1, f0, rows, "fc")


def test_draft_opd_rollout_seeds_its_rounds_and_recomputes_their_q(target, monkeypatch):
    """The rollout drives the seeded state as the engine does: every round's block carries the seeds of the
    committed text at its anchor (those the update's forward_train recomputes), and the q each round drafted
    with (over the target vocabulary, the seed column included) equals the update's recomputed q."""
    d = seeded(target).eval()
    blocks, qs = [], []
    draft = d.draft

    def spy_draft(state, block_ids, positions):
        blocks.append(block_ids.clone())
        return draft(state, block_ids, positions)
    rnd = draft_opd_mod.speculative_round

    def spy_round(*args, **kw):
        r = rnd(*args, **kw)
        qs.append(r.proposal.q)
        return r
    d.draft = spy_draft
    monkeypatch.setattr(draft_opd_mod, "speculative_round", spy_round)
    # every non-MASK id occurs early in each prefix, so whatever token starts a round has a seed (a 1-gram match)
    ids = [0] + list(range(2, target.vocab_size))
    prefixes = [[ids[i] for i in torch.randperm(len(ids), generator=torch.Generator().manual_seed(b))] + TEXTS[b][:9]
                for b in range(2)]
    ro = draft_opd_rollout(target, d, prefixes, rounds=4, W=W, temperature=1.0, seed=2)
    del d.draft
    assert len(blocks) == 4 and all(q is not None and q.shape == (2, W, target.vocab_size) for q in qs)
    ctx_valid = torch.arange(ro.ids.shape[1])[None, :] < ro.seq_len[:, None]
    with torch.no_grad():
        _, seeds = block_rows(d, ro.feats, ctx_valid, ro.ids, ro.anchors, W, ro.seq_len)  # [B, R, W]
        q_logits, vocab = block_q(d, ro.feats, ctx_valid, ro.ids, ro.anchors, W, ro.seq_len)
    assert vocab is None
    for r in range(4):
        assert torch.equal(blocks[r][:, 0], ro.ids.gather(1, ro.anchors[:, r:r + 1])[:, 0])
        assert torch.equal(blocks[r][:, 1:W + 1], seeds[:, r])
        assert (qs[r] - q_logits[:, r].softmax(-1)).abs().max() < 1e-5
    assert bool((seeds[..., 0] != MASK).all())  # every round of every stream was seeded
    assert bool((~torch.isin(seeds[seeds != MASK], VOCAB)).any())  # ... with seeds outside the draft vocabulary
    # at T=0 the rounds' proposals are the recomputed q's argmax (target ids: the seed column's are its seeds)
    ro0 = draft_opd_rollout(target, d, prefixes, rounds=3, W=W, temperature=0.0)
    cv0 = torch.arange(ro0.ids.shape[1])[None, :] < ro0.seq_len[:, None]
    with torch.no_grad():
        q0, _ = block_q(d, ro0.feats, cv0, ro0.ids, ro0.anchors, W, ro0.seq_len)
    assert torch.equal(q0.argmax(-1), ro0.branch)


def test_a_head_that_reads_no_seeds_keeps_the_plain_path(target):
    """A plain drafter and a seeded one without bias or column: slot_logits is drafter.logits(hidden) bit for bit,
    over drafter.draft_vocab; the seeded one's rows are those of its seeded block input."""
    batch = batch_of(TEXTS, ANCHORS)
    trunk = trunk_pass(target, batch["ids"], batch["seq_len"], TAPS)
    plain = sharp_drafter(target, S, TAPS, MASK, VOCAB)
    h, seeds = block_rows(plain, trunk.taps, trunk.valid, batch["ids"], batch["anchors"], W, batch["seq_len"])
    lg, vocab = slot_logits(plain, h, seeds)
    assert seeds is None and vocab is plain.draft_vocab
    assert torch.equal(lg, plain.logits(plain.forward_train(trunk.taps, trunk.valid, batch["ids"], batch["anchors"])[
        :, :, 1:W + 1]))
    bare = seeded(target, seed_logit=False, seed_bias=0.0)
    h, seeds = block_rows(bare, trunk.taps, trunk.valid, batch["ids"], batch["anchors"], W, batch["seq_len"])
    lg, vocab = slot_logits(bare, h, seeds)
    ts = bare.train_seeds(batch["ids"], batch["anchors"])
    ref = bare.forward_train(trunk.taps, trunk.valid, batch["ids"], batch["anchors"], ts)[:, :, 1:W + 1]
    assert seeds is None and vocab is bare.draft_vocab and torch.equal(h, ref) and torch.equal(lg, bare.logits(ref))
    assert (ts != MASK).any()
