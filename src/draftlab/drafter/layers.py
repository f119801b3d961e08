"""The DFlash drafter's building blocks (docs/algorithms.md "DFlash"): RMSNorm, rotary positions, the block attention
(split: context and block parts, exact; dense: one SDPA call with the block mask; flex: block-sparse flex
attention with a BlockMask, `draftlab.drafter.flex`, for the training forward) and the decoder layer
whose queries attend to [context K/V; the block's own K/V]. Plain torch; `draftlab.drafter.model`
assembles them into the drafter."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from draftlab.drafter.arch import DrafterArch
from draftlab.drafter.flex import flex_block_attention


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:  # [..., dim]
        dt = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dt)


def rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x [..., d]; cos/sin broadcastable to x (HF half-split convention)."""
    return x * cos.to(x.dtype) + rotate_half(x) * sin.to(x.dtype)


class Rotary(nn.Module):
    def __init__(self, head_dim: int, theta: float):
        super().__init__()
        inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        self.register_buffer("inv_freq", inv, persistent=False)

    def forward(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """positions [...] long -> cos, sin [..., head_dim] float32."""
        f = positions.float()[..., None] * self.inv_freq.float()  # [..., d/2]
        emb = torch.cat([f, f], dim=-1)
        return emb.cos(), emb.sin()


def block_attention(q: Tensor, k_ctx: Tensor, v_ctx: Tensor, ctx_mask: Tensor, k_blk: Tensor, v_blk: Tensor,
                    scale: float) -> Tensor:
    """Attention of block slots over [their visible context; their own block] with one joint softmax.

    q [B, A, S, h, d]; k_ctx, v_ctx [B, hk, L, d]; ctx_mask [B, A, L] bool (True = visible);
    k_blk, v_blk [B, A, S, hk, d]. Returns [B, A, S, h*d]. A block never sees another block: the
    block part is computed per block ([S, S] scores), so no cross-block scores exist at all.
    """
    B, A, S, h, d = q.shape
    hk, L = k_ctx.shape[1], k_ctx.shape[2]
    g = h // hk  # query heads per kv head (kv head i serves query heads i*g .. i*g+g-1)
    # contiguous [B, hk, A, g, S, d] layout: plain batched matmuls (einsum on strided views is slow on CPU)
    qg = q.reshape(B, A, S, hk, g, d).permute(0, 3, 1, 4, 2, 5).contiguous()  # [B, hk, A, g, S, d]
    kb = k_blk.permute(0, 3, 1, 2, 4).contiguous()  # [B, hk, A, S, d]
    vb = v_blk.permute(0, 3, 1, 2, 4).contiguous()
    s_ctx = torch.matmul(qg.view(B, hk, A * g * S, d), k_ctx.transpose(-1, -2))  # [B, hk, A*g*S, L]
    s_ctx = s_ctx.view(B, hk, A, g, S, L).float() * scale
    s_ctx = s_ctx.masked_fill(~ctx_mask[:, None, :, None, None, :], float("-inf"))
    s_blk = torch.matmul(qg.view(B, hk, A, g * S, d), kb.transpose(-1, -2))  # [B, hk, A, g*S, S]
    s_blk = s_blk.view(B, hk, A, g, S, S).float() * scale
    p = torch.cat([s_ctx, s_blk], dim=-1).softmax(-1).to(q.dtype)  # block keys keep every row finite
    p_ctx, p_blk = p[..., :L], p[..., L:]
    out = torch.matmul(p_ctx.reshape(B, hk, A * g * S, L), v_ctx).view(B, hk, A, g, S, d)
    out = out + torch.matmul(p_blk.reshape(B, hk, A, g * S, S), vb).view(B, hk, A, g, S, d)
    return out.permute(0, 2, 4, 1, 3, 5).reshape(B, A, S, h * d)


def dense_block_attention(q: Tensor, k_ctx: Tensor, v_ctx: Tensor, ctx_mask: Tensor, k_blk: Tensor, v_blk: Tensor,
                          scale: float) -> Tensor:
    """Same result as `block_attention`, as one SDPA call over keys [context; every block's slots]
    with the dense block mask (a block sees only itself among the blocks). Lets CUDA use its fused
    memory-efficient kernels instead of materialising [B, h, A, S, L] probabilities. Shapes as there."""
    B, A, S, h, d = q.shape
    hk, L = k_ctx.shape[1], k_ctx.shape[2]
    qq = q.reshape(B, A * S, h, d).transpose(1, 2)  # [B, h, A*S, d]
    k = torch.cat([k_ctx, k_blk.reshape(B, A * S, hk, d).transpose(1, 2)], dim=2)  # [B, hk, L+A*S, d]
    v = torch.cat([v_ctx, v_blk.reshape(B, A * S, hk, d).transpose(1, 2)], dim=2)
    if hk != h:
        k, v = k.repeat_interleave(h // hk, dim=1), v.repeat_interleave(h // hk, dim=1)
    ctx = ctx_mask[:, :, None, :].expand(B, A, S, L).reshape(B, A * S, L)
    own = torch.eye(A, dtype=torch.bool, device=q.device).repeat_interleave(S, 0).repeat_interleave(S, 1)  # [A*S, A*S]
    mask = torch.cat([ctx, own[None].expand(B, -1, -1)], dim=-1)[:, None]  # [B, 1, A*S, L+A*S]
    out = F.scaled_dot_product_attention(qq, k, v, attn_mask=mask, scale=scale)  # [B, h, A*S, d]
    return out.transpose(1, 2).reshape(B, A, S, h * d)


# flex reads the BlockMask of `flex.build_block_mask` where the others read ctx_mask [B, A, L]
ATTENTION = {"split": lambda *a: block_attention(*a), "dense": lambda *a: dense_block_attention(*a),
             "flex": lambda *a: flex_block_attention(*a)}


class DrafterLayer(nn.Module):
    """One Qwen3-style decoder layer whose attention also reads the injected context K/V."""

    def __init__(self, arch: DrafterArch):
        super().__init__()
        H, h, hk, d = arch.hidden_size, arch.num_heads, arch.num_kv_heads, arch.head_dim
        self.h, self.hk, self.d = h, hk, d
        self.scale = d ** -0.5
        self.q_proj = nn.Linear(H, h * d, bias=False)
        self.k_proj = nn.Linear(H, hk * d, bias=False)
        self.v_proj = nn.Linear(H, hk * d, bias=False)
        self.o_proj = nn.Linear(h * d, H, bias=False)
        self.q_norm = RMSNorm(d, arch.rms_norm_eps)
        self.k_norm = RMSNorm(d, arch.rms_norm_eps)
        self.input_layernorm = RMSNorm(H, arch.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(H, arch.rms_norm_eps)
        self.gate_proj = nn.Linear(H, arch.intermediate_size, bias=False)
        self.up_proj = nn.Linear(H, arch.intermediate_size, bias=False)
        self.down_proj = nn.Linear(arch.intermediate_size, H, bias=False)

    def project_context(self, ctx: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
        """ctx [B, T, H] (already fc+norm), cos/sin [B, T, d] -> k, v [B, hk, T, d] (k normed, rotated)."""
        B, T, _ = ctx.shape
        k = self.k_norm(self.k_proj(ctx).view(B, T, self.hk, self.d))
        k = apply_rope(k, cos[:, :, None], sin[:, :, None])
        v = self.v_proj(ctx).view(B, T, self.hk, self.d)
        return k.transpose(1, 2), v.transpose(1, 2)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, k_ctx: Tensor, v_ctx: Tensor, ctx_mask: Tensor,
                attention: str = "split") -> Tensor:
        """x [B, A, S, H]; cos/sin [B, A, S, d]; k_ctx/v_ctx [B, hk, L, d]; ctx_mask [B, A, L] bool (for
        attention="flex": the forward's BlockMask, `draftlab.drafter.flex.build_block_mask`)."""
        B, A, S, _ = x.shape
        hs = self.input_layernorm(x)
        c, s = cos[..., None, :], sin[..., None, :]  # [B, A, S, 1, d]
        q = apply_rope(self.q_norm(self.q_proj(hs).view(B, A, S, self.h, self.d)), c, s)
        kb = apply_rope(self.k_norm(self.k_proj(hs).view(B, A, S, self.hk, self.d)), c, s)
        vb = self.v_proj(hs).view(B, A, S, self.hk, self.d)
        x = x + self.o_proj(ATTENTION[attention](q, k_ctx, v_ctx, ctx_mask, kb, vb, self.scale))
        hs = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(hs)) * self.up_proj(hs))
