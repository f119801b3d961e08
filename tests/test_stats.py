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

    assert share_closed(1.5, 1.0, 2.0) == 0.5 and share_closed(1.5, 1.0, 2.0, se=0.5) == 0.5  # Δ = 1 = 2 SE
    assert share_closed(1.5, 1.0, 2.0, se=0.51) is None and share_closed(1.5, 1.0, 2.0, se=None) is None
    assert share_closed(1.5, 1.0, 1.0) is None and share_closed(None, 1.0, 2.0) is None and NOISE_SE == 2.0
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
