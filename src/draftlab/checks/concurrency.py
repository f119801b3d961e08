"""Section `concurrency`: round times of dflash (the plain drafter) and of every registered corrector family
(`draftlab.corrector.families.records()`, each at its record's default settings: `checks.models.build_proposers`)
beside the AR step and the verify pass, at the paper's size (a random target of Qwen3-8B's shape in bf16, the paper's
drafter), at each stream count. A family the check cannot run (its record's k rule rejects the size's k) is skipped
and named in `correctors.skipped` and the notes.

Timed with `checks.timing`: every arm (and every verify width) first decodes the level's prompts untimed, then the
arms are timed in rotated order, median and p20 over the timed rounds, CUDA-event time per phase and, from one
profiled decode per arm, the GPU-busy time of each phase. Sanity gates (`checks.gates`) judge the figures (each
recorded with its value and limit; on an accelerator a failed gate fails the section, in `--dry` it is reported
only), and the AR step at one stream is set against the memory-bandwidth floor measured in the same run. Random
weights: τ≈1, so these are round costs, not speed-ups (no projected tokens/s: a CPU τ times a round time of another
model would mean nothing).
"""
from __future__ import annotations

import time

from draftlab.checks.common import Ctx, one_line, round_tree, sync
from draftlab.checks.gates import floor_report, gate_values, kv_bytes, measure_copy_gbps
from draftlab.checks.models import build_drafter, build_proposers, paper_target, random_prompts
from draftlab.checks.timing import Rounds, gpu_busy, rounds_of, time_arms


def event_rounds(passes, dev) -> Rounds:
    """Time each callable of `passes` as one round of one phase ('pass'): CUDA events on the device, else
    perf_counter (synchronised)."""
    import torch

    ms = []
    for fn in passes:
        if getattr(dev, "type", "cpu") == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            ms.append([a.elapsed_time(b)])
        else:
            t = time.perf_counter()
            fn()
            ms.append([1e3 * (time.perf_counter() - t)])
    return Rounds(("pass",), ms)


def verify_arm(target, prompts, taps, T: int, reps: int):
    """An 'arm' of `reps` target passes of T new tokens per stream after the prompts (the tap layers read, as a
    verify pass reads them), each dropped again: the cost of verifying a block of T (T=1: an AR step's forward)."""
    import torch

    from draftlab.verifier.streams import StreamCache

    sc = StreamCache(target, len(prompts))
    with torch.no_grad():
        sc.prefill(prompts, 0, last_logits_only=True)
    ids = torch.randint(1, target.vocab_size - 1, (len(prompts), T), device=target.device)
    zero = torch.zeros(len(prompts), dtype=torch.long, device=target.device)

    def one():
        with torch.no_grad():
            sc.append(ids, taps=taps)
            sc.commit(zero, T)

    return lambda: event_rounds([one] * reps, target.device)


def level_arms(target, drafter, props, prompts, new_tokens: int, verify_T, reps: int) -> dict:
    """name -> one whole decode of `prompts` (an arm of `checks.timing`): ar, each proposal step, verify<T>."""
    import torch

    from draftlab.decoding.ar import generate_ar
    from draftlab.decoding.speculative import SpeculativeEngine

    def ar():
        with torch.no_grad():
            return rounds_of(generate_ar(target, prompts, new_tokens, eos_ids=[]))

    def spec(step):
        def run():
            with torch.no_grad():
                r = SpeculativeEngine(target, drafter, step).generate(prompts, new_tokens, eos_ids=[])
            run.tau = 1 + sum(a for s in r.accepted for a in s) / max(sum(len(s) for s in r.accepted), 1)
            return rounds_of(r)

        return run

    arms = {"ar": ar, **{name: spec(step) for name, step in props.items()}}
    for T in verify_T:
        arms[f"verify{T}"] = verify_arm(target, prompts, drafter.target_layer_ids, T, reps)
    return arms


def section_concurrency(ctx: Ctx) -> dict:
    import torch

    sz, dev = ctx.size, ctx.dev
    target = paper_target(ctx)
    t0 = time.perf_counter()
    drafter = build_drafter(target, sz["drafter"]["block_size"], sz["drafter"]["num_layers"], target.dtype)
    props, built = build_proposers(target, drafter, sz["corrector_k"], perturb=False)
    mode = "on" if ctx.compiled() else "off"  # eager unless --compile on (the `compiled` section measures it)
    if mode == "on":  # opt-in: every (streams, width) of the sweep is its own graph, undeclared (decoding.shapes)
        from draftlab.compiling import set_recompile_limit

        set_recompile_limit(64)
    compiled = {"target": target.compile_steps(mode), "drafter": drafter.compile_steps(mode),
                **{k: p.compile_steps(mode) for k, p in props.items() if hasattr(p, "compile_steps")}}
    sync(dev)
    info = ctx.cache["target_info"]
    res = {"target": info,
           "drafter": {**sz["drafter"], "taps": drafter.target_layer_ids,
                       "parameters": drafter.num_trainable_parameters(), "build_s": time.perf_counter() - t0},
           "correctors": built, "compiled": compiled,
           "prompt_tokens": f"{sz['prompt_tokens'] * 3 // 4}..{sz['prompt_tokens'] * 5 // 4} (random ids, ragged)",
           "new_tokens": sz["new_tokens"], "temperature": 0.0, "reps": sz["reps"],
           "timing": "each arm warmed on its own prompts first; arms in rotated order; median and p20 of rounds; "
                     "CUDA events per phase; GPU-busy = device time of the kernels each phase launched (profiler)",
           "levels": {}, "skipped_streams": [], "errors": [],
           "notes": [f"skipped corrector family {k}: {why}" for k, why in built["skipped"].items()]}
    copy_gib = sz["copy_gib"]
    try:
        res["copy_gbps"] = ctx.cache["copy_gbps"] = measure_copy_gbps(dev, int(copy_gib * 2 ** 30))
        res["copy_bytes"] = int(copy_gib * 2 ** 30)
    except Exception as e:  # noqa: BLE001
        res["errors"].append({"arm": "copy", "streams": 0, "error": one_line(e)})
    lens = [sz["prompt_tokens"] * 3 // 4 + (sz["prompt_tokens"] // 2) * i // 7 for i in range(8)]
    last_s, prev_n, retimes = None, None, []
    for i, n in enumerate(ctx.streams):
        if last_s is not None:
            est = last_s * max(1.0, n / prev_n)  # conservative: a level costs at most linearly more
            if est > ctx.left():
                res["skipped_streams"] = [m for m in ctx.streams if m >= n]
                res["notes"].append(f"skipped {res['skipped_streams']} streams: about {est:.0f} s needed, "
                                    f"{ctx.left():.0f} s left in the section's budget")
                break
        ts = time.perf_counter()
        prompts = random_prompts(n, lens, target.vocab_size, seed=100 + n)
        try:
            arms = level_arms(target, drafter, props, prompts, sz["new_tokens"], sz["verify_tokens"], sz["verify_reps"])
            # rotate the starting arm across levels too, so no arm is always timed first
            names = list(arms)
            arms = {k: arms[k] for k in names[i % len(names):] + names[:i % len(names)]}
            timing = time_arms(arms, reps=sz["reps"])
        except Exception as e:  # noqa: BLE001
            res["errors"].append({"arm": "level", "streams": n, "error": one_line(e)})
            break
        lvl = {"order": timing["orders"], "arms": {}, "verify_ms": {}, "verify_p20_ms": {}, "retime": timing.get("retime")}
        if timing.get("retime"):
            retimes.append(timing["retime"])
        ar = timing["arms"]["ar"]
        lvl["ar"] = {"step_ms": ar["round_median_ms"], "step_p20_ms": ar["round_p20_ms"], "phase_ms": ar["median_ms"]}
        for T in sz["verify_tokens"]:
            v = timing["arms"][f"verify{T}"]
            lvl["verify_ms"][str(T)] = v["round_median_ms"]
            lvl["verify_p20_ms"][str(T)] = v["round_p20_ms"]
        for name in props:
            a = timing["arms"][name]
            lvl["arms"][name] = {"round_ms": a["median_ms"], "round_p20_ms": a["p20_ms"],
                                 "round_total_ms": a["round_median_ms"], "round_total_p20_ms": a["round_p20_ms"],
                                 "rounds": a["rounds"], "tau": getattr(arms[name], "tau", None),
                                 "break_even_tau": a["round_median_ms"] / ar["round_median_ms"]}
        if dev.type == "cuda" and ctx.left() > 0:
            for name in ("ar", *props):
                try:
                    busy = gpu_busy(arms[name], dev)
                except Exception as e:  # noqa: BLE001
                    res["errors"].append({"arm": f"{name} (profiler)", "streams": n, "error": one_line(e)})
                    continue
                (lvl["ar"] if name == "ar" else lvl["arms"][name])["gpu_busy_ms"] = busy
        v1 = lvl["verify_ms"].get("1")
        lvl["verify_over_T1"] = {k: v / v1 for k, v in lvl["verify_ms"].items()} if v1 else None
        lvl["seconds"] = time.perf_counter() - ts
        if dev.type == "cuda":
            lvl["max_memory_gib"] = torch.cuda.max_memory_allocated(dev) / 2 ** 30
        res["levels"][str(n)] = lvl
        last_s, prev_n = lvl["seconds"], n
    # the AR step at one stream against the bandwidth floor (weights + the KV read at that shape)
    one = res["levels"].get("1") or (next(iter(res["levels"].values())) if res["levels"] else None)
    if one and res.get("copy_gbps"):
        n1 = int(next(k for k, v in res["levels"].items() if v is one))
        t = info
        positions = sum(lens[j % len(lens)] for j in range(n1)) + n1 * sz["new_tokens"] // 2  # mean context per step
        kv = kv_bytes(t["num_layers"], t["kv_heads"], t["head_dim"], positions, 2)
        res["ar_step_over_floor"] = floor_report(one["ar"]["step_ms"], t["weight_bytes"], kv, res["copy_gbps"],
                                                 ctx.cache.get("device_name", str(dev)))
        res["ar_step_over_floor"]["streams"] = n1
    # the gates read p20s (interference from elsewhere only ever adds time: the faster rounds are the device's)
    flat = {k: {"ar_step_ms": v["ar"]["step_p20_ms"], "verify_ms": v["verify_p20_ms"],
                "arms": {a: x["round_total_p20_ms"] for a, x in v["arms"].items()}} for k, v in res["levels"].items()}
    retime = max(retimes, key=lambda r: abs((r.get("ratio") or 1.0) - 1.0)) if retimes else None
    res["sanity_gate_values"] = gate_values(flat, retime, res.get("ar_step_over_floor"))
    res["sanity_gates"] = {k: g["holds"] for k, g in res["sanity_gate_values"].items()}
    del drafter, props
    target.compile_steps("off")  # the later sections share the cached target: eager, as they were written
    bad_gate = [k for k, v in res["sanity_gates"].items() if not v]
    if bad_gate:
        res["notes"].append("sanity gates failed: " + ", ".join(bad_gate) + " (the timings measure something other "
                            "than the device's work: read them as such" + ("; a CPU rehearsal's timings are not a "
                            "device's: reported, not judged)" if ctx.dry else ")"))
    judged = bad_gate if not ctx.dry else []  # the gates judge an accelerator's timings, not a CPU rehearsal's
    res["status"] = "error" if not res["levels"] else (
        "failed" if res["errors"] or judged else ("partial" if res["skipped_streams"] else "ok"))
    return round_tree(res)
