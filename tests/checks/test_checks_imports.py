"""The accelerator check imports without OmegaConf, Hydra, MLflow or DVC (the accelerator machine has none):
`draftlab.checks` and each of its modules are imported in a fresh interpreter in which those packages are blocked
(`sys.modules[name] = None` makes any import of them fail), so a module that pulls one in, directly or through
another draftlab module, fails here."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECKS = ROOT / "src" / "draftlab" / "checks"
BLOCKED = ("omegaconf", "hydra", "mlflow", "dvc")
MODULES = ["draftlab.checks", *(f"draftlab.checks.{p.stem}" for p in sorted(CHECKS.glob("*.py")) if p.stem != "__init__")]


def import_blocked(module: str) -> subprocess.CompletedProcess:
    script = (f"import importlib, sys\nfor name in {BLOCKED!r}:\n    sys.modules[name] = None\n"
              f"importlib.import_module({module!r})\n"
              f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {BLOCKED!r} and sys.modules[m] is not None)\n"
              "assert not bad, bad\n")
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=300)


@pytest.mark.parametrize("module", MODULES)
def test_checks_import_without_config_tracking_or_dvc(module):
    r = import_blocked(module)
    assert r.returncode == 0, f"{module} needs a blocked package:\n{r.stderr[-2000:]}"


def test_a_blocked_import_fails():
    """The blocking works: a module that imports OmegaConf fails under it."""
    r = import_blocked("draftlab.params")
    assert r.returncode != 0 and "omegaconf" in r.stderr
