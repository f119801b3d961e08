"""draftlab.pipeline.toy.report: per-family pairs match prompts by id and carry a paired interval (descriptive under
16 prompts), the verdict reads the interval against its null, the consistency check and the perfect drafter's τ
are the arithmetic the module states."""
from __future__ import annotations

import math

import pytest

from draftlab.pipeline.toy.report import ceilings, consistency, family_pair, family_pairs, overall_pairs, verdict


def bench(n: int = 16, gain: float = 1.0) -> dict:
    ids = [f"copy/eval-copy-{i:07d}" for i in range(n)]
    ar = {"per_prompt": {"prompt_id": ids, "tau": [None] * n, "tokens": [49.0] * n}}
    base = {"per_prompt": {"prompt_id": ids, "tau": [2.0 + 0.1 * (i % 3) for i in range(n)], "tokens": [49.0] * n}}
    # the method's prompts in another order: the pair must match them by id, not by position
    better = {"per_prompt": {"prompt_id": ids[::-1], "tau": [2.0 + 0.1 * ((n - 1 - i) % 3) + gain for i in range(n)],
                             "tokens": [49.0] * n}}
    return {"suites": {"copy": {"t0": {"ar": ar, "dflash": base, "dcoco": better}}},
            "summary": {"dflash": {"tau_t0": 2.1, "tau_t0_ci": [2.0, 2.2]}},
            "pairs": [{"pair": "dcoco vs dflash", "temperature": "t0", "prompts": {"copy": n}, "tau_diff": gain,
                       "tau_diff_ci": [gain - 0.1, gain + 0.1], "tokens_per_s_ratio": 0.98,
                       "tokens_per_s_ratio_ci": [0.95, 1.01]}]}


def test_the_verdict_reads_the_interval_against_its_null():
    assert verdict([0.1, 0.3]) == "win" and verdict([-0.3, -0.1]) == "loss" and verdict([-0.1, 0.2]) == "no effect shown"
    assert verdict([1.01, 1.2], 1.0) == "win" and verdict([0.9, 1.1], 1.0) == "no effect shown"
    assert verdict(None) == verdict([None, None]) == "no interval"


def test_a_family_pair_matches_prompts_by_id_and_is_descriptive_under_16():
    r = family_pair(bench(16, 1.0), "dcoco", "dflash", "copy", "t0")
    assert r["prompts"] == 16 and r["tau_diff"] == pytest.approx(1.0) and r["tau_diff_ci"] == [1.0, 1.0]
    assert r["verdict"] == "win" and r["tau_b"] == pytest.approx(2.0 + 0.1 * sum(i % 3 for i in range(16)) / 16, abs=1e-4)
    assert family_pair(bench(15, 1.0), "dcoco", "dflash", "copy", "t0")["verdict"] == "descriptive"
    assert family_pair(bench(), "dcoco", "dflash", "copy", "t1") is None  # not sampled
    assert family_pair(bench(), "dcoco", "ar", "copy", "t0") is None  # AR has no τ per prompt
    rows = family_pairs(bench(16, 0.0), [["dcoco", "dflash"]])
    assert [(r["tau_diff_ci"], r["verdict"]) for r in rows] == [([0.0, 0.0], "no effect shown")]


def test_overall_rows_consistency_and_ceilings():
    (row,) = overall_pairs(bench())
    assert row["tau_verdict"] == "win" and row["speed_verdict"] == "no effect shown" and row["prompts"] == 16
    c = consistency({"sim_tau_per_slot": [0.5, 0.25, 0.125], "sim_tau": 1.875}, bench())
    assert c["one_plus_sum_p"] == 1.875 == c["sim_tau"] and c["engine_tau_t0"] == 2.1
    ceil = ceilings(bench(), 16)
    assert ceil["perfect_drafter_tau"]["copy"] == pytest.approx(49 / math.ceil(49 / 16))
