"""The generated blocks of the docs: every current figure of README.md, docs/results.md and docs/toy-world.md sits
between `<!-- verdicts: KIND key=value ... -->` and `<!-- /verdicts -->`, and `draftlab verdicts` renders each one
from committed files alone (`render_block`). `check` lists the blocks that differ from what the command prints, and
the brackets `[lo, hi]` that sit outside a block in a doc's current part (everything above its
`<!-- history -->` line: what follows is the history of runs whose per-prompt files are gone, as those runs printed it).

Kinds (paths relative to the repository root):
- `arms run=DIR t=T arms=a,b,...`: each arm's τ and speed against AR (total time) at temperature T;
- `suites run=DIR t=T arms=...`: every per-suite speed ratio beside the total-time ratio and the geometric mean;
- `pairs run=DIR [t=T]`: the run's benchmark.pairs read at the prompt unit (a run without a plan: nominal);
- `replicates world=DIR family=primary|secondary`: the plan's pairs over the world's replicates (Holm column);
- `spread world=DIR`: the base drafter's τ per replicate, the design's resolution, each replicate's CPU time;
- `speed world=DIR a=ARM b=ARM`: a ÷ b speed per suite and per run, pooled over the replicates (batches and the
  one-stream section);
- `changes world=DIR`: each primary pair's committed single-run reading beside the replicated one;
- `calibration world=DIR`: an addition's calibration.json (draftlab.pipeline.calibration): each arm's share of `+`
  among the marks it proposed beside the target's among those emitted, and its acceptance share per slot."""
from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

from draftlab import paths
from draftlab.errors import DraftlabError
from draftlab.verdicts import reading as R, render as M

DOCS = ("README.md", "docs/results.md", "docs/toy-world.md")
BEGIN = re.compile(r"^<!-- verdicts: (?P<spec>[^>]*?) -->$")
END = "<!-- /verdicts -->"
HISTORY = "<!-- history -->"
INTERVAL = re.compile(r"\[[+−-]?\d+(?:\.\d+)?×?, [+−-]?\d+(?:\.\d+)?×?\]")


def parse_spec(spec: str) -> tuple[str, dict]:
    kind, *rest = spec.split()
    args = {}
    for part in rest:
        if "=" not in part:
            raise DraftlabError(f"verdicts block '{spec}': '{part}' is not key=value")
        k, v = part.split("=", 1)
        args[k] = v
    return kind, args


def blocks(text: str) -> list[tuple[int, int, str]]:
    """(line of the begin marker, line of the end marker, spec) of every block, in order; an unclosed one is an error."""
    lines, out, open_ = text.splitlines(), [], None
    for i, line in enumerate(lines):
        m = BEGIN.match(line.strip())
        if m:
            if open_ is not None:
                raise DraftlabError(f"verdicts block at line {open_[0] + 1} is not closed before line {i + 1}")
            open_ = (i, m.group("spec"))
        elif line.strip() == END:
            if open_ is None:
                raise DraftlabError(f"'{END}' at line {i + 1} closes no block")
            out.append((open_[0], i, open_[1]))
            open_ = None
    if open_ is not None:
        raise DraftlabError(f"verdicts block at line {open_[0] + 1} is not closed")
    return out


def render_block(spec: str, root: Path) -> str:
    kind, args = parse_spec(spec)
    return render(kind, args, root)


def render(kind: str, args: dict, root: Path) -> str:
    """One block's table from the committed files it names (run=DIR: a run's per-prompt records; world=DIR: a world's
    replicates read with its plan)."""
    if kind in ("arms", "suites", "pairs"):
        df, cfg = cached("run", str(root / args.get("run", ".")))
        t = float(args.get("t", 0))
        if kind == "pairs":
            temps = [t] if "t" in args else sorted(set(df.temperature))
            pairs = [(a, b, tt) for tt in temps for a, b in cfg.get("pairs") or [] if "best" not in (a, b)
                     and not R._rows(df, a, tt).empty and not R._rows(df, b, tt).empty]
            return M.pair_table([R.pair_row(df, a, b, tt) for a, b, tt in pairs])
        arms = args["arms"].split(",") if "arms" in args else list(cfg.get("arms") or [])
        rows = [R.arm_row(df, a, t) for a in arms if not R._rows(df, a, t).empty]
        return M.arm_table(rows) if kind == "arms" else M.suite_table(rows)
    if "world" not in args:
        raise DraftlabError(f"verdicts block kind {kind!r} needs world=DIR")
    if kind == "calibration":
        f = root / args["world"] / "calibration.json"
        if not f.exists():
            raise DraftlabError(f"{f} not found: an addition's runs write it (toy_world.py addition)")
        return M.calibration_table(json.loads(f.read_text()))
    plan, recs, frames, rd = cached("world", str(root / args["world"]))
    if kind == "replicates":
        rows = rd[args.get("family", "primary")]
        return M.compact_table(rows) if args.get("compact") == "1" else M.pair_table(rows, replicated=True)
    if kind == "spread":
        return M.spread_table(rd, recs)
    if kind == "speed":
        return M.speed_table(frames, args.get("a", "dflash"), args.get("b", "ar"))
    if kind == "changes":
        return M.changes_table(rd, root / args["world"])
    raise DraftlabError(f"verdicts block kind {kind!r}: one of arms, suites, pairs, replicates, spread, speed, changes, "
                        f"calibration")


def rewrite(text: str, root: Path) -> str:
    lines = text.splitlines()
    for b, e, spec in reversed(blocks(text)):
        body = render_block(spec, root).splitlines()
        lines[b + 1:e] = body
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")


def stray_intervals(text: str) -> list[tuple[int, str]]:
    """(line number, interval) of every bracketed interval in the doc's current part outside a block."""
    lines = text.splitlines()
    inside = set()
    for b, e, _ in blocks(text):
        inside.update(range(b, e + 1))
    out = []
    for i, line in enumerate(lines):
        if line.strip() == HISTORY:
            break
        if i in inside:
            continue
        out += [(i + 1, m.group(0)) for m in INTERVAL.finditer(line)]
    return out


def check(root: Path, docs=DOCS) -> list[str]:
    """One line per problem: a block that differs from what `draftlab verdicts` prints, a stray interval."""
    problems = []
    for d in docs:
        path = root / d
        if not path.exists():
            continue
        text = path.read_text()
        for b, e, spec in blocks(text):
            have = "\n".join(text.splitlines()[b + 1:e])
            if have.strip() != render_block(spec, root).strip():
                problems.append(f"{d}:{b + 1}: block '{spec}' differs from what `draftlab verdicts` prints "
                                f"(run `draftlab verdicts --write-docs`)")
        for line, iv in stray_intervals(text):
            problems.append(f"{d}:{line}: interval {iv} outside a generated block in the doc's current part (put it in "
                            f"a `<!-- verdicts: ... -->` block, or below the doc's `{HISTORY}` line if its files are gone)")
    return problems


@lru_cache(maxsize=None)
def cached(kind: str, path: str):
    """Readings shared by several blocks of one command (a run's records, a world's replicates)."""
    return load(kind, Path(path))


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
