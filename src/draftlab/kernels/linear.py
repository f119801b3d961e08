"""Few-row linear layers on CPU: `y = (W @ xᵀ)ᵀ` instead of `x @ Wᵀ`, the target's decode-time products.

A decoding step multiplies a handful of rows (1 for an AR step, the verified width for a round, times the
streams) by every weight matrix of the target. On CPU, PyTorch's `F.linear` hands MKL `x @ Wᵀ`, and from two
rows on MKL packs the whole weight before multiplying: on the 2-core machines a 2-row product of the LM head
(49,152 × 576) took 33 ms against 14 ms for one row, so verifying 2 positions cost ~1.8 AR steps
(`docs/decisions.md`, "Verify cost by width"). Written as `W @ xᵀ` the same product streams each weight once:
~10 ms for 2 rows, 16 ms for 8, and the target's whole forward at 4 positions dropped from ~2.3 to ~1.6 AR steps.
One row of a large weight (the LM head) is padded to two, because MKL's matrix-vector path there is slower than
its 2-column product (10–11 vs 14–17 ms); a layer's smaller matrices keep the matrix-vector product for one row
(padding them made an AR step slower: a 192 × 576 projection took 164 instead of 77 µs).

- `few_row_linear(x, weight, bias)`: the product, the same signature as `F.linear` (its reference); above
  `MAX_ROWS` rows (prefill, training features), and for one row of a weight under `PAD_MIN_WEIGHT` elements, it
  *is* `F.linear`, bit for bit.
- `install(model, mode)`: switch every `nn.Linear` of a model to it (`mode="auto"`: on CPU only; `"torch"`:
  leave them), and turn on the modules that declare a `few_row` flag (the drafter's head, a product on a buffer).
  The modules keep their parameters (tied embeddings stay tied); `uninstall` reverts. The benchmark installs it
  on the drafters whenever the target has it (`installed`), so a draft pass runs the same products as a verify.

The results differ from `F.linear` by float32 rounding only (another summation order); the engine's
exactness (greedy = AR) holds because every arm, AR and the Hugging Face peers included, runs the same layers.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

MODES = ("auto", "torch")
MAX_ROWS = 64  # at and below: weight-major; above: F.linear (measured parity from ~64 rows on the head)
PAD_MIN_WEIGHT = 1 << 22  # one row: the padded 2-column product only for weights this large (the LM head)


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


class FewRowLinear(nn.Linear):
    """An `nn.Linear` whose forward is `few_row_linear` (set by `install` on an existing module's class)."""

    def forward(self, x: Tensor) -> Tensor:  # [..., in] -> [..., out]
        return few_row_linear(x, self.weight, self.bias)


def resolve(mode: str, device: torch.device | str) -> bool:
    """Whether `mode` means the few-row products on `device` (auto: CPU only; CUDA keeps cuBLAS's choice)."""
    if mode not in MODES:
        raise ValueError(f"target.linear={mode!r} is not valid; choose {' or '.join(MODES)}")
    return mode == "auto" and torch.device(device).type == "cpu"


def install(model: nn.Module, mode: str = "auto") -> int:
    """Switch the plain `nn.Linear` modules of `model` to `FewRowLinear` when `mode` resolves to it on the
    model's device; returns how many were switched (0 when the mode leaves them)."""
    params = next(model.parameters(), None)
    if params is None or not resolve(mode, params.device):
        return 0
    n = 0
    for m in model.modules():
        if type(m) is nn.Linear:
            m.__class__ = FewRowLinear
            n += 1
        elif hasattr(type(m), "few_row"):
            m.few_row = True
            n += 1
    return n


def _switched(m: nn.Module) -> bool:
    """Whether `install` switched this module (a FewRowLinear, or a module whose `few_row` flag it set)."""
    return type(m) is FewRowLinear or bool(getattr(m, "few_row", False))


def installed(model: nn.Module) -> bool:
    """Whether `install` switched any layer of `model`."""
    return any(map(_switched, model.modules()))


def describe(model: nn.Module) -> str:
    """What a report records: "few-row (W @ xT up to 64 rows) on N layers" or "torch" (none switched)."""
    n = sum(map(_switched, model.modules()))
    return f"few-row (W @ xT up to {MAX_ROWS} rows) on {n} layers" if n else "torch"


def uninstall(model: nn.Module) -> int:
    """Put `nn.Linear` back wherever `install` switched it; returns how many."""
    n = 0
    for m in model.modules():
        if type(m) is FewRowLinear:
            m.__class__ = nn.Linear
            n += 1
        elif getattr(m, "few_row", False):
            del m.few_row  # back to the class's False
            n += 1
    return n
