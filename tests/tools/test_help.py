"""Every tool answers --help (issue "A newcomer's third hour", item 5): the tools that read their own arguments print
their docstring and exit 0 without running anything (tools/smoke.py once ran the pipeline with `--help` as an
override), a bad option value is one line; the others parse with argparse, whose --help is its own."""
from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT

OWN_PARSERS = ("smoke.py", "tree_verdict.py", "lilicorr_verdict.py")
DELEGATES = ("calibrate_plan.py", "gpu_check.py", "gpu_run.py")  # thin scripts over a module's argparse main


def test_every_other_tool_parses_with_argparse():
    tools = sorted(p.name for p in (ROOT / "tools").glob("*.py"))
    assert set(OWN_PARSERS) | set(DELEGATES) <= set(tools)
    for name in set(tools) - set(OWN_PARSERS) - set(DELEGATES):
        assert "argparse" in (ROOT / "tools" / name).read_text(), f"tools/{name}: parse with argparse or list it here"


@pytest.mark.parametrize("tool", OWN_PARSERS)
def test_help_prints_the_docstring_and_runs_nothing(tool, tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "tools" / tool), "--help"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() and not r.stderr.strip(), r.stderr
    assert not any(tmp_path.iterdir())  # nothing written where it ran


@pytest.mark.parametrize("tool, args", [("tree_verdict.py", ["--budgets", "x"]), ("lilicorr_verdict.py", ["--trees"])])
def test_a_bad_option_value_is_one_line(tool, args, tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "tools" / tool), *args], cwd=tmp_path, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "(--help shows the options)" in r.stderr, r.stderr
