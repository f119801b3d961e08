"""Run the whole DVC pipeline on the `smoke` profile in a scratch copy (.smoke/) of the working tree.

The copy gets params.yaml composed with profile=smoke, its own DVC cache and MLflow store, so the
committed metrics/ and dvc.lock are never touched. Re-running is incremental (DVC skips stages
whose inputs did not change). Extra arguments are Hydra overrides, e.g. `target=tiny-random`.
The run also benchmarks the example local suite (examples/my_prompts.jsonl as `my-prompts`) and
checks that it reached results/benchmark.json, and that the seeded drafter's outputs
(models/drafter/seeded, its comparison table and the `dflash-seeded` arm) are there, and, with `seeded.methods`
(the smoke default), that the method stages recorded the seeded drafter as their base and its `-seeded` arms ran;
MLflow runs are tagged with this repository's commit.
Open the result in the explorer with `draftlab explore --root .smoke`.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRATCH = ROOT / ".smoke"
# the example of README "Your own prompts": a local JSONL benchmarked as its own suite
LOCAL_SUITE = ["data.local_suites.my-prompts=examples/my_prompts.jsonl", "benchmark.suites=[mt-bench,my-prompts]"]


def git(*args: str) -> str:
    r = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else ""


def tracked_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [f for f in out.stdout.splitlines() if f and not f.startswith((".smoke/", "metrics/", "results/", "plots/")) and f != "dvc.lock"]


def check_seeded(root: Path) -> str:
    """The seeded drafter's outputs (stage pretrain_seeded, enabled in the smoke profile): a seeded checkpoint,
    the report's comparison table, its headline, and the `dflash-seeded` arm in the benchmark. '' when fine."""
    params = (root / "params.yaml").read_text()
    if "dflash-seeded" not in params:  # a run whose arms leave the seeded drafter out (e.g. profile overrides)
        return ""
    cfg = root / "models" / "drafter" / "seeded" / "config.json"
    if not cfg.exists() or json.loads(cfg.read_text()).get("seed") != "lookup":
        return f"{cfg.relative_to(root)} is missing or not a seeded drafter (seed=lookup)"
    rep = json.loads((root / "results" / "pretrain_seeded.json").read_text())
    comp = rep.get("comparison") or {}
    if not comp.get("all", {}).get("sequences") or set(comp["all"].get("pairs", {})) != {
            "seeded-lookup", "seeded-hybrid", "seeded-plain"}:
        return "results/pretrain_seeded.json has no comparison table (seeded vs lookup, hybrid, plain)"
    if "sim_tau" not in json.loads((root / "metrics" / "pretrain_seeded.json").read_text()):
        return "metrics/pretrain_seeded.json has no sim_tau headline"
    summary = json.loads((root / "results" / "benchmark.json").read_text()).get("summary", {})
    if "dflash-seeded" not in summary:
        return f"the dflash-seeded arm is missing from .smoke/results/benchmark.json (arms: {sorted(summary)})"
    return check_seeded_methods(root, summary)


def check_seeded_methods(root: Path, summary: dict) -> str:
    """With seeded.methods: every folder the specopd and corrector stages wrote records the seeded drafter as its
    base (info base_kind), and the benchmark ran the methods' -seeded arms. '' when fine (or methods is off)."""
    import yaml

    if not (yaml.safe_load((root / "params.yaml").read_text()).get("seeded") or {}).get("methods"):
        return ""
    folders = [root / "models" / "drafter" / "specopd" / "t0", root / "models" / "drafter" / "long",
               *sorted(p.parent for p in (root / "models" / "corrector").glob("*/drafter/config.json"))]
    for f in folders:
        cfg = f / "config.json"
        kind = json.loads(cfg.read_text()).get("info", {}).get("base_kind") if cfg.exists() else None
        if kind != "seeded":
            return f"{f.relative_to(root)} was not trained on the seeded drafter (info base_kind={kind!r}, seeded.methods=true)"
    ran = sorted(a for a in summary if a.endswith("-seeded") and a != "dflash-seeded")
    return "" if ran else f"no method arm on the seeded drafter (<method>-seeded) in the benchmark (arms: {sorted(summary)})"


def main(argv: list[str]) -> int:
    SCRATCH.mkdir(exist_ok=True)
    for f in tracked_files():
        src, dst = ROOT / f, SCRATCH / f
        if not src.is_file():
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        if not dst.exists() or dst.read_bytes() != src.read_bytes():
            shutil.copy2(src, dst)
    py = sys.executable
    params = subprocess.run([py, "-m", "draftlab.config", "compose", "profile=smoke", *LOCAL_SUITE, *argv], cwd=ROOT,
                            capture_output=True, text=True)
    if params.returncode:
        print(params.stderr.strip(), file=sys.stderr)
        return 2
    (SCRATCH / "params.yaml").write_text(params.stdout)
    if not (SCRATCH / ".git").exists():
        subprocess.run(["git", "init", "-q"], cwd=SCRATCH, check=True)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}", DVC_NO_ANALYTICS="1",
               DRAFTLAB_GIT_COMMIT=git("rev-parse", "--verify", "-q", "HEAD") or "unknown",
               DRAFTLAB_GIT_DIRTY=str(bool(git("status", "--porcelain", "--untracked-files=no"))).lower())
    rc = subprocess.run(["dvc", "repro"], cwd=SCRATCH, env=env).returncode
    if rc:
        print(f"smoke pipeline failed (dvc repro exit {rc}); outputs in {SCRATCH}", file=sys.stderr)
        return rc
    bad = []
    written = sorted([*(SCRATCH / "results").glob("*.json"), *(SCRATCH / "metrics").rglob("*.json")])
    for m in written:
        try:
            json.loads(m.read_text())
        except json.JSONDecodeError:
            bad.append(str(m.relative_to(SCRATCH)))
    if bad:
        print(f"smoke pipeline wrote unreadable reports or metrics: {bad}", file=sys.stderr)
        return 1
    suites = json.loads((SCRATCH / "results" / "benchmark.json").read_text()).get("suites", {})
    if "my-prompts" not in suites and not any(a.startswith("benchmark.suites") for a in argv):
        print(f"the example local suite is missing from .smoke/results/benchmark.json (suites: {list(suites)})",
              file=sys.stderr)
        return 1
    problem = check_seeded(SCRATCH)
    if problem:
        print(problem, file=sys.stderr)
        return 1
    print(f"smoke pipeline ok: {len(written)} reports and headline metrics files "
          f"({', '.join(m.name for m in sorted((SCRATCH / 'results').glob('*.json')))})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
