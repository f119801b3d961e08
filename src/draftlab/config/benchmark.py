"""Schemas of the benchmark-side sections of params.yaml: `benchmark` (arms, pairs, sizes, the concurrency
sweep) and `pld` (prompt lookup: the `pld` arm and the `dflash-pld` hybrid)."""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from draftlab import paths
from draftlab.config.checks import _choice, _positive, _unit
from draftlab.errors import ConfigError


DRAFTER_DTYPES = ("auto", "float32", "bfloat16", "float16")  # benchmark.drafter_dtype


@dataclass
class BenchmarkConfig:
    """AR vs speculative arms on the eval suites: τ, tokens/s, speedup, coverage, concurrency sweep."""

    suites: list[str] = field(default_factory=lambda: ["mt-bench", "humaneval", "math500"])
    prompts_per_suite: int = 4  # fixed seeded subsample per suite (draftlab.data.suites.rank); 0 = all
    max_new_tokens: int = 96
    temperatures: list[float] = field(default_factory=lambda: [0.0, 1.0])
    top_p: float = 1.0
    top_k: int = 0
    batch_size: int = 1  # streams decoded together in the per-suite runs
    # how the arms of one batch share the machine: `arms` = one arm after the other; `rounds` = in lockstep, one round
    # of each arm in turn, so that a slow spell of a shared machine hits every arm alike (bench/lockstep.py)
    interleave: str = "arms"
    concurrency: list[int] = field(default_factory=lambda: [1, 4, 8, 16, 32])  # [] = no sweep
    concurrency_prompts: int = 4  # prompts per concurrency level: max(level, this)
    concurrency_max_new_tokens: int = 48
    concurrency_temperatures: list[float] = field(default_factory=lambda: [0.0, 1.0])  # the sweep's temperatures
    concurrency_arms: list[str] = field(default_factory=list)  # the sweep's arms (those that run do); [] = every arm
    concurrency_base: str = "dflash"  # the sweep's ratios (τ, tokens/s, round overhead) are relative to this arm
    topk: int = 8  # K of the top-K coverage curves and the oracle τ
    arms: list[str] = field(default_factory=lambda: ["ar", "dflash"])  # the headline arms (draftlab.arms.grammar names)
    # ablation arms: decoded on the first `ablation_prompts_per_suite` prompts of each suite only (0 = as many as
    # the headline arms), and marked `ablation` in every table of the report; not candidates for `best`
    ablation_arms: list[str] = field(default_factory=list)
    ablation_prompts_per_suite: int = 0
    # the arms decoded at temperatures > 0 ([] = every arm), on the first `sampled_prompts_per_suite` prompts
    # (0 = all of them): T=1 only where a pair needs it
    sampled_arms: list[str] = field(default_factory=list)
    sampled_prompts_per_suite: int = 0
    drafter: str = paths.PLAIN_DRAFTER  # checkpoint of the dflash arm
    drafter_dtype: str = "auto"  # dtype the drafters load in: auto = the target's (bf16 on a GPU) | float32 | bfloat16 | float16
    simulated: bool = True  # the drafter's teacher-forced τ on the T=0 outputs, beside engine τ
    simulated_anchor_stride: int = 2  # every k-th response position is an anchor
    warmup: bool = True  # one untimed short generation per arm first
    record_rounds: bool = True  # per-round Parquet for the explorer
    resume: bool = True  # keep each finished batch group on disk and resume an interrupted run there (bench/resume.py)
    seed: int = 0
    # confidence intervals over prompts (draftlab.bench.uncertainty): percentile bootstrap, paired across arms
    bootstrap: int = 2000  # resamples; 0 = no intervals
    ci_level: float = 0.95
    # arm pairs reported as paired differences (Δτ, tokens/s ratio) with their own interval, on the prompts both
    # arms decoded; `best` = the headline arm of highest mean speedup at that temperature. Every named arm must run
    # (arms or ablation_arms); at a temperature where one of the two does not decode (sampled_arms, greedy-only
    # reference rows) the pair is skipped
    pairs: list[list[str]] = field(default_factory=lambda: [["dflash", "ar"]])  # conf/benchmark/arms/*.yaml set theirs
    # prompts per suite for the pairs that need more than the headline sample ("a vs b" -> n > prompts_per_suite):
    # the two arms also decode prompts prompts_per_suite+1..n of each suite, at T=0 only, next to each other; those
    # prompts feed the pairs' intervals only (per-arm rows stay on the headline sample). Entries for pairs not in
    # `pairs` are ignored (pair_extra); their arms must be in the arm table
    pair_prompts_per_suite: dict[str, int] = field(default_factory=dict)
    # the half-widths the headline pairs are sized for at T=0 (tools/size_benchmark.py); the report records
    # the ones the run reached beside them (results/benchmark.json -> setup.halfwidths)
    target_tau_diff_halfwidth: float = 0.10
    target_ratio_halfwidth: float = 0.05

    def check(self, p: str) -> None:
        if self.interleave not in ("arms", "rounds"):
            raise ConfigError(f"{p}.interleave={self.interleave!r} is not one of arms, rounds (rounds: the arms of a batch "
                              "decode in lockstep, one round each in turn)")
        if not self.suites:
            raise ConfigError(f"{p}.suites must name at least one suite")
        for k in ("prompts_per_suite", "concurrency_prompts", "ablation_prompts_per_suite", "sampled_prompts_per_suite"):
            _positive(f"{p}.{k}", getattr(self, k), allow_zero=True)
        for k in ("max_new_tokens", "batch_size", "concurrency_max_new_tokens", "topk", "simulated_anchor_stride"):
            _positive(f"{p}.{k}", getattr(self, k))
        for t in [*self.temperatures, *self.concurrency_temperatures]:
            _positive(f"{p}.temperatures[]", t, allow_zero=True)
        for c in self.concurrency:
            _positive(f"{p}.concurrency[]", c)
        _unit(f"{p}.top_p", self.top_p)
        if self.top_p == 0:
            raise ConfigError(f"{p}.top_p must be > 0")
        _positive(f"{p}.top_k", self.top_k, allow_zero=True)
        _choice(f"{p}.drafter_dtype", self.drafter_dtype, DRAFTER_DTYPES)
        if not self.arms:
            raise ConfigError(f"{p}.arms must name at least one arm (e.g. ar, dflash)")
        for key in ("arms", "ablation_arms", "sampled_arms"):
            names = getattr(self, key)
            for a in dict.fromkeys(names):
                if names.count(a) > 1:
                    raise ConfigError(f"{p}.{key} names '{a}' {names.count(a)} times; list each arm once")
        both = [a for a in self.ablation_arms if a in self.arms]
        if both:
            raise ConfigError(f"{p}: arm '{both[0]}' is in both {p}.arms and {p}.ablation_arms; keep it in one list "
                              "(arms = headline, run at full size; ablation_arms = the smaller ablation run)")
        for key in ("ablation_prompts_per_suite", "sampled_prompts_per_suite"):
            if self.prompts_per_suite and getattr(self, key) > self.prompts_per_suite:
                raise ConfigError(f"{p}.{key}={getattr(self, key)} exceeds {p}.prompts_per_suite={self.prompts_per_suite}; "
                                  "they are the first prompts of the headline sample: lower it (0 = all)")
        _positive(f"{p}.bootstrap", self.bootstrap, allow_zero=True)
        _positive(f"{p}.target_tau_diff_halfwidth", self.target_tau_diff_halfwidth)
        _positive(f"{p}.target_ratio_halfwidth", self.target_ratio_halfwidth)
        if not 0 < self.ci_level < 1:
            raise ConfigError(f"{p}.ci_level={self.ci_level} must be between 0 and 1 (e.g. 0.95)")
        for pair in self.pairs:
            if len(pair) != 2 or pair[0] == pair[1]:
                raise ConfigError(f"{p}.pairs: {pair} must name two different arms, e.g. [dcoco, dflash]")
        for label, n in self.pair_prompts_per_suite.items():
            if len(label.split(" vs ")) != 2:
                raise ConfigError(f"{p}.pair_prompts_per_suite: key '{label}' must name a pair as 'a vs b' "
                                  "(e.g. 'pld vs hf-generate-pld')")
            if "best" in label.split(" vs "):
                raise ConfigError(f"{p}.pair_prompts_per_suite: '{label}' names `best`, which is chosen after the run; "
                                  "size a pair of named arms")
            if not isinstance(n, int) or n <= self.prompts_per_suite:
                raise ConfigError(f"{p}.pair_prompts_per_suite['{label}']={n!r} must be an integer above "
                                  f"{p}.prompts_per_suite={self.prompts_per_suite} (the pair gets the headline prompts anyway)")
        for label in self.pair_extra():
            abl = [a for a in label.split(" vs ") if a in self.ablation_arms]
            if abl:
                raise ConfigError(f"{p}.pair_prompts_per_suite: '{label}' has the ablation arm '{abl[0]}', which decodes "
                                  f"{p}.ablation_prompts_per_suite prompts only; move it to {p}.arms or drop the entry")
            if not self.prompts_per_suite:
                raise ConfigError(f"{p}.pair_prompts_per_suite needs {p}.prompts_per_suite > 0 (0 decodes every prompt "
                                  "already); drop it or set a headline sample size")
        if self.concurrency and not self.concurrency_temperatures:
            raise ConfigError(f"{p}.concurrency_temperatures is empty; give at least one (e.g. [0.0]) or set "
                              f"{p}.concurrency: []")

    def running_arms(self) -> list[str]:
        """Every arm the benchmark decodes: the headline arms, then the ablation arms."""
        return [*self.arms, *self.ablation_arms]

    def pair_extra(self) -> dict[str, int]:
        """The entries of `pair_prompts_per_suite` whose pair is in `pairs` (either order): those that run. An
        entry for a pair not listed (e.g. after `-S benchmark.pairs=...`) decodes nothing."""
        listed = {frozenset(x) for x in self.pairs if len(x) == 2}
        return {label: n for label, n in self.pair_prompts_per_suite.items()
                if frozenset(label.split(" vs ")) in listed}

    def t0_prompts(self, arm: str) -> int:
        """Prompts per suite `arm` decodes at T=0: the headline sample, or more where a pair in
        `pair_prompts_per_suite` holds it (0 = all; ablation arms: their own, smaller, sample)."""
        if not self.prompts_per_suite and arm not in self.ablation_arms:
            return 0
        return arm_t0_prompts(arm, self.prompts_per_suite, self.ablation_arms, self.ablation_prompts_per_suite,
                              self.pair_extra())

    def prompts_selected(self) -> int:
        """Prompts per suite the benchmark selects (0 = all): the largest sample any arm decodes."""
        return max([self.prompts_per_suite, *self.pair_extra().values()]) if self.prompts_per_suite else 0

    def check_arms(self, p: str, known: Collection[str]) -> None:
        """Arm names against the arm table's (`known`, in table order): arms, ablation arms, the sweep's arms
        and its base, the reported pairs (`best` allowed there); then the pairs' and the T>0 arms against the
        arms that run.
        `concurrency_arms` may name arms that do not run: the sweep runs those that do."""
        for key, names in (("arms", self.arms), ("ablation_arms", self.ablation_arms),
                           ("concurrency_arms", self.concurrency_arms),
                           ("concurrency_base", [self.concurrency_base]),
                           ("pairs", [a for pair in self.pairs for a in pair if a != "best"]),
                           ("pair_prompts_per_suite", [a for k in self.pair_prompts_per_suite for a in k.split(" vs ")])):
            for a in names:
                if a not in known and "-sampled" in a:  # a sampled walk where none exists: say which do
                    walks = [k for k in known if k.endswith("-sampled")]
                    raise ConfigError(f"{p}.{key} names '{a}', which has no sampled walk: only a corrector family that "
                                      f"walks has one, with the greedy path rule ({', '.join(walks)}, and their -seeded "
                                      f"forms)")
                if a not in known:
                    near = difflib.get_close_matches(a, list(known), n=1)
                    hint = f" (did you mean '{near[0]}'?)" if near else ""
                    raise ConfigError(f"{p}.{key} names unknown arm '{a}'{hint}; known arms: {', '.join(known)} "
                                      "(the arm table, draftlab/arms/grammar.py)")
        running = self.running_arms()
        for key, names in (("sampled_arms", self.sampled_arms),
                           ("pairs", [a for pair in self.pairs for a in pair if a != "best"])):
            for a in names:
                if a not in running:
                    raise ConfigError(f"{p}.{key} names '{a}', which does not run; add it to {p}.arms or "
                                      f"{p}.ablation_arms, or drop it from {p}.{key}")




def arm_t0_prompts(arm: str, n: int, ablation_arms, ablation_n: int, pair_extra: dict[str, int]) -> int:
    """The rule of BenchmarkConfig.t0_prompts for a headline sample of n (the sizing rule varies n): an ablation
    arm its own sample, another arm n or the largest `pair_extra` entry ("a vs b" -> prompts) that holds it."""
    if arm in ablation_arms:
        return ablation_n or n
    return max([n, *(k for label, k in pair_extra.items() if arm in label.split(" vs "))])


@dataclass
class PLDConfig:
    """Prompt lookup (n-gram proposals): the `pld` arm and the `dflash-pld` hybrid (draftlab.decoding.lookup).
    The verified block has the drafter's size S (drafter.block_size), so num_tokens lies in 1..S-1."""

    max_ngram: int = 3  # the longest suffix n-gram looked up (then shorter ones, down to 1)
    num_tokens: int = 7  # tokens proposed after a match (<= S-1)
    min_match: int = 1  # `dflash-pld`: the lookup replaces the drafter only with a match this long (`pld`: any)
    hybrid: str = "switch"  # dflash-pld: switch (whole block from the lookup) | splice (lookup, then drafter)

    def check(self, p: str) -> None:
        if self.max_ngram < 1:
            raise ConfigError(f"{p}.max_ngram={self.max_ngram} must be >= 1 (the longest n-gram looked up)")
        if self.num_tokens < 1:
            raise ConfigError(f"{p}.num_tokens={self.num_tokens} must lie in 1..S-1 (S = drafter.block_size)")
        if not 1 <= self.min_match <= self.max_ngram:
            raise ConfigError(f"{p}.min_match={self.min_match} must lie in 1..{p}.max_ngram={self.max_ngram}")
        _choice(f"{p}.hybrid", self.hybrid, ("switch", "splice"))
