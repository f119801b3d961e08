"""The benchmark runner: suites × temperatures × arms at one concurrency, then a concurrency sweep.

Headline arms decode every prompt; ablation arms (`benchmark.ablation_arms`) the first
`ablation_prompts_per_suite` of each suite; at T>0 only `sampled_arms` decode, on the first
`sampled_prompts_per_suite` (`batch_arms`). Smaller samples are prefixes of the same ranked prompts, so
every pair shares the prompts of its smaller arm. A pair that needs more prompts than the headline sample
(`benchmark.pair_prompts_per_suite`) has its two arms decode the next ranked prompts too, at T=0 only; those
runs are `extra` (`BenchRuns.extra`): they feed the pairs' intervals, not the per-arm rows.

Arms run the *same* prompt batches interleaved (batch i: every arm in turn, starting arm rotated per
batch so no arm always runs first), so every speedup is a same-run ratio. With `benchmark.interleave: rounds`
the arms of a batch decode in lockstep instead, one round each in turn (bench/lockstep.py), so that a slow
spell of a shared machine falls on all of them; each arm's times are its own either way. Each (arm, batch) gets a
generator seeded from (seed, batch index), identical across arms. Arms that declare `greedy_only`
(the reference rows: Hugging Face `generate`, the authors' `dflash_generate`) are skipped at T>0.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from draftlab.config import BenchmarkConfig
from draftlab.bench.lockstep import Lockstep
from draftlab.decoding import GenerationResult, SamplingParams


@dataclass
class PromptItem:
    id: str
    suite: str
    ids: list[int]


@dataclass
class BatchRun:
    """One arm on one batch of prompts."""

    arm: str
    suite: str  # suite name, or "mixed" in the concurrency sweep
    temperature: float
    concurrency: int  # streams decoded together
    sweep: bool  # part of the concurrency sweep
    prompt_ids: list[str]
    prompts: list[list[int]]
    result: GenerationResult
    extra: bool = False  # beyond the headline sample: decoded for a pair's power only (pair_prompts_per_suite)
    oracles: dict | None = field(default=None, repr=False, compare=False)  # bench.metrics.oracle_taus, once per run


@dataclass
class BenchRuns:
    runs: list[BatchRun] = field(default_factory=list)  # the headline (and ablation, sampled, sweep) runs
    arms: list[str] = field(default_factory=list)
    extra: list[BatchRun] = field(default_factory=list)  # the pairs' extra prompts (read by the pairs only)


def _chunks(items: list, size: int) -> list[list]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def _seeded(device: torch.device, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def past_headline(cfg: BenchmarkConfig, bi: int) -> bool:
    """Whether per-suite batch `bi` lies past the headline sample (it holds a pair's extra prompts)."""
    return 0 < cfg.prompts_per_suite <= bi * cfg.batch_size


def batch_arms(cfg: BenchmarkConfig, arms: dict, bi: int, temp: float) -> list[str]:
    """The arms that decode per-suite batch `bi` at temperature `temp`: the headline arms on every batch, the
    ablation arms on the batches holding the first `ablation_prompts_per_suite` prompts, at T>0 only
    `sampled_arms` on the first `sampled_prompts_per_suite` prompts and no greedy-only arm; beyond the headline
    sample only the arms of the pairs sized larger (`pair_prompts_per_suite`), at T=0."""
    start = bi * cfg.batch_size  # index of the batch's first prompt within its suite

    def within(limit: int) -> bool:
        return limit <= 0 or start < limit

    if past_headline(cfg, bi):  # a pair's extra prompts
        return [name for name in arms if temp == 0 and within(cfg.t0_prompts(name))]
    out = []
    for name in arms:
        if name in cfg.ablation_arms and not within(cfg.ablation_prompts_per_suite):
            continue
        if temp > 0 and (getattr(arms[name], "greedy_only", False) or not within(cfg.sampled_prompts_per_suite)
                         or (cfg.sampled_arms and name not in cfg.sampled_arms)):
            continue
        out.append(name)
    return out


def sweep_arm_names(cfg: BenchmarkConfig, arms: dict, temp: float) -> list[str]:
    """The arms of the concurrency sweep at `temp` (`concurrency_arms` among those that run; no greedy-only arm
    at T>0)."""
    names = [a for a in arms if a in cfg.concurrency_arms] if cfg.concurrency_arms else list(arms)
    return [a for a in names if not (temp > 0 and getattr(arms[a], "greedy_only", False))]


@dataclass(frozen=True)
class Group:
    """One batch of prompts every arm of `which` decodes (a per-suite batch or a concurrency-sweep batch)."""

    batch: list
    bi: int
    suite: str
    temp: float
    conc: int
    sweep: bool
    max_new: int
    which: list


def groups(cfg: BenchmarkConfig, arms: dict, suites: dict[str, list[PromptItem]],
           sweep_pool: list[PromptItem] | None = None):
    """Every batch group of the run, in the order it runs: suites × temperatures × batches, then the concurrency
    sweep (the pool repeated cyclically when a level needs more prompts). The one enumeration the runner, the
    progress count and the compiled engine's shape plan (`requests`) read."""
    for suite, prompts in suites.items():
        for temp in cfg.temperatures:
            for bi, batch in enumerate(_chunks(prompts, cfg.batch_size)):
                yield Group(batch, bi, suite, temp, cfg.batch_size, False, cfg.max_new_tokens,
                            batch_arms(cfg, arms, bi, temp))
    pool = sweep_pool or interleave(suites)
    for temp in cfg.concurrency_temperatures:
        sweep_arms = sweep_arm_names(cfg, arms, temp)
        for conc in cfg.concurrency:
            n = max(conc, cfg.concurrency_prompts)
            items = sorted((pool[i % len(pool)] for i in range(n)), key=lambda p: len(p.ids))  # less padding
            for bi, batch in enumerate(_chunks(items, conc)):
                yield Group(batch, bi, "mixed", temp, conc, True, cfg.concurrency_max_new_tokens, sweep_arms)


def plan_size(cfg: BenchmarkConfig, suites: dict[str, list[PromptItem]], arms: dict,
              sweep_pool: list[PromptItem] | None = None) -> int:
    """Number of (arm, batch) generations the run will do (for the progress bar); arms: name -> Arm."""
    return sum(len(g.which) for g in groups(cfg, arms, suites, sweep_pool))


def requests(cfg: BenchmarkConfig, arms: dict, suites: dict[str, list[PromptItem]],
             sweep_pool: list[PromptItem] | None = None) -> list[tuple]:
    """(arm, streams, temperature) of every decode the run makes, the warm-up included: what the compiled engine's
    shapes are planned from (`draftlab.decoding.shapes.plan_graphs`)."""
    out = [(arms[name], 1, 0.0) for name in arms] if cfg.warmup else []
    return out + [(arms[name], len(g.batch), SamplingParams(g.temp, cfg.top_p, cfg.top_k))
                  for g in groups(cfg, arms, suites, sweep_pool) for name in g.which]


def run_benchmark(arms: dict, suites: dict[str, list[PromptItem]], cfg: BenchmarkConfig, eos_ids: list[int],
                  device: torch.device, tick: Callable[[str], None] | None = None,
                  sweep_pool: list[PromptItem] | None = None, store=None) -> BenchRuns:
    """arms: name -> Arm; suites: suite -> ranked prompts; sweep_pool: prompts for the concurrency sweep
    (default: the suites' prompts round-robin; repeated cyclically when a level needs more); store: a
    bench.resume.RunStore that keeps each finished group (all arms on one batch) and returns those an earlier
    process finished."""
    names = list(arms)
    out = BenchRuns(arms=names)
    tick = tick or (lambda _msg: None)
    if cfg.warmup:
        first = next(iter(suites.values()))[0].ids
        for name in names:
            arms[name].generate([first], 4, SamplingParams(), eos_ids, _seeded(device, 0), record_topk=cfg.topk)

    def run_batch(batch: list[PromptItem], bi: int, suite: str, temp: float, conc: int, sweep: bool, max_new: int,
                  which: list[str]):
        sp = SamplingParams(temp, cfg.top_p, cfg.top_k)
        if not which:
            return
        order = which[bi % len(which):] + which[: bi % len(which)]  # rotate: no arm always runs first
        extra = not sweep and past_headline(cfg, bi)
        group = f"{suite}|T={temp:g}|c={conc}|{'sweep' if sweep else 'suite'}|b={bi}|n={max_new}|{','.join(order)}"
        done = store.get(group) if store is not None else None  # finished by an earlier process (bench/resume.py)
        if done is None:
            def job(name: str) -> Callable[[], object]:
                return lambda: arms[name].generate([p.ids for p in batch], max_new, sp, eos_ids,
                                                   _seeded(device, cfg.seed * 100003 + bi),
                                                   record_topk=0 if sweep else cfg.topk)

            def record(name: str, res) -> None:
                done.append(BatchRun(name, suite, temp, conc, sweep, [p.id for p in batch], [p.ids for p in batch], res,
                                     extra))
                tick(f"{suite} T={temp:g} c={conc} {name}")

            done = []
            if cfg.interleave == "rounds" and len(order) > 1:  # in lockstep, round by round (bench/lockstep.py)
                for name, res in zip(order, Lockstep().run([job(name) for name in order])):
                    record(name, res)
            else:
                for name in order:
                    record(name, job(name)())
            if store is not None:
                store.put(group, done)
        else:
            for r in done:
                tick(f"{suite} T={temp:g} c={conc} {r.arm} (resumed)")
        (out.extra if extra else out.runs).extend(done)

    for g in groups(cfg, arms, suites, sweep_pool):
        run_batch(g.batch, g.bi, g.suite, g.temp, g.conc, g.sweep, g.max_new, g.which)
    return out


def interleave(suites: dict[str, list[PromptItem]]) -> list[PromptItem]:
    """Round-robin over the suites' (ranked) prompts: a mixed pool for the concurrency sweep."""
    lists = list(suites.values())
    out = []
    for i in range(max((len(x) for x in lists), default=0)):
        out += [x[i] for x in lists if i < len(x)]
    return out
