"""The results bundle of an offline run: what comes back from the device, at most 8 files of at most 16 MiB.

- bundle.json: profile, commit, target, mode, device and library versions, the stages finished and the one that
  failed or that the deadline cut (with its one line), per stage its status (ok, finished earlier, failed, cut,
  skipped, not started), wall time, the plan's predicted time and peak memory (torch.cuda.max_memory_allocated on
  CUDA, the process's peak RSS on CPU) — a stage that did not finish with its figures so far (`so_far`) and its own
  log lines (`log`) — and every headline metrics file (metrics/**.json) under `headlines`, the plain drafter's first:
  a run cut short keeps what it finished.
- results.json.gz (results-2.json.gz, ... when one file would be too large): {path: report} of results/*.json.
- plots.json.gz: {path: CSV text} of plots/*.csv.
- log.txt: the tail of the run's console at the bundle's writing.
One slot of the 8 is left for the runner's live console file (console.txt, not in the file list: it grows after
bundle.json is written). No weights, checkpoints or references: only reports. `write` replaces the bundle file by
file (temp + rename), bundle.json last; `read` checks a bundle against the limits and its own file list, one line per
fault.
"""
from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

from draftlab import paths
from draftlab.errors import DraftlabError
from draftlab.io import atomic_write

SCHEMA = "draftlab-gpu-run-v1"
MAX_FILES = 8
MAX_BYTES = 16 << 20
LOG_BYTES = 2 << 20
HEADLINE_FIRST = paths.metrics("pretrain_drafter")  # the plain drafter's τ: the first figure a cut-short run keeps


def _collect(work: Path) -> tuple[dict, dict, dict]:
    """(headlines, results, plots) of the work folder: {path relative to it: content}."""
    heads = {str(p.relative_to(work)): json.loads(p.read_text())
             for p in sorted((work / paths.METRICS).rglob("*.json"))}
    heads = dict(sorted(heads.items(), key=lambda kv: kv[0] != HEADLINE_FIRST))
    results = {str(p.relative_to(work)): json.loads(p.read_text())
               for p in sorted((work / paths.RESULTS).glob("*.json"))}
    plots = {str(p.relative_to(work)): p.read_text() for p in sorted((work / paths.PLOTS_DIR).glob("*.csv"))}
    return heads, results, plots


def _gz(obj) -> bytes:
    return gzip.compress(json.dumps(obj, sort_keys=True, default=str).encode("utf-8"), 6, mtime=0)


def _chunks(results: dict, room: int) -> list[bytes]:
    """results as gzipped JSON files of ≤ MAX_BYTES each, in at most `room` files (reports split greedily)."""
    out, cur = [], {}
    for k, v in results.items():
        trial = _gz({**cur, k: v})
        if len(trial) > MAX_BYTES and cur:
            out.append(_gz(cur))
            cur = {k: v}
        else:
            cur[k] = v
    if cur or not out:
        out.append(_gz(cur))
    big = [i for i, b in enumerate(out) if len(b) > MAX_BYTES]
    if big or len(out) > room:
        raise DraftlabError(f"the run's reports do not fit {room} files of {MAX_BYTES >> 20} MiB")
    return out


def write(out: Path, meta: dict, work: Path, log: str = "") -> dict:
    """Write the bundle of `work`'s reports with `meta` into `out`; returns bundle.json's content."""
    out.mkdir(parents=True, exist_ok=True)
    heads, results, plots = _collect(work)
    files: dict[str, bytes] = {}
    plots_gz = _gz(plots)
    log_b = log.encode("utf-8")[-LOG_BYTES:]
    try:
        for i, b in enumerate(_chunks(results, MAX_FILES - 4)):  # bundle.json, plots, log.txt, console.txt
            files["results.json.gz" if i == 0 else f"results-{i + 1}.json.gz"] = b
    except DraftlabError as e:
        meta = {**meta, "results_dropped": str(e)}  # keep the headlines: bundle.json still travels
    if len(plots_gz) <= MAX_BYTES:
        files["plots.json.gz"] = plots_gz
    files["log.txt"] = log_b
    index = {name: {"bytes": len(b), "sha256": hashlib.sha256(b).hexdigest()} for name, b in files.items()}
    doc = {"schema": SCHEMA, **meta, "files": index, "headlines": heads}
    text = json.dumps(doc, indent=1, sort_keys=False, default=str) + "\n"
    if len(text.encode()) > MAX_BYTES:
        raise DraftlabError(f"bundle.json would be over {MAX_BYTES >> 20} MiB")
    for name, b in files.items():
        atomic_write(out / name, lambda p, b=b: p.write_bytes(b))
    for stale in out.glob("results-*.json.gz"):  # a longer earlier split of this run's own bundle
        if stale.name not in files:
            stale.unlink()
    atomic_write(out / "bundle.json", lambda p: p.write_text(text))
    return doc


def read(folder: Path) -> tuple[dict, dict, dict]:
    """(bundle.json, results, plots) of a bundle folder (or its bundle.json), checked: the schema, at most MAX_FILES
    files of at most MAX_BYTES, each file listed present with its sha256. One line per fault."""
    folder = Path(folder)
    if folder.is_file():
        folder = folder.parent
    path = folder / "bundle.json"
    if not path.is_file():
        raise DraftlabError(f"{path} not found; pass the folder the run wrote with --out (or its bundle.json)")
    names = [p for p in folder.iterdir() if p.is_file()]
    if len(names) > MAX_FILES:
        raise DraftlabError(f"{folder} holds {len(names)} files, more than a bundle's {MAX_FILES}; pass the run's own --out folder")
    big = [p.name for p in names if p.stat().st_size > MAX_BYTES]
    if big:
        raise DraftlabError(f"{folder}: {', '.join(big)} over {MAX_BYTES >> 20} MiB, beyond a bundle's limits; not rendered")
    try:
        doc = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DraftlabError(f"{path} is not readable JSON ({e.msg if hasattr(e, 'msg') else e}); fetch it again") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise DraftlabError(f"{path} is not a {SCHEMA} bundle (schema {doc.get('schema') if isinstance(doc, dict) else '?'})")
    results, plots = {}, {}
    for name, want in (doc.get("files") or {}).items():
        p = folder / name
        if not p.is_file() or hashlib.sha256(p.read_bytes()).hexdigest() != want.get("sha256"):
            raise DraftlabError(f"{p} is missing or differs from bundle.json's sha256; fetch the bundle again")
        if name.startswith("results"):
            results.update(json.loads(gzip.decompress(p.read_bytes())))
        elif name == "plots.json.gz":
            plots = json.loads(gzip.decompress(p.read_bytes()))
    return doc, results, plots
