"""The folder a user names for `draftlab export` and `draftlab import`: checked before anything is written,
and written without removing anything.

Rules (one line each, nothing touched when refused):
- never the current folder, the source folder, a folder that holds the source, or one inside it;
- never a path under a regular file, a regular file itself, or a folder this process cannot write;
- an existing, non-empty folder only when it holds a previous result of the same command, recognised by
  the project's own entry in its model.safetensors metadata (`draftlab_written_by`, or for exports written
  before that entry existed, `draftlab: dflash-reference`), and only with `--force`; then only the
  command's own files (config.json, model.safetensors) are replaced, each atomically, and nothing else
  in the folder is touched;
- a new folder is built as a temporary sibling and renamed into place, so it appears complete or not at all.

Stages keep writing their own checkpoints with `draftlab.io.save_weights_folder` (their folders are theirs).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from draftlab.errors import DraftlabError
from draftlab.io import CONFIG, WEIGHTS, atomic_write, read_json, temp_dir, weights_metadata

WRITTEN_BY = "draftlab_written_by"  # the metadata key of model.safetensors naming the command that wrote it
LEGACY = {"export": ("draftlab", "dflash-reference")}  # what older exports carry instead


def _nearest_existing(p: Path) -> Path:
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def previous_result(folder: Path, command: str) -> bool:
    """Whether `folder` holds what `draftlab <command>` wrote earlier (its safetensors metadata says so)."""
    meta = weights_metadata(folder)
    if meta.get(WRITTEN_BY) == command:
        return True
    legacy = LEGACY.get(command)
    if legacy and meta.get(legacy[0]) == legacy[1]:
        return True
    if command == "import" and (folder / CONFIG).is_file():  # imports written before the entry: their info says so
        try:
            return "imported_from" in (read_json(folder / CONFIG).get("info") or {})
        except DraftlabError:
            return False
    return False


def check_destination(dst: str | Path, src: str | Path, command: str, force: bool = False) -> Path:
    """The absolute destination of `draftlab <command> SRC DST`, or one line saying why not (module docstring)."""
    flag = f"draftlab {command}"
    raw = str(dst)
    dst, src = Path(dst).absolute(), Path(src).absolute()
    real, real_src, cwd = Path(os.path.realpath(dst)), Path(os.path.realpath(src)), Path(os.getcwd()).resolve()
    if real == cwd:
        raise DraftlabError(f"{flag}: the destination {raw} is the current folder; name a new folder for the "
                            f"result (e.g. {Path(raw) / f'{command}ed'}), nothing was written")
    if real == real_src:
        raise DraftlabError(f"{flag}: the destination {raw} is the source folder itself; name a new folder")
    if real_src.is_relative_to(real):
        raise DraftlabError(f"{flag}: the destination {raw} holds the source {src}; name a new folder outside it")
    if real.is_relative_to(real_src):
        raise DraftlabError(f"{flag}: the destination {raw} lies inside the source {src} (a stage rewriting the "
                            f"source would remove it); name a folder outside it")
    for parent in real.parents:
        if parent.exists() and not parent.is_dir():
            raise DraftlabError(f"{flag}: the destination {raw} lies under {parent}, which is a file, not a folder; "
                                f"name a folder path")
    if real.exists() and not real.is_dir():
        raise DraftlabError(f"{flag}: the destination {raw} is a file, not a folder; name a new folder")
    base = _nearest_existing(real)
    if not os.access(base, os.W_OK | os.X_OK):
        raise DraftlabError(f"{flag}: cannot write into {base} (permission denied); name a folder you can write")
    if real.is_dir() and any(real.iterdir()):
        if not previous_result(real, command):
            shown = sorted(p.name for p in real.iterdir())
            more = f" and {len(shown) - 3} more" if len(shown) > 3 else ""
            raise DraftlabError(f"{flag}: the destination {raw} already holds files that are not a previous "
                                f"{command} ({', '.join(shown[:3])}{more}); name a new or empty folder (--force "
                                f"replaces only a previous {command}'s own {CONFIG} and {WEIGHTS})")
        if not force:
            raise DraftlabError(f"{flag}: the destination {raw} holds a previous {command}; pass --force to replace "
                                f"its {CONFIG} and {WEIGHTS} (nothing else there is touched), or name a new folder")
    return real


def write_files(folder: str | Path, files: dict[str, Callable[[Path], None]]) -> Path:
    """Write `files` (name -> writer of that path) into `folder` without removing anything: a new folder is
    built as a temporary sibling and renamed into place; into an existing one each file is replaced
    atomically (other files stay). An OS error (a read-only file system, /proc, a full disk) is one line."""
    folder = Path(folder)
    try:
        if not folder.exists():
            folder.parent.mkdir(parents=True, exist_ok=True)
            tmp = temp_dir(folder.parent, folder.name)
            try:
                for name, write in files.items():
                    atomic_write(tmp / name, write)
                os.rename(tmp, folder)  # fails, removing nothing, if the folder appeared meanwhile with files
            finally:
                if tmp.exists():
                    for p in tmp.iterdir():
                        p.unlink()
                    tmp.rmdir()
        else:
            for name, write in files.items():
                atomic_write(folder / name, write)
    except OSError as e:
        raise DraftlabError(f"cannot write {folder}: {e.strerror or e} ({e.filename or folder}); name a folder "
                            f"you can write") from None
    return folder
