"""The DFlash parallel drafter (docs/algorithms.md "DFlash") as a plain torch module.

Architecture (as in z-lab's DFlash V1):
- Shared with the target and frozen: the token embedding (block inputs) and the LM head (logits).
  They are *referenced*, never registered as sub-modules, so they are neither trained nor saved.
- Context: the target's tap features of each committed position, concatenated ->
  `ctx = hidden_norm(fc(taps))` (Linear, no bias, then RMSNorm).
- `num_layers` Qwen3-style decoder layers at the target's width (pre-RMSNorm, QK-norm, rotary
  positions, SwiGLU MLP). In every layer the block's queries attend to keys/values
  `[k_proj(ctx); k_proj(x)]`: context positions first, then the block's own slots, with rotary at
  logical positions; non-causal inside the block. The context is *not* re-normalised per layer.
- Output: the drafter's own final RMSNorm, then the target's LM head (restricted to the draft
  vocabulary when one is set). The target's final norm is not applied: DFlash trains its own
  norm in front of the shared head (`target.lm_head(drafter.norm(h))`).

Two forward paths share every parameter and the same attention routine:
- training: `forward_train` runs all blocks of a sequence in one pass (each block sees context
  strictly before its anchor, bidirectional inside itself, never another block);
  its attention is `train_attention` (auto: block-sparse flex attention on CUDA, `draftlab.drafter.flex`;
  the split path on CPU);
- inference: `new_state` / `extend_context` cache each layer's rotated context K/V (ragged batches
  keep rejected slots as masked holes), `block_input` builds each stream's block ids and `draft` runs
  one block per stream.

Seeded block drafting (docs/algorithms.md "Seeded block drafting", `arch.seed = "lookup"`): slots 1..n of a block carry
the prompt-lookup continuation of x_{<=a} (`draftlab.ngram`) instead of MASK where it exists — teacher-forced in
`forward_train` (`train_seeds`, or the batch's precomputed seeds), per stream at inference (the state
tracks each stream's committed text). Everything else is unchanged; `seed = "none"` is the paper's block.
With `arch.seed_logit` and a draft vocabulary, a seed outside that vocabulary gets its own logit (its full
LM-head row) as one extra column, so a right seed can always be kept (`logits(hidden, seeds)`, `to_target`).
With `arch.seed_bias` > 0, each proposed slot k has a learned scalar `seed_bias[k-1]` (initial value
`arch.seed_bias`) added to the logit of its seed, in the draft vocabulary or on the seed column: the drafter
copies its seeds at initialisation and training decides where the context overrides them.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from draftlab.compiling import compiled_steps
from draftlab.drafter.arch import FORMAT, DrafterArch, DrafterDesign, arch_from_target  # noqa: F401  (re-exported)
from draftlab.drafter.flex import build_block_mask, flex_available, flex_supported
from draftlab.drafter.layers import DrafterLayer, RMSNorm, Rotary
from draftlab.drafter.masks import CONVENTION, block_input_ids, block_positions, context_mask
from draftlab.drafter.state import DraftOutput, DrafterState, seed_column_ids  # noqa: F401  (re-exported)
from draftlab.drafter.steps import block_step, context_step, pad_context, padded_width
from draftlab.drafter.vocab import target_to_draft
from draftlab.errors import DraftlabError
from draftlab.kernels.linear import decode_linear
from draftlab.ngram import StreamSeeds, sequence_seeds

# ---- the drafter ----------------------------------------------------------------------------------------


class DFlashDrafter(nn.Module):
    decode_plan = None  # the head's products by kernels.linear.decode_linear under this plan (set by its install)
    compiled = "off"  # what runs the inference passes (`compile_steps`)

    def __init__(self, arch: DrafterArch, embed_tokens: nn.Embedding, lm_head: nn.Linear, vocab: Tensor | None = None):
        super().__init__()
        if arch.convention != CONVENTION:
            raise ValueError(f"unsupported slot convention {arch.convention!r}; only {CONVENTION!r}")
        self.arch = arch
        # shared, frozen, not registered (not trained, not saved, not moved by .to())
        self.__dict__["_shared"] = (embed_tokens, lm_head)
        H = arch.hidden_size
        self.tap_norms = nn.ModuleList(RMSNorm(H, arch.rms_norm_eps) for _ in range(arch.n_taps)) if arch.tap_norm else None
        self.fc = nn.Linear(arch.n_taps * H, H, bias=False)
        self.hidden_norm = RMSNorm(H, arch.rms_norm_eps)
        self.layers = nn.ModuleList(DrafterLayer(arch) for _ in range(arch.num_layers))
        self.norm = RMSNorm(H, arch.rms_norm_eps)
        self.rotary = Rotary(arch.head_dim, arch.rope_theta)
        self.attention = "auto"  # auto (split on CPU, dense SDPA on CUDA) | split | dense; a runtime choice
        # the training forward's (`forward_train`): auto (flex on CUDA, else `attention`) | split | dense | flex
        self.train_attention = "auto"
        if vocab is not None:
            vocab = vocab.to(device=lm_head.weight.device, dtype=torch.long)
            if vocab.numel() != arch.draft_vocab_size:
                raise ValueError(f"draft vocabulary has {vocab.numel()} ids, arch says {arch.draft_vocab_size}")
            self.register_buffer("draft_vocab", vocab)  # saved: part of the checkpoint
            self.register_buffer("head_weight", lm_head.weight.detach()[vocab].clone(), persistent=False)
            bias = getattr(lm_head, "bias", None)
            self.register_buffer("head_bias", None if bias is None else bias.detach()[vocab].clone(), persistent=False)
            in_draft = torch.zeros(arch.target_vocab_size, dtype=torch.bool, device=vocab.device).index_fill_(0, vocab, True)
            self.register_buffer("in_draft", in_draft, persistent=False)  # [V] target id -> in the draft vocabulary
        else:
            if arch.draft_vocab_size:
                raise ValueError("arch has a draft vocabulary but none was given")
            self.draft_vocab = None
        # the seed bias (arch.seed_bias > 0): [n] one learned logit offset per proposed slot, for its seed
        self.seed_bias = nn.Parameter(torch.empty(arch.block_size - 1)) if arch.seeded and arch.seed_bias else None
        if self.seed_bias is not None and vocab is not None:  # [V] target id -> draft index, -1 outside
            self.register_buffer("draft_index", target_to_draft(vocab, arch.target_vocab_size), persistent=False)
        self.reset_parameters()

    @classmethod
    def from_target(cls, arch: DrafterArch, target, vocab: Tensor | None = None) -> "DFlashDrafter":
        return cls(arch, target.embed_tokens, target.lm_head, vocab).to(target.device)

    def reset_parameters(self) -> None:
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=self.arch.initializer_range)
            elif isinstance(m, RMSNorm):
                nn.init.ones_(m.weight)
        nn.init.constant_(self.norm.weight, self.arch.out_norm_init)
        if self.arch.init_block_heads:
            self.init_block_heads(self.arch.init_block_heads)
        if self.seed_bias is not None:
            nn.init.constant_(self.seed_bias, self.arch.seed_bias)

    @torch.no_grad()
    def init_block_heads(self, n_kv: int) -> None:
        """Start `n_kv` kv heads of the first layer (and the query heads they serve) attending to the
        block's own slots. At random init a MASK slot's attention is spread evenly over hundreds of
        context positions and the 8 block slots, so the one slot that carries the last token (slot 0)
        gets ~1/300 of it and the gradient that would teach the drafter to read it is as diluted.
        Token embeddings share a common direction m (the mean of the RMS-normalised embedding rows):
        these heads' keys read only m along their lowest-frequency rotary pair (so the score does not
        depend on position), their queries point the same way, and `fc` is made orthogonal to m so
        context keys score 0. Every block slot then scores +8 (QK-norm, head_dim d: sqrt(d)*sqrt(d)/sqrt(d))
        against 0 for the context: ~99% of these heads' attention lies on the block at init."""
        a = self.arch
        G, d = a.num_heads // a.num_kv_heads, a.head_dim
        n_kv = min(n_kv, a.num_kv_heads)
        E = self.embed_tokens.weight.detach().float()
        rows = E if self.draft_vocab is None else E[self.draft_vocab.to(E.device)]
        m = (rows / rows.pow(2).mean(-1, keepdim=True).add(a.rms_norm_eps).sqrt()).mean(0)
        m = (m / m.norm()).to(self.fc.weight)  # [H]
        self.fc.weight -= m[:, None] * (m[None, :] @ self.fc.weight)  # ctx ⊥ m
        layer, lo = self.layers[0], d // 2 - 1  # rotary pair (lo, d-1) has the lowest frequency
        for g in range(n_kv):
            layer.k_proj.weight[g * d:(g + 1) * d] = 0.0
            layer.k_proj.weight[g * d + lo] = m
            for qh in range(g * G, (g + 1) * G):
                layer.q_proj.weight[qh * d:(qh + 1) * d] = 0.0
                layer.q_proj.weight[qh * d + lo] = m

    # ---- facts -------------------------------------------------------------------------------------
    @property
    def embed_tokens(self) -> nn.Embedding:
        return self._shared[0]

    @property
    def lm_head(self) -> nn.Linear:
        return self._shared[1]

    @property
    def block_size(self) -> int:
        return self.arch.block_size

    @property
    def mask_token_id(self) -> int:
        return self.arch.mask_token_id

    @property
    def target_layer_ids(self) -> list[int]:
        return list(self.arch.target_layer_ids)

    @property
    def seeded(self) -> bool:
        """Whether `block_input` puts seeds in slots 1..m (the engine then records them per round)."""
        return self.arch.seeded

    @property
    def device(self) -> torch.device:
        return self.fc.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.fc.weight.dtype

    def num_trainable_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def num_frozen_parameters(self) -> int:
        """Shared target parameters the drafter uses (embedding + LM head; counted once when tied)."""
        seen = {}
        for m in self._shared:
            for p in m.parameters():
                seen[p.data_ptr()] = p.numel()
        return sum(seen.values())

    def attention_impl(self) -> str:
        if self.attention != "auto":
            return self.attention
        return "dense" if self.device.type == "cuda" else "split"

    def train_attention_impl(self, grad: bool) -> str:
        """The attention of `forward_train`: `train_attention`, where auto = block-sparse flex attention on CUDA
        (`draftlab.drafter.flex`), else `attention_impl()` (split on CPU). grad: whether gradients are needed
        (flex attention has no backward on CPU)."""
        choice = self.train_attention
        if choice == "auto":
            return "flex" if self.device.type == "cuda" and flex_supported(self.device, grad) else self.attention_impl()
        if choice == "flex" and not flex_supported(self.device, grad):
            why = ("this torch build has no torch.nn.attention.flex_attention" if not flex_available() else
                   f"torch {torch.__version__} runs flex attention's backward on CUDA only")
            raise DraftlabError(f"train_attention=flex cannot train on {self.device.type}: {why}; "
                                f"use train_attention=auto, split or dense")
        if choice not in ("split", "dense", "flex"):
            raise DraftlabError(f"train_attention={choice!r} is not one of auto, split, dense, flex")
        return choice

    # ---- shared pieces of both paths --------------------------------------------------------------
    def context_rows(self, feats: Tensor) -> Tensor:
        """The context fusion: feats [..., n_taps*H] (target taps) -> ctx [..., H] = hidden_norm(fc(taps))."""
        feats = feats.to(self.dtype)
        if self.tap_norms is not None:  # per-tap RMSNorm: [..., n_taps, H] -> [..., n_taps*H]
            parts = feats.unflatten(-1, (self.arch.n_taps, self.arch.hidden_size)).unbind(-2)
            feats = torch.cat([norm(x) for norm, x in zip(self.tap_norms, parts)], dim=-1)
        return self.hidden_norm(self.fc(feats))

    def project_context(self, feats: Tensor, positions: Tensor) -> tuple[list[Tensor], list[Tensor]]:
        """feats [B, T, n_taps*H] (target taps), positions [B, T] -> per-layer k, v [B, hk, T, d]."""
        ctx = self.context_rows(feats)  # [B, T, H]
        cos, sin = self.rotary(positions)  # [B, T, d]
        kv = [layer.project_context(ctx, cos, sin) for layer in self.layers]
        return [k for k, _ in kv], [v for _, v in kv]

    def run_blocks(self, block_ids: Tensor, block_pos: Tensor, keys: list[Tensor], values: list[Tensor],
                   ctx_mask: Tensor, attention: str | None = None) -> Tensor:
        """block_ids, block_pos [B, A, S]; per-layer context k/v [B, hk, L, d]; ctx_mask [B, A, L]; attention:
        split | dense | flex (None = `attention_impl()`) -> final hidden states [B, A, S, H] (after the
        drafter's own norm)."""
        with torch.no_grad():
            x = self.embed_tokens(block_ids)  # [B, A, S, H], frozen
        x = x.to(self.dtype)
        cos, sin = self.rotary(block_pos)  # [B, A, S, d]
        attention = attention or self.attention_impl()
        if attention == "flex":  # one BlockMask of the same rule, shared by every layer
            ctx_mask = build_block_mask(ctx_mask, self.block_size)
        for layer, k, v in zip(self.layers, keys, values):
            x = layer(x, cos, sin, k, v, ctx_mask, attention)
        return self.norm(x)

    def logits(self, hidden: Tensor, seeds: Tensor | None = None, slots: Tensor | None = None) -> Tensor:
        """hidden [..., H] -> float32 logits [..., Vd] through the shared (frozen) LM head; with the seed
        column (`seed_column`) and the slots' seeds [...] -> [..., Vd+1]: the last column is the seed's own
        logit from its full LM-head row where the seed lies outside the draft vocabulary, -inf elsewhere.
        With the seed bias, slot k's seed logit gains seed_bias[k-1]; slots [...] (broadcastable to seeds) are
        the rows' slot indices, None = the last dim of seeds is slots 1..w. Seeds are read only when
        `reads_seeds`."""
        if self.draft_vocab is None:
            w, b = self.lm_head.weight, getattr(self.lm_head, "bias", None)
        else:
            w, b = self.head_weight, self.head_bias
        flat = hidden.reshape(-1, hidden.shape[-1]).to(w.dtype)  # 2-D: a strided N-D input becomes a slow bmm
        out = decode_linear(flat, w, b, self) if self.decode_plan is not None else F.linear(flat, w, b)
        out = out.float().view(*hidden.shape[:-1], w.shape[0])
        if seeds is None or not self.reads_seeds:
            return out
        if self.seed_column:
            ex = self.seed_ids(seeds)  # [...]
            rows = self.lm_head.weight[ex.clamp(min=0)]  # [..., H] the seeds' full-head rows (frozen)
            col = (hidden.to(rows.dtype) * rows).sum(-1).float()  # [...]
            bias = getattr(self.lm_head, "bias", None)
            if bias is not None:
                col = col + bias[ex.clamp(min=0)].float()
            out = torch.cat([out, col.masked_fill(ex < 0, float("-inf"))[..., None]], -1)
        if self.seed_bias is not None:
            out = self.add_seed_bias(out, seeds.to(out.device), slots)
        return out

    def add_seed_bias(self, logits: Tensor, seeds: Tensor, slots: Tensor | None) -> Tensor:
        """logits [..., Vd(+1)] + seed_bias[slot-1] at each row's seed column: its draft index, the seed column
        (index Vd) for a seed outside the draft vocabulary, none where the seed is MASK or cannot be expressed."""
        n = self.arch.block_size - 1
        if slots is None:
            slots = torch.arange(1, seeds.shape[-1] + 1, device=seeds.device)  # [w]: seeds [..., w] = slots 1..w
        b = self.seed_bias.float()[(slots.to(seeds.device) - 1).clamp(0, n - 1)].expand(seeds.shape)  # [...]
        if self.draft_vocab is None:
            idx = seeds
        else:
            idx = self.draft_index[seeds]  # [...] -1 outside the draft vocabulary
            if self.seed_column:
                idx = torch.where(idx < 0, torch.full_like(idx, self.arch.draft_vocab_size), idx)
        ok = (seeds != self.mask_token_id) & (idx >= 0)  # [...]
        return logits.scatter_add(-1, idx.clamp(min=0)[..., None], (b * ok)[..., None])

    # ---- the seed column (arch.seed_logit): a seed outside the draft vocabulary stays expressible ---------
    @property
    def seed_column(self) -> bool:
        return self.arch.seeded and self.arch.seed_logit and self.draft_vocab is not None

    @property
    def reads_seeds(self) -> bool:
        """Whether `logits` reads the slots' seeds (the seed column or the seed bias)."""
        return self.seed_column or self.seed_bias is not None

    def seed_ids(self, seeds: Tensor) -> Tensor:
        """seeds [...] (target ids or MASK) -> the seed column's id [...]: the seed where it is not MASK and
        lies outside the draft vocabulary (elsewhere the draft vocabulary already expresses it), else -1."""
        seeds = seeds.to(self.in_draft.device)
        ok = (seeds != self.mask_token_id) & ~self.in_draft[seeds]
        return torch.where(ok, seeds, torch.full_like(seeds, -1))

    def to_target(self, idx: Tensor, seeds: Tensor | None = None) -> Tensor:
        """Draft indices idx [...] -> target ids; index Vd (the seed column) -> the seed (seeds broadcastable)."""
        if self.draft_vocab is None:
            return idx
        if seeds is None or not self.seed_column:
            return self.draft_vocab[idx]
        return seed_column_ids(idx, self.draft_vocab, self.seed_ids(seeds))

    # ---- training path ------------------------------------------------------------------------------
    def forward_train(self, feats: Tensor, ctx_valid: Tensor, input_ids: Tensor, anchors: Tensor,
                      seeds: Tensor | None = None) -> Tensor:
        """All blocks of each sequence in one pass.

        feats [B, L, n_taps*H]: tap features of positions 0..L-1 (logical position = index);
        ctx_valid [B, L] bool (False = padding); input_ids [B, T] token ids (T > every anchor);
        anchors [B, A] long; seeds [B, A, n] (a seeded drafter's slots 1..n, `train_seeds`; None =
        computed here from input_ids). Returns hidden [B, A, S, H]; block i sees context j < anchors[:, i].
        """
        B, L, _ = feats.shape
        pos = torch.arange(L, device=feats.device).expand(B, L)
        keys, values = self.project_context(feats, pos)
        if self.arch.seeded and seeds is None:
            seeds = self.train_seeds(input_ids, anchors)
        ids = block_input_ids(input_ids, anchors, self.block_size, self.mask_token_id,
                              seeds if self.arch.seeded else None)  # [B, A, S]
        return self.run_blocks(ids, block_positions(anchors, self.block_size), keys, values,
                               context_mask(anchors, ctx_valid), self.train_attention_impl(torch.is_grad_enabled()))

    def train_seeds(self, input_ids: Tensor, anchors: Tensor, lengths: Tensor | None = None) -> Tensor:
        """Teacher-forced seeds [B, A, n] of every anchor (`draftlab.ngram.sequence_seeds`: from x_{<=a})."""
        a = self.arch
        return sequence_seeds(input_ids, anchors, a.block_size - 1, a.mask_token_id, a.seed_max_ngram,
                              a.seed_min_match, lengths)

    # ---- inference path -------------------------------------------------------------------------------
    def new_state(self, batch_size: int, capacity: int = 0) -> DrafterState:
        """The inference state of `batch_size` streams; `capacity` context slots per stream (0 = growing)."""
        s = self.arch
        return DrafterState(s.num_layers, batch_size, s.num_kv_heads, s.head_dim, self.dtype, self.device, capacity,
                            StreamSeeds(s.seed_max_ngram, s.seed_min_match) if s.seeded else None)

    def block_input(self, state: DrafterState, last: Tensor) -> Tensor:
        """The round's block input ids [B, S] for last [B] committed tokens: `[last, MASK, ...]`, or for a
        seeded drafter `[last, s_1..s_m, MASK, ...]` with the seeds of each stream's committed text
        (state.seeds, which ends with `last`)."""
        ids = self.block_ids(last)
        if self.arch.seeded:
            ids[:, 1:] = state.seeds.seeds(last.shape[0], self.block_size - 1, self.mask_token_id, last.device)
        return ids

    def compile_steps(self, mode: str = "on", backend=None) -> str:
        """Compile the two inference passes (`drafter.steps`: context_step, block_step) like the target's
        (`TargetModel.compile_steps`): full graph, fixed shapes, CUDA graphs on CUDA; `off` restores eager."""
        self._steps, self.compiled = compiled_steps(mode, (context_step, block_step), self.device.type == "cuda",
                                                    backend)
        return self.compiled

    def extend_context(self, state: DrafterState, feats: Tensor, valid: Tensor, positions: Tensor) -> None:
        """Add up to T context positions per stream: feats [B, T, n_taps*H], valid [B, T] bool (False = padding or
        a rejected slot: not kept), positions [B, T] logical positions (rotated in). The valid ones take the
        stream's next context slots."""
        valid = valid.to(self.device, torch.bool)
        positions = positions.to(self.device)
        T = valid.shape[1]
        state.room(T)
        step = context_step
        if self.compiled != "off":
            width = padded_width(T, self.block_size)
            if width is not None:  # a round's context: one shape; a prompt's (wider) runs eagerly, once
                feats, valid, positions = (x.contiguous() for x in pad_context(feats, valid, positions, width))
                step = self._steps[0]  # (a graph is guarded on strides too: contiguous inputs, one graph)
        state.lengths.copy_(step(self, state.kv, state.lengths, feats, valid, positions))  # in place (CUDA-graph rules)
        state.bound += T
        state.note_anchor(feats, valid)

    def draft(self, state: DrafterState, block_ids: Tensor, block_positions: Tensor) -> DraftOutput:
        """One block per stream: block_ids [B, S] (= `block_input`: [last committed token, seeds / MASK...]),
        block_positions [B, S]. Sees every valid context slot of its stream."""
        step = self._steps[1] if self.compiled != "off" else block_step
        hidden, logits, extra = step(self, state.kv, state.lengths, block_ids.contiguous(),
                                     block_positions.to(self.device).contiguous())
        if extra is None:
            return DraftOutput(logits, hidden, self.draft_vocab, block_ids, anchor=state.anchor)
        return DraftOutput(logits, hidden, self.draft_vocab, block_ids, extra, self.arch.target_vocab_size,
                           anchor=state.anchor)

    def block_ids(self, last_tokens: Tensor) -> Tensor:
        """[B] last committed tokens -> [B, S] block input ids [token, MASK, ..., MASK]."""
        ids = torch.full((last_tokens.shape[0], self.block_size), self.mask_token_id, dtype=torch.long,
                         device=last_tokens.device)
        ids[:, 0] = last_tokens
        return ids



def parameter_summary(drafter: DFlashDrafter) -> dict:
    return {"trainable": drafter.num_trainable_parameters(), "frozen_shared": drafter.num_frozen_parameters(),
            "draft_vocab_size": drafter.arch.draft_vocab_size or drafter.arch.target_vocab_size,
            "layers": drafter.arch.num_layers, "block_size": drafter.arch.block_size}

