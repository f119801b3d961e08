"""draftlab.pipeline.toy.report: per-family pairs match prompts by id and carry a paired interval (descriptive under
16 prompts), the verdict reads the interval against its null, the consistency check and the perfect drafter's τ
are the arithmetic the module states."""
from __future__ import annotations

import math

import pytest

from draftlab.pipeline.toy.report import (ceilings, consistency, family_pair, family_pairs, overall_pairs,
                                          prompt_taus, verdict)


def rounds(n: int = 16, gain: int = 1):
    """A round log: dflash accepts 1 or 2 proposals a round (by prompt), dcoco `gain` more, on two families."""
    import pandas as pd

    rows = []
    for fam in ("copy", "fill"):
        for i in range(n):
            pid = f"{fam}/eval-{fam}-{i:07d}"
            for r in range(3):
                rows.append(("dflash", fam, 0.0, 8, pid, r, 1 + i % 2))
                rows.append(("dcoco", fam, 0.0, 8, pid, r, 1 + i % 2 + gain))
                rows.append(("dcoco", fam, 0.0, 1, pid, r, 9))  # a sweep row: another concurrency, left out
    return pd.DataFrame(rows, columns=["arm", "suite", "temperature", "concurrency", "prompt_id", "round", "accepted"])


def bench(n: int = 16, gain: float = 1.0) -> dict:
    ids = [f"copy/eval-copy-{i:07d}" for i in range(n)]
    ar = {"per_prompt": {"prompt_id": ids, "tau": [None] * n, "tokens": [49.0] * n}}
    return {"suites": {"copy": {"t0": {"ar": ar}}}, "summary": {"dflash": {"tau_t0": 2.1, "tau_t0_ci": [2.0, 2.2]}},
            "pairs": [{"pair": "dcoco vs dflash", "temperature": "t0", "prompts": {"copy": n}, "tau_diff": gain,
                       "tau_diff_ci": [gain - 0.1, gain + 0.1], "tokens_per_s_ratio": 0.98,
                       "tokens_per_s_ratio_ci": [0.95, 1.01]}]}


def test_the_verdict_reads_the_interval_against_its_null():
    assert verdict([0.1, 0.3]) == "win" and verdict([-0.3, -0.1]) == "loss" and verdict([-0.1, 0.2]) == "no effect shown"
    assert verdict([1.01, 1.2], 1.0) == "win" and verdict([0.9, 1.1], 1.0) == "no effect shown"
    assert verdict(None) == verdict([None, None]) == "no interval"


def test_prompt_taus_and_family_pairs_use_each_prompt_as_the_unit():
    taus = prompt_taus(rounds(16, 1), batch_size=8)
    assert taus[("dflash", "t0", "copy")]["copy/eval-copy-0000001"] == 3.0  # (2 + 1) committed per round
    assert taus[("dcoco", "t0", "fill")]["fill/eval-fill-0000000"] == 3.0  # the sweep's rows left out
    rows = family_pairs(taus, [["dcoco", "dflash"]], ["copy", "fill"])
    assert [(r["family"], r["prompts"], r["tau_diff"], r["tau_diff_ci"], r["verdict"]) for r in rows] == [
        # every prompt differs by exactly 1: a zero-width interval is degenerate, never a win (stats.verdict)
        ("all", 32, 1.0, [1.0, 1.0], "degenerate"), ("copy", 16, 1.0, [1.0, 1.0], "degenerate"),
        ("fill", 16, 1.0, [1.0, 1.0], "degenerate")]
    few = family_pair(prompt_taus(rounds(15, 0), 8), "dcoco", "dflash", ["copy"], "t0", "copy")
    assert few["verdict"] == "descriptive" and few["tau_diff"] == 0.0
    assert family_pair(taus, "dcoco", "dflash", ["copy"], "t1", "copy") is None  # not sampled
    # noisy differences: the interval brackets the mean difference and is wider than zero
    import pandas as pd

    df = rounds(16, 0)
    dcoco = (df.arm == "dcoco") & (df.concurrency == 8)
    df.loc[dcoco, "accepted"] += df.loc[dcoco, "prompt_id"].str[-2:].astype(int) % 3  # 0, 1 or 2 more, by prompt
    r = family_pair(prompt_taus(pd.DataFrame(df), 8), "dcoco", "dflash", ["copy", "fill"], "t0", "all")
    assert r["tau_diff_ci"][0] < r["tau_diff"] < r["tau_diff_ci"][1] and r["verdict"] == "win"


def test_overall_rows_consistency_and_ceilings():
    (row,) = overall_pairs(bench())
    assert row["tau_verdict"] == "win" and row["speed_verdict"] == "no effect shown" and row["prompts"] == 16
    c = consistency({"sim_tau_per_slot": [0.5, 0.25, 0.125], "sim_tau": 1.875}, bench())
    assert c["one_plus_sum_p"] == 1.875 == c["sim_tau"] and c["engine_tau_t0"] == 2.1
    ceil = ceilings(bench(), 16)
    assert ceil["perfect_drafter_tau"]["copy"] == pytest.approx(49 / math.ceil(49 / 16))
