"""Replicates of a world's method stages: the stages from the plain drafter on, run again with other seeds, each in a
write-once folder beside the world's run (docs/toy-world.md "Replicates"; docs/decisions.md "Replicates in the toy
world").

A replicate set belongs to one *base*: the world (its config hash) and the target and references its stages read.
`freeze_base` copies the world folder's prepared target and references (and its plain drafter, when trained) into
`replicates/<tid>/base/` (tid: the first 12 hex digits of the target weights' md5), with `base.json` naming the world
hash and the md5s; the base is small
(the toy target is 7 MB) and lives in git, so nobody has to retrain it. `run_replicate(world, seed)` then makes
`replicates/<tid>/seed-<seed>/`: the world's params.yaml with the replicate's seeds (`SEED_KEYS`: initialisation and
data order of every training stage) and tracking off, links to the base and the world's prompt files, and runs
`STAGES` one after the other as their own processes (the command `dvc repro` runs, `python -m draftlab.pipeline <stage>`, so a replicate
is the pipeline's code path), timing each (wall and CPU seconds of the stage's process, the load average around it) into
`replicate.json` after every stage. The training stages run on the params' step budgets, so a loaded machine changes
a replicate's time, never its models.

Nothing is lost: a finished replicate is never run again (the same seed is one line: choose another); an unfinished
one continues only with `resume=True` (each stage resumes from its own checkpoints); every record is written to a
temp file and renamed. What git keeps of a replicate: replicate.json, params.yaml, results/, metrics/, plots/ and the
plain drafter (models/drafter/pretrained: a world's small model); the rest (links, data/, checkpoints/, the other
models) is ignored (.gitignore)."""
from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from draftlab import paths
from draftlab.errors import DraftlabError
from draftlab.io import atomic_write, file_hash, write_json
from draftlab.pipeline.table import RUNNER

REPLICATES = paths.REPLICATES  # inside a world's folder
BASE = "base"
BASE_RECORD = "base.json"
RECORD = "replicate.json"
STAGES = ("check_params", "pretrain_drafter", "pretrain_seeded", "specopd", "corrector", "benchmark")
# the seeds a replicate sets: torch's global seed (stage_main) and each training section's initialisation and data order
SEED_KEYS = ("profile.seed", "pretrain.seed", "specopd.seed", "corrector.seed")
ROOT = Path(__file__).resolve().parents[3]
LAUNCH = (sys.executable, "-m", RUNNER)  # + the stage's name: the command dvc.yaml runs (draftlab.pipeline.table)
WEIGHTS = "model.safetensors"


def md5_file(path: str | Path) -> str:
    return file_hash(path, "md5")


def target_md5(folder: str | Path) -> str:
    """The md5 of a prepared target's weights (what names a base: replicates of two targets are never mixed)."""
    f = Path(folder) / WEIGHTS
    if not f.exists():
        raise DraftlabError(f"{folder}: no {WEIGHTS}; prepare the world's target first (cd worlds/<world> && dvc repro "
                            f"prepare_target)")
    return md5_file(f)


def base_dir(world: Path, tid: str) -> Path:
    return Path(world) / REPLICATES / tid / BASE


def freeze_base(world: str | Path) -> dict:
    """Copy the world folder's target and references (and its plain drafter, when trained) into replicates/<tid>/base/
    once (write-once: an existing base of the same target is left as it is) -> its record."""
    world = Path(world).resolve()
    target, refs = world / paths.TARGET, world / paths.REFERENCES
    if not refs.exists():
        raise DraftlabError(f"{refs} not found: run the world's reference stage first (cd {world} && dvc repro reference)")
    md5 = target_md5(target)
    out = base_dir(world, md5[:12])
    if (out / BASE_RECORD).exists():
        return json.loads((out / BASE_RECORD).read_text())
    from draftlab.toy.freeze import target_world_hash

    rec = {"world_hash": target_world_hash(target), "target_md5": md5, "references_md5": md5_file(refs),
           "made": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "from": f"{world.name}'s {paths.TARGET} and {paths.REFERENCES} (its dvc.lock records the stages that made them)"}
    tmp = out.parent / (BASE + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    shutil.copytree(target, tmp / "target")
    shutil.copy2(refs, tmp / "references.parquet")
    drafter = world / paths.PLAIN_DRAFTER
    if (drafter / WEIGHTS).exists():  # the world's own plain drafter: a first reading can start from it (seed 0)
        shutil.copytree(drafter, tmp / "drafter")
        rec["drafter_md5"] = md5_file(drafter / WEIGHTS)
    write_json(tmp / BASE_RECORD, rec)
    tmp.rename(out)
    return rec


def read_base(world: str | Path, tid: str | None = None) -> tuple[Path, dict]:
    """(folder, record) of the world's base: `tid` given, that one; else the one of the world's prepared target."""
    world = Path(world)
    if tid is None:
        tid = target_md5(world / paths.TARGET)[:12]
    folder = base_dir(world, tid)
    if not (folder / BASE_RECORD).exists():
        raise DraftlabError(f"no base {folder}: freeze the world's prepared target first (python ../../tools/toy_world.py "
                            f"replicate --freeze-base)")
    return folder, json.loads((folder / BASE_RECORD).read_text())


def folder_for(world: str | Path, tid: str, seed: int) -> Path:
    return Path(world) / REPLICATES / tid / f"seed-{seed}"


def replicate_params(world_params: dict, seed: int) -> dict:
    """The world's params with the replicate's seeds and tracking off (a replicate's runs are its files)."""
    import copy

    p = copy.deepcopy(world_params)
    for dotted in SEED_KEYS:
        sec, key = dotted.split(".")
        p.setdefault(sec, {})[key] = seed
    p.setdefault("tracking", {})["enabled"] = False
    return p


def write_params(out: Path, params: dict, header: str) -> None:
    """A run folder's params.yaml under a one-line comment saying what made it (written to a temp file, renamed)."""
    import yaml

    atomic_write(out / paths.PARAMS, lambda p: p.write_text(f"# {header}\n" + yaml.safe_dump(params, sort_keys=False)))


def link_base(out: Path, base: Path, world: Path) -> None:
    """A run folder's links to the base's target and references and to the world's prompt files."""
    link(out / paths.TARGET, base / "target")
    link(out / paths.REFERENCES, base / "references.parquet")
    link(out / "prompts", world / "prompts")


def link(link: Path, to: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        return
    link.symlink_to(os.path.relpath(to, link.parent))


def _cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_replicate(world: str | Path, seed: int, resume: bool = False, stages: tuple[str, ...] = STAGES,
                  log=print, launch: tuple[str, ...] = LAUNCH) -> dict:
    """Run (or, with `resume`, continue) the replicate `seed` of the world's base in its own folder -> its record."""
    import yaml

    from draftlab.checks.common import git_sha

    world = Path(world).resolve()
    base, brec = read_base(world)
    tid = brec["target_md5"][:12]
    out = folder_for(world, tid, seed)
    rec_path = out / RECORD
    if rec_path.exists():
        rec = json.loads(rec_path.read_text())
        if rec.get("status") == "complete":
            raise DraftlabError(f"replicate seed {seed} of target {tid} is finished ({out}): a replicate folder is "
                                f"written once; choose another --seed")
        if not resume:
            raise DraftlabError(f"replicate seed {seed} of target {tid} is unfinished ({out}, stages done: "
                                f"{', '.join(rec.get('done', [])) or 'none'}): --resume continues it")
    elif out.exists() and any(out.iterdir()) and not resume:
        raise DraftlabError(f"{out} exists without {RECORD}: not a replicate this command wrote; move it away first")
    else:
        rec = None
    world_params = yaml.safe_load((world / paths.PARAMS).read_text())
    params = replicate_params(world_params, seed)
    out.mkdir(parents=True, exist_ok=True)
    if rec is None:
        write_params(out, params, f"replicate seed {seed} of {world.name}'s target {tid}: the world's params.yaml with "
                                  f"the seeds {', '.join(SEED_KEYS)} = {seed}, tracking off (draftlab.pipeline.replicate)")
        rec = {"schema": "draftlab-replicate-v1", "world": world.name, "world_hash": brec["world_hash"],
               "target_md5": brec["target_md5"], "references_md5": brec["references_md5"], "seed": seed,
               "seeds": {k: seed for k in SEED_KEYS}, "stages": list(stages), "done": [], "times": {},
               "status": "running", "git_sha": git_sha(ROOT),
               "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
               "budgets": _budgets(params), "threads": params.get("profile", {}).get("threads"),
               "omp_wait_policy": params.get("profile", {}).get("omp_wait_policy"), "cpu": cpu_model()}
    elif yaml.safe_load((out / paths.PARAMS).read_text()) != params:
        raise DraftlabError(f"{out / paths.PARAMS} differs from the world's params.yaml with seed {seed}: the world's "
                            f"settings changed since the replicate started; finish it with the old settings or start "
                            f"another seed")
    link_base(out, base, world)
    write_json(rec_path, rec)
    run_stages(out, rec, stages, f"replicate seed {seed}", log, launch)
    return rec


def run_stages(out: Path, rec: dict, stages: tuple[str, ...], what: str, log=print, launch: tuple[str, ...] = LAUNCH,
               record: str = RECORD) -> None:
    """Run each stage not yet in rec["done"] as its own process in `out` (`[*launch, stage]`: the command `dvc repro`
    runs; a test hands in a stub's), timing
    it (wall and CPU seconds, the load average around it) into out/`record` after every stage; a failed stage is one
    line naming its log (the record says where it stopped; --resume continues)."""
    rec_path = out / record
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "TOKENIZERS_PARALLELISM": "false", "TQDM_DISABLE": "1"}
    if env.get("PYTHONPATH"):  # the stages run in the run's folder: a relative entry (a family's package) made absolute
        env["PYTHONPATH"] = os.pathsep.join(str(Path(e).resolve()) if e else e for e in env["PYTHONPATH"].split(os.pathsep))
    for stage in stages:
        if stage in rec["done"]:
            continue
        log(f"[{what}] {stage} ...")
        load0, cpu0, t0 = os.getloadavg(), _cpu_children(), time.perf_counter()
        with open(out / f"{stage}.log", "a") as f:
            code = subprocess.call([*launch, stage], cwd=out, env=env, stdout=f,
                                   stderr=subprocess.STDOUT)
        wall, cpu = time.perf_counter() - t0, _cpu_children() - cpu0
        if code != 0:
            rec["status"] = f"failed at {stage}"
            write_json(rec_path, rec)
            raise DraftlabError(f"{what}: stage {stage} failed (exit {code}); its log: {out / (stage + '.log')}; fix "
                                f"it and run again with --resume")
        rec["done"].append(stage)
        rec["times"][stage] = {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
                               "load_before": [round(x, 2) for x in load0],
                               "load_after": [round(x, 2) for x in os.getloadavg()]}
        write_json(rec_path, rec)
        log(f"[{what}] {stage} done in {wall:.0f} s (CPU {cpu:.0f} s)")
    if all(s in rec["done"] for s in stages):
        rec["status"] = "complete"
        rec["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        rec["total"] = {"wall_s": round(sum(t["wall_s"] for t in rec["times"].values()), 1),
                        "cpu_s": round(sum(t["cpu_s"] for t in rec["times"].values()), 1)}
        write_json(rec_path, rec)


def _budgets(params: dict) -> dict:
    """The training budgets a replicate ran on (its record says so beside its times)."""
    g = lambda sec, k: (params.get(sec) or {}).get(k)  # noqa: E731
    return {"pretrain.max_steps": g("pretrain", "max_steps"), "pretrain.max_minutes": g("pretrain", "max_minutes"),
            "seeded.pretrain": (params.get("seeded") or {}).get("pretrain"),
            "specopd.max_steps": g("specopd", "max_steps"), "specopd.max_minutes": g("specopd", "max_minutes"),
            "corrector.max_steps": g("corrector", "max_steps"), "corrector.variant_steps": g("corrector", "variant_steps")}


def cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def list_replicates(world: str | Path) -> list[tuple[Path, dict]]:
    """Every replicate folder under the world's replicates/ with its record (finished or not), by path."""
    root = Path(world) / REPLICATES
    out = []
    for rec in sorted(root.glob(f"*/seed-*/{RECORD}")):
        out.append((rec.parent, json.loads(rec.read_text())))
    return out
