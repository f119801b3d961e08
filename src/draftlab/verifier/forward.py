"""The target's forward as the project's own plain-torch loop over a Hugging Face decoder's weights.

Like gpt-fast's model file: embed -> per layer (RMSNorm, attention with rotary positions and grouped K/V, RMSNorm,
SwiGLU MLP, residuals) -> final norm -> head, calling the Hugging Face modules' own weights (and any linear
installed in their place, `kernels/linear.py`) but none of their forward machinery. What it does differently:
- the tap layers' outputs are collected in the loop (no forward hooks); a pass that needs no logits stops at the
  deepest tap;
- K/V go into a `KVCache` the caller owns: written at given slots (`write_at`, per stream) or appended, and every
  new token attends over the buffer's slots through one boolean mask [B, T, slots] (True = may attend) made on the
  device — no additive float mask, no `repeat_kv`: SDPA's grouped-query path reads the K/V heads as they are;
- logits only for the rows asked for (`logits_at`), in float32 (what the accept rule reads);
- rotary tables come from the model's own rotary module (so Llama-3.1's `llama3` scaling, and any other rope type
  transformers knows, is exactly Hugging Face's).
Families: llama (SmolLM2, Llama-3.x), mistral, qwen2 (q/k/v biases live in the Linear modules), qwen3 (q/k RMSNorm
over the head dimension before the rotation). Tests: tests/verifier/test_forward.py (logits and taps equal the Hugging Face
model's, fp32, tolerance from the reference's own error).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from draftlab.compiling import static_buffer


class KVCache:
    """Per-layer K/V buffers [B, kv_heads, capacity, head_dim] with a fill `length` (slots 0..length-1 hold K/V).

    `reserve(T)` makes room for T more slots (capacity doubles when full) and returns the width the next pass
    attends over; a pass writes each layer's K/V into slots [length, length + T) (`write_at=None`) or into the
    slots `write_at` [B, T] gives per stream, and `advance(T)` moves the fill. Dropping streams, re-ordering slots
    (compaction) and cropping keep the capacity, so the survivors do not re-allocate at their next append."""

    def __init__(self, num_layers: int):
        self.k: list[Tensor | None] = [None] * num_layers
        self.v: list[Tensor | None] = [None] * num_layers
        self.length = 0

    @property
    def capacity(self) -> int:
        return 0 if self.k[0] is None else self.k[0].shape[2]

    def get_seq_length(self) -> int:
        return self.length

    def reserve(self, B: int, T: int, kv_heads: int, head_dim: int, dtype, device) -> int:
        need = self.length + T
        if self.k[0] is None or need > self.capacity or self.k[0].shape[0] != B:
            cap = max(need, 2 * self.capacity, 64)
            for i in range(len(self.k)):
                k = torch.empty(B, kv_heads, cap, head_dim, dtype=dtype, device=device)
                v = torch.empty_like(k)
                if self.length and self.k[i] is not None:
                    k[:, :, :self.length] = self.k[i][:, :, :self.length]
                    v[:, :, :self.length] = self.v[i][:, :, :self.length]
                self.k[i], self.v[i] = k, v
        return need

    def write(self, layer: int, k: Tensor, v: Tensor, write_at: Tensor | None) -> tuple[Tensor, Tensor]:
        """k, v [B, kv_heads, T, head_dim] into the layer's buffer (cast to its dtype: an autocast region may hand
        bf16 K/V to a float32 buffer); -> the K/V over the slots the pass attends."""
        T = k.shape[2]
        k, v = k.to(self.k[layer].dtype), v.to(self.v[layer].dtype)
        if write_at is None:
            end = self.length + T
            self.k[layer][:, :, self.length:end] = k
            self.v[layer][:, :, self.length:end] = v
            return self.k[layer][:, :, :end], self.v[layer][:, :, :end]
        idx = write_at[:, None, :, None].expand(-1, k.shape[1], -1, k.shape[3])  # [B, kv_heads, T, head_dim]
        self.k[layer].scatter_(2, idx, k)
        self.v[layer].scatter_(2, idx, v)
        return self.k[layer], self.v[layer]

    def advance(self, T: int) -> None:
        self.length += T

    def crop(self, n: int) -> None:
        """Keep the first n slots."""
        self.length = min(self.length, max(0, n))

    def select_streams(self, idx: Tensor) -> None:
        """Keep the streams `idx` [B'] (long), in that order, at the same capacity."""
        L = self.length
        for i in range(len(self.k)):
            if self.k[i] is None:
                continue
            k = self.k[i].new_empty(idx.numel(), *self.k[i].shape[1:])
            v = self.v[i].new_empty(idx.numel(), *self.v[i].shape[1:])
            k[:, :, :L] = self.k[i][:, :, :L].index_select(0, idx)
            v[:, :, :L] = self.v[i][:, :, :L].index_select(0, idx)
            self.k[i], self.v[i] = static_buffer(k), static_buffer(v)

    def gather_slots(self, index: Tensor) -> None:
        """Re-order every stream's slots in place: index [B, L'] (L' <= length) picks slot ids."""
        W = index.shape[1]
        for i in range(len(self.k)):
            if self.k[i] is None:
                continue
            k, v = self.k[i][:, :, :self.length], self.v[i][:, :, :self.length]
            idx = index[:, None, :, None].expand(-1, k.shape[1], -1, k.shape[-1])
            gk, gv = k.gather(2, idx), v.gather(2, idx)
            self.k[i][:, :, :W] = gk
            self.v[i][:, :, :W] = gv
        self.length = W


def rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def attention(attn, h: Tensor, cos: Tensor, sin: Tensor, cache: KVCache | None, layer: int, mask: Tensor,
              write_at: Tensor | None) -> Tensor:
    """One attention block of a Llama / Qwen family layer over h [B, T, H] (already input-normed)."""
    B, T, _ = h.shape
    hd = attn.head_dim
    q = attn.q_proj(h).view(B, T, -1, hd)
    k = attn.k_proj(h).view(B, T, -1, hd)
    v = attn.v_proj(h).view(B, T, -1, hd).transpose(1, 2)
    if hasattr(attn, "q_norm"):  # Qwen3: RMSNorm over the head dimension, before the rotation
        q, k = attn.q_norm(q), attn.k_norm(k)
    q, k = q.transpose(1, 2), k.transpose(1, 2)  # [B, heads, T, hd]
    c, s = cos[:, None], sin[:, None]  # [B, 1, T, hd]
    q, k = q * c + rotate_half(q) * s, k * c + rotate_half(k) * s
    if cache is not None:
        k, v = cache.write(layer, k, v, write_at)  # [B, kv_heads, slots, hd]
        if k.shape[2] != mask.shape[-1]:  # the pass attends over the first mask-width slots only
            k, v = k[:, :, :mask.shape[-1]], v[:, :, :mask.shape[-1]]
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None], scale=getattr(attn, "scaling", hd ** -0.5),
                                         enable_gqa=q.shape[1] != k.shape[1])
    return attn.o_proj(out.transpose(1, 2).reshape(B, T, -1))


def decoder_forward(model, ids: Tensor, positions: Tensor, mask: Tensor, cache: KVCache | None = None,
                    write_at: Tensor | None = None, taps=(), stop_at_taps: bool = False,
                    logits_at: Tensor | None = None, hidden_only: bool = False):
    """One pass of a Hugging Face *ForCausalLM's weights over ids [B, T] at logical `positions` [B, T].

    mask [B, T, S] bool: the slots each new token attends over (S = the cache's width after this pass's writes,
    or T without a cache). With a cache, K/V are appended (`write_at` None; the caller advances the cache) or
    written at `write_at` [B, T]. -> (logits [B, T', V] float32 or None, taps [B, T, n*H] or None, final-normed
    hidden [B, T', H] or None): T' rows = `logits_at` [B, P] (row indices) when given, else all T;
    `stop_at_taps` ends the pass at the deepest tap (no logits); `hidden_only` returns the normed hidden rows
    instead of logits."""
    inner = model.model
    h = inner.embed_tokens(ids)
    cos, sin = inner.rotary_emb(h, positions)
    want = {int(i): None for i in taps}
    deepest = max(want) if want else -1
    for i, layer in enumerate(inner.layers):
        h = h + attention(layer.self_attn, layer.input_layernorm(h), cos, sin, cache, i, mask, write_at)
        h = h + layer.mlp(layer.post_attention_layernorm(h))
        if i in want:
            want[i] = h
        if stop_at_taps and i == deepest:
            break
    tap = torch.cat([want[int(i)] for i in taps], dim=-1) if taps else None
    if stop_at_taps:
        return None, tap, None
    if logits_at is not None:
        h = h.gather(1, logits_at[:, :, None].expand(-1, -1, h.shape[-1]))
    h = inner.norm(h)
    if hidden_only:
        return None, tap, h
    return model.lm_head(h).float(), tap, None


def slot_plan(lengths: Tensor, new_valid: Tensor, capacity: int) -> tuple[Tensor, Tensor, Tensor]:
    """For T new tokens per stream (new_valid [B, T]) after fills `lengths` [B]: (write slots [B, T] — the next free
    slots for the valid ones, the scratch slot capacity-1 for the rest —, logical positions [B, T], mask
    [B, T, capacity]). Device ops only (it runs inside a compiled step)."""
    rank = new_valid.long().cumsum(-1) - 1  # [B, T] index of each valid token among the new valid ones
    pos = lengths[:, None] + rank.clamp(min=0)
    write = torch.where(new_valid, pos, torch.full_like(pos, capacity - 1))
    upto = torch.where(new_valid, pos + 1, torch.ones_like(pos))  # an invalid token sees slot 0 (no empty row)
    mask = torch.arange(capacity, device=pos.device)[None, None, :] < upto[:, :, None]
    return write, pos, mask


def stream_step(model, cache: KVCache, lengths: Tensor, ids: Tensor, new_valid: Tensor, width: int, taps=(),
                logits_rows: int = 0) -> tuple[Tensor | None, Tensor | None, Tensor]:
    """One pass of the target over static stream slots, as one function (the unit `TargetModel.compile_steps`
    compiles): ids [B, T] after each stream's fill `lengths` [B] — the valid ones (new_valid [B, T]) take the next
    slots —, attending over the first `width` slots. -> (float32 logits of the last `logits_rows` rows, or of all
    rows when 0; the taps; the new fills)."""
    write, pos, mask = slot_plan(lengths, new_valid, cache.capacity)
    B, T = ids.shape
    keep = None if not logits_rows else torch.arange(T - logits_rows, T, device=ids.device).expand(B, -1)
    logits, tap, _ = decoder_forward(model, ids, pos, mask[:, :, :width], cache, write, taps, logits_at=keep)
    return logits, tap, lengths + new_valid.long().sum(-1)


def tree_plan(lengths: Tensor, anc: Tensor, depth: Tensor, capacity: int) -> tuple[Tensor, Tensor, Tensor]:
    """For a tree of N nodes per stream after fills `lengths` [B] (anc [B, N, N] bool: node j is node i or its
    ancestor; depth [B, N]): (write slots [B, N] — node i at slot lengths + i —, logical positions lengths + depth,
    mask [B, N, capacity]: the committed slots, and the slots of the node's ancestors and itself). Device ops only."""
    B, N = depth.shape
    write = lengths[:, None] + torch.arange(N, device=depth.device)[None, :]
    rel = torch.arange(capacity, device=depth.device)[None, :] - lengths[:, None]  # [B, capacity] slot - fill
    in_tree = (rel >= 0) & (rel < N)
    tree = anc.gather(2, rel.clamp(0, N - 1)[:, None, :].expand(B, N, capacity)) & in_tree[:, None, :]
    return write, lengths[:, None] + depth, (rel < 0)[:, None, :] | tree


def tree_step(model, cache: KVCache, lengths: Tensor, ids: Tensor, anc: Tensor, depth: Tensor, width: int, taps=()):
    """One pass of the target over a tree of N nodes per stream (ids [B, N], `tree_plan`), attending over the first
    `width` slots: the unit `TargetModel.compile_steps` compiles for tree rounds. -> (float32 logits [B, N, V], the
    taps). The fills do not move: the caller keeps the accepted path (`StreamCache.keep_path`)."""
    write, pos, mask = tree_plan(lengths, anc, depth, cache.capacity)
    logits, tap, _ = decoder_forward(model, ids, pos, mask[:, :, :width], cache, write, taps)
    return logits, tap
