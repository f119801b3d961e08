"""The cost plan of a composition: per stage, tokens processed, FLOPs, estimated time, the largest step's peak
device memory (`draftlab.plan.memory`) and disk, from the params and the target's shape alone (no weights).

Time model, one for every stage (stated in every plan's output, `Device.assumptions`), in seconds per named term
(`Stage.times`): FLOPs term + bytes term + dispatch term.
- FLOPs: a stage's FLOPs over `gpus × tflops × eff` for the training stages (data-parallel over every GPU, perfect
  scaling assumed), over one GPU for the reference and benchmark stages (one process today);
- bytes: the decode phases read the weights (and the KV cache) once per step at `bandwidth`;
- dispatch: an eager run's host cost, the aten ops of each step (`draftlab.plan.dispatch`: counted with a
  TorchDispatchMode at the commit named in dispatch_counts.json) × the device's cost per op (`Device.per_op_us`;
  15 µs on the accelerator; the cpu preset's is fitted, `PRESETS`).
The terms add up (no overlap of host and device assumed: an upper bound). A training stage under a minute budget
takes its budget (`BUDGET_TERM`) when its steps would take longer; its validations are their own term (batches ×
(ops + FLOPs)). Lengths: every response at its `max_new_tokens` times `fill`, every prompt at `data.max_prompt_tokens`
times `prompt_fill` (default: `fill`; 1 = the upper bound). Not counted: loading models, Python start-up, compilation, the stages' reports.
"""
from __future__ import annotations

import math

from draftlab.config import Params
from draftlab.errors import ConfigError
from draftlab.plan import dispatch as D
from draftlab.plan import memory as M
from draftlab.plan.arch import TargetShape, drafter_shape
from draftlab.plan.bench_time import benchmark, benchmark_runs, round_seconds  # noqa: F401 (re-exported)
# the time model's vocabulary, re-exported: this module is the plan's face
from draftlab.plan.model import (  # noqa: F401
    BUDGET_TERM, GiB, PRESETS, Device, Stage, drafter_flops, dtype_bytes, hours, target_flops, val_batch_s)
from draftlab.plan.suites import suite_size

# the GGUF loader de-quantises every tensor on the CPU: 16-21 s for SmolLM2-135M's 134.5M parameters on the
# project's machines (ENVIRONMENT.md): the prepare_target stage of a packaged GGUF target
TOY_STEP_S = 0.32  # the toy target's seconds per training step: the frozen world's 1,140 s / 3,569 steps (2 cores)
DEQUANT_S_PER_PARAM = 18.5 / 134.5e6





# ---- the stages -------------------------------------------------------------------------------------------


def _local(batch: int, dev: Device) -> int:
    """A training step's sequences on one device: the global batch split over the GPUs' ranks (DDP)."""
    return math.ceil(batch / dev.gpus)


def _of(batch: int, dev: Device) -> str:
    return f" per device of {batch}" if dev.gpus > 1 else ""


def _steps(epochs: float, max_steps: int, n_seq: int, batch: int) -> int:
    budgets = [s for s in (max_steps, math.ceil(epochs * n_seq / batch) if epochs else 0) if s]
    return min(budgets) if budgets else 0


def _L(p: Params, dev: Device) -> int:
    """A reference sequence's length: its prompt and its response at their fills of the configured maxima."""
    return int(p.data.max_prompt_tokens * dev.pfill + p.reference.max_new_tokens * dev.fill)


def _train_time(step_s: float, steps: int, minutes: float) -> tuple[float, bool, list[str]]:
    """(seconds, capped by the minute budget, notes) of a training run of `steps` steps (0 = none: the minute budget
    alone stops it) at `step_s` seconds a step, stopped by `minutes` of training time (0 = none)."""
    budget = minutes * 60
    if not steps:
        if not budget:
            return 0.0, False, ["no step, epoch or minute budget: training time unknown"]
        return budget, True, []
    need = steps * step_s
    if budget and need > budget:
        return budget, True, [f"capped by its max_minutes={minutes:g} ({steps} steps need {need / 60:.1f} min)"]
    return need, False, []


def _val_batches(p: Params, batch: int) -> int:
    """Batches of one validation of the drafter trainer: the held-out references, each eval suite's, and the 16
    training sequences it samples (training.data.DrafterDataModule), `batch` sequences a batch."""
    sets = [p.reference.num_heldout_prompts, *[p.reference.num_eval_per_suite] * len(p.data.eval_suites), 16]
    return sum(math.ceil(n / batch) for n in sets if n)



def reference(p: Params, t: TargetShape, dev: Device) -> Stage:
    r, tb = p.reference, dtype_bytes(dev)[0]
    evals = [min(r.num_eval_per_suite, suite_size(s, p.data, r)[0] or r.num_eval_per_suite) for s in p.data.eval_suites]
    prompts = r.num_train_prompts + r.num_heldout_prompts + sum(evals)
    P, N = p.data.max_prompt_tokens * dev.pfill, r.max_new_tokens * dev.fill
    # the engine's K/V is a static buffer of the batch's longest prompt + max_new_tokens slots (verifier.streams):
    # every decode step attends over (and reads) all of it, masked
    cap = P + r.max_new_tokens
    flops = target_flops(t, prompts * P, P / 2, head=False) + target_flops(t, prompts * N, cap)
    batches = math.ceil(prompts / r.batch_size)
    steps = batches * N  # decode steps, each reading the weights and the KV cache
    # ... at the K/V heads' width on cuda (fused attention reads them as they are); with the split attention of the
    # CPU, grouped K/V heads are read at every query head's width (heads / kv_heads times the buffer)
    kv = r.batch_size * cap * t.num_layers * 2 * (t.kv_heads if dtype_bytes(dev)[2] else t.heads) * t.head_dim * tb
    times = {"FLOPs": dev.flop_s(flops), "bytes": steps * (M.target_weights(t, tb) + kv) / (dev.bandwidth * 1e9),
             "dispatch": dev.dispatch_s(batches * (D.ops("prefill", t.num_layers) + N * D.ops("ar_step", t.num_layers)))}
    mem = M.reference_step(t, r.batch_size, p.data.max_prompt_tokens, r.max_new_tokens, tb, dtype_bytes(dev)[2])
    disk = {"references (token ids, int32)": prompts * (P + N) * 4}
    return Stage("reference", prompts * (P + N), flops, hours(times), f"batch {r.batch_size} at full length", mem, disk,
                 [f"{batches} batches x {N:g} decode steps"], key="reference.batch_size", times=times)


def _pretrain_stage(name: str, p: Params, pc, dc, t: TargetShape, dev: Device, prefix: str = "pretrain",
                    cache_reused: bool = False) -> Stage:
    tb, ab, fused = dtype_bytes(dev)
    d = drafter_shape(t, dc)
    n_seq = p.reference.num_train_prompts
    L = _L(p, dev)
    steps = _steps(pc.epochs, pc.max_steps, n_seq, pc.batch_size)
    greedy = pc.labels == "greedy"
    rows = pc.batch_size * pc.anchors_per_seq * (d.block_size - 1)
    per_step = drafter_flops(d, pc.batch_size, L, pc.anchors_per_seq, rows, pc.chunk_rows > 0)
    notes, disk = [], {}
    if pc.cache_features:  # one full pass over the references (training + held-out), then the steps read the cache
        cached = n_seq + p.reference.num_heldout_prompts
        cache = 0.0 if cache_reused else target_flops(t, cached * L, L / 2)
        cache_ops = 0.0 if cache_reused else math.ceil(cached * L / pc.feature_batch_tokens) * D.ops("prefill", t.num_layers)
        flops_step, target_layers = per_step, 0
        disk[f"feature cache ({d.n_taps} taps, fp16)"] = cached * L * d.n_taps * t.hidden * 2
        if cache_reused:
            notes.append("the feature cache is the plain drafter's (same data and taps): not computed again")
    else:
        cache, cache_ops, layers = 0.0, 0.0, None if greedy else d.deepest_tap + 1
        flops_step = per_step + target_flops(t, pc.batch_size * L, L / 2, layers, head=greedy)
        target_layers = t.num_layers if layers is None else layers
    chunks = math.ceil(rows / pc.chunk_rows) if pc.chunk_rows else 1
    step_s = dev.flop_s(flops_step, dev.gpus) + dev.dispatch_s(D.ops("pretrain_step", target_layers, d.num_layers, chunks))
    train_s, capped, cap = _train_time(step_s, steps, pc.max_minutes)
    done = steps if not capped else int(train_s / max(step_s, 1e-9))
    vals = (done // pc.val_every if pc.val_every else 0) + 1
    times = {"feature cache": dev.flop_s(cache) + dev.dispatch_s(cache_ops)} if cache else {}
    times[BUDGET_TERM if capped else "steps"] = train_s
    times["validation"] = vals * _val_batches(p, pc.batch_size) * val_batch_s(p, t, d, dev, pc.batch_size, L,
                                                                                pc.val_anchor_stride, pc.cache_features)
    flops = cache + done * flops_step
    disk["checkpoints (weights + resumable state)"] = d.params() * (4 + 12)
    mem = {**M.pretrain_step(t, d, _local(pc.batch_size, dev), L, pc.anchors_per_seq, pc.chunk_rows, tb, ab, fused,
                             greedy, pc.kd_weight > 0), **M.ddp_buckets(d.params(), dev.gpus)}
    notes.append(f"~{done} steps of {step_s * 1e3:.0f} ms, {vals} validations")
    return Stage(name, done * pc.batch_size * (L + pc.anchors_per_seq * d.block_size), flops, hours(times),
                 f"{steps or done} steps; step B={_local(pc.batch_size, dev)}{_of(pc.batch_size, dev)}, A={pc.anchors_per_seq}, S={d.block_size}, L={L}", mem, disk,
                 notes + cap, key=f"{prefix}.chunk_rows" if not pc.chunk_rows else f"{prefix}.batch_size", times=times)


def specopd(p: Params, t: TargetShape, dev: Device) -> Stage:
    s, tb, (_, ab, fused) = p.specopd, dtype_bytes(dev)[0], dtype_bytes(dev)
    dc = p.seeded.resolve(p.drafter, p.pretrain)[0] if p.seeded.enabled and p.seeded.methods else p.drafter
    d = drafter_shape(t, dc)
    W = s.branch_width or d.block_size - 1
    L = _L(p, dev)
    B, A = s.batch_size, s.anchors_per_seq
    rows = B * A * W
    step = (target_flops(t, B * L, L / 2, head=False) + drafter_flops(d, B, L, A, rows, s.chunk_rows > 0)
            + target_flops(t, B * A * (W - 1), L, head=False) + rows * 2 * t.hidden * t.vocab)
    chunks = math.ceil(rows / s.chunk_rows) if s.chunk_rows else 1
    ops_step = D.ops("specopd_step", t.num_layers, d.num_layers, chunks)
    objectives = {"specopd": s.max_steps, **{b: s.baseline_max_steps or s.max_steps for b in s.baselines}}
    flops, times, notes = 0.0, {}, []
    val_one = _val_batches(p, B) * val_batch_s(p, t, d, dev, B, L, s.val_anchor_stride, s.cache_features)
    for name, n in objectives.items():  # the sequential loop: seq_rounds dependent rounds of the same rows
        f = s.seq_rounds * W / max(A, 1) if name == "sequential" else 1
        step_s = dev.flop_s(step * f, dev.gpus) + dev.dispatch_s(ops_step * f)
        train_s, capped, cap = _train_time(step_s, n, s.max_minutes)
        done = n if not capped else int(train_s / max(step_s, 1e-9))
        flops += done * step * f
        key = BUDGET_TERM if capped else "steps"
        times[key] = times.get(key, 0.0) + train_s
        vals = (done // s.val_every if s.val_every else 0) + 1 + (name == "specopd")  # + validate_first
        times["validation"] = times.get("validation", 0.0) + vals * val_one
        notes += [f"{name}: ~{done} updates of {step_s * 1e3:.0f} ms, {vals} validations"] + [f"{name}: {c}" for c in cap]
    train = {**M.specopd_step(t, d, _local(B, dev), L, A, W, s.chunk_rows, s.vocab_chunk, tb, ab, fused, grad=True),
             **M.ddp_buckets(d.params(), dev.gpus)}
    evals = M.specopd_step(t, d, B, L, A, W, s.chunk_rows, s.vocab_chunk, tb, ab, fused, grad=False)
    which, mem = ((f"update: B={_local(B, dev)}{_of(B, dev)}", train) if M.total(train) >= M.total(evals)
                  else (f"T=1 evaluation: B={B}", evals))
    notes.insert(0, f"update at B={_local(B, dev)}: {M.total(train) / GiB:.1f} GiB; T=1 evaluation at B={B} (no "
                    f"gradients): {M.total(evals) / GiB:.1f} GiB")
    if "sequential" in s.baselines:  # its rollout records p logits [B, R, W, V] (not chunked)
        seq = B * s.seq_rounds * W * t.vocab * 4
        notes.append(f"the sequential arm's rollout also keeps p logits [B, R, W, V] = {seq / GiB:.1f} GiB")
    disk = {"checkpoints (one per objective)": len(objectives) * d.params() * (4 + 12)}
    if s.cache_features:
        disk["feature cache (fp16)"] = p.reference.num_train_prompts * L * d.n_taps * t.hidden * 2
    key = "specopd.chunk_rows" if not s.chunk_rows else ("specopd.vocab_chunk" if not s.vocab_chunk
                                                          else "specopd.batch_size")
    return Stage("specopd", sum(objectives.values()) * B * (L + A * (d.block_size + W - 1)), flops, hours(times),
                 f"{which}, A={A}, W={W}, L={L}, chunk_rows={s.chunk_rows}, vocab_chunk={s.vocab_chunk}", mem,
                 disk, notes, key=key, times=times)


def corrector_families(c) -> dict:
    """variant -> its family's record (draftlab.corrector.family.Family), from the records the corrector section was
    checked against (the caller hands them in: draftlab.pipeline.names.method_names(); this layer imports no method)."""
    if c.records is None:
        raise ConfigError("the plan of the corrector stage needs the corrector family records: load the params with "
                          "names=draftlab.pipeline.names.method_names() (as draftlab plan and the stages do)")
    return {v.name: f for f in c.records.values() for v in f.variants}


def corrector_cost(t: TargetShape, d, c, variant: str):
    """The cost model (`Family.cost`: parameters, activation width per candidate) of `variant`'s family."""
    from types import SimpleNamespace

    f = corrector_families(c)[variant]
    shape = SimpleNamespace(hidden=t.hidden, vocab=t.vocab, draft_vocab=d.draft_vocab, embed_dim=t.hidden, k=c.k,
                            slots=d.block_size - 1)
    return f.cost(f.section(c), shape)


def corrector_params(t: TargetShape, d, c, variant: str) -> int:
    """The trainable parameters of `variant`'s corrector (DCOCO: 2.2M at H=4096, dim=128, hidden=256, the paper's
    2.23M)."""
    return corrector_cost(t, d, c, variant).params


def corrector(p: Params, t: TargetShape, dev: Device) -> Stage:
    c, pc, (tb, ab, fused) = p.corrector, p.pretrain, dtype_bytes(dev)
    d = drafter_shape(t, p.drafter)
    L = _L(p, dev)
    n_seq = p.reference.num_train_prompts
    steps = _steps(c.epochs, c.max_steps, n_seq, c.batch_size)
    rows = c.batch_size * c.anchors_per_seq * (d.block_size - 1)
    step = target_flops(t, c.batch_size * L, L / 2) + drafter_flops(d, c.batch_size, L, c.anchors_per_seq, rows, False)
    # a co-training step's ops: counted as a pretraining step's (the corrector's few ops not counted)
    step_s = dev.flop_s(step, dev.gpus) + dev.dispatch_s(D.ops("pretrain_step", t.num_layers, d.num_layers))
    runs = list(c.variants) + (["dflash-long"] if c.control else [])
    main = c.main_variant
    family = corrector_families(c)
    # the step's memory and the checkpoints are counted at the main variant's corrector
    cost = corrector_cost(t, d, c, main)
    cached = pc.cache_features  # the corrector reads the plain drafter's feature cache
    val_one = _val_batches(p, c.batch_size) * val_batch_s(p, t, d, dev, c.batch_size, L, pc.val_anchor_stride, cached)
    heldout = math.ceil(p.reference.num_heldout_prompts / c.batch_size) * val_batch_s(
        p, t, d, dev, c.batch_size, L, pc.val_anchor_stride, cached)  # one held-out pass (a path rule's evaluation)
    times, notes, done_all = {}, [], 0
    for v in runs:
        # the main variant, the control and the families that train on the main budget (`Family.budget`)
        full = v in (main, "dflash-long") or family[v].budget == "main" or not c.variant_max_minutes
        minutes = c.max_minutes if full else c.variant_max_minutes
        fixed = c.variant_steps.get(main if v == "dflash-long" else v)  # a step budget alone (corrector.variant_steps)
        # the variant's own corrector on each of the step's B·A blocks, forward and backward (~3x): its family's
        # FLOPs (`Cost.flops_per_block`; the control has none)
        own = 0.0 if v == "dflash-long" else 3 * c.batch_size * c.anchors_per_seq * corrector_cost(t, d, c, v).flops_per_block
        v_step_s = step_s + dev.flop_s(own, dev.gpus)
        if fixed:
            train_s, capped, cap = _train_time(v_step_s, int(fixed), 0.0)
        else:
            train_s, capped, cap = _train_time(v_step_s, steps, minutes)
        done = (int(fixed) if fixed else steps) if not capped else int(train_s / max(v_step_s, 1e-9))
        done_all += done
        key = BUDGET_TERM if capped else "steps"
        times[key] = times.get(key, 0.0) + train_s
        vals = (done // c.val_every if c.val_every and v == main else 0) + 1  # the others validate at their end
        times["validation"] = times.get("validation", 0.0) + vals * val_one + 3 * heldout  # + the three path rules
        notes += [f"{v}: ~{done} steps of {v_step_s * 1e3:.0f} ms, {vals} validation{'s' if vals > 1 else ''}"] + \
            [f"{v}: {x}" for x in cap]
    mem = {**M.cotrain_step(t, d, _local(c.batch_size, dev), L, c.anchors_per_seq, c.k, cost.activation_width, tb,
                            ab, fused, cost.params),
           **M.ddp_buckets(d.params() + cost.params, dev.gpus)}
    disk = {"checkpoints (drafter + corrector per run)": len(runs) * (d.params() + cost.params) * 16}
    return Stage("corrector", done_all * c.batch_size * (L + c.anchors_per_seq * d.block_size),
                 done_all * step, hours(times), (f"{len(runs)} runs x {steps} steps" if steps else f"{len(runs)} runs (step budgets)"
                                if all(c.variant_steps.get(main if v == "dflash-long" else v) for v in runs)
                                else f"{len(runs)} runs (minute budgets)") + "; co-training step "
                 f"B={_local(c.batch_size, dev)}{_of(c.batch_size, dev)}, A={c.anchors_per_seq}", mem, disk, notes,
                 key="corrector.batch_size", times=times)



def prepare_target(p: Params, t: TargetShape, dev: Device) -> Stage | None:
    """The packaged GGUF's de-quantisation into a model folder (CPU-bound, on the run's machine); None for the
    targets that need no preparing worth a row (a random model, a local folder, a hub id)."""
    if p.target.source == "toy":  # the world's target is trained in the stage, for its wall-clock or step budget
        from draftlab.toy.train import TrainConfig

        train = p.target.toy.train
        budget = float(train.get("budget_s", TrainConfig.budget_s))
        steps = int(train.get("max_steps", TrainConfig.max_steps))
        by_steps = steps * TOY_STEP_S
        if budget > 0 and budget <= by_steps:
            times, note = {BUDGET_TERM: budget}, (f"the toy target trains for its budget, target.toy.train.budget_s="
                                                  f"{budget:g} (or fewer seconds if it reaches its max_steps first)")
        else:
            times, note = {BUDGET_TERM: by_steps}, (f"the toy target trains for its step budget, target.toy.train."
                                                    f"max_steps={steps} x {TOY_STEP_S} s per step (the frozen world's "
                                                    f"12 x 96 target, batch 32, 2 cores)")
        return Stage("prepare_target", 0.0, 0.0, hours(times), "-", {}, {"target weights (fp32)": t.params() * 4},
                     [note], times=times)
    if p.target.source != "packaged-gguf":
        return None
    times = {"GGUF de-quantisation (CPU)": t.params() * DEQUANT_S_PER_PARAM}
    return Stage("prepare_target", 0.0, 0.0, hours(times), "-", {}, {"target weights (fp32)": t.params() * 4},
                 ["~18.5 s per 134.5M parameters, measured on the project's CPUs"], times=times)


def plan(p: Params, t: TargetShape, dev: Device) -> list[Stage]:
    """Every stage the composition runs, in pipeline order."""
    stages = [x for x in (prepare_target(p, t, dev),) if x is not None]
    stages += [reference(p, t, dev), _pretrain_stage("pretrain_drafter", p, p.pretrain, p.drafter, t, dev)]
    if p.seeded.enabled:
        dc, pc = p.seeded.resolve(p.drafter, p.pretrain)
        same_taps = drafter_shape(t, dc).n_taps == drafter_shape(t, p.drafter).n_taps and (
            list(dc.target_layer_ids) == list(p.drafter.target_layer_ids))  # the cache is keyed by data + taps
        stages.append(_pretrain_stage("pretrain_seeded", p, pc, dc, t, dev, "seeded.pretrain",
                                      cache_reused=p.pretrain.cache_features and same_taps))
    return stages + [specopd(p, t, dev), corrector(p, t, dev), benchmark(p, t, dev)]


def check_fit(stages: list[Stage], memory_gib: float, free_disk: float | None, where: str = "--gpu-mem") -> list[str]:
    """A one-line ConfigError for the first stage whose step exceeds the device memory or whose feature cache
    exceeds the free disk (bytes; None = not checked), naming the key to change. Returns warnings: the whole
    plan's disk (checkpoints included, written stage after stage) beyond the free disk."""
    for s in stages:
        if s.peak > memory_gib * GiB:
            raise ConfigError(f"{s.name}: its largest step ({s.step}) needs {s.peak / GiB:.1f} GiB, more than the "
                              f"{memory_gib:g} GiB of {where}; lower it with {s.key} (draftlab plan shows the terms)")
    if free_disk is None:
        return []
    for s in stages:
        for what, n in s.disk.items():
            if "cache" in what and n > free_disk:
                section = "specopd" if s.name == "specopd" else "pretrain"
                raise ConfigError(f"{s.name}: its {what} needs {n / GiB:.1f} GiB, more than the {free_disk / GiB:.1f} "
                                  f"GiB free on disk; set {section}.cache_features=false (taps computed in the step)")
    need = sum(sum(s.disk.values()) for s in stages)
    return [f"the plan writes {need / GiB:.1f} GiB (references, caches, checkpoints), more than the "
            f"{free_disk / GiB:.1f} GiB free on disk"] if need > free_disk else []
