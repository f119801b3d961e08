"""The offline regime runner: every stage of a profile in order, without DVC and MLflow, in a work folder, with the
results bundle written after every stage (`tools/gpu_run.py`; docs/gpu.md "The regime run (gpu-small)").

On the device: the pack (`draftlab.offline.pack`) is checked and laid out under <work>/site, first on sys.path (the
wheels only for the modules this Python lacks), the params composed from conf/ with Hydra (from the pack's wheels)
as `dvc exp run -S profile=...` would, tracking off, and each stage's `run(params)` (its entry in the stage table,
draftlab.pipeline.table: draftlab.pipeline.steps.<stage>) called in the table's order in <work> (the stages' paths
are relative: models/, data/, results/ ... land there), after the seed and threads that `stage_main` sets. A stage
that finished with the same params in an earlier run in the same work folder is not run again (<work>/finished.json),
so a second command continues where the first stopped. A failing stage is one line in
bundle.json (the traceback in its log.txt) and ends the run.

`--deadline SECONDS` (wall seconds from the runner's start): the run fits its call and always reports. Before each
stage the plan's eager prediction of it and of the stages after it (`draftlab.plan`) is set against the time left
(less `--reserve`, RESERVE_S by default, kept for the bundle): the training stages' minute budgets are scaled down
together to fit (never below BUDGET_FLOOR of their configured minutes; the budget a stage started with is kept in
<work>/budgets.json, so that a resumed stage keeps its run key and continues its checkpoint); a stage with less than
the reserve left is skipped with a line; and a watchdog (SIGALRM) cuts a running stage at the deadline less the
reserve — it raises
`StageCut`, a training stage writes its checkpoint on the way out, and the bundle keeps the stage with status "cut",
its figures so far (`salvage`) and its log. A cut run exits 3: run the same command again to continue.
Console: everything the stages print (fds 1 and 2 included) goes to <out>/console.txt, without progress bars; the
real console gets one short line per stage. A copy of the bundle stays in <work>/bundle/, so a later call in the same
work folder keeps the earlier stages' times and peak memory although its --out is a fresh folder.
`--dry`: the same at tiny sizes on the tiny random target (conf/offline-dry.yaml), building its own pack first: the
CPU rehearsal.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import shutil
import sys
import time
import traceback
from pathlib import Path

from draftlab import paths
from draftlab.errors import DraftlabError
from draftlab.checks.common import environment, git_sha
from draftlab.io import atomic_write, json_digest
from draftlab.offline import bundle, pack
from draftlab.offline.budgets import BUDGET_FLOOR, BUDGETS, fit_budgets, minutes_of, predictions, with_minutes  # noqa: F401
from draftlab.offline.watch import Console, StageCut, Watchdog, peak_read, peak_reset
from draftlab.pipeline import table

ROOT = Path(__file__).resolve().parents[3]
STAGES = tuple(s.name for s in table.STAGES)  # in run order, from the stage table (dvc.yaml's)
MODULES = ("omegaconf", "hydra", "antlr4", "gguf", "accelerate")  # unpacked from the pack's wheels where missing
RESERVE_S = 20.0  # kept after a cut (--reserve): the stage's checkpoint on the way out, the salvage, the bundle, the
# exit; a stage starts only with at least as much again left
CUT = 3  # the exit code of a run the deadline cut: run the same command again to continue
# no progress bars in what comes back (tqdm >= 4.66 and the Hugging Face libraries read these)
QUIET_ENV = {"TQDM_DISABLE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1"}
DRY_PRESET = ROOT / "conf" / "offline-dry.yaml"  # the rehearsal's sizes (--dry): a list of overrides


def dry_overrides() -> list[str]:
    """The rehearsal's overrides (conf/offline-dry.yaml), applied after profile= and before the command's own."""
    import yaml

    return list(yaml.safe_load(DRY_PRESET.read_text(encoding="utf-8"))["overrides"])


def compose(profile: str, dry: bool, overrides: list[str]):
    """(params, raw dict) of conf/ + profile (+ the dry overrides) + overrides, tracking off: the composition `dvc exp run -S` makes,
    checked against the same name tables as a stage's params."""
    from draftlab.params import build_params, compose_params
    from draftlab.pipeline.names import arm_names, method_names

    ovs = [f"profile={profile}", *(dry_overrides() if dry else []), *overrides, "tracking.enabled=false"]
    arms, names = arm_names(), method_names()
    raw = compose_params(ovs, ROOT / "conf", arms=arms, names=names)
    return build_params(raw, arms=arms, names=names), raw

def load_stage(name: str):
    """The stage's entry module (the stage table's `entry`: draftlab.pipeline.steps.<stage>), whose `run(params)` the
    stage's command (python -m draftlab.pipeline <stage>) hands to stage_main."""
    import importlib

    return importlib.import_module(table.BY_NAME[name].entry)

def salvage(name: str, since: float) -> dict:
    """The figures so far of a stage cut short, from what it wrote as it went: the reference's finished shards, a
    training stage's last checkpoint (progress.json beside each last.ckpt), the benchmark's finished batch groups."""
    try:
        if name == "reference":
            folder = Path(paths.REFERENCE_SHARDS)
            plan = json.loads((folder / "plan.json").read_text()) if (folder / "plan.json").is_file() else {}
            return {"batches_done": len(list(folder.glob("batch-*.parquet"))), "batches": len(plan.get("batches", []))}
        if name == "benchmark":
            return _benchmark_so_far(Path(paths.BENCH_RECORD))
        runs = {}
        for f in sorted(Path(paths.work(name)).rglob("progress.json")):
            if f.stat().st_mtime < since - 1:
                continue
            d = json.loads(f.read_text())
            hist = d.get("history") or []
            runs[str(f.parent.relative_to(paths.work(name)))] = {
                "step": d.get("step"), "train_minutes": round(d.get("train_seconds", 0.0) / 60, 3), "loss": d.get("last_loss"),
                "best_step": d.get("best_step"), "best_sim_tau": d.get("best_sim_tau"),
                "validations": len(hist), "last_validation": hist[-1] if hist else None}
        return {"runs": runs}
    except Exception as e:  # noqa: BLE001 (best effort: the log still travels)
        return {"error": f"{type(e).__name__}: {e}"}


def _benchmark_so_far(folder: Path) -> dict:
    """Per arm, over the finished batch groups (bench/resume.py's files, read from their metadata): groups, streams,
    generated tokens, wall seconds, tokens/s and τ (tokens per round)."""
    from safetensors import safe_open

    arms: dict[str, dict] = {}
    for f in sorted(folder.glob("*.safetensors")):
        with safe_open(str(f), "pt") as fh:
            meta = json.loads(fh.metadata()["runs"])
        for r in meta.get("runs", []):
            a = arms.setdefault(f"{r['arm']} T={r['temperature']:g}" + (" sweep" if r.get("sweep") else ""),
                                {"groups": 0, "streams": 0, "tokens": 0, "wall_s": 0.0, "rounds": 0})
            a["groups"] += 1
            a["streams"] += len(r.get("tokens") or [])
            a["tokens"] += sum(len(t) for t in r.get("tokens") or [])
            a["wall_s"] += float(r.get("wall_s") or 0.0)
            a["rounds"] += sum(len(x) for x in r.get("accepted") or [])
    for a in arms.values():
        a["tokens_per_s"] = round(a["tokens"] / a["wall_s"], 2) if a["wall_s"] else None
        a["tau"] = round(a["tokens"] / a["rounds"], 3) if a["rounds"] else None
        a["wall_s"] = round(a["wall_s"], 2)
    return {"groups": len(list(folder.glob("*.safetensors"))), "arms": arms}


def run_stages(params, raw: dict, meta: dict, work: Path, out: Path, console: Console, only: list[str],
               deadline_at: float | None = None, reserve: float = RESERVE_S) -> int:
    """Each stage in order (those of `only`, default all), the bundle after each; the exit code (0, 1 / 2 a stage
    failed, CUT the deadline cut or skipped one)."""
    import torch

    from draftlab.pipeline.stage import prepare

    digest = json_digest(raw)
    done_path, budgets_path = work / "finished.json", work / "budgets.json"
    done = json.loads(done_path.read_text()) if done_path.is_file() else {}
    stored = json.loads(budgets_path.read_text()) if budgets_path.is_file() else {}
    if stored.get("params_digest") != digest:
        stored = {"params_digest": digest, "stages": {}}
    order = list(only or STAGES)
    kind = "cuda" if torch.cuda.is_available() else "cpu"
    pred = predictions(params, kind)
    meta.update(params_digest=digest, stages=[], finished=[], failed=None, cut=None,
                plan={"device": kind, "predicted_s": {k: round(v["s"], 1) for k, v in pred.items()},
                      "total_s": round(sum(v["s"] for n, v in pred.items() if n in order), 1)})
    earlier = meta.get("earlier", {})
    code = 0
    for i, name in enumerate(order):
        if done.get(name) == digest:
            meta["stages"].append({"stage": name, "status": "finished earlier",
                                   **{k: v for k, v in earlier.get(name, {}).items() if k != "status"}})
            meta["finished"].append(name)
            continue
        row: dict = {"stage": name}
        if name in pred:
            row["predicted_s"] = round(pred[name]["s"], 1)
        if earlier.get(name, {}).get("status") == "cut":
            row["earlier_cut_wall_s"] = earlier[name].get("wall_s")
        left = deadline_at - reserve - time.time() if deadline_at else math.inf
        if left < reserve:
            row.update(status="skipped", error=f"[{name}] skipped: {max(left, 0):.0f} s left before the deadline "
                                               f"(less {reserve:g} s for the bundle), under the {reserve:g} s a stage "
                                               f"needs to start; run the same command again to continue")
            meta["stages"].append(row)
            meta["cut"] = meta["cut"] or name
            console.say(row["error"])
            code = CUT
            break
        p = params
        if name in BUDGETS:
            rest = [n for n in order[i + 1:] if done.get(n) != digest]
            if name in stored["stages"]:  # started under this budget in an earlier call: keep it (the run's key)
                minutes, how = stored["stages"][name], "kept from the call that started it"
            else:
                minutes, f = fit_budgets(name, params, pred, rest, left)
                how = "configured" if f == 1.0 else f"scaled by {f:.2f} to fit --deadline"
            row["budget_minutes"] = {k: round(v, 3) for k, v in minutes.items()}
            row["budget"] = how
            if minutes != minutes_of(params, name):
                p = with_minutes(params, minutes)
            stored["stages"][name] = minutes
            atomic_write(budgets_path, lambda f: f.write_text(json.dumps(stored, indent=1)))
        console.say(f"[gpu-run] {name}: start" + (f" (predicted {row['predicted_s']:.0f} s" if "predicted_s" in row else "")
                    + (f"; {left:.0f} s left" if math.isfinite(left) else "") + ("" if "predicted_s" not in row else ")")
                    + (f"; budget {row['budget']}" if row.get("budget", "configured") != "configured" else ""))
        prepare(p)
        peak_reset()
        t0, off, returned = time.time(), console.offset(), False
        try:
            with Watchdog(deadline_at - reserve if deadline_at else None):
                load_stage(name).run(p)
                returned = True
            row["status"] = "ok"
        except StageCut:
            if returned:  # the alarm rang between the stage's return and its disarming
                row["status"] = "ok"
            else:
                row.update(status="cut", error=f"[{name}] cut by the deadline after {time.time() - t0:.0f} s "
                                               f"(--deadline {meta['deadline_s']:g}); run the same command again to continue it")
        except DraftlabError as e:
            row.update(status="failed", error=f"error [{name}]: {e}")
        except Exception as e:  # noqa: BLE001 (a crash on the device: its traceback goes back in log.txt)
            traceback.print_exc()
            row.update(status="failed", error=f"[{name}] {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}")
        row.update(wall_s=round(time.time() - t0, 2), **{k: (round(v, 3) if isinstance(v, float) else v)
                                                        for k, v in peak_read().items()})
        if row["status"] == "cut":
            row["so_far"] = salvage(name, t0)
        if row["status"] != "ok":
            row["log"] = console.since(off)  # the stage's own lines (their tail)
        meta["stages"].append(row)
        if row["status"] == "ok":
            meta["finished"].append(name)
            done[name] = digest
            atomic_write(done_path, lambda f: f.write_text(json.dumps(done, indent=1)))
            console.say(f"[gpu-run] {name}: ok in {row['wall_s']:.0f} s, peak {row['peak_gib']:.1f} GiB")
        elif row["status"] == "cut":
            meta["cut"] = name
            console.say(row["error"])
            code = CUT
        else:
            meta["failed"] = name
            console.say(row["error"])
            code = 2 if row["error"].startswith("error [") else 1
        write_bundle(meta, work, out, console)
        if code:
            break
    if code:
        for name in order[len(meta["stages"]):]:
            meta["stages"].append({"stage": name, "status": "not started",
                                   "error": f"[{name}] not started: {meta['failed'] or meta['cut']} did not finish"})
    write_bundle(meta, work, out, console)
    return code


def write_bundle(meta: dict, work: Path, out: Path, console: Console) -> None:
    """The bundle into `out`, and a copy into <work>/bundle (a later call's --out is a fresh folder)."""
    meta["wall_s"] = round(time.time() - meta["t0"], 2)
    doc = bundle.write(out, {k: v for k, v in meta.items() if k not in ("t0", "earlier")}, work,
                       console.since(0, bundle.LOG_BYTES))
    keep = work / "bundle"
    keep.mkdir(parents=True, exist_ok=True)
    names = [*doc["files"], "bundle.json"]
    for name in names:
        shutil.copyfile(out / name, keep / (name + ".tmp"))
        os.replace(keep / (name + ".tmp"), keep / name)
    for stale in keep.iterdir():
        if stale.name not in names:
            stale.unlink()


def earlier_figures(work: Path, out: Path) -> dict:
    """{stage: its row} from the bundle an earlier call left in the work folder (else in --out): the times and peak
    memory of the stages it ran, kept for the stages this call does not run again."""
    for f in (work / "bundle" / "bundle.json", out / "bundle.json"):
        if f.is_file():
            try:
                rows = json.loads(f.read_text()).get("stages", [])
            except (OSError, ValueError):
                continue
            return {r["stage"]: {k: v for k, v in r.items() if k in ("status", "wall_s", "peak_gib", "peak_kind",
                                                                     "predicted_s", "budget_minutes")}
                    for r in rows if r.get("status") in ("ok", "finished earlier", "cut")}
    return {}


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="gpu_run.py", description="the offline regime run (docs/gpu.md)")
    ap.add_argument("--out", help="the results bundle's folder (what comes back)")
    ap.add_argument("--pack", default="", help="the folder `make gpu-pack` wrote (default gpu-pack; with --dry: a pack "
                                               "built into the work folder first, or one of tools/gpu_pack.py --dry)")
    ap.add_argument("--work", default="", help="the work folder (models, references, checkpoints; default gpu-work, "
                                                "gpu-work-dry with --dry)")
    ap.add_argument("--profile", default="gpu-small")
    ap.add_argument("--dry", action="store_true", help="tiny sizes on the tiny random target, its own pack: the CPU rehearsal")
    ap.add_argument("--commit", default="", help="the project commit the tree was copied from (default: the pack's); "
                                                 "with --render: the commit the pack was made at, which the bundle must be of")
    ap.add_argument("--stages", default="", help="comma-separated subset of the stages, in pipeline order")
    ap.add_argument("--deadline", type=float, default=0.0, metavar="SECONDS",
                    help="wall seconds from the start the run must end in (bundle written), e.g. 30 s under the call's "
                         "limit: stages are sized to the plan's prediction, skipped or cut to fit (0 = none)")
    ap.add_argument("--reserve", type=float, default=RESERVE_S, metavar="SECONDS",
                    help="with --deadline: the seconds kept after a cut for the checkpoint, the bundle and the exit; a "
                         "stage starts only with as much again left (default %(default)g)")
    ap.add_argument("-S", dest="overrides", action="append", default=[], help="a params override, as dvc exp run -S")
    ap.add_argument("--render", metavar="BUNDLE", help="fold a fetched bundle into results/<profile>/ and metrics/<profile>/")
    ap.add_argument("--any-commit", action="store_true", help="--render: accept a bundle of a commit other than HEAD")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    t_start = time.time()
    a = parse(sys.argv[1:] if argv is None else argv)
    a.t_start = t_start
    try:
        if a.render:
            from draftlab.offline.render import render

            print(render(Path(a.render), ROOT, a.profile, a.any_commit, commit=a.commit or None))
            return 0
        if not a.out:
            raise DraftlabError("--out DIR is required (the folder the results bundle is written to)")
        if a.deadline < 0 or not math.isfinite(a.deadline):
            raise DraftlabError(f"--deadline {a.deadline:g} is not possible: give wall seconds > 0 (0 = no deadline)")
        if a.reserve < 0 or not math.isfinite(a.reserve):
            raise DraftlabError(f"--reserve {a.reserve:g} is not possible: give seconds >= 0")
        return run(a)
    except DraftlabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def run(a: argparse.Namespace) -> int:
    from draftlab.omp import configure

    configure()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    for k, v in QUIET_ENV.items():
        os.environ.setdefault(k, v)
    if a.dry:  # the rehearsal compiles the engine (offline-dry.yaml: engine.compile=on) with no codegen, under the CPU emulation of
        from draftlab.compiling import BACKEND_ENV, emulate_graph_memory  # CUDA graphs' memory rule

        os.environ.setdefault(BACKEND_ENV, "eager")
        emulate_graph_memory(True)
    t_start = getattr(a, "t_start", None) or time.time()
    deadline_at = t_start + a.deadline if a.deadline else None
    out = Path(a.out).resolve()
    work = Path(a.work or ("gpu-work-dry" if a.dry else "gpu-work")).resolve()
    only = [s for s in a.stages.split(",") if s]
    bad = [s for s in only if s not in STAGES]
    if bad:
        raise DraftlabError(f"--stages: unknown {', '.join(bad)}; choose from {', '.join(STAGES)}")
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    console = Console(out / "console.txt")
    cwd = os.getcwd()
    try:
        packdir = Path(a.pack or ("" if a.dry else "gpu-pack")).resolve() if a.pack or not a.dry else work / "pack"
        if a.dry and not a.pack:  # the rehearsal builds its own pack with this machine's libraries
            if importlib.util.find_spec("hydra") is None:
                raise DraftlabError("--dry builds its pack with Hydra, which this Python lacks; build one where it is "
                                    "(python tools/gpu_pack.py --dry --out DIR) and pass --pack DIR")
            params, raw = compose(a.profile, True, a.overrides)
            pack.build(params, raw, packdir, git_sha(ROOT) or "unknown")
        missing = [m for m in MODULES if importlib.util.find_spec(m) is None]
        site = work / "site"
        sys.path.insert(0, str(site))
        manifest = pack.install(packdir, site, missing)
        importlib.invalidate_caches()
        params, raw = compose(a.profile, a.dry, a.overrides)
        if manifest["selection"] != pack.selection_digest(raw) or manifest["profile"] != raw["profile"]["name"]:
            raise DraftlabError(f"{packdir} was packed for profile {manifest['profile']} with other data / reference "
                                f"settings than this run's; rebuild it with the same profile and -S overrides (make gpu-pack)")
        meta = {"profile": raw["profile"]["name"], "mode": "dry" if a.dry else "full",
                "commit": a.commit or manifest["commit"], "target": raw["target"]["name"], "overrides": a.overrides,
                "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(t_start)), "t0": t_start,
                "deadline_s": a.deadline or None, "console": "console.txt",
                "pack": {"selection": manifest["selection"], "unpacked_wheels": manifest["unpacked"],
                         "sharegpt": manifest.get("sharegpt")},
                "earlier": earlier_figures(work, out)}  # the stages an earlier command ran in this work folder
        import torch

        meta["environment"] = environment(torch.device("cuda" if torch.cuda.is_available() else "cpu"), a.dry)
        os.chdir(work)
        code = run_stages(params, raw, meta, work, out, console, only, deadline_at, a.reserve)
        console.say(f"[gpu-run] {'done' if not code else 'cut: run the same command again to continue' if code == CUT else 'failed'}"
                    f" in {time.time() - t_start:.0f} s: {len(meta['finished'])} of {len(only or STAGES)} stages "
                    f"finished; bundle {out}")
        return code
    finally:
        os.chdir(cwd)
        console.close()
