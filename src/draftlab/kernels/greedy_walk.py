"""Prefix-first greedy walk over DCOCO transition scores (docs/algorithms.md "Path rules"): reference + Triton kernel.

    y_1 = start;  y_{p+1} = argmax_b S_p(y_p, b)  for p = 1..n−1

Inputs: scores [N, P, K, K] (P = n−1; scores[:, p, a, b] = S_p(a, b)), start [N] long (slot 1's
candidate index, the drafter's top). Output: chosen candidate indices [N, n] long. Ties go to
the lowest index in both implementations (torch.argmax / tl.argmax), so at Δθ ≡ 0 the walk
returns the candidates' own argmax.
"""
from __future__ import annotations

import functools

import torch
from torch import Tensor


def greedy_walk_torch(scores: Tensor, start: Tensor) -> Tensor:
    N, P, K, _ = scores.shape
    rows = torch.arange(N, device=scores.device)
    cur = start.to(device=scores.device, dtype=torch.long)  # [N]
    path = [cur]
    for p in range(P):
        cur = scores[rows, p, cur].argmax(-1)  # [N]  argmax_b S_p(y_p, b)
        path.append(cur)
    return torch.stack(path, dim=1)  # [N, n]


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def greedy_walk_kernel(S, Start, Out, n_pairs, K, ss_n, ss_p, ss_a, ss_b, so_n, so_p,
                           BLOCK_K: tl.constexpr):
        n = tl.program_id(0)  # one program per stream: the walk is sequential in p, O(K) per step
        kk = tl.arange(0, BLOCK_K)
        kmask = kk < K
        cur = tl.load(Start + n).to(tl.int64)
        tl.store(Out + n * so_n, cur)
        for p in range(0, n_pairs):
            row = tl.load(S + n * ss_n + p * ss_p + cur * ss_a + kk * ss_b, mask=kmask,
                          other=float("-inf")).to(tl.float32)  # [BK]  S_p(y_p, ·)
            cur = tl.argmax(row, axis=0).to(tl.int64)
            tl.store(Out + n * so_n + (p + 1) * so_p, cur)

    return triton, greedy_walk_kernel


def greedy_walk_triton(scores: Tensor, start: Tensor) -> Tensor:
    triton, kernel = _kernel()
    N, P, K, _ = scores.shape
    out = torch.empty(N, P + 1, device=scores.device, dtype=torch.long)
    if N == 0:
        return out
    start = start.to(device=scores.device, dtype=torch.long).contiguous()
    kernel[(N,)](scores, start, out, P, K, *scores.stride(), *out.stride(),
                 BLOCK_K=max(triton.next_power_of_2(K), 2))
    return out
