"""How every static-shape step is compiled (`engine.compile`): the target's stream pass, the drafter's context and
block passes, a corrector's proposal step.

One rule for all of them: `torch.compile(fullgraph=True, dynamic=False)` — a graph break or a symbolic shape is an
error, not a slow path; one graph per shape —, in mode `reduce-overhead` on CUDA (CUDA graphs: a replay is one
launch, no Python dispatch per op), inductor's default on CPU. A test hands in its own `backend` (a counting one:
no inductor on 2 cores). The K/V buffers the steps write in place are marked static addresses on CUDA
(`static_buffer`), so a CUDA graph writes them where they are instead of copying them in and out at every replay.
"""
from __future__ import annotations

import torch


def compile_step(fn, cuda: bool, backend=None):
    """`fn` compiled with the project's options (see the module docstring)."""
    if backend is not None:
        return torch.compile(fn, backend=backend, fullgraph=True, dynamic=False)
    return torch.compile(fn, fullgraph=True, dynamic=False, mode="reduce-overhead" if cuda else None)


def step_label(cuda: bool, backend=None) -> str:
    """What a compiled step runs as (recorded with every run): reduce-overhead | inductor | the test's backend."""
    if backend is not None:
        return getattr(backend, "__name__", type(backend).__name__)
    return "reduce-overhead" if cuda else "inductor"


def static_buffer(t: torch.Tensor) -> torch.Tensor:
    """Mark a buffer that compiled steps mutate in place as a static address (CUDA only; a no-op elsewhere)."""
    if t.is_cuda:
        torch._dynamo.mark_static_address(t, guard=False)
    return t
