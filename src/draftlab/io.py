"""Atomic file outputs: write to a temporary sibling, then rename, so nothing is half-written."""
from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Callable


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Call write(tmp_path) and rename tmp_path onto path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def _clean(o: Any) -> Any:
    if isinstance(o, float):
        return None if (math.isnan(o) or math.isinf(o)) else round(o, 6)
    if isinstance(o, dict):
        return {str(k): _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    if hasattr(o, "item") and callable(o.item):
        return _clean(o.item())
    return o


def write_json(path: str | Path, obj: Any) -> Path:
    text = json.dumps(_clean(obj), indent=2, sort_keys=False) + "\n"
    return atomic_write(path, lambda p: p.write_text(text, encoding="utf-8"))


def write_parquet(path: str | Path, df) -> Path:
    return atomic_write(path, lambda p: df.to_parquet(p, index=False))
