"""Block-sparse training attention of the drafter: flex attention with a BlockMask.

The multi-anchor training forward (`DFlashDrafter.forward_train`) has, per sequence, A*S queries (every
block's slots) and L + A*S keys (the context, then every block's slots). The rule is the one of
`draftlab.drafter.masks.dense_block_mask`: a slot of block i sees context position j iff
`ctx_mask[b, i, j]` (j < a_i and j valid) and, among the slots, its own block's only. `build_block_mask`
turns that rule into a `BlockMask` (tiles of `tile` x `tile` query/key positions; a tile with no visible
key is skipped, a tile whose keys are all visible skips the mask). Anchors are sorted, so the context part
is near-triangular and the block part is a band on the diagonal: most of the dense path's
[B, h, A*S, L + A*S] scores lie in skipped tiles.

Capability (`flex_supported`): the torch build must have `torch.nn.attention.flex_attention`. On CUDA it
runs compiled (`torch.compile`: fused kernels, forward and backward). On CPU torch 2.13 runs only the
forward, unfused (it materialises the scores) and without gradients: its backward raises
NotImplementedError. So the training path never picks flex on CPU; CPU tests run its forward against the
dense path and check the BlockMask's tiles against the dense mask. Plain torch.
"""
from __future__ import annotations

import functools

import torch
from torch import Tensor

TILE = 128  # flex attention's default tile (query and key positions per BlockMask entry)


@functools.cache
def flex_available() -> bool:
    """Whether this torch build has flex attention (`torch.nn.attention.flex_attention`)."""
    try:
        from torch.nn.attention import flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


def flex_supported(device: torch.device, grad: bool) -> bool:
    """Whether flex attention can run here: CUDA (compiled, with gradients), or CPU for a forward without
    gradients (torch runs flex attention's backward on CUDA only)."""
    if not flex_available():
        return False
    return torch.device(device).type == "cuda" or not grad


def block_mask_mod(ctx_mask: Tensor, block_size: int):
    """The dense block mask's rule as a flex `mask_mod(b, h, q, kv) -> bool`, for ctx_mask [B, A, L] bool:
    query q is slot q % S of block q // S; key kv < L is context position kv (visible iff ctx_mask[b, q // S, kv]),
    key kv >= L is slot (kv - L) % S of block (kv - L) // S (visible iff it is q's own block)."""
    A, L, S = ctx_mask.shape[1], ctx_mask.shape[-1], block_size

    def mask_mod(b, h, q, kv):
        blk = (q // S).clamp(max=A - 1)  # a kernel may evaluate padded query rows past A*S (then discarded)
        own = (kv >= L) & ((kv - L) // S == blk)
        if L == 0:
            return own
        return ((kv < L) & ctx_mask[b, blk, kv.clamp(max=L - 1)]) | own

    return mask_mod


def build_block_mask(ctx_mask: Tensor, block_size: int, tile: int | None = None):
    """ctx_mask [B, A, L] bool -> the BlockMask over queries [A*S] and keys [L + A*S] (shared by every head
    and every layer of one forward), in tiles of `tile` (None = TILE) positions."""
    from torch.nn.attention.flex_attention import create_block_mask

    B, A, L = ctx_mask.shape
    Q = A * block_size
    return create_block_mask(block_mask_mod(ctx_mask, block_size), B, None, Q, L + Q, device=ctx_mask.device,
                             BLOCK_SIZE=tile or TILE)


@functools.cache
def _compiled():
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention)


def _kernel(device: torch.device):
    """flex attention compiled on CUDA (fused kernels); eager elsewhere (CPU: forward only, unfused)."""
    if device.type == "cuda":
        return _compiled()
    from torch.nn.attention.flex_attention import flex_attention

    return flex_attention


def flex_block_attention(q: Tensor, k_ctx: Tensor, v_ctx: Tensor, block_mask, k_blk: Tensor, v_blk: Tensor,
                         scale: float, kernel=None) -> Tensor:
    """Same result as `layers.block_attention`, as one flex attention call with the BlockMask of
    `build_block_mask`. q [B, A, S, h, d]; k_ctx, v_ctx [B, hk, L, d]; k_blk, v_blk [B, A, S, hk, d].
    Returns [B, A, S, h*d]. `kernel` replaces flex attention (same signature; tests)."""
    B, A, S, h, d = q.shape
    hk = k_ctx.shape[1]
    qq = q.reshape(B, A * S, h, d).transpose(1, 2)  # [B, h, A*S, d]
    k = torch.cat([k_ctx.to(q.dtype), k_blk.reshape(B, A * S, hk, d).transpose(1, 2).to(q.dtype)], dim=2)  # [B, hk, L+A*S, d]
    v = torch.cat([v_ctx.to(q.dtype), v_blk.reshape(B, A * S, hk, d).transpose(1, 2).to(q.dtype)], dim=2)
    fn = kernel or _kernel(q.device)
    out = fn(qq, k.contiguous(), v.contiguous(), block_mask=block_mask, scale=scale, enable_gqa=hk != h)  # [B, h, A*S, d]
    return out.transpose(1, 2).reshape(B, A, S, h * d)


def tile_mask(block_mask) -> Tensor:
    """The token-level mask a flex kernel applies for this BlockMask: [B, Q, KV] bool, True where a key is
    computed and unmasked (a tile listed as full: every key; listed as partial: where its mask_mod holds;
    unlisted: none). For tests and inspection (it materialises [B, Q, KV])."""
    bm = block_mask
    B, (Q, KV), (tq, tk) = bm.kv_num_blocks.shape[0], bm.seq_lengths, bm.BLOCK_SIZE
    dev = bm.kv_indices.device
    qi, ki = torch.arange(Q, device=dev), torch.arange(KV, device=dev)
    out = torch.zeros(B, Q, KV, dtype=torch.bool, device=dev)
    for b in range(B):  # head 0: the mask is shared by every head (H = 1)
        mm = bm.mask_mod(torch.tensor(b, device=dev), torch.tensor(0, device=dev), qi[:, None], ki[None, :])  # [Q, KV]
        for r in range(-(-Q // tq)):
            rows = slice(r * tq, min((r + 1) * tq, Q))
            for c in bm.kv_indices[b, 0, r, :bm.kv_num_blocks[b, 0, r]].tolist():  # partial tiles: the mask_mod
                out[b, rows, c * tk:(c + 1) * tk] |= mm[rows, c * tk:(c + 1) * tk]
            if bm.full_kv_num_blocks is not None:  # full tiles: every key, no mask_mod
                for c in bm.full_kv_indices[b, 0, r, :bm.full_kv_num_blocks[b, 0, r]].tolist():
                    out[b, rows, c * tk:(c + 1) * tk] = True
    return out
