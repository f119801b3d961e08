"""Decode-time linear layers on CPU: the few-row products of a decoding step, each row count by the path that
is fastest for it on this machine.

A decoding step multiplies a handful of rows (1 for an AR step, the verified width for a round, times the
streams) by every weight matrix of the target. Which CPU path is fastest depends on the row count and on the
machine (docs/decisions.md, "Verify cost by width" and "The verify pass at the cost of its arithmetic"):
- `torch`: `F.linear` (`x @ Wᵀ`; MKL). On 2-core AVX2 machines it packs the whole weight from two rows on (a
  2-row product of the LM head 33 ms against 14 ms for one row); on AVX-512 machines it is the fastest at 1–2 rows.
- `few-row`: `(W @ xᵀ)ᵀ`, which streams each weight once (the fix of 2026-12-01 for the 2-row cliff). One row of
  a large weight (the LM head) is padded to two: MKL's matrix-vector path there was slower than its 2-column
  product; a smaller weight keeps the matrix-vector product for one row.
- `onednn`: oneDNN's inner product on a weight reordered once into its blocked layout
  (`torch.ops.mkldnn._reorder_linear_weight` + `_linear_pointwise`, what inductor's CPU freezing pass emits). With
  oneDNN held to AVX2 each output row is bit-identical to the one-row product of the same input row (up to 32
  rows, as a review found on 2-core AVX2 machines); with AVX-512 the 1,536-long sums of the MLP's down projection
  are blocked differently for one row than for two or more: float32 rounding, as with F.linear. Odd widths cost
  what their neighbours cost. The packed copy is made on first use and made again when the weight
  changes (its version counter); it is not a parameter (never saved, never trained).

`target.linear` picks the mode: `auto` (CPU: `measure_plan` times the three paths on the model's own weights,
cycling through all of them as a forward does, at each row count of `PLAN_ROWS`, and takes the fastest per
row count; CUDA: nothing is installed, cuBLAS keeps its choice), or one path for every row count (`torch`,
`few-row`, `onednn`). Above `MAX_ROWS` rows (prefill, training features, tree scoring of many streams) every
mode *is* `F.linear`, bit for bit.

- `decode_linear(x, weight, bias, owner)`: the product (reference: `F.linear`, the same first three
  arguments); `owner` holds the plan (`decode_plan`) and the packed weights.
- `install(model, mode | plan)`: switch every plain `nn.Linear` of a model to `DecodeLinear` (parameters kept:
  a tied head stays tied) and set `decode_plan` on the modules that declare it (the drafter's head, a product on
  a buffer); `plan_of(model)` is the plan installed, which the benchmark installs on the drafters too, so a
  draft pass runs the products a verify runs; `uninstall` reverts; `describe` is what a report records.

The results differ from `F.linear` by float32 rounding only (another summation order); the engine's exactness
(greedy = AR) holds because every arm, AR and the Hugging Face peers included, runs the same layers.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

MODES = ("auto", "torch", "few-row", "onednn")
PATHS = MODES[1:]  # the paths a plan chooses among
MAX_ROWS = 64  # at and below: the plan's path; above: F.linear
PAD_MIN_WEIGHT = 1 << 22  # few-row, one row: the padded 2-column product only for weights this large (the LM head)
PLAN_ROWS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 17, 24, 32, 48, 64)  # measured; between two, the lower one's path
PLAN_REPS = 3  # timed passes per (rows, path), interleaved, after one untimed
PLAN_MARGIN = 0.05  # another path replaces F.linear for a row count only when its pass is this much faster


@dataclass(frozen=True)
class Plan:
    """Which path multiplies how many rows: `paths[i]` for row counts from `rows[i]` up to the next entry."""
    rows: tuple[int, ...]
    paths: tuple[str, ...]
    mode: str  # the target.linear mode it came from
    ms: dict = field(default_factory=dict, compare=False)  # measured: path -> [median ms of a pass per row count]

    def __post_init__(self):  # the path of each row count 0..MAX_ROWS, looked up once per product (a hot path)
        table = [self.paths[0]] * (MAX_ROWS + 1)
        for lo, p in zip(self.rows, self.paths):
            table[lo:] = [p] * (MAX_ROWS + 1 - lo)
        object.__setattr__(self, "_table", tuple(table))

    @classmethod
    def fixed(cls, path: str) -> "Plan":
        return cls((1,), (path,), path)

    def path(self, rows: int) -> str:
        return self._table[min(rows, MAX_ROWS)]

    def summary(self) -> str:
        """"onednn" or, measured, "torch for 1-2 rows, onednn for 3-64 rows"."""
        if len(set(self.paths)) == 1:
            return self.paths[0]
        spans, start = [], 0
        for i in range(1, len(self.rows) + 1):
            if i == len(self.rows) or self.paths[i] != self.paths[start]:
                hi = self.rows[i] - 1 if i < len(self.rows) else MAX_ROWS
                lo = self.rows[start]
                spans.append(f"{self.paths[start]} for {lo}{'' if hi == lo else f'-{hi}'} row{'s' * (hi > 1)}")
                start = i
        return ", ".join(spans)

    def as_dict(self) -> dict:
        return {"mode": self.mode, "rows": list(self.rows), "paths": list(self.paths), "summary": self.summary(),
                "pass_ms": {p: [round(v, 3) for v in ms] for p, ms in self.ms.items()}}


def onednn_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def _packed(owner: nn.Module, weight: Tensor) -> Tensor:
    """oneDNN's blocked copy of `weight`, cached on `owner` and made again when the weight changes."""
    cache = owner.__dict__.setdefault("_onednn_packed", {})
    key = (weight.data_ptr(), tuple(weight.shape), weight.dtype)
    hit = cache.get(key)
    if hit is None or hit[0] != weight._version:
        with torch.no_grad():
            hit = (weight._version, torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None))
        cache[key] = hit
    return hit[1]


def few_row_linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """x [..., K] · weight [N, K] (+ bias [N]) -> [..., N], computed as weight @ xᵀ for few rows."""
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    if rows > MAX_ROWS or rows == 0 or rows == 1 and weight.numel() < PAD_MIN_WEIGHT:
        return F.linear(x, weight, bias)
    x2 = x.reshape(rows, x.shape[-1])  # [M, K]
    if rows == 1:
        y = (weight @ torch.cat([x2, x2]).T)[:, :1].T  # [1, N]: the 2-column product, one column kept
    else:
        y = (weight @ x2.T).T  # [M, N]
    if bias is not None:
        y = y + bias
    return y.reshape(*x.shape[:-1], weight.shape[0])


def onednn_linear(x: Tensor, weight: Tensor, bias: Tensor | None, owner: nn.Module) -> Tensor:
    """x [..., K] · weight [N, K] (+ bias) -> [..., N] by oneDNN on the weight's packed copy (cached on owner)."""
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    y = torch.ops.mkldnn._linear_pointwise(x2, _packed(owner, weight), bias, "none", [], "")
    return y.reshape(*x.shape[:-1], weight.shape[0])


def run_path(path: str, x: Tensor, weight: Tensor, bias: Tensor | None, owner: nn.Module) -> Tensor:
    if path == "onednn":
        return onednn_linear(x, weight, bias, owner)
    if path == "few-row":
        return few_row_linear(x, weight, bias)
    return F.linear(x, weight, bias)


def decode_linear(x: Tensor, weight: Tensor, bias: Tensor | None, owner: nn.Module) -> Tensor:
    """F.linear(x, weight, bias) by the path `owner.decode_plan` gives x's row count (F.linear above MAX_ROWS)."""
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    if rows == 0 or rows > MAX_ROWS:
        return F.linear(x, weight, bias)
    path = owner.decode_plan.path(rows)
    if path == "onednn" and torch.compiler.is_compiling():
        path = "torch"  # a compiled step cannot trace the packed layout: the compiler chooses (inductor packs)
    return run_path(path, x, weight, bias, owner)


class DecodeLinear(nn.Linear):
    """An `nn.Linear` whose forward is `decode_linear` (set by `install` on an existing module's class)."""
    decode_plan: Plan

    def forward(self, x: Tensor) -> Tensor:  # [..., in] -> [..., out]
        return decode_linear(x, self.weight, self.bias, self)


def linear_layers(model: nn.Module) -> list[nn.Linear]:
    """The model's plain and switched linear layers, in module order (a forward's)."""
    return [m for m in model.modules() if type(m) in (nn.Linear, DecodeLinear)]


def measure_plan(model: nn.Module, rows: tuple[int, ...] = PLAN_ROWS, reps: int = PLAN_REPS,
                 paths: tuple[str, ...] | None = None) -> Plan:
    """Time one pass over every linear weight of `model` (its cold-cache order, as a forward runs them) per path
    and row count, interleaved and rotated (`reps` timed passes after one untimed); per row count the path with
    the lowest median, where it is at least PLAN_MARGIN faster than F.linear's (near-equal paths would otherwise
    flip from one row count to the next on the timing noise alone)."""
    paths = paths or tuple(p for p in PATHS if p != "onednn" or onednn_available())
    layers = linear_layers(model)
    if not layers:
        return Plan.fixed("torch")
    dev, dtype = layers[0].weight.device, layers[0].weight.dtype
    g = torch.Generator().manual_seed(0)
    inputs = {r: {k: torch.randn(r, k, generator=g).to(dev, dtype) for k in {m.in_features for m in layers}}
              for r in rows}
    jobs = [(r, p) for r in rows for p in paths]
    times: dict = {j: [] for j in jobs}
    with torch.no_grad():
        for rep in range(reps + 1):
            k = rep % len(jobs)
            for r, p in jobs[k:] + jobs[:k]:
                xs = inputs[r]
                t = time.perf_counter()
                for m in layers:
                    run_path(p, xs[m.in_features], m.weight, m.bias, m)
                if rep:
                    times[(r, p)].append(1e3 * (time.perf_counter() - t))
    return choose({p: [statistics.median(times[(r, p)]) for r in rows] for p in paths}, tuple(rows))


def choose(ms: dict, rows: tuple[int, ...]) -> Plan:
    """The measured plan: per row count the path with the lowest pass time `ms[path][i]`, where it beats F.linear's
    by PLAN_MARGIN (near-equal paths would otherwise flip from one row count to the next on noise alone)."""
    def pick(i: int) -> str:
        p = min(ms, key=lambda p: ms[p][i])
        return p if "torch" not in ms or ms[p][i] < (1 - PLAN_MARGIN) * ms["torch"][i] else "torch"

    return Plan(tuple(rows), tuple(map(pick, range(len(rows)))), "auto", ms)


def resolve(mode: str, device: torch.device | str) -> str | None:
    """The mode's meaning on `device`: "measure" (auto on CPU), a path, or None (leave F.linear: torch, or CUDA,
    where cuBLAS keeps its own choice); a bad mode is one line."""
    if mode not in MODES:
        raise ValueError(f"target.linear={mode!r} is not valid; choose one of: {', '.join(MODES)}")
    if torch.device(device).type != "cpu" or mode == "torch":
        return None
    if mode == "onednn" and not onednn_available():
        raise ValueError("target.linear='onednn' needs a torch build with oneDNN (torch.backends.mkldnn); "
                         "choose auto or few-row")
    return "measure" if mode == "auto" else mode


def install(model: nn.Module, mode: str | Plan = "auto") -> int:
    """Switch the plain `nn.Linear` modules of `model` to `DecodeLinear` under the plan `mode` resolves to on the
    model's device (auto: measured here) or the `Plan` given; returns how many layers were switched (0 when the
    mode leaves them)."""
    params = next(model.parameters(), None)
    if params is None:
        return 0
    if isinstance(mode, Plan):
        plan = mode
    else:
        how = resolve(mode, params.device)
        if how is None:
            return 0
        plan = measure_plan(model) if how == "measure" else Plan.fixed(how)
    model.__dict__["_decode_plan_root"] = plan
    n = 0
    for m in model.modules():
        if type(m) in (nn.Linear, DecodeLinear):
            m.__class__ = DecodeLinear
            m.decode_plan = plan
            n += 1
        elif hasattr(type(m), "decode_plan"):
            m.decode_plan = plan
            n += 1
    return n


def plan_of(model: nn.Module) -> Plan | None:
    """The plan `install` put on `model` (None: none)."""
    return model.__dict__.get("_decode_plan_root")


def _switched(m: nn.Module) -> bool:
    return type(m) is DecodeLinear or m.__dict__.get("decode_plan") is not None


def installed(model: nn.Module) -> bool:
    """Whether `install` switched any layer of `model`."""
    return any(map(_switched, model.modules()))


def describe(model: nn.Module) -> str:
    """What a report records: "onednn up to 64 rows on N layers", "auto: torch for 1-2 rows, ... on N layers (F.linear
    above 64)", or "torch" (none switched)."""
    n = sum(map(_switched, model.modules()))
    plan = plan_of(model)
    if not n or plan is None:
        return "torch"
    if plan.mode == "auto":
        return f"auto: {plan.summary()} on {n} layers (F.linear above {MAX_ROWS})"
    return f"{plan.summary()} up to {MAX_ROWS} rows on {n} layers"


def uninstall(model: nn.Module) -> int:
    """Put `nn.Linear` back wherever `install` switched it (and drop the packed copies); returns how many."""
    n = 0
    for m in model.modules():
        if _switched(m):
            if type(m) is DecodeLinear:
                m.__class__ = nn.Linear
            m.__dict__.pop("decode_plan", None)
            n += 1
        m.__dict__.pop("_onednn_packed", None)
    model.__dict__.pop("_decode_plan_root", None)
    return n
