"""The plan's time model, its vocabulary (`draftlab.plan.stages` prices each stage with it, `draftlab.plan.bench_time`
the benchmark): the device it assumes (`Device`, its `PRESETS`), a stage's row (`Stage`), the FLOPs of the target's
and the drafter's passes, and one validation batch's seconds. The model itself is stated in `draftlab.plan.stages`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from draftlab.config import Params
from draftlab.errors import DraftlabError
from draftlab.plan import dispatch as D
from draftlab.plan import memory as M
from draftlab.plan.arch import DrafterShape, TargetShape

GiB = 2 ** 30
BUDGET_TERM = "training budget"  # the part of a stage's time that is its minute budgets (the runner scales it)


def _counted_at() -> str:
    try:
        c = D.load()
        return f"commit {str(c['commit'])[:7]}, torch {c['versions']['torch']}"
    except (OSError, ValueError, KeyError):
        return "? (dispatch_counts.json unreadable)"


@dataclass(frozen=True)
class Device:
    """What the time and memory model assumes of the machine; `Device.of(kind, ...)` starts from the kind's preset
    (`PRESETS`: an H100 for cuda, the project's 2-core CPU for cpu) and replaces the values given."""
    kind: str = "cuda"  # cuda | cpu: bf16 weights and fused attention on cuda, fp32 and split attention on cpu
    gpus: int = 1
    tflops: float = 989.0  # dense bf16 TFLOP/s per device (H100 SXM); on cpu the effective fp32 rate (efficiency 1)
    efficiency: float = 0.4  # achieved / peak FLOP/s
    bandwidth: float = 3350.0  # GB/s of device memory (decode phases)
    memory_gib: float = 80.0
    fill: float = 1.0  # mean response length / its max_new_tokens (1 = the upper bound)
    tau: float = 3.0  # committed tokens per round in the benchmark's speculative arms
    per_op_us: float | None = None  # host µs per dispatched aten op of an eager step; None = dispatch.PER_OP_US[kind]
    prompt_fill: float | None = None  # mean prompt length / data.max_prompt_tokens; None = fill

    @property
    def pfill(self) -> float:
        return self.fill if self.prompt_fill is None else self.prompt_fill

    @classmethod
    def of(cls, kind: str = "cuda", **given) -> "Device":
        """The preset of `kind` with the values in `given` that are not None (the `draftlab plan` flags)."""
        if kind not in PRESETS:
            raise DraftlabError(f"--device {kind} is not known: choose one of {', '.join(PRESETS)}")
        return replace(PRESETS[kind], **{k: v for k, v in given.items() if v is not None})

    @property
    def op_us(self) -> float | None:
        return self.per_op_us if self.per_op_us is not None else D.per_op_us(self.kind)

    def dispatch_s(self, ops: float) -> float:
        """Host seconds of `ops` dispatched aten ops (0 where the device has no per-op cost yet)."""
        return ops * (self.op_us or 0.0) * 1e-6

    def flop_s(self, flops: float, gpus: int = 1) -> float:
        return flops / (gpus * self.tflops * 1e12 * self.efficiency)

    def check(self) -> None:
        """One line naming the `draftlab plan` flag of an impossible value (a zero or negative count, rate or size)."""
        rules = (("--gpus", self.gpus, self.gpus >= 1, "a whole number of devices >= 1"),
                 ("--tflops", self.tflops, self.tflops > 0, "the device's peak TFLOP/s, > 0 (e.g. 989 for an H100)"),
                 ("--efficiency", self.efficiency, 0 < self.efficiency <= 1, "achieved / peak FLOP/s, in (0, 1]"),
                 ("--bandwidth", self.bandwidth, self.bandwidth > 0, "the device's memory bandwidth in GB/s, > 0"),
                 ("--gpu-mem", self.memory_gib, self.memory_gib > 0, "GiB of memory per device, > 0 (e.g. 80)"),
                 ("--fill", self.fill, 0 < self.fill <= 1, "mean length / configured maximum, in (0, 1]"),
                 ("--prompt-fill", self.pfill, 0 < self.pfill <= 1, "mean prompt length / data.max_prompt_tokens, "
                                                                     "in (0, 1]"),
                 ("--tau", self.tau, self.tau >= 1, "tokens committed per round, >= 1"),
                 ("--per-op-us", self.op_us or 0.0, (self.op_us or 0.0) >= 0, "host µs per dispatched op, >= 0"))
        for flag, value, ok, what in rules:
            if not ok or (isinstance(value, float) and not math.isfinite(value)):
                raise DraftlabError(f"{flag} {value:g} is not possible: give {what}")

    def assumptions(self) -> str:
        op = (f"{self.op_us:g} us per dispatched aten op of an eager step (ops counted at "
              f"{_counted_at()})" if self.op_us else f"host dispatch NOT counted (no per-op cost for {self.kind} yet)")
        rate = (f"FLOPs / ({self.gpus} GPU x {self.tflops:g} TFLOP/s x {self.efficiency:g} efficiency) for the "
                f"training stages (data-parallel, perfect scaling); reference and benchmark on 1 GPU"
                if self.kind == "cuda" else
                f"FLOPs / ({self.tflops * self.efficiency * 1e3:g} GFLOP/s of the CPU, fp32; constants fitted on the "
                f"cpu profile's run, docs/plan.md)")
        return (f"time = {rate}; + bytes: decode "
                f"reads weights and KV at {self.bandwidth:g} GB/s (benchmark: tau={self.tau:g} tokens per round); + "
                f"{op}; terms added (no host/device overlap: an upper bound); start-up, loading and compiling not "
                f"counted; lengths = "
                f"the configured maxima x fill {self.fill:g}"
                f"{f' (prompts x {self.pfill:g})' if self.pfill != self.fill else ''}; memory = the largest step on one "
                f"device, a training step at its batch split over the {self.gpus} GPUs' ranks"
                f"{' with DDP gradient buckets' if self.gpus > 1 else ''}, the T=1 evaluation at the "
                f"whole batch ({'bf16 weights, fused attention' if self.kind == 'cuda' else 'fp32, split attention'})")


# The device presets `draftlab plan --device` starts from. cuda: an H100 SXM (peak bf16, 40% of it achieved, HBM3;
# the per-op cost is dispatch.PER_OP_US's, from the 2026-12-04 H200 run). cpu: the project's 2-core x86 machine, fp32,
# eager PyTorch on 2 threads; its three constants are effective rates, FITTED on the committed cpu-profile run of
# 2026-12-04 (results/ at the repository root): a least-squares in log space of predicted / measured over its stage
# wall times (reference, pretrain_drafter, pretrain_seeded, specopd's training, corrector, benchmark) and its
# benchmark's per-round wall times (AR step, lookup round, drafter round), the run's mean lengths and tau given
# (`draftlab.plan.calibrate`). Result: 144.7 GFLOP/s, 11.1 GB/s, 12.4 us per op; then checked, unfitted, on the
# toy world's run of 2026-12-05 (worlds/toy/results): every stage within x1.5 (docs/plan.md has both tables;
# `python tools/calibrate_plan.py` prints them, `--fit` re-runs the fit; tests/plan/test_calibrate.py holds them).
PRESETS: dict[str, Device] = {
    "cuda": Device(),
    "cpu": Device(kind="cpu", tflops=0.145, efficiency=1.0, bandwidth=11.1, per_op_us=12.4),
}


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
    times: dict[str, float] = field(default_factory=dict)  # seconds per term of the time model (they add to hours)

    @property
    def peak(self) -> int:
        return M.total(self.memory)

    def to_dict(self) -> dict:
        return {"stage": self.name, "tokens": self.tokens, "flops": self.flops, "hours": self.hours,
                "seconds": self.hours * 3600, "times_s": dict(self.times), "step": self.step,
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



def dtype_bytes(dev: Device) -> tuple[int, int, bool]:
    """(target weight bytes, activation bytes, fused attention) on the device."""
    return (2, 2, True) if dev.kind == "cuda" else (4, 4, False)



def hours(times: dict[str, float]) -> float:
    return sum(times.values()) / 3600


def val_batch_s(p: Params, t: TargetShape, d: DrafterShape, dev: Device, batch: int, L: int, stride: int,
                 cached: bool = False) -> float:
    """One validation batch: the target's pass with its head (greedy labels; none when the stage reads the feature
    cache, which holds the taps and the greedy tokens), the drafter's blocks at every `stride`-th response position
    (forward only: a third of drafter_flops), top-K; + its dispatched ops."""
    A = max(1, math.ceil(p.reference.max_new_tokens * dev.fill / stride))
    flops = (0.0 if cached else target_flops(t, batch * L, L / 2)) + drafter_flops(
        d, batch, L, A, batch * A * (d.block_size - 1), False) / 3
    return dev.flop_s(flops) + dev.dispatch_s(D.ops("val_batch", 0 if cached else t.num_layers, d.num_layers))
