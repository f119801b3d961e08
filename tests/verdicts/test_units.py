"""Every interval in a committed results file names its unit and count (issue: one unit per figure); new benchmark
output names them itself, older files were annotated from what they record (draftlab.verdicts.units)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from draftlab.verdicts.units import annotate, missing

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted(p for pat in ("results/**/*.json", "worlds/*/results/*.json", "worlds/*/replicates/*/seed-*/results/*.json")
               for p in ROOT.glob(pat))


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_committed_interval_carries_its_unit_and_count(path: Path):
    assert missing(json.loads(path.read_text())) == []


def test_a_batch_is_one_unit_and_a_pair_counts_its_batches():
    """The toy world's benchmark bootstrapped 2 batches of 8 per suite: its pairs' intervals rest on 6 units, not the
    48 prompts docs/results.md once called them."""
    # a pair row of before 2026-12-06 counted its units per suite under `prompts` (2 batches of 8 prompts each)
    d = {"config": {"batch_size": 8, "suites": ["a", "b", "c"], "prompts_per_suite": 16},
         "pairs": [{"a": "x", "b": "y", "prompts": {"a": 2, "b": 2, "c": 2}, "tau_diff_ci": [0.1, 0.3],
                    "no_loop": {"prompts": {"pooled": 2}, "tau_diff_ci": [0.0, 0.2]}}],
         "summary": {"x": {"tau_t0": 2.0, "tau_t0_ci": [1.0, 3.0]}}}
    assert len(missing(d)) == 3
    annotate(d, 8)
    assert d["pairs"][0]["units"] == {"unit": "batch", "n": 6} and d["pairs"][0]["no_loop"]["units"]["n"] == 2
    assert d["summary"]["x"]["units_t0"] == {"unit": "batch", "n": 6} and missing(d) == []
