"""MLflow tracking: one run per pipeline stage (the only module that talks to MLflow).

`stage_run(stage, params, cfg)` opens a run in the configured store (a local SQLite file by
default), named `<stage>@<dvc exp name>` (`<stage>@workspace` outside `dvc exp run`), logs the
flattened params and tags (stage, the git commit SHA and whether the tree had changes, the DVC
experiment name and baseline) and yields a `StageRun` for metrics and artifacts.
`lightning_logger(run)` gives Lightning an `MLFlowLogger` bound to the same run, so training curves
land there too. Steps: every training metric (`train/*`, `val/*`, `budget/*`) is logged at the
number of optimiser updates that the measured parameters had, the `step` column of the stage's
budget CSV; training minutes are a metric (`budget/train_minutes`, `train/minutes`), not an axis.
"""
from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path
from typing import Any, Iterator

from draftlab.config import TrackingConfig
from draftlab.params import flatten


def _git(*args: str) -> str | None:
    """stdout of a git command, or None when it fails (no git, no repository, no commit yet)."""
    try:
        r = subprocess.run(["git", *args], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def git_commit() -> str:
    """The SHA of the commit the run started from: $DRAFTLAB_GIT_COMMIT (set by tools/smoke.py for its
    scratch copy), else HEAD (`--verify`: a repository without commits fails instead of echoing
    'HEAD'), else the baseline of `dvc exp run`, else 'unknown'."""
    return (os.environ.get("DRAFTLAB_GIT_COMMIT") or _git("rev-parse", "--verify", "-q", "HEAD")
            or os.environ.get("DVC_EXP_BASELINE_REV") or "unknown")


def git_dirty() -> str:
    """'true' when tracked files differ from the commit (under `dvc exp run`, params.yaml always does)."""
    if "DRAFTLAB_GIT_DIRTY" in os.environ:
        return os.environ["DRAFTLAB_GIT_DIRTY"]
    out = _git("status", "--porcelain", "--untracked-files=no")
    return "unknown" if out is None else str(bool(out)).lower()


def dvc_experiment() -> str:
    """The `dvc exp run` experiment's name (DVC sets DVC_EXP_NAME, its own random name when -n is not
    given); empty in a plain `dvc repro`."""
    return os.environ.get("DVC_EXP_NAME", "")


def run_name(stage: str, exp: str) -> str:
    return f"{stage}@{exp or 'workspace'}"


class StageRun:
    """A thin handle on an active MLflow run (or a no-op when tracking is disabled)."""

    def __init__(self, mlflow_mod, run_id: str | None, uri: str):
        self._m, self.run_id, self.uri = mlflow_mod, run_id, uri

    def log_metrics(self, metrics: dict[str, Any], step: int | None = None) -> None:
        if self._m is None:
            return
        clean = {k: float(v) for k, v in flatten(metrics).items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if clean:
            self._m.log_metrics(clean, step=step)

    def log_artifact(self, path: str | Path) -> None:
        if self._m is not None and Path(path).is_dir():  # a folder of files (e.g. metrics/benchmark/)
            self._m.log_artifacts(str(path), artifact_path=Path(path).name)
        elif self._m is not None and Path(path).exists():
            self._m.log_artifact(str(path))

    def set_tags(self, tags: dict[str, Any]) -> None:
        if self._m is not None:
            self._m.set_tags({k: str(v) for k, v in tags.items()})


@contextlib.contextmanager
def stage_run(stage: str, params: dict[str, Any], cfg: TrackingConfig, tags: dict[str, Any] | None = None) -> Iterator[StageRun]:
    from draftlab.training.dist import is_rank_zero

    if not cfg.enabled or not is_rank_zero():  # under DDP one MLflow run, rank 0's
        yield StageRun(None, None, "")
        return
    os.environ.setdefault("MLFLOW_ENABLE_ASYNC_LOGGING", "false")
    import logging

    logging.getLogger("alembic").setLevel(logging.WARNING)
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    import mlflow

    mlflow.set_tracking_uri(cfg.uri)
    mlflow.set_experiment(cfg.experiment)
    all_tags = {"stage": stage, "git_commit": git_commit(), "git_dirty": git_dirty(), "dvc_exp": dvc_experiment(),
                "dvc_exp_baseline": os.environ.get("DVC_EXP_BASELINE_REV", ""), **(tags or {})}
    with mlflow.start_run(run_name=run_name(stage, all_tags["dvc_exp"])) as run:
        mlflow.set_tags({k: str(v) for k, v in all_tags.items()})
        flat = {k: str(v)[:500] for k, v in flatten(params).items()}
        items = list(flat.items())
        for i in range(0, len(items), 100):
            mlflow.log_params(dict(items[i:i + 100]))
        yield StageRun(mlflow, run.info.run_id, cfg.uri)


def lightning_logger(run: StageRun, experiment: str, prefix: str = ""):
    """An MLFlowLogger that writes into the stage's already-open run (or None when disabled); `prefix` namespaces its
    metrics (one MLflow run, one namespace per model the stage trains: the corrector stage's variants)."""
    if run.run_id is None:
        return None
    from lightning.pytorch.loggers import MLFlowLogger

    return MLFlowLogger(experiment_name=experiment, tracking_uri=run.uri, run_id=run.run_id, log_model=False,
                        prefix=prefix)
