"""Memory at scale (issue 21 item 2): SpecOPD without a forced feature cache (online taps give the cached
loss), chunked branch sampling draws the very tokens of the unchunked sampler from the same uniforms,
row-chunked losses and gradients equal the unchunked ones, and measured peak memory stays bounded as
rows grow at a fixed chunk (torch's CPU profiler with memory profiling)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from conftest import assert_reordered_close
from stubs import objective_terms, sharp_drafter
from draftlab.kernels.chunked import map_rows
from draftlab.specopd.sampling import grid_bits, sample_rows_chunked
from draftlab.specopd.terms import (
    chunked_branches, chunked_overlap, specopd_terms,
)
from draftlab.specopd.tree import sample_branch_anchors, sample_from
from draftlab.specopd.loss import overlap

S, W, MASK = 5, 4, 1
TAPS = [0, 2, 3]

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py (which also gives the tiny llama `target`)


def make_drafter(target, vocab=None, seed=0, std=0.2):
    return sharp_drafter(target, S, TAPS, MASK, vocab, seed, std)


def peak_bytes(fn) -> int:
    """Peak CPU bytes allocated while fn() runs, measured by the torch profiler (memory profiling on):
    the running sum of its allocation / free records in time order."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    recs = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
                  key=lambda e: e.start_ns())
    cur = best = 0
    for e in recs:
        cur += e.nbytes()
        best = max(best, cur)
    return best


# ---- 1. no forced feature cache ------------------------------------------------------------------------------


def _refs(n=6, prompt=4, resp=14, seed=3):
    from draftlab.training.features import SequenceSet

    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(3, 97, (prompt,), generator=g).tolist() for _ in range(n)]
    resps = [torch.randint(3, 97, (resp + i,), generator=g).tolist() for i in range(n)]
    return SequenceSet.from_lists(prompts, resps, ["train"] * (n - 2) + ["heldout"] * 2)


def test_online_features_give_the_cached_loss_and_validation(target, tmp_path):
    """SpecOPD's CE arm and its validation read the taps from a cache or compute them in the step: with an
    fp32 cache both give the same loss and the same validation counts."""
    from draftlab.config import SpecOPDConfig
    from draftlab.training.features import FeatureStore
    from draftlab.recipes.specopd.module import SpecOPDObjective, branch_data

    seqs = _refs()
    view = SpecOPDConfig(anchors_per_seq=5, batch_size=3, cache_features=False).run_settings(1, 0.0)
    assert view.cache_features is False  # no longer forced to True
    store, _ = FeatureStore.open_or_build(tmp_path, target, seqs, TAPS, dtype="float32", log=lambda m: None)
    d = make_drafter(target, torch.arange(3, 60))
    m = SpecOPDObjective(d, view, target, objective="offpolicy_ce")
    g = torch.Generator().manual_seed(1)
    items = [(i, sample_branch_anchors(int(seqs.lengths[i]), int(seqs.prompt_len[i]), 5, g)) for i in range(3)]
    out = {}
    for name, st in (("online", None), ("cached", store)):
        dm = branch_data(seqs, view, S, st, train_feats=True)
        batch = dm.train_collate(items)
        assert ("feats" in batch) == (st is not None)
        loss = m.ce.loss_parts(batch)["loss"]
        stats = m.new_val_stats()
        m.validate_batch(dm.collate(items), stats)
        out[name] = (float(loss), stats.summary())
    assert out["online"][0] == pytest.approx(out["cached"][0], rel=1e-5, abs=1e-6)
    assert out["online"][1]["sim_tau"] == pytest.approx(out["cached"][1]["sim_tau"])
    assert out["online"][1]["slot_acc"] == pytest.approx(out["cached"][1]["slot_acc"])


def test_specopd_stage_builds_no_cache_unless_asked(target, tmp_path, monkeypatch):
    import pandas as pd

    from draftlab.config import SpecOPDConfig
    from draftlab.drafter import save_drafter
    from draftlab.recipes.specopd.recipe import specopd_from_references
    from draftlab.training.features import FeatureStore

    seqs = _refs()
    df = pd.DataFrame({"prompt_id": [str(i) for i in range(len(seqs))], "suite": ["sharegpt"] * len(seqs),
                       "split": list(seqs.split), "prompt_ids": [seqs.seq(i)[:4].tolist() for i in range(len(seqs))],
                       "response_ids": [seqs.seq(i)[4:].tolist() for i in range(len(seqs))]})
    save_drafter(make_drafter(target, torch.arange(3, 60)), tmp_path / "pretrained")

    def refuse(*a, **k):
        raise AssertionError("specopd.cache_features=false must not build a feature cache")

    monkeypatch.setattr(FeatureStore, "open_or_build", refuse)
    cfg = SpecOPDConfig(anchors_per_seq=3, batch_size=2, max_steps=1, baselines=["offpolicy_ce"], topk=4,
                        cost_anchors=0, tv_eval_seqs=1, checkpoint_every=0, cache_features=False, chunk_rows=5,
                        vocab_chunk=16)
    out = specopd_from_references(target, df, cfg, tmp_path / "pretrained", tmp_path / "work", log=lambda m: None)
    assert out.report["steps"] == 1 and out.report["baselines"]["offpolicy_ce"]["steps"] == 1
    assert out.report["sim_tau_before"] >= 1.0 and not (tmp_path / "work" / "features").exists()


# ---- 2. chunked sampling: the same tokens from the same uniforms ---------------------------------------------------


def _hard_logits(N: int, V: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    lg = torch.randn(N, V, generator=g) * 4
    lg[: N // 4, : V // 2] = lg[: N // 4, V // 2: 2 * (V // 2)]  # exact ties (equal mass in both halves)
    lg[N // 4: N // 2] = lg[N // 4: N // 2, :1] + torch.randn(N // 2 - N // 4, V, generator=g) * 1e-6  # near-ties
    lg[N // 2: N // 2 + 8] = torch.where(torch.arange(V) == 3, 30.0, -30.0)  # (almost) one-hot rows
    return lg


@pytest.mark.parametrize("T", [1.0, 0.6])
def test_chunked_sampling_draws_the_unchunked_tokens(T):
    N, V = 2400, 517  # V prime: chunks never divide it
    lg = _hard_logits(N, V)
    u = torch.rand(N, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    today = sample_from((lg.float() / T).softmax(-1), u)  # the unchunked float path (vocab_chunk = 0)
    one = sample_rows_chunked(lg, u, T, V)  # the fixed-point path in one chunk
    assert torch.equal(one, today)
    for C in (1, 7, 64, 200, 516, 10_000):
        assert torch.equal(sample_rows_chunked(lg, u, T, C), one), C


def test_chunked_sampling_agrees_at_the_cdf_boundaries():
    """Uniforms placed exactly on (and one unit beside) the fixed-point cdf boundaries: every chunk size
    still picks the same token, since every sum is an integer sum."""
    N, V = 300, 131
    lg = _hard_logits(N, V, seed=2)
    k = grid_bits(V)
    z = lg.float()
    w = torch.round(torch.exp(z.double() - z.max(-1).values.double()[:, None]) * 2.0 ** k).long()  # [N, V]
    cdf = w.cumsum(-1)
    j = torch.randint(0, V - 1, (N,), generator=torch.Generator().manual_seed(3))
    b = cdf.gather(1, j[:, None]).squeeze(-1)  # a boundary per row
    total = cdf[:, -1].double()
    for shift in (-1, 0, 1):
        u = ((b + shift).double() / total).clamp(0, 1 - 2 ** -53)
        one = sample_rows_chunked(lg, u, 1.0, V)
        for C in (1, 10, 64):
            assert torch.equal(sample_rows_chunked(lg, u, 1.0, C), one), (shift, C)
    assert (w.sum(-1) < 2 ** 62).all()


# ---- 3. chunked losses and gradients ----------------------------------------------------------------------------


def _batch(target):
    g = torch.Generator().manual_seed(4)
    seqs = [torch.randint(3, target.vocab_size, (n,), generator=g).tolist() for n in (20, 15)]
    L = max(map(len, seqs))
    ids = torch.zeros(2, L, dtype=torch.long)
    for b, s in enumerate(seqs):
        ids[b, :len(s)] = torch.tensor(s)
    seq_len = torch.tensor([len(s) for s in seqs])
    anchors = torch.stack([sample_branch_anchors(int(n), 4, 6, torch.Generator().manual_seed(5)) for n in seq_len])
    return {"ids": ids, "seq_len": seq_len, "anchors": anchors, "seq": torch.tensor([0, 1]),
            "anchor_valid": torch.ones_like(anchors, dtype=torch.bool)}


def _grads(d, terms):
    d.zero_grad()
    (terms.numerator / terms.count).backward()
    return {n: p.grad.clone() for n, p in d.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("arm,T", [("specopd", 1.0), ("first_rejection", 0.8), ("offpolicy_tv", 1.0),
                                   ("sequential", 1.0)])
def test_chunked_terms_equal_unchunked(target, arm, T):
    batch = _batch(target)
    d = make_drafter(target, torch.arange(3, 60))

    def run(chunk, vchunk):
        return objective_terms(arm, target, d, batch, W, T, chunk, vchunk)
        return specopd_terms(target, d, batch, W, T, seed=3, step=1, first_rejection=arm == "first_rejection",
                             chunk_rows=chunk, vocab_chunk=vchunk)

    ref = run(0, 0)
    g_ref = _grads(d, ref)
    for chunk, vchunk in ((5, 0), (7, 13), (1000, 8)):
        t = run(chunk, vchunk)
        assert t.positions == ref.positions and int(t.count) == int(ref.count)
        assert float(t.numerator) == pytest.approx(float(ref.numerator), rel=1e-5, abs=1e-6)
        assert t.mean_alpha == pytest.approx(ref.mean_alpha, rel=1e-5)
        assert t.accept_prefix == ref.accept_prefix
        g = _grads(d, t)
        assert set(g) == set(g_ref)
        rows = batch["anchors"].numel() * S  # the block rows every weight's gradient sums over
        for n in g:
            assert_reordered_close(g[n], g_ref[n], rows, (arm, chunk, n))


def test_chunked_terms_refuse_a_zero_temperature_like_the_unchunked_ones(target):
    batch = _batch(target)
    d = make_drafter(target)
    for chunk in (0, 4):
        with pytest.raises(ValueError, match="temperature > 0"):
            specopd_terms(target, d, batch, W, 0.0, first_rejection=True, chunk_rows=chunk)


def test_chunked_branches_equal_sampling_the_whole_logits(target):
    """Row chunks (and vocabulary chunks) of the drafter's q draw the tokens of one call on all rows."""
    from draftlab.specopd.tree import sample_branches, trunk_pass

    batch = _batch(target)
    d = make_drafter(target, torch.arange(3, 60))
    trunk = trunk_pass(target, batch["ids"], batch["seq_len"], TAPS)
    hidden = d.forward_train(trunk.taps, trunk.valid, batch["ids"], batch["anchors"])[:, :, 1:W + 1]  # [B, A, W, H]
    u = torch.rand(*batch["anchors"].shape, W, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    whole = sample_branches(d.logits(hidden), u, 1.0, d.draft_vocab)
    for chunk, vchunk in ((3, 0), (3, 11), (0, 5)):
        assert torch.equal(chunked_branches(d, hidden, u, 1.0, chunk, vchunk), whole), (chunk, vchunk)
    assert bool(((whole >= 3) & (whole < 60)).all())  # target ids of the draft vocabulary


@pytest.mark.parametrize("kd", [0.0, 0.5])
def test_chunked_pretraining_ce_and_distillation_equal_unchunked(target, kd):
    from draftlab.config import PretrainConfig
    from draftlab.training.data import Collate
    from draftlab.training.distill import make_teacher
    from draftlab.training.ce import DrafterCE

    seqs = _refs(resp=18)
    d = make_drafter(target)
    items = [(i, torch.arange(int(seqs.prompt_len[i]), int(seqs.lengths[i]) - 2, 2)) for i in range(4)]
    batch = Collate(seqs, None, extra=S - 1)(items)
    out = {}
    for chunk in (0, 4, 9):
        m = DrafterCE(d, PretrainConfig(kd_weight=kd, chunk_rows=chunk), target,
                      teacher=make_teacher(target, TAPS) if kd else None)
        d.zero_grad()
        loss = m.loss_parts(batch, dense=False)["loss"]
        loss.backward()
        out[chunk] = (float(loss), {n: p.grad.clone() for n, p in d.named_parameters() if p.grad is not None})
    for chunk in (4, 9):
        assert out[chunk][0] == pytest.approx(out[0][0], rel=1e-5)
        for n, g in out[0][1].items():
            assert_reordered_close(out[chunk][1][n], g, batch["anchors"].numel() * S, (kd, chunk, n))


# ---- 3. measured peak memory stays bounded as rows grow -----------------------------------------------------------


class _Head:
    """A drafter stand-in: logits = hidden @ w (what the chunked terms call)."""

    def __init__(self, H: int, V: int):
        self.w = torch.randn(H, V, generator=torch.Generator().manual_seed(0), requires_grad=True)
        self.draft_vocab = None

    def logits(self, h):
        return (h @ self.w).float()


def _overlap_step(head, N, V, chunk):
    g = torch.Generator().manual_seed(N)
    h = torch.randn(N, 16, generator=g, requires_grad=True)
    p = torch.randn(N, V, generator=g)

    def step():
        chunked_overlap(head, h, p, None, "torch", 1.0, chunk).sum().backward()
    return step


def _ce_step(head, N, V, chunk):
    g = torch.Generator().manual_seed(N)
    h = torch.randn(N, 16, generator=g, requires_grad=True)
    y = torch.randint(0, V, (N,), generator=g)

    def step():
        map_rows(lambda hc, yc: F.cross_entropy(head.logits(hc), yc, reduction="none"), chunk, h, y).sum().backward()
    return step


def _sample_step(head, N, V, chunk):
    h = torch.randn(N, 16, generator=torch.Generator().manual_seed(N))
    u = torch.rand(N, dtype=torch.float64, generator=torch.Generator().manual_seed(N + 1))

    def step():
        chunked_branches(head, h, u, 1.0, chunk, 256 if chunk else 0)
    return step


@pytest.mark.parametrize("make", [_overlap_step, _ce_step, _sample_step])
def test_peak_memory_is_bounded_by_the_chunk(make):
    V, chunk, N = 4096, 64, 256
    head = _Head(16, V)
    rows_bytes = N * V * 4  # one [N, V] fp32 tensor at the smaller size
    chunked = [peak_bytes(make(head, n, V, chunk)) for n in (N, 4 * N)]
    whole = [peak_bytes(make(head, n, V, 0)) for n in (N, 4 * N)]
    assert whole[1] > 3.0 * whole[0] and whole[0] > rows_bytes  # the measurement sees the [N, V] tensors
    assert chunked[1] < 1.3 * chunked[0], chunked  # rows ×4 -> peak barely moves
    assert chunked[1] < 0.25 * whole[1], (chunked, whole)


def test_overlap_values_match_the_reference_formula():
    """chunked_overlap is the overlap of softmax(h @ w) and softmax(p), chunk or not."""
    head = _Head(8, 50)
    h, p = torch.randn(37, 8), torch.randn(37, 50)
    ref = overlap(head.logits(h), p, None, "torch")
    for c in (0, 5, 100):
        assert_reordered_close(chunked_overlap(head, h, p, None, "torch", 1.0, c), ref, 50, c)  # sums over V = 50


# ---- 5. the target's pass stops at the deepest tap when no label reads its logits --------------------------------


def test_truncated_target_pass_gives_the_full_pass_taps(target):
    from draftlab.training.features import target_features

    ids = torch.randint(3, target.vocab_size, (2, 11), generator=torch.Generator().manual_seed(0))
    valid = torch.arange(11)[None, :] < torch.tensor([[11], [7]])
    ran = []
    hooks = [target.layers[i].input_layernorm.register_forward_pre_hook(lambda *a, i=i: ran.append(i))
             for i in range(target.num_layers)]  # [i]: layer i started (its first module ran)
    hooks.append(target.lm_head.register_forward_pre_hook(lambda *a: ran.append("head")))
    try:
        for taps in ([0, 2], [1], [0, 2, 3]):
            full, g = target_features(target, ids, valid, taps, greedy=True)
            ran.clear()
            cut, none = target_features(target, ids, valid, taps, greedy=False)
            assert none is None and torch.equal(cut, full), taps  # the same taps, bit for bit
            assert ran == list(range(max(taps) + 1)), (taps, ran)  # nothing above the deepest tap, no head
            out = target(ids, taps=taps, need_logits=False)
            assert out.logits is None and torch.equal(out.taps, target(ids, taps=taps).taps)
    finally:
        for h in hooks:
            h.remove()
    with pytest.raises(ValueError, match="need_logits=False"):
        target(ids, cache=target.new_cache(), taps=[1], need_logits=False)
    assert target(ids, taps=[1]).logits.shape == (2, 11, target.vocab_size)  # a later full pass is unaffected


def test_specopd_update_peak_memory_is_bounded_by_the_chunk():
    """The whole SpecOPD update (trunk pass, drafter blocks, sampling, packed tree scoring, overlaps,
    backward) on a target with a 4096-token vocabulary: branches ×4 at a fixed chunk -> the measured
    peak grows far less than ×4 (the target's p rows stay hidden states; q and p logits live per chunk)."""
    from conftest import tiny_target

    target = tiny_target("llama", vocab=4096)
    d = make_drafter(target)
    L = 40
    ids = torch.randint(3, 4096, (2, L), generator=torch.Generator().manual_seed(0))

    def peak(A, chunk):
        anc = torch.stack([sample_branch_anchors(L, 4, A, torch.Generator().manual_seed(b)) for b in range(2)])
        b = {"ids": ids, "seq_len": torch.tensor([L, L]), "anchors": anc, "seq": torch.tensor([0, 1]),
             "anchor_valid": torch.ones_like(anc, dtype=torch.bool)}

        def step():
            t = specopd_terms(target, d, b, W, 1.0, chunk_rows=chunk, vocab_chunk=512 if chunk else 0)
            (t.numerator / t.count).backward()
        return peak_bytes(step)

    small, large = peak(6, 12), peak(24, 12)  # rows ×4: 48 -> 192 draft positions
    whole_small, whole_large = peak(6, 0), peak(24, 0)
    assert large < 0.25 * whole_large, (large, whole_large)
    # what still grows with the rows is [rows, H]-sized (drafter activations, the target's hidden rows, masks):
    # a small fraction of the unchunked growth, which is [rows, V]-sized
    assert large - small < 0.2 * (whole_large - whole_small), (small, large, whole_small, whole_large)
