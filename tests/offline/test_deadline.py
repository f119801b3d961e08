"""The offline runner under a deadline (issue 49 item 6, draftlab.offline.runner): the stage loop with stand-in stages,
in process — a stage past the deadline is cut by the watchdog and the bundle keeps it (status cut, its log, the
stages after it not started), a stage with too little time left is skipped with a line, the training budgets are
scaled together to the plan's prediction, a later call with a fresh --out keeps the earlier stages' figures from the
work folder's copy of the bundle, and the console is a file without progress bars. The whole runner under a deadline
(a real training stage cut through Lightning and resumed from its checkpoint): tests/offline/test_gpu_run.py."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from draftlab.offline import bundle, runner

STAGES = ("reference", "benchmark")


@pytest.fixture
def loop(monkeypatch, tmp_path):
    """run_stages over stand-in stages: `behave[name]` is the stage's run(params); no plan, no seeding."""
    import draftlab.pipeline.stage as stage

    behave: dict = {}
    monkeypatch.setattr(runner, "load_stage", lambda name: SimpleNamespace(run=behave[name]))
    monkeypatch.setattr(stage, "prepare", lambda params: None)
    monkeypatch.setattr(runner, "predictions", lambda params, kind: {})
    work = tmp_path / "work"
    work.mkdir()

    def run(out: Path, deadline: float | None = None, reserve: float = 0.5, only=STAGES, earlier=None) -> tuple[int, dict]:
        out.mkdir(parents=True, exist_ok=True)
        console = runner.Console(out / "console.txt")
        meta = {"profile": "gpu-small", "t0": time.time(), "deadline_s": deadline,
                "earlier": runner.earlier_figures(work, out) if earlier is None else earlier}
        try:
            code = runner.run_stages(SimpleNamespace(), {"profile": {"name": "gpu-small"}}, meta, work, out, console,
                                     list(only), time.time() + deadline if deadline else None, reserve)
        finally:
            console.close()
        return code, json.loads((out / "bundle.json").read_text())

    return SimpleNamespace(behave=behave, run=run, work=work, tmp=tmp_path)


def test_a_stage_past_the_deadline_is_cut_and_the_bundle_keeps_it_with_its_log(loop):
    def slow(params):
        print("reference: batch 1/6 (0 resumed), 512/2676 sequences", flush=True)
        while True:  # a stage that would run on past the deadline
            time.sleep(0.01)

    loop.behave.update(reference=slow, benchmark=lambda p: pytest.fail("runs after a cut stage"))
    t0 = time.time()
    code, doc = loop.run(loop.tmp / "out", deadline=1.5, reserve=0.5)
    assert code == runner.CUT and time.time() - t0 < 60  # cut at all (the stage itself never ends), however loaded
    cut, after = doc["stages"]
    # not before its deadline (1.5 s less the 0.5 s reserve); how late a loaded machine's watchdog wakes is not the rule
    assert cut["stage"] == "reference" and cut["status"] == "cut" and cut["wall_s"] > 0.7, cut
    assert "cut by the deadline" in cut["error"] and "\n" not in cut["error"]
    assert "512/2676 sequences" in cut["log"]  # its own lines travel with it
    assert "so_far" in cut  # the reference's finished shards (none here)
    assert after == {"stage": "benchmark", "status": "not started", "error": after["error"]}
    assert doc["cut"] == "reference" and doc["finished"] == [] and doc["failed"] is None
    assert bundle.read(loop.tmp / "out")[0]["cut"] == "reference"  # a bundle that renders
    assert "[gpu-run] reference: start" in (loop.tmp / "out" / "console.txt").read_text()
    assert not (loop.work / "finished.json").exists()  # a cut stage runs again on the next call


def test_a_stage_with_too_little_time_left_is_skipped_with_a_line(loop):
    loop.behave.update(reference=lambda p: pytest.fail("started without time to run"))
    code, doc = loop.run(loop.tmp / "out", deadline=0.6, reserve=0.5)
    assert code == runner.CUT
    skipped = doc["stages"][0]
    assert skipped["status"] == "skipped" and "skipped:" in skipped["error"] and "\n" not in skipped["error"]
    assert doc["stages"][1]["status"] == "not started"


def test_a_later_call_with_a_fresh_out_keeps_the_earlier_figures(loop):
    loop.behave.update(reference=lambda p: time.sleep(0.2), benchmark=lambda p: time.sleep(0.1))
    code, first = loop.run(loop.tmp / "out1")
    assert code == 0 and [r["status"] for r in first["stages"]] == ["ok", "ok"]
    assert (loop.work / "bundle" / "bundle.json").is_file()  # the copy that stays on the machine
    loop.behave.update(reference=lambda p: pytest.fail("ran again"), benchmark=lambda p: pytest.fail("ran again"))
    code, second = loop.run(loop.tmp / "out2")  # the device empties --out between calls: a fresh folder
    assert code == 0 and [r["status"] for r in second["stages"]] == ["finished earlier"] * 2
    for a, b in zip(first["stages"], second["stages"]):
        assert b["wall_s"] == a["wall_s"] > 0 and b["peak_gib"] == a["peak_gib"], (a, b)


def test_a_cut_stage_resumed_later_says_what_the_cut_call_spent(loop):
    def slow(params):
        while True:
            time.sleep(0.01)

    loop.behave.update(reference=slow, benchmark=lambda p: None)
    assert loop.run(loop.tmp / "out1", deadline=1.2, reserve=0.4)[0] == runner.CUT
    loop.behave.update(reference=lambda p: None)
    code, doc = loop.run(loop.tmp / "out2")
    assert code == 0 and doc["stages"][0]["status"] == "ok" and doc["stages"][0]["earlier_cut_wall_s"] > 0.5


def test_a_failing_stage_keeps_its_log_and_one_line(loop):
    def broken(params):
        print("reference: loading", flush=True)
        raise ValueError("bad shape\nsecond line")

    loop.behave.update(reference=broken)
    code, doc = loop.run(loop.tmp / "out")
    row = doc["stages"][0]
    assert code == 1 and row["status"] == "failed" and row["error"] == "[reference] ValueError: bad shape"
    assert "reference: loading" in row["log"] and "Traceback" in row["log"]


def test_the_training_budgets_shrink_together_to_fit_the_time_left():
    params = SimpleNamespace(pretrain=SimpleNamespace(max_minutes=0.8),
                             seeded=SimpleNamespace(pretrain={"max_minutes": 0.35}),
                             corrector=SimpleNamespace(max_minutes=0.25, variant_max_minutes=0.1))
    pred = {"pretrain_drafter": {"s": 50.0, "budget_s": 48.0}, "pretrain_seeded": {"s": 22.0, "budget_s": 21.0},
            "corrector": {"s": 49.0, "budget_s": 33.0}, "benchmark": {"s": 84.0, "budget_s": 0.0}}
    rest = ["pretrain_seeded", "corrector", "benchmark"]
    minutes, f = runner.fit_budgets("pretrain_drafter", params, pred, rest, left=500.0)
    assert f == 1.0 and minutes == {"pretrain.max_minutes": 0.8}  # it fits: the configured minutes
    fixed, flex = 2 + 1 + 16 + 84, 48 + 21 + 33
    minutes, f = runner.fit_budgets("pretrain_drafter", params, pred, rest, left=fixed + flex / 2)
    assert f == pytest.approx(0.5) and minutes == {"pretrain.max_minutes": pytest.approx(0.4)}
    minutes, f = runner.fit_budgets("corrector", params, pred, ["benchmark"], left=50.0)
    assert f == runner.BUDGET_FLOOR  # never below the floor: the benchmark, last, is cut by the watchdog instead
    assert minutes == pytest.approx({"corrector.max_minutes": 0.25 * f, "corrector.variant_max_minutes": 0.1 * f}, abs=1e-3)
    seeded = runner.with_minutes(params, {"seeded.pretrain.max_minutes": 0.2})
    assert seeded.seeded.pretrain == {"max_minutes": 0.2} and params.seeded.pretrain == {"max_minutes": 0.35}
    assert runner.minutes_of(SimpleNamespace(pretrain=SimpleNamespace(max_minutes=0.8), seeded=SimpleNamespace(
        pretrain={})), "pretrain_seeded") == {"seeded.pretrain.max_minutes": 0.8}  # pretraining's unless overridden


CONSOLE = r"""
import os, sys
from pathlib import Path
from draftlab.offline import runner
for k, v in runner.QUIET_ENV.items():  # as runner.run sets them, before anything imports tqdm
    os.environ.setdefault(k, v)
console = runner.Console(Path(sys.argv[1]))
try:
    from tqdm import tqdm
    for _ in tqdm(range(50), desc="benchmark"):
        pass
    print("a stage line")
    print("to stderr", file=sys.stderr)
    os.write(2, b"from C\n")  # what an extension writes to fd 2 itself
    console.say("[gpu-run] short")
finally:
    console.close()
"""


def test_the_console_file_has_what_was_printed_and_no_progress_bars(tmp_path):
    import subprocess

    proc = subprocess.run([sys.executable, "-c", CONSOLE, str(tmp_path / "console.txt")], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "" and proc.stderr == "[gpu-run] short\n"  # the real console: the short lines only
    text = (tmp_path / "console.txt").read_text()
    for line in ("a stage line\n", "to stderr\n", "from C\n", "[gpu-run] short\n"):
        assert line in text, text
    assert "\r" not in text and "benchmark:" not in text


def test_the_benchmark_figures_so_far_are_read_from_its_finished_groups(tmp_path):
    import torch

    from draftlab.bench.resume import RunStore
    from draftlab.bench.runner import BatchRun
    from draftlab.decoding import GenerationResult

    def run(arm, tokens, accepted):
        res = GenerationResult(tokens=tokens, finish_reason=["length"] * len(tokens), t_done=[1.0] * len(tokens),
                               prefill_s=0.1, wall_s=2.0, phases=("verify",), round_times=torch.zeros(3, 1),
                               round_streams=torch.ones(3), accepted=accepted)
        return BatchRun(arm, "mt-bench", 0.0, 2, False, ["a", "b"], [[1], [2]], res)

    store = RunStore(tmp_path, {"k": 1})
    store.put("g0", [run("ar", [[5] * 6, [5] * 6], []), run("dflash", [[5] * 6, [5] * 6], [[1, 2], [2, 1]])])
    got = runner._benchmark_so_far(tmp_path)
    assert got["groups"] == 1
    assert got["arms"]["ar T=0"] == {"groups": 1, "streams": 2, "tokens": 12, "wall_s": 2.0, "rounds": 0,
                                     "tokens_per_s": 6.0, "tau": None}
    assert got["arms"]["dflash T=0"]["tau"] == 3.0  # 12 tokens in 4 rounds


def test_training_checkpoints_every_few_seconds_of_wall_time(tmp_path, monkeypatch):
    """checkpoint_seconds (gpu-small: 20): a killed training stage loses at most that much; a step that validates is
    saved after its validation, as a checkpoint_every step is; progress.json beside the checkpoint."""
    from draftlab.training import fit

    clock = [100.0]
    monkeypatch.setattr(fit.time, "monotonic", lambda: clock[0])
    saved = []
    module = SimpleNamespace(best={"step": 3, "sim_tau": 1.5}, train_seconds=12.0, history=[{"step": 3}],
                             loss_curve=[2.0, 1.5])
    trainer = SimpleNamespace(global_step=0, world_size=1, is_global_zero=True, sanity_checking=False,
                              lightning_module=module,
                              save_checkpoint=lambda p, weights_only: (saved.append(trainer.global_step),
                                                                       Path(p).write_text("ckpt")))
    cb = fit.LastCheckpoint(tmp_path / "last.ckpt", every=500, val_every=4, seconds=20.0)
    cb.on_train_start(trainer, module)
    for step, t in ((1, 105.0), (2, 119.0), (3, 121.0), (4, 130.0), (5, 140.0), (6, 142.0)):
        trainer.global_step, clock[0] = step, t
        cb.on_train_batch_end(trainer, module, None, None, step - 1)
        if step % 4 == 0:
            cb.on_validation_end(trainer, module)
    assert saved == [3, 6]  # 21 s after the start, then 21 s after that save (steps 4 and 5: 9 and 19 s)
    clock[0], trainer.global_step = 170.0, 8
    cb.on_train_batch_end(trainer, module, None, None, 7)
    assert saved == [3, 6] and cb.pending == 8  # due, but step 8 validates: saved after its validation
    cb.on_validation_end(trainer, module)
    assert saved == [3, 6, 8]
    prog = json.loads((tmp_path / "progress.json").read_text())
    assert prog["step"] == 8 and prog["best_sim_tau"] == 1.5 and prog["last_loss"] == 1.5 and prog["history"]
    assert (tmp_path / "last.ckpt").read_text() == "ckpt"
