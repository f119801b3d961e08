"""The verdicts read from per-prompt records (draftlab.verdicts): one unit per figure, total-time speed, the crossed
design over replicates, Holm on a plan's primary pairs, and the bad inputs a reader meets in one line."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from draftlab import paths
from draftlab.errors import DraftlabError
from draftlab.verdicts import reading as R, render as M
from draftlab.verdicts.plan import read_plan
from draftlab.verdicts.records import replicate_records, run_records

SUITES = ("copy", "fill")


def frame(taus: dict, seconds: dict, batch: int = 1, n: int = 12, t: float = 0.0, shift: float = 0.0) -> pd.DataFrame:
    """Per-prompt rows: arm -> τ per prompt (a callable of the prompt's index), seconds per token of the arm."""
    rows = []
    for arm, tau in taus.items():
        for s in SUITES:
            for i in range(n):
                b = i // batch
                rows.append({"arm": arm, "temperature": t, "suite": s, "sample": "headline", "streams": batch,
                             "batch": b, "prompt_id": f"{s}-{i}", "tokens": 10, "rounds": 5,
                             "tau": None if arm == "ar" else tau(i) + shift, "loop": False,
                             "batch_tokens": 10 * batch, "batch_wall_s": seconds[arm] * 10 * batch * (2 if s == "fill" else 1),
                             "decode_s": None})
    return pd.DataFrame(rows)


def test_an_arm_row_and_a_pair_name_their_units_and_read_speed_in_total_time():
    df = frame({"ar": None, "x": lambda i: 2.0 + 0.1 * (i % 3), "y": lambda i: 1.5 + 0.1 * (i % 2)},
               {"ar": 1.0, "x": 0.5, "y": 1.0})
    row = R.arm_row(df, "x", 0.0)
    assert row["tau_units"] == {"unit": "prompt", "n": 24} and row["speedup_units"] == {"unit": "prompt", "n": 24}
    assert row["speedup"] == pytest.approx(2.0) and row["speedup_geomean"] == pytest.approx(2.0)
    assert row["tau"] == pytest.approx(2.1) and row["tau_ci"][0] <= row["tau"] <= row["tau_ci"][1]
    p = R.pair_row(df, "x", "y", 0.0)
    assert p["tau_diff"] == pytest.approx(0.55) and p["verdict"] == "win" and p["p"] < 0.001
    assert p["speed"] == pytest.approx(2.0) and p["speed_units"]["n"] == 24
    # batches of 4 decoded together: the speed's unit is the batch (6 of them: descriptive), τ's stays the prompt
    db = frame({"ar": None, "x": lambda i: 2.0 + 0.1 * (i % 3)}, {"ar": 1.0, "x": 0.5}, batch=4)
    rb = R.arm_row(db, "x", 0.0)
    assert rb["speedup_units"] == {"unit": "batch", "n": 6} and rb["speedup_verdict"] == "descriptive"
    assert rb["tau_units"] == {"unit": "prompt", "n": 24}


def test_the_crossed_reading_over_replicates_and_holm_on_the_primary_pairs(tmp_path: Path):
    frames = [frame({"ar": None, "dflash": lambda i: 3.0 + 0.2 * (i % 4), "dcoco": lambda i: 3.1 + 0.2 * (i % 4),
                     "dspark": lambda i, r=r: 3.0 + 0.2 * (i % 4) + (0.3 if (i + r) % 2 else -0.3)}, {"ar": 1.0, "dflash": 0.6, "dcoco": 0.7,
                                                                      "dspark": 0.6}, shift=0.05 * r)
              for r in range(3)]
    plan_file = tmp_path / "analysis_plan.yaml"
    plan_file.write_text("primary:\n  - [dcoco, dflash, 0]\n  - [dspark, dflash, 0]\nsecondary:\n  - [dflash, ar, 0]\n")
    plan = read_plan(plan_file)
    rd = R.read_replicates(frames, plan)
    dcoco, dspark = rd["primary"]
    assert dcoco["tau_diff"] == pytest.approx(0.1) and dcoco["tau_units"] == {"unit": "prompt x run", "n": 24, "runs": 3}
    assert dcoco["per_run"] == pytest.approx([0.1] * 3) and dcoco["verdict_holm"] in ("win (Holm)", "degenerate")
    assert dspark["p_holm"] >= dspark["p"] and dspark["verdict_holm"] == "no effect shown"
    assert rd["secondary"][0]["verdict_holm"] == "descriptive"
    assert rd["base"]["tau_per_run"] == pytest.approx([3.3, 3.35, 3.4]) and rd["base"]["units"] == {"unit": "run", "n": 3}
    assert rd["primary"][0]["speed"] == pytest.approx(0.6 / 0.7) and rd["primary"][0]["speed_units"]["runs"] == 3
    su = rd["primary"][0]["speed_units"]  # a run's timing units, and all of them over the runs
    assert su["total"] == 3 * su["n"] and M.units(su) == f"{su['n']} {su['unit'][:-len(' x run')]}s x 3 runs"


def test_a_plan_in_one_line(tmp_path: Path):
    p = tmp_path / "analysis_plan.yaml"
    for text, msg in (("primary: []\n", "no primary pairs"), ("primary:\n  - [a, b]\n", "a pair is \\[arm a, arm b"),
                      ("primary:\n  - [a, b, 0]\nbogus: 1\n", "unknown keys \\['bogus'\\]"),
                      ("primary:\n  - [a, b, 0]\n  - [a, b, 0]\n", "listed twice"),
                      ("primary: [\n", "not valid YAML")):
        p.write_text(text)
        with pytest.raises(DraftlabError, match=msg):
            read_plan(p)
    with pytest.raises(DraftlabError, match="no analysis plan"):
        read_plan(tmp_path / "missing.yaml")


def _replicate(world: Path, seed: int, df: pd.DataFrame, target: str = "t" * 32, status: str = "complete") -> Path:
    folder = world / "replicates" / target[:12] / f"seed-{seed}"
    (folder / "results").mkdir(parents=True)
    df.to_csv(folder / paths.BENCH_PROMPT_RECORDS, index=False)
    (folder / "replicate.json").write_text(json.dumps({"seed": seed, "status": status, "world_hash": "w" * 64,
                                                       "target_md5": target}))
    return folder


def test_replicates_are_checked_before_any_verdict(tmp_path: Path):
    df = frame({"ar": None, "dflash": lambda i: 3.0}, {"ar": 1.0, "dflash": 0.5})
    want = {("dflash", 0.0), ("ar", 0.0)}
    with pytest.raises(DraftlabError, match="no replicates"):
        replicate_records(tmp_path, want)
    _replicate(tmp_path, 1, df)
    _replicate(tmp_path, 2, df, status="running")
    with pytest.raises(DraftlabError, match="unfinished replicates seed-2"):
        replicate_records(tmp_path, want)
    (tmp_path / "replicates" / ("t" * 12) / "seed-2" / "replicate.json").unlink()
    _replicate(tmp_path, 3, df, target="u" * 32)
    with pytest.raises(DraftlabError, match="different worlds or targets"):
        replicate_records(tmp_path, want)
    (tmp_path / "replicates" / ("u" * 12) / "seed-3" / "replicate.json").unlink()
    with pytest.raises(DraftlabError, match="lacks dcoco@T=0 .*partial replicate"):
        replicate_records(tmp_path, want | {("dcoco", 0.0)})
    recs, frames = replicate_records(tmp_path, want)
    assert [r["seed"] for r in recs] == [1] and len(frames[0]) == len(df)


def test_a_run_without_per_prompt_records_is_one_line(tmp_path: Path):
    with pytest.raises(DraftlabError, match="not a finished benchmark run"):
        run_records(tmp_path)
    (tmp_path / "results").mkdir()
    detail = {"suites": {"copy": {"t0": {"dflash": {"per_prompt": {"prompt_id": ["a,b", "c,d"], "tau": [2.0, 3.0]}}}}}}
    (tmp_path / paths.BENCH_DETAIL).write_text(json.dumps(detail))
    with pytest.raises(DraftlabError, match="no per-prompt records .*units of several prompts"):
        run_records(tmp_path)
    detail["suites"]["copy"]["t0"]["dflash"]["per_prompt"] = {"prompt_id": ["a", "b"], "tau": [2.0, 3.0],
                                                               "tokens": [10, 12], "wall_s": [1.0, 1.5]}
    (tmp_path / paths.BENCH_DETAIL).write_text(json.dumps(detail))
    df = run_records(tmp_path)
    assert list(df.tau) == [2.0, 3.0] and set(df.source) == {paths.BENCH_DETAIL} and (df.streams == 1).all()


def test_the_committed_cpu_run_recomputes_from_its_files():
    """The README's figures come from results/benchmark.json's per-prompt values (batch 1): the total-time ratio of
    the plain drafter to AR is Σ tokens / Σ seconds of each, not a mean of suite ratios."""
    root = Path(__file__).resolve().parents[2]
    df = run_records(root)
    row = R.arm_row(df, "dflash", 0.0)
    d = json.loads((root / paths.BENCH_DETAIL).read_text())["suites"]
    tok = sum(d[s]["t0"]["dflash"]["tokens"] for s in d)
    sec = sum(d[s]["t0"]["dflash"]["wall_s"] for s in d)
    ar_tok = sum(d[s]["t0"]["ar"]["tokens"] for s in d)
    ar_sec = sum(d[s]["t0"]["ar"]["wall_s"] for s in d)
    assert row["speedup"] == pytest.approx((tok / sec) / (ar_tok / ar_sec), rel=1e-6)
    assert row["tau_units"] == {"unit": "prompt", "n": 12} and np.isfinite(row["tau"])
