"""The tables the accelerator check writes into docs/gpu.md, and the plan's calibration table, render exactly as they
did before draftlab.markdown wrote them (tests/fixtures/markdown_tables.json: the text rendered by the hand-built
tables of commit 2553fd1, from the committed metrics/gpu_check.json with the v2 keys it lacks filled in, plus
synthetic flex and compiled sections)."""
from __future__ import annotations

import copy
import json
from pathlib import Path

from draftlab.checks.report import render_doc
from draftlab.plan.calibrate import table

FIXTURE = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "markdown_tables.json").read_text())
CALIBRATE = [("reference", 1080.2, 1000.0, 1.08), ("pretrain_drafter", 9.5, 12.25, 0.776)]
DEFAULTS = [("reference", 1500.0, 0, 0), ("pretrain_drafter", 20.0, 0, 0)]


def odd(full: dict) -> dict:
    """The odd rows: a gate that fails, a kernel that does not match, a skipped compiled section."""
    out = copy.deepcopy(full)
    out["sanity_gates"] = {**out.get("sanity_gates", {}), "made_up_gate": False}
    out["sections"]["compiled"] = {"status": "skipped", "error": "no time", "backend": "inductor"}
    out["sections"]["kernels"]["results"][0]["match"] = False
    out["sections"]["kernels"]["results"][0]["error"] = "mismatch"
    return out


def test_the_accelerator_report_renders_as_before():
    full = FIXTURE["input"]
    assert render_doc(full) == FIXTURE["rendered"]["full"]
    assert render_doc(odd(full)) == FIXTURE["rendered"]["odd"]


def test_the_calibration_table_renders_as_before():
    assert table(CALIBRATE) == FIXTURE["calibrate"]["plain"]
    assert table(CALIBRATE, DEFAULTS, what="step", ms=True) == FIXTURE["calibrate"]["defaults_ms"]
