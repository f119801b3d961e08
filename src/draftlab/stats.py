"""The one statistics module: the Pearson chi-square goodness-of-fit p-value (the sampling rules' exactness
tests and the accelerator check), order-statistic quantiles (the timings' median and p20), the geometric mean,
the percentile-bootstrap intervals used by the benchmark (`bench/uncertainty`), the seeded comparison
(`recipes/pretrain/seeded`), the probes and the tests, and the one rule for a share of headroom closed
(`share_closed`: none when the headroom is below twice its own standard error). Plain torch, numpy and the
standard library."""
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


NOISE_SE = 2.0  # a headroom below this many of its own standard errors is noise: no share of it is given


def share_closed(value: float | None, base: float | None, ceiling: float | None, se: float | None = 0.0) -> float | None:
    """(value − base) / (ceiling − base): the share of a headroom closed (the benchmark's and the corrector's
    "headroom closed"). None when undefined — a missing figure, no headroom (ceiling ≤ base) — or when the
    headroom is below noise: ceiling − base < NOISE_SE × `se`, its standard error (paired over the sequences that
    give both figures); `se` None = unknown, which is not "no noise"; 0 = a figure without sampling error."""
    if value is None or base is None or ceiling is None or ceiling - base <= 1e-9:
        return None
    if se is None or not math.isfinite(se) or ceiling - base < NOISE_SE * se:
        return None
    return (value - base) / (ceiling - base)


def mean_and_se(total: float, squares: float, n: int) -> tuple[float, float] | None:
    """(mean, standard error of the mean) from Σx, Σx² and n (None below two values)."""
    if n < 2:
        return None
    mean = total / n
    var = max(squares / n - mean * mean, 0.0) * n / (n - 1)
    return mean, (var / n) ** 0.5
