"""OpenMP's wait policy and thread count for decoding, measured on this CPU: what `engine.omp_wait_policy` and
`engine.threads` should say.

    .venv/bin/python tools/probes/decode_policy.py [--reps 9] [--widths 1,8,16] [--out metrics/decode_policy.json]

For each (policy, threads) of passive/active × 1..cores it runs `tools/verify_cost.py` in its own process (the
OpenMP runtime reads the policy once, at load) on the pipeline's target: the verify pass at each width at batch 1
after a 256-token context, interleaved repetitions, medians with their 95% intervals, under the target.linear mode
of params.yaml. The processes run one after another in a rotated order, twice, so that machine drift reaches every
setting alike; a setting's figure is the median of its two runs' medians. Prints the table (and the setting with the
fastest AR step and width-8 pass) and writes the file atomically. Heavy: run with the machine idle — the load
average at the start is in the file and a high one is said in one line.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from draftlab import paths

ROOT = Path(__file__).resolve().parents[2]


def one(policy: str, threads: int, reps: int, widths: str) -> dict:
    """One verify_cost run in its own process -> {width: median ms}."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "vc.json"
        env = dict(os.environ, OMP_WAIT_POLICY=policy.upper())  # the child's policy: its configure keeps it
        cmd = [sys.executable, str(ROOT / "tools" / "verify_cost.py"), "--batches", "1", "--contexts", "256",
               "--widths", widths, "--reps", str(reps), "--threads", str(threads), "--out", str(out)]
        subprocess.run(cmd, env=env, cwd=ROOT, check=True, capture_output=True, text=True)
        d = json.loads(out.read_text())
    return {r["width"]: r["median_ms"] for r in d["verify"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--widths", default="1,8,16")
    ap.add_argument("--out", default=str(ROOT / paths.DECODE_POLICY))
    a = ap.parse_args(argv)
    cores = os.cpu_count() or 1
    load = os.getloadavg()
    if load[0] > 0.5 * cores:
        print(f"note: load average {load[0]:.2f} on {cores} cores at the start: another process is running; an active "
              f"policy beside it runs ~10x slower, so these figures are not the machine's", file=sys.stderr)
    settings = [(p, t) for p in ("passive", "active") for t in range(1, cores + 1)]
    runs: dict = {s: [] for s in settings}
    for rep in range(2):
        order = settings[rep:] + settings[:rep] if rep else settings[::-1]
        for p, t in order:
            try:
                runs[(p, t)].append(one(p, t, a.reps, a.widths))
            except subprocess.CalledProcessError as e:
                print(f"error: verify_cost failed for {p}/{t} threads: {(e.stderr or '').strip().splitlines()[-1:]}",
                      file=sys.stderr)
                return 2
            print(f"[decode_policy] {p} x {t} thread(s), run {rep + 1}: done", file=sys.stderr, flush=True)
    widths = sorted(runs[settings[0]][0])
    rows = [{"policy": p, "threads": t, "ms": {str(w): statistics.median(r[w] for r in runs[(p, t)]) for w in widths}}
            for p, t in settings]
    best = {str(w): min(rows, key=lambda r: r["ms"][str(w)]) for w in widths}
    out = {"schema": "draftlab-decode-policy-v1", "cores": cores, "load_avg_start": [round(x, 2) for x in load],
           "reps": a.reps, "widths": widths, "rows": rows,
           "best": {w: {"policy": r["policy"], "threads": r["threads"]} for w, r in best.items()},
           "note": "verify pass at batch 1, context 256, tools/verify_cost.py per setting in its own process, two "
                   "rotated rounds; a setting's figure is the median of its two runs' medians (ms)"}
    from draftlab.io import write_json

    write_json(a.out, out)
    from draftlab.markdown import markdown_table

    print("\n".join(markdown_table(["policy", "threads", *(f"width {w} ms" for w in widths)],
                                   [[r["policy"], r["threads"], *(f"{r['ms'][str(w)]:.1f}" for w in widths)]
                                    for r in rows])))
    print("fastest: " + ", ".join(f"width {w}: {b['policy']} x {b['threads']}" for w, b in out["best"].items()))
    print(f"[decode_policy] wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
