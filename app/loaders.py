"""Read-only access to the pipeline's outputs for the explorer (no Streamlit here, so tests and notebooks
can use it too). Nothing in this module writes: missing or partial outputs come back as `Missing`
(a message naming the stage to run), never as an exception.

Files read (docs/contracts.md): metrics/benchmark.json, plots/benchmark_*.csv, data/benchmark_rounds.parquet,
models/target/ (tokenizer only), params.yaml (tracking.uri) and the MLflow SQLite store it names.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

ROOT_ENV = "DRAFTLAB_ROOT"
BENCH_JSON = "metrics/benchmark.json"
ROUNDS = "data/benchmark_rounds.parquet"
TARGET = "models/target"
PLOTS = {
    "tau_per_slot": "plots/benchmark_tau_per_slot.csv",
    "coverage": "plots/benchmark_coverage.csv",
    "speedup": "plots/benchmark_speedup.csv",
    "concurrency": "plots/benchmark_concurrency.csv",
    "peers": "plots/benchmark_peers.csv",
}
REPRO_BENCH = "run `dvc repro benchmark`"
ROUND_COLUMNS = ("arm", "suite", "temperature", "prompt_id", "round", "accepted", "proposals")


@dataclass(frozen=True)
class Missing:
    """Why something cannot be shown, and what to run."""

    message: str

    def __bool__(self) -> bool:  # `if result:` is False for a Missing
        return False


def default_root() -> Path:
    return Path(os.environ.get(ROOT_ENV) or ".").expanduser().resolve()


def mtime(path: Path) -> float:
    """Cache key part: modification time (0 when absent)."""
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


# ---------------------------------------------------------------- benchmark outputs
def load_benchmark(root: Path) -> dict | Missing:
    p = Path(root) / BENCH_JSON
    if not p.exists():
        return Missing(f"No `{BENCH_JSON}` under {root}: {REPRO_BENCH}.")
    try:
        d = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        return Missing(f"`{BENCH_JSON}` could not be read ({e}); {REPRO_BENCH} again.")
    if not isinstance(d, dict) or not d.get("suites"):
        return Missing(f"`{BENCH_JSON}` has no per-suite results yet; {REPRO_BENCH}.")
    return d


def load_plot(root: Path, name: str) -> pd.DataFrame | Missing:
    rel = PLOTS[name]
    p = Path(root) / rel
    if not p.exists():
        return Missing(f"No `{rel}` under {root}: {REPRO_BENCH}.")
    try:
        df = pd.read_csv(p)
    except (OSError, ValueError, pd.errors.EmptyDataError) as e:
        return Missing(f"`{rel}` could not be read ({e}); {REPRO_BENCH} again.")
    if df.empty:
        return Missing(f"`{rel}` is empty (no arm produced these numbers); {REPRO_BENCH} with a speculative arm.")
    return df


def load_rounds(root: Path) -> pd.DataFrame | Missing:
    p = Path(root) / ROUNDS
    if not p.exists():
        return Missing(f"No `{ROUNDS}` under {root}: {REPRO_BENCH} (with `benchmark.record_rounds: true`).")
    try:
        df = pd.read_parquet(p)
    except Exception as e:  # noqa: BLE001 - any unreadable file becomes a message
        return Missing(f"`{ROUNDS}` could not be read ({type(e).__name__}: {e}); {REPRO_BENCH} again.")
    lacking = [c for c in ROUND_COLUMNS if c not in df.columns]
    if lacking:
        return Missing(f"`{ROUNDS}` lacks columns {lacking}; it was written by an older benchmark: {REPRO_BENCH}.")
    if df.empty:
        return Missing(f"`{ROUNDS}` has no rounds (only AR arms ran?); {REPRO_BENCH} with a speculative arm.")
    return df


def benchmark_rows(detail: dict) -> pd.DataFrame:
    """One row per (suite, temperature, arm) of metrics/benchmark.json with the scalar metrics and the
    round split (round_ms / round_share dicts kept as dicts)."""
    rows = []
    for suite, temps in (detail.get("suites") or {}).items():
        for tk, by_arm in temps.items():
            for arm, m in by_arm.items():
                rows.append({"suite": suite, "temperature": tk, "arm": arm, **m})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- tokenizer
class TokenText:
    """Token id -> visible text: whitespace shown as ␣ ↵ ⇥, special tokens as ⟨name⟩, unknown ids as #id."""

    def __init__(self, tokenizer=None, special: set[int] | None = None, source: str = ""):
        self.tok, self.special, self.source = tokenizer, special or set(), source
        self._cache: dict[int, str] = {}

    @property
    def available(self) -> bool:
        return self.tok is not None

    def raw(self, tid: int) -> str:
        tid = int(tid)
        if self.tok is None or tid < 0:
            return ""
        try:
            s = self.tok.decode([tid], skip_special_tokens=False)
        except Exception:  # noqa: BLE001
            s = ""
        if not s or "\ufffd" in s:  # a partial UTF-8 byte: show the vocabulary entry instead
            s = self.tok.id_to_token(tid) or ""
        return s

    def __call__(self, tid: int | None) -> str:
        if tid is None:
            return "·"
        tid = int(tid)
        if tid < 0:
            return "∅"  # beyond the end of the output
        if tid in self._cache:
            return self._cache[tid]
        if self.tok is None:
            out = f"#{tid}"
        else:
            s = self.raw(tid)
            if tid in self.special:
                out = f"⟨{s}⟩"
            elif s == "":
                out = f"#{tid}"
            else:
                out = visible(s)
        self._cache[tid] = out
        return out

    def text(self, ids) -> str:
        """A whole sequence decoded together, whitespace made visible."""
        ids = [int(i) for i in ids if i is not None and int(i) >= 0]
        if self.tok is None:
            return " ".join(f"#{i}" for i in ids)
        return visible(self.tok.decode(ids, skip_special_tokens=False), keep_newlines=True)


def visible(s: str, keep_newlines: bool = False) -> str:
    s = s.replace(" ", "␣").replace("\t", "⇥").replace("\r", "␍")
    return s.replace("\n", "↵\n" if keep_newlines else "↵")


def tokenizer_file(root: Path) -> Path | None:
    """models/target/tokenizer.json, or the one in the folder draftlab_target.json points at."""
    tdir = Path(root) / TARGET
    if (tdir / "tokenizer.json").exists():
        return tdir / "tokenizer.json"
    meta = tdir / "draftlab_target.json"
    if meta.exists():
        try:
            path = json.loads(meta.read_text()).get("path")
        except (OSError, ValueError):
            path = None
        if path and (Path(path) / "tokenizer.json").exists():
            return Path(path) / "tokenizer.json"
    return None


def load_tokenizer(root: Path) -> TokenText:
    """The target's tokenizer via the light `tokenizers` library (no model, no transformers import).
    Without one, ids are shown as #id and `source` says which stage writes it."""
    f = tokenizer_file(root)
    if f is None:
        return TokenText(None, source=f"no tokenizer in `{TARGET}/`: run `dvc repro prepare_target` (ids shown as #id)")
    try:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(f))
        special = set()
        try:
            cfg = json.loads(f.read_text())
            special = {int(a["id"]) for a in cfg.get("added_tokens", []) if a.get("special")}
        except (OSError, ValueError, KeyError):
            pass
        return TokenText(tok, special, str(f))
    except Exception as e:  # noqa: BLE001
        return TokenText(None, source=f"tokenizer `{f}` could not be loaded ({e}); ids shown as #id")


# ---------------------------------------------------------------- params / MLflow
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
