"""The benchmark stage in the plan's time model: its decodes as the runner enumerates them (`benchmark_runs`), one
round's FLOPs, bytes and dispatched ops per arm (`round_terms`, `round_seconds`), and the stage's row (`benchmark`).
"""
from __future__ import annotations

import math

from draftlab.config import Params
from draftlab.plan import dispatch as D
from draftlab.plan import memory as M
from draftlab.plan.arch import DrafterShape, TargetShape, drafter_shape
from draftlab.plan.model import Device, Stage, dtype_bytes, hours, val_batch_s
from draftlab.plan.suites import suite_size


def _tau(arm: str, dev: Device) -> float:
    return 1.0 if D.round_step(arm) == "ar_step" else dev.tau


def _width(arm: str, d: DrafterShape, p: Params) -> int:
    """Positions one round of `arm` sends through the target per stream: 1 for AR, the verified block otherwise."""
    step = D.round_step(arm, D.corrector_arms(p))
    return 1 if step == "ar_step" else (p.pld.num_tokens + 1 if step == "pld_round" else d.block_size)


def benchmark_runs(p: Params) -> tuple[list[tuple[str, int, int, float]], dict[str, int], list[str]]:
    """The benchmark's decodes as the runner enumerates them (`draftlab.bench.runner.groups`): (arm, generations,
    streams each, new tokens each); the prompts per suite it draws from (counted by the loader,
    `draftlab.plan.suites`), and notes."""
    b = p.benchmark
    sizes = {s: suite_size(s, p.data, p.reference) for s in b.suites}
    avail = {s: n if n is not None else p.reference.num_heldout_prompts for s, (n, _) in sizes.items()}
    notes = [f"suite {s}: {n if n is not None else avail[s]} prompts ({how}"
             + (", reference.num_heldout_prompts assumed)" if n is None else ")") for s, (n, how) in sizes.items()
             if how != "loader" or not b.prompts_per_suite]
    head = {s: min(b.prompts_per_suite, m) if b.prompts_per_suite else m for s, m in avail.items()}
    take = lambda k, s: min(k, avail[s]) if k else avail[s]  # noqa: E731
    N, Nc, B = b.max_new_tokens, b.concurrency_max_new_tokens, b.batch_size
    runs: list[tuple[str, int, int, float]] = []

    def add(arm: str, n: int, tokens: float = N) -> None:
        if n:
            runs.append((arm, math.ceil(n / B), min(n, B), tokens))

    for arm in b.running_arms():  # T=0: the headline sample, a pair's extra prompts, or the ablation sample
        for s in b.suites:
            add(arm, take(b.t0_prompts(arm), s))
    for temp in b.temperatures:
        if temp > 0:  # the sampled arms on the first sampled_prompts_per_suite of the headline sample
            for arm in (b.sampled_arms or b.running_arms()):
                for s in b.suites:
                    n = min(b.sampled_prompts_per_suite or head[s], head[s])
                    add(arm, min(n, b.ablation_prompts_per_suite or n) if arm in b.ablation_arms else n)
    for arm in [a for a in b.running_arms() if not b.concurrency_arms or a in b.concurrency_arms]:
        for c in b.concurrency:
            runs.append((arm, math.ceil(max(c, b.concurrency_prompts) / c) * len(b.concurrency_temperatures), c, Nc))
    if b.warmup:
        runs += [(arm, 1, 1, 4) for arm in b.running_arms()]
    return runs, avail, notes


def round_terms(p: Params, t: TargetShape, dev: Device, arm: str, streams: int = 1) -> tuple[float, float, float]:
    """(FLOPs, bytes, dispatched ops) of one decode round of benchmark arm `arm` over `streams` streams: every
    stream's verified positions through the target (and, for a drafter arm, the block through the drafter and its
    head), the weights read once, the round's counted ops (`draftlab.plan.dispatch`)."""
    d, tb = drafter_shape(t, p.drafter), dtype_bytes(dev)[0]
    step = D.round_step(arm, D.corrector_arms(p))
    drafted = step not in ("ar_step", "pld_round")
    flops = streams * (_width(arm, d, p) * 2 * t.params()
                       + (d.block_size * 2 * (d.params() + d.hidden * d.draft_vocab) if drafted else 0))
    nbytes = M.target_weights(t, tb) + (d.params() * tb if drafted else 0)
    return flops, nbytes, D.ops(step, t.num_layers, d.num_layers)


def round_seconds(p: Params, t: TargetShape, dev: Device, arm: str, streams: int = 1) -> float:
    """The time model's seconds for one round of `arm` (`round_terms`)."""
    f, b, o = round_terms(p, t, dev, arm, streams)
    return dev.flop_s(f) + b / (dev.bandwidth * 1e9) + dev.dispatch_s(o)


def benchmark(p: Params, t: TargetShape, dev: Device) -> Stage:
    b, tb = p.benchmark, dtype_bytes(dev)[0]
    d = drafter_shape(t, p.drafter)
    runs, avail, notes = benchmark_runs(p)
    fill = dev.fill
    P = p.data.max_prompt_tokens * dev.pfill
    tokens = sum(g * s * n * fill for _, g, s, n in runs)
    rounds = flops = nbytes = ops = 0.0
    for a, g, s, n in runs:  # each generation: its prompts' prefill, then n x fill / tau rounds of its streams
        r = g * n * fill / _tau(a, dev)
        rf, rb, ro = round_terms(p, t, dev, a, s)
        rounds += r
        flops += g * s * P * 2 * t.params() + r * rf
        nbytes += r * rb
        ops += g * D.ops("prefill", t.num_layers) + r * ro
    times = {"FLOPs": dev.flop_s(flops), "bytes": nbytes / (dev.bandwidth * 1e9), "dispatch": dev.dispatch_s(ops)}
    spec = [a for a in b.running_arms() if D.round_step(a) not in ("ar_step", "pld_round")]
    if b.simulated:  # each drafter arm's teacher-forced τ over its T=0 outputs: about one validation batch a suite
        times["simulated tau"] = len(spec) * len(b.suites) * val_batch_s(
            p, t, d, dev, b.batch_size, int(P + b.max_new_tokens * fill),
            b.simulated_anchor_stride)
    kd = t.kv_heads * t.head_dim
    top = max(b.concurrency or [1])
    mem = {"target weights": M.target_weights(t, tb), "drafter weights": d.params() * tb,
           f"KV cache at {top} streams": top * (p.data.max_prompt_tokens + b.max_new_tokens) * t.num_layers * 2 * kd * tb,
           f"verify logits [{top}, S, V]": top * d.block_size * t.vocab * 4}
    notes.append(f"{sum(g for _, g, _, _ in runs)} generations, ~{rounds:.0f} rounds (tau {dev.tau:g} for the "
                 f"speculative arms)")
    return Stage("benchmark", tokens, flops, hours(times), f"{top} streams", mem, {}, notes,
                 key="benchmark.concurrency", times=times)
