"""Run the whole DVC pipeline on the `smoke` profile in a scratch copy (.smoke/) of the working tree.

The copy gets params.yaml composed with profile=smoke, its own DVC cache and MLflow store, so the
committed metrics/ and dvc.lock are never touched. Re-running is incremental (DVC skips stages
whose inputs did not change). Extra arguments are Hydra overrides, e.g. `target=tiny-random`.
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


def tracked_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [f for f in out.stdout.splitlines() if f and not f.startswith((".smoke/", "metrics/", "results/", "plots/")) and f != "dvc.lock"]


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
    params = subprocess.run([py, "-m", "draftlab.config", "compose", "profile=smoke", *argv], cwd=ROOT,
                            capture_output=True, text=True)
    if params.returncode:
        print(params.stderr.strip(), file=sys.stderr)
        return 2
    (SCRATCH / "params.yaml").write_text(params.stdout)
    if not (SCRATCH / ".git").exists():
        subprocess.run(["git", "init", "-q"], cwd=SCRATCH, check=True)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}", DVC_NO_ANALYTICS="1")
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
    print(f"smoke pipeline ok: {len(written)} reports and headline metrics files "
          f"({', '.join(m.name for m in sorted((SCRATCH / 'results').glob('*.json')))})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
