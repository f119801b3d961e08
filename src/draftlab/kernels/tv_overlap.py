"""Acceptance overlap α = Σ_v min(q(v), p(v)) = 1 − TV(q, p) (docs/algorithms.md "The E2E-TV loss"): reference and
fused Triton kernel.

Inputs (one row per supervised draft position):
    q_logits [N, Vq]  drafter logits (over the draft vocabulary when `vocab` is given)
    p_logits [N, V]   target logits over the FULL target vocabulary
    vocab    [Vq]     long, draft index -> target id; None = q is over the full vocabulary (Vq = V)
Output: α [N] (fp32; fp64 when the inputs are fp64).

    q = softmax(q_logits),  p = softmax(p_logits)   (p normalised over all V target ids)
    α = Σ_{j < Vq} min(q_j, p_{vocab[j]})

Target mass outside the draft vocabulary is never renormalised onto it: it simply counts as lost
overlap (q = (0.5, 0.5, 0), p = (0.4, 0.4, 0.2) -> α = 0.8).

Gradient (through q only; p is a fixed teacher): with m_j = 1[q_j < p_{vocab[j]}] and c = Σ_j m_j q_j,
    ∂α/∂q_logits_j = q_j (m_j − c).

`tv_overlap_torch` materialises both distributions (the reference; autograd-able).
`tv_overlap_triton` never does: one program per row streams the logits twice — first the two
online log-normalisers (q over Vq, p over all V), then Σ min(exp(x − lse_q), exp(y − lse_p)) —
keeping only a few scalars per row (both normalisers by one `@triton.jit` helper, `row_logsumexp`). `TVOverlap` pairs the Triton forward with a torch backward that
recomputes q and the mask in row chunks (no [N, V] tensor is kept for backward).
"""
from __future__ import annotations

import functools

import torch
from torch import Tensor


def _compute_dtype(*xs: Tensor) -> torch.dtype:
    dt = torch.float32
    for x in xs:
        dt = torch.promote_types(dt, x.dtype)
    return dt


def tv_overlap_torch(q_logits: Tensor, p_logits: Tensor, vocab: Tensor | None = None) -> Tensor:
    """Reference: α [N] = Σ_j min(softmax(q_logits)_j, softmax(p_logits)_{vocab[j]})."""
    dt = _compute_dtype(q_logits, p_logits)
    q = q_logits.to(dt).softmax(-1)  # [N, Vq]
    p = p_logits.to(dt).softmax(-1)  # [N, V]  over the full target vocabulary
    if vocab is not None:
        p = p[:, vocab]  # [N, Vq]  mass outside the draft vocabulary is dropped, not renormalised
    return torch.minimum(q, p).sum(-1)


def tv_overlap_grad(q_logits: Tensor, p_logits: Tensor, vocab: Tensor | None, grad_out: Tensor,
                    chunk: int = 1024) -> Tensor:
    """∂(Σ_n g_n α_n)/∂q_logits [N, Vq], recomputed row chunk by row chunk (p held fixed)."""
    dt = _compute_dtype(q_logits, p_logits)
    out = torch.empty(q_logits.shape, dtype=dt, device=q_logits.device)
    for r in range(0, q_logits.shape[0], chunk):
        q = q_logits[r:r + chunk].to(dt).softmax(-1)  # [c, Vq]
        p = p_logits[r:r + chunk].to(dt).softmax(-1)
        if vocab is not None:
            p = p[:, vocab]
        m = (q < p).to(dt)  # [c, Vq]  where q is the smaller one, min() follows q
        c = (m * q).sum(-1, keepdim=True)  # [c, 1]
        out[r:r + chunk] = grad_out[r:r + chunk, None].to(dt) * q * (m - c)
    return out.to(q_logits.dtype)


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def row_logsumexp(Ptr, L, stride, BLOCK: tl.constexpr):
        """log Σ_{v<L} exp(x_v) of one row, streamed in BLOCK-wide chunks (online max + rescaled sums)."""
        offs = tl.arange(0, BLOCK)
        m = tl.full((BLOCK,), float("-inf"), tl.float32)  # running max per lane
        acc = tl.zeros((BLOCK,), tl.float32)  # running Σ exp(x − m) per lane
        for v0 in range(0, L, BLOCK):
            v = v0 + offs
            x = tl.load(Ptr + v * stride, mask=v < L, other=float("-inf")).to(tl.float32)
            new = tl.maximum(m, x)
            safe = tl.where(new == float("-inf"), 0.0, new)
            acc = acc * tl.exp(m - safe) + tl.exp(x - safe)
            m = new
        ms = tl.max(m, axis=0)
        return ms + tl.log(tl.sum(acc * tl.exp(m - ms), axis=0))

    # Triton resolves the functions a kernel calls among its module's globals (not a closure), and the
    # decorator must run after TRITON_INTERPRET is set, so the helper is published here, on first use.
    globals()["_row_logsumexp"] = row_logsumexp

    @triton.jit
    def tv_overlap_kernel(X, Y, Vocab, Out, Vq, V, sx_n, sx_v, sy_n, sy_v,
                          HAS_VOCAB: tl.constexpr, BLOCK: tl.constexpr):
        n = tl.program_id(0)  # one program per row
        offs = tl.arange(0, BLOCK)
        # pass 1: the log-normalisers of q (over Vq) and p (over the full V)
        lse_x = _row_logsumexp(X + n * sx_n, Vq, sx_v, BLOCK)  # log Σ exp(q_logits)
        lse_y = _row_logsumexp(Y + n * sy_n, V, sy_v, BLOCK)  # log Σ exp(p_logits), all V
        # pass 2: Σ_j min(q_j, p_vocab[j]), probabilities formed in registers only
        acc = tl.zeros((BLOCK,), tl.float32)
        for v0 in range(0, Vq, BLOCK):
            v = v0 + offs
            vm = v < Vq
            x = tl.load(X + n * sx_n + v * sx_v, mask=vm, other=float("-inf")).to(tl.float32)
            if HAS_VOCAB:
                tid = tl.load(Vocab + v, mask=vm, other=0)
            else:
                tid = v
            y = tl.load(Y + n * sy_n + tid * sy_v, mask=vm, other=float("-inf")).to(tl.float32)
            acc += tl.minimum(tl.exp(x - lse_x), tl.exp(y - lse_y))
        tl.store(Out + n, tl.sum(acc, axis=0))

    return triton, tv_overlap_kernel


def tv_overlap_triton(q_logits: Tensor, p_logits: Tensor, vocab: Tensor | None = None) -> Tensor:
    """Fused Triton overlap (forward only); same signature and semantics as the reference, fp32 out."""
    triton, kernel = _kernel()
    N, Vq = q_logits.shape
    V = p_logits.shape[-1]
    out = torch.empty(N, device=q_logits.device, dtype=torch.float32)
    if N == 0:
        return out
    has_vocab = vocab is not None
    voc = vocab.to(device=q_logits.device, dtype=torch.long).contiguous() if has_vocab else out  # dummy pointer
    BLOCK = min(triton.next_power_of_2(max(Vq, 2)), 1024)
    kernel[(N,)](q_logits, p_logits, voc, out, Vq, V, *q_logits.stride(), *p_logits.stride(),
                 HAS_VOCAB=has_vocab, BLOCK=BLOCK)
    return out


class TVOverlap(torch.autograd.Function):
    """α with the Triton forward and a recomputing torch backward (gradient into q_logits only)."""

    @staticmethod
    def forward(ctx, q_logits: Tensor, p_logits: Tensor, vocab: Tensor | None) -> Tensor:
        ctx.save_for_backward(q_logits, p_logits, vocab if vocab is not None else torch.empty(0))
        ctx.has_vocab = vocab is not None
        return tv_overlap_triton(q_logits, p_logits, vocab)

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        q_logits, p_logits, vocab = ctx.saved_tensors
        grad = tv_overlap_grad(q_logits, p_logits, vocab if ctx.has_vocab else None, grad_out)
        return grad, None, None
