"""tools/seeds_only_probe.py: its statistics (geometric mean, bootstrap interval) and its one-line bad input (sizes
below 1; no trained models where it runs). The measurement itself needs the pipeline's models (metrics/seeds_only.json
is its committed output)."""
from __future__ import annotations

import math

import pytest

from conftest import load_tool


@pytest.fixture(scope="module")
def probe():
    return load_tool("seeds_only_probe")


def test_statistics(probe):
    assert math.isclose(probe.geo([1.0, 4.0]), 2.0) and math.isclose(probe.geo([0.5, 2.0, 1.0]), 1.0)
    assert probe.interval([1.25] * 9, probe.geo) == pytest.approx([1.25, 1.25])
    lo, hi = probe.interval([0.9, 1.0, 1.1, 1.2, 0.95, 1.05], probe.mean)
    assert 0.9 <= lo < probe.mean([0.9, 1.0, 1.1, 1.2, 0.95, 1.05]) < hi <= 1.2
    assert {"cut-seeds vs cut-draft", "cut-seeds vs pld"} <= {f"{a} vs {b}" for a, b in probe.PAIRS}


def test_bad_input_is_one_line(probe, tmp_path, monkeypatch, capsys):
    assert probe.main(["--prompts", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "seeds_only_probe: --prompts and --new must be >= 1"
    monkeypatch.chdir(tmp_path)  # no models/ here: the pipeline has not run
    assert probe.main(["--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "run `dvc repro` first" in err and not (tmp_path / "x.json").exists()
