"""What the training stages (pretrain_drafter, pretrain_seeded, specopd, corrector) share: a stage-tagged log,
the target and references they read, their MLflow run and the budget-curve CSV. Imported by those stage scripts (stages/ is on
sys.path when a stage runs as `python stages/<stage>.py`)."""
from __future__ import annotations

import csv
import io
import os
import sys
from pathlib import Path
from typing import Callable

TARGET = Path("models/target")
REFERENCES = Path("data/references.parquet")


def stage_log(stage: str) -> Callable[[str], None]:
    """A log function that writes `[stage] msg` lines to stderr (under DDP: rank 0's only)."""
    def log(msg: str) -> None:
        if os.environ.get("RANK", "0") in ("", "0"):
            print(f"[{stage}] {msg}", file=sys.stderr, flush=True)

    return log


def require_references() -> None:
    from draftlab.errors import DraftlabError

    if not REFERENCES.exists():
        raise DraftlabError(f"{REFERENCES} not found; run the reference stage first (dvc repro reference)")


def load_inputs(params):
    """(target, references DataFrame): the target of `params.target` and data/references.parquet."""
    from draftlab.io import read_parquet
    from draftlab.verifier.load import load_target

    from draftlab.training.dist import local_device

    t = params.target
    # under DDP each rank's target on its local rank's device (cuda -> cuda:LOCAL_RANK)
    target = load_target(TARGET, local_device(t.device), t.dtype, t.attn_implementation)
    return target, read_parquet(REFERENCES)


def training_run(stage: str, params, sections: tuple[str, ...]):
    """The stage's MLflow run (a context manager): the params `sections` logged, tagged by target and profile."""
    from draftlab.params import to_dict
    from draftlab.tracking import stage_run

    p = to_dict(params)
    return stage_run(stage, {k: p[k] for k in sections}, params.tracking,
                     {"target": params.target.name, "profile": params.profile.name})


def numeric(d: dict, prefix: str = "") -> dict:
    """The int / float entries of a report (bools excluded), keys prefixed: what MLflow logs as metrics."""
    return {f"{prefix}{k}": v for k, v in d.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def publish(mlrun, report: dict, metrics: Path, curve: Path, write_curve: Callable[[Path], None],
            extra_metrics: dict | None = None) -> None:
    """Write the stage's report — the headline `metrics` (metrics/<stage>.json) and the full detail
    results/<stage>.json — and budget-curve CSV (atomically), log the report's numbers as `final/...`
    (+ `extra_metrics`) and the files as artifacts of the stage's MLflow run."""
    from _common import write_report
    from draftlab.io import atomic_write

    paths = write_report(Path(metrics).stem, report)
    atomic_write(curve, write_curve)
    mlrun.log_metrics({**numeric(report, "final/"), **(extra_metrics or {})})
    for p in (*paths, curve):
        mlrun.log_artifact(p)


def curve_csv(rows: list[dict]) -> str:
    """The budget curve (step, train_minutes, simulated τ per validation set) as CSV text."""
    buf = io.StringIO()
    cols = list(rows[0]) if rows else ["step", "train_minutes", "heldout"]
    w = csv.DictWriter(buf, fieldnames=cols)
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if r.get(k) is None else (round(r[k], 4) if isinstance(r[k], float) else r[k])) for k in cols})
    return buf.getvalue()
