"""An addition to a world's replicated reading: arms that train nothing new (a corrector's sampled walk, another rule
on trained models) benchmarked on each finished replicate's own models, read under a plan of their own (docs/toy-world.md
"Additions"; docs/decisions.md "Additions to a frozen world's replicates").

An addition is a folder `<world>/additions/<name>/` holding its analysis plan (analysis_plan.yaml, committed before any
of its runs) and, per replicate seed N, the run `replicates/<tid>/seed-N/` — laid out as a world's replicates, so
`draftlab verdicts --world <world>/additions/<name>` reads it with the same code and rules (per-prompt units, runs x
prompts, Holm over the plan's primary pairs). A run is written once: the replicate's params.yaml with the benchmark cut
to the plan's arms at the plan's temperatures (every arm at every one of them, the plan's pairs as the benchmark's),
links to the world's base, its prompts and the replicate's trained drafters and correctors, then `check_params` and
`benchmark` as their own processes, timed into replicate.json (`replicate.run_stages`). An addition may carry a
labelled recipe (addition.yaml: params overrides and the corrector variants it co-trains again under them, e.g. on
references sampled at T=1): then its runs make their references (`reference`, when the overrides touch it) and train
those variants (`corrector`) on the replicate's plain drafter before the benchmark; the replicate's own models stay
as they are. Every pair is read inside one
run (both arms on the same prompts in the same benchmark), never across an addition and its replicate.
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from draftlab import paths
from draftlab.errors import DraftlabError
from draftlab.io import write_json
from draftlab.pipeline.replicate import (RECORD, ROOT, cpu_model, folder_for, link, read_base, run_stages,
                                        write_params)

ADDITIONS = "additions"  # in a world's folder
STAGES = ("check_params", "benchmark")
RECIPE = "addition.yaml"  # an addition that trains: its labelled recipe (optional; none = decode the replicate's models)


def addition_folder(world: Path, name: str) -> Path:
    return Path(world) / ADDITIONS / name


def read_recipe(home: Path) -> dict:
    """An addition's labelled recipe (addition.yaml): `overrides` (dotted params keys -> values, e.g.
    reference.temperature: 1.0) and `train` (the corrector variants it co-trains again under them, on the replicate's
    plain drafter); {} when the addition trains nothing. One line for anything else."""
    import yaml

    f = home / RECIPE
    if not f.exists():
        return {}
    raw = yaml.safe_load(f.read_text()) or {}
    bad = sorted(set(raw) - {"about", "overrides", "train"})
    if bad or not isinstance(raw.get("overrides", {}), dict) or not isinstance(raw.get("train", []), list):
        raise DraftlabError(f"{f}: an addition's recipe holds `about`, `overrides` (a mapping of dotted params keys) "
                            f"and `train` (a list of corrector variants){'; unknown: ' + ', '.join(bad) if bad else ''}")
    return raw


def schema_keys(section: str) -> set[str]:
    """The keys the configuration knows in `section` (a key left at its default is absent from a params.yaml)."""
    from dataclasses import fields

    from draftlab.config.sections import Params

    kind = {f.name: f.default_factory for f in fields(Params)}.get(section)
    return {f.name for f in fields(kind())} if kind is not None else set()


def addition_params(replicate_params: dict, arms: list[str], temperatures: list[float], pairs: list,
                    recipe: dict | None = None) -> dict:
    """The replicate's params with the recipe's overrides (and the corrector stage cut to its `train` variants, no
    control), the benchmark cut to `arms` at `temperatures` (every arm at each) and `pairs`."""
    import copy

    p = copy.deepcopy(replicate_params)
    recipe = recipe or {}
    for dotted, value in (recipe.get("overrides") or {}).items():
        sec, _, key = str(dotted).partition(".")
        if sec not in p or not key or (key not in p[sec] and key not in schema_keys(sec)):
            raise DraftlabError(f"addition recipe: {dotted} is not a params key of the replicate (section.key)")
        p[sec][key] = value
    if recipe.get("train"):
        p["corrector"].update(variants=list(recipe["train"]), control=False)
        steps = p["corrector"].get("variant_steps") or {}
        p["corrector"]["variant_steps"] = {v: n for v, n in steps.items() if v in recipe["train"]}
    p["benchmark"].update(arms=list(arms), ablation_arms=[], sampled_arms=[], concurrency=[], concurrency_arms=[],
                          temperatures=list(temperatures), pairs=[list(x) for x in pairs])
    p.setdefault("tracking", {})["enabled"] = False
    return p


def run_addition(world: str | Path, name: str, seed: int, plan, resume: bool = False, log=print, **run) -> dict:
    """Run (or, with `resume`, continue) the addition `name` on replicate `seed` -> its record. `plan`: the addition's
    analysis plan as `draftlab.verdicts.plan.read_plan` reads additions/<name>/analysis_plan.yaml (its pairs fix the
    arms and temperatures; the caller reads it first, so a missing plan is one line before anything runs)."""
    import yaml

    from draftlab.checks.common import git_sha

    world = Path(world).resolve()
    home = addition_folder(world, name)
    recipe = read_recipe(home)
    base, brec = read_base(world)
    tid = brec["target_md5"][:12]
    source = folder_for(world, tid, seed)
    if not (source / RECORD).exists() or json.loads((source / RECORD).read_text()).get("status") != "complete":
        raise DraftlabError(f"no finished replicate seed {seed} of target {tid} ({source}): an addition decodes its "
                            f"trained models; run `python ../../tools/toy_world.py replicate --seed {seed}` first")
    if plan.world_hash and plan.world_hash != brec["world_hash"]:
        raise DraftlabError(f"the plan of {home} names world {plan.world_hash[:12]}, the base is {brec['world_hash'][:12]}")
    arms = list(dict.fromkeys(a for pair in plan.pairs for a in pair[:2]))
    temps = sorted({t for *_, t in plan.pairs})
    pairs = list(dict.fromkeys((a, b) for a, b, _ in plan.pairs))
    out = folder_for(home, tid, seed)
    rec = json.loads((out / RECORD).read_text()) if (out / RECORD).exists() else None
    if rec is not None and rec.get("status") == "complete":
        raise DraftlabError(f"the addition {name} on seed {seed} is finished ({out}): written once")
    if rec is not None and not resume:
        raise DraftlabError(f"the addition {name} on seed {seed} is unfinished ({out}): --resume continues it")
    if rec is None and out.exists() and any(out.iterdir()):
        raise DraftlabError(f"{out} exists without {RECORD}: not a run this command wrote; move it away first")
    trains = bool(recipe.get("train"))
    refs = any(str(k).startswith("reference.") for k in (recipe.get("overrides") or {}))  # references made again
    stages = ("check_params", *(("reference",) if refs else ()), *(("corrector",) if trains else ()), "benchmark")
    params = addition_params(yaml.safe_load((source / paths.PARAMS).read_text()), arms, temps, pairs, recipe)
    out.mkdir(parents=True, exist_ok=True)
    if rec is None:
        write_params(out, params, f"the addition {name} on replicate seed {seed} of {world.name}'s target {tid}: the "
                                  f"replicate's params with the benchmark cut to the plan's arms (draftlab.pipeline.addition)")
        rec = {"schema": "draftlab-addition-v1", "world": world.name, "addition": name, "world_hash": brec["world_hash"],
               "target_md5": brec["target_md5"], "references_md5": brec["references_md5"], "seed": seed,
               "replicate": str(Path("..", "..", "..", "..", paths.REPLICATES, tid, f"seed-{seed}")),
               "arms": arms, "temperatures": temps, "recipe": recipe, "stages": list(stages), "done": [], "times": {},
               "status": "running", "git_sha": git_sha(ROOT),
               "started": datetime.now(timezone.utc).isoformat(timespec="seconds"), "cpu": cpu_model()}
    link(out / paths.TARGET, base / "target")
    link(out / "prompts", world / "prompts")
    if not refs:
        link(out / paths.REFERENCES, base / "references.parquet")
    # an addition that trains nothing decodes every drafter the replicate trained (plain, seeded, SpecOPD's, the
    # long baseline); one that co-trains reads the plain drafter only, as its variants start from it
    drafters = (source / paths.PLAIN_DRAFTER).parent
    for drafter in sorted(drafters.iterdir()) if not trains else [source / paths.PLAIN_DRAFTER]:
        link(out / Path(paths.PLAIN_DRAFTER).parent / drafter.name, drafter)
    if not trains:
        link(out / paths.CORRECTORS, source / paths.CORRECTORS)
    write_json(out / RECORD, rec)
    run_stages(out, rec, tuple(rec["stages"]), f"addition {name} seed {seed}", log=log, **run)
    return rec
