"""Inverse-CDF branch sampling in vocabulary chunks: no full-vocabulary float64 softmax or cumsum.

`tree.sample_branches` draws one token per branch slot from softmax(z), z = logits / T, with one
uniform u per slot. Its unchunked path builds probs [N, V] fp32 and a float64 cdf [N, V]; at the paper's
SpecOPD shape (30,720 rows × 152K) that is ~37 GB per tensor. `sample_rows_chunked` draws from the same
distribution with the same uniforms, holding only a [rows, C] chunk at a time:

    m   = max_v z_v                                   (pass 1, chunk by chunk: max is exact in any order)
    w_v = round(exp(z_v − m) · 2^k)  int64            (k = 62 − bitlen(V): Σ_v w_v < 2^62 fits int64)
    t   = min(floor(u · Σ_v w_v), Σ_v w_v − 1)
    y   = the smallest v with Σ_{i≤v} w_i > t         (pass 2: chunk sums; pass 3: cumsum in one chunk)

Exact by design: every sum is an integer sum, which is associative, so the chunk sums, their prefix and
the cumsum inside the chosen chunk equal the one-chunk cumsum whatever the chunk size, and t is the same
scalar formula in both. The only operation whose floating-point result may depend on the tensor layout
is the elementwise float64 exp (≤ 1 ulp between vectorised and scalar code paths); a 1-ulp change moves
one w_v by at most one unit and changes the drawn token only if t lands on that unit (probability
≲ 2^-k per row, k ≥ 44 for V ≤ 2^18). Zero-weight tokens (p < 2^-(k+1) relative to the mode) are
never drawn, a total-variation change ≤ V · 2^-(k+1) ≈ 4e-9 at V = 152K; against the unchunked float
path (fp32 softmax, float64 cdf) a draw can differ only where u falls within the fp32 rounding of a cdf
boundary (≈ 1e-7 of the mass): the tests check equality on both.
"""
from __future__ import annotations

import torch
from torch import Tensor


def grid_bits(V: int) -> int:
    """Fixed-point bits k of the weights: V · 2^k ≤ 2^62 (a row's weight sum fits int64)."""
    return 62 - max(int(V), 2).bit_length()


def _weights(z: Tensor, m: Tensor, k: int) -> Tensor:
    """z [R, C] fp32 scaled logits, m [R] their row max -> int64 weights round(exp(z − m) · 2^k)."""
    return torch.round(torch.exp(z.double() - m.double()[:, None]) * float(2 ** k)).long()


@torch.no_grad()
def sample_rows_chunked(logits: Tensor, u: Tensor, temperature: float, vocab_chunk: int) -> Tensor:
    """logits [N, V], u [N] in [0, 1) -> indices [N] long drawn from softmax(logits / T) by the
    fixed-point inverse CDF above, `vocab_chunk` columns at a time (≥ V: one chunk)."""
    N, V = logits.shape
    dev = logits.device
    C = max(1, min(int(vocab_chunk), V))
    k = grid_bits(V)
    bounds = [(c0, min(c0 + C, V)) for c0 in range(0, V, C)]
    z = lambda c0, c1: logits[:, c0:c1].float() / temperature  # noqa: E731  [N, C] fp32: exact elementwise
    m = torch.stack([z(c0, c1).max(-1).values for c0, c1 in bounds], -1).max(-1).values  # [N]
    sums = torch.stack([_weights(z(c0, c1), m, k).sum(-1) for c0, c1 in bounds], -1)  # [N, n_chunks] int64
    prefix = sums.cumsum(-1)  # [N, n_chunks]: Σ of every chunk up to and including c (integers: exact)
    total = prefix[:, -1]
    t = torch.minimum(torch.floor(u.to(dev, torch.float64) * total.double()).long(), total - 1)  # [N]
    chunk = torch.searchsorted(prefix, t[:, None], right=True).squeeze(-1)  # [N] the chunk holding the draw
    base = torch.where(chunk > 0, prefix.gather(1, (chunk - 1).clamp(min=0)[:, None]).squeeze(-1),
                       torch.zeros_like(total))  # [N] mass before that chunk
    out = torch.empty(N, dtype=torch.long, device=dev)
    for c in chunk.unique().tolist():
        rows = (chunk == c).nonzero().squeeze(-1)  # [r]
        c0, c1 = bounds[c]
        zc = logits[rows, c0:c1].float() / temperature  # [r, C]
        cum = _weights(zc, m[rows], k).cumsum(-1) + base[rows, None]  # [r, C] the cdf inside the chunk
        out[rows] = c0 + torch.searchsorted(cum, t[rows, None], right=True).squeeze(-1).clamp(max=c1 - c0 - 1)
    return out
