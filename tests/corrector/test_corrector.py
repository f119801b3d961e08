"""DCOCO corrector (SPEC §2): init = drafter argmax, path rules vs brute force, the worked example of
§2.2a, the masked joint-softmax loss, gradient routing (co-training vs frozen), factorised vs
materialised scorer, parameter count, checkpoints, the proposal step in the engine. CPU, tiny shapes."""
from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch import nn

from draftlab.config import CorrectorConfig
from draftlab.errors import DraftlabError
from draftlab.corrector.base import DraftBlock
from draftlab.corrector.dcoco import DCOCOArch, DCOCOConfig, DCOCOCorrector, arch_from_config, corrector_inputs, count_parameters
from draftlab.corrector.families import load_corrector
from draftlab.corrector.loss import corrector_loss, transition_weights
from draftlab.corrector.paths import greedy_path, path_score, path_tokens, select_path, viterbi_path

V, DE, D = 97, 16, 24  # vocabulary, embedding width, drafter hidden width


def _embed(seed=0, dtype=torch.float32) -> nn.Embedding:
    torch.manual_seed(seed)
    return nn.Embedding(V, DE).to(dtype).requires_grad_(False)


def _propose(model, h, ids, lg, rule="greedy"):
    """(chosen candidate indices, tokens) through the corrector interface, candidates given."""
    c = model.propose(DraftBlock(h, cand=(ids, lg)), rule)
    return c.extras[f"path_{rule}"], c.tokens


class _Host:
    """What load_corrector reads of a drafter: the frozen embedding, device and dtype."""

    def __init__(self, embed):
        self.embed_tokens, self.device, self.dtype = embed, embed.weight.device, embed.weight.dtype


def _corrector(embed=None, out_std=0.0, seed=1, **kw) -> DCOCOCorrector:
    embed = embed if embed is not None else _embed()
    spec = DCOCOArch(hidden_size=D, embed_dim=DE, vocab_size=V, k=kw.pop("k", 4), dim=kw.pop("dim", 8),
                         mlp_hidden=kw.pop("mlp_hidden", 12), **kw)
    torch.manual_seed(seed)
    model = DCOCOCorrector(spec, embed)
    if out_std:
        nn.init.normal_(model.mlp_out.weight, std=out_std)
        nn.init.normal_(model.mlp_out.bias, std=out_std)
    return model.to(embed.weight.dtype)


def _draft(B, S, Vd, seed=0, dtype=torch.float32):
    """Random drafter outputs over a whole block: logits [B, S, Vd], hidden [B, S, D] (large scale:
    LayerNorm must tame it), a draft vocabulary [Vd] -> target ids."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, S, Vd, generator=g, dtype=dtype) * 3
    hidden = torch.randn(B, S, D, generator=g, dtype=dtype) * 50
    vocab = torch.randperm(V, generator=g)[:Vd]
    return logits, hidden, vocab


# ---- exactness at initialisation ----------------------------------------------------------------------


@pytest.mark.parametrize("S", [2, 3, 5, 9, 16])
@pytest.mark.parametrize("K", [2, 3, 8, 16])
def test_init_every_rule_returns_drafter_argmax(S, K):
    logits, hidden, vocab = _draft(3, S, 40, seed=S * 100 + K)
    model = _corrector(k=K)
    h, ids, lg = corrector_inputs(hidden, logits, K, vocab)  # [3, n, *]
    argmax_block = vocab[logits[:, 1:].argmax(-1)]  # [3, n] the drafter's own block
    scores = model(h, ids, lg)  # [3, n−1, K, K]
    assert scores.shape == (3, S - 2, K, K)
    assert torch.equal(scores, lg[:, 1:, None, :].expand_as(scores))  # S_p(a, b) = ℓ_{p+1}(b) exactly
    for rule in ("greedy", "globalsum", "geometric"):
        idx, tokens = _propose(model, h, ids, lg, rule)
        assert torch.equal(tokens, argmax_block), rule
        assert bool((idx == 0).all())


def test_leading_dims_are_batched():
    logits, hidden, vocab = _draft(6, 5, 30, seed=3)
    model = _corrector(out_std=0.5)
    h, ids, lg = corrector_inputs(hidden.view(2, 3, 5, D), logits.view(2, 3, 5, 30), 4, vocab)
    s = model(h, ids, lg)  # [2, 3, n−1, K, K]
    assert s.shape == (2, 3, 3, 4, 4)
    h2, ids2, lg2 = corrector_inputs(hidden, logits, 4, vocab)
    torch.testing.assert_close(s.reshape(6, 3, 4, 4), model(h2, ids2, lg2))
    idx = select_path(s, lg, "greedy")
    assert idx.shape == (2, 3, 4)


# ---- path rules vs brute force --------------------------------------------------------------------------


def _brute(scores, first, lam=None, greedy=False, include_first=True):
    """Enumerate all K^n paths of each stream."""
    N, P, K, _ = scores.shape
    out = []
    for i in range(N):
        best, best_key = None, None
        for path in itertools.product(range(K), repeat=P + 1):
            if greedy:
                if path[0] != int(first[i].argmax()):
                    continue
                key = tuple(float(scores[i, p, path[p], path[p + 1]]) for p in range(P))  # lexicographic
            else:
                key = float(first[i, path[0]]) if include_first else 0.0
                key += sum(lam ** (p + 1) * float(scores[i, p, path[p], path[p + 1]]) for p in range(P))
            if best_key is None or key > best_key:
                best, best_key = path, key
        out.append(best)
    return torch.tensor(out)


@pytest.mark.parametrize("n,K", [(2, 2), (3, 3), (4, 3), (5, 2)])
def test_paths_equal_brute_force(n, K):
    g = torch.Generator().manual_seed(n * 10 + K)
    scores = torch.randn(5, n - 1, K, K, generator=g, dtype=torch.float64)
    first = torch.randn(5, K, generator=g, dtype=torch.float64)
    assert torch.equal(greedy_path(scores, first), _brute(scores, first, greedy=True))
    for lam in (1.0, 0.75, 0.3):
        vit = viterbi_path(scores, first, lam)
        assert torch.equal(vit, _brute(scores, first, lam)), lam
    assert torch.equal(viterbi_path(scores, first, 1.0, include_first=False),
                       _brute(scores, first, 1.0, include_first=False))
    # select_path wires rules to these
    lg = torch.cat([first[:, None], torch.randn(5, n - 1, K, generator=g, dtype=torch.float64)], 1)
    assert torch.equal(select_path(scores, lg, "globalsum"), viterbi_path(scores, first, 1.0))
    assert torch.equal(select_path(scores, lg, "geometric", 0.75), viterbi_path(scores, first, 0.75))
    with pytest.raises(ValueError, match="greedy"):
        select_path(scores, lg, "beam")


def test_worked_example_these_keys_are_missing():
    """SPEC §2.2a: Δθ = +1.0 on These→keys and keys→are turns "These key is missing" into "These keys are missing"."""
    words = [["These", "The", "A"], ["key", "keys", "locks"], ["is", "are", "was"], ["missing", "here", "broken"]]
    ell = torch.tensor([[4.2, 3.6, 2.8], [2.7, 2.5, 1.1], [3.1, 2.9, 0.8], [2.8, 1.6, 0.5]])[None]  # [1, n=4, K=3]
    vocab = [w for slot in words for w in slot]
    ids = torch.arange(12).view(1, 4, 3)  # [1, n, K] token ids
    delta = torch.zeros(1, 3, 3, 3)  # Δθ on the 9 + 9 + 9 transitions
    delta[0, 0, 0, 1] = 1.0  # These -> keys
    delta[0, 1, 1, 1] = 1.0  # keys -> are
    text = lambda idx: " ".join(vocab[t] for t in path_tokens(idx, ids)[0].tolist())  # noqa: E731
    plain = ell[:, 1:, None, :].expand(1, 3, 3, 3)  # Δθ ≡ 0
    assert text(select_path(plain, ell, "greedy")) == "These key is missing"
    scores = plain + delta  # S_p(a, b) = ℓ_{p+1}(b) + Δθ
    assert float(scores[0, 0, 0, 1]) == pytest.approx(3.5) and float(scores[0, 1, 1, 1]) == pytest.approx(3.9)
    for rule in ("greedy", "globalsum", "geometric"):
        assert text(select_path(scores, ell, rule)) == "These keys are missing", rule


def test_worked_example_through_the_model():
    """The same correction produced by the corrector itself: Δθ built from the candidate embeddings."""
    E = nn.Embedding(V, DE).requires_grad_(False)
    with torch.no_grad():
        E.weight.zero_()
        E.weight[1, 0] = 1.0  # "keys" is the only candidate with a non-zero feature 0
    model = _corrector(E, dim=8, mlp_hidden=4, use_pair_state=False, use_candidate_state=False)
    with torch.no_grad():
        for m in (model.cand_proj, model.fuse, model.mlp_in, model.mlp_out):
            for p in m.parameters():
                p.zero_()
        # b = LN(W_c E[c]) = z: feature 0 is √7 for "keys", 0 for every other candidate (LN of 0 is 0)
        model.cand_proj.weight[0, 0] = 1.0
        model.fuse.weight.copy_(torch.eye(8))
        model.mlp_in.weight[0, 8] = 10.0  # unit 0 reads z_{p+1,b}: fires when b is "keys"
        model.mlp_in.bias[0] = -5.0
        model.mlp_out.weight[0, 0] = 1.0 / 21.0  # silu(10√7 − 5)/21 ≈ +1 on every transition into "keys"
    ids = torch.tensor([[[2, 3, 4], [0, 1, 5], [6, 7, 8], [9, 10, 11]]])  # slot 2: key=0, keys=1, locks=5
    ell = torch.tensor([[[4.2, 3.6, 2.8], [2.7, 2.5, 1.1], [3.1, 2.9, 0.8], [2.8, 1.6, 0.5]]])
    s = model(torch.zeros(1, 4, D), ids, ell).detach()
    idx, _ = _propose(model, torch.zeros(1, 4, D), ids, ell)
    assert float(s[0, 0, 0, 1] - s[0, 0, 0, 0]) > 0  # These→keys beats These→key
    assert idx[0].tolist()[:2] == [0, 1]


# ---- loss ------------------------------------------------------------------------------------------------


def test_loss_masks_labels_outside_topk_and_matches_hand_computation():
    g = torch.Generator().manual_seed(0)
    ids = torch.tensor([[[10, 11], [20, 21], [30, 31]]])  # [1, n=3, K=2]
    scores = torch.randn(1, 2, 2, 2, generator=g, requires_grad=True)  # [1, n−1, K, K]
    ce = lambda p, a, b: torch.logsumexp(scores[0, p].flatten(), 0) - scores[0, p, a, b]  # noqa: E731
    w2 = math.exp(-1 / 4)
    # all labels inside the top-K: both transitions supervised
    out = corrector_loss(scores, ids, torch.tensor([[11, 20, 31]]))
    hand = (ce(0, 1, 0) + w2 * ce(1, 0, 1)) / (1 + w2)
    torch.testing.assert_close(out.loss, hand)
    torch.testing.assert_close(out.num / out.den, out.loss)
    torch.testing.assert_close(out.den, torch.tensor(1 + w2))
    # slot 3's label is outside its top-K: transition 2 dropped (not pushed down)
    out = corrector_loss(scores, ids, torch.tensor([[11, 20, 99]]))
    assert out.mask.tolist() == [[True, False]] and out.label_idx.tolist() == [[1, 0, -1]]
    torch.testing.assert_close(out.loss, ce(0, 1, 0))
    out.loss.backward()
    assert scores.grad[0, 1].abs().sum() == 0 and scores.grad[0, 0].abs().sum() > 0
    # slot 1 outside: only transition 2; cumulative variant drops it too
    out = corrector_loss(scores, ids, torch.tensor([[99, 20, 30]]))
    torch.testing.assert_close(out.loss, ce(1, 0, 0))  # normalised by its own weight w_2
    cum = corrector_loss(scores, ids, torch.tensor([[99, 20, 30]]), cumulative=True)
    assert cum.mask.tolist() == [[False, False]]
    assert float(cum.loss.detach()) == 0.0 and float(cum.den) == 0.0  # nothing supervised: 0, not NaN
    # invalid slots (past the sequence end) count as outside
    out = corrector_loss(scores, ids, torch.tensor([[11, 20, 31]]), valid=torch.tensor([[True, True, False]]))
    assert out.mask.tolist() == [[True, False]]


def test_loss_normalises_over_the_batch():
    g = torch.Generator().manual_seed(1)
    scores = torch.randn(3, 4, 3, 3, generator=g)
    ids = torch.arange(3 * 5 * 3).view(3, 5, 3)
    labels = ids[..., 0].clone()
    labels[1, 2] = -7  # outside: drops transitions 2 and 3 of stream 1
    out = corrector_loss(scores, ids, labels, rho=4.0)
    w = transition_weights(4, 4.0)
    assert out.mask.sum() == 10
    torch.testing.assert_close(out.den, (w[None] * out.mask.float()).sum())
    torch.testing.assert_close(out.loss, (w * out.ce).sum() / out.den)


def test_conditional_loss_is_the_within_row_ce_given_the_teachers_row():
    g = torch.Generator().manual_seed(2)
    ids = torch.tensor([[[10, 11], [20, 21], [30, 31]]])  # [1, n=3, K=2]
    scores = torch.randn(1, 2, 2, 2, generator=g)  # [1, n−1, K, K]
    row = lambda p, a, b: torch.logsumexp(scores[0, p, a], 0) - scores[0, p, a, b]  # noqa: E731
    w2 = math.exp(-1 / 4)
    out = corrector_loss(scores, ids, torch.tensor([[11, 20, 31]]), kind="cond")
    torch.testing.assert_close(out.loss, (row(0, 1, 0) + w2 * row(1, 0, 1)) / (1 + w2))
    joint = corrector_loss(scores, ids, torch.tensor([[11, 20, 31]]))
    assert torch.equal(out.mask, joint.mask) and not torch.allclose(out.loss, joint.loss)
    # the joint CE = the row term (which a is right) + the within-row term (b given a*)
    p0 = torch.logsumexp(scores[0, 0].flatten(), 0) - torch.logsumexp(scores[0, 0, 1], 0)
    torch.testing.assert_close(joint.ce[0, 0], p0 + row(0, 1, 0))
    with pytest.raises(ValueError, match="joint, cond, reach"):
        corrector_loss(scores, ids, torch.tensor([[11, 20, 31]]), kind="rows")


@pytest.mark.parametrize("seed", range(4))
def test_reach_loss_supervises_the_rows_the_greedy_walk_reaches(seed):
    """r_p = the prefix-first greedy walk (`greedy_path`) chose the verifier's tokens at slots 1..p."""
    g = torch.Generator().manual_seed(seed)
    N, n, K = 64, 5, 3
    ids = torch.arange(N * n * K).view(N, n, K)
    cand_logits = torch.randn(N, n, K, generator=g).sort(-1, descending=True).values  # best first
    scores = torch.randn(N, n - 1, K, K, generator=g)
    lab_idx = torch.randint(0, K, (N, n), generator=g)
    lab_idx[:, 0] = torch.where(torch.rand(N, generator=g) < 0.6, 0, lab_idx[:, 0])  # often slot 1 = top-1
    labels = ids.gather(-1, lab_idx[..., None]).squeeze(-1)
    outside = torch.rand(N, n, generator=g) < 0.1
    labels = torch.where(outside, torch.full_like(labels, -5), labels)  # some labels outside the top-K
    walk = greedy_path(scores, cand_logits[:, 0])  # [N, n] the walk's candidate indices
    on_path = (walk == lab_idx) & ~outside  # [N, n]
    want = on_path[:, :-1].long().cumprod(-1).bool() & ~outside[:, 1:]  # reached row p with a*_p, b*_p in the top-K
    got = corrector_loss(scores, ids, labels, kind="reach").mask
    assert torch.equal(got, want)
    assert got.sum() < corrector_loss(scores, ids, labels, kind="cond").mask.sum()  # fewer rows than cond


@pytest.mark.parametrize("n,K", [(2, 2), (3, 3), (4, 2), (5, 3)])
def test_oracles_equal_brute_force(n, K):
    """The top-K oracle = the longest accepted prefix over every path of the grid; the reachable oracle =
    the same over the paths that keep the drafter's top-1 at slot 1 (what prefix-first greedy can propose)."""
    from draftlab.corrector.paths import oracle_path
    from draftlab.decoding.verify import greedy_accept_length

    g = torch.Generator().manual_seed(n * 7 + K)
    N = 40
    ids = torch.stack([torch.randperm(12, generator=g)[:K] for _ in range(N * n)]).view(N, n, K)
    hit = torch.rand(N, n, generator=g) < 0.7
    targets = torch.where(hit, ids.gather(-1, torch.randint(0, K, (N, n, 1), generator=g)).squeeze(-1),
                          torch.full((N, n), 50))
    paths = torch.tensor(list(itertools.product(range(K), repeat=n)))  # [K^n, n]
    for reachable in (False, True):
        got = greedy_accept_length(oracle_path(ids, targets, reachable), targets)
        allowed = paths[paths[:, 0] == 0] if reachable else paths
        for i in range(N):
            toks = ids[i][torch.arange(n), allowed]  # [paths, n]
            assert int(got[i]) == int(greedy_accept_length(toks, targets[i].expand_as(toks)).max()), (i, reachable)
    full = greedy_accept_length(oracle_path(ids, targets), targets)
    reach = greedy_accept_length(oracle_path(ids, targets, True), targets)
    assert (reach <= full).all() and (reach < full).any()


# ---- gradient routing --------------------------------------------------------------------------------------


@pytest.mark.parametrize("frozen", [False, True])
def test_gradients_reach_drafter_only_in_cotraining(frozen):
    logits, hidden, vocab = _draft(2, 6, 30, seed=4)
    logits.requires_grad_(True)
    hidden.requires_grad_(True)
    model = _corrector(out_std=0.3)  # a trained-looking Δθ (at init w_out = 0 blocks the path to h)
    h, ids, lg = corrector_inputs(hidden, logits, 4, vocab, detach=frozen)
    labels = ids[..., 0].clone()  # drafter's own top candidates: all transitions supervised
    corrector_loss(model(h, ids, lg), ids, labels).loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    if frozen:
        assert hidden.grad is None and logits.grad is None
    else:
        assert hidden.grad[:, 1:].abs().sum() > 0 and logits.grad[:, 1:].abs().sum() > 0
        assert hidden.grad[:, 0].abs().sum() == 0  # slot 0 is not on the grid


def test_zero_output_layer_still_learns():
    logits, hidden, vocab = _draft(2, 5, 30, seed=5)
    model = _corrector()
    h, ids, lg = corrector_inputs(hidden, logits, 4, vocab)
    corrector_loss(model(h, ids, lg), ids, ids[..., 1]).loss.backward()
    assert model.mlp_out.weight.grad.abs().sum() > 0


# ---- factorised scorer == the literal formula ----------------------------------------------------------------


@pytest.mark.parametrize("pair,cand", [(True, True), (False, True), (True, False), (False, False)])
def test_factorised_equals_materialised_mlp(pair, cand):
    E = _embed(dtype=torch.float64)
    model = _corrector(E, out_std=0.5, use_pair_state=pair, use_candidate_state=cand)
    logits, hidden, vocab = _draft(3, 6, 30, seed=6, dtype=torch.float64)
    h, ids, lg = corrector_inputs(hidden, logits, 4, vocab)
    fact = model(h, ids, lg, backend="torch")
    naive = model.naive_scores(h, ids, lg)
    torch.testing.assert_close(fact, naive, rtol=1e-12, atol=1e-12)
    assert count_parameters(model.arch)["total"] == model.num_parameters()
    assert (model.pair is not None) == pair and (model.slot_proj is not None) == cand


def test_ablations_change_what_delta_sees():
    logits, hidden, vocab = _draft(2, 5, 30, seed=7)
    h, ids, lg = corrector_inputs(hidden, logits, 4, vocab)
    nocand = _corrector(out_std=0.5, use_candidate_state=False)
    h2 = h + torch.randn_like(h) * 10
    # without the pair state and the candidate state, Δθ ignores the slot hidden states entirely
    both_off = _corrector(out_std=0.5, use_candidate_state=False, use_pair_state=False)
    torch.testing.assert_close(both_off(h, ids, lg), both_off(h2, ids, lg))
    assert not torch.allclose(nocand(h, ids, lg), nocand(h2, ids, lg))  # the pair state still reads h


# ---- size, config, checkpoints -----------------------------------------------------------------------------


def test_parameter_count_at_paper_scale():
    """d = 4096 with the default widths (dim 128, MLP hidden 256) lands at the paper's ~2.23M."""
    cfg = DCOCOConfig()
    E = nn.Embedding(8, 4096).requires_grad_(False)
    spec = arch_from_config(cfg, 4096, E, k=16)
    counts = count_parameters(spec)
    assert counts["total"] == DCOCOCorrector(spec, E).num_parameters() == 2_228_865
    assert abs(counts["total"] - 2.23e6) / 2.23e6 < 0.005
    assert count_parameters(arch_from_config(cfg, 4096, E, "nopair", 16))["total"] < counts["total"]
    assert arch_from_config(cfg, 4096, E, "nocand", 16).use_candidate_state is False


def test_config_validation():
    CorrectorConfig().check("corrector")
    from draftlab.pipeline.names import method_names  # the names are the corrector package's, handed in

    with pytest.raises(DraftlabError, match=r"corrector\.families\.dcoco\.path_rule='beam' is not valid"):
        CorrectorConfig(families={"dcoco": {"path_rule": "beam"}}).check_names("corrector", method_names())
    with pytest.raises(DraftlabError, match="variants"):
        CorrectorConfig(variants=["dcoco", "bogus"]).check_names("corrector", method_names())
    with pytest.raises(DraftlabError, match=r"corrector\.families\.dcoco\.lam=0\.0 must lie in"):
        CorrectorConfig(families={"dcoco": {"lam": 0.0}}).check_names("corrector", method_names())
    with pytest.raises(DraftlabError, match=r"unknown key 'corrector\.families\.dspark\.dim'; valid keys in "
                                            r"corrector\.families\.dspark: rank, gate"):
        CorrectorConfig(families={"dspark": {"dim": 8}}).check_names("corrector", method_names())
    with pytest.raises(DraftlabError, match=r"corrector\.families\.dscoco: no corrector family of that name"):
        CorrectorConfig(families={"dscoco": {}}).check_names("corrector", method_names())
    with pytest.raises(DraftlabError, match=r"corrector\.families\.dcoco\.dim='8' must be a int"):
        CorrectorConfig(families={"dcoco": {"dim": "8"}}).check_names("corrector", method_names())


def test_checkpoint_roundtrip(tmp_path):
    E = _embed()
    model = _corrector(E, out_std=0.5, use_pair_state=False)
    logits, hidden, vocab = _draft(2, 5, 30, seed=8)
    h, ids, lg = corrector_inputs(hidden, logits, 4, vocab)
    model.save(tmp_path / "c", info={"steps": 3})
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == ["config.json", "model.safetensors"]
    back = load_corrector(tmp_path / "c", _Host(E))
    assert back.arch == model.arch and not back.training
    torch.testing.assert_close(back(h, ids, lg), model(h, ids, lg))
    assert not any("embed" in k for k in back.state_dict())  # the frozen table is not inside
    with pytest.raises(DraftlabError, match="embedding"):
        load_corrector(tmp_path / "c", _Host(nn.Embedding(V + 1, DE)))
    with pytest.raises(DraftlabError, match="config.json"):
        load_corrector(tmp_path / "missing", _Host(E))


# ---- the proposal step inside the engine -----------------------------------------------------------------------


def test_proposal_step_and_lossless_engine(llama_target):
    from draftlab.corrector.proposal import CorrectorProposal
    from draftlab.decoding import SamplingParams, SpeculativeEngine, generate_ar
    from stubs import FixedDrafter, StubDraftOutput

    t = llama_target
    Vt, H = t.vocab_size, 8
    spec = DCOCOArch(hidden_size=H, embed_dim=t.hidden_size, vocab_size=Vt, k=4, dim=8, mlp_hidden=12)
    torch.manual_seed(0)
    model = DCOCOCorrector(spec, t.embed_tokens)
    # at init: the drafter's argmax block, deterministic (q = None → point-mass rule at T>0)
    g = torch.Generator().manual_seed(9)
    d = StubDraftOutput(torch.randn(2, 5, Vt, generator=g), torch.randn(2, 5, H, generator=g),
                        block_ids=torch.zeros(2, 5, dtype=torch.long))
    prop = CorrectorProposal(model)(d, SamplingParams(temperature=1.0))
    assert prop.q is None and torch.equal(prop.tokens, d.logits[:, 1:].argmax(-1))
    # a random Δθ re-selects tokens; greedy decoding must still equal AR exactly
    nn.init.normal_(model.mlp_out.weight, std=2.0)
    prompts = [[5, 9, 17, 3], [44, 2, 8]]
    drafter = FixedDrafter(torch.randn(4, Vt, generator=g) * 0.5, hidden_size=H)
    proposer = CorrectorProposal(model, rule="greedy")
    res = SpeculativeEngine(t, drafter, proposer).generate(prompts, 12, eos_ids=[])
    assert res.tokens == generate_ar(t, prompts, 12, eos_ids=[]).tokens
    assert bool((proposer.last_extras["path_greedy"] != 0).any())
