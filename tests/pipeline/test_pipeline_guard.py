"""`dvc repro` after a mistake loses nothing: in a scratch copy of the pipeline whose stages are all up to
date (stand-in outputs recorded with `dvc commit`), a typo in params.yaml, an unknown arm or a bad prompt
file fails in check_params, in one line, and leaves every output in place (cached ones and the
`cache: false` metrics and plot CSVs); a stage that fails while running keeps its persisted metrics and
plots, and names the stage that rebuilds an unreadable input."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
               DVC_NO_ANALYTICS="1", PYTHONWARNINGS="ignore")
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env, timeout=600)


def _outputs(wd: Path) -> list[str]:
    """Every output path that dvc.yaml declares, except check_params' own."""
    stages = yaml.safe_load((wd / "dvc.yaml").read_text())["stages"]
    out = []
    for name, spec in stages.items():
        for kind in ("outs", "metrics", "plots"):
            for entry in spec.get(kind) or []:
                path = entry if isinstance(entry, str) else next(iter(entry))
                if name != "check_params":
                    out.append(path)
    return out


def _snapshot(wd: Path) -> dict[str, tuple[bytes, int]]:
    files = {}
    for top in ("models", "data", "results", "metrics", "plots"):
        for f in sorted((wd / top).rglob("*")):
            if f.is_file() and "checks" not in f.parts:
                files[str(f.relative_to(wd))] = (f.read_bytes(), f.stat().st_mtime_ns)
    return files


@pytest.fixture(scope="module")
def pipeline(root, tmp_path_factory) -> Path:
    wd = tmp_path_factory.mktemp("guard")
    for part in ("dvc.yaml", "params.yaml", "src", "examples"):
        src = root / part
        (shutil.copytree(src, wd / part, ignore=shutil.ignore_patterns("__pycache__")) if src.is_dir()
         else shutil.copy2(src, wd / part))
    params = yaml.safe_load((wd / "params.yaml").read_text())
    params["tracking"]["enabled"] = False
    (wd / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    for path in _outputs(wd):  # stand-ins: a folder holds one file, a file holds its own name
        p = wd / path
        if Path(path).suffix:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(f"old {path}\n")
        else:
            p.mkdir(parents=True, exist_ok=True)
            (p / "config.json").write_text(f"old {path}\n")  # not JSON: a corrupt checkpoint for the last test
    assert _run(["dvc", "init", "--no-scm", "-q"], wd).returncode == 0
    r = _run(["dvc", "repro", "check_params"], wd)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    r = _run(["dvc", "commit", "-f", "-q"], wd)
    assert r.returncode == 0, r.stderr[-2000:]
    status = _run(["dvc", "status"], wd).stdout
    assert "pretrain_drafter" not in status and "benchmark" not in status, status  # all up to date
    return wd


def _set(wd: Path, edit) -> str:
    """Apply edit(params dict) to params.yaml; returns the original text."""
    text = (wd / "params.yaml").read_text()
    params = yaml.safe_load(text)
    edit(params)
    (wd / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return text


def _typo(p):
    p["pretrain"]["lrr"] = p["pretrain"].pop("lr")


def _arm(p):
    p["benchmark"]["arms"] = ["ar", "dflash", "nosuch"]


def _bad_file(p):
    p["data"]["local_suites"] = {"mine": "bad.jsonl"}
    p["benchmark"]["suites"] = ["mt-bench", "mine"]


@pytest.mark.parametrize("edit,message", [
    (_typo, "error [check_params]: unknown key 'pretrain.lrr' (did you mean 'lr'?)"),
    (_arm, "error [check_params]: benchmark.arms names unknown arm 'nosuch'; known arms: ar, dflash, dflash-specopd"),
    (_bad_file, "error [check_params]: bad.jsonl:2: 'prompt' must be a string, got int (5)"),
])
def test_a_mistake_fails_first_and_keeps_every_output(pipeline, edit, message):
    wd = pipeline
    (wd / "bad.jsonl").write_text('{"prompt": "fine"}\n{"prompt": 5}\n')
    before = _snapshot(wd)
    assert any(k.startswith("metrics/") for k in before) and any(k.startswith("plots/") for k in before)
    original = _set(wd, edit)
    try:
        r = _run(["dvc", "repro"], wd)
    finally:
        (wd / "params.yaml").write_text(original)
    assert r.returncode != 0
    errors = [line for line in (r.stdout + r.stderr).splitlines() if line.startswith("error [")]
    assert len(errors) == 1 and errors[0].startswith(message), r.stdout[-2000:] + r.stderr[-2000:]
    assert _snapshot(wd) == before  # same bytes, not even rewritten
    assert "Running stage 'prepare_target'" not in r.stdout + r.stderr


def test_a_stage_that_fails_keeps_its_metrics_and_names_who_rebuilds_its_input(pipeline):
    wd = pipeline
    before = _snapshot(wd)
    original = _set(wd, lambda p: p["benchmark"].update(max_new_tokens=5))
    try:
        r = _run(["dvc", "repro"], wd)
    finally:
        (wd / "params.yaml").write_text(original)
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "Running stage 'benchmark'" in out, out[-3000:]
    errors = [line for line in out.splitlines() if line.startswith("error [")]
    assert len(errors) == 1 and errors[0].startswith("error [benchmark]: models/target/config.json is not valid JSON"), out
    assert "stage 'prepare_target' writes it: rebuild with `dvc repro -f -s prepare_target`" in errors[0]
    after = _snapshot(wd)
    spec = yaml.safe_load((wd / "dvc.yaml").read_text())["stages"]["benchmark"]
    uncached = [p for kind in ("outs", "metrics", "plots") for e in spec[kind] if isinstance(e, dict)
                for p, opts in e.items() if opts and opts.get("cache") is False]
    files = [k for k in before for u in uncached if k == u or k.startswith(u + "/")]  # a folder: its files
    assert len(uncached) >= 6 and len(files) >= len(uncached)
    assert all(after.get(k) == before[k] for k in files)  # persisted: not removed while it ran


def test_every_uncached_output_is_persisted(root):
    """DVC cannot restore a `cache: false` file, so each one must survive a failed run (`persist: true`)."""
    stages = yaml.safe_load((root / "dvc.yaml").read_text())["stages"]
    missing = [f"{name}: {path}" for name, spec in stages.items() for kind in ("outs", "metrics", "plots")
               for entry in spec.get(kind) or [] if isinstance(entry, dict)
               for path, opts in entry.items() if opts and opts.get("cache") is False and not opts.get("persist")]
    assert not missing, f"add `persist: true` to: {missing}"
