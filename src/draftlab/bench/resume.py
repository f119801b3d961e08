"""The benchmark's resumable record: each finished batch group (every arm on one batch of prompts) is written
to a folder as it completes, so an interrupted run — a killed process, a session that ended — resumes at the
first unfinished group instead of starting again (`benchmark.resume`).

- A group is one call of the runner's batch loop: (suite, temperature, concurrency, sweep, batch index), with
  the runs of all its arms. Its arms ran next to each other in time, so every paired ratio and speedup stays a
  same-minute comparison after a resume; only groups far apart may come from different sessions.
- The folder is keyed (`key.json`) by everything that changes a measured number: the benchmark, lookup and
  verify settings, the prompts' token ids, the contents of every model folder the arms read, the draftlab
  source, and the machine's torch build and thread count. Another key empties the folder first; the detail
  file's `setup.resumed` says how many groups came from an earlier process. The stage removes the folder once
  its outputs are written (`discard`), so a deliberate re-run (`dvc repro -f benchmark`) measures again.
- One safetensors file per group (tensors) with the scalars and lists as its JSON metadata, written to a temp
  file and renamed; nothing is unpickled.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from draftlab.bench.runner import BatchRun
from draftlab.decoding import GenerationResult
from draftlab.decoding.common import RoundRecord
from draftlab.io import atomic_write

KEY = "key.json"
_REC_TENSORS = ("stream", "offset", "accepted", "proposals", "topk_ids", "topk_logits", "target_tokens")


def tree_digest(*paths: str | Path) -> str:
    """sha256 (16 hex digits) over the relative names and bytes of every file under `paths` (a missing path
    counts as empty)."""
    h = hashlib.sha256()
    for root in map(Path, paths):
        files = [root] if root.is_file() else sorted(f for f in root.rglob("*") if f.is_file()) if root.exists() else []
        h.update(str(root).encode())
        for f in files:
            h.update(str(f.relative_to(root) if f != root else f.name).encode())
            with open(f, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 24), b""):
                    h.update(chunk)
    return h.hexdigest()[:16]


def source_digest() -> str:
    """Digest of the draftlab package's Python source (a code change starts a fresh record)."""
    import draftlab

    root = Path(draftlab.__file__).parent
    h = hashlib.sha256()
    for f in sorted(root.rglob("*.py")):
        h.update(str(f.relative_to(root)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _put(tensors: dict, name: str, t: torch.Tensor | None) -> None:
    if t is not None:
        tensors[name] = t.detach().cpu().clone()  # its own storage (safetensors refuses shared ones)


def _encode(run: BatchRun, p: str, tensors: dict) -> dict:
    """A run's scalars and lists (returned) and its tensors (into `tensors`, names prefixed by `p`)."""
    res = run.result
    _put(tensors, f"{p}round_times", res.round_times)
    _put(tensors, f"{p}round_streams", res.round_streams)
    _put(tensors, f"{p}round_wall", res.round_wall)
    for j, rec in enumerate(res.records):
        for k in _REC_TENSORS:
            _put(tensors, f"{p}rec{j}.{k}", getattr(rec, k))
        for k, v in rec.extras.items():
            _put(tensors, f"{p}rec{j}.x.{k}", v)
    return {"arm": run.arm, "suite": run.suite, "temperature": run.temperature, "concurrency": run.concurrency,
            "sweep": run.sweep, "prompt_ids": run.prompt_ids, "prompts": run.prompts, "extra": run.extra,
            "tokens": res.tokens, "finish_reason": res.finish_reason, "t_done": res.t_done, "prefill_s": res.prefill_s,
            "wall_s": res.wall_s, "phases": list(res.phases), "accepted": res.accepted, "block_size": res.block_size,
            "records": len(res.records), "extras": [sorted(r.extras) for r in res.records]}


def _decode(m: dict, p: str, tensors: dict) -> BatchRun:
    recs = []
    for j in range(m["records"]):
        kw = {k: tensors.get(f"{p}rec{j}.{k}") for k in _REC_TENSORS}
        recs.append(RoundRecord(**kw, extras={k: tensors[f"{p}rec{j}.x.{k}"] for k in m["extras"][j]}))
    res = GenerationResult(tokens=m["tokens"], finish_reason=m["finish_reason"], t_done=m["t_done"],
                           prefill_s=m["prefill_s"], wall_s=m["wall_s"], phases=tuple(m["phases"]),
                           round_times=tensors[f"{p}round_times"], round_streams=tensors[f"{p}round_streams"],
                           accepted=m["accepted"], records=recs, block_size=m["block_size"],
                           round_wall=tensors.get(f"{p}round_wall"))
    return BatchRun(m["arm"], m["suite"], m["temperature"], m["concurrency"], m["sweep"], m["prompt_ids"],
                    m["prompts"], res, m["extra"])


class RunStore:
    """The finished groups of one benchmark run under `folder`, keyed by `key` (a JSON-able dict)."""

    def __init__(self, folder: str | Path, key: dict):
        self.folder, self.key = Path(folder), key
        self.resumed = 0  # groups read back from an earlier process
        stored = self.folder / KEY
        same = stored.is_file() and json.loads(stored.read_text()) == json.loads(json.dumps(key, sort_keys=True))
        if not same and self.folder.exists():
            shutil.rmtree(self.folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        if not same:
            atomic_write(stored, lambda tmp: tmp.write_text(json.dumps(key, sort_keys=True, indent=1)))

    def _path(self, group: str) -> Path:
        return self.folder / f"{hashlib.sha256(group.encode()).hexdigest()[:20]}.safetensors"

    def get(self, group: str) -> list[BatchRun] | None:
        """The runs of `group` if an earlier process finished it, else None."""
        path = self._path(group)
        if not path.is_file():
            return None
        from safetensors import safe_open

        with safe_open(str(path), "pt") as f:
            meta = json.loads(f.metadata()["runs"])
        if meta.get("group") != group:  # a hash collision or a foreign file: measure again
            return None
        tensors = load_file(str(path))
        self.resumed += 1
        return [_decode(m, f"r{i}.", tensors) for i, m in enumerate(meta["runs"])]

    def put(self, group: str, runs: list[BatchRun]) -> None:
        tensors: dict = {}
        meta = {"group": group, "runs": [_encode(r, f"r{i}.", tensors) for i, r in enumerate(runs)]}
        atomic_write(self._path(group), lambda tmp: save_file(tensors, str(tmp), metadata={"runs": json.dumps(meta)}))


def discard(folder: str | Path) -> None:
    """Remove a finished run's record (after its outputs are written): a deliberate re-run measures again."""
    shutil.rmtree(folder, ignore_errors=True)


