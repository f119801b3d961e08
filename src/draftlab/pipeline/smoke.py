"""The smoke run's body (tools/smoke.py is its command and says what it does): the scratch copy .smoke/ of the working
tree, the `smoke` profile's pipeline there and its checks, each toy world at tiny size beside it, and docs/toy-world.md's
recipe for a new corrector run as written in the toy world's scratch copy (`recipe_check`)."""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

from draftlab import paths

ROOT = Path(__file__).resolve().parents[3]  # the repository (src/draftlab/pipeline/smoke.py)
SCRATCH = ROOT / ".smoke"
# the example of README "Your own prompts": a local JSONL benchmarked as its own suite
LOCAL_SUITE = ["data.local_suites.my-prompts=examples/my_prompts.jsonl", "benchmark.suites=[mt-bench,my-prompts]"]
# the corrector stage at 3 updates a run (the profile's 6): its 13 runs (every variant kind and the control) on the
# SmolLM2 target are the run's costliest stage, and nothing the run checks depends on how long they train (3 still
# puts dcoco-warm's frozen first 30% and its joint rest in the run)
SHORT_RUNS = ["corrector.max_steps=3"]
# the toy world at tiny size: the target 2 x 32 trained for 600 steps (~9 s here; budget_s only a ceiling: a time
# budget trained fewer steps on a loaded CI machine, whose target then ended its held-out answers within one block),
# the other stages at the smoke profile's sizes
TOY_TINY = ["target.toy.train.layers=2", "target.toy.train.hidden=32", "target.toy.train.heads=2",
            "target.toy.train.kv_heads=2", "target.toy.train.intermediate=64", "target.toy.train.batch=8",
            "target.toy.train.curriculum_steps=0", "target.toy.train.max_steps=600", "target.toy.train.budget_s=300", "target.toy.train.eval_n=2",
            "target.toy.train.curve_every_s=0", "target.arch.num_layers=2", "target.arch.hidden_size=32",
            "target.arch.num_heads=2", "target.arch.num_kv_heads=2", "target.arch.head_dim=16",
            "target.arch.intermediate_size=64", "drafter.target_layer_ids=[]", "profile.omp_wait_policy=passive",
            "reference.num_train_prompts=24", "reference.num_heldout_prompts=4", "reference.max_new_tokens=56",
            "pretrain.max_steps=20", "pretrain.max_minutes=1.0", "pretrain.batch_size=4", "pretrain.val_every=10",
            "pretrain.checkpoint_every=10", "seeded.pretrain.max_minutes=0.2", "seeded.pretrain.max_steps=10",
            "specopd.max_steps=4",
            "specopd.batch_size=2", "specopd.val_every=0", "specopd.checkpoint_every=2", "specopd.cost_sequences=1",
            "corrector.max_steps=6", "corrector.max_minutes=0.5", "corrector.variant_max_minutes=0.2",
            "corrector.batch_size=4", "corrector.val_every=0", "benchmark.prompts_per_suite=1",
            "benchmark.ablation_prompts_per_suite=1", "benchmark.sampled_prompts_per_suite=1",
            "benchmark.max_new_tokens=12", "benchmark.concurrency=[1,2]", "benchmark.concurrency_prompts=2",
            "benchmark.concurrency_max_new_tokens=8", "benchmark.warmup=false"]


def compose_into(folder: Path, args: list[str], cwd: Path) -> str | None:
    """params.yaml in `folder`, composed with `draftlab compose ARGS` run in `cwd` -> its text; None after printing the
    composition's one-line error."""
    r = subprocess.run([sys.executable, "-m", "draftlab.cli", "compose", *args], cwd=cwd, capture_output=True, text=True)
    if r.returncode:
        print(r.stderr.strip(), file=sys.stderr)
        return None
    (folder / "params.yaml").write_text(r.stdout)
    return r.stdout


def git(*args: str) -> str:
    r = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else ""


def tracked_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True)
    # a committed run's outputs: the root's and each world's (and a world's replicates and additions)
    runs = (f"{paths.METRICS}/", f"{paths.RESULTS}/", f"{paths.PLOTS_DIR}/", "dvc.lock")
    in_world = lambda f: f.split("/", 2)[2] if f.startswith("worlds/") and f.count("/") >= 2 else ""  # noqa: E731
    return [f for f in out.stdout.splitlines()
            if f and not f.startswith((".smoke/", *runs)) and not in_world(f).startswith((*runs, "replicates/", "additions/"))]


def check_seeded(root: Path) -> str:
    """The seeded drafter's outputs (stage pretrain_seeded, enabled in the smoke profile): a seeded checkpoint,
    the report's comparison table, its headline, and the `dflash-seeded` arm in the benchmark. '' when fine."""
    params = (root / "params.yaml").read_text()
    if "dflash-seeded" not in params:  # a run whose arms leave the seeded drafter out (e.g. profile overrides)
        return ""
    cfg = root / paths.SEEDED_DRAFTER / "config.json"
    if not cfg.exists() or json.loads(cfg.read_text()).get("seed") != "lookup":
        return f"{cfg.relative_to(root)} is missing or not a seeded drafter (seed=lookup)"
    rep = json.loads((root / paths.results("pretrain_seeded")).read_text())
    comp = rep.get("comparison") or {}
    if not comp.get("all", {}).get("sequences") or set(comp["all"].get("pairs", {})) != {
            "seeded-lookup", "seeded-hybrid", "seeded-plain"}:
        return f"{paths.results('pretrain_seeded')} has no comparison table (seeded vs lookup, hybrid, plain)"
    if "sim_tau" not in json.loads((root / paths.metrics("pretrain_seeded")).read_text()):
        return f"{paths.metrics('pretrain_seeded')} has no sim_tau headline"
    summary = json.loads((root / paths.BENCH_DETAIL).read_text()).get("summary", {})
    if "dflash-seeded" not in summary:
        return f"the dflash-seeded arm is missing from .smoke/{paths.BENCH_DETAIL} (arms: {sorted(summary)})"
    return check_seeded_methods(root, summary)


def check_seeded_methods(root: Path, summary: dict) -> str:
    """With seeded.methods: every folder the specopd and corrector stages wrote records the seeded drafter as its
    base (info base_kind), and the benchmark ran the methods' -seeded arms. '' when fine (or methods is off)."""
    import yaml

    if not (yaml.safe_load((root / "params.yaml").read_text()).get("seeded") or {}).get("methods"):
        return ""
    folders = [root / paths.SPECOPD_DRAFTER / "t0", root / paths.LONG_DRAFTER,
               *sorted(p.parent for p in (root / paths.CORRECTORS).glob("*/drafter/config.json"))]
    for f in folders:
        cfg = f / "config.json"
        kind = json.loads(cfg.read_text()).get("info", {}).get("base_kind") if cfg.exists() else None
        if kind != "seeded":
            return f"{f.relative_to(root)} was not trained on the seeded drafter (info base_kind={kind!r}, seeded.methods=true)"
    ran = sorted(a for a in summary if a.endswith("-seeded") and a != "dflash-seeded")
    return "" if ran else f"no method arm on the seeded drafter (<method>-seeded) in the benchmark (arms: {sorted(summary)})"


def main(argv: list[str]) -> int:
    """The smoke run (tools/smoke.py's docstring says what it does) -> its exit code."""
    no_toy, toy_only = "--no-toy" in argv, "--toy-only" in argv
    argv = [a for a in argv if a not in ("--no-toy", "--toy-only")]
    SCRATCH.mkdir(exist_ok=True)
    for f in tracked_files():
        src, dst = ROOT / f, SCRATCH / f
        if not src.is_file():
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        if not dst.exists() or dst.read_bytes() != src.read_bytes():
            shutil.copy2(src, dst)
    if compose_into(SCRATCH, ["profile=smoke", *LOCAL_SUITE, *SHORT_RUNS, *argv], ROOT) is None:
        return 2
    if not (SCRATCH / ".git").exists():
        subprocess.run(["git", "init", "-q"], cwd=SCRATCH, check=True)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}", DVC_NO_ANALYTICS="1",
               DRAFTLAB_GIT_COMMIT=git("rev-parse", "--verify", "-q", "HEAD") or "unknown",
               DRAFTLAB_GIT_DIRTY=str(bool(git("status", "--porcelain", "--untracked-files=no"))).lower(),
               DRAFTLAB_STAGE_TRACE=str(fresh(SCRATCH / ".trace")))  # what each stage used (draftlab.pipeline.trace)
    os.umask(0o022)  # a user's usual umask: every file the run writes must be readable by others (0644)
    worlds = None if no_toy else start_worlds(env)  # beside the main pipeline: the suite's wall time, not its CPU
    rc = 0 if toy_only else main_pipeline(env, argv)
    rc_worlds = worlds() if worlds else 0  # waited for even when the main pipeline failed (their lines come out)
    return rc or rc_worlds


def main_pipeline(env: dict, argv: list[str]) -> int:
    """The smoke profile's pipeline in the scratch copy and its checks (module doc) -> exit code."""
    started = time.time()
    rc = subprocess.run(["dvc", "repro"], cwd=SCRATCH, env=env).returncode
    if rc:
        print(f"smoke pipeline failed (dvc repro exit {rc}); outputs in {SCRATCH}", file=sys.stderr)
        return rc
    private = unreadable(SCRATCH, started)
    if private:
        print(f"the smoke run wrote {len(private)} files others cannot read under umask 022: {private[:8]}",
              file=sys.stderr)
        return 1
    bad = []
    written = sorted([*(SCRATCH / paths.RESULTS).glob("*.json"), *(SCRATCH / paths.METRICS).rglob("*.json")])
    for m in written:
        try:
            json.loads(m.read_text())
        except json.JSONDecodeError:
            bad.append(str(m.relative_to(SCRATCH)))
    if bad:
        print(f"smoke pipeline wrote unreadable reports or metrics: {bad}", file=sys.stderr)
        return 1
    suites = json.loads((SCRATCH / paths.BENCH_DETAIL).read_text()).get("suites", {})
    if "my-prompts" not in suites and not any(a.startswith("benchmark.suites") for a in argv):
        print(f"the example local suite is missing from .smoke/{paths.BENCH_DETAIL} (suites: {list(suites)})",
              file=sys.stderr)
        return 1
    problem = check_seeded(SCRATCH) or undeclared(SCRATCH / ".trace")
    if problem:
        print(problem, file=sys.stderr)
        return 1
    print(f"smoke pipeline ok: {len(written)} reports and headline metrics files "
          f"({', '.join(m.name for m in sorted((SCRATCH / paths.RESULTS).glob('*.json')))})")
    return 0


def fresh(folder: Path) -> Path:
    shutil.rmtree(folder, ignore_errors=True)
    return folder


def undeclared(folder: Path) -> str:
    """The modules and params keys the stages that ran used beyond what the stage table declares, one line each."""
    from draftlab.pipeline.dvcgen import check_traces

    return "\n".join(check_traces(folder))


def unreadable(root: Path, since: float) -> list[str]:
    """Files under `root` written since `since` (git's and DVC's own folders aside) whose mode denies others read."""
    out = []
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in (".git", ".dvc")]
        for f in files:
            p = Path(dirpath) / f
            st = p.lstat()
            if st.st_mtime >= since and stat.S_ISREG(st.st_mode) and st.st_mode & 0o044 != 0o044:
                out.append(f"{p.relative_to(root)} ({stat.filemode(st.st_mode)})")
    return sorted(out)


def tiny_variant_steps(name: str) -> list[str]:
    """Every corrector variant a world's profile budgets in updates at the smoke's 6 (its step budgets are the real
    run's: thousands of updates). One override per key: an empty mapping would merge into the profile's, not replace it."""
    import yaml

    steps = yaml.safe_load((ROOT / "conf" / "profile" / f"{name}.yaml").read_text())["corrector"].get("variant_steps") or {}
    return [f"corrector.variant_steps.{k}=6" for k in steps]


def start_worlds(env: dict):
    """Every toy world at tiny size, each in a thread of its own beside whatever runs next (each world folder is a DVC
    repository of its own in the scratch copy, so their `dvc repro` runs do not wait on one another's lock); -> a
    function that waits for them and returns the first failure's exit code (0 when every world passed)."""
    from concurrent.futures import ThreadPoolExecutor

    from draftlab.config.sections import WORLD_PROFILES

    pool = ThreadPoolExecutor(len(WORLD_PROFILES))
    runs = [pool.submit(toy_world, env, name) for name in WORLD_PROFILES]

    def wait() -> int:
        codes = [r.result() for r in runs]
        pool.shutdown()
        return next((c for c in codes if c), 0)
    return wait


INIT_LOCK = threading.Lock()  # the worlds' `dvc init` runs one at a time: each git-adds into the scratch copy's index


def dvc_init(world: Path, env: dict, tries: int = 3) -> bool:
    """`dvc init --subdir` in a world's scratch folder, one world at a time (two at once raced for git's index lock:
    one of them failed with exit 255), again after a pause when git was busy anyway (the main pipeline's dvc runs
    beside it); a folder a failed try left half-made is made again (-f). -> whether it worked (else one line said)."""
    r = None
    for i in range(tries):
        with INIT_LOCK:
            r = subprocess.run(["dvc", "init", "--subdir", *(["-f"] if (world / ".dvc").exists() else [])],
                               cwd=world, env=env, capture_output=True, text=True)
        if r.returncode == 0:
            return True
        time.sleep(2.0 * (i + 1))
    last = (r.stderr or r.stdout).strip().splitlines()[-1:] if r is not None else []
    print(f"{world.name} world smoke: `dvc init --subdir` failed {tries} times (exit {r.returncode}): "
          f"{last[0] if last else 'no message'}", file=sys.stderr)
    return False


def toy_world(env: dict, name: str) -> int:
    """One toy world at tiny size (module doc): compose its params, freeze it at its own hash, run its dvc.yaml."""
    world = SCRATCH / "worlds" / name
    frozen = json.loads((world / "prompts" / "world.json").read_text())["world_hash"]
    composed = compose_into(world, ["--conf", "../../conf", f"profile={name}", *TOY_TINY, *tiny_variant_steps(name),
                                    f"target.toy.frozen_hash={frozen}"], world)
    if composed is None:
        return 2
    if not (world / ".dvc").exists() and not dvc_init(world, env):
        return 2
    started = time.time()
    log = world / "smoke.log"
    with open(log, "w") as f:
        rc = subprocess.run(["dvc", "repro", "dvc.yaml"], cwd=world, stdout=f, stderr=subprocess.STDOUT,
                            env={**env, "DRAFTLAB_STAGE_TRACE": str(fresh(world / ".trace"))}).returncode
    if rc:
        tail = log.read_text().splitlines()[-15:]
        print("\n".join(tail), file=sys.stderr)
        print(f"{name} world smoke failed (dvc repro exit {rc}); its log {log}, outputs in {world}", file=sys.stderr)
        return rc
    private = unreadable(world, started)
    if private:
        print(f"the {name} world smoke wrote files others cannot read under umask 022: {private[:8]}", file=sys.stderr)
        return 1
    import yaml

    bench = json.loads((world / paths.BENCH_DETAIL).read_text())
    want = yaml.safe_load(composed)["benchmark"]
    missing = sorted(set(want["arms"]) - set(bench.get("summary", {})))
    suites = sorted(set(want["suites"]) - set(bench.get("suites", {})))
    toy = json.loads((world / paths.results("prepare_target")).read_text()).get("toy")
    problem = undeclared(world / ".trace")
    if problem:
        print(problem, file=sys.stderr)
        return 1
    if missing or suites or not toy:
        print(f"{name} world smoke: arms {missing} / suites {suites} missing from {paths.BENCH_DETAIL}, or no `toy` "
              f"report in {paths.results('prepare_target')}", file=sys.stderr)
        return 1
    print(f"{name} world smoke ok: {len(bench['summary'])} arms on {len(bench['suites'])} suites "
          f"({', '.join(sorted(bench['suites']))})")
    return recipe_check(world, env) if name == "toy" else 0


def recipe_check(world: Path, env: dict) -> int:
    """docs/toy-world.md's recipe for a new corrector, run as written in the scratch copy (draftlab.pipeline.doc_recipe)
    on the smoke's toy world: its base frozen first, the reading from the base's drafter (no replicate here)."""
    from draftlab.pipeline.doc_recipe import run_recipe

    subprocess.run([sys.executable, str(SCRATCH / "tools" / "toy_world.py"), "replicate", "--freeze-base"], cwd=world,
                   env=env, check=True, capture_output=True)
    for old in (world / paths.REPLICATES).glob("*/reading-lastrank-seed-0"):
        shutil.rmtree(old)  # the previous smoke's reading (written once: this run reads again)
    r = run_recipe(SCRATCH / "docs" / "toy-world.md", "a new corrector's first reading", SCRATCH, env,
                   {"--seed 1": "--seed 0"})
    if r.returncode:
        print((r.stdout + r.stderr)[-3000:], file=sys.stderr)
        print(f"docs/toy-world.md's recipe for a new corrector failed (exit {r.returncode}) in {world}", file=sys.stderr)
        return r.returncode
    print(f"toy world recipe ok: {r.stdout.strip().splitlines()[-1][:200]}")
    return 0
