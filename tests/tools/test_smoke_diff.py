"""tools/smoke_diff.py: two runs equal but for timings compare equal; a changed figure is one line naming file and
key; a pair whose arm a measured speed chose (`best vs X`) is not a result; a folder that is no run is one line."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

TOOL = Path(__file__).resolve().parents[2] / "tools" / "smoke_diff.py"


def _tool():
    spec = importlib.util.spec_from_file_location("smoke_diff", TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(root: Path, tau: float, tok_s: float, best: str) -> Path:
    (root / "results").mkdir(parents=True)
    (root / "plots").mkdir()
    pairs = [{"pair": "dcoco vs dflash", "a": "dcoco", "b": "dflash", "temperature": "t0", "tau_diff": 0.5},
             {"pair": "best vs pld", "a": best, "b": "pld", "temperature": "t1", "tau_diff": 0.1 if best == "x" else 0.2}]
    doc = {"summary": {"dcoco": {"tau_t0": tau, "tokens_per_s_t0": tok_s, "wall_s": tok_s}}, "pairs": pairs,
           "setup": {"halfwidths": {"pairs": {f"{best} vs pld (t1)": 0.3, "dcoco vs dflash (t0)": 0.05}}}}
    (root / "results" / "benchmark.json").write_text(json.dumps(doc))
    (root / "plots" / "curve.csv").write_text(f"step,tau,proposal_share\n1,{tau},{tok_s / 1000}\n")
    return root


def test_timings_and_speed_choices_are_not_results(tmp_path, capsys):
    tool = _tool()
    base = _run(tmp_path / "a", 2.5, 100.0, "x")
    assert tool.main([str(base), str(_run(tmp_path / "b", 2.5, 93.0, "y"))]) == 0
    assert "equal in every non-timing field" in capsys.readouterr().out
    assert tool.main([str(base), str(_run(tmp_path / "c", 2.25, 100.0, "x"))]) == 1
    out = capsys.readouterr().out.splitlines()
    assert sorted(out) == ["plots/curve.csv[0].tau: '2.5' != '2.25'", "results/benchmark.json.summary.dcoco.tau_t0: 2.5 != 2.25"]


def test_a_folder_that_is_no_run_is_one_line(tmp_path, capsys):
    assert _tool().main([str(tmp_path), str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds none of results, metrics, plots" in err[0]
