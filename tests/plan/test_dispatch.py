"""The plan's host-dispatch term (issue 49 item 6, draftlab.plan.dispatch): the one time model of `draftlab plan` is
FLOPs + bytes + ops x per-op cost; the dispatch term is the counted ops of each step times the device's cost per op
(15 µs on the accelerator, none yet on CPU), it grows with the layers, the counts in dispatch_counts.json are those
of the code (recounted here), and gpu-small's eager prediction fits its call (≤ 330 s)."""
from __future__ import annotations

import json
import math

import pytest

from draftlab.cli import main
from draftlab.measure import dispatch_count as C
from draftlab.plan import dispatch as D
from draftlab.plan.arch import TargetShape, target_shape
from draftlab.plan.stages import BUDGET_TERM, Device, plan

SMALL = ["-S", "profile=gpu-small", "--gpus", "1", "--gpu-mem", "140", "--disk", "1000"]


def _params(*overrides):
    from draftlab.cli import validate

    return validate("params.yaml", [], ["profile=gpu-small", *overrides])


def test_the_dispatch_term_is_the_counted_ops_times_the_per_op_cost():
    p = _params()
    t = target_shape(p.target)
    ref = {s.name: s for s in plan(p, t, Device())}["reference"]
    r = p.reference
    batches = math.ceil((r.num_train_prompts + r.num_heldout_prompts + r.num_eval_per_suite * len(p.data.eval_suites))
                        / r.batch_size)
    ops = batches * (D.ops("prefill", 30) + r.max_new_tokens * D.ops("ar_step", 30))
    assert D.PER_OP_US["cuda"] == 15.0 and Device().op_us == 15.0
    assert ref.times["dispatch"] == pytest.approx(ops * 15e-6)
    assert ref.hours * 3600 == pytest.approx(sum(ref.times.values()))  # the terms add up to the stage's time
    double = {s.name: s for s in plan(p, t, Device(per_op_us=30.0))}["reference"]
    assert double.times["dispatch"] == pytest.approx(2 * ref.times["dispatch"])
    # one eager SmolLM2 decode step: ~2,400 ops (the issue counted ~2,390 at f05f329), ~36 ms on the accelerator
    assert 2000 < D.ops("ar_step", 30) < 3000
    # the cpu preset has its fitted per-op cost (tests/plan/test_calibrate.py); a bare cpu Device has none
    cpu = {s.name: s for s in plan(p, t, Device.of("cpu"))}["reference"]
    assert cpu.times["dispatch"] == pytest.approx(ops * Device.of("cpu").op_us * 1e-6) and cpu.times["dispatch"] > 0
    assert all(s.times.get("dispatch", 0.0) == 0.0 for s in plan(p, t, Device(kind="cpu")))
    assert "host dispatch NOT counted (no per-op cost for cpu yet)" in Device(kind="cpu").assumptions()


def test_the_dispatch_term_grows_with_the_layers():
    for step in D.STEPS:
        assert D.ops(step, 60, 2) > D.ops(step, 30, 2) > D.ops(step, 2, 2) > 0, step
    for step in ("dflash_round", D.CORRECTOR_ROUND, "pretrain_step", "specopd_step", "val_batch"):
        assert D.ops(step, 30, 4) > D.ops(step, 30, 2), step  # and with the drafter's
    assert D.ops("ar_step", 30, 2) == D.ops("ar_step", 30, 5)  # AR runs no drafter
    p = _params()
    t = target_shape(p.target)
    deep = TargetShape(**{**{f: getattr(t, f) for f in t.__dataclass_fields__}, "num_layers": 60})
    a = {s.name: s for s in plan(p, t, Device())}
    b = {s.name: s for s in plan(p, deep, Device())}
    for name in ("reference", "benchmark"):
        assert b[name].times["dispatch"] > 1.5 * a[name].times["dispatch"], name  # twice the layers


def test_gpu_small_eager_fits_its_call(capsys):
    """The whole regime run (prepare_target to benchmark) in <= 330 s by the plan, eager on the accelerator (the
    device call runs 420 s); the training stages at their minute budgets."""
    assert main(["plan", *SMALL, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    stages = {s["stage"]: s for s in doc["stages"]}
    assert list(stages) == ["prepare_target", "reference", "pretrain_drafter", "pretrain_seeded", "specopd", "corrector",
                            "benchmark"]
    total = sum(s["seconds"] for s in stages.values())
    assert total <= 330, {k: round(s["seconds"]) for k, s in stages.items()}
    assert doc["total_hours"] * 3600 == pytest.approx(total)
    for name in ("pretrain_drafter", "pretrain_seeded", "corrector"):
        assert stages[name]["times_s"][BUDGET_TERM] > 0, name  # the minute budget binds: the runner can scale it
    assert stages["benchmark"]["times_s"]["dispatch"] > 10 * stages["benchmark"]["times_s"]["bytes"]  # host-bound
    assert main(["plan", *SMALL]) == 0
    text = capsys.readouterr().out
    assert "\n  time: FLOPs" in text and "15 us per dispatched aten op" in text


def test_the_counts_are_those_of_the_code():
    """Recount the steps at the smallest layer counts and compare with dispatch_counts.json (±10%: small edits of the
    engine move a few ops; past that, recount: `python -m draftlab.measure.dispatch_count --write`)."""
    import torch

    from draftlab.corrector.families import records

    doc = D.load()
    assert doc["schema"] == "draftlab-dispatch-counts-v1" and set(doc["steps"]) == set(D.STEPS)
    family = doc["steps"][D.CORRECTOR_ROUND]["family"]  # the family whose round was counted, named beside it
    assert family in records()
    Lt, Ld = D.LAYERS[0]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        got = {**C._inference(Lt, Ld, family), **C._training(Lt, Ld, 1)}
    finally:
        torch.set_num_threads(threads)
    off = {k: (v, doc["steps"][k]["counted"][f"{Lt},{Ld},1"]) for k, v in got.items()
           if abs(v / doc["steps"][k]["counted"][f"{Lt},{Ld},1"] - 1) > 0.10}
    assert not off, f"the dispatch counts moved (now, stored): {off}; run python -m draftlab.measure.dispatch_count --write"
    for k, s in doc["steps"].items():  # the fit reproduces what was counted
        for where, n in s["counted"].items():
            lt, ld, ch = map(int, where.split(","))
            assert D.ops(k, lt, ld, ch, counts=doc) == pytest.approx(n, abs=1.0), (k, where)


def test_every_corrector_family_arm_counts_a_corrector_round():
    """The round an arm costs is read from the corrector families' records (`corrector_arms`), not from their names
    written here: every family's arms (its options, its trees, its sampled walk, `-t1`) count the corrector round;
    the peers and the plain drafter keep theirs; params loaded without the records count any drafter arm as DFlash's."""
    from draftlab.corrector.families import records

    p = _params()
    fams = D.corrector_arms(p)
    assert set(fams) == {m for f in records().values() for m in f.arms} and "lilicorr" in fams
    for arm in ("dcoco", "dcoco-seeded", "specopd-dcoco-t1", "dspark-seeded", "domino", "dflash2",
                "lilicorr-tree8", "lilicorr-sampled", "lilicorr-nopair"):
        assert D.round_step(arm, fams) == D.CORRECTOR_ROUND, arm
    for arm, step in (("dflash", "dflash_round"), ("dflash-seeded", "dflash_round"), ("dflash-pld", "hybrid_round"),
                      ("pld", "pld_round"), ("ar", "ar_step"), ("dflash-specopd-t1", "dflash_round")):
        assert D.round_step(arm, fams) == step, arm
    assert D.round_step("lilicorr", ()) == "dflash_round"
