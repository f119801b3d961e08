"""draftlab.stats, the one statistics module: the percentile interval the benchmark and the seeded comparison
share, and the bootstrap interval the probes use."""
import math

import numpy as np
import pytest

from draftlab.stats import bootstrap_interval, percentile_interval, quantile


def test_percentile_interval_is_the_central_share_of_the_replicates():
    rep = np.arange(1001, dtype=float)  # 0..1000: the 2.5% and 97.5% points are 25 and 975
    assert percentile_interval(rep, 0.95) == pytest.approx([25.0, 975.0])
    assert percentile_interval(rep, 0.5) == pytest.approx([250.0, 750.0])


def test_percentile_interval_leaves_out_non_finite_replicates_and_rounds_when_asked():
    rep = np.array([np.nan, 1 / 3, 2 / 3, np.inf, 1.0])
    assert percentile_interval(rep, 1.0) == [1 / 3, 1.0]
    assert percentile_interval(rep, 1.0, digits=3) == [0.333, 1.0]
    assert percentile_interval(np.array([np.nan, np.inf]), 0.95) is None
    assert percentile_interval([], 0.95) is None


def test_bootstrap_interval_brackets_its_estimate_and_is_reproducible():
    values = [1.0, 2.0, 4.0, 8.0, 16.0]
    lo, est, hi = bootstrap_interval(values, n=500)
    assert math.isclose(est, 4.0) and lo <= est <= hi and lo >= 1.0 and hi <= 16.0
    assert bootstrap_interval(values, n=500) == (lo, est, hi)
    assert quantile([3.0, 1.0, 2.0], 0.5) == 2.0 and quantile([], 0.5) is None


def test_a_share_of_headroom_below_noise_is_not_given():
    from draftlab.stats import NOISE_SE, mean_and_se, share_closed

    assert share_closed(1.5, 1.0, 2.0) == 0.5 and share_closed(1.5, 1.0, 2.0, se=0.2) == 0.5  # Δ = 1 = 5 SE
    assert share_closed(1.5, 1.0, 2.0, se=0.21) is None and share_closed(1.5, 1.0, 2.0, se=None) is None
    assert share_closed(1.5, 1.0, 1.0) is None and share_closed(None, 1.0, 2.0) is None and NOISE_SE == 5.0
    # the committed cpu run's reachable headroom, 0.056 ± 0.025 τ (2.25 SE), gave shares of -211% / +266%: no share now
    assert share_closed(0.0, 1.0, 1.056, se=0.025) is None
    assert mean_and_se(3.0, 5.0, 2) == (1.5, 0.5) and mean_and_se(1.0, 1.0, 1) is None  # values 1 and 2


def test_the_correctors_simulated_headroom_has_its_paired_noise():
    """The corrector stage's simulated headroom (SetStats): its standard error is over blocks, paired (the oracle and
    the uncorrected drafter on the same blocks); a headroom from one block of many is noise, no share given."""
    import torch

    from draftlab.recipes.corrector.evaluate import SetStats

    def stats(moved: int, blocks: int = 40) -> dict:
        cand = torch.tensor([[[5, 6], [7, 8], [9, 10]]]).repeat(blocks, 1, 1)  # [N, n=3, K=2]
        targets = cand[..., 0].clone()
        targets[:moved, 1] = 8  # on `moved` blocks the target is the drafter's second candidate at slot 2
        s = SetStats(3, 2, ("greedy",))
        s.update(cand, targets, torch.ones_like(targets, dtype=torch.bool), {"greedy": cand[..., 0]})
        return s.summary("greedy")

    one = stats(1)  # Δ = 2/40 from one block: SE = Δ (one non-zero gap), below 2 SE
    assert one["sim_tau_oracle"] > one["sim_tau_uncorrected"] and one["headroom_se"] > 0
    assert one["headroom_closed"] is None
    every = stats(40)  # every block gains 2 slots: Δ = 2, SE 0
    assert every["headroom_se"] == 0.0 and every["headroom_closed"] == 0.0  # greedy = uncorrected: closes none


def test_speed_over_a_mix_is_total_time_not_a_mean_of_ratios():
    """The toy world's headline was the arithmetic mean of per-suite ratios (copy 0.626, reverse 0.637, fill 4.543:
    "1.94x"); over the mix the arm is slower than AR (total time) and the geometric mean lies between."""
    from draftlab.stats import geometric_mean, ratio_interval

    # tokens and seconds per unit (two batches per suite), AR on the same prompts writes the same tokens
    tok = [384, 384, 384, 384, 384, 384]
    ar_s = [10.0, 10.0, 10.0, 10.0, 1.0, 1.0]
    ratios = {"copy": 0.626, "reverse": 0.637, "fill": 4.543}
    strata = ["copy", "copy", "reverse", "reverse", "fill", "fill"]
    arm_s = [s / ratios[k] for s, k in zip(ar_s, strata)]
    r = ratio_interval(tok, arm_s, tok, ar_s, strata)
    assert r["per_stratum"] == pytest.approx(ratios)
    mean_of_ratios = sum(ratios.values()) / 3
    assert mean_of_ratios == pytest.approx(1.935, abs=1e-3) and r["geomean"] == pytest.approx(
        geometric_mean(ratios.values())) == pytest.approx(1.219, abs=1e-3)
    assert r["estimate"] == pytest.approx(sum(ar_s) / sum(arm_s)) and r["estimate"] < 1 < r["geomean"]
    assert r["n"] == 6 and r["ci"][0] <= r["estimate"] <= r["ci"][1]


def test_the_paired_interval_and_sign_flip_test_over_prompts():
    import numpy as np

    from draftlab.stats import paired_interval

    strata = ["a"] * 12 + ["b"] * 12
    same = paired_interval(np.ones(24), strata)
    assert same["estimate"] == 1.0 and same["ci"] == [1.0, 1.0]  # a zero-width interval: degenerate, never a win
    assert same["p"] < 1e-3 and same["test"].startswith("stratified sign-flip")
    rng = np.random.default_rng(0)
    noise = paired_interval(rng.normal(0, 1, 24), strata)
    assert noise["ci"][0] < 0 < noise["ci"][1] and noise["p"] > 0.05
    # the estimate weighs suites equally (the benchmark's formula), not prompts
    uneven = paired_interval([1.0] * 2 + [0.0] * 10, ["a"] * 2 + ["b"] * 10)
    assert uneven["estimate"] == pytest.approx(0.5)
    assert paired_interval([1.0, 2.0, 3.0], ["a", "a", "b"])["ci"] is None  # a stratum of one prompt: no interval


def test_the_crossed_interval_counts_runs_and_prompts_as_random():
    import numpy as np

    from draftlab.stats import crossed_interval

    strata = ["a"] * 16 + ["b"] * 16
    prompts = np.random.default_rng(1).normal(0, 1, 32)
    # identical runs: no run variance, no residual; the interval is the prompts' stratified one
    same = crossed_interval(np.vstack([prompts] * 3) + 0.5, strata)
    groups = [prompts[:16], prompts[16:]]
    se = (sum(g.var(ddof=1) / 16 for g in groups) / 4) ** 0.5
    assert same["estimate"] == pytest.approx(0.5 + prompts.mean()) and same["se"] == pytest.approx(se)
    assert same["run_sd"] == pytest.approx(0.0, abs=1e-12) and same["df"] == pytest.approx(30.0)
    # runs that disagree: the run part dominates and the degrees of freedom fall towards R - 1
    shifted = np.vstack([prompts * 0.01 + s for s in (-1.0, 0.2, 1.4)])
    c = crossed_interval(shifted, strata)
    assert c["run_sd"] == pytest.approx(1.2, rel=1e-6) and 2.0 <= c["df"] < 2.1
    assert c["ci"][0] < 0 < c["ci"][1] and c["p"] > 0.5 and c["per_run"] == pytest.approx(
        [x + prompts.mean() * 0.01 for x in (-1.0, 0.2, 1.4)], abs=1e-6)
    assert c["resolvable"] == pytest.approx(c["ci"][1] - c["estimate"]) and c["mde80"] > c["resolvable"]
    assert crossed_interval(prompts[None, :], strata)["ci"] is None  # one run: no interval over runs


def test_holm_and_the_one_verdict_rule():
    from draftlab.stats import holm, verdict

    assert holm([0.01, 0.04, None, 0.03]) == pytest.approx([0.03, 0.06, None, 0.06], nan_ok=True)
    assert holm([0.03] + [0.5] * 16)[0] == pytest.approx(0.51)  # SpecOPD's T=0 p ~ 0.03 among 17 primary pairs
    assert verdict([0.1, 0.5], 12) == "win" and verdict([-0.5, -0.1], 12) == "loss"
    assert verdict([-0.1, 0.5], 12) == "no effect shown" and verdict([0.1, 0.5], 6) == "descriptive"
    assert verdict([0.1515, 0.1515], 48) == "degenerate" and verdict(None, 48) == "descriptive"
    assert verdict([1.01, 1.2], 16, null=1.0) == "win"
