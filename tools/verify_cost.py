"""Verify cost against width on this machine: what one more verified position costs.

    .venv/bin/python tools/verify_cost.py            # the pipeline's target (models/target), params.yaml's drafters
    .venv/bin/python tools/verify_cost.py --quick    # fewer repetitions, one context length, batch 1 and 4
    .venv/bin/python tools/verify_cost.py --tiny --quick --out /tmp/vc.json   # a tiny random model (the test)
    .venv/bin/python tools/verify_cost.py --quick --linear auto,torch   # the measured plan vs F.linear, side by side
    .venv/bin/python tools/verify_cost.py --batches 1 --widths 1-17 --linear torch,few-row,onednn,auto  # by width
    .venv/bin/python tools/verify_cost.py --show metrics/verify_cost_width.json   # its table, from the file

What it times, and how (interleaved repetitions, medians with a distribution-free 95% interval): the module
docstring of draftlab.measure.verify_cost, which computes it.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from draftlab import paths
from draftlab.measure.verify_cost import FULL, QUICK, run
from draftlab.measure.verify_cost_tables import table

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help=f"{QUICK['reps']} repetitions, contexts {QUICK['contexts']}, "
                                                         f"batches {QUICK['batches']}")
    ap.add_argument("--tiny", action="store_true", help=f"a tiny random target instead of {paths.TARGET} (tests)")
    ap.add_argument("--batches", default="", help=f"comma list (default {FULL['batches']})")
    ap.add_argument("--contexts", default="", help=f"context lengths in tokens (default {FULL['contexts']})")
    ap.add_argument("--reps", type=int, default=0, help=f"timed repetitions (default {FULL['reps']}, quick {QUICK['reps']})")
    ap.add_argument("--warmup", type=int, default=None, help="untimed repetitions first")
    ap.add_argument("--params", default=str(ROOT / paths.PARAMS))
    ap.add_argument("--target", default=str(ROOT / paths.TARGET))
    ap.add_argument("--linear", default="", help="target.linear mode(s), comma list measured side by side, e.g. "
                                                 "auto,torch (default: params.yaml's target.linear)")
    ap.add_argument("--widths", default="", help="verify widths, e.g. 1-17 or 1,2,8 (default 1..drafter.block_size)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (default engine.threads or profile.threads)")
    ap.add_argument("--out", default=str(ROOT / paths.VERIFY_COST))
    ap.add_argument("--show", metavar="FILE", help="print a measured file's by-width table (markdown) and exit")
    a = ap.parse_args(argv)
    if a.show:
        import json

        from draftlab.measure.verify_cost_tables import width_table

        try:
            print(width_table(json.loads(Path(a.show).read_text())))
        except (OSError, ValueError, KeyError) as e:
            print(f"error: --show {a.show}: not a verify-cost file this tool wrote ({type(e).__name__}: {e})",
                  file=sys.stderr)
            return 2
        return 0
    from draftlab.errors import DraftlabError

    try:
        out = run(a.params, a.target, a.out, tiny=a.tiny, quick=a.quick, batches=a.batches, contexts=a.contexts,
                  reps=a.reps, warmup=a.warmup, linear=a.linear, widths=a.widths, threads=a.threads)
    except DraftlabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(table(out))
    print(f"[verify_cost] wrote {a.out} in {out['setup']['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
