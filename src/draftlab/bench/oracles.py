"""How the benchmark's τ, oracle τ and headroom figures are read: which arm an arm's headroom is measured
against, when an oracle τ is a ceiling for an arm, and when a row's τ is a measurement at all. One definition,
used by the benchmark's summary (`draftlab.bench.metrics.summary`) and the explorer's Acceptance, Speed and
Compare pages (app/). Plain Python: no torch, no pandas.

- **top-K oracle τ** (`oracle_tau`): the τ a perfect re-selection among the drafter's top-K candidates would
  reach — per round, the slots accepted while the target's token is among the drafter's top-K there, + 1
  (`draftlab.corrector.paths.oracle_path`); **reachable oracle τ** (`oracle_tau_reachable`): the same with slot 1
  fixed to the drafter's top-1. Both are computed from the top-K that the arm's round records carry, i.e. the
  candidates of the arm's own drafter.
- **a ceiling only for arms that propose among those candidates.** An arm whose proposals are the drafter's
  top-K picks (DFlash's argmax, a corrector's path, a seeded drafter whose seeds are among its candidates)
  accepts a slot only when its proposal — one of the top-K — is the target's token, so its τ can never exceed
  the top-K oracle. The lookup arms (`dflash-pld` and its variants: the rounds' `sources` say the block came
  from the prompt lookup) propose tokens that are not the drafter's candidates, so the drafter's oracle bounds
  nothing there (the committed run: `dflash-pld` τ 3.59 against a top-K oracle of 1.50 on mt-bench). Such an
  arm's oracle is not a ceiling, and neither is an oracle below the arm's τ for any other reason (e.g. a sample
  outside the top-K at T > 0): `oracle_bounds` says False and the explorer shows "—".
- **headroom closed** = (τ_arm − τ_base) / (τ_oracle(base) − τ_base), where the base is the arm's own
  uncorrected drafter decoding alone (`headroom_base`): `dflash-seeded` for an arm on the seeded drafter
  (`dflash-seeded-cut` and every `<method>-seeded` arm), `dflash` for an arm on the plain drafter, and
  τ_oracle(base) is that base's oracle τ on the same prompts (suite, temperature). 0 = no better than the base
  drafter alone, 1 = as good as a perfect re-selection among the base drafter's top-K; it can exceed 1 when the
  method also retrained the drafter (SpecOPD, DCOCO's co-training), whose candidates then differ from the base's.
  Undefined (None) for a lookup arm (its proposals are not re-selections among the drafter's candidates), a tree arm
  (it verifies several paths a round: the chain's oracle does not bound it, `oracle_bounded`), an arm without an
  oracle (AR, `pld`, the Hugging Face rows), a missing base, or a base without headroom.
- **headroom below noise**: the denominator Δ = τ_oracle(base) − τ_base is itself a measurement over prompts. Per
  sequence, the base's oracle τ and τ come from the same rounds, so Δ's standard error is the paired one over
  sequences (`headroom_noise`: sd of the per-sequence gaps / √n; a mean over suites combines the suites' errors). A ratio
  whose Δ is less than `NOISE_SE` (5) of those standard errors is noise divided by noise (the committed `cpu` run:
  Δ = 0.027 τ for `dflash-seeded` on mt-bench, which made a corrector's "headroom closed" −1430%): it is not given
  (None) and `why` says "headroom below noise (Δ = … ± … τ)". A run whose per-prompt rows carry no oracle τ (one
  that predates them) or that has one prompt has no such error: its ratio is not given either, with the reason.
- **τ measured**: a row's τ is a measurement when the arm ran rounds of its own — the project's AR engine (one
  token per step: τ = 1 exactly) or a speculative arm (its accepted lengths). The Hugging Face `generate` rows
  report no rounds; their τ in the benchmark detail is a placeholder 1.0 (for `hf-generate-pld`, whose prompt
  lookup does speculate, the acceptance is simply not reported), and the paired Δτ leaves them out
  (`draftlab.bench.uncertainty`).
"""
from __future__ import annotations

from typing import Iterable, Mapping

from draftlab.config.seeded import PLAIN_ARM, SEEDED_ARM, SEEDED_ARMS, SEEDED_SUFFIX
from draftlab.stats import NOISE_SE, mean_and_se, share_closed

ORACLE_KEYS = ("oracle_tau", "oracle_tau_reachable")  # the benchmark's oracle metrics
SOURCES_KEY = "sources"  # per-suite metric of arms whose proposal step records where a block came from (lookup)


def headroom_base(arm: str, lookup: bool = False) -> str | None:
    """The arm an arm's headroom is measured against: its own uncorrected drafter decoding alone. `dflash-seeded`
    for an arm on the seeded drafter (`dflash-seeded`, `dflash-seeded-cut`, every `<method>-seeded` arm),
    `dflash` for any other arm with a drafter (`dflash`, `dcoco`, `dflash-specopd`, ...); a base arm is its own
    base (headroom closed 0). None for a lookup arm (`lookup`: its proposals come from the prompt lookup, not
    from its drafter's candidates)."""
    if lookup:
        return None
    if arm in SEEDED_ARMS or arm.endswith(SEEDED_SUFFIX):
        return SEEDED_ARM
    return PLAIN_ARM


def is_lookup(metrics: Mapping) -> bool:
    """Whether the arm's proposals can come from the prompt lookup: its metrics carry proposal sources (per
    suite `sources`, in the summary `sources_<t>`: a non-empty dict; a table's empty cell is not)."""
    return any((k == SOURCES_KEY or str(k).startswith(SOURCES_KEY + "_")) and isinstance(v, Mapping) and bool(v)
               for k, v in metrics.items())


def oracle_bounded(arm: str) -> bool:
    """Whether the base's chain oracle bounds the arm: a chain arm does (it proposes one path among its drafter's
    candidates a round); a tree arm (`-tree<N>` / `-treecost` in its name) verifies several paths and does not."""
    from draftlab.decoding.tree import OPTIONS as TREES

    return not any(part in TREES for part in arm.split("-"))


def headroom_closed(tau: float | None, tau_base: float | None, tau_oracle: float | None,
                    se: float | None = 0.0) -> float | None:
    """(τ_arm − τ_base) / (τ_oracle − τ_base), τ_oracle the base's oracle τ; None when undefined (no base arm,
    no oracle, no headroom: τ_oracle ≤ τ_base) or when the headroom is below noise (`se`: Δ's paired standard
    error over prompts, `headroom_noise`; None = unknown, which is not "no noise"; 0: a simulation or test
    without sampling error). The one rule: `draftlab.stats.share_closed`."""
    return share_closed(tau, tau_base, tau_oracle, se)


def headroom_noise(per_prompt: Mapping | None, oracle: str = "oracle_tau") -> tuple[float, float] | None:
    """(Δ, its standard error) of one (suite, temperature) base row from its per-prompt figures
    (`draftlab.bench.uncertainty.per_prompt`): the gaps oracle τ − τ of every sequence (paired: both from the same
    rounds; `<oracle>_gaps`, per unit, a unit being one batch), Δ their mean, SE = sd / √n over the sequences of the
    headline units (a pair's `extra` units left out). A detail without per-sequence gaps falls back to the units'
    oracle τ − τ. None without per-prompt oracle τ or with fewer than two sequences."""
    pp = per_prompt or {}
    extra = pp.get("extra") or []
    headline = lambda i: not (i < len(extra) and extra[i])  # noqa: E731
    if pp.get(f"{oracle}_gaps"):
        gaps = [g for i, gs in enumerate(pp[f"{oracle}_gaps"]) if headline(i) for g in gs if _num(g) is not None]
    else:
        taus, orcs = pp.get("tau") or [], pp.get(oracle) or []
        gaps = [o - t for i, (t, o) in enumerate(zip(taus, orcs))
                if _num(t) is not None and _num(o) is not None and headline(i)]
    return mean_and_se(sum(gaps), sum(g * g for g in gaps), len(gaps))


def mean_noise(parts: Iterable[tuple[float, float] | None]) -> tuple[float, float] | None:
    """(Δ, SE) of a mean over suites (the summary's formula) from each suite's `headroom_noise`; None if a suite
    has none."""
    parts = list(parts)
    if not parts or any(p is None for p in parts):
        return None
    n = len(parts)
    return sum(p[0] for p in parts) / n, sum(p[1] ** 2 for p in parts) ** 0.5 / n


def noise_why(base: str, delta: float | None, noise: tuple[float, float] | None) -> str:
    """Why a headroom ratio is not given although its base has headroom: below noise, or noise unknown."""
    if noise is None:
        return (f"no noise estimate for {base}'s headroom (Δ = {delta:.3f} τ): its per-prompt rows carry no oracle τ "
                "or it has one prompt (a benchmark run of this version records them)")
    return f"headroom below noise (Δ = {noise[0]:.3f} ± {noise[1]:.3f} τ, under {NOISE_SE:g} standard errors)"


def oracle_bounds(tau: float | None, oracle: float | None, lookup: bool = False) -> bool:
    """Whether `oracle` (an oracle τ of the arm's drafter) is a ceiling for the arm's τ: the arm proposes among its
    drafter's top-K (not a lookup arm) and the oracle is not below the τ it reached (an oracle below it means some
    accepted proposal was not among the candidates, so it bounds nothing)."""
    if oracle is None or tau is None or lookup:
        return False
    return oracle >= tau - 1e-9


def tau_measured(metrics: Mapping) -> bool:
    """Whether a per-suite row's τ is a measurement: the arm ran rounds of its own (AR engine steps or speculative
    rounds with accepted lengths). False for the Hugging Face `generate` rows, which report no rounds."""
    return bool(metrics.get("rounds")) or "accept_curve" in metrics


def unmeasured_arms(detail: Mapping) -> set[str]:
    """The arms of a benchmark detail whose τ is no measurement in any of their per-suite rows (`tau_measured`);
    an arm with no per-suite row (summary only) is not judged."""
    seen: dict[str, bool] = {}
    for temps in (detail.get("suites") or {}).values():
        for by_arm in temps.values():
            for arm, m in by_arm.items():
                seen[arm] = seen.get(arm, False) or tau_measured(m)
    return {a for a, measured in seen.items() if not measured}


def headroom_rows(rows: Iterable[Mapping], oracle: str = "oracle_tau") -> list[dict]:
    """Headroom closed of every arm against its own base, per (suite, temperature): `rows` are per-suite metric
    dicts with `suite`, `temperature`, `arm`, `tau` and the oracle columns (the explorer's benchmark rows, or the
    detail's `suites` flattened). One dict per arm that has `oracle` and is not a base itself: arm, base, τ, the
    base's τ and oracle τ, and `headroom_closed` (None where undefined, with `why`)."""
    rows = list(rows)
    by = {(r["suite"], r["temperature"], r["arm"]): r for r in rows}
    out = []
    for r in rows:
        if _num(r.get(oracle)) is None:
            continue  # AR, pld, the Hugging Face rows: no top-K records, nothing to measure
        base = headroom_base(r["arm"], is_lookup(r))
        if base == r["arm"]:
            continue  # a base closes nothing of its own headroom
        b = by.get((r["suite"], r["temperature"], base)) if base else None
        tau, tau_b, orc_b = _num(r.get("tau")), _num((b or {}).get("tau")), _num((b or {}).get(oracle))
        pp = (b or {}).get("per_prompt")
        noise = headroom_noise(pp if isinstance(pp, Mapping) else None, oracle)
        bounded = oracle_bounded(r["arm"])
        closed = headroom_closed(tau, tau_b, orc_b, noise[1] if noise else None) if base and bounded else None
        delta = orc_b - tau_b if orc_b is not None and tau_b is not None else None
        why = ("lookup proposals: not re-selections among the drafter's top-K" if base is None else
               "a tree: the chain's oracle does not bound it" if not bounded else
               f"no {base} row at this suite / temperature" if b is None else
               f"{base} has no {oracle}" if orc_b is None else
               f"{r['arm']} has no τ" if tau is None else
               f"no headroom: {base}'s oracle τ ≤ its τ" if delta is None or delta <= 1e-9 else
               noise_why(base, delta, noise) if closed is None else "")
        out.append({"suite": r["suite"], "temperature": r["temperature"], "arm": r["arm"], "base": base,
                    "tau": tau, "base_tau": tau_b, "base_oracle_tau": orc_b, "headroom": delta,
                    "headroom_se": noise[1] if noise else None, "headroom_closed": closed, "why": why})
    return out


def _num(x) -> float | None:
    """A finite number, else None (NaN from a pandas row counts as missing)."""
    if x is None or isinstance(x, bool):
        return None
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if f == f else None
