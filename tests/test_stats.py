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
