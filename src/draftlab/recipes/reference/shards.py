"""The reference stage's work folder (e.g. data/references.shards/): the batch plan (`plan.json`: which
prompt ids go in which batch, in order, and the settings that generated them) and one Parquet shard per
finished batch (`batch-00012.parquet`, written atomically, carrying the RNG states after the batch), so a
killed run resumes where it stopped and batches the rest exactly as the uninterrupted run would.

The resume rule: the stored plan must equal the plan the run would make now (same prompts, same order,
same batch size, engine and generation settings, same target), otherwise one line says to delete the
folder or restore the settings. Shards that exist are read back; only the missing batches are generated.
"""
from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import torch

from draftlab.errors import DraftlabError, InputFileError
from draftlab.io import atomic_write, read_json

PLAN = "plan.json"
FORMAT = "draftlab-reference-shards"
RNG_KEY = b"draftlab.rng"


def make_plan(batches: list[list], settings: dict) -> dict:
    """The plan of a run: `batches` = the EncodedPrompts of each batch, in generation order."""
    h = hashlib.sha256()
    for batch in batches:
        for ep in batch:
            h.update(json.dumps([ep.prompt.id, ep.prompt.suite, ep.split, list(ep.ids)]).encode())
    return {"format": FORMAT, "version": 1, "settings": settings, "prompts_sha256": h.hexdigest(),
            "batches": [[ep.prompt.id for ep in batch] for batch in batches]}


def shard_path(folder: Path, k: int) -> Path:
    return Path(folder) / f"batch-{k:05d}.parquet"


def _difference(stored: dict, plan: dict) -> str:
    """What differs between two plans, in a few words."""
    if not isinstance(stored, dict) or stored.get("format") != FORMAT:
        return "it is not a reference shard plan"
    a, b = stored.get("settings", {}), plan["settings"]
    changed = [f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    if changed:
        return "settings changed (" + "; ".join(changed)[:300] + ")"
    if stored.get("batches") != plan["batches"]:
        return f"the prompts or their order changed ({sum(map(len, stored.get('batches', [])))} prompts in " \
               f"{len(stored.get('batches', []))} batches stored, {sum(map(len, plan['batches']))} in " \
               f"{len(plan['batches'])} now)"
    return "the prompts' token ids, split or suite changed (same prompt ids and order; e.g. template, truncation "\
           "or tokenizer)"


def open_plan(folder: Path, plan: dict) -> None:
    """Write `plan` into a new work folder, or check that the folder's stored plan equals it."""
    folder = Path(folder)
    f = folder / PLAN
    if not f.exists():
        if folder.exists() and any(folder.glob("batch-*.parquet")):
            raise DraftlabError(f"{folder} has shards but no {PLAN}; delete the folder ({folder}) to start over")
        text = json.dumps(plan, indent=1) + "\n"
        atomic_write(f, lambda p: p.write_text(text, encoding="utf-8"))
        return
    stored = read_json(f)
    if stored != json.loads(json.dumps(plan)):
        raise DraftlabError(f"{folder} holds shards of another reference run: {_difference(stored, plan)}; "
                            f"delete the folder ({folder}) to start over, or restore those settings to resume it")


def rng_state(generator: torch.Generator | None, device: torch.device) -> dict:
    """The RNG states a batch leaves behind (sampling reads them: the AR engine the generator, `generate`
    the global torch RNG), so a resumed batch starts from the same state as in the uninterrupted run."""
    enc = lambda t: base64.b64encode(t.cpu().numpy().tobytes()).decode()  # noqa: E731
    cuda = torch.device(device).type == "cuda"
    return {"generator": enc(generator.get_state()) if generator is not None else None,
            "torch": enc(torch.get_rng_state()),
            "cuda": enc(torch.cuda.get_rng_state(device)) if cuda else None}


def set_rng_state(state: dict, generator: torch.Generator | None, device: torch.device) -> None:
    dec = lambda s: torch.frombuffer(bytearray(base64.b64decode(s)), dtype=torch.uint8)  # noqa: E731
    if generator is not None and state.get("generator"):
        generator.set_state(dec(state["generator"]))
    if state.get("torch"):
        torch.set_rng_state(dec(state["torch"]))
    if state.get("cuda") and torch.device(device).type == "cuda":
        torch.cuda.set_rng_state(dec(state["cuda"]), device)


def write_shard(folder: Path, k: int, rows: list[dict], rng: dict) -> Path:
    """Batch k's rows (in batch order) as one Parquet file, renamed into place when complete."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(rows)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), RNG_KEY: json.dumps(rng).encode()})
    return atomic_write(shard_path(folder, k), lambda p: pq.write_table(table, p))


def read_shard(folder: Path, k: int, ids: list[str]) -> tuple[list[dict], dict] | None:
    """Batch k's rows and RNG states if its shard exists (None if not); checked against the plan's ids."""
    import pyarrow.parquet as pq

    path = shard_path(folder, k)
    if not path.exists():
        return None
    try:
        table = pq.read_table(path)
    except Exception as e:  # noqa: BLE001 (ArrowInvalid, OSError for a damaged file)
        raise InputFileError(path, f"is not a readable Parquet file ({str(e).splitlines()[0][:200]}); delete it "
                                   "to generate that batch again") from None
    rows = table.to_pylist()
    if [r.get("prompt_id") for r in rows] != ids:
        raise DraftlabError(f"{path} does not hold batch {k} of {Path(folder) / PLAN}; delete the folder "
                            f"({folder}) to start over")
    meta = table.schema.metadata or {}
    return rows, json.loads(meta[RNG_KEY]) if RNG_KEY in meta else {}


def clean_temporaries(folder: Path) -> None:
    """Temporary files a killed run left half-written (never renamed into place)."""
    for f in Path(folder).glob(".*.tmp"):
        f.unlink(missing_ok=True)
