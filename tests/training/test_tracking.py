"""Traceable runs: the git commit tag is a real SHA (never the literal 'HEAD' of a repository without
commits), run names carry the DVC experiment, artifacts land in the run, and training metrics share one
step axis (the optimiser step) across train/*, val/*, budget/* and the budget CSV."""
from __future__ import annotations

import re
import subprocess

import pandas as pd
import pytest
from lightning.pytorch.loggers.logger import Logger

from draftlab import tracking
from draftlab.config import DrafterConfig, PretrainConfig, TrackingConfig

pytestmark = pytest.mark.usefixtures("one_thread")


def test_git_commit_is_a_sha_or_says_unknown(root, tmp_path, monkeypatch):
    for var in ("DRAFTLAB_GIT_COMMIT", "DVC_EXP_BASELINE_REV"):
        monkeypatch.delenv(var, raising=False)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()
    monkeypatch.chdir(root)
    assert re.fullmatch(r"[0-9a-f]{40}", tracking.git_commit()) and tracking.git_commit() == head
    assert tracking.git_dirty() in ("true", "false")
    empty = tmp_path / "fresh"
    empty.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=empty, check=True)
    monkeypatch.chdir(empty)  # `git rev-parse HEAD` prints 'HEAD' here (and fails)
    assert tracking.git_commit() == "unknown"
    monkeypatch.setenv("DVC_EXP_BASELINE_REV", "b" * 40)
    assert tracking.git_commit() == "b" * 40
    monkeypatch.setenv("DRAFTLAB_GIT_COMMIT", "a" * 40)  # tools/smoke.py passes its repository's commit
    assert tracking.git_commit() == "a" * 40


def test_stage_run_names_tags_and_artifacts(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.chdir(tmp_path)  # MLflow's artifact root (./mlruns) lands here
    monkeypatch.setenv("DVC_EXP_NAME", "lr3e-3")
    monkeypatch.setenv("DVC_EXP_BASELINE_REV", "c" * 40)
    monkeypatch.setenv("DRAFTLAB_GIT_COMMIT", "d" * 40)
    (tmp_path / "rounds.parquet").write_bytes(b"x")
    cfg = TrackingConfig(uri=f"sqlite:///{tmp_path / 'mlruns.db'}", experiment="t")
    with tracking.stage_run("benchmark", {"benchmark": {"arms": ["ar"]}}, cfg, {"target": "tiny"}) as run:
        run.log_artifact(tmp_path / "rounds.parquet")
        run.log_metrics({"summary": {"ar": {"tau_t0": 1.0}}})
    c = MlflowClient(tracking_uri=cfg.uri)
    r = c.get_run(run.run_id)
    assert r.info.run_name == "benchmark@lr3e-3"
    tags = r.data.tags
    assert tags["git_commit"] == "d" * 40 and tags["dvc_exp"] == "lr3e-3" and tags["dvc_exp_baseline"] == "c" * 40
    assert tags["stage"] == "benchmark" and tags["target"] == "tiny" and tags["git_dirty"] in ("true", "false", "unknown")
    assert [a.path for a in c.list_artifacts(run.run_id)] == ["rounds.parquet"]
    assert r.data.metrics == {"summary.ar.tau_t0": 1.0}
    monkeypatch.delenv("DVC_EXP_NAME")
    assert tracking.run_name("benchmark", tracking.dvc_experiment()) == "benchmark@workspace"


class Capture(Logger):
    """A Lightning logger that keeps every (metrics, step) it is given."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple[dict, int]] = []

    name = "capture"
    version = "0"

    def log_metrics(self, metrics, step=None):
        self.calls.append((dict(metrics), step))

    def log_hyperparams(self, params, *args, **kwargs):
        pass


def _frame():
    import torch

    g = torch.Generator().manual_seed(4)
    prompts = [torch.randint(3, 97, (5,), generator=g).tolist() for _ in range(7)]
    resps = [torch.randint(3, 97, (20,), generator=g).tolist() for _ in range(7)]
    return pd.DataFrame({"prompt_id": [str(i) for i in range(7)], "suite": ["sharegpt"] * 6 + ["humaneval"],
                         "split": ["train"] * 5 + ["heldout", "eval"], "prompt_ids": prompts, "response_ids": resps})


def test_budget_val_and_csv_use_one_step_axis(target, tmp_path):
    from draftlab.recipes.pretrain.recipe import pretrain_from_references

    lg = Capture()
    dcfg = DrafterConfig(block_size=4, num_layers=1, target_layer_ids=[0, 2, 3], mask_token_id=1, draft_vocab_size=40)
    pcfg = PretrainConfig(max_steps=6, max_minutes=0, lr=3e-3, val_every=3, batch_size=3, anchors_per_seq=8,
                          val_anchor_stride=1, checkpoint_every=0, topk=4)
    out = pretrain_from_references(target, _frame(), dcfg, pcfg, tmp_path / "work", logger=lg, log=lambda m: None)
    steps = {prefix: sorted({s for m, s in lg.calls for k in m if k.startswith(prefix)}) for prefix in ("val/", "budget/")}
    assert steps["val/"] == steps["budget/"] == [r["step"] for r in out.curve] == [3, 6]
    budget = [m for m, _ in lg.calls if "budget/train_minutes" in m]
    assert [m["budget/train_minutes"] for m in budget] == [r["train_minutes"] for r in out.curve]
    assert {k for m in budget for k in m} >= {"budget/heldout_sim_tau", "budget/train_minutes"}
    train_steps = sorted({s for m, s in lg.calls for k in m if k.startswith("train/")})
    assert train_steps and set(train_steps) <= set(range(6))  # a batch's loss at the updates its parameters had


def test_reading_the_store_read_only_leaves_no_stray_folder(root, tmp_path, monkeypatch):
    """The explorer opens the store as `sqlite:///file:...?mode=ro`; MLflow used to create a folder named
    `file:` (the pytest path below it) in the current directory for that URI."""
    import importlib

    from mlflow.tracking import MlflowClient

    db = tmp_path / "mlruns.db"
    MlflowClient(tracking_uri=f"sqlite:///{db}").create_experiment("x")
    monkeypatch.syspath_prepend(str(root / "app"))
    runs_data = importlib.import_module("runs_data")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    client = runs_data.mlflow_client(f"sqlite:///{db}")
    assert [e.name for e in client.search_experiments()] and not list(cwd.iterdir())
