"""What the training recipes share: run keys (a resumable run's folder name), checkpoint digests and reading a budget
curve (the tap-feature cache another stage built is reused by `FeatureStore.open_or_build(..., reuse=...)`)."""
from __future__ import annotations

import hashlib
from pathlib import Path

from draftlab.io import json_digest


def run_key(*parts) -> str:
    """A short stable hash of everything that changes a training run (its resumable folder's name)."""
    return json_digest(parts)


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(Path(path).glob("*")):
        if f.is_file():
            h.update(f.name.encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def history_at(history: list[dict], minutes: float, split: str = "heldout") -> float | None:
    """The last validated τ at or before `minutes` of training (None when nothing was validated)."""
    rows = [r for r in history if r["train_minutes"] <= minutes + 1e-9 and r.get(split) is not None]
    return rows[-1][split] if rows else None
