"""The cost plan of a composition: per stage, tokens processed, FLOPs, estimated time, the largest step's peak
device memory (`draftlab.plan.memory`) and disk, from the params and the target's shape alone (no weights).

Time model (stated in every plan's output, `Device.assumptions`): a stage's FLOPs over `gpus × tflops × eff`
for the training stages (data-parallel over every GPU, perfect scaling assumed), over one GPU for the
reference and benchmark stages (one process today); the decode phases are memory-bound instead: one read of
the weights (and the KV cache) per step at `bandwidth`. Lengths: every prompt at `data.max_prompt_tokens` and
every response at its `max_new_tokens`, times `fill` (1 = the upper bound). Validation is not counted.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from draftlab.config import Params
from draftlab.errors import ConfigError, DraftlabError
from draftlab.plan import memory as M
from draftlab.plan.arch import DrafterShape, TargetShape, drafter_shape

GiB = 2 ** 30
# sizes of the packaged evaluation suites (their public definitions), for benchmark.prompts_per_suite=0 (all)
SUITE_PROMPTS = {"mt-bench": 80, "humaneval": 164, "math500": 500}


@dataclass(frozen=True)
class Device:
    kind: str = "cuda"  # cuda | cpu: bf16 weights and fused attention on cuda, fp32 and split attention on cpu
    gpus: int = 1
    tflops: float = 989.0  # dense bf16 TFLOP/s per device (H100 SXM)
    efficiency: float = 0.4  # achieved / peak FLOP/s
    bandwidth: float = 3350.0  # GB/s of device memory (decode phases)
    memory_gib: float = 80.0
    fill: float = 1.0  # mean sequence length / the configured maximum
    tau: float = 3.0  # committed tokens per round in the benchmark's speculative arms

    def check(self) -> None:
        """One line naming the `draftlab plan` flag of an impossible value (a zero or negative count, rate or size)."""
        rules = (("--gpus", self.gpus, self.gpus >= 1, "a whole number of devices >= 1"),
                 ("--tflops", self.tflops, self.tflops > 0, "the device's peak TFLOP/s, > 0 (e.g. 989 for an H100)"),
                 ("--efficiency", self.efficiency, 0 < self.efficiency <= 1, "achieved / peak FLOP/s, in (0, 1]"),
                 ("--bandwidth", self.bandwidth, self.bandwidth > 0, "the device's memory bandwidth in GB/s, > 0"),
                 ("--gpu-mem", self.memory_gib, self.memory_gib > 0, "GiB of memory per device, > 0 (e.g. 80)"),
                 ("--fill", self.fill, 0 < self.fill <= 1, "mean length / configured maximum, in (0, 1]"),
                 ("--tau", self.tau, self.tau >= 1, "tokens committed per round, >= 1"))
        for flag, value, ok, what in rules:
            if not ok or (isinstance(value, float) and not math.isfinite(value)):
                raise DraftlabError(f"{flag} {value:g} is not possible: give {what}")

    def assumptions(self) -> str:
        return (f"time = FLOPs / ({self.gpus} GPU x {self.tflops:g} TFLOP/s x {self.efficiency:g} efficiency) for the "
                f"training stages (data-parallel, perfect scaling); reference and benchmark on 1 GPU, decode "
                f"memory-bound at {self.bandwidth:g} GB/s (benchmark: tau={self.tau:g} tokens per round); lengths = "
                f"the configured maxima x fill {self.fill:g}; validation not counted; memory = the largest step on one "
                f"device, a training step at its batch split over the {self.gpus} GPUs' ranks"
                f"{' with DDP gradient buckets' if self.gpus > 1 else ''}, the T=1 evaluation at the "
                f"whole batch ({'bf16 weights, fused attention' if self.kind == 'cuda' else 'fp32, split attention'})")


@dataclass
class Stage:
    name: str
    tokens: float  # tokens through the target (reference: generated + prompt; training: target + block rows)
    flops: float
    hours: float
    step: str  # which step is the largest
    memory: dict[str, float]  # its terms (bytes)
    disk: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    key: str = ""  # the key that sizes the largest step (named when it does not fit)

    @property
    def peak(self) -> int:
        return M.total(self.memory)

    def to_dict(self) -> dict:
        return {"stage": self.name, "tokens": self.tokens, "flops": self.flops, "hours": self.hours, "step": self.step,
                "peak_gib": self.peak / GiB, "memory_gib": {k: v / GiB for k, v in self.memory.items()},
                "disk_gib": {k: v / GiB for k, v in self.disk.items()}, "notes": self.notes, "key": self.key}


# ---- FLOPs ------------------------------------------------------------------------------------------------


def target_flops(t: TargetShape, tokens: float, ctx: float, layers: int | None = None, head: bool = True) -> float:
    """Forward FLOPs of `tokens` target tokens attending `ctx` keys on average."""
    layers = t.num_layers if layers is None else layers
    per = layers * (2 * t.layer_params() + 4 * t.heads * t.head_dim * ctx) + (2 * t.hidden * t.vocab if head else 0)
    return tokens * per


def drafter_flops(d: DrafterShape, B: int, L: int, A: int, head_rows: float, chunked: bool) -> float:
    """Forward + backward of the drafter: block rows through its layers (attention over L context + S),
    the context projection of B·L tokens, and the frozen head (forward + input gradient; + recompute)."""
    R = B * A * d.block_size
    H, kd = d.hidden, d.kv_heads * d.head_dim
    layer = (d.params() - d.n_taps * H * H) / max(d.num_layers, 1)
    blocks = 6 * R * d.num_layers * (layer + 2 * d.heads * d.head_dim * (L + d.block_size))
    ctx = 6 * B * L * (d.n_taps * H * H + d.num_layers * 2 * H * kd)
    return blocks + ctx + head_rows * 2 * H * d.draft_vocab * (3 if chunked else 2)


# ---- the stages -------------------------------------------------------------------------------------------


def _bytes(dev: Device) -> tuple[int, int, bool]:
    """(target weight bytes, activation bytes, fused attention) on the device."""
    return (2, 2, True) if dev.kind == "cuda" else (4, 4, False)


def _local(batch: int, dev: Device) -> int:
    """A training step's sequences on one device: the global batch split over the GPUs' ranks (DDP)."""
    return math.ceil(batch / dev.gpus)


def _of(batch: int, dev: Device) -> str:
    return f" per device of {batch}" if dev.gpus > 1 else ""


def _steps(epochs: float, max_steps: int, n_seq: int, batch: int) -> int:
    budgets = [s for s in (max_steps, math.ceil(epochs * n_seq / batch) if epochs else 0) if s]
    return min(budgets) if budgets else 0


def _hours(flops: float, dev: Device, gpus: int, minutes_cap: float = 0.0, steps: int = 1) -> tuple[float, list[str]]:
    """FLOP time, capped by a minutes budget; no step budget (steps=0): the minutes budget is the time."""
    if not steps:
        return minutes_cap / 60, [f"no step or epoch budget: time = its max_minutes={minutes_cap:g}, FLOPs unknown"]
    h = flops / (gpus * dev.tflops * 1e12 * dev.efficiency) / 3600
    if minutes_cap and h > minutes_cap / 60:
        return minutes_cap / 60, [f"capped by its max_minutes={minutes_cap:g} (the FLOP budget needs {h:.1f} h)"]
    return h, []


def reference(p: Params, t: TargetShape, dev: Device) -> Stage:
    r, tb = p.reference, _bytes(dev)[0]
    prompts = r.num_train_prompts + r.num_heldout_prompts + r.num_eval_per_suite * len(p.data.eval_suites)
    P, N = p.data.max_prompt_tokens * dev.fill, r.max_new_tokens * dev.fill
    flops = target_flops(t, prompts * P, P / 2, head=False) + target_flops(t, prompts * N, P + N / 2)
    steps = math.ceil(prompts / r.batch_size) * N  # decode steps, each reading the weights and the KV cache
    kv = r.batch_size * (P + N / 2) * t.num_layers * 2 * t.kv_heads * t.head_dim * tb
    decode_h = steps * (M.target_weights(t, tb) + kv) / (dev.bandwidth * 1e9) / 3600
    h = max(flops / (dev.tflops * 1e12 * dev.efficiency) / 3600, decode_h)
    mem = M.reference_step(t, r.batch_size, p.data.max_prompt_tokens, r.max_new_tokens, tb, _bytes(dev)[2])
    disk = {"references (token ids, int32)": prompts * (P + N) * 4}
    return Stage("reference", prompts * (P + N), flops, h, f"batch {r.batch_size} at full length", mem, disk,
                 key="reference.batch_size")


def _pretrain_stage(name: str, p: Params, pc, dc, t: TargetShape, dev: Device, prefix: str = "pretrain") -> Stage:
    tb, ab, fused = _bytes(dev)
    d = drafter_shape(t, dc)
    n_seq = p.reference.num_train_prompts
    L = int((p.data.max_prompt_tokens + p.reference.max_new_tokens) * dev.fill)
    steps = _steps(pc.epochs, pc.max_steps, n_seq, pc.batch_size)
    greedy = pc.labels == "greedy"
    rows = pc.batch_size * pc.anchors_per_seq * (d.block_size - 1)
    per_step = drafter_flops(d, pc.batch_size, L, pc.anchors_per_seq, rows, pc.chunk_rows > 0)
    notes, disk = [], {}
    if pc.cache_features:  # one full pass over the references, then the steps read the cache
        flops = steps * per_step + target_flops(t, n_seq * L, L / 2)
        disk[f"feature cache ({d.n_taps} taps, fp16)"] = n_seq * L * d.n_taps * t.hidden * 2
    else:
        layers = None if greedy else d.deepest_tap + 1
        flops = steps * (per_step + target_flops(t, pc.batch_size * L, L / 2, layers, head=greedy))
    disk["checkpoints (weights + resumable state)"] = d.params() * (4 + 12)
    h, cap = _hours(flops, dev, dev.gpus, pc.max_minutes, steps)
    mem = {**M.pretrain_step(t, d, _local(pc.batch_size, dev), L, pc.anchors_per_seq, pc.chunk_rows, tb, ab, fused,
                             greedy, pc.kd_weight > 0), **M.ddp_buckets(d.params(), dev.gpus)}
    return Stage(name, steps * pc.batch_size * (L + pc.anchors_per_seq * d.block_size), flops, h,
                 f"{steps} steps; step B={_local(pc.batch_size, dev)}{_of(pc.batch_size, dev)}, A={pc.anchors_per_seq}, S={d.block_size}, L={L}", mem, disk,
                 notes + cap, key=f"{prefix}.chunk_rows" if not pc.chunk_rows else f"{prefix}.batch_size")


def specopd(p: Params, t: TargetShape, dev: Device) -> Stage:
    s, tb, (_, ab, fused) = p.specopd, _bytes(dev)[0], _bytes(dev)
    dc = p.seeded.resolve(p.drafter, p.pretrain)[0] if p.seeded.enabled and p.seeded.methods else p.drafter
    d = drafter_shape(t, dc)
    W = s.branch_width or d.block_size - 1
    L = int((p.data.max_prompt_tokens + p.reference.max_new_tokens) * dev.fill)
    B, A = s.batch_size, s.anchors_per_seq
    rows = B * A * W
    step = (target_flops(t, B * L, L / 2, head=False) + drafter_flops(d, B, L, A, rows, s.chunk_rows > 0)
            + target_flops(t, B * A * (W - 1), L, head=False) + rows * 2 * t.hidden * t.vocab)
    objectives = {"specopd": s.max_steps, **{b: s.baseline_max_steps or s.max_steps for b in s.baselines}}
    flops = 0.0
    for name, n in objectives.items():  # the sequential loop: seq_rounds dependent rounds of the same rows
        flops += n * step * (s.seq_rounds * W / max(A, 1) if name == "sequential" else 1)
    train = {**M.specopd_step(t, d, _local(B, dev), L, A, W, s.chunk_rows, s.vocab_chunk, tb, ab, fused, grad=True),
             **M.ddp_buckets(d.params(), dev.gpus)}
    evals = M.specopd_step(t, d, B, L, A, W, s.chunk_rows, s.vocab_chunk, tb, ab, fused, grad=False)
    which, mem = ((f"update: B={_local(B, dev)}{_of(B, dev)}", train) if M.total(train) >= M.total(evals)
                  else (f"T=1 evaluation: B={B}", evals))
    notes = [f"update at B={_local(B, dev)}: {M.total(train) / GiB:.1f} GiB; T=1 evaluation at B={B} (no gradients): "
             f"{M.total(evals) / GiB:.1f} GiB"]
    if "sequential" in s.baselines:  # its rollout records p logits [B, R, W, V] (not chunked)
        seq = B * s.seq_rounds * W * t.vocab * 4
        notes.append(f"the sequential arm's rollout also keeps p logits [B, R, W, V] = {seq / GiB:.1f} GiB")
    disk = {"checkpoints (one per objective)": len(objectives) * d.params() * (4 + 12)}
    if s.cache_features:
        disk["feature cache (fp16)"] = p.reference.num_train_prompts * L * d.n_taps * t.hidden * 2
    h, cap = _hours(flops, dev, dev.gpus, s.max_minutes * len(objectives))
    key = "specopd.chunk_rows" if not s.chunk_rows else ("specopd.vocab_chunk" if not s.vocab_chunk
                                                          else "specopd.batch_size")
    return Stage("specopd", sum(objectives.values()) * B * (L + A * (d.block_size + W - 1)), flops, h,
                 f"{which}, A={A}, W={W}, L={L}, chunk_rows={s.chunk_rows}, vocab_chunk={s.vocab_chunk}", mem,
                 disk, notes + cap, key=key)


def corrector_params(H: int, c) -> int:
    """DCOCO's size: the candidate and pair projections (4 H × dim) and the two-layer MLP (~3 dim × hidden);
    2.2M at H=4096, dim=128, hidden=256 (the paper's 2.23M)."""
    return 4 * H * c.dim + 3 * c.dim * c.hidden


def corrector(p: Params, t: TargetShape, dev: Device) -> Stage:
    c, pc, (tb, ab, fused) = p.corrector, p.pretrain, _bytes(dev)
    d = drafter_shape(t, p.drafter)
    L = int((p.data.max_prompt_tokens + p.reference.max_new_tokens) * dev.fill)
    n_seq = p.reference.num_train_prompts
    steps = _steps(c.epochs, c.max_steps, n_seq, c.batch_size)
    rows = c.batch_size * c.anchors_per_seq * (d.block_size - 1)
    step = target_flops(t, c.batch_size * L, L / 2) + drafter_flops(d, c.batch_size, L, c.anchors_per_seq, rows, False)
    runs = list(c.variants) + (["dflash-long"] if c.control else [])
    main = "dcoco" if "dcoco" in c.variants else c.variants[0]
    hours, notes = 0.0, []
    for v in runs:
        full = v in (main, "dflash-long", "dspark", "domino", "dflash2") or not c.variant_max_minutes
        h, cap = _hours(steps * step, dev, dev.gpus, c.max_minutes if full else c.variant_max_minutes, steps)
        hours += h
        notes += [f"{v}: {x}" for x in cap]
    mem = {**M.cotrain_step(t, d, _local(c.batch_size, dev), L, c.anchors_per_seq, c.k, c.dim, c.hidden, tb, ab,
                            fused, corrector_params(t.hidden, c)),
           **M.ddp_buckets(d.params() + corrector_params(t.hidden, c), dev.gpus)}
    disk = {"checkpoints (drafter + corrector per run)": len(runs) * (d.params() + corrector_params(t.hidden, c)) * 16}
    return Stage("corrector", len(runs) * steps * c.batch_size * (L + c.anchors_per_seq * d.block_size),
                 len(runs) * steps * step, hours, f"{len(runs)} runs x {steps} steps; co-training step "
                 f"B={_local(c.batch_size, dev)}{_of(c.batch_size, dev)}, A={c.anchors_per_seq}", mem, disk, notes, key="corrector.batch_size")


def benchmark(p: Params, t: TargetShape, dev: Device) -> Stage:
    b, tb = p.benchmark, _bytes(dev)[0]
    d = drafter_shape(t, p.drafter)
    per_suite = [b.prompts_per_suite or SUITE_PROMPTS.get(s, p.reference.num_heldout_prompts) for s in b.suites]
    abl = [b.ablation_prompts_per_suite or n for n in per_suite]
    tokens = (len(b.arms) * sum(per_suite) + len(b.ablation_arms) * sum(abl)) * b.max_new_tokens * dev.fill
    tokens += len(b.arms) * sum(max(c, b.concurrency_prompts) for c in b.concurrency) * b.concurrency_max_new_tokens
    weights = M.target_weights(t, tb) + d.params() * tb
    h = tokens / dev.tau * weights / (dev.bandwidth * 1e9) / 3600
    kd = t.kv_heads * t.head_dim
    top = max(b.concurrency or [1])
    mem = {"target weights": M.target_weights(t, tb), "drafter weights": d.params() * tb,
           f"KV cache at {top} streams": top * (p.data.max_prompt_tokens + b.max_new_tokens) * t.num_layers * 2 * kd * tb,
           f"verify logits [{top}, S, V]": top * d.block_size * t.vocab * 4}
    notes = [f"prompts_per_suite=0: suite sizes {', '.join(f'{s} {n}' for s, n in zip(b.suites, per_suite))}"
             f" (unknown suites: reference.num_heldout_prompts)"] if not b.prompts_per_suite else []
    return Stage("benchmark", tokens, tokens * 2 * t.params(), h, f"{top} streams", mem, {}, notes,
                 key="benchmark.concurrency")


def plan(p: Params, t: TargetShape, dev: Device) -> list[Stage]:
    """Every stage the composition runs, in pipeline order."""
    stages = [reference(p, t, dev), _pretrain_stage("pretrain_drafter", p, p.pretrain, p.drafter, t, dev)]
    if p.seeded.enabled:
        dc, pc = p.seeded.resolve(p.drafter, p.pretrain)
        stages.append(_pretrain_stage("pretrain_seeded", p, pc, dc, t, dev, "seeded.pretrain"))
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
