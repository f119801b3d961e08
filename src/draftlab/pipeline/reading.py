"""A new corrector's first reading in a frozen world: one run of its stage and the benchmark, in minutes, on what the
world keeps in git (docs/toy-world.md "Trying a new corrector here").

The world's base (replicates/<tid>/base/: its target and references, and the world's own plain drafter where the base
was frozen after it trained) and each finished replicate's plain drafter (replicates/<tid>/seed-N/models/drafter/
pretrained) are committed, so nothing before the corrector stage runs again. `first_reading(world, arm, seed)` makes
`replicates/<tid>/reading-<arm>-seed-<seed>/` (written once, like a replicate): the replicate's params.yaml (its seeds
and every budget the world froze; seed 0: the world's own params.yaml and the base's drafter, tracking off) with `corrector.variants` = the variants the
arm decodes, the dflash-long control on (the plain drafter alone, as many updates: every corrector's first comparison),
and the benchmark cut to `dflash`, `dflash-long` and the arm at T=0 with their pairs; links to the base, the world's
prompts and the replicate's plain drafter; then `check_params`, `corrector` and `benchmark` as their own processes,
timed into reading.json (`replicate.run_stages`) beside what `draftlab plan` predicted for them (`planned_s`). An
outside family (`families`: its module, e.g. examples/families' `lastrank.lastrank` on PYTHONPATH) joins the reading's
params with its preset filled in (`with_families`). The reading is one run: its pairs are the benchmark's (per prompt,
descriptive beside the world's replicated verdicts); a verdict is the replicates with the arm added to the plan.
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from draftlab import paths
from draftlab.errors import DraftlabError
from draftlab.io import write_json
from draftlab.pipeline.replicate import (RECORD, ROOT, cpu_model, folder_for, link, link_base, read_base,
                                        run_stages, write_params)

READING = "reading.json"  # a reading's record (a replicate's is RECORD)

STAGES = ("check_params", "corrector", "benchmark")
CONTROL_ARM, PLAIN_ARM = "dflash-long", "dflash"


def reading_folder(world: Path, tid: str, arm: str, seed: int) -> Path:
    return Path(world) / paths.REPLICATES / tid / f"reading-{arm}-seed-{seed}"


def reading_params(replicate_params: dict, arm: str, variants: list[str]) -> dict:
    """The replicate's params with the corrector stage cut to the arm's variants (and the control) and the benchmark to
    the plain drafter, the control and the arm at T=0."""
    import copy

    from draftlab.params import with_family_presets

    p = copy.deepcopy(replicate_params)
    p["corrector"]["variants"] = list(variants)
    p = with_family_presets(p)  # an added family's settings and its variants' step budgets (its preset)
    p["corrector"]["control"] = True  # trained as many updates as the first variant (the recipe's main one)
    steps = p["corrector"].get("variant_steps") or {}
    p["corrector"]["variant_steps"] = {v: n for v, n in steps.items() if v in variants}
    arms = list(dict.fromkeys([PLAIN_ARM, CONTROL_ARM, arm]))
    p["benchmark"].update(arms=arms, ablation_arms=[], sampled_arms=[], concurrency=[], concurrency_arms=[],
                          temperatures=[0.0], pairs=[[arm, CONTROL_ARM], [arm, PLAIN_ARM], [CONTROL_ARM, PLAIN_ARM]])
    return p


def arm_variants(arm: str) -> list[str]:
    """The corrector variants the arm decodes (the control aside); one line for an arm the grammar does not know."""
    from draftlab.arms.grammar import CONTROL, resolve

    try:
        factory = resolve(arm)
    except (DraftlabError, KeyError, ValueError) as e:
        raise DraftlabError(f"reading: {e}; name a corrector's benchmark arm (the arm table, "
                            f"draftlab/arms/grammar.py) or give --variants") from None
    return [v for v in getattr(factory, "variants", ()) if v != CONTROL]


def with_families(params: dict, modules: list[str]) -> dict:
    """The params with the family modules added to `corrector.family_modules`, those families made this process's (the
    arm grammar then knows their arms: `draftlab.corrector.families.use`); their presets are filled in once the
    reading's variants are set (`reading_params`)."""
    from draftlab.corrector.families import use

    c = params.setdefault("corrector", {})
    c["family_modules"] = list(dict.fromkeys([*(c.get("family_modules") or []), *modules]))
    use(tuple(c["family_modules"]))
    return params


def planned_seconds(params: dict, stages: tuple[str, ...], target: Path) -> dict[str, float]:
    """What `draftlab plan` predicts for the reading's stages on this machine's CPU, seconds per stage it plans
    (check_params is not planned); target: the prepared target's folder (its shape)."""
    from draftlab.params import build_params
    from draftlab.pipeline.names import method_names
    from draftlab.plan.arch import target_shape
    from draftlab.plan.stages import Device, plan

    p = build_params(params, names=method_names())
    return {s.name: round(s.hours * 3600, 1) for s in plan(p, target_shape(p.target, target), Device.of("cpu"))
            if s.name in stages}


def first_reading(world: str | Path, arm: str, seed: int = 1, variants: list[str] | None = None,
                  resume: bool = False, log=print, stages: tuple[str, ...] = STAGES, families: list[str] = (),
                  **run) -> dict:
    """Run (or, with `resume`, continue) the first reading of `arm` on replicate `seed`'s plain drafter -> its record.
    families: corrector family modules to add (an outside family's, e.g. `lastrank.lastrank` from examples/families on
    PYTHONPATH): their presets fill the reading's params and the grammar learns their arms."""
    import yaml

    from draftlab.checks.common import git_sha

    world = Path(world).resolve()
    base, brec = read_base(world)
    tid = brec["target_md5"][:12]
    if seed == 0:  # the world's own plain drafter, kept in its base
        drafter, source_params = base / "drafter", world / paths.PARAMS
        if not (drafter / "model.safetensors").exists():
            raise DraftlabError(f"the base {base} holds no plain drafter (frozen before one trained, or an older base): "
                                f"start from a finished replicate (--seed N)")
    else:
        source = folder_for(world, tid, seed)
        src_rec = source / RECORD
        if not src_rec.exists() or json.loads(src_rec.read_text()).get("status") != "complete":
            raise DraftlabError(f"no finished replicate seed {seed} of target {tid} ({source}): its plain drafter is "
                                f"what a reading starts from; run `python ../../tools/toy_world.py replicate --seed "
                                f"{seed}` first (or --seed 0: the world's own, where its base holds one)")
        drafter, source_params = source / paths.PLAIN_DRAFTER, source / paths.PARAMS
    if arm in (PLAIN_ARM, CONTROL_ARM):
        raise DraftlabError(f"reading: {arm} is what every reading compares with; name a corrector's arm")
    source_raw = yaml.safe_load(source_params.read_text())
    source_raw = with_families(source_raw, list(families)) if families else source_raw
    variants = list(variants) if variants else arm_variants(arm)
    if not variants:
        raise DraftlabError(f"reading: arm {arm} decodes no trained corrector variant; a reading trains one (give "
                            f"--variants, or name a corrector's arm)")
    out = reading_folder(world, tid, arm, seed)
    if (out / READING).exists():
        rec = json.loads((out / READING).read_text())
        if rec.get("status") == "complete":
            raise DraftlabError(f"the reading of {arm} on seed {seed} is finished ({out}): written once; move it away "
                                f"to read again")
        if not resume:
            raise DraftlabError(f"the reading of {arm} on seed {seed} is unfinished ({out}): --resume continues it")
    elif out.exists() and any(out.iterdir()):
        raise DraftlabError(f"{out} exists without {READING}: not a reading this command wrote; move it away first")
    else:
        rec = None
    params = reading_params(source_raw, arm, variants)
    params.setdefault("tracking", {})["enabled"] = False
    try:  # beside the times the stages then take; a plan that cannot be made is said, not fatal
        planned = planned_seconds(params, tuple(stages), base / "target")
        log(f"reading {arm} seed {seed}: planned " + ", ".join(f"{k} ~{v:.0f} s" for k, v in planned.items()))
    except DraftlabError as e:
        planned = {"error": str(e)}
        log(f"reading {arm} seed {seed}: no plan ({e})")
    out.mkdir(parents=True, exist_ok=True)
    if rec is None:
        write_params(out, params, f"the first reading of {arm} on {'the base' if seed == 0 else f'replicate seed {seed}'} "
                                  f"of {world.name}'s target {tid} (draftlab.pipeline.reading)")
        rec = {"schema": "draftlab-reading-v1", "world": world.name, "world_hash": brec["world_hash"],
               "target_md5": brec["target_md5"], "arm": arm, "variants": variants, "seed": seed,
               "plain_drafter": str(Path(paths.PLAIN_DRAFTER)), "stages": list(stages), "done": [], "times": {},
               "status": "running", "git_sha": git_sha(ROOT),
               "started": datetime.now(timezone.utc).isoformat(timespec="seconds"), "cpu": cpu_model(),
               "planned_s": planned}
    link_base(out, base, world)
    link(out / paths.PLAIN_DRAFTER, drafter)
    write_json(out / READING, rec)
    run_stages(out, rec, stages, f"reading {arm} seed {seed}", log=log, record=READING, **run)  # run: launch
    return rec
