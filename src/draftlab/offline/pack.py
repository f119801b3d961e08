"""The pack: what an offline accelerator machine lacks, in one folder of pieces ≤ 64 MiB, and its check on arrival.

Built here (`make gpu-pack`, `build`), from the composed params of the profile:
- data/: the packaged prompt suites' files the profile reads, gzipped. ShareGPT (a ~125 MB file that does not travel)
  is reduced to the conversations the reference stage's own selection code takes (`draftlab.data.references`: the
  first `reference.num_train_prompts` of the training part in its seeded order, and the whole held-out part, which
  holds the validation prompts and the `sharegpt-chat` suite), one ASCII-escaped JSON object a line (so no byte of it
  is a line break but the "\\n" between objects: U+2028 and the like stay inside their strings); that subset selects the
  same prompts as the whole file (checked here, `same_selection`).
  Every data piece is read back once written, laid out as `install` lays it out and loaded with the library's own
  loader: it must yield the prompts it was made from; the counts (prompts per suite, and ShareGPT's train / held-out
  split) go into the manifest.
- wheels/: the pure-Python wheels of the versions installed here (OmegaConf, Hydra, antlr4, gguf), `pip wheel --no-deps`.
- target/: the GGUF the target (or the tiny target's tokenizer) is read from, in parts of ≤ 48 MiB.
- manifest.json: every piece's size and sha256, the joined file's sha256, the profile, the commit and a digest of the
  params that decide the selection.

On arrival (`install`): every piece is checked against the manifest, the GGUF joined and checked, the data files and
the GGUF laid out as the packages they come from (a folder per package, first on sys.path, so the library's own
loaders read them unchanged), every data file re-loaded and re-counted against the manifest, and the wheels unpacked
for the modules the machine lacks. Any fault is one line.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path

from draftlab.errors import DraftlabError
from draftlab.io import atomic_write, json_digest, sha256_file as sha256

SCHEMA = "draftlab-gpu-pack-v2"  # v2: ASCII-escaped JSONL split at newlines only; data counts re-checked on install
PIECE_LIMIT = 64 << 20  # what one transfer to the device carries
PART_BYTES = 48 << 20  # the GGUF's parts: one part + the ~6.3 MiB working tree fit one 64 MiB transfer
# distribution -> module: what the device may lack (2026-12-04: no OmegaConf, Hydra, antlr4, gguf; accelerate not
# seen, and transformers loads a GGUF only with it — the full-size rehearsal under transformers 5.17 found that)
WHEELS = {"omegaconf": "omegaconf", "hydra-core": "hydra", "antlr4-python3-runtime": "antlr4", "gguf": "gguf",
          "accelerate": "accelerate"}
SELECTION_KEYS = ("data", "reference")  # the params sections that decide which prompts the stages read


def selection_digest(raw: dict) -> str:
    """A digest of what decides the selected prompts (the data and reference sections, the benchmark's suites)."""
    return json_digest({k: raw.get(k) for k in SELECTION_KEYS} | {"suites": (raw.get("benchmark") or {}).get("suites")})


# ------------------------------------------------------------------------------------------------ building


def _sharegpt_subset(params) -> tuple[list, dict]:
    """The ShareGPT prompts the profile's stages can read: the selected training prompts and the held-out part."""
    from draftlab.data.references import split_pools
    from draftlab.data.suites import rank

    d, r = params.data, params.reference
    if d.local_jsonl or d.local_suites:
        raise DraftlabError("data.local_jsonl / data.local_suites are not packed for an offline run; leave them unset "
                            "or copy the files into the repository the run takes")
    pools = split_pools(d)
    train = rank(pools.train, r.seed)[: r.num_train_prompts]
    keep = [p for p in train + pools.held if p.suite == "sharegpt"]
    same_selection(pools, keep, d, r)
    held = sum(p.suite == "sharegpt" for p in pools.held)
    return keep, {"train": len(train), "heldout_pool": len(pools.held), "pool_train": len(pools.train), "heldout": held}


def same_selection(pools, keep: list, d, r) -> None:
    """The subset, split and ranked as the reference stage does, yields the same train and held-out prompts."""
    from draftlab.data.suites import dedupe, normalise, rank, split_heldout

    sub, _, _ = dedupe(list(keep), exclude={normalise(p.text) for p in pools.evals})
    train, held = split_heldout(sub, d.heldout_fraction, d.split_seed)
    want = [p.id for p in rank(pools.train, r.seed)[: r.num_train_prompts]]
    if [p.id for p in rank(train, r.seed)[: r.num_train_prompts]] != want or {p.id for p in held} != {
            p.id for p in pools.held if p.suite == "sharegpt"}:
        raise DraftlabError("the packed ShareGPT subset would select other prompts than the whole pool "
                            "(draftlab.offline.pack.same_selection); report this with the profile's data section")


def _write_gz(path: Path, data: bytes) -> None:
    atomic_write(path, lambda p: p.write_bytes(gzip.compress(data, 6, mtime=0)))


def sharegpt_lines(prompts: list) -> bytes:
    """The packed ShareGPT subset: one conversation a line, ASCII-escaped (no byte but the separators is a line
    break of any kind), joined by "\\n"."""
    return b"".join(json.dumps({"id": p.id.split("/", 1)[1], "conversations": [{"from": "human", "value": p.text}]},
                               ensure_ascii=True).encode("ascii") + b"\n" for p in prompts)


def lay_out(entry: dict, piece: bytes) -> bytes:
    """A data piece's bytes -> the file as its package ships it (what `install` writes and `build` reads back)."""
    if entry["form"] == "copy":
        return piece
    if entry["form"] == "gzip":
        return gzip.decompress(piece)
    if entry["form"] == "jsonl-list":  # the ShareGPT file's format, a JSON list of conversations; lines split at \n only
        items = [ln for ln in gzip.decompress(piece).split(b"\n") if ln.strip()]
        return b"[\n" + b",\n".join(items) + b"\n]\n"
    raise DraftlabError(f"pack data entry {entry.get('piece')!r} has form {entry['form']!r}, which this library does "
                        "not read; rebuild the pack with make gpu-pack at this commit")


def count(entry: dict, path: Path) -> tuple[dict, list]:
    """The prompts a laid-out data file yields through the library's own loader: ({"prompts": n} and, for ShareGPT,
    the "train" / "heldout" parts of the split the manifest records), and the prompts."""
    from draftlab.data.suites import LOADERS, dedupe, split_heldout

    prompts = LOADERS[entry["suite"]](path)
    counts = {"prompts": len(prompts)}
    if "split" in entry:
        train, held = split_heldout(dedupe(prompts)[0], entry["split"]["heldout_fraction"], entry["split"]["split_seed"])
        counts |= {"train": len(train), "heldout": len(held)}
    return counts, prompts


def _read_back(entry: dict, out: Path, want: dict, prompts: list | None = None) -> None:
    """The written piece, laid out as `install` lays it out and loaded, yields `want` (and exactly `prompts`)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / Path(entry["file"]).name
        path.write_bytes(lay_out(entry, (out / entry["piece"]).read_bytes()))
        got, read = count(entry, path)
    if got != want or (prompts is not None and [(p.id, p.text) for p in read] != [(p.id, p.text) for p in prompts]):
        raise DraftlabError(f"the packed {entry['suite']} piece {entry['piece']} reads back as {got}, not the {want} "
                            "it was written from (draftlab.offline.pack); report this with the profile's data section")


def _pack_data(params, out: Path) -> tuple[list[dict], dict]:
    from draftlab.data.suites import CHAT_SUITE, LOADERS, PACKAGED

    entries = []
    suites = [s for s in dict.fromkeys([*params.data.eval_suites, *params.benchmark.suites]) if s in PACKAGED]
    for s in suites:
        package, _, rel = PACKAGED[s]
        src = _package_file(s)
        raw = src.read_bytes()
        piece = f"data/{package}/{Path(rel).name}" + ("" if rel.endswith(".gz") else ".gz")
        if rel.endswith(".gz"):  # already gzipped (HumanEval): copied as it is
            atomic_write(out / piece, lambda p, b=raw: p.write_bytes(b))
        else:
            _write_gz(out / piece, raw)
        entry = {"suite": s, "package": package, "file": rel, "piece": piece, "form": "copy" if rel.endswith(".gz") else "gzip"}
        entry["counts"] = {"prompts": len(LOADERS[s](src))}
        _read_back(entry, out, entry["counts"])
        entries.append(entry)
    stats = {}
    if params.data.train_suite == "sharegpt" or CHAT_SUITE in params.benchmark.suites:
        keep, stats = _sharegpt_subset(params)
        package, _, rel = PACKAGED["sharegpt"]
        piece = f"data/{package}/selected.jsonl.gz"
        _write_gz(out / piece, sharegpt_lines(keep))
        entry = {"suite": "sharegpt", "package": package, "file": rel, "piece": piece, "form": "jsonl-list",
                 "prompts": len(keep), "split": {"heldout_fraction": params.data.heldout_fraction,
                                                 "split_seed": params.data.split_seed},
                 "counts": {"prompts": len(keep), "train": stats["train"], "heldout": stats["heldout"]}}
        _read_back(entry, out, entry["counts"], keep)
        entries.append(entry)
        stats["packed"] = len(keep)
    return entries, stats


def _package_file(suite: str) -> Path:
    from draftlab.data.suites import PACKAGED, package_file

    return package_file(*PACKAGED[suite])


def _pack_gguf(params, out: Path) -> dict:
    from draftlab.verifier.load import DEFAULT_GGUF, packaged_gguf

    t = params.target
    if t.source == "packaged-gguf":
        src, package = packaged_gguf(t), t.package
    elif t.source == "random" and t.random.tokenizer == "smollm2":  # the tiny target reads SmolLM2's tokenizer from it
        src, package = packaged_gguf(), DEFAULT_GGUF[0]
    else:
        raise DraftlabError(f"target.source={t.source!r}: only a packaged GGUF target (or the tiny random one) is packed "
                            "for an offline run; a local or hub target must already be on that machine")
    parts, size = [], src.stat().st_size
    with open(src, "rb") as f:
        for i in range((size + PART_BYTES - 1) // PART_BYTES):
            block = f.read(PART_BYTES)
            piece = f"target/{src.name}.part{i:02d}"
            atomic_write(out / piece, lambda p, b=block: p.write_bytes(b))
            parts.append(piece)
    return {"package": package, "file": src.name, "parts": parts, "bytes": size, "sha256": sha256(src)}


def _pack_wheels(out: Path, python: str) -> list[str]:
    from importlib.metadata import PackageNotFoundError, version

    folder = out / "wheels"
    folder.mkdir(parents=True, exist_ok=True)
    try:
        reqs = [f"{d}=={version(d)}" for d in WHEELS]
    except PackageNotFoundError as e:
        raise DraftlabError(f"{e.name} is not installed here; install the project first (make install)") from None
    r = subprocess.run([python, "-m", "pip", "wheel", "--disable-pip-version-check", "--no-deps", "-w", str(folder), *reqs],
                       capture_output=True, text=True)
    if r.returncode:
        last = [ln for ln in r.stderr.splitlines() if ln.strip() and "is ignored" not in ln][-1:] or ["?"]
        raise DraftlabError(f"pip wheel {' '.join(reqs)} failed ({last[0][:160]}); check pip's find-links / index")
    names = []
    for req in reqs:
        dist, ver = req.split("==")
        stem = dist.replace("-", "_")
        found = [w for w in folder.glob("*.whl") if w.name.lower().startswith(f"{stem}-{ver}-".lower())]
        if not found or not found[0].name.endswith("-py3-none-any.whl"):
            raise DraftlabError(f"no pure-Python wheel of {req} in {folder} (the device's Python differs from this one)")
        names.append(f"wheels/{found[0].name}")
    return names


def build(params, raw: dict, out: Path, commit: str, python: str = sys.executable, log=print) -> dict:
    """Write the pack for the composed `params` (`raw`: the same as a dict) into `out`; returns the manifest."""
    out.mkdir(parents=True, exist_ok=True)
    data, stats = _pack_data(params, out)
    log(f"[gpu-pack] prompts: {', '.join(e['suite'] for e in data)} ({stats.get('packed', 0)} ShareGPT prompts)")
    gguf = _pack_gguf(params, out)
    log(f"[gpu-pack] target GGUF {gguf['file']}: {gguf['bytes'] / 2**20:.1f} MiB in {len(gguf['parts'])} parts")
    wheels = _pack_wheels(out, python)
    log(f"[gpu-pack] wheels: {', '.join(Path(w).name for w in wheels)}")
    pieces = [*(e["piece"] for e in data), *gguf["parts"], *wheels]
    manifest = {"schema": SCHEMA, "profile": raw["profile"]["name"], "target": raw["target"]["name"], "commit": commit,
                "selection": selection_digest(raw), "sharegpt": stats, "data": data, "gguf": gguf, "wheels": wheels,
                "pieces": {p: {"bytes": (out / p).stat().st_size, "sha256": sha256(out / p)} for p in pieces}}
    big = [p for p, v in manifest["pieces"].items() if v["bytes"] > PIECE_LIMIT]
    if big:
        raise DraftlabError(f"pack pieces over {PIECE_LIMIT >> 20} MiB: {', '.join(big)}")
    atomic_write(out / "manifest.json", lambda p: p.write_text(json.dumps(manifest, indent=1) + "\n"))
    return manifest


# ------------------------------------------------------------------------------------------------ arrival


def read_manifest(folder: Path) -> dict:
    path = folder / "manifest.json"
    try:
        m = json.loads(path.read_text())
    except FileNotFoundError:
        raise DraftlabError(f"{path} not found; copy the whole pack folder (make gpu-pack writes it)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DraftlabError(f"{path} is not a readable manifest ({e}); copy it again") from None
    if not isinstance(m, dict) or m.get("schema") != SCHEMA:
        raise DraftlabError(f"{path} is not a {SCHEMA} manifest; rebuild the pack with make gpu-pack")
    return m


def check(folder: Path) -> dict:
    """Every piece of the manifest present with its size and sha256; the manifest. One line per fault."""
    m = read_manifest(folder)
    for piece, want in m["pieces"].items():
        p = folder / piece
        if not p.is_file():
            raise DraftlabError(f"pack piece {p} is missing; copy it from the pack folder make gpu-pack wrote")
        if p.stat().st_size != want["bytes"] or sha256(p) != want["sha256"]:
            raise DraftlabError(f"pack piece {p} is corrupt (size or sha256 differs from manifest.json); copy it again")
    return m


def join_gguf(folder: Path, gguf: dict, dest: Path) -> Path:
    """The GGUF's parts joined into `dest` (temp + rename) and checked against the manifest's sha256."""
    h = hashlib.sha256()

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as out:
            for part in gguf["parts"]:
                with open(folder / part, "rb") as f:
                    while block := f.read(1 << 22):
                        h.update(block)
                        out.write(block)
        if h.hexdigest() != gguf["sha256"]:
            raise DraftlabError(f"the joined {gguf['file']} has sha256 {h.hexdigest()[:16]}…, not the manifest's "
                                f"{gguf['sha256'][:16]}…: the parts come from different packs; copy one pack again")

    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.is_file() and dest.stat().st_size == gguf["bytes"] and sha256(dest) == gguf["sha256"]:
        return dest
    return atomic_write(dest, write)


def _package_dir(site: Path, package: str) -> Path:
    d = site / package
    d.mkdir(parents=True, exist_ok=True)
    init = d / "__init__.py"  # a regular package: it wins over a namespace portion or an installed wrapper later on sys.path
    if not init.exists():
        init.write_text('"""Data files of an offline pack (draftlab.offline.pack); nothing to import."""\n')
    return d


def install(folder: Path, site: Path, missing: list[str]) -> dict:
    """Check the pack, lay out its data and GGUF as packages under `site`, unpack the wheels of the `missing`
    modules there; the manifest (with `unpacked`: the wheels used)."""
    m = check(folder)
    for e in m["data"]:
        dest = _package_dir(site, e["package"]) / e["file"]
        data = lay_out(e, (folder / e["piece"]).read_bytes())
        dest.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(dest, lambda p, b=data: p.write_bytes(b))
        got = count(e, dest)[0]
        if got != e["counts"]:
            diff = ", ".join(f"{k} {got.get(k)} (manifest {v})" for k, v in e["counts"].items() if got.get(k) != v)
            raise DraftlabError(f"{dest} ({e['suite']}) does not yield what was packed: {diff}; the file did not "
                                f"arrive whole: rebuild the pack (make gpu-pack) and copy it again")
    g = m["gguf"]
    join_gguf(folder, g, _package_dir(site, g["package"]) / g["file"])
    unpacked = []
    for w in m["wheels"]:
        module = next((mod for dist, mod in WHEELS.items() if Path(w).name.lower().startswith(dist.replace("-", "_"))), None)
        if module in missing:
            with zipfile.ZipFile(folder / w) as z:
                z.extractall(site)
            unpacked.append(Path(w).name)
    return {**m, "unpacked": unpacked}
