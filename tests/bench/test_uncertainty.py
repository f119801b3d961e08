"""Confidence intervals over prompts (draftlab.bench.uncertainty) on synthetic runs: intervals cover the point
estimate and shrink with more prompts, pairing cancels shared prompt difficulty, AR is exact, pairs resolve
`best`, and the sizing rule meets its target half-width."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from draftlab.bench.metrics import compute
from draftlab.bench.runner import BatchRun
from draftlab.bench.uncertainty import (add_intervals, collect_units, halfwidth_for, prompts_for_halfwidth,
                                        replicates, resolve_pair)
from draftlab.decoding import GenerationResult


def _result(accepted: list[int] | None, tokens: int, wall: float) -> GenerationResult:
    R = len(accepted) if accepted else tokens
    return GenerationResult(tokens=[[1] * tokens], finish_reason=["length"], t_done=[wall], prefill_s=0.01, wall_s=wall,
                            phases=("verify", "commit"), round_times=torch.full((R, 2), wall / R / 2),
                            round_streams=torch.ones(R), accepted=[accepted] if accepted else [[]],
                            block_size=4 if accepted else 1)


def _runs(n_prompts: int, seed: int = 0, suites=("a", "b"), temps=(0.0,)) -> list[BatchRun]:
    """AR and two speculative arms on the same prompts. Prompt difficulty d (shared by the arms) sets the
    acceptance; `good` accepts one more token than `base` every 4th round; walls scale with rounds."""
    rng = np.random.default_rng(seed)
    runs = []
    for s in suites:
        for t in temps:
            for i in range(n_prompts):
                d = rng.uniform(0, 2)  # shared difficulty
                base = [int(x) for x in np.clip(rng.poisson(d, 20), 0, 3)]
                good = [min(3, a + (j % 4 == 0)) for j, a in enumerate(base)]
                for arm, acc in (("ar", None), ("base", base), ("good", good)):
                    tokens = 40 if acc is None else sum(a + 1 for a in acc)
                    wall = 0.05 * (40 if acc is None else 1.6 * len(acc)) * (1 + 0.3 * d)
                    runs.append(BatchRun(arm, s, t, 1, False, [f"{s}/{i}"], [[1, 2]], _result(acc, tokens, wall)))
    return runs


def test_intervals_cover_estimates_and_shrink():
    widths = []
    for n in (8, 64):
        runs = _runs(n)
        detail = compute(runs, ["ar", "base", "good"], base_arm="base")
        add_intervals(detail, runs, n_boot=500, pairs=[["good", "base"]])
        s = detail["summary"]
        for arm in ("base", "good"):
            for m in ("tau", "tokens_per_s", "speedup"):
                lo, hi = s[arm][f"{m}_t0_ci"]
                assert lo <= s[arm][f"{m}_t0"] <= hi, (n, arm, m)
        assert s["ar"]["tau_t0_ci"] == [1.0, 1.0] and s["ar"]["speedup_t0_ci"] == [1.0, 1.0]
        per = detail["suites"]["a"]["t0"]["good"]
        assert per["ci"]["tau"][0] <= per["tau"] <= per["ci"]["tau"][1] and len(per["per_prompt"]["tau"]) == n
        widths.append(s["good"]["tau_t0_ci"][1] - s["good"]["tau_t0_ci"][0])
    assert widths[1] < widths[0] / 2  # ~1/sqrt(8) narrower with 8x the prompts


def test_pairing_cancels_shared_difficulty():
    runs = _runs(16, seed=1)
    detail = compute(runs, ["ar", "base", "good"], base_arm="base")
    add_intervals(detail, runs, n_boot=1000, pairs=[["good", "base"]])
    pair = detail["pairs"][0]
    assert pair["a"] == "good" and pair["b"] == "base"
    s = detail["summary"]
    assert abs(pair["tau_diff"] - (s["good"]["tau_t0"] - s["base"]["tau_t0"])) < 1e-6
    paired = pair["tau_diff_ci"][1] - pair["tau_diff_ci"][0]
    unpaired = np.hypot(*(s[a]["tau_t0_ci"][1] - s[a]["tau_t0_ci"][0] for a in ("good", "base")))
    assert paired < unpaired / 2  # the prompts' shared difficulty cancels in the paired difference
    assert pair["tau_exceeds_noise"] is True and pair["tau_diff_ci"][0] > 0


def test_units_replicates_and_best():
    runs = _runs(5)
    units = collect_units(runs)
    assert set(units) == {(s, "t0", a) for s in ("a", "b") for a in ("ar", "base", "good")}
    rep = replicates(units, n_boot=50)
    point = compute(runs, ["ar", "base", "good"])["summary"]
    for arm in ("base", "good"):  # row 0 of the replicates is the point estimate
        assert abs(rep["summary"][("t0", arm)]["tau"][0] - point[arm]["tau_t0"]) < 1e-9
        assert abs(rep["summary"][("t0", arm)]["speedup"][0] - point[arm]["speedup_t0"]) < 1e-9
    best = max(("base", "good"), key=lambda a: point[a]["speedup_t0"])
    assert resolve_pair(["best", "ar"], "t0", rep["summary"]) == (best, "ar")
    assert resolve_pair(["best", "good"], "t0", rep["summary"]) == ("base", "good")  # never the pair's other arm
    assert resolve_pair(["pld", "good"], "t0", rep["summary"]) is None  # an arm that did not run


def test_no_resamples_keeps_per_prompt_values():
    runs = _runs(3)
    detail = compute(runs, ["ar", "base", "good"])
    add_intervals(detail, runs, n_boot=0, pairs=[["good", "base"]])
    assert detail["pairs"] == [] and "tau_t0_ci" not in detail["summary"]["good"]
    assert len(detail["suites"]["a"]["t0"]["good"]["per_prompt"]["wall_s"]) == 3


def test_sizing_rule_meets_its_target():
    sd = {"mt-bench": 0.12, "humaneval": 0.2, "math500": 0.09}
    n = prompts_for_halfwidth(sd, 0.03)
    assert halfwidth_for(sd, n) <= 0.03 < halfwidth_for(sd, n - 1)
    assert prompts_for_halfwidth({"a": 0.01}, 0.03) == 2  # never fewer than 2 (a standard deviation needs two)
    with pytest.raises(ValueError):
        prompts_for_halfwidth({}, 0.03)
    # the rule agrees with the bootstrap on synthetic prompts: the realised half-width is near the target
    runs = _runs(60, seed=3, suites=("a", "b", "c"))
    detail = compute(runs, ["ar", "base", "good"])
    add_intervals(detail, runs, n_boot=2000)
    sds = {s: float(np.std(detail["suites"][s]["t0"]["good"]["per_prompt"]["tau"], ddof=1)) for s in ("a", "b", "c")}
    lo, hi = detail["summary"]["good"]["tau_t0_ci"]
    assert abs((hi - lo) / 2 - halfwidth_for(sds, 60)) < 0.25 * halfwidth_for(sds, 60)


def test_one_prompt_per_suite_has_no_interval():
    runs = _runs(1)
    detail = compute(runs, ["ar", "base", "good"])
    add_intervals(detail, runs, n_boot=100, pairs=[["good", "base"]])
    assert detail["summary"]["good"]["tau_t0_ci"] is None and detail["suites"]["a"]["t0"]["good"]["ci"]["tau"] is None
    assert detail["pairs"][0]["tau_diff_ci"] is None and detail["pairs"][0]["tau_exceeds_noise"] is None
    assert detail["summary"]["good"]["tau_t0"] is not None  # the estimate stays


def test_sizing_plan_from_a_pilot():
    from draftlab.bench.uncertainty import sizing_plan

    runs = _runs(12, seed=5, suites=("a", "b", "c"), temps=(0.0, 1.0))
    detail = compute(runs, ["ar", "base", "good"])
    add_intervals(detail, runs, n_boot=200, pairs=[["good", "base"]])
    detail["setup"] = {"prompts": {"a": 12, "b": 12, "c": 12}, "timing_s": {"simulated": 36.0, "sweep": 120.0}}
    plan = sizing_plan(detail, halfwidth=0.05)
    sds = plan["per_arm"]["good"]["t0"]["sd_by_suite"]
    assert plan["per_arm"]["good"]["t0"]["prompts_per_suite"] == prompts_for_halfwidth(sds, 0.05)
    assert "t0" not in plan["per_arm"]["ar"]  # AR has nothing to size
    assert plan["prompts_per_suite"] == max(plan["per_arm"][a][t]["prompts_per_suite"]
                                            for a in ("base", "good") for t in ("t0", "t1"))
    # cost: seconds per prompt from the walls (both temperatures), + the teacher-forced pass per prompt
    sec = sum(m["wall_s"] for s in ("a", "b", "c") for m in [detail["suites"][s]["t0"]["good"]]) / 36
    assert plan["per_arm"]["good"]["seconds_per_prompt"]["t0"] == pytest.approx(sec)
    assert plan["simulated_minutes_per_prompt"] == pytest.approx(36.0 / 36 / 60) and plan["sweep_minutes"] == 2.0
    assert plan["minutes"] == pytest.approx(plan["prompts_per_suite"] * 3 * plan["minutes_per_prompt_all_arms"])
    pair = plan["pairs"]["good vs base (t0)"]
    assert pair["prompts_per_suite"] < plan["per_arm"]["good"]["t0"]["prompts_per_suite"]  # pairing needs fewer
    assert sizing_plan(detail, 0.05, sd=0.2)["per_arm"]["good"]["t0"]["sd_by_suite"] == {"a": 0.2, "b": 0.2, "c": 0.2}


def _unloop(runs: list[BatchRun], looping: set[str]) -> None:
    """Give every answer distinct tokens except the prompts in `looping` (whose [1, 1, ...] answers loop)."""
    for r in runs:
        if r.prompt_ids[0] not in looping:
            r.result.tokens = [list(range(100, 100 + len(t))) for t in r.result.tokens]


def test_pairs_on_shared_prompts_and_without_loops():
    runs = _runs(8, seed=7, suites=("a", "b"))
    looping = {"a/0", "a/3", "b/5"}
    _unloop(runs, looping)
    # `good` as an ablation arm on the first 5 prompts of each suite
    runs = [r for r in runs if not (r.arm == "good" and int(r.prompt_ids[0].split("/")[1]) >= 5)]
    detail = compute(runs, ["ar", "base", "good"])
    add_intervals(detail, runs, n_boot=300, pairs=[["good", "base"], ["base", "ar"]], ablation=["good"])
    row = next(p for p in detail["pairs"] if p["a"] == "good")
    assert row["ablation"] is True and row["prompts"] == {"a": 5, "b": 5}
    assert row["no_loop"]["prompts"] == {"a": 3, "b": 5}  # a/0, a/3 looped (b/5 is past the ablation sample)
    # the point estimate is the mean over suites of per-suite τ differences on exactly those prompts
    units = collect_units(runs)

    def tau(arm, s, keep):
        u = units[(s, "t0", arm)]
        idx = [i for i, k in enumerate(u.keys()) if keep(k)]
        return sum(u.tau_sum[i] for i in idx) / sum(u.tau_n[i] for i in idx)

    first5 = lambda k: int(k.split("/")[1]) < 5  # noqa: E731
    want = np.mean([tau("good", s, first5) - tau("base", s, first5) for s in ("a", "b")])
    assert row["tau_diff"] == pytest.approx(want, abs=1e-6)
    # without loops the prompts of all suites are pooled into one stratum
    clean = lambda k: first5(k) and k not in looping  # noqa: E731

    def pooled(arm):
        us = [units[(s, "t0", arm)] for s in ("a", "b")]
        idx = [[i for i, k in enumerate(u.keys()) if clean(k)] for u in us]
        return sum(u.tau_sum[i] for u, ix in zip(us, idx) for i in ix) / sum(u.tau_n[i] for u, ix in zip(us, idx) for i in ix)

    assert row["no_loop"]["tau_diff"] == pytest.approx(pooled("good") - pooled("base"), abs=1e-6)
    assert row["no_loop"]["strata"] == "pooled over suites" and "strata" not in row
    assert row["tau_diff_halfwidth"] == pytest.approx((row["tau_diff_ci"][1] - row["tau_diff_ci"][0]) / 2, abs=1e-6)
    full = next(p for p in detail["pairs"] if p["a"] == "base")
    assert full["ablation"] is False and full["prompts"] == {"a": 8, "b": 8} and full["no_loop"]["prompts"] == {"a": 6, "b": 7}
    # the ablation arm's speedup is against AR on its own 5 prompts
    ar5 = [r for r in runs if r.arm == "ar" and r.suite == "a" and first5(r.prompt_ids[0])]
    mine = detail["suites"]["a"]["t0"]["good"]
    assert mine["speedup"] == pytest.approx(mine["tokens_per_s"] / (sum(r.result.num_tokens for r in ar5)
                                                                    / sum(r.result.wall_s for r in ar5)))
    pp = detail["suites"]["a"]["t0"]["base"]["per_prompt"]
    assert [pid in looping for pid in pp["prompt_id"]] == pp["loop"]


def test_paired_sizing_scales_with_length_and_meets_its_targets():
    from draftlab.measure.sizing import BenchPlan, achieved, pair_sizes, paired_plan, plan_minutes

    runs = _runs(10, seed=11, suites=("a", "b", "c"), temps=(0.0, 1.0))
    _unloop(runs, set())
    detail = compute(runs, ["ar", "base", "good"])
    add_intervals(detail, runs, n_boot=300, pairs=[["good", "base"]])
    detail["config"] = {"max_new_tokens": 80, "concurrency_max_new_tokens": 8}
    detail["setup"] = {"prompts": {"a": 10, "b": 10, "c": 10}, "timing_s": {"simulated": 0.0}}
    sizes = pair_sizes(detail, [["good", "base"]], [0.0], 0.05, 0.02)["good vs base (t0)"]
    sd = {s: float(np.std([x - y for x, y in zip(detail["suites"][s]["t0"]["good"]["per_prompt"]["tau"],
                                                   detail["suites"][s]["t0"]["base"]["per_prompt"]["tau"])], ddof=1))
          for s in ("a", "b", "c")}
    assert sizes["tau_prompts_per_suite"] == prompts_for_halfwidth(sd, 0.05)
    plan = BenchPlan(arms=["ar", "base", "good"], pairs=[["good", "base"]], max_new_tokens=80, sampled_arms=["ar"])
    res = paired_plan(detail, plan, 0.05, 0.02)
    e = res["pairs"]["good vs base (t0)"]
    assert res["prompts_per_suite"] == e["prompts_per_suite"] == max(e["tau_prompts_per_suite"], e["ratio_prompts_per_suite"])
    assert res["meets_t0"] and e["tau_halfwidth_at_plan"] <= 0.05 and e["ratio_halfwidth_at_plan"] <= 0.02
    assert "good vs base (t1)" not in res["pairs"]  # `good` does not decode at T>0 in this plan
    more = paired_plan(detail, BenchPlan(**{**plan.__dict__, "suites": ["a", "b", "c", "new"]}), 0.05, 0.02)
    m = more["pairs"]["good vs base (t0)"]  # a suite the pilot lacks: the pilot's root-mean-square spread
    assert more["assumed_suites"] == ["new"] and m["tau_sd_by_suite"]["new"] == pytest.approx(
        np.sqrt(np.mean([v ** 2 for k, v in e["tau_sd_by_suite"].items()])), abs=1e-3)
    four = BenchPlan(**{**plan.__dict__, "suites": ["a", "b", "c", "new"]})  # and the pilot suites' mean cost
    assert plan_minutes(detail, four, 10, 0)["parts"]["headline_t0"] == pytest.approx(
        4 / 3 * plan_minutes(detail, plan, 10, 0)["parts"]["headline_t0"], rel=0.02)
    # cost scaling: answers that stopped before the pilot's limit keep their length; those at it grow with the limit
    lengths = [t for r in runs for t in (len(x) for x in r.result.tokens)]
    at = lambda L: plan_minutes(detail, BenchPlan(**{**plan.__dict__, "max_new_tokens": L}), 10, 0.0)  # noqa: E731
    detail["config"]["max_new_tokens"] = max(lengths) + 1  # every pilot answer stopped early (EOS)
    assert at(2 * max(lengths))["parts"]["headline_t0"] == at(max(lengths))["parts"]["headline_t0"]
    detail["config"]["max_new_tokens"] = L0 = min(lengths)  # every pilot answer reached the limit
    assert 1.5 < at(2 * L0)["parts"]["headline_t0"] / at(L0)["parts"]["headline_t0"] < 2.1  # prefill does not grow
    detail["config"]["max_new_tokens"] = 80
    assert paired_plan(detail, plan, 0.05, 0.02, spread_scaling="sqrt")["pairs"]["good vs base (t0)"][
        "tau_sd_by_suite"]["a"] == pytest.approx(e["tau_sd_by_suite"]["a"], rel=1e-3)  # same length: no change
    got = achieved(detail, 0.05, 0.02)
    row = got["pairs"]["good vs base (t0)"]
    assert row["tau_diff"] == detail["pairs"][0]["tau_diff_halfwidth"] and "no_loop" in row
    assert got["arms"]["good"]["tau_t0"] == pytest.approx(
        (detail["summary"]["good"]["tau_t0_ci"][1] - detail["summary"]["good"]["tau_t0_ci"][0]) / 2, abs=1e-6)


def test_size_benchmark_tool_paired(root, tmp_path, capsys):
    """tools/size_benchmark.py --paired on a pilot: the pairs of the given config, the prediction labelled as one."""
    import json
    import sys

    sys.path.insert(0, str(root / "tools"))
    import size_benchmark

    runs = _runs(6, seed=2, suites=("a", "b", "c"))
    detail = compute(runs, ["ar", "base", "good"])
    add_intervals(detail, runs, n_boot=100, pairs=[["good", "base"]])
    detail["config"] = {"max_new_tokens": 40, "concurrency_max_new_tokens": 8}
    pilot = tmp_path / "pilot.json"
    pilot.write_text(json.dumps(detail))
    sets = ["benchmark.arms=[ar,base,good]", "benchmark.pairs=[[good,base],[base,ar]]", "benchmark.ablation_arms=[]",
            "benchmark.sampled_arms=[]", "benchmark.suites=[mt-bench]", "benchmark.max_new_tokens=80",
            "benchmark.concurrency=[]"]
    args = [str(pilot), "--paired", "--params", str(root / "params.yaml"), *[x for s in sets for x in ("-S", s)]]
    assert size_benchmark.main(args) == 0
    out = capsys.readouterr().out
    assert "A PREDICTION" in out and "good vs base (t0)" in out and "base vs ar (t0)" in out
    assert "predicted minutes" in out and "assumed" in out  # mt-bench is not a pilot suite
    assert size_benchmark.main([*args, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert list(plan["pairs"]["good vs base (t0)"]["tau_sd_by_suite"]) == ["mt-bench"]  # the plan's suites only


def test_without_loops_a_suite_with_one_prompt_still_gets_an_interval():
    """After dropping the loops a suite may keep a single prompt: pooled, the pair still has an interval."""
    runs = _runs(4, seed=3, suites=("a", "b"))
    looping = {"a/0", "a/1", "a/2"}  # suite a keeps only a/3
    _unloop(runs, looping)
    detail = compute(runs, ["ar", "base", "good"])
    add_intervals(detail, runs, n_boot=200, pairs=[["good", "base"]])
    row = detail["pairs"][0]
    assert row["no_loop"]["prompts"] == {"a": 1, "b": 4}
    lo, hi = row["no_loop"]["tau_diff_ci"]
    assert lo <= row["no_loop"]["tau_diff"] <= hi and row["no_loop"]["tokens_per_s_ratio_ci"] is not None


def test_pairs_recomputed_from_the_detail_files_per_prompt_rows(root):
    """tools/pairs_from_detail.py rebuilds the units from per-prompt rows: the same pairs as the run's own."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("pairs_from_detail", root / "tools" / "pairs_from_detail.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    runs = _runs(6, seed=5, suites=("a", "b"))
    _unloop(runs, {"a/1", "b/2"})
    pairs = [["good", "base"], ["base", "ar"]]
    detail = compute(runs, ["ar", "base", "good"])
    add_intervals(detail, runs, n_boot=300, pairs=pairs)
    detail["config"] = {"pairs": pairs, "ablation_arms": []}
    again = tool.recompute(json.loads(json.dumps(detail)), 300)
    assert [r["pair"] for r in again] == [r["pair"] for r in detail["pairs"]]
    for r, q in zip(detail["pairs"], again):
        for k in ("tau_diff", "tokens_per_s_ratio", "prompts"):
            assert q[k] == pytest.approx(r[k], abs=1e-5)
            assert q["no_loop"][k] == pytest.approx(r["no_loop"][k], abs=1e-5)
        assert q["tau_diff_ci"] == pytest.approx(r["tau_diff_ci"], abs=1e-5)


def test_a_pairs_extra_prompts_feed_its_interval_not_the_per_arm_rows():
    """benchmark.pair_prompts_per_suite: `good` and `base` decode 8 prompts per suite, AR the headline 4. The pair
    reads all 8 (narrower than on 4); every per-arm row and interval stays on the 4 headline prompts."""
    runs = _runs(8, seed=3)
    idx = lambda r: int(r.prompt_ids[0].split("/")[1])  # noqa: E731
    head = [r for r in runs if idx(r) < 4]
    extra = [r for r in runs if idx(r) >= 4 and r.arm != "ar"]
    for r in extra:
        r.extra = True
    detail = compute(head, ["ar", "base", "good"])
    add_intervals(detail, head, n_boot=400, pairs=[["good", "base"], ["good", "ar"]], extra=extra)
    four = compute(head, ["ar", "base", "good"])
    add_intervals(four, head, n_boot=400, pairs=[["good", "base"], ["good", "ar"]])
    assert detail["summary"]["good"] == four["summary"]["good"]  # per-arm: the headline sample only
    rows = {(p["a"], p["b"]): p for p in detail["pairs"]}
    assert rows[("good", "base")]["prompts"] == {"a": 8, "b": 8}
    assert rows[("good", "ar")]["prompts"] == {"a": 4, "b": 4}  # AR decoded the headline prompts only
    assert rows[("good", "ar")]["tokens_per_s_ratio"] == next(p for p in four["pairs"] if p["b"] == "ar")["tokens_per_s_ratio"]
    units = collect_units(head + extra)
    tau = lambda arm, s: sum(units[(s, "t0", arm)].tau_sum) / sum(units[(s, "t0", arm)].tau_n)  # noqa: E731
    assert rows[("good", "base")]["tau_diff"] == pytest.approx(
        np.mean([tau("good", s) - tau("base", s) for s in ("a", "b")]), abs=1e-6)
    pp = detail["suites"]["a"]["t0"]["good"]["per_prompt"]
    assert len(pp["tau"]) == 8 and pp["extra"] == [False] * 4 + [True] * 4  # the sizing rule sees all 8, marked
    assert "extra" not in detail["suites"]["a"]["t0"]["ar"]["per_prompt"]


def test_paired_sizing_with_a_pairs_extra_prompts():
    """BenchPlan.pair_prompts_per_suite: a short pair is suggested its own size; given it, that pair meets its
    targets at the plan, its two arms' T=0 cost grows by exactly the extra prompts, AR's does not."""
    from draftlab.measure.sizing import BenchPlan, paired_plan, plan_minutes

    runs = _runs(10, seed=11, suites=("a", "b", "c"))
    detail = compute(runs, ["ar", "base", "good"])
    add_intervals(detail, runs, n_boot=300, pairs=[["good", "base"]])
    detail["config"] = {"max_new_tokens": 80, "concurrency_max_new_tokens": 8}
    detail["setup"] = {"timing_s": {"simulated": 0.0}}
    plan = BenchPlan(arms=["ar", "base", "good"], pairs=[["good", "base"], ["good", "ar"]], max_new_tokens=80,
                     prompts_per_suite=3, temperatures=[0.0])
    short = paired_plan(detail, plan, 0.05, 0.02)
    need = short["pairs"]["good vs base (t0)"]["prompts_per_suite"]
    assert need > 3 and not short["meets_t0"] and short["suggested_pair_prompts_per_suite"]["good vs base"] == need
    sized = BenchPlan(**{**plan.__dict__, "pair_prompts_per_suite": {"good vs base": need}})
    res = paired_plan(detail, sized, 0.05, 0.02)
    assert res["pairs"]["good vs base (t0)"]["prompts_at_plan"] == need and res["pairs"]["good vs base (t0)"]["meets"]
    assert res["pairs"]["good vs ar (t0)"]["prompts_at_plan"] == 3  # AR decodes the headline sample only
    per = lambda p: plan_minutes(detail, p, 3, 0.0)["parts"]["headline_t0"]  # noqa: E731
    solo = lambda arm, p: plan_minutes(detail, BenchPlan(**{**p.__dict__, "arms": [arm]}), 3, 0.0)["parts"]["headline_t0"]  # noqa: E731
    assert per(sized) > per(plan) and solo("ar", sized) == pytest.approx(solo("ar", plan))
    assert solo("good", sized) == pytest.approx(solo("good", plan) * need / 3)
