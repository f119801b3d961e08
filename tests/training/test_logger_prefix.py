"""One MLflow run, one metric namespace per model a stage trains: `draftlab.tracking.lightning_logger(run, experiment,
prefix)` (the corrector stage names each variant so) — Lightning's public `prefix`, never its private field set from
outside."""
from __future__ import annotations

import logging

from draftlab.tracking import StageRun, lightning_logger


def test_a_prefixed_logger_writes_its_metrics_under_its_name(tmp_path):
    import mlflow
    from mlflow.tracking import MlflowClient

    logging.getLogger("alembic").setLevel(logging.WARNING)
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    c = MlflowClient(tracking_uri=uri)
    run = c.create_run(c.create_experiment("draftlab"))
    handle = StageRun(mlflow, run.info.run_id, uri)
    for name in ("dcoco", "lilicorr"):
        lg = lightning_logger(handle, "draftlab", prefix=name)
        lg.log_metrics({"train/loss": 1.5}, step=0)
        lg.finalize("success")
    assert {"dcoco-train/loss", "lilicorr-train/loss"} <= set(c.get_run(run.info.run_id).data.metrics)
    assert lightning_logger(StageRun(None, None, uri), "draftlab", prefix="x") is None  # tracking off
