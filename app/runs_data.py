"""The MLflow side of the explorer, read-only: the store that params.yaml names (`tracking.uri`), its runs,
metric histories and the params that differ between runs. Like `loaders`, nothing here raises for a missing
or unreadable store: it comes back as `loaders.Missing` with a message saying what to run."""
from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from draftlab.explore.loaders import Missing


def tracking_uri(root: Path) -> str:
    """params.yaml tracking.uri (default sqlite:///mlruns.db), a relative sqlite path resolved against root."""
    uri = "sqlite:///mlruns.db"
    p = Path(root) / "params.yaml"
    if p.exists():
        try:
            import yaml

            uri = ((yaml.safe_load(p.read_text()) or {}).get("tracking") or {}).get("uri") or uri
        except Exception:  # noqa: BLE001
            pass
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        rel = uri[len("sqlite:///"):]
        if not Path(rel).is_absolute():
            uri = "sqlite:///" + str((Path(root) / rel).resolve())
    return uri


def sqlite_path(uri: str) -> Path | None:
    return Path(uri[len("sqlite:///"):]) if uri.startswith("sqlite:///") else None


def mlflow_client(uri: str):
    """An MlflowClient on an existing store (MLflow would create an empty database otherwise)."""
    db = sqlite_path(uri)
    if db is not None and not db.exists():
        return Missing(f"No MLflow store at `{db}`: every stage logs a run there when `tracking.enabled` "
                       f"(run `dvc repro`).")
    os.environ.setdefault("MLFLOW_ENABLE_ASYNC_LOGGING", "false")
    import logging

    for name in ("alembic", "mlflow"):
        logging.getLogger(name).setLevel(logging.WARNING)
    if db is not None:  # read-only: the explorer never writes (nor migrates) the store
        uri = f"sqlite:///file:{db.resolve()}?mode=ro&uri=true"
    try:
        from unittest import mock

        from mlflow.store.db import utils as db_utils
        from mlflow.tracking import MlflowClient

        # MLflow makes the parent folder of a sqlite path; for this `file:` URI that is a stray folder named
        # `file:` in the current directory. The store exists, so there is nothing to make.
        with mock.patch.object(db_utils, "_make_parent_dirs_if_sqlite", lambda _uri: None):
            return MlflowClient(tracking_uri=uri)
    except Exception as e:  # noqa: BLE001
        return Missing(f"MLflow store `{uri}` could not be opened ({type(e).__name__}: {e}).")


def load_runs(uri: str) -> pd.DataFrame | Missing:
    """One row per stage run: run_id, experiment, name, stage, dvc_exp, status, start, tags, params, metrics."""
    client = mlflow_client(uri)
    if isinstance(client, Missing):
        return client
    try:
        exps = client.search_experiments()
        rows = []
        for e in exps:
            for r in client.search_runs([e.experiment_id], max_results=5000, order_by=["attributes.start_time DESC"]):
                t = r.data.tags
                rows.append({
                    "run_id": r.info.run_id, "experiment": e.name, "name": r.info.run_name or t.get("mlflow.runName", ""),
                    "stage": t.get("stage", ""), "dvc_exp": t.get("dvc_exp", ""), "status": r.info.status,
                    "start": pd.to_datetime(r.info.start_time, unit="ms") if r.info.start_time else pd.NaT,
                    "tags": {k: v for k, v in t.items() if not k.startswith("mlflow.")},
                    "params": dict(r.data.params), "metrics": dict(r.data.metrics),
                })
    except Exception as e:  # noqa: BLE001
        return Missing(f"MLflow store `{uri}` could not be read ({type(e).__name__}: {e}).")
    if not rows:
        return Missing(f"The MLflow store `{uri}` has no runs yet: run `dvc repro` (each stage logs one run).")
    return pd.DataFrame(rows)


def metric_history(uri: str, run_ids: list[str], key: str) -> pd.DataFrame:
    client = mlflow_client(uri)
    cols = ["run_id", "step", "timestamp", "value"]
    if isinstance(client, Missing):
        return pd.DataFrame(columns=cols)
    rows: list[dict[str, Any]] = []
    for rid in run_ids:
        for m in client.get_metric_history(rid, key):
            rows.append({"run_id": rid, "step": m.step, "timestamp": m.timestamp, "value": m.value})
    return pd.DataFrame(rows, columns=cols)


def params_diff(runs: pd.DataFrame, only_diff: bool = True) -> pd.DataFrame:
    """Params of the given runs side by side (rows: param keys, columns: run labels)."""
    cols = {}
    for _, r in runs.iterrows():
        cols[run_label(r)] = pd.Series(r["params"], dtype=object)
    if not cols:
        return pd.DataFrame()
    df = pd.DataFrame(cols).sort_index()
    if only_diff and df.shape[1] > 1:
        same = df.apply(lambda row: row.astype(str).nunique(dropna=False) <= 1, axis=1)
        df = df[~same]
    return df


def run_label(r) -> str:
    exp = f"[{r['dvc_exp']}]" if r.get("dvc_exp") else "[workspace]"
    return f"{r['stage'] or r['name']} {exp} {str(r['run_id'])[:8]}"
