"""Kernel dispatch: Triton on CUDA, the pure-torch reference elsewhere, overridable.

The backend of a call is, in order: the `backend` argument ("torch" | "triton" | "auto"/None),
then the environment variable DRAFTLAB_KERNELS (torch | triton | auto), then auto = Triton when
the inputs live on a CUDA device and Triton imports, else torch. Nothing here queries CUDA or
imports Triton at import time: the device comes from the input tensors and Triton is imported
on the first Triton call.

The Triton kernels are forward-only. When autograd needs the result (grad enabled and an input
requires grad) the reference runs whatever was asked, so training always differentiates the
reference. Triton on CPU tensors needs TRITON_INTERPRET=1 set before Triton is imported (tests).
"""
from __future__ import annotations

import functools
import os

import torch
from torch import Tensor

BACKENDS = ("torch", "triton")
ENV = "DRAFTLAB_KERNELS"


@functools.cache
def triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except Exception:
        return False
    return True


def resolve_backend(device: torch.device | str, backend: str | None = None) -> str:
    """'torch' or 'triton' for inputs on `device` (argument > DRAFTLAB_KERNELS > auto)."""
    choice = backend or os.environ.get(ENV) or "auto"
    if choice not in (*BACKENDS, "auto"):
        raise ValueError(f"kernel backend {choice!r} is not valid; choose auto, torch or triton")
    device = torch.device(device)
    if choice == "auto":
        return "triton" if device.type == "cuda" and triton_available() else "torch"
    if choice == "triton":
        if not triton_available():
            raise RuntimeError("kernel backend 'triton' was requested but triton is not importable "
                               "(pip install -e '.[kernels]')")
        if device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
            raise RuntimeError(f"Triton kernels on {device.type} tensors need TRITON_INTERPRET=1 "
                               "set before triton is imported")
    return choice


def _needs_grad(*xs: Tensor) -> bool:
    return torch.is_grad_enabled() and any(x.requires_grad for x in xs)


def transition_scores(a_side: Tensor, b_side: Tensor, pair: Tensor, w_out: Tensor, b_out: Tensor,
                      next_logits: Tensor, backend: str | None = None) -> Tensor:
    """All (n−1)·K² DCOCO transition scores [N, n−1, K, K]; see kernels.transition_scores."""
    from draftlab.kernels.transition_scores import transition_scores_torch, transition_scores_triton

    args = (a_side, b_side, pair, w_out, b_out, next_logits)
    if _needs_grad(*args) or resolve_backend(a_side.device, backend) == "torch":
        return transition_scores_torch(*args)
    return transition_scores_triton(*args)


def greedy_walk(scores: Tensor, start: Tensor, backend: str | None = None) -> Tensor:
    """Prefix-first greedy path [N, n] (candidate indices); see kernels.greedy_walk."""
    from draftlab.kernels.greedy_walk import greedy_walk_torch, greedy_walk_triton

    if resolve_backend(scores.device, backend) == "torch":
        return greedy_walk_torch(scores, start)
    return greedy_walk_triton(scores, start)


def tv_overlap(q_logits: Tensor, p_logits: Tensor, vocab: Tensor | None = None, backend: str | None = None) -> Tensor:
    """Acceptance overlap α [N] = Σ min(softmax(q_logits), softmax(p_logits)[vocab]); see kernels.tv_overlap.
    p is a fixed teacher (detached); the gradient flows into q_logits only. Unlike the forward-only
    kernels, the Triton path is differentiable (`TVOverlap`: fused forward, recomputing torch backward)."""
    from draftlab.kernels.tv_overlap import TVOverlap, tv_overlap_torch

    if resolve_backend(q_logits.device, backend) == "torch":
        return tv_overlap_torch(q_logits, p_logits.detach(), vocab)
    return TVOverlap.apply(q_logits, p_logits.detach(), vocab)
