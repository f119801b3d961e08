"""Row-chunked evaluation of per-row losses whose intermediates are [rows, V] (plain torch).

`map_rows(fn, chunk, *xs)` applies fn to consecutive row chunks of xs (each [N, ...]) and concatenates
the results (fn returns one small value per row, e.g. [c] or [c, k]). With autograd on, each chunk
runs under non-reentrant activation checkpointing: the chunk's [c, V] intermediates (logits, softmax,
log-softmax) are freed after its forward and recomputed during its backward, so peak memory follows
`chunk`, not N, while the value and the gradients are those of one call over all rows (up to the
float rounding of the row-wise reductions, which do not mix rows). chunk = 0 or ≥ N: one plain call.
Used by the SpecOPD terms (q logits + overlap per chunk), pretraining's CE and its distillation KL.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint


def map_rows(fn: Callable[..., Tensor], chunk: int, *xs: Tensor) -> Tensor:
    """cat([fn(x_0[r:r+chunk], x_1[r:r+chunk], ...) for r in 0, chunk, ...]) with checkpointed chunks."""
    N = xs[0].shape[0]
    if chunk <= 0 or chunk >= N:
        return fn(*xs)
    grad = torch.is_grad_enabled()
    outs = []
    for r in range(0, N, chunk):
        part = [x[r:r + chunk] for x in xs]
        outs.append(checkpoint(fn, *part, use_reentrant=False) if grad else fn(*part))
    return torch.cat(outs)
