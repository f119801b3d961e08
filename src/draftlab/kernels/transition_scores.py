"""DCOCO transition scores (docs/algorithms.md "Transition scores"), factorised: torch reference and fused Triton
kernel, same signature.

The first layer of Δθ is linear in [z_{p,a}; z_{p+1,b}; s_p], so it splits into an a-side part
(per candidate of slot p), a b-side part (per candidate of slot p+1) and a per-pair part (bias
included), each computed once by the caller. A transition's score is then

    S_p(a, b) = ℓ_{p+1}(b) + w_out · silu(A_p[a] + B_p[b] + P_p) + b_out

Inputs (P = n−1 slot pairs, m = MLP hidden width; any float dtype, math in fp32 or wider):
    a_side      [N, P, K, m]  first-layer part of slot p's candidates     (slots 1..n−1)
    b_side      [N, P, K, m]  first-layer part of slot p+1's candidates   (slots 2..n)
    pair        [N, P, m]     first-layer part of the pair state s_p, plus the first-layer bias
    w_out       [m]           output layer weight (zero-initialised in the model)
    b_out       [] or [1]     output layer bias
    next_logits [N, P, K]     draft logits ℓ_{p+1}(b) of slot p+1's candidates
Output: scores [N, P, K, K] (fp32; fp64 when the inputs are fp64), scores[n, p, a, b] = S_p(a, b).

`transition_scores_torch` forms the [N, P, K, K, m] pre-activation (the reference; autograd-able);
`transition_scores_triton` never does: one program per (stream, pair) accumulates the K×K tile
over chunks of m in registers.
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import Tensor


def _compute_dtype(*xs: Tensor) -> torch.dtype:
    dt = torch.float32
    for x in xs:
        dt = torch.promote_types(dt, x.dtype)
    return dt


def transition_scores_torch(a_side: Tensor, b_side: Tensor, pair: Tensor, w_out: Tensor, b_out: Tensor,
                            next_logits: Tensor) -> Tensor:
    """Reference: broadcast-add the three first-layer parts over the K×K grid, SiLU, dot w_out."""
    dt = _compute_dtype(a_side, b_side, pair, w_out, next_logits)
    pre = (a_side.to(dt)[:, :, :, None, :]  # [N, P, K(a), 1, m]
           + b_side.to(dt)[:, :, None, :, :]  # [N, P, 1, K(b), m]
           + pair.to(dt)[:, :, None, None, :])  # [N, P, 1, 1, m]   -> [N, P, K, K, m]
    delta = F.silu(pre) @ w_out.to(dt) + b_out.to(dt).reshape(())  # [N, P, K, K]  Δθ
    return next_logits.to(dt)[:, :, None, :] + delta  # [N, P, K, K]  ℓ_{p+1}(b) + Δθ


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def transition_scores_kernel(
        A, Bs, Pr, W, Bo, Lg, Out,
        n_pairs, K, M,
        sa_n, sa_p, sa_k, sa_m,
        sb_n, sb_p, sb_k, sb_m,
        sp_n, sp_p, sp_m,
        sl_n, sl_p, sl_k,
        so_n, so_p, so_a, so_b,
        BLOCK_K: tl.constexpr, BLOCK_M: tl.constexpr,
    ):
        pid = tl.program_id(0)  # one program per (stream, slot pair)
        n = pid // n_pairs
        p = pid % n_pairs
        kk = tl.arange(0, BLOCK_K)
        kmask = kk < K
        acc = tl.zeros((BLOCK_K, BLOCK_K), dtype=tl.float32)  # Σ_j w_j silu(pre_j) over the K×K tile
        for m0 in range(0, M, BLOCK_M):
            mm = m0 + tl.arange(0, BLOCK_M)
            mmask = mm < M
            tile = kmask[:, None] & mmask[None, :]
            a = tl.load(A + n * sa_n + p * sa_p + kk[:, None] * sa_k + mm[None, :] * sa_m,
                        mask=tile, other=0.0).to(tl.float32)  # [BK, BM]  a-side of slot p
            b = tl.load(Bs + n * sb_n + p * sb_p + kk[:, None] * sb_k + mm[None, :] * sb_m,
                        mask=tile, other=0.0).to(tl.float32)  # [BK, BM]  b-side of slot p+1
            s = tl.load(Pr + n * sp_n + p * sp_p + mm * sp_m, mask=mmask, other=0.0).to(tl.float32)  # [BM]
            w = tl.load(W + mm, mask=mmask, other=0.0).to(tl.float32)  # [BM]; 0 beyond M
            pre = a[:, None, :] + b[None, :, :] + s[None, None, :]  # [BK, BK, BM], registers only
            act = pre * tl.sigmoid(pre)  # SiLU
            acc += tl.sum(act * w[None, None, :], axis=2)  # [BK, BK]
        bo = tl.load(Bo).to(tl.float32)
        lg = tl.load(Lg + n * sl_n + p * sl_p + kk * sl_k, mask=kmask, other=0.0).to(tl.float32)  # [BK] ℓ_{p+1}
        out = lg[None, :] + (acc + bo)  # [BK(a), BK(b)]
        tl.store(Out + n * so_n + p * so_p + kk[:, None] * so_a + kk[None, :] * so_b, out,
                 mask=kmask[:, None] & kmask[None, :])

    return triton, transition_scores_kernel


def transition_scores_triton(a_side: Tensor, b_side: Tensor, pair: Tensor, w_out: Tensor, b_out: Tensor,
                             next_logits: Tensor) -> Tensor:
    """Fused Triton scorer (forward only); same signature and semantics as the reference, fp32 out."""
    triton, kernel = _kernel()
    N, P, K, M = a_side.shape
    out = torch.empty(N, P, K, K, device=a_side.device, dtype=torch.float32)
    if N * P == 0:
        return out
    w_out = w_out.reshape(M).contiguous()
    b_out = b_out.reshape(1).contiguous()
    BLOCK_K = max(triton.next_power_of_2(K), 2)
    BLOCK_M = max(min(triton.next_power_of_2(M), max(16, 8192 // (BLOCK_K * BLOCK_K))), 2)
    kernel[(N * P,)](
        a_side, b_side, pair, w_out, b_out, next_logits, out,
        P, K, M,
        *a_side.stride(), *b_side.stride(), *pair.stride(), *next_logits.stride(), *out.stride(),
        BLOCK_K=BLOCK_K, BLOCK_M=BLOCK_M,
    )
    return out
