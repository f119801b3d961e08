"""tools/probes/seeds_only_probe.py: the statistics it reads from draftlab.stats (geometric mean, bootstrap interval)
and its one-line bad input (sizes below 1; no trained models where it runs). The measurement itself needs the
pipeline's models (metrics/seeds_only.json is its committed output)."""
from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from statistics import fmean as mean

import pytest

from draftlab.stats import bootstrap_interval, geometric_mean as geo

TOOL = Path(__file__).resolve().parents[2] / "tools" / "probes" / "seeds_only_probe.py"


@pytest.fixture(scope="module")
def probe():
    """The probe script, imported from its path."""
    spec = importlib.util.spec_from_file_location("seeds_only_probe", TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def interval(values, stat) -> list[float]:
    lo, _, hi = bootstrap_interval(values, stat)
    return [lo, hi]


def test_statistics(probe):
    assert math.isclose(geo([1.0, 4.0]), 2.0) and math.isclose(geo([0.5, 2.0, 1.0]), 1.0)
    assert interval([1.25] * 9, geo) == pytest.approx([1.25, 1.25])
    lo, hi = interval([0.9, 1.0, 1.1, 1.2, 0.95, 1.05], mean)
    assert 0.9 <= lo < mean([0.9, 1.0, 1.1, 1.2, 0.95, 1.05]) < hi <= 1.2
    assert probe.interval([0.9, 1.0, 1.1, 1.2, 0.95, 1.05], mean) == [lo, hi]  # the probe's interval is the library's
    assert {"cut-seeds vs cut-draft", "cut-seeds vs pld"} <= {f"{a} vs {b}" for a, b in probe.PAIRS}


def test_bad_input_is_one_line(probe, tmp_path, monkeypatch, capsys):
    assert probe.main(["--prompts", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "seeds_only_probe: --prompts and --new must be >= 1"
    monkeypatch.chdir(tmp_path)  # no models/ here: the pipeline has not run
    assert probe.main(["--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "run `dvc repro` first" in err and not (tmp_path / "x.json").exists()
