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

from draftlab import paths
from draftlab.errors import DraftlabError
from draftlab.verdicts import blocks as B, reading as R, render as M


def load(kind: str, folder: Path):
    """'run': (per-prompt records, the run's benchmark config); 'world': (plan, replicate records, frames, reading)."""
    from draftlab.verdicts.plan import PLAN, read_plan
    from draftlab.verdicts.records import replicate_records, run_records

    if kind == "run":
        df = run_records(folder)
        cfg = json.loads((folder / paths.BENCH_DETAIL).read_text()).get("config") or {}
        return df, cfg
    plan = read_plan(folder / PLAN)
    recs, frames = replicate_records(folder, plan.arms_at())
    if len({r["world_hash"] for r in recs}) == 1 and plan.world_hash and recs[0]["world_hash"] != plan.world_hash:
        raise DraftlabError(f"{folder}: the replicates' world {recs[0]['world_hash'][:12]} is not the plan's "
                            f"{plan.world_hash[:12]}")
    return plan, recs, frames, R.read_replicates(frames, plan)


def _arms(args: dict, cfg: dict) -> list[str]:
    return args["arms"].split(",") if "arms" in args else list(cfg.get("arms") or [])


def render(kind: str, args: dict, root: Path) -> str:
    if kind in ("arms", "suites", "pairs"):
        df, cfg = B.cached("run", str(root / args.get("run", ".")))
        t = float(args.get("t", 0))
        if kind == "pairs":
            temps = [t] if "t" in args else sorted(set(df.temperature))
            pairs = [(a, b, tt) for tt in temps for a, b in cfg.get("pairs") or [] if "best" not in (a, b)
                     and not R._rows(df, a, tt).empty and not R._rows(df, b, tt).empty]
            rows = [R.pair_row(df, a, b, tt) for a, b, tt in pairs]
            return M.pair_table(rows)
        rows = [R.arm_row(df, a, t) for a in _arms(args, cfg) if not R._rows(df, a, t).empty]
        return M.arm_table(rows) if kind == "arms" else M.suite_table(rows)
    plan, recs, frames, rd = B.cached("world", str(root / args["world"]))
    if kind == "replicates":
        rows = rd[args.get("family", "primary")]
        return M.compact_table(rows) if args.get("compact") == "1" else M.pair_table(rows, replicated=True)
    if kind == "spread":
        return spread_table(rd, recs)
    if kind == "speed":
        return speed_table(frames, args.get("a", "dflash"), args.get("b", "ar"))
    if kind == "changes":
        return changes_table(rd, root / args["world"])
    raise DraftlabError(f"verdicts block kind {kind!r}: one of arms, suites, pairs, replicates, spread, speed, changes")


def spread_table(rd: dict, recs: list[dict]) -> str:
    base = rd["base"]
    out = ["| replicate | seeds | base drafter τ (T=0) | stages' CPU time | wall time | load average (1 min, max) |",
           "|---|---|---|---|---|---|"]
    for r, tau in zip(recs, base["tau_per_run"]):
        tot = r.get("total") or {}
        load = max((t["load_after"][0] for t in (r.get("times") or {}).values()), default=None)
        out.append(f"| {Path(r['folder']).name} | {r['seed']} | {M.num(tau, '.2f')} | {M.num(tot.get('cpu_s', 0) / 60, '.1f')} min "
                   f"| {M.num(tot.get('wall_s', 0) / 60, '.1f')} min | {M.num(load, '.2f')} |")
    res = rd["resolution"]
    out += ["", f"Base drafter (`{base['arm']}`) τ over {base['units']['n']} runs: sd {M.num(base['sd'], '.3f')}, range "
                f"{M.num(base['range'][0], '.2f')}–{M.num(base['range'][1], '.2f')}. Smallest |Δτ| a primary pair's "
                f"interval excludes 0 at its observed spread: median {M.num(res['median_resolvable_tau_diff'], '.3f')} "
                f"(range {M.num((res['range'] or [None])[0], '.3f')}–{M.num((res['range'] or [None, None])[1], '.3f')})."]
    return "\n".join(out)


def speed_table(frames: list, a: str, b: str) -> str:
    out = [f"| `{a}` ÷ `{b}`, T=0 | timing unit | per suite | total time (pooled) | geometric mean | per run |",
           "|---|---|---|---|---|---|"]
    for label, samples, streams in (("the suites' lockstep batches", ("headline",), None),
                                    ("one stream (the sweep's 1-stream section)", ("sweep",), 1)):
        s = R.pooled_speed(frames, a, b, 0.0, samples, streams)
        if s.get("") is None:
            continue
        per = ", ".join(f"{k} {M.num(v, '.3f')}×" for k, v in (s.get("_per_suite") or {}).items())
        runs = ", ".join(f"{M.num(v, '.3f')}×" for v in s.get("_per_run") or [])
        out.append(f"| {label} | {M.units(s['_units'])} | {per} | {M.num(s[''], '.3f')}× | "
                   f"{M.num(s['_geomean'], '.3f')}× | {runs} |")
    return "\n".join(out)


def changes_table(rd: dict, world: Path) -> str:
    """Each primary pair: the committed single-run reading (the world's toy_report.json family rows over all
    families) beside the replicated one."""
    old = {}
    rep = world / paths.TOY_REPORT
    if rep.exists():
        for r in json.loads(rep.read_text()).get("family_pairs") or []:
            if r.get("family") == "all":
                old[(r["pair"], 0.0 if r["temperature"] == "t0" else 1.0)] = r
    out = ["| pair | T | single run (committed, 1 training run) | verdict then | replicated | verdict now |",
           "|---|---|---|---|---|---|"]
    for r in rd["primary"]:
        o = old.get((r["pair"], r["temperature"]))
        then = (M.num(o["tau_diff"], ".3f", True) + M.ci(o.get("tau_diff_ci"), ".3f", True)) if o else "–"
        now = M.num(r.get("tau_diff"), ".3f", True) + M.ci(r.get("tau_diff_ci"), ".3f", True)
        out.append(f"| {r['pair']} | {r['temperature']:g} | {then} | {o.get('verdict') if o else '–'} | {now} | "
                   f"{r.get('verdict_holm') or r.get('verdict')} |")
    return "\n".join(out)


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
            plan, recs, frames, rd = load("world", Path(a.world))
            print(M.pair_table(rd["primary"] + rd["secondary"], replicated=True))
            print()
            print(spread_table(rd, recs))
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
