"""`make install` fails loudly and says which torch it installed: uv installs (pip where uv cannot), each pip step
stops `make` with one line when it fails (pipefail, not the filter's exit code); TORCH=cpu / cu130 adds PyTorch's matching wheel index and the default
adds none (nothing in `make test` reaches for an index these machines cannot reach); a TORCH that is no index is one
line. The commands are read with `make -n` (nothing installed); the failing step is a real run whose pip is `false`."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")


def make(*args: str, stamp: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", "-B", *args, f"STAMP={stamp}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def pip_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if " -m pip " in line and " install " in line]


def uv_steps(out: str) -> list[str]:
    """The uv install commands of the installer line (`make -n`), one per step."""
    line = next(x for x in out.splitlines() if "uv pip install" in x)
    return [part.strip() for part in line.split("&&") if "uv pip install" in part]


def test_the_torch_switch_adds_the_matching_index_and_the_default_none(tmp_path):
    stamp = tmp_path / "stamp"
    default = make("-n", "install", "INSTALLER=pip", stamp=stamp)
    assert default.returncode == 0, default.stderr
    torch_step = [line for line in pip_lines(default.stdout) if "torch==2.13.0" in line]
    assert len(torch_step) == 1 and "--index-url" not in default.stdout and "download.pytorch.org" not in default.stdout
    for build in ("cpu", "cu130", "cu126"):
        r = make("-n", "install", "INSTALLER=pip", f"TORCH={build}", stamp=stamp)
        (step,) = [line for line in pip_lines(r.stdout) if "torch==2.13.0" in line]
        assert f"install --index-url https://download.pytorch.org/whl/{build} torch==2.13.0" in step
        assert sum("download.pytorch.org" in line for line in pip_lines(r.stdout)) == 1  # torch only
    # uv (the default installer): the same four steps, the same index for torch alone, pip's steps behind them
    uv = make("-n", "install", stamp=stamp)
    steps = uv_steps(uv.stdout)
    assert len(steps) == 4 and steps[0].endswith("torch==2.13.0") and "download.pytorch.org" not in uv.stdout
    assert "--compile-bytecode" in steps[0] and "installing with pip" in uv.stdout
    steps = uv_steps(make("-n", "install", "TORCH=cu130", stamp=stamp).stdout)
    assert steps[0].endswith("--index-url https://download.pytorch.org/whl/cu130 torch==2.13.0")
    assert sum("download.pytorch.org" in x for x in steps) == 1
    bad = make("install", "INSTALLER=conda", stamp=stamp)
    assert bad.returncode != 0 and bad.stderr.splitlines()[0] == ("error: INSTALLER=conda is not an installer: use uv "
                                                                  "(the default) or pip")
    assert "installed torch" in default.stdout and "CUDA" in default.stdout  # the build is printed after install
    test = subprocess.run(["make", "--no-print-directory", "-n", "-B", "test", f"STAMP={stamp}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert "download.pytorch.org" not in test.stdout and "--index-url" not in test.stdout


def test_a_torch_that_is_no_index_is_one_line(tmp_path):
    r = make("install", "TORCH=cuda12", stamp=tmp_path / "stamp")
    assert r.returncode != 0 and r.stderr.splitlines()[0] == (
        "error: TORCH=cuda12 is not a PyTorch wheel index: use cpu, cu126, cu128, cu130 (CUDA) or rocm6.4, or leave "
        "it empty")
    assert not (tmp_path / "stamp").exists()


def test_a_failed_install_step_stops_make(tmp_path):
    stamp = tmp_path / "stamp"
    r = make("install", "PIP=false", stamp=stamp)  # the first pip step fails
    assert r.returncode != 0, r.stdout + r.stderr
    assert "error: make install: 'false install torch==2.13.0' failed (its output is above)" in r.stderr
    assert "import torch, lightning" not in r.stdout  # no later step ran
    assert not stamp.exists()
