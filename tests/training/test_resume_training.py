"""Resume is the same run: the real pretrain_drafter stage on a tiny pipeline (tiny random target, smoke
profile, a step budget) is killed with SIGKILL — once three steps after a checkpoint, once right after the
checkpoint of a step that validates — and resumed; its data order, validation steps, loss and gradient-norm curves,
held-out curve, weights, budget-curve CSV rows (the clock's column aside) and report equal an uninterrupted run's.

Why equal and not close: a resume loads the fp32 weights, AdamW's moments, the schedule's state and the counters
from last.ckpt bit for bit (torch.save / load are lossless), reads the same batch at every step (batch g is a
function of the seed and g alone: draftlab.training.data) and replays the same operations in the same order on the
same shapes with the same kernels and one thread. Every number is therefore bit-identical; a tolerance would only
hide a real difference (one wrong batch, a skipped or repeated step, a lost validation). (Runs on other machines
or thread counts differ by rounding — tests/training/test_ddp.py derives the tolerances for that — but both runs here are
on the same machine and settings.)"""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

pytestmark = pytest.mark.usefixtures("one_thread")

KILLER = Path(__file__).resolve().parents[1] / "kill_training.py"
# 8 training sequences in batches of 3: 3 batches per pass, so a resume from step 5 starts mid-pass (pass 1, batch 2);
# validation and checkpoints every 5 steps, 13 steps: checkpoints at 5 and 10 (after their validations), rows 5, 10, 13
ARGS = ["tracking.enabled=false", "profile.threads=1", "pretrain.max_steps=13", "pretrain.max_minutes=0",
        "pretrain.epochs=0", "pretrain.batch_size=3", "pretrain.anchors_per_seq=6", "pretrain.val_every=5",
        "pretrain.checkpoint_every=5", "pretrain.warmup=0.2", "pretrain.resume=true"]
TIME_COLUMNS = ("train_minutes",)
TIME_FIELDS = ("wall_s", "train_minutes", "best_train_minutes", "train_tokens_per_s", "feature_compute_s",
               "feature_tokens_per_s", "resumed_from_step", "resume_exact")


def env(root: Path, log: Path, kill: str = "") -> dict:
    out = {**os.environ, "PYTHONPATH": str(root / "src"), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "DRAFTLAB_TEST_BATCH_LOG": str(log)}
    out.pop("DRAFTLAB_TEST_KILL", None)
    return {**out, "DRAFTLAB_TEST_KILL": kill} if kill else out


def pretrain(root: Path, wd: Path, log: Path, kill: str = "") -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(KILLER), "pretrain_drafter", *ARGS]
    return subprocess.run(cmd, cwd=wd, env=env(root, log, kill), capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def pipeline(root, tmp_path_factory):
    """A scratch pipeline folder: params (tiny-random + smoke), the prepared target and references (8 train, 2
    held-out, 1 eval), copied twice: one folder per run."""
    from draftlab.decoding import generate_ar
    from draftlab.verifier.load import load_target

    base = tmp_path_factory.mktemp("resume")
    wd = base / "whole"
    wd.mkdir()
    e = env(root, base / "unused.jsonl")
    params = subprocess.run([sys.executable, "-m", "draftlab.cli", "compose", "target=tiny-random", "profile=smoke"],
                            cwd=root, env=e, capture_output=True, text=True, check=True).stdout
    (wd / "params.yaml").write_text(params)
    r = subprocess.run([sys.executable, "-m", "draftlab.pipeline", "prepare_target"], cwd=wd, env=e, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    t = load_target(wd / "models" / "target", "cpu", "float32")
    g = torch.Generator().manual_seed(0)
    n = 11
    prompts = [torch.randint(100, t.vocab_size - 1, (int(torch.randint(5, 10, (1,), generator=g)),), generator=g).tolist()
               for _ in range(n)]
    resps = generate_ar(t, prompts, 24, eos_ids=[]).tokens
    (wd / "data").mkdir()
    pd.DataFrame({"prompt_id": [str(i) for i in range(n)], "suite": ["sharegpt"] * 10 + ["mt-bench"],
                  "split": ["train"] * 8 + ["heldout"] * 2 + ["eval"], "prompt_ids": prompts,
                  "response_ids": resps}).to_parquet(wd / "data" / "references.parquet")
    import shutil

    shutil.copytree(wd, base / "killed")
    shutil.copytree(wd, base / "interrupted")
    return wd, base / "killed"


def batches(log: Path) -> dict[int, dict]:
    """step -> the batch it trained on (a later run's line for a step replaces an earlier one's)."""
    out = {}
    for line in log.read_text().splitlines():
        row = json.loads(line)
        out[row.pop("step")] = row
    return out


def checkpoint(wd: Path) -> dict:
    (ckpt,) = (wd / "checkpoints" / "pretrain_drafter").glob("runs/*/last.ckpt")
    return torch.load(ckpt, map_location="cpu", weights_only=False)


def csv_rows(wd: Path) -> list[dict]:
    with open(wd / "plots" / "pretrain_budget.csv") as f:
        return [{k: v for k, v in r.items() if k not in TIME_COLUMNS} for r in csv.DictReader(f)]


def test_a_killed_and_resumed_pretraining_is_the_uninterrupted_run(root, pipeline):
    whole, killed = pipeline
    r = pretrain(root, whole, whole / "batches.jsonl")
    assert r.returncode == 0, r.stderr[-3000:]

    # killed 3 steps after the checkpoint of step 5 (steps 6-8 are lost and run again) ...
    first = pretrain(root, killed, killed / "run1.jsonl", kill="step:8")
    assert first.returncode == -9, (first.returncode, first.stderr[-3000:])
    assert checkpoint(killed)["global_step"] == 5
    # ... then, resumed, killed right after the checkpoint of step 10, a step that validates ...
    second = pretrain(root, killed, killed / "run2.jsonl", kill="save:10")
    assert second.returncode == -9, (second.returncode, second.stderr[-3000:])
    assert "resuming from" in second.stderr
    mid = checkpoint(killed)
    assert mid["global_step"] == 10 and [h["step"] for h in mid["draftlab"]["history"]] == [5, 10]  # its row is in it
    # ... and resumed to the end
    third = pretrain(root, killed, killed / "run3.jsonl")
    assert third.returncode == 0, third.stderr[-3000:]
    for run in (second, third):
        assert "not resumable" not in run.stderr, run.stderr[-3000:]  # Lightning restores the loader's position

    # data order: every step of every run trained on the uninterrupted run's batch for that step
    want = batches(whole / "batches.jsonl")
    assert sorted(want) == list(range(1, 14))
    runs = [batches(killed / f"run{i}.jsonl") for i in (1, 2, 3)]
    assert sorted(runs[0]) == list(range(1, 9)) and sorted(runs[1]) == list(range(6, 11))
    assert sorted(runs[2]) == [11, 12, 13]
    for got in runs:
        assert all(got[s] == want[s] for s in got), [s for s in got if got[s] != want[s]]
    assert len({json.dumps(want[s]["seq"]) for s in want}) > 3  # the batches differ from step to step

    # curves, validation schedule, weights: bit-identical (see the module's docstring)
    a, b = checkpoint(whole), checkpoint(killed)
    assert a["global_step"] == b["global_step"] == 13
    da, db = a["draftlab"], b["draftlab"]
    assert len(da["loss_curve"]) == 13 and da["loss_curve"] == db["loss_curve"]
    assert da["grad_norm_curve"] == db["grad_norm_curve"]
    strip = lambda h: [{k: v for k, v in row.items() if k not in TIME_COLUMNS} for row in h]  # noqa: E731
    assert [h["step"] for h in da["history"]] == [5, 10, 13]  # (the budget's last step validates as it stops)
    assert strip(da["history"]) == strip(db["history"])  # validation steps and every set's simulated τ
    assert da["slot_predictions"] == db["slot_predictions"] and da["labels_seen"] == db["labels_seen"]
    assert a["state_dict"].keys() == b["state_dict"].keys()
    assert all(torch.equal(a["state_dict"][k], b["state_dict"][k]) for k in a["state_dict"])
    ia, ib = a["optimizer_states"][0]["state"], b["optimizer_states"][0]["state"]
    assert all(torch.equal(ia[k][m], ib[k][m]) for k in ia for m in ("exp_avg", "exp_avg_sq"))
    from safetensors.torch import load_file

    wa, wb = (load_file(wd / "models" / "drafter" / "pretrained" / "model.safetensors") for wd in (whole, killed))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)

    # every CSV row (the clock's column aside), the held-out curve among them, and the report
    rows = csv_rows(whole)
    assert [r["step"] for r in rows] == ["5", "10", "13"] and "heldout" in rows[0]
    assert csv_rows(killed) == rows
    ra, rb = (json.loads((wd / "results" / "pretrain_drafter.json").read_text()) for wd in (whole, killed))
    assert ra["resumed_from_step"] is None and ra["resume_exact"] is None
    assert rb["resumed_from_step"] == 10 and rb["resume_exact"] is True
    assert {k: v for k, v in ra.items() if k not in TIME_FIELDS} == {k: v for k, v in rb.items() if k not in TIME_FIELDS}


@pytest.mark.parametrize("kill, code, name", [("sigint:8", 130, "Ctrl-C"), ("sigterm:3", 143, "SIGTERM")])
def test_an_interrupted_stage_ends_in_one_line_and_resumes(root, pipeline, kill, code, name, tmp_path):
    """Ctrl-C (SIGTERM) during training: exit 130 (143), one line naming the stage and no traceback, no temp file,
    no output replaced, the steps done kept (the interrupt saves last.ckpt at the step it stopped); run again, the
    stage resumes from there and finishes."""
    import shutil

    wd = shutil.copytree(pipeline[1].parent / "interrupted", tmp_path / "wd")  # the prepared inputs, untouched
    before = {p: p.stat().st_mtime_ns for p in wd.rglob("*") if p.is_file()}
    r = pretrain(root, wd, wd / "interrupted.jsonl", kill=kill)
    assert r.returncode == code, (r.returncode, r.stderr[-3000:])
    assert "Traceback" not in r.stderr and "Detected KeyboardInterrupt" not in r.stderr, r.stderr[-3000:]
    last = [line for line in r.stderr.splitlines() if line.strip()][-1]
    assert last == (f"[pretrain_drafter] interrupted ({name}): its outputs were not replaced and no temp file is "
                    "left; run it again to resume from its last checkpoint")
    assert not [p for p in wd.rglob("*") if p.name.endswith(".tmp")]
    assert not (wd / "models" / "drafter" / "pretrained").exists() and not (wd / "results" / "pretrain_drafter.json").exists()
    assert all(p.stat().st_mtime_ns == t for p, t in before.items())  # nothing that was there was touched
    step = int(kill.split(":")[1])
    assert checkpoint(wd)["global_step"] == step  # saved as it stopped (draftlab.training.fit)
    if step > 5:  # one resume is enough to show (the SIGTERM case stops there)
        again = pretrain(root, wd, wd / "resumed.jsonl")
        assert again.returncode == 0 and f"resuming from" in again.stderr, again.stderr[-3000:]
        assert checkpoint(wd)["global_step"] == 13 and sorted(batches(wd / "resumed.jsonl")) == list(range(step + 1, 14))
