"""draftlab.measure.verify_cost and its command line tools/verify_cost.py (issue 20 item 4) on a tiny random target:
a --tiny --quick run writes a valid metrics file (every width, batch and context; plain / seeded drafters with the
draft and the full vocabulary head; medians inside their intervals), the interval and slope helpers, one-line bad
input."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from draftlab.measure import verify_cost

TOOL = Path(__file__).resolve().parents[2] / "tools" / "verify_cost.py"


@pytest.fixture(scope="module")
def cli():
    """The command line's main (the script imported from its path)."""
    spec = importlib.util.spec_from_file_location("verify_cost_tool", TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.main


def test_tiny_run_writes_a_valid_file(cli, tmp_path, capsys):
    out = tmp_path / "metrics" / "verify_cost.json"
    rc = cli(["--tiny", "--quick", "--reps", "3", "--warmup", "0", "--batches", "1,2", "--contexts", "24",
                  "--linear", "auto,torch", "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    d = json.loads(out.read_text())
    assert d["schema"] == verify_cost.SCHEMA and d["setup"]["tiny"] and d["setup"]["quick"]
    S = d["setup"]["block_size"]
    assert {(r["batch"], r["context"], r["linear"], r["width"]) for r in d["verify"]} == {
        (b, 24, m, w) for b in (1, 2) for m in ("auto", "torch") for w in range(1, S + 1)}
    assert {(f["batch"], f["linear"]) for f in d["fits"]} == {(b, m) for b in (1, 2) for m in ("auto", "torch")}
    for r in d["verify"] + d["draft"]:
        lo, hi = r["ci_ms"]
        assert 0 < lo <= r["median_ms"] <= hi and r["n"] == 3
    names = {r["drafter"] for r in d["draft"]}
    assert names == {"plain/draft-vocab", "plain/full-vocab", "seeded/draft-vocab", "seeded/full-vocab"}
    assert {(r["drafter"], r["linear"]) for r in d["draft"]} == {(n, m) for n in names for m in ("auto", "torch")}
    assert {r["head_vocab"] for r in d["draft"]} == {64, 256}
    assert all(r["seeded"] == r["drafter"].startswith("seeded") for r in d["draft"])
    for f in d["fits"]:
        assert f["ar_ms"] > 0 and f["break_even_min_prob"] == pytest.approx(f["per_position_ms"] / f["ar_ms"], rel=1e-4,
                                                                                           abs=1e-6)  # 6 decimals
        assert set(f["full_head_extra_ms"]) == {"plain", "seeded"}
    printed = capsys.readouterr().out
    assert "break-even min_prob" in printed and "w= 1" in printed and str(out) in printed
    assert not list(out.parent.glob(".*"))  # written atomically: no temp file left


def test_helpers():
    vc = verify_cost
    assert vc.median_ci([3.0, 1.0, 2.0]) == (2.0, 1.0, 3.0)  # few values: [min, max]
    m, lo, hi = vc.median_ci([float(i) for i in range(1, 101)])
    assert m == 50.5 and 35 <= lo < m < hi <= 66  # the order statistics around the middle
    assert vc.slope([1, 2, 3, 4], [5.0, 7.0, 9.0, 11.0]) == pytest.approx(2.0)
    p = vc.looping_prompts(2, 40, 50, 0)
    assert [len(x) for x in p] == [40, 40] and all(1 <= t <= 48 for x in p for t in x)
    assert p[0][1:8] == p[0][25:32]  # the motif repeats: a seeded drafter finds seeds


@pytest.mark.parametrize("args,msg", [(["--batches", "0"], "--batches '0' must be a comma list of positive integers"),
                                      (["--contexts", "x"], "--contexts 'x' must be"),
                                      (["--reps", "-1"], "--reps -1 must be >= 1"),
                                      (["--linear", "fast"], "--linear 'fast' must be a comma list of auto / torch / few-row / onednn"),
                                      (["--widths", "2-x"], "--widths '2-x' must be a comma list of widths or ranges"),
                                      (["--widths", "0"], "--widths '0' must name positive widths")])
def test_bad_input_is_one_line(cli, tmp_path, capsys, args, msg):
    assert cli(["--tiny", "--quick", "--out", str(tmp_path / "x.json"), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and msg in err and "\n" not in err
    assert not (tmp_path / "x.json").exists()


def test_widths_floor_and_plans(cli, tmp_path, capsys):
    """--widths beyond the block (a tree's 17), each mode's plan, and the machine's floor beside every width: the
    weights read once or their arithmetic at the measured rates, plus what a pass spends besides its products."""
    out = tmp_path / "vc.json"
    assert cli(["--tiny", "--reps", "2", "--warmup", "1", "--batches", "1", "--contexts", "24", "--widths", "2,5-6",
                "--linear", "torch,few-row", "--out", str(out)]) == 0, capsys.readouterr().err
    d = json.loads(out.read_text())
    assert d["setup"]["widths"] == [1, 2, 5, 6]  # 1 (the AR step) always
    assert {r["width"] for r in d["verify"]} == {1, 2, 5, 6}
    assert d["plans"]["torch"]["summary"] == "torch" and d["plans"]["few-row"]["summary"] == "few-row"
    r = d["rates"]
    assert r["read_gb_s"] > 0 and r["matmul_gflop_s"] > 0
    assert [f["width"] for f in d["floor"]] == [1, 2, 5, 6]
    for f in d["floor"]:
        assert f["floor_ms"] == pytest.approx(f["floor_linear_ms"] + f["non_matmul_w1_ms"], abs=1e-5)  # 6 decimals
        assert set(f["products_ms"]) >= {"torch", "few-row"}
    assert d["floor"][0]["floor_linear_ms"] <= d["floor"][-1]["floor_linear_ms"]  # more rows: never a lower floor
    assert d["setup"]["omp"]["cores"] >= 1 and "floor" in capsys.readouterr().out
    assert cli(["--show", str(out)]) == 0  # the by-width table from the file: one row per width, the floor beside
    table = capsys.readouterr().out.splitlines()
    assert table[0].startswith("| width | `torch` ms | `few-row` ms |") and len([x for x in table if x[:3] == "| 1"]) == 1
    v1 = {r["linear"]: r["median_ms"] for r in d["verify"] if r["width"] == 6}
    assert f"| 6 | {v1['torch']:.1f} | {v1['few-row']:.1f} |" in "\n".join(table)
    (tmp_path / "bad.json").write_text("{}")
    assert cli(["--show", str(tmp_path / "bad.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --show") and "not a verify-cost file" in err and "\n" not in err
