"""The one statistics module: the Pearson chi-square goodness-of-fit p-value (the sampling rules' exactness
tests and the accelerator check), order-statistic quantiles (the timings' median and p20), the geometric mean,
the percentile-bootstrap intervals used by the benchmark (`bench/uncertainty`), the seeded comparison
(`recipes/pretrain/seeded`), the probes and the tests, and the one rule for a share of headroom closed
(`share_closed`: none when the headroom is below NOISE_SE = 5 of its own standard errors). Plain torch, numpy and the
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


# a headroom below this many of its own standard errors is noise: no share of it is given. 5, not 2 (2026-12-06): the
# committed cpu run's reachable headroom 0.056 ± 0.025 τ passed 2 SE with a 44% relative error and gave shares of
# -211% and +266%; at 5 SE a share's denominator is known to within 20% (docs/decisions.md "Shares that mean what
# they say")
NOISE_SE = 5.0


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


# ------------------------------------------------------------------------------------------------------------------
# Verdicts (draftlab.verdicts reads every comparison through these): paired differences over prompts stratified by
# suite, the crossed runs x prompts design of replicated training, Holm's step-down rule, and the one verdict rule.

DRAWS = 10_000  # bootstrap and sign-flip draws of every verdict
MIN_UNITS = 10  # fewer independent units than this: a figure is descriptive, not a verdict


def strata_weights(strata) -> "np.ndarray":
    """Per item, 1 / (S · n_s): the weights of the mean over strata (suites weighed equally) of the per-stratum
    means — the benchmark's summary formula."""
    import numpy as np

    strata = list(strata)
    counts = {s: strata.count(s) for s in set(strata)}
    return np.asarray([1.0 / (len(counts) * counts[s]) for s in strata], dtype=float)


def _stratified_draws(strata, n: int, seed: int) -> "np.ndarray":
    """[n, N] resampling counts: items drawn with replacement within their stratum (the same draw for both arms)."""
    import numpy as np

    strata = list(strata)
    rng = np.random.default_rng(seed)
    w = np.zeros((n, len(strata)))
    for s in sorted(set(strata), key=str):
        idx = np.asarray([i for i, x in enumerate(strata) if x == s])
        picks = rng.integers(0, len(idx), size=(n, len(idx)))
        for j in range(len(idx)):
            np.add.at(w, (np.arange(n), idx[picks[:, j]]), 1.0)
    return w


def paired_interval(diffs, strata, level: float = 0.95, n: int = DRAWS, seed: int = 0, test: bool = True) -> dict:
    """The mean over strata of the per-stratum mean paired difference, its percentile bootstrap interval (items
    resampled within their stratum, `n` draws) and the stratified sign-flip test's two-sided p (`n` random sign
    patterns: under the null each item's difference is as likely negated). -> {estimate, ci, p, n, test}."""
    import numpy as np

    d = np.asarray(diffs, dtype=float)
    strata = list(strata)
    w = strata_weights(strata)
    counts = {s: strata.count(s) for s in set(strata)}
    est = float(sum(d[[i for i, x in enumerate(strata) if x == s]].mean() for s in counts) / len(counts))
    if len(d) < 2 or min(counts.values()) < 2:
        return {"estimate": est, "ci": None, "p": None, "n": len(d), "test": None}
    draws = _stratified_draws(strata, n, seed)  # [n, N]
    per = {s: np.asarray([i for i, x in enumerate(strata) if x == s]) for s in counts}
    boots = np.zeros(n)
    for s, idx in per.items():  # mean over strata of each stratum's resampled mean
        boots += (draws[:, idx] @ d[idx]) / len(idx) / len(per)
    if not test:
        return {"estimate": est, "ci": percentile_interval(boots, level), "p": None, "n": len(d), "test": None}
    rng = np.random.default_rng([seed, 1])
    signs = rng.choice([-1.0, 1.0], size=(n, len(d)))
    flipped = np.abs(signs @ (w * d))
    p = (1 + int(np.sum(flipped >= abs(est) - 1e-12))) / (n + 1)
    return {"estimate": est, "ci": percentile_interval(boots, level), "p": p, "n": len(d),
            "test": f"stratified sign-flip, {n} draws"}


def mean_interval(values, strata, level: float = 0.95, n: int = DRAWS, seed: int = 0) -> dict:
    """The mean over strata of the per-stratum means of `values` and its percentile bootstrap interval (items
    resampled within their stratum) -> {estimate, ci, n}."""
    r = paired_interval(values, strata, level, n, seed, test=False)
    return {"estimate": r["estimate"], "ci": r["ci"], "n": r["n"]}


def ratio_interval(num_a, den_a, num_b, den_b, strata, level: float = 0.95, n: int = DRAWS, seed: int = 0) -> dict:
    """Speed over a mix: (Σ num_a / Σ den_a) / (Σ num_b / Σ den_b) over paired units (tokens and seconds of arm a and
    arm b on the same prompts), its percentile bootstrap interval (units resampled within their stratum, `n` draws),
    the per-stratum ratios and their geometric mean (beside it, never an arithmetic mean of ratios).
    -> {estimate, ci, geomean, per_stratum, n}."""
    import numpy as np

    x = [np.asarray(v, dtype=float) for v in (num_a, den_a, num_b, den_b)]
    strata = list(strata)

    def ratio(w):  # w [.., N] weights -> ratio of the weighted sums
        with np.errstate(invalid="ignore", divide="ignore"):
            return ((w @ x[0]) / (w @ x[1])) / ((w @ x[2]) / (w @ x[3]))

    ones = np.ones(len(strata))
    per = {}
    for s in sorted(set(strata), key=str):
        m = np.asarray([1.0 if t == s else 0.0 for t in strata])
        per[s] = float(ratio(m))
    counts = {s: strata.count(s) for s in set(strata)}
    ci = None
    if len(strata) >= 2 and min(counts.values()) >= 2:
        ci = percentile_interval(ratio(_stratified_draws(strata, n, seed)), level)
    vals = [v for v in per.values() if v > 0 and math.isfinite(v)]
    return {"estimate": float(ratio(ones)), "ci": ci, "geomean": geometric_mean(vals) if vals else None,
            "per_stratum": per, "n": len(strata)}


def crossed_interval(D, strata, level: float = 0.95) -> dict:
    """The crossed design of replicated training: D [R runs, N prompts] of paired differences (every run on the same
    prompts). The estimate is the mean over runs of each run's stratified mean. Its variance under the two-way
    random-effects model D_ri = μ + a_r + b_i + e_ri (runs and prompts both random) is σ_a²/R + Σw_i²σ_b² +
    Σw_i²σ_e²/R, estimated from the runs' means (σ_a² + Σw²σ_e²), the prompts' means over runs (within their
    suite: σ_b² + σ_e²/R) and the two-way residuals (σ_e²); the interval is t with Satterthwaite's degrees of freedom
    (R − 1 when the runs' part dominates, about N − S when the prompts' does) and the p-value the same t test.
    -> {estimate, se, df, ci, p, run_sd, prompt_sd, resid_sd, per_run, resolvable, mde80, test}."""
    import numpy as np
    from scipy import stats as st

    D = np.asarray(D, dtype=float)
    R, N = D.shape
    strata = list(strata)
    w = strata_weights(strata)
    run_means = D @ w  # [R]
    est = float(run_means.mean())
    prompt_means = D.mean(axis=0)  # [N]
    groups = {s: np.asarray([i for i, x in enumerate(strata) if x == s]) for s in set(strata)}
    # the prompts' part: a stratified mean's variance from the within-suite spread of the prompts' run means
    v_prompt = float(sum((1.0 / len(groups)) ** 2 * prompt_means[idx].var(ddof=1) / len(idx)
                         for idx in groups.values() if len(idx) > 1))
    df_prompt = max(N - len(groups), 1)
    if R < 2:
        return {"estimate": est, "se": None, "df": None, "ci": None, "p": None, "runs": R, "prompts": N,
                "test": None, "per_run": [round(float(x), 6) for x in run_means]}
    v_run = float(run_means.var(ddof=1)) / R
    # the residual: D_ri - (prompt mean_i) - (run mean_r - grand mean), with (R-1)(N-1) degrees of freedom
    resid = D - prompt_means[None, :] - (run_means - est)[:, None]
    s2e = float((resid ** 2).sum() / max((R - 1) * (N - 1), 1))
    overlap = float((w ** 2).sum()) * s2e / R  # counted in both parts above
    var = max(v_run + v_prompt - overlap, v_run, v_prompt)
    se = var ** 0.5
    parts = [(v_run, R - 1), (v_prompt, df_prompt)]
    den = sum(v * v / d for v, d in parts if v > 0)
    df = (sum(v for v, _ in parts) ** 2 / den) if den > 0 else float(R - 1)
    df = float(min(max(df, R - 1), R - 1 + df_prompt))
    q = float(st.t.ppf(0.5 + level / 2, df))
    ci = [float(est - q * se), float(est + q * se)] if se > 0 else [est, est]
    p = float(2 * st.t.sf(abs(est) / se, df)) if se > 0 else (1.0 if est == 0 else 0.0)
    return {"estimate": est, "se": se, "df": df, "ci": ci, "p": p, "runs": R, "prompts": N,
            "run_sd": float(run_means.std(ddof=1)), "prompt_sd": float(prompt_means.std(ddof=1)),
            "resid_sd": s2e ** 0.5, "per_run": [round(float(x), 6) for x in run_means],
            "resolvable": float(q * se),  # the smallest |Δ| whose interval would exclude 0 at this spread
            "mde80": float((q + float(st.t.ppf(0.8, df))) * se),  # the Δ this design detects with 80% power at 5%
            "test": f"two-way random-effects t test (runs and prompts random; Satterthwaite df {df:.1f})"}


def holm(pvalues) -> list:
    """Holm's step-down adjusted p-values (family-wise error), in the input's order; None stays None."""
    idx = [i for i, p in enumerate(pvalues) if p is not None]
    order = sorted(idx, key=lambda i: pvalues[i])
    m, out, running = len(idx), list(pvalues), 0.0
    for k, i in enumerate(order):
        running = max(running, min(1.0, (m - k) * pvalues[i]))
        out[i] = running
    return out


def verdict(ci, units: int | None, null: float = 0.0, min_units: int = MIN_UNITS) -> str:
    """The one verdict rule: 'descriptive' below `min_units` independent units (or no interval), 'degenerate' for a
    zero-width interval (every resample gave one value: never a win), else 'win' when the interval lies above
    `null`, 'loss' below, 'no effect shown' across it."""
    if not ci or ci[0] is None or ci[1] is None or units is None or units < min_units:
        return "descriptive"
    if abs(ci[1] - ci[0]) <= 1e-9 * max(1.0, abs(ci[0]), abs(ci[1])):  # every resample gave one value (rounding)
        return "degenerate"
    return "win" if ci[0] > null else "loss" if ci[1] < null else "no effect shown"
