"""The offline regime runner: every stage of a profile in order, without DVC and MLflow, in a work folder, with the
results bundle written after every stage (`tools/gpu_run.py`; docs/gpu.md "The regime run (gpu-small)").

On the device: the pack (`draftlab.offline.pack`) is checked and laid out under <work>/site, first on sys.path (the
wheels only for the modules this Python lacks), the params composed from conf/ with Hydra (from the pack's wheels)
as `dvc exp run -S profile=...` would, tracking off, and each stage's own `run(params)` from stages/*.py called in
<work> (the stages' paths are relative: models/, data/, results/ ... land there), after the seed and threads that
`stage_main` sets. A stage that finished with the same params in an earlier run in the same work folder is not run
again (<work>/finished.json), so a second command continues where the first stopped. A failing stage is one line in
bundle.json (the traceback in its log.txt) and ends the run.
`--dry`: the same at tiny sizes on the tiny random target (DRY), building its own pack first: the CPU rehearsal.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
import traceback
from pathlib import Path

from draftlab.errors import DraftlabError
from draftlab.checks.common import environment, git_sha
from draftlab.io import atomic_write, json_digest
from draftlab.offline import bundle, pack

ROOT = Path(__file__).resolve().parents[3]
STAGES = ("check_params", "prepare_target", "reference", "pretrain_drafter", "pretrain_seeded", "specopd", "corrector",
          "benchmark")
MODULES = ("omegaconf", "hydra", "antlr4", "gguf")
# the rehearsal's sizes: every stage and arm of the profile, on the tiny random target, in about a minute on 2 cores
DRY = ["target=tiny-random", "profile.threads=2", "data.max_prompt_tokens=64",
       "reference.num_train_prompts=12", "reference.num_heldout_prompts=3", "reference.num_eval_per_suite=1",
       "reference.max_new_tokens=24", "reference.batch_size=8", "drafter.block_size=8", "drafter.num_layers=1",
       "pretrain.max_steps=4", "pretrain.max_minutes=0.5", "pretrain.batch_size=4", "pretrain.anchors_per_seq=8",
       "pretrain.val_every=0", "pretrain.chunk_rows=0", "pretrain.topk=4",
       "seeded.pretrain.max_steps=2", "specopd.max_steps=2", "specopd.batch_size=2", "specopd.anchors_per_seq=4",
       "specopd.val_every=0", "specopd.cost_anchors=2", "specopd.cost_sequences=1", "specopd.tv_eval_seqs=2",
       "specopd.chunk_rows=0", "specopd.vocab_chunk=0", "specopd.topk=4",
       "corrector.k=4", "corrector.dim=16", "corrector.hidden=32", "corrector.max_steps=2", "corrector.batch_size=2",
       "corrector.anchors_per_seq=8", "corrector.val_every=0", "benchmark.prompts_per_suite=1",
       "benchmark.ablation_prompts_per_suite=1", "benchmark.sampled_prompts_per_suite=1", "benchmark.max_new_tokens=8",
       "benchmark.batch_size=1", "benchmark.concurrency=[1,2]", "benchmark.concurrency_prompts=2",
       "benchmark.concurrency_max_new_tokens=6", "benchmark.topk=4", "benchmark.warmup=false",
       "benchmark.bootstrap=50", "benchmark.suites=[mt-bench,sharegpt-chat]", "reference.agreement_sample=2"]


def compose(profile: str, dry: bool, overrides: list[str]):
    """(params, raw dict) of conf/ + profile (+ DRY) + overrides, tracking off: the composition `dvc exp run -S` makes,
    checked against the same name tables as a stage's params."""
    from draftlab.params import build_params, compose_params
    from draftlab.pipeline.names import arm_names, method_names

    ovs = [f"profile={profile}", *(DRY if dry else []), *overrides, "tracking.enabled=false"]
    arms, names = arm_names(), method_names()
    raw = compose_params(ovs, ROOT / "conf", arms=arms, names=names)
    return build_params(raw, arms=arms, names=names), raw


class Tee:
    """A stream that also appends to the run's log file."""

    def __init__(self, stream, log):
        self.stream, self.log = stream, log

    def write(self, s):
        self.log.write(s)
        self.log.flush()
        return self.stream.write(s)

    def flush(self):
        self.stream.flush()

    def __getattr__(self, name):
        return getattr(self.stream, name)


def peak_reset() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
        return
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM, the peak resident set
    except OSError:
        pass


def peak_read() -> dict:
    import torch

    if torch.cuda.is_available():
        return {"peak_gib": torch.cuda.max_memory_allocated() / 2**30, "peak_kind": "cuda max_memory_allocated"}
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return {"peak_gib": int(line.split()[1]) / 2**20, "peak_kind": "process peak RSS (VmHWM)"}
    except OSError:
        pass
    import resource

    return {"peak_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, "peak_kind": "process max RSS"}


def load_stage(name: str):
    spec = importlib.util.spec_from_file_location(f"draftlab_stage_{name}", ROOT / "stages" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_stages(params, raw: dict, meta: dict, work: Path, out: Path, log_path: Path, only: list[str]) -> int:
    """Each stage in order (those of `only`, default all), the bundle after each; the exit code."""
    from draftlab.pipeline.stage import prepare

    digest = json_digest(raw)
    done_path = work / "finished.json"
    done = json.loads(done_path.read_text()) if done_path.is_file() else {}
    meta.update(params_digest=digest, stages=[], finished=[], failed=None)
    for name in only or STAGES:
        if done.get(name) == digest:
            meta["stages"].append({"stage": name, "status": "finished earlier", **(meta.get("earlier", {}).get(name, {}))})
            meta["finished"].append(name)
            continue
        print(f"[gpu-run] stage {name}", file=sys.stderr, flush=True)
        prepare(params)
        peak_reset()
        t0, row = time.time(), {"stage": name}
        try:
            load_stage(name).run(params)
            row["status"] = "ok"
        except DraftlabError as e:
            row.update(status="failed", error=f"error [{name}]: {e}")
        except Exception as e:  # noqa: BLE001 (a crash on the device: its traceback goes back in log.txt)
            traceback.print_exc()
            row.update(status="failed", error=f"[{name}] {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}")
        row.update(wall_s=round(time.time() - t0, 2), **{k: (round(v, 3) if isinstance(v, float) else v)
                                                        for k, v in peak_read().items()})
        meta["stages"].append(row)
        if row["status"] == "ok":
            meta["finished"].append(name)
            done[name] = digest
            atomic_write(done_path, lambda p: p.write_text(json.dumps(done, indent=1)))
        else:
            meta["failed"] = name
            print(row["error"], file=sys.stderr, flush=True)
        write_bundle(meta, work, out, log_path)
        if meta["failed"]:
            return 2 if isinstance(row.get("error"), str) and row["error"].startswith("error [") else 1
    write_bundle(meta, work, out, log_path)
    return 0


def write_bundle(meta: dict, work: Path, out: Path, log_path: Path) -> None:
    meta["wall_s"] = round(time.time() - meta["t0"], 2)
    bundle.write(out, {k: v for k, v in meta.items() if k not in ("t0", "earlier")}, work, log_path.read_text(errors="replace"))


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
    ap.add_argument("-S", dest="overrides", action="append", default=[], help="a params override, as dvc exp run -S")
    ap.add_argument("--render", metavar="BUNDLE", help="fold a fetched bundle into results/<profile>/ and metrics/<profile>/")
    ap.add_argument("--any-commit", action="store_true", help="--render: accept a bundle of a commit other than HEAD")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse(sys.argv[1:] if argv is None else argv)
    try:
        if a.render:
            from draftlab.offline.render import render

            print(render(Path(a.render), ROOT, a.profile, a.any_commit, commit=a.commit or None))
            return 0
        if not a.out:
            raise DraftlabError("--out DIR is required (the folder the results bundle is written to)")
        return run(a)
    except DraftlabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def run(a: argparse.Namespace) -> int:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    out = Path(a.out).resolve()
    work = Path(a.work or ("gpu-work-dry" if a.dry else "gpu-work")).resolve()
    only = [s for s in a.stages.split(",") if s]
    bad = [s for s in only if s not in STAGES]
    if bad:
        raise DraftlabError(f"--stages: unknown {', '.join(bad)}; choose from {', '.join(STAGES)}")
    work.mkdir(parents=True, exist_ok=True)
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
        raise DraftlabError(f"{packdir} was packed for profile {manifest['profile']} with other data / reference settings "
                            f"than this run's; rebuild it with the same profile and -S overrides (make gpu-pack)")
    log_path = work / "run.log"
    log_path.write_text("")
    meta = {"profile": raw["profile"]["name"], "mode": "dry" if a.dry else "full", "commit": a.commit or manifest["commit"],
            "target": raw["target"]["name"], "overrides": a.overrides, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "t0": time.time(), "pack": {"selection": manifest["selection"], "unpacked_wheels": manifest["unpacked"],
                                        "sharegpt": manifest.get("sharegpt")}}
    old = out / "bundle.json"
    if old.is_file():  # the figures of stages an earlier command finished in this work folder
        meta["earlier"] = {r["stage"]: {k: v for k, v in r.items() if k in ("wall_s", "peak_gib", "peak_kind")}
                           for r in json.loads(old.read_text()).get("stages", []) if r.get("status") in ("ok", "finished earlier")}
    cwd = os.getcwd()
    with open(log_path, "a") as logf:
        so, se = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = Tee(so, logf), Tee(se, logf)
        try:
            import torch

            meta["environment"] = environment(torch.device("cuda" if torch.cuda.is_available() else "cpu"), a.dry)
            os.chdir(work)
            return run_stages(params, raw, meta, work, out, log_path, only)
        finally:
            os.chdir(cwd)
            sys.stdout, sys.stderr = so, se
