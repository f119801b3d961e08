"""SpecOPD: packed tree scoring is exact and leak-free, the E2E-TV loss matches its formula, gradients
stay out of the target, branches are fresh and keyed per branch, the sequential loop's recomputed q is
the q it drafted with, the training module runs and resumes, and 2-process DDP equals one process."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import ROOT, assert_reordered_close
from stubs import sharp_drafter
from draftlab.specopd.draft_opd import draft_opd_rollout
from draftlab.specopd.loss import e2e_tv_loss, e2e_tv_terms, first_rejection_mask, overlap
from draftlab.specopd.tree import (
    branch_lengths, branch_target_logits, branch_uniforms, sample_branch_anchors, sample_branches, trunk_pass,
)
from draftlab.specopd.terms import block_q_logits, offpolicy_tv_terms, specopd_terms

S, W, MASK = 5, 4, 1
TAPS = [0, 2, 3]
TOL = 1e-4


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py (which also gives the tiny llama `target`)


def make_drafter(target, vocab=None, seed=0, std=0.2):
    return sharp_drafter(target, S, TAPS, MASK, vocab, seed, std)


def full_logits(target, ids: list[int]) -> torch.Tensor:
    return target(torch.tensor([ids])).logits[0]


def refs(target, lens=(19, 13), seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, target.vocab_size, (n,), generator=g).tolist() for n in lens]


def padded(seqs):
    L = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), L, dtype=torch.long)
    for b, s in enumerate(seqs):
        ids[b, :len(s)] = torch.tensor(s)
    return ids, torch.tensor([len(s) for s in seqs])


# ---- packed tree scoring ----------------------------------------------------------------------------------


def test_packed_scoring_equals_per_branch_recompute(target):
    seqs = refs(target)
    P = [5, 3]  # prompt lengths: anchors lie in [P, L-2]
    ids, seq_len = padded(seqs)
    # first response position, middle, and the last (W_b = 1); the second sequence is shorter (padding)
    anchors = torch.tensor([[5, 9, 16, 17], [3, 6, 10, 11]])
    assert int(anchors[0, 0]) == P[0] and int(anchors[0, -1]) == len(seqs[0]) - 2
    valid_a = torch.ones_like(anchors, dtype=torch.bool)
    lengths = branch_lengths(anchors, valid_a, seq_len, W)
    assert lengths.tolist() == [[4, 4, 2, 1], [4, 4, 2, 1]]  # branches of different lengths
    branch = torch.randint(3, target.vocab_size, (2, 4, W), generator=torch.Generator().manual_seed(1))
    trunk = trunk_pass(target, ids, seq_len)
    L0 = trunk.cache.get_seq_length()
    p = branch_target_logits(target, trunk, anchors, branch, lengths)  # [B, A, W, V]
    assert trunk.cache.get_seq_length() == L0  # trunk K/V restored for the next scoring
    worst = 0.0
    for b in range(2):
        for j in range(4):
            a = int(anchors[b, j])
            for i in range(int(lengths[b, j])):  # p[:, :, i] scores y_{i+1} given x_{≤a}, y_{≤i}
                ref = full_logits(target, seqs[b][: a + 1] + branch[b, j, :i].tolist())[-1]
                worst = max(worst, float((p[b, j, i] - ref).abs().max()))
    assert worst <= TOL, worst


def test_no_leak_from_siblings_or_later_reference_tokens(target):
    seqs = refs(target, (16,), seed=2)
    ids, seq_len = padded(seqs)
    anchors = torch.tensor([[5, 9]])
    lengths = torch.tensor([[W, W]])
    branch = torch.randint(3, target.vocab_size, (1, 2, W), generator=torch.Generator().manual_seed(3))

    def run(x, br):
        return branch_target_logits(target, trunk_pass(target, x, seq_len), anchors, br, lengths)

    base = run(ids, branch)
    sib = branch.clone()
    sib[0, 1] = (sib[0, 1] + 1) % target.vocab_size
    assert torch.equal(run(ids, sib)[0, 0], base[0, 0])  # a sibling branch changed: rows unchanged
    later = ids.clone()
    later[0, 7] = (later[0, 7] + 1) % target.vocab_size  # a reference token after anchor 5
    out = run(later, branch)
    assert (out[0, 0] - base[0, 0]).abs().max() < 1e-6  # unseen by the branch at 5...
    assert (out[0, 1] - base[0, 1]).abs().max() > 1e-4  # ...but seen by the branch at 9
    own = branch.clone()
    own[0, 0, 2] = (own[0, 0, 2] + 1) % target.vocab_size  # its own token y_3
    out = run(ids, own)
    assert (out[0, 0, :3] - base[0, 0, :3]).abs().max() < 1e-6  # rows before y_3 never see it
    assert (out[0, 0, 3] - base[0, 0, 3]).abs().max() > 1e-4


# ---- the loss -------------------------------------------------------------------------------------------------


def test_overlap_hand_case_keeps_target_mass_outside_the_draft_vocabulary():
    p = torch.tensor([[0.4, 0.4, 0.2]]).log()
    q = torch.tensor([[0.5, 0.5]]).log()  # the draft vocabulary covers target ids 0, 1
    assert float(overlap(q, p, torch.tensor([0, 1]), backend="torch")) == pytest.approx(0.8)
    assert float(overlap(torch.tensor([[0.5, 0.5, 0.0]]).log(), p, backend="torch")) == pytest.approx(0.8)


def test_e2e_tv_formula_and_early_mismatch_costs_more():
    alpha = torch.tensor([[0.5, 0.8, 0.9], [0.7, 0.6, 0.2]])
    valid = torch.tensor([[True, True, True], [True, True, False]])  # second branch cut short: W_b = 2
    num, cnt = e2e_tv_terms(alpha, valid)
    b1 = (0.5 + 0.5 * 0.8 + 0.5 * 0.8 * 0.9) / 3
    b2 = (0.7 + 0.7 * 0.6) / 2
    assert int(cnt) == 2 and float(num) == pytest.approx((1 - b1) + (1 - b2))
    assert float(e2e_tv_loss(alpha, valid)) == pytest.approx(1 - (b1 + b2) / 2)
    none = torch.zeros(1, 3, dtype=torch.bool)  # a branch with no valid position is not counted
    assert int(e2e_tv_terms(torch.rand(1, 3), none)[1]) == 0
    ones = torch.ones(1, 3, dtype=torch.bool)
    early = e2e_tv_loss(torch.tensor([[0.5, 1.0, 1.0]]), ones)
    late = e2e_tv_loss(torch.tensor([[1.0, 1.0, 0.5]]), ones)
    assert float(early) == pytest.approx(0.5) and float(late) == pytest.approx(1 / 6) and early > late


def test_first_rejection_mask_keeps_the_first_rejected_position():
    p = torch.full((1, 4, 6), -5.0)
    for i, tok in enumerate([1, 2, 3, 4]):
        p[0, i, tok] = 5.0  # target argmax per position
    branch = torch.tensor([[1, 2, 0, 4]])  # rejected at position 3
    valid = torch.ones(1, 4, dtype=torch.bool)
    assert first_rejection_mask(branch, p, valid).tolist() == [[True, True, True, False]]
    assert first_rejection_mask(torch.tensor([[1, 2, 3, 4]]), p, valid).all()


def _softmax_full(logits: torch.Tensor, T: float, vocab: torch.Tensor | None, V: int) -> torch.Tensor:
    """softmax(logits / T) placed on the full vocabulary (the reference of the overlap)."""
    pr = (logits.double() / T).softmax(-1)
    if vocab is None:
        return pr
    return torch.zeros(*pr.shape[:-1], V, dtype=pr.dtype).index_copy_(-1, vocab, pr)


@pytest.mark.parametrize("T", [1.0, 0.5, 1.7])
def test_overlap_at_the_sampling_temperature_equals_a_reference(T):
    g = torch.Generator().manual_seed(3)
    V, vocab = 12, torch.tensor([0, 2, 3, 5, 7, 11])
    q, p = torch.randn(4, 6, generator=g) * 2, torch.randn(4, V, generator=g) * 2
    ref = torch.minimum(_softmax_full(q, T, vocab, V), _softmax_full(p, T, None, V)).sum(-1)  # Σ_v min(q^T, p^T)
    got = overlap(q, p, vocab, backend="torch", temperature=T)
    assert torch.allclose(got.double(), ref, atol=1e-6)
    if T != 1.0:  # the temperature matters: the T=1 overlap is a different number
        assert (overlap(q, p, vocab, backend="torch") - got).abs().max() > 1e-3
    with pytest.raises(ValueError, match="temperature > 0"):
        overlap(q, p, vocab, backend="torch", temperature=0.0)


def test_first_rejection_keeps_each_branch_full_length_in_the_weighting():
    alpha = torch.tensor([[0.5, 0.8, 0.9, 0.7]])
    sup = torch.tensor([[True, True, False, False]])  # rejected at position 2
    num, cnt = e2e_tv_terms(alpha, sup, torch.tensor([4]))
    assert int(cnt) == 1 and float(num) == pytest.approx(1 - (0.5 + 0.5 * 0.8) / 4)  # 1/W_b with W_b = 4, not 2
    assert float(e2e_tv_terms(alpha, sup)[0]) == pytest.approx(1 - (0.5 + 0.5 * 0.8) / 2)  # the cut length


def test_t1_surrogate_sums_each_branch_over_its_own_length():
    from draftlab.specopd.loss import expected_accept

    alpha = torch.tensor([[0.5, 0.5, 0.9, 0.9], [0.5, 0.5, 0.5, 0.5]])
    valid = torch.tensor([[True, True, False, False], [True] * 4])  # the first branch is cut short: W_b = 2
    got = expected_accept(alpha, valid)
    assert got.tolist() == pytest.approx([0.75, 0.5 + 0.25 + 0.125 + 0.0625])  # not W · (1/W_b) Σ = 1.5


@pytest.mark.parametrize("T", [1.0, 0.6])
def test_first_rejection_at_t1_matches_a_direct_simulation(T):
    """The sampling rule on the branch's own draws, position by position with the same uniforms, and
    statistically: slot 1 is accepted with probability α (the overlap at T), what E2E-TV optimises."""
    from draftlab.decoding.verify import SamplingParams, process_logits

    g = torch.Generator().manual_seed(11)
    N, Wn, V = 3000, 4, 6
    vocab = torch.tensor([0, 1, 2, 4])  # q's vocabulary: target ids 3 and 5 have no draft mass
    q_logits, p_logits = torch.randn(N, Wn, 4, generator=g) * 1.5, torch.randn(N, Wn, V, generator=g) * 1.5
    q = (q_logits / T).softmax(-1)
    branch = vocab[torch.multinomial(q.view(-1, 4), 1, generator=g).view(N, Wn)]  # the branch's own draws
    u = torch.rand(N, Wn, generator=g, dtype=torch.float64)
    valid = torch.ones(N, Wn, dtype=torch.bool)
    valid[0, 2:] = False  # a branch cut short by the sequence end
    got = first_rejection_mask(branch, p_logits, valid, T, q_logits, vocab, u)
    p = process_logits(p_logits, SamplingParams(T))
    for b in range(40):  # direct simulation, one branch at a time
        want = []
        for i in range(Wn):
            if not valid[b, i]:
                want.append(False)
                continue
            y = int(branch[b, i])
            qi = float(q[b, i, (vocab == y).nonzero()[0, 0]])
            accepted = float(u[b, i]) < float(p[b, i, y]) / qi
            want.append(True)
            if not accepted:  # the first rejected position is supervised, nothing after it
                want += [False] * (Wn - i - 1)
                break
        assert got[b].tolist() == want, b
    slot1 = got[:, 1].double().mean()  # position 2 supervised <=> position 1 accepted
    alpha1 = overlap(q_logits[:, 0], p_logits[:, 0], vocab, backend="torch", temperature=T).double().mean()
    assert abs(float(slot1 - alpha1)) < 4 * (0.25 / N) ** 0.5
    greedy = first_rejection_mask(branch, p_logits, valid)  # the greedy rule would be another mask
    assert not torch.equal(greedy, got)


# ---- sampling, gradients -----------------------------------------------------------------------------------------


def test_branch_streams_are_keyed_per_branch_and_fresh_per_step():
    seq, anc = torch.tensor([3, 8]), torch.tensor([[4, 7], [5, 6]])
    u = branch_uniforms(0, 1, seq, anc, W)
    assert torch.equal(branch_uniforms(0, 1, seq[1:], anc[1:], W)[0], u[1])  # independent of batch composition
    assert not torch.equal(branch_uniforms(0, 2, seq, anc, W), u)  # a new update draws new samples
    probs = torch.tensor([0.1, 0.0, 0.6, 0.3])
    draws = torch.rand(20000, generator=torch.Generator().manual_seed(0))
    from draftlab.specopd.tree import sample_from

    idx = sample_from(probs.expand(20000, 4), draws)
    freq = torch.bincount(idx, minlength=4).float() / 20000
    assert (freq - probs).abs().max() < 0.02 and freq[1] == 0
    assert sample_branches(torch.tensor([[[[0.0, 3.0, 1.0]]]]), torch.zeros(1, 1, 1), 0.0).item() == 1


def test_specopd_step_trains_the_drafter_not_the_target(target):
    seqs = refs(target, (20, 15), seed=4)
    ids, seq_len = padded(seqs)
    vocab = torch.arange(3, 60)  # a draft vocabulary: target mass outside it is lost overlap
    d = make_drafter(target, vocab)
    anchors = torch.stack([sample_branch_anchors(int(n), 4, 6, torch.Generator().manual_seed(5)) for n in seq_len])
    batch = {"ids": ids, "seq_len": seq_len, "anchors": anchors, "anchor_valid": torch.ones_like(anchors, dtype=torch.bool),
             "seq": torch.tensor([0, 1])}
    for first in (False, True):
        d.zero_grad()
        t = specopd_terms(target, d, batch, W, seed=0, step=0, first_rejection=first)
        loss = t.numerator / t.count
        assert 0 < float(loss.detach()) < 1 and t.positions > 0
        loss.backward()
        assert all(p.grad is None for p in target.parameters())
        assert not any(p.requires_grad for p in target.parameters())
        assert d.fc.weight.grad is not None and d.fc.weight.grad.abs().sum() > 0
    t2 = offpolicy_tv_terms(target, d, batch, W)
    assert 0 < float(t2.numerator / t2.count) < 1


def test_sampled_branches_follow_the_drafter(target):
    """The branch tokens are samples of the block's own q: at T→0 they are its argmax."""
    seqs = refs(target, (18,), seed=6)
    ids, seq_len = padded(seqs)
    d = make_drafter(target)
    trunk = trunk_pass(target, ids, seq_len, TAPS)
    anchors = torch.tensor([[4, 8, 12]])
    q = block_q_logits(d, trunk.taps, trunk.valid, ids, anchors, W)
    assert q.shape == (1, 3, W, target.vocab_size)
    y = sample_branches(q, torch.rand(1, 3, W), 0.0)
    assert torch.equal(y, q.argmax(-1))


# ---- the sequential loop ---------------------------------------------------------------------------------------


def test_draft_opd_rollout_recomputes_the_q_it_drafted_with(target):
    seqs = refs(target, (12, 9), seed=7)
    d = make_drafter(target).eval()
    ro = draft_opd_rollout(target, d, [s[:8] for s in seqs], rounds=4, W=W, seed=1)
    assert ro.anchors.shape == (2, 4) and ro.p_logits.shape == (2, 4, W, target.vocab_size)
    # the accepted prefix decides where the next round starts
    assert torch.equal(ro.anchors[:, 1:] - ro.anchors[:, :-1], ro.accepted[:, :-1] + 1)
    # the verify pass's p equals a full recompute of each round's context + branch
    for b in range(2):
        for r in range(4):
            a = int(ro.anchors[b, r])
            ctx = ro.ids[b, : a + 1].tolist()
            ref = full_logits(target, ctx + ro.branch[b, r, : W - 1].tolist())[a:]
            assert (ro.p_logits[b, r] - ref).abs().max() < TOL
    # q recomputed by one forward_train equals what drafting sampled from (argmax at T=0)
    ro0 = draft_opd_rollout(target, d, [s[:8] for s in seqs], rounds=3, W=W, temperature=0.0)
    ctx_valid = torch.arange(ro0.ids.shape[1])[None, :] < ro0.seq_len[:, None]
    q = block_q_logits(d, ro0.feats, ctx_valid, ro0.ids, ro0.anchors, W)
    assert torch.equal(q.argmax(-1), ro0.branch)


# ---- distributed normalisation ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_two_process_ddp_equals_one_process(tmp_path):
    script = Path(__file__).resolve().parents[1] / "ddp_specopd_script.py"
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT / 'tests'}", "OMP_NUM_THREADS": "1"}
    for n in (1, 2):
        out = tmp_path / f"ddp{n}"
        r = subprocess.run([sys.executable, str(script), str(n), str(out)], env=env, capture_output=True, text=True,
                           timeout=300, cwd=tmp_path)
        assert r.returncode == 0, r.stderr[-3000:]
    one = torch.load(tmp_path / "ddp1" / "rank0.pt")
    two = [torch.load(tmp_path / "ddp2" / f"rank{r}.pt") for r in (0, 1)]
    assert one["counts"] == [6]  # both sequences' branches in one process
    assert sum(t["counts"][0] for t in two) == 6 and two[0]["counts"][0] != two[1]["counts"][0]  # unequal split
    for t in two:
        assert abs(t["loss"] - one["loss"]) < 1e-5, (t["loss"], one["loss"])
        for k, g in one["grads"].items():  # two ranks' all-reduce adds the sequences' sums in another order
            assert_reordered_close(t["grads"][k], g, 6 * 8 * 5, k)  # <= 6 branches x <= 8 anchors x S = 5 rows


# ---- the training driver, resume, the benchmark arm ---------------------------------------------------------------


def test_comparison_driver_reports_every_arm_and_resumes(target, tmp_path):
    import pandas as pd

    from draftlab.config import SpecOPDConfig
    from draftlab.drafter import load_drafter, save_drafter
    from draftlab.recipes.specopd.recipe import specopd_from_references

    g = torch.Generator().manual_seed(9)
    n = 6
    prompts = [torch.randint(3, 97, (5,), generator=g).tolist() for _ in range(n)]
    resps = [torch.randint(3, 97, (16,), generator=g).tolist() for _ in range(n)]
    df = pd.DataFrame({"prompt_id": [str(i) for i in range(n)], "suite": ["sharegpt"] * 5 + ["humaneval"],
                       "split": ["train"] * 4 + ["heldout", "eval"], "prompt_ids": prompts, "response_ids": resps})
    save_drafter(make_drafter(target, torch.arange(3, 60)), tmp_path / "pretrained")
    cfg = SpecOPDConfig(anchors_per_seq=4, seq_rounds=2, batch_size=2, max_steps=3, val_anchor_stride=2, topk=4,
                        cost_anchors=3, checkpoint_every=1, lr=1e-3)
    out = specopd_from_references(target, df, cfg, tmp_path / "pretrained", tmp_path / "work", log=lambda m: None)
    rep = out.report
    assert set(rep["baselines"]) == {"offpolicy_ce", "offpolicy_tv", "sequential", "first_rejection"}
    assert all(r["steps"] == 3 for r in rep["baselines"].values()) and rep["steps"] == 3  # equal steps
    for k in ("sim_tau_before", "sim_tau_after", "supervised_per_s_ratio_vs_sequential"):
        assert rep[k] is not None and rep[k] > 0, k
    assert set(rep["per_set_after"]) == {"heldout", "humaneval"}
    c = rep["scoring_cost"]
    assert c["rows_independent"] > c["rows_packed"] and c["max_abs_logit_diff"] <= TOL
    assert rep["scoring_cost_paper_example"]["rows_packed"] == 2048 + 512 * 6
    assert out.curve[0]["step"] == 0 and out.curve[-1]["step"] == 3
    d = load_drafter(tmp_path / "pretrained", target)  # the saved best state is a loadable drafter state
    d.load_state_dict(out.drafter.state_dict())
    cfg.baselines = []
    again = specopd_from_references(target, df, cfg, tmp_path / "pretrained", tmp_path / "work", log=lambda m: None)
    assert again.objectives["specopd"].resumed_from_step == 3 and again.report["sim_tau_before"] == rep["sim_tau_before"]
    # the held-out T=1 evaluation: seeded (same drafter -> same figures), bounded, and of the final state
    W = rep["branch_width"]
    for tv in (rep["tv_before"], *(r["tv_final"] for r in rep["baselines"].values()), rep["specopd"]["tv_final"]):
        assert 0.0 <= tv["mean_alpha"] <= 1.0 and 1.0 <= tv["tau_t1_surrogate"] <= 1.0 + W and tv["branches"] > 0
    assert again.report["tv_before"] == rep["tv_before"]
    assert again.report["tau_t1_surrogate_final"] == pytest.approx(rep["tau_t1_surrogate_final"])
    # both kept states: t0 by greedy τ, t1 by the T=1 surrogate, among the validated steps (0 and 3)
    sel = rep["selected"]
    assert set(sel) == {"t0", "t1"} and sel["t0"]["best_step"] == rep["best_step"]
    steps_tv = {0: rep["tau_t1_surrogate_before"], 3: rep["tau_t1_surrogate_final"]}
    assert sel["t1"]["best_step"] in steps_tv and sel["t1"]["tau_t1_surrogate"] == pytest.approx(max(steps_tv.values()))
    assert sel["t0"]["tau_t1_surrogate"] == pytest.approx(steps_tv[sel["t0"]["best_step"]])
    for st in sel.values():
        assert st["is_initialisation"] == (st["best_step"] == 0)
    assert out.drafter_t1 is not None and set(out.states()) == {"t0", "t1"}
    assert again.report["selected"] == sel  # kept through a resume
    # supervised positions per branch: every branch position for SpecOPD, up to the first rejection for the ablation
    per = {a: r["supervised_per_branch"] for a, r in {**rep["baselines"], "specopd": rep["specopd"]}.items()}
    assert per["offpolicy_ce"] is None and 1.0 <= per["first_rejection"] <= per["specopd"] <= W


def test_benchmark_arm_decodes_each_temperature_with_its_state(target, tmp_path):
    from draftlab.arms.grammar import ArmContext, Checkpoints, build_arm
    from draftlab.config import BenchmarkConfig
    from draftlab.decoding import SamplingParams

    d0, d1 = make_drafter(target, seed=0), make_drafter(target, seed=1)
    spec = tmp_path / "specopd"  # no folder on disk: the arm reads the stub drafters (not a pipeline run's outputs)
    by = {f"{spec}/t0": d0, f"{spec}/t1": d1}
    ctx = ArmContext(target, BenchmarkConfig(), Checkpoints("pre", str(spec), "long", "corr"),
                     load_drafter=by.__getitem__)
    arm = build_arm("dflash-specopd", ctx)
    assert arm.name == "dflash-specopd" and arm.drafter is d0  # simulated τ (T=0) reads the greedy state
    used = []
    for sub in (arm.greedy, arm.sampled):
        sub.generate = lambda *a, _s=sub, **kw: used.append(_s.drafter)
    prompt = refs(target, (6,))[0]
    arm.generate([prompt], 3, SamplingParams(), [], None)
    arm.generate([prompt], 3, SamplingParams(1.0), [], torch.Generator())
    assert used == [d0, d1]


def test_draft_opd_verifies_with_the_rule_of_its_drafting_temperature(target, monkeypatch):
    import draftlab.decoding.round as round_mod

    seen = []
    real = round_mod.verify_block

    def spy(logits, proposals, sp, q=None, q_vocab=None, generator=None):
        seen.append((sp.temperature, None if q is None else q.sum(-1)))
        return real(logits, proposals, sp, q, q_vocab, generator)

    monkeypatch.setattr(round_mod, "verify_block", spy)
    d = make_drafter(target, torch.arange(3, 60))
    pre = refs(target, (9, 7))
    for T in (1.0, 0.7):
        seen.clear()
        ro = draft_opd_rollout(target, d, pre, 2, W, T, seed=1)
        assert len(seen) == 2 and all(t == T and q is not None and torch.allclose(q, torch.ones_like(q)) for t, q in seen)
        assert (ro.accepted <= W).all()
        again = draft_opd_rollout(target, d, pre, 2, W, T, seed=1)  # seeded: the same accept tests
        assert torch.equal(again.accepted, ro.accepted) and torch.equal(again.branch, ro.branch)
    seen.clear()
    draft_opd_rollout(target, d, pre, 1, W, 0.0)
    assert seen[0] == (0.0, None)  # greedy drafting: the greedy rule
