"""`draftlab verdicts`: recompute every pair, interval and table of the current results from committed files alone,
and print them; nothing is written unless asked (`--write-docs` rewrites the docs' generated blocks, `--json FILE`
writes the full reading). `--check` exits 1 with one line per block that differs from what this prints (and per
interval outside a block in a doc's current part): the test that holds the docs to the files
(tests/verdicts/test_docs_blocks.py)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from draftlab.errors import DraftlabError
from draftlab.verdicts import blocks as B, render as M


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="draftlab verdicts", description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=".", help="the repository root (the docs and the runs' folders)")
    ap.add_argument("--check", action="store_true", help="exit 1 when a docs block differs from what this prints")
    ap.add_argument("--write-docs", action="store_true", help="rewrite the docs' generated blocks")
    ap.add_argument("--json", metavar="FILE", help="also write the world's full reading (--world) to FILE")
    ap.add_argument("--world", help="print one world's replicated reading (a folder with analysis_plan.yaml)")
    ap.add_argument("--annotate-units", nargs="+", metavar="FILE",
                    help="add {unit, n} beside every interval of these results files written before units were named")
    a = ap.parse_args(argv)
    root = Path(a.root)
    try:
        if a.annotate_units:
            from draftlab.verdicts.units import annotate_file, missing

            for f in a.annotate_units:
                n = annotate_file(f)
                left = missing(json.loads(Path(f).read_text()))
                print(f"{f}: {n} intervals annotated" + (f"; still without units: {left[:3]}" if left else ""))
            return 0
        if a.world:
            plan, recs, frames, rd = B.load("world", Path(a.world))
            print(M.pair_table(rd["primary"] + rd["secondary"], replicated=True))
            print()
            print(M.spread_table(rd, recs))
            if a.json:
                from draftlab.io import write_json

                write_json(a.json, {"plan": plan.path, "replicates": [r["folder"] for r in recs], **rd})
            return 0
        if a.check:
            problems = B.check(root)
            for p in problems:
                print(p, file=sys.stderr)
            return 1 if problems else 0
        for d in B.DOCS:
            path = root / d
            if not path.exists():
                continue
            text = path.read_text()
            if a.write_docs:
                new = B.rewrite(text, root)
                if new != text:
                    from draftlab.io import atomic_write

                    atomic_write(path, lambda p: p.write_text(new))
                    print(f"rewrote the blocks of {d}")
                continue
            for b, _, spec in B.blocks(text):
                print(f"### {d}:{b + 1} — {spec}\n\n{B.render_block(spec, root)}\n")
        return 0
    except DraftlabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
