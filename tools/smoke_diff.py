"""Two pipeline runs' outputs compared in every field that is not a timing: the check that a refactor changed no
result ("A refactor proves on the smoke pipeline that no result changed").

    python tools/smoke_diff.py BASE NEW        # two run folders, e.g. a clone's .smoke/ before and after

Reads every JSON and CSV under each folder's results/, metrics/ and plots/ and prints each difference as one line
(`file.key[i].key: base != new`), or `equal in every non-timing field`; exits 1 when anything differs (2 on a bad
folder). Skipped as timings: a key naming a clock, a speed, a rate, a memory peak or the machine's load at the start
(TIMING; the setup's warning about it, `omp.warning`), and what is chosen by a measured speed (a pair's `best` arm, `without_speed_choices`, the linear layers'
measured plan `setup.linear`), which differs between two runs of the same code. Floats must
agree to 1e-9 relative: the runs are the same arithmetic on the same machine.

How to get the two folders: clone the commit before and the commit after, and in each run
`PYTHONPATH=<clone>/src .venv/bin/python tools/smoke.py --no-toy` (it writes <clone>/.smoke/).
"""
from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from pathlib import Path

from draftlab import paths

FOLDERS = (paths.RESULTS, paths.METRICS, paths.PLOTS_DIR)
TIMING = re.compile(r"wall|_s$|_ms|per_s|speed|minutes|seconds|timing|time|finished|ratio|break_even|prefill|"
                    r"round_share|proposal_share|overhead|concurrency|share_of_round|peak|rss|duration|elapsed|tok_s|latency|git|"
                    r"commit|host|started|date|load_avg|others_running|^linear", re.I)
BEST = "best"  # a pair's arm chosen by measured speed (benchmark.pairs: the headline arm of highest mean speedup)


def without_speed_choices(doc):
    """A benchmark report without the pairs whose arm a measured speed chose (`best vs X`, and their interval half
    widths, keyed by the resolved names): which arm that is differs between two runs of the same code."""
    if not (isinstance(doc, dict) and isinstance(doc.get("pairs"), list)):
        return doc
    chosen = [p for p in doc["pairs"] if isinstance(p, dict) and BEST in str(p.get("pair", "")).split(" vs ")]
    keys = {f"{p.get('a')} vs {p.get('b')} ({p.get('temperature')})" for p in chosen}
    doc = {**doc, "pairs": [p for p in doc["pairs"] if p not in chosen]}
    widths = doc.get("setup", {}).get("halfwidths", {}).get("pairs")
    if isinstance(widths, dict):
        widths = {k: v for k, v in widths.items() if k not in keys}
        doc["setup"] = {**doc["setup"], "halfwidths": {**doc["setup"]["halfwidths"], "pairs": widths}}
    return doc


def diff(a, b, where: str, out: list[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if TIMING.search(str(k)) or f"{where}.{k}".endswith(".omp.warning"):  # the load at the start, in words
                continue
            if k not in a or k not in b:
                out.append(f"{where}.{k}: only in {'new' if k in b else 'base'}")
            else:
                diff(a[k], b[k], f"{where}.{k}", out)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append(f"{where}: {len(a)} items != {len(b)}")
        for i, (x, y) in enumerate(zip(a, b)):
            diff(x, y, f"{where}[{i}]", out)
    elif isinstance(a, float) and isinstance(b, float):
        if a != b and abs(a - b) > 1e-9 * max(1.0, abs(a)):
            out.append(f"{where}: {a!r} != {b!r}")
    elif a != b:
        out.append(f"{where}: {a!r} != {b!r}")


def read(path: Path):
    if path.suffix == ".json":
        return without_speed_choices(json.loads(path.read_text()))
    if path.suffix == ".csv":
        with path.open(newline="") as f:
            return list(csv.DictReader(f))
    return None


def compare(base: Path, new: Path) -> list[str]:
    out: list[str] = []
    for folder in FOLDERS:
        files = {side: {p.relative_to(side) for p in (side / folder).rglob("*") if p.suffix in (".json", ".csv")}
                 for side in (base, new)}
        for f in sorted(files[base] ^ files[new]):
            out.append(f"{f}: only in {'base' if f in files[base] else 'new'}")
        for f in sorted(files[base] & files[new]):
            diff(read(base / f), read(new / f), str(f), out)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base", type=Path)
    ap.add_argument("new", type=Path)
    a = ap.parse_args(argv)
    for side in (a.base, a.new):
        if not any((side / f).is_dir() for f in FOLDERS):
            print(f"error: {side} holds none of {', '.join(FOLDERS)}: name a run folder (e.g. a clone's .smoke/)",
                  file=sys.stderr)
            return 2
    out = compare(a.base, a.new)
    print("\n".join(out) if out else "equal in every non-timing field")
    return 1 if out else 0


if __name__ == "__main__":
    raise SystemExit(main())
