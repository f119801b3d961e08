"""Drafter pretraining: a tiny drafter overfits a tiny reference set, an interrupted run resumes its
step count, cached features equal on-the-fly ones, metrics and the schedule are right, and the
stage-level driver writes a loadable drafter and a report."""
from __future__ import annotations

import math

import lightning as L
import pandas as pd
import pytest
import torch

from draftlab.config import DrafterConfig, PretrainConfig
from draftlab.drafter import DFlashDrafter, load_drafter, save_drafter, DrafterDesign, arch_from_target
from draftlab.training.features import FeatureStore, SequenceSet, target_features
from draftlab.training.metrics import BlockStats
from draftlab.recipes.pretrain.recipe import pretrain_from_references
from draftlab.training.objective import lr_factor
from draftlab.training.pretrain import train_drafter

S = 4
TAPS = [0, 2, 3]


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py (which also gives the tiny llama `target`)


def random_refs(n=6, prompt=5, resp=30, seed=0, splits=None):
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(3, 97, (prompt,), generator=g).tolist() for _ in range(n)]
    resps = [torch.randint(3, 97, (resp,), generator=g).tolist() for _ in range(n)]
    return prompts, resps, splits or ["train"] * n


def cfg(**kw) -> PretrainConfig:
    base = dict(max_steps=20, max_minutes=0, lr=3e-3, warmup=0.05, val_every=0, batch_size=3, anchors_per_seq=16,
                val_anchor_stride=1, checkpoint_every=0, topk=4)
    base.update(kw)
    return PretrainConfig(**base)


def drafter_for(target, layers=1, seed=0):
    torch.manual_seed(seed)
    return DFlashDrafter.from_target(arch_from_target(target, DrafterDesign(S, layers, TAPS, 1)), target)


def test_tiny_drafter_overfits_tiny_reference_set(target, tmp_path):
    prompts, resps, split = random_refs()
    seqs = SequenceSet.from_lists(prompts, resps, split)
    store, _ = FeatureStore.open_or_build(tmp_path / "f", target, seqs, TAPS, log=lambda m: None)
    d = drafter_for(target)
    r = train_drafter(d, seqs, cfg(max_steps=250, batch_size=6, anchors_per_seq=32, val_every=125), tmp_path / "run",
                      store=store, val_labels="reference", log=lambda m: None)
    m = r.best_metrics["train_sample"]
    assert min(m["slot_acc"]) >= 0.9, m["slot_acc"]
    assert m["sim_tau"] >= 1 + 0.9 * (S - 1)
    assert r.steps == 250 and r.slot_predictions > 0


def test_resume_continues_the_step_count(target, tmp_path):
    prompts, resps, split = random_refs(n=4, resp=20, seed=1)
    seqs = SequenceSet.from_lists(prompts, resps, split)
    store, _ = FeatureStore.open_or_build(tmp_path / "f", target, seqs, TAPS, log=lambda m: None)

    class StopAt(L.Callback):
        def on_train_batch_end(self, trainer, *args):
            if trainer.global_step >= 6:
                trainer.should_stop = True

    class Count(L.Callback):
        n = 0

        def on_train_batch_end(self, trainer, *args):
            Count.n += 1

    c = cfg(max_steps=10, checkpoint_every=3)
    r1 = train_drafter(drafter_for(target), seqs, c, tmp_path / "run", store=store, callbacks=[StopAt()], log=lambda m: None)
    assert r1.steps == 6 and (tmp_path / "run" / "last.ckpt").exists()
    r2 = train_drafter(drafter_for(target, seed=5), seqs, c, tmp_path / "run", store=store, callbacks=[Count()],
                       log=lambda m: None)
    assert r2.resumed_from_step == 6
    assert Count.n == 4 and r2.steps == 10
    assert r2.slot_predictions > r1.slot_predictions  # the counters continued too
    assert [h["step"] for h in r2.history] == [6, 10]  # history survived the interruption


def test_cached_features_equal_on_the_fly(target, tmp_path):
    prompts, resps, split = random_refs(n=3, resp=12, seed=2)
    resps[1] = resps[1][:5]  # ragged lengths
    seqs = SequenceSet.from_lists(prompts, resps, split)
    store, st = FeatureStore.open_or_build(tmp_path / "f", target, seqs, TAPS, batch_tokens=20, log=lambda m: None)
    assert not st["feature_cache_reused"] and st["feature_cache_bytes"] > 0
    for i in range(len(seqs)):
        ids = torch.from_numpy(seqs.seq(i).astype("int64"))[None]
        f, g = target_features(target, ids, torch.ones_like(ids, dtype=torch.bool), TAPS)
        assert (torch.from_numpy(store.features(i).astype("float32")) - f[0]).abs().max() < 2e-2  # fp16 storage
        assert g[0, 0] == -1 and torch.equal(torch.from_numpy(store.greedy(i).astype("int64"))[1:], g[0, 1:])
        assert torch.equal(g[0, 1:], target(ids).logits[0, :-1].argmax(-1))  # greedy[t] = argmax after t-1
    _, st2 = FeatureStore.open_or_build(tmp_path / "f", target, seqs, TAPS, log=lambda m: None)
    assert st2["feature_cache_reused"]


def test_training_on_the_fly_without_cache(target, tmp_path):
    prompts, resps, split = random_refs(n=4, resp=16, seed=3, splits=["train"] * 3 + ["heldout"])
    seqs = SequenceSet.from_lists(prompts, resps, split)
    r = train_drafter(drafter_for(target), seqs, cfg(max_steps=0, epochs=2), tmp_path / "run", target=target,
                      log=lambda m: None)
    assert r.steps == 2 and "heldout" in r.best_metrics and r.best_metrics["heldout"]["blocks"] > 0


def test_block_stats_simulated_tau():
    st = BlockStats(n_slots=3, k=2)
    tgt = torch.tensor([[1, 2, 3], [1, 2, 3], [1, 2, 3]])
    top = torch.tensor([[[1, 9], [2, 9], [3, 9]],  # all accepted -> 1 + 3
                        [[1, 9], [7, 2], [3, 9]],  # slot 2 wrong at top-1 (right at top-2) -> 1 + 1
                        [[5, 1], [2, 9], [3, 9]]])  # slot 1 wrong -> 1 + 0
    st.update(top, tgt)
    s = st.summary()
    assert s["blocks"] == 3 and s["sim_tau"] == pytest.approx((4 + 2 + 1) / 3)
    assert s["sim_tau"] == pytest.approx(1 + sum(s["sim_tau_per_slot"]))
    assert s["sim_tau_per_slot"] == pytest.approx([2 / 3, 1 / 3, 1 / 3])
    assert s["slot_acc"] == pytest.approx([2 / 3, 2 / 3, 1.0]) and s["top2_cov"] == pytest.approx([1.0, 1.0, 1.0])


def test_lr_schedule_warmup_then_cosine():
    assert lr_factor(0.0, 0.1, "cosine", 0.0) < 0.01
    assert lr_factor(0.05, 0.1, "cosine", 0.0) == pytest.approx(0.5)
    assert lr_factor(0.1, 0.1, "cosine", 0.0) == pytest.approx(1.0)
    assert lr_factor(0.55, 0.1, "cosine", 0.0) == pytest.approx(0.5)
    assert lr_factor(1.0, 0.1, "cosine", 0.1) == pytest.approx(0.1)
    assert lr_factor(0.7, 0.1, "constant", 0.0) == 1.0
    assert math.isclose(lr_factor(2.0, 0.0, "cosine", 0.0), 0.0, abs_tol=1e-12)


def test_driver_writes_a_loadable_drafter_and_report(target, tmp_path):
    prompts, resps, split = random_refs(n=7, resp=20, seed=4, splits=["train"] * 5 + ["heldout", "eval"])
    df = pd.DataFrame({"prompt_id": [str(i) for i in range(7)], "suite": ["sharegpt"] * 6 + ["humaneval"],
                       "split": split, "prompt_ids": prompts, "response_ids": resps})
    dcfg = DrafterConfig(block_size=S, num_layers=1, target_layer_ids=TAPS, mask_token_id=1, draft_vocab_size=40)
    out = pretrain_from_references(target, df, dcfg, cfg(max_steps=6, val_every=3), tmp_path / "work", log=lambda m: None)
    rep = out.report
    for k in ("sim_tau", "sim_tau_per_slot", "train_tokens_per_s", "wall_s", "params_trained", "params_frozen",
              "draft_vocab_coverage_heldout", "slot_acc", "top4_cov", "ref_greedy_agreement", "feature_cache_bytes"):
        assert k in rep, k
    assert rep["sim_tau_split"] == "heldout" and set(rep["per_set"]) == {"heldout", "humaneval", "train_sample"}
    assert len(rep["sim_tau_per_slot"]) == S - 1 and rep["draft_vocab_size"] == 40
    assert [r["step"] for r in out.curve] == [3, 6] and "heldout" in out.curve[0]
    path = save_drafter(out.drafter, tmp_path / "pretrained")
    d2 = load_drafter(path, target)
    assert d2.arch.draft_vocab_size == 40 and torch.equal(d2.draft_vocab, out.drafter.draft_vocab)
    df.loc[0, "response_ids"] = [1, 2, 3, 4, 5, 6]  # the MASK id must never occur in the references
    with pytest.raises(Exception, match="MASK token id 1 occurs"):
        pretrain_from_references(target, df, dcfg, cfg(max_steps=2), tmp_path / "work", log=lambda m: None)


def test_trained_drafter_drives_the_engine_losslessly(target, tmp_path):
    """End to end with the engine's plumbing: a drafter trained on the target's own greedy text is
    accepted by the real speculative engine (τ > 1), decoding stays identical to AR, and simulated τ
    is the same through the training forward and through the inference API."""
    from draftlab.bench.simulate import simulated_tau
    from draftlab.decoding import SpeculativeEngine, generate_ar

    g = torch.Generator().manual_seed(7)
    prompts = [torch.randint(3, 97, (6,), generator=g).tolist() for _ in range(8)]
    refs = generate_ar(target, prompts, 24, eos_ids=[]).tokens
    seqs = SequenceSet.from_lists(prompts, refs)
    store, _ = FeatureStore.open_or_build(tmp_path / "f", target, seqs, TAPS, log=lambda m: None)
    d = drafter_for(target)
    train_drafter(d, seqs, cfg(max_steps=60, batch_size=4), tmp_path / "run", store=store, log=lambda m: None)
    d.eval()
    res = SpeculativeEngine(target, d).generate(prompts[:3], 16, eos_ids=[])
    assert res.tokens == generate_ar(target, prompts[:3], 16, eos_ids=[]).tokens
    rounds = [a for acc in res.accepted for a in acc]
    assert sum(a + 1 for a in rounds) / len(rounds) > 1.5
    sim = simulated_tau(target, d, list(zip(prompts, refs)), stride=2)
    assert sim["train"] > 1.5 and abs(sim["train"] - sim["infer"]) < 1e-6


def test_tap_teacher_reproduces_the_target_distribution(target):
    """The teacher's p (final norm + head over the cached last-layer tap) equals the target's own
    next-token distribution at the block's positions; KL(p||p) = 0; a tap list without the last
    layer is refused with one line."""
    from draftlab.errors import DraftlabError
    from draftlab.training.distill import make_teacher

    S4 = 4
    taps = [0, 2, target.num_layers - 1]
    d = DFlashDrafter.from_target(arch_from_target(target, DrafterDesign(S4, 1, taps, 1)), target)
    ids = torch.randint(3, target.vocab_size, (2, 20), generator=torch.Generator().manual_seed(1))
    out = target(ids, taps=taps)
    teacher = make_teacher(target, taps)
    anchors = torch.tensor([[4, 9], [2, 13]])
    lp = teacher.log_probs(d, out.taps.float(), anchors)  # [B, A, n, V]
    ref = out.logits.log_softmax(-1)
    for b in range(2):
        for i, a in enumerate(anchors[b].tolist()):
            for k in range(1, S4):
                assert (lp[b, i, k - 1] - ref[b, a + k - 1]).abs().max() < 1e-4
    assert teacher.kl(d, out.taps.float(), anchors, lp).abs().max() < 1e-5
    with pytest.raises(DraftlabError, match="last layer"):
        make_teacher(target, [0, 1])


@pytest.mark.parametrize("recipe", [
    {"kd_weight": 1.0},
    {"labels": "greedy", "anchor_region": "all", "max_slot": 2},
])
def test_recipe_options_train_end_to_end(target, tmp_path, recipe):
    """Distillation, greedy-prefix labels, prompt anchors and a slot cut-off all run through the
    driver on cached features and still produce a validated drafter."""
    from draftlab.training.distill import make_teacher

    assert TAPS[-1] == target.num_layers - 1
    prompts, resps, split = random_refs()
    seqs = SequenceSet.from_lists(prompts, resps, split)
    store, _ = FeatureStore.open_or_build(tmp_path / "f", target, seqs, TAPS, log=lambda m: None)
    c = cfg(max_steps=3, **recipe)
    teacher = make_teacher(target, TAPS) if c.kd_weight else None
    res = train_drafter(drafter_for(target), seqs, c, tmp_path / "run", store=store, log=lambda m: None, teacher=teacher)
    assert res.steps == 3 and res.best_sim_tau >= 1.0 and res.slot_predictions > 0
