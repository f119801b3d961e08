"""Section `compiled` (the last one, after every eager figure is written): the compiled engine measured on the device
before anything trusts it (`engine.compile: auto` stays eager until this section has passed on an accelerator).

AR and one DFlash arm (the paper's drafter) at ONE batch size, every step compiled under the run's declared shapes
(`decoding.shapes`): 4 graphs (the AR step, the verify pass of a block with the drafter's taps, the drafter's context
and block passes), at most 8. The backend: dynamo's `cudagraphs` (the eager step's own kernels captured as a CUDA
graph: quick to compile, bitwise the eager arithmetic) unless `--compile-backend` says `inductor` (mode
`reduce-overhead`: fused kernels, minutes of codegen at 8B); which ran is recorded. Before compiling, the predicted
compile seconds (graphs × seconds per graph of that backend, `COMPILE_S_PER_GRAPH`) are set against the time left:
the section skips with one line when they do not fit. It reports:
- greedy identity: the compiled arms' tokens against the eager arms' on the same prompts (a bf16 divergence judged
  a near-tie as the engine section judges it);
- the compiled AR step and DFlash round (median and p20 of rounds) beside the eager ones, and the AR step against
  the bandwidth floor (`gates.floor_report`, with the concurrency section's copy bandwidth when it measured one);
- the compile seconds per step (apart from every timing) and inductor's CUDA-graph fallbacks: any fallback fails the
  section (`compiling.cudagraph_skips`: a silent eager step makes every timing a mixture).
In --dry (CPU) the same code runs with the `eager` backend under the CPU emulation of CUDA graphs' memory rule
(`compiling.emulate_graph_memory`).
"""
from __future__ import annotations

import time

from draftlab.checks.common import Ctx, one_line, round_tree, sync
from draftlab.checks.engine import compare_streams
from draftlab.checks.gates import floor_report, kv_bytes, measure_copy_gbps
from draftlab.checks.models import build_drafter, paper_target, random_prompts
from draftlab.checks.timing import summarize, rounds_of
from draftlab.markdown import markdown_table

MAX_GRAPHS = 8
# predicted compile seconds per graph at the paper's shape (a 36-layer 8B target's step): conservative figures for
# planning the section's time, not measurements (the section records what it took)
COMPILE_S_PER_GRAPH = {"cudagraphs": 15.0, "inductor": 60.0, "eager": 2.0}


def section_compiled(ctx: Ctx) -> dict:
    import torch

    from draftlab.compiling import cudagraph_skips, emulate_graph_memory
    from draftlab.decoding import SpeculativeEngine, generate_ar
    from draftlab.decoding.shapes import Part, declare, plan_graphs, prepare_run

    sz, dev = ctx.size, ctx.dev
    backend = "eager" if dev.type != "cuda" else ("inductor" if ctx.compile_backend == "inductor" else "cudagraphs")
    target = paper_target(ctx)
    S = sz["drafter"]["block_size"]
    drafter = build_drafter(target, S, sz["drafter"]["num_layers"], target.dtype)
    streams = min(ctx.streams) if ctx.streams else 1
    lens = [sz["prompt_tokens"] * 3 // 4 + (sz["prompt_tokens"] // 2) * i // 7 for i in range(8)]
    prompts = random_prompts(streams, lens, target.vocab_size, seed=300)
    new = sz["new_tokens"]
    shapes = declare(max(map(len, prompts)), new, S, [streams])

    res = {"backend": backend, "streams": streams, "new_tokens": new, "block_size": S,
           "shapes": {"capacity": shapes.capacity, "batches": list(shapes.batches), "widths": list(shapes.widths)},
           "notes": [], "errors": []}
    # the plan before anything compiles: the AR step, the verify of a full block with taps, the drafter's passes
    step_backend = None if backend == "inductor" else backend  # None: the project's reduce-overhead on CUDA
    drafter.compile_steps("on", step_backend)
    try:
        plan = plan_graphs(shapes, [(None, streams, 0.0), (_spec(drafter), streams, 0.0)], target)
    finally:
        drafter.compile_steps("off")
    res["graphs_planned"] = plan.total
    predicted = plan.total * COMPILE_S_PER_GRAPH[backend] * (0.05 if ctx.dry else 1.0)
    res["predicted_compile_s"] = predicted
    if plan.total > MAX_GRAPHS:
        return {**res, "status": "error", "error": f"the section plans {plan.total} graphs, more than {MAX_GRAPHS}"}
    # eager first: the reference tokens and times
    eager = _decode_pair(target, drafter, prompts, new, generate_ar, SpeculativeEngine, ctx)
    res["eager"] = eager["times"]
    if predicted + 2 * eager["seconds"] > ctx.left():
        res["notes"].append(f"skipped: compiling {plan.total} graphs with {backend} is predicted at {predicted:.0f} s "
                            f"and the decodes at {2 * eager['seconds']:.0f} s; {ctx.left():.0f} s are left")
        return round_tree({**res, "status": "skipped", "error": res["notes"][-1]})
    memory = emulate_graph_memory(True) if dev.type != "cuda" else None
    skips0 = cudagraph_skips()
    try:
        target.compile_steps("on", backend=step_backend)
        drafter.compile_steps("on", step_backend)
        t0 = time.perf_counter()
        record = prepare_run(target, shapes, [(None, streams, 0.0), (_spec(drafter), streams, 0.0)], MAX_GRAPHS)
        sync(dev)
        res["compile_s"] = record["compile_s"]
        res["compile_total_s"] = time.perf_counter() - t0
        res["graphs"] = record["graphs"]
        res["recompile_limit"] = record["recompile_limit"]
        compiled = _decode_pair(target, drafter, prompts, new, generate_ar, SpeculativeEngine, ctx)
        res["compiled"] = compiled["times"]
    except Exception as e:  # noqa: BLE001 (recorded: the section fails, the eager figures stand)
        res["errors"].append(one_line(e))
        compiled = None
    finally:
        target.compile_steps("off")
        drafter.compile_steps("off")
        if memory is not None:
            emulate_graph_memory(False)
    res["cudagraph_skips"] = cudagraph_skips() - skips0
    if compiled is not None:
        res["identity"] = {arm: compare_streams(target, prompts, eager["tokens"][arm], compiled["tokens"][arm],
                                                target.dtype) for arm in ("ar", "dflash")}
        c, e = compiled["times"], eager["times"]
        res["ar_step_ratio"] = (c["ar"]["round_median_ms"] / e["ar"]["round_median_ms"]) if e["ar"]["round_median_ms"] \
            else None
        gbps = (ctx.cache.get("copy_gbps") or (measure_copy_gbps(dev, int(sz["copy_gib"] * 2 ** 30))
                                               if dev.type == "cuda" else None))
        if gbps:
            info = ctx.cache["target_info"]
            kv = kv_bytes(info["num_layers"], info["kv_heads"], info["head_dim"],
                          sum(map(len, prompts)) + streams * new // 2, 2)
            res["ar_step_over_floor"] = floor_report(c["ar"]["round_median_ms"], info["weight_bytes"], kv, gbps,
                                                     ctx.cache.get("device_name", str(dev)))
    bad = bool(res["errors"]) or res["cudagraph_skips"] > 0 or not all(
        v["ok"] for v in res.get("identity", {}).values())
    if res["cudagraph_skips"]:
        res["notes"].append(f"{res['cudagraph_skips']} compiled function(s) fell back from CUDA graphs: the compiled "
                            "timings are a mixture of replays and eager steps")
    res["status"] = "failed" if bad else "ok"
    del drafter
    return round_tree(res)


def _spec(drafter):
    """An arm as `decoding.shapes.parts` reads one: the drafter and its own proposal (a full block)."""
    from draftlab.decoding.api import DrafterProposal

    class Arm:
        speculative = True

    a = Arm()
    a.drafter, a.proposer = drafter, DrafterProposal()
    return a


def _decode_pair(target, drafter, prompts, new, generate_ar, SpeculativeEngine, ctx) -> dict:
    """AR and DFlash greedy on `prompts`: one untimed decode each (warm: plans, allocations), then two timed; ->
    tokens, per-arm round summaries (median / p20 ms), seconds taken."""
    t0 = time.perf_counter()
    out = {"tokens": {}, "times": {}}
    runs = {"ar": lambda: generate_ar(target, prompts, new, eos_ids=[]),
            "dflash": lambda: SpeculativeEngine(target, drafter).generate(prompts, new, eos_ids=[])}
    for arm, fn in runs.items():
        out["tokens"][arm] = fn().tokens
        timed = [fn() for _ in range(2)]
        sync(ctx.dev)
        out["times"][arm] = summarize([rounds_of(r) for r in timed])
    out["seconds"] = time.perf_counter() - t0
    return out


def render_compiled(c: dict) -> list[str]:
    lines = [f"\n#### The compiled engine ({c.get('backend')}, {c.get('streams')} stream(s), block {c.get('block_size')}) "
             f"— **{c.get('status')}**", ""]
    if c.get("status") == "skipped":
        return lines + [str(c.get("error"))]
    lines.append(f"Graphs {c.get('graphs')} (planned {c.get('graphs_planned')}; predicted compile "
                 f"{c.get('predicted_compile_s')} s, took {c.get('compile_total_s')} s: {c.get('compile_s')}); "
                 f"CUDA-graph fallbacks: {c.get('cudagraph_skips')}.")
    ident = c.get("identity") or {}
    if ident:
        lines.append("Greedy compiled vs eager: " + ", ".join(
            f"{a} {'identical' if v['identical'] else ('near-ties only' if v['ok'] else '**diverged**')}"
            for a, v in ident.items()) + ".")
    e, k = c.get("eager") or {}, c.get("compiled") or {}
    if e and k:
        lines += [""] + markdown_table(
            ["arm", "eager round ms (median / p20)", "compiled round ms (median / p20)"],
            [[arm, f"{e[arm]['round_median_ms']} / {e[arm]['round_p20_ms']}",
              f"{k[arm]['round_median_ms']} / {k[arm]['round_p20_ms']}"] for arm in ("ar", "dflash")])
    fl = c.get("ar_step_over_floor")
    if fl:
        lines.append(f"\nCompiled AR step ÷ bandwidth floor: **{fl.get('value')}**"
                     + ("" if fl.get("valid") else f" (not valid: {fl.get('why')})") + ".")
    for n in c.get("notes") or []:
        lines.append(f"\n{n}")
    for err in c.get("errors") or []:
        lines.append(f"\nError: {err}")
    return lines
