"""The per-prompt records every verdict reads, from committed files alone.

`run_records(folder)`: one row per (arm, temperature, sample, prompt) of a run's benchmark — its
`results/benchmark_prompts.csv` (`draftlab.bench.report.prompt_frame`), or, for a run that predates that file, the
per-unit values of its `results/benchmark.json` when each unit is one prompt (a benchmark at batch 1: the `cpu` run
of 2026-12-06); a run whose units are batches of several prompts and that has no per-prompt file is one line (its
prompts' figures are not in git). Columns: `PROMPT_COLUMNS` of the report, `unit` (the key of the unit a timing
belongs to: the batch's index in its group, the same prompts for every arm) and `source` (which file).

`replicate_records(world, plan)`: the finished replicates of one base under `<world>/replicates/`, each checked —
the same world hash and target md5 for all (replicates of different targets are never mixed: one line), every arm
the plan reads present at the temperatures it reads (a partial replicate is one line naming what is missing)."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from draftlab import paths
from draftlab.errors import DraftlabError


def run_records(folder: str | Path) -> pd.DataFrame:
    folder = Path(folder)
    csv = folder / paths.BENCH_PROMPT_RECORDS
    if csv.exists():
        df = pd.read_csv(csv)
        df["source"] = paths.BENCH_PROMPT_RECORDS
        return _typed(df)
    detail = folder / paths.BENCH_DETAIL
    if not detail.exists():
        raise DraftlabError(f"{folder}: no {paths.BENCH_PROMPT_RECORDS} and no {paths.BENCH_DETAIL}: not a finished "
                            f"benchmark run (run its benchmark stage first)")
    return _from_detail(json.loads(detail.read_text()), folder)


def _typed(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    df["temperature"] = df["temperature"].astype(float)
    df["prompt_id"] = df["prompt_id"].astype(str)
    df["loop"] = df["loop"].astype(str).str.lower().isin(("true", "1"))
    return df


def _from_detail(detail: dict, folder: Path) -> pd.DataFrame:
    """Per-prompt rows from a benchmark detail whose units are single prompts (module doc)."""
    rows = []
    for suite, by_t in (detail.get("suites") or {}).items():
        for tk, by_arm in by_t.items():
            for arm, m in by_arm.items():
                pp = m.get("per_prompt") or {}
                ids = pp.get("prompt_id") or []
                if any("," in str(i) for i in ids):
                    raise DraftlabError(f"{folder}: no per-prompt records ({paths.BENCH_PROMPT_RECORDS} is missing and "
                                        f"its {paths.BENCH_DETAIL} has units of several prompts, e.g. {suite}/{arm}); "
                                        f"its prompts' figures are not in git: re-run its benchmark stage")
                extra = pp.get("extra") or []
                for i, pid in enumerate(ids):
                    get = lambda k: (pp.get(k) or [None] * len(ids))[i]  # noqa: E731
                    rows.append({"arm": arm, "temperature": 0.0 if tk == "t0" else float(tk[1:]), "suite": suite,
                                 "sample": "extra" if i < len(extra) and extra[i] else "headline", "streams": 1,
                                 "batch": i, "prompt_id": str(pid), "tokens": get("tokens"), "tau": get("tau"), "rounds": get("rounds"),
                                 "loop": bool(get("loop")), "batch_tokens": get("tokens"), "batch_wall_s": get("wall_s"),
                                 "decode_s": get("wall_s"), "oracle_tau": get("oracle_tau"),
                                 "oracle_tau_reachable": get("oracle_tau_reachable"), "source": paths.BENCH_DETAIL})
    if not rows:
        raise DraftlabError(f"{folder}: its {paths.BENCH_DETAIL} has no per-prompt values (a benchmark before they were "
                            f"recorded): re-run its benchmark stage")
    return _typed(pd.DataFrame(rows))


def replicate_records(world: str | Path, arms_at: set[tuple[str, float]]) -> tuple[list[dict], list[pd.DataFrame]]:
    """(records, per-prompt frames) of the world's finished replicates, checked (module doc); `arms_at`: the
    (arm, temperature) pairs the plan reads."""
    from draftlab.pipeline.replicate import list_replicates

    world = Path(world)
    found = list_replicates(world)
    if not found:
        raise DraftlabError(f"{world}: no replicates (replicates/<target>/seed-N/replicate.json): run them first "
                            f"(cd {world} && python ../../tools/toy_world.py replicate --seed 1 --seed 2 --seed 3)")
    unfinished = [f"{p.name} ({r.get('status')})" for p, r in found if r.get("status") != "complete"]
    if unfinished:
        raise DraftlabError(f"{world}: unfinished replicates {', '.join(unfinished)}: finish them (--resume) or move "
                            f"them away; a verdict reads only whole replicates")
    bases = {(r["world_hash"], r["target_md5"]) for _, r in found}
    if len(bases) > 1:
        names = "; ".join(f"{p.parent.name}/{p.name}: world {r['world_hash'][:12]}, target {r['target_md5'][:12]}"
                          for p, r in found)
        raise DraftlabError(f"{world}: replicates of different worlds or targets ({names}): a verdict reads one base; "
                            f"move the others away")
    recs, frames = [], []
    for p, r in found:
        df = run_records(p)
        have = {(a, float(t)) for a, t in zip(df["arm"], df["temperature"])}
        missing = sorted(f"{a}@T={t:g}" for a, t in arms_at - have)
        if missing:
            raise DraftlabError(f"replicate {p.parent.name}/{p.name} lacks {', '.join(missing)} in its benchmark: a "
                                f"partial replicate cannot enter a verdict (its benchmark ran other arms)")
        recs.append({**r, "folder": str(p)})
        frames.append(df)
    return recs, frames
