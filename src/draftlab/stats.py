"""The one statistics module: the Pearson chi-square goodness-of-fit p-value (the sampling rules' exactness
tests and the accelerator check), order-statistic quantiles (the timings' median and p20), the geometric mean,
and the percentile-bootstrap intervals used by the benchmark (`bench/uncertainty`), the seeded comparison
(`pipeline/pretrain/seeded`), the probes and the tests. Plain torch, numpy and the standard library."""
from __future__ import annotations

import math


def chi_square_pvalue(counts, probs, min_expected: float = 5.0) -> float:
    """Pearson chi-square goodness of fit of counts [V] to probs [V]; cells expecting < `min_expected` are pooled
    into one (so the statistic's chi-square approximation holds)."""
    import torch

    counts, probs = counts.double().cpu(), probs.double().cpu()
    expected = probs / probs.sum() * counts.sum()
    small = expected < min_expected
    obs = torch.cat([counts[~small], counts[small].sum()[None]])
    exp = torch.cat([expected[~small], expected[small].sum()[None]])
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    stat = ((obs - exp) ** 2 / exp).sum()
    df = obs.numel() - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2.0, dtype=torch.float64), stat / 2.0))


def quantile(xs, q: float) -> float | None:
    """The q-quantile of xs by linear interpolation between order statistics (None for no values)."""
    s = sorted(float(x) for x in xs)
    if not s:
        return None
    pos = q * (len(s) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def geometric_mean(xs) -> float:
    """exp(mean(log x)) of positive values (the average of ratios that is symmetric in numerator and denominator)."""
    xs = [float(x) for x in xs]
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def bootstrap_interval(values, stat=geometric_mean, n: int = 2000, level: float = 0.95, seed: int = 0) -> tuple:
    """(low, stat(values), high): the percentile bootstrap interval of stat over `values` resampled with
    replacement `n` times (a fixed seed: the same values give the same interval)."""
    import random

    values = list(values)
    rng = random.Random(seed)
    boots = sorted(stat([rng.choice(values) for _ in values]) for _ in range(n))
    a = (1 - level) / 2
    return quantile(boots, a), stat(values), quantile(boots, 1 - a)


def percentile_interval(replicates, level: float = 0.95, digits: int | None = None) -> list[float] | None:
    """[low, high]: the central `level` percentile interval of bootstrap replicates (non-finite replicates, e.g. a
    resample with no denominator, are left out; None when none is left), rounded to `digits` when given."""
    import numpy as np

    rep = np.asarray(replicates, dtype=float)
    rep = rep[np.isfinite(rep)]
    if rep.size == 0:
        return None
    lo, hi = (float(v) for v in np.percentile(rep, [50 * (1 - level), 50 * (1 + level)]))
    return [round(lo, digits), round(hi, digits)] if digits is not None else [lo, hi]
