"""What the training recipes share: run keys (a resumable run's folder name), checkpoint digests, the
reused tap-feature cache, and reading a budget curve."""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Callable

import torch

from draftlab.io import json_digest
from draftlab.training.dist import rank_zero_first
from draftlab.training.features import FeatureStore, SequenceSet, target_fingerprint


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


def open_features(roots: list[Path], target, seqs: SequenceSet, taps: list[int], batch_tokens: int,
                  log: Callable[[str], None] = print) -> tuple[FeatureStore, dict]:
    """Reuse a complete feature cache from any of `roots` (e.g. pretraining's), else build it in the last.
    Under DDP rank 0 looks (and builds) first, the others after a barrier: every rank takes the same branch."""
    return rank_zero_first(lambda: _open_features(roots, target, seqs, taps, batch_tokens, log),
                           torch.device(getattr(target, "device", "cpu")).type)


def _open_features(roots: list[Path], target, seqs: SequenceSet, taps: list[int], batch_tokens: int,
                   log: Callable[[str], None]) -> tuple[FeatureStore, dict]:
    tkey = target_fingerprint(target)
    key = FeatureStore.key(tkey, seqs, taps, "float16")
    for r in roots:
        if (Path(r) / key / "meta.json").exists():
            store = FeatureStore(Path(r) / key)
            return store, {"feature_cache": str(store.path), "feature_cache_bytes": store.nbytes,
                           "feature_cache_reused": True, "feature_compute_s": 0.0}
    return FeatureStore.open_or_build(roots[-1], target, seqs, taps, batch_tokens, target_key=tkey, log=log)


def history_at(history: list[dict], minutes: float, split: str = "heldout") -> float | None:
    """The last validated τ at or before `minutes` of training (None when nothing was validated)."""
    rows = [r for r in history if r["train_minutes"] <= minutes + 1e-9 and r.get(split) is not None]
    return rows[-1][split] if rows else None
