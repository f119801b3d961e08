"""Atomic file outputs: write to a temporary sibling, then rename, so nothing is half-written; readers
of the pipeline's files (JSON, Parquet, safetensors) that turn a missing, corrupt or truncated file
into one-line `InputFileError`s naming it; and the self-describing weight folders (config.json +
model.safetensors) of the drafter and the correctors."""
from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

from draftlab.errors import DraftlabError, InputFileError


def json_digest(obj: Any) -> str:
    """A short stable hash of a JSON-able object (keys sorted): a run's resumable key, a params digest."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def file_hash(path: str | Path, algorithm: str = "sha256", chunk: int = 1 << 22) -> str:
    """The hex digest of a file's bytes, read in chunks: sha256 (a GGUF's pinned digest, the offline pack's pieces),
    md5 (what names a replicate's target, draftlab.pipeline.replicate)."""
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def sha256_file(path: str | Path, chunk: int = 1 << 22) -> str:
    return file_hash(path, "sha256", chunk)


def umask() -> int:
    """The process's umask (read from /proc where it can be, so no thread ever sees it changed)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode a plainly created file gets under the umask (0644 under umask 022)."""
    return 0o666 & ~umask()


def dir_mode() -> int:
    """The mode a plainly created folder gets under the umask (0755 under umask 022)."""
    return 0o777 & ~umask()


def make_readable(folder: Path) -> None:
    """Give every file and folder under `folder` the mode the umask asks for: what a library wrote 0600 (transformers'
    `save_pretrained` writes model.safetensors so) becomes 0644 under umask 022, like every other output."""
    folder.chmod(dir_mode())
    for p in folder.rglob("*"):
        p.chmod(dir_mode() if p.is_dir() else file_mode())


def temp_dir(parent: Path, name: str) -> Path:
    """A temporary sibling folder `.name.XXXX` of `parent`, with the mode a plain `mkdir` would give it
    (mkdtemp's own is 0700: renamed into place, other users could not read the folder)."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".tmp", dir=parent))
    tmp.chmod(dir_mode())
    return tmp


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Call write(tmp_path) and rename tmp_path onto path. The file gets the mode the umask asks for
    (mkstemp's own is 0600, which no other user could read)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, file_mode())
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


def write_json_folder(folder: str | Path, files: dict[str, Any]) -> Path:
    """Replace `folder` by one JSON file per entry (`name.json`), all at once: the files are written into a
    temporary sibling folder that is then renamed onto `folder` (the old folder is removed after the swap)."""
    import shutil

    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_dir(folder.parent, folder.name)
    old = folder.parent / f".{folder.name}.old"
    try:
        for name, obj in files.items():
            (tmp / f"{name}.json").write_text(json.dumps(_clean(obj), indent=2) + "\n", encoding="utf-8")
        shutil.rmtree(old, ignore_errors=True)
        if folder.exists():
            os.replace(folder, old)
        os.replace(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    return folder


def write_parquet(path: str | Path, df) -> Path:
    return atomic_write(path, lambda p: df.to_parquet(p, index=False))


# ---- readers: one line naming the file when it is missing or cannot be parsed ------------------------------


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:200]


def read_json(path: str | Path) -> Any:
    path = Path(path)
    if not path.is_file():
        raise InputFileError(path, "is missing")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputFileError(path, f"is not valid JSON ({_first_line(e)})") from None


def read_parquet(path: str | Path, columns: list[str] | None = None):
    """A Parquet file as a DataFrame (`columns`: the ones that must be there, the only ones read)."""
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise InputFileError(path, "is missing")
    try:
        return pd.read_parquet(path, columns=columns)
    except Exception as e:  # noqa: BLE001 (pyarrow raises ArrowInvalid, OSError, KeyError, ... for a bad file)
        raise InputFileError(path, f"is not a readable Parquet file ({_first_line(e)})") from None


def check_safetensors(path: str | Path) -> None:
    """Parse a safetensors file's header (cheap: no tensor is read); a truncated or corrupt file fails."""
    from safetensors import safe_open

    path = Path(path)
    if not path.is_file():
        raise InputFileError(path, "is missing")
    try:
        with safe_open(str(path), framework="pt") as f:
            f.keys()
    except Exception as e:  # noqa: BLE001 (SafetensorError, OSError)
        raise InputFileError(path, f"is not a readable safetensors file ({_first_line(e)})") from None


# ---- self-describing weight folders: config.json + model.safetensors ---------------------------------------

CONFIG = "config.json"
WEIGHTS = "model.safetensors"


def weight_files(config: dict, tensors: dict, fmt: str, meta: dict | None = None) -> dict[str, Callable[[Path], None]]:
    """The writers of a weight folder's two files: config.json (`config` as given) and model.safetensors,
    whose metadata carries the project's own entry `draftlab: fmt` (+ `meta`)."""
    from safetensors.torch import save_file

    tensors = {k: v.detach().to("cpu").contiguous() for k, v in tensors.items() if v is not None}
    text = json.dumps(config, indent=2) + "\n"
    metadata = {"format": "pt", "draftlab": fmt, **(meta or {})}
    return {CONFIG: lambda p: p.write_text(text),
            WEIGHTS: lambda p: save_file(tensors, str(p), metadata=metadata)}


def weights_metadata(path: str | Path) -> dict:
    """The metadata of a folder's model.safetensors ({} when it has none or cannot be read)."""
    from safetensors import safe_open

    try:
        with safe_open(str(Path(path) / WEIGHTS), framework="pt") as f:
            return dict(f.metadata() or {})
    except Exception:  # noqa: BLE001 (missing, truncated, not safetensors)
        return {}


def save_weights_folder(path: str | Path, config: dict, tensors: dict, fmt: str) -> Path:
    """Write `path`/config.json (`config` + its `format`) and `path`/model.safetensors atomically: a
    temporary sibling folder renamed onto `path`, so a reader never sees a half-written checkpoint. For a
    stage's own outputs (the folder is the stage's: what was there is replaced); a folder a user names goes
    through `draftlab.destination` instead, which never removes anything."""
    import shutil

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_dir(path.parent, path.name)
    try:
        for name, write in weight_files({**config, "format": fmt}, tensors, fmt).items():
            atomic_write(tmp / name, write)  # each file with the umask's mode (safetensors writes 0600)
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def read_folder_config(path: str | Path, fmt: str | tuple[str, ...], what: str, hint: str) -> dict:
    """The config.json of a weight folder, checked to be of format `fmt` (or one of several); one-line
    DraftlabErrors name `what` (e.g. 'corrector') and, when the folder is missing, `hint` (how to produce it)."""
    fmts = (fmt,) if isinstance(fmt, str) else tuple(fmt)
    cfg_file = Path(path) / CONFIG
    if not cfg_file.exists():
        raise DraftlabError(f"{what} checkpoint {path} has no {CONFIG}; {hint}")
    raw = read_json(cfg_file)
    if not isinstance(raw, dict) or raw.get("format") not in fmts:
        got = raw.get("format") if isinstance(raw, dict) else None
        raise DraftlabError(f"{cfg_file} has format {got!r}, expected {' or '.join(map(repr, fmts))}")
    return raw


def read_folder_tensors(path: str | Path, what: str) -> dict:
    """The tensors of a weight folder's model.safetensors (one-line DraftlabError if missing or unreadable)."""
    from safetensors.torch import load_file

    wfile = Path(path) / WEIGHTS
    if not wfile.exists():
        raise InputFileError(wfile, f"is missing (the {what} checkpoint {path} has no weights)")
    try:
        return load_file(str(wfile))
    except Exception as e:  # noqa: BLE001 (corrupt / truncated file)
        raise InputFileError(wfile, f"is not a readable safetensors file ({_first_line(e)})") from None


def load_strict(module, tensors: dict, path: str | Path, fix: str) -> None:
    """`module.load_state_dict(tensors, strict=True)`; a mismatch is one line naming the folder's weights, the
    first concrete problem (a missing / unexpected key, a size mismatch) and `fix`."""
    try:
        module.load_state_dict(tensors, strict=True)
    except RuntimeError as e:
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        detail = (lines[1] if len(lines) > 1 else lines[0] if lines else type(e).__name__)[:240]
        raise DraftlabError(f"{Path(path) / WEIGHTS} does not match its {CONFIG} ({detail}); {fix}") from None
