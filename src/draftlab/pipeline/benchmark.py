"""Recipe of the benchmark stage: the configured arms of the arm table on the eval suites (T=0 and T=1,
interleaved batch by batch; the ablation arms on a smaller sample, marked) and the concurrency sweep, then
the metrics, simulated τ beside engine τ, and the run's setup (its size, where the time went, and the
half-widths the intervals reached). Measurement lives in draftlab.bench; this module wires it.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, is_dataclass
from typing import Callable

import torch

from draftlab.arms.grammar import ArmContext, Checkpoints, DrafterSpec, build_arm
from draftlab.bench.metrics import compute
from draftlab.bench.runner import BenchRuns, PromptItem, plan_size, requests, run_benchmark
from draftlab.bench.simulate import simulated_tau
from draftlab.bench.report import engine_label, mark_ablation
from draftlab.bench.resume import RunStore
from draftlab.measure.sizing import achieved
from draftlab.bench.uncertainty import add_intervals
from draftlab.config import BenchmarkConfig, DataConfig, ReferenceConfig
from draftlab.data.references import suite_prompts
from draftlab.data.suites import dedupe, rank
from draftlab.data.templates import encode_prompt
from draftlab.drafter.checkpoint import load_drafter
from draftlab import omp
from draftlab.kernels.linear import Plan, describe, install, plan_of
from draftlab.recipes.common import run_key


def prompt_budget(cfg: BenchmarkConfig, data: DataConfig, window: int) -> int:
    """The most tokens a benchmark prompt keeps: data.max_prompt_tokens, within the target's window after the most
    new tokens a request asks for."""
    return min(data.max_prompt_tokens, max(16, window - max(cfg.max_new_tokens, cfg.concurrency_max_new_tokens)))


def select(cfg: BenchmarkConfig, data: DataConfig, tokenizer, window: int,
           reference: ReferenceConfig) -> tuple[dict[str, list[PromptItem]], list[PromptItem]]:
    """Fixed seeded subsample per suite, and a round-robin pool over the suites for the sweep (`reference`:
    which held-out prompts validation takes, for the `sharegpt-chat` suite)."""
    max_tokens = prompt_budget(cfg, data, window)
    need_pool = max(cfg.concurrency or [0])
    ranked = {s: rank(dedupe(suite_prompts(s, data, reference))[0], cfg.seed) for s in cfg.suites}
    enc = lambda p: PromptItem(p.id, p.suite, encode_prompt(tokenizer, p.text, data.thinking, max_tokens,  # noqa: E731
                                                            p.messages)[0])
    k = cfg.prompts_selected()  # the headline sample and the larger pairs' extra prompts after it
    suites = {s: [enc(p) for p in (r[:k] if k else r)] for s, r in ranked.items()}
    pool = []
    for i in range(max(len(r) for r in ranked.values())):
        pool += [r[i] for r in ranked.values() if i < len(r)]
        if len(pool) >= need_pool:
            break
    return suites, [enc(p) for p in pool[:need_pool]]


def drafter_dtype(name: str, target) -> torch.dtype:
    """benchmark.drafter_dtype: `auto` = the target's dtype (a bf16 target on a GPU gets bf16 drafters, not
    fp32 ones at twice the memory traffic; on CPU the target, hence the drafter, is fp32), else the named one."""
    return target.dtype if name == "auto" else getattr(torch, name)


def drafter_specs(params) -> dict:
    """kind -> `DrafterSpec` of the plain drafter (drafter.*) and, when enabled, the seeded one (seeded.drafter.*
    over drafter.*): what every drafter an arm loads is checked against."""
    plain = params.drafter.design()
    specs = {"plain": DrafterSpec(plain.block_size, plain.draft_vocab_size)}
    if params.seeded.enabled:
        d = params.seeded.resolve(params.drafter, params.pretrain)[0].design()
        specs["seeded"] = DrafterSpec(d.block_size, d.draft_vocab_size)
    return specs


def build_arms(target, cfg: BenchmarkConfig, checkpoints: Checkpoints, pad_id: int, pld=None, block_size: int = 8,
               names: list[str] | None = None, seeded_verify=None, expect: dict | None = None, engine=None) -> dict:
    """name -> Arm for every arm of `names` (default: the headline, then the ablation arms; drafters loaded once
    per folder); pld: the PLDConfig, block_size: S of the drafter-less `pld` arm; seeded_verify: the
    `seeded.verify` section (the dflash-seeded-cut arm's verify width; None = its defaults); expect: kind ->
    `DrafterSpec` (`drafter_specs(params)`: every loaded drafter is checked against it; None = its kind only);
    engine: the `engine` section (None = its defaults: KV capacity sized per request)."""
    drafters: dict = {}
    dtype = drafter_dtype(cfg.drafter_dtype, target)

    def load(folder: str):
        if folder not in drafters:
            drafters[folder] = load_drafter(folder, target, dtype=dtype)
            if plan_of(target.model) is not None:  # the drafters run the target's linear plan (target.linear)
                install(drafters[folder], plan_of(target.model))
        return drafters[folder]

    ctx = ArmContext(target, cfg, checkpoints, pad_id, load, pld=pld, block_size=block_size, seeded_verify=seeded_verify,
                     expect=expect, kv_capacity=engine.kv_capacity if engine is not None else 0)
    return {name: build_arm(name, ctx) for name in (cfg.running_arms() if names is None else names)}


def compile_run(target, params, arms: dict, suites: dict, pool: list, window: int) -> dict:
    """A compiled benchmark's declaration (`draftlab.decoding.shapes`): one capacity (the longest prompt the run keeps
    + its most new tokens + the largest block), the batch sizes it asks for (benchmark.batch_size, the concurrency
    levels) and engine.batch_sizes, the verify widths; every graph compiled before the first timed generation."""
    from draftlab.decoding.shapes import declare, prepare_run, span

    cfg, engine = params.benchmark, params.engine
    block = max(s.block_size for s in drafter_specs(params).values())  # the plain drafter's among them
    block = span(block, arms.values())  # a tree arm appends up to its budget
    shapes = declare(prompt_budget(cfg, params.data, window), max(cfg.max_new_tokens, cfg.concurrency_max_new_tokens),
                     block, [cfg.batch_size, *cfg.concurrency], engine.verify_widths, engine.batch_sizes,
                     engine.kv_capacity)
    return prepare_run(target, shapes, requests(cfg, arms, suites, pool), engine.max_graphs)


@dataclass(frozen=True)
class BenchPaths:
    """The folders one benchmark reads and keeps: the trained models the arms decode (`Checkpoints`) and the folder
    that keeps finished batch groups (benchmark.resume; None = none)."""

    checkpoints: Checkpoints
    record: str | None = None


def run(target, params, where: BenchPaths, progress: Callable[[int], Callable[[str], None]] | None = None,
        record_key: dict | None = None) -> tuple[dict, BenchRuns]:
    """-> (the results/benchmark.json content, the runs). Reads the params' benchmark section (arms, sizes), data
    and reference (which held-out prompts validation takes, which the `sharegpt-chat` suite leaves out), pld and
    drafter.block_size (the prompt-lookup arms), seeded.verify (the dflash-seeded-cut arm's verify width), engine,
    and what each drafter must be (`drafter_specs`). `progress(total)` gives a tick(msg) callback; the finished
    batch groups are keyed by `record_key` (what else changes a number: the model folders' and the source's
    digests, the settings of other sections) and the prompts."""
    cfg, data, reference, pld, engine = params.benchmark, params.data, params.reference, params.pld, params.engine
    block_size, seeded_verify, record = drafter_specs(params)["plain"].block_size, params.seeded.verify, where.record
    setup = {"target": params.target.name, "profile": params.profile.name}
    t_start = time.perf_counter()
    tok = target.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else (target.eos_token_ids or [0])[0]
    window = int(getattr(target.config, "max_position_embeddings", 4096))
    suites, pool = select(cfg, data, tok, window, reference)
    arms = build_arms(target, cfg, where.checkpoints, pad, pld, block_size, seeded_verify=seeded_verify,
                      expect=drafter_specs(params), engine=engine)
    compiled = None
    if getattr(target, "compiled", "off") != "off":  # the run's shapes declared and every graph compiled up front
        compiled = compile_run(target, params, arms, suites, pool, window)
    tick = progress(plan_size(cfg, suites, arms, pool)) if progress else None
    store = None
    if record and cfg.resume:
        prompts = {s: [(p.id, p.ids) for p in v] for s, v in suites.items()}
        store = RunStore(record, {**(record_key or {}), "benchmark": asdict(cfg), "pld": _plain(pld),
                                  "seeded_verify": _plain(seeded_verify), "block_size": block_size,
                                  "prompts": run_key(prompts, [(p.id, p.ids) for p in pool]),
                                  "device": str(target.device), "dtype": str(target.dtype),
                                  # the mode, not the plan it measured: a measured plan varies between processes
                                  "linear": (plan_of(target.model) or Plan.fixed("torch")).mode,
                                  "threads": torch.get_num_threads(), "torch": torch.__version__})
    with torch.no_grad():
        runs = run_benchmark(arms, suites, cfg, target.eos_token_ids, target.device, tick, pool, store)
    detail = compute(runs.runs, runs.arms, base_arm=cfg.concurrency_base)
    add_intervals(detail, runs.runs, cfg.bootstrap, cfg.ci_level, cfg.seed, cfg.pairs, ablation=cfg.ablation_arms,
                  extra=runs.extra)
    mark_ablation(detail, cfg.ablation_arms)
    t_sim = time.perf_counter()
    if cfg.simulated:
        detail["simulated"] = simulated(arms, runs.runs, suites, detail, cfg, target)
    t_sim = time.perf_counter() - t_sim
    detail["setup"] = {**setup, "device": str(target.device), "dtype": str(target.dtype).replace("torch.", ""),
                       "engine": engine_label(target.device, engine, getattr(target, "compiled", "off"), compiled),
                       "linear": describe(target.model), "threads": torch.get_num_threads(),
                       "linear_plan": plan.as_dict() if (plan := plan_of(target.model)) else None,
                       "omp": omp.setup(),  # wait policy, threads, the load average at the start (draftlab.omp)
                       "interleave": cfg.interleave,  # arms one after the other, or in lockstep (bench/lockstep.py)
                       # when the results were made (the explorer's "results made … ago"; file times are a checkout's)
                       "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                       "prompts": {s: _headline(cfg, len(v)) for s, v in suites.items()},
                       "sweep_pool": len(pool), "size": size(cfg, suites),
                       # batch groups read back from an earlier, interrupted process (bench/resume.py)
                       "resumed": {"groups": store.resumed if store else 0, "folder": record if store else None},
                       # where the stage's time went (the sizing rule's cost per prompt: tools/size_benchmark.py);
                       # total = this recipe from prompt selection to the last interval (loading, warm-up included)
                       "timing_s": {"suites": sum(r.result.wall_s for r in runs.runs if not r.sweep),
                                    "pairs_extra": sum(r.result.wall_s for r in runs.extra),
                                    "sweep": sum(r.result.wall_s for r in runs.runs if r.sweep), "simulated": t_sim,
                                    "total": time.perf_counter() - t_start},
                       "halfwidths": achieved(detail, cfg.target_tau_diff_halfwidth, cfg.target_ratio_halfwidth),
                       "drafters": {a.name: drafter_info(a.drafter) for a in arms.values() if a.drafter is not None}}
    return detail, runs


def size(cfg: BenchmarkConfig, suites: dict[str, list[PromptItem]]) -> dict:
    """The run's size, as the report states it: headline and ablation samples, the T>0 subset, the sweep."""
    n = {s: _headline(cfg, len(v)) for s, v in suites.items()}
    sub = lambda k: {s: min(k, m) if k else m for s, m in n.items()}  # noqa: E731
    avail = {s: len(v) for s, v in suites.items()}
    return {"max_new_tokens": cfg.max_new_tokens, "temperatures": list(cfg.temperatures),
            "headline": {"arms": list(cfg.arms), "prompts_per_suite": n},
            "ablation": {"arms": list(cfg.ablation_arms), "prompts_per_suite": sub(cfg.ablation_prompts_per_suite)},
            "sampled": {"arms": list(cfg.sampled_arms) or cfg.running_arms(),
                        "prompts_per_suite": sub(cfg.sampled_prompts_per_suite)},
            "pairs_extra": {label: {s: min(k, m) for s, m in avail.items()}
                            for label, k in cfg.pair_extra().items()},  # T=0, the pair's two arms
            "sweep": {"levels": list(cfg.concurrency), "arms": list(cfg.concurrency_arms) or cfg.running_arms(),
                      "temperatures": list(cfg.concurrency_temperatures), "max_new_tokens": cfg.concurrency_max_new_tokens}}


def _plain(section) -> dict | None:
    return asdict(section) if is_dataclass(section) else section


def _headline(cfg: BenchmarkConfig, available: int) -> int:
    """Prompts of a suite in the headline sample (the selection may hold a pair's extra prompts after it)."""
    return min(cfg.prompts_per_suite, available) if cfg.prompts_per_suite else available


def simulated(arms, runs, suites, detail, cfg, target) -> dict:
    """Teacher-forced τ of each speculative arm's drafter over that arm's own T=0 outputs, beside engine τ."""
    out: dict = {}
    done: dict = {}  # (drafter, suite, outputs) -> result: arms sharing a drafter (dflash-pld, dflash-ref) reuse it
    for name, arm in arms.items():
        if not arm.speculative or arm.drafter is None:
            continue
        paths = ("train", "infer") if hasattr(arm.drafter, "forward_train") else ("infer",)
        per_suite = {}
        for suite in suites:
            seqs = [(pr, tk) for r in runs if r.arm == name and r.suite == suite and r.temperature == 0.0 and not r.sweep
                    for pr, tk in zip(r.prompts, r.result.tokens)]
            if not seqs:
                continue
            key = (id(arm.drafter), suite, str(seqs))
            if key not in done:
                done[key] = simulated_tau(target, arm.drafter, seqs, cfg.simulated_anchor_stride, paths)
            sim = dict(done[key])
            sim["engine_tau_t0"] = detail["suites"].get(suite, {}).get("t0", {}).get(name, {}).get("tau")
            per_suite[suite] = sim
        out[name] = per_suite
        vals = [s.get(paths[0]) for s in per_suite.values() if s.get(paths[0]) is not None]
        if vals and name in detail["summary"]:
            detail["summary"][name]["simulated_tau_t0"] = sum(vals) / len(vals)
    return out


def drafter_info(drafter) -> dict:
    arch = getattr(drafter, "arch", None)
    if arch is None:
        return {"block_size": drafter.block_size}
    return {"block_size": arch.block_size, "layers": arch.num_layers, "taps": list(arch.target_layer_ids),
            "draft_vocab_size": arch.draft_vocab_size}
