"""The LiLiCorr corrector (docs/algorithms.md "LiLiCorr"): a small bidirectional transformer over a drafted block's
slots × K candidate lattice gives every candidate an `out` and an `in` unit vector; adjacent candidates fit when the
earlier one's `out` points along the later one's `in`. All (n−1)·K² pair scores and the K start scores come from one
parallel pass; a greedy walk picks the path.

Per proposed slot s = 1..n (slot 0, the committed token, excluded) and candidate rank r = 0..K−1 (the drafter's top-K,
best first), the lattice token is

    x[s, r] = token_proj(E[c_sr]) + hidden_proj(h_s) + feature_mlp(LN(f_sr)) + slot_emb[s] + rank_emb[r]

with E the target's frozen embedding, h_s the drafter's hidden state at the slot, and the five features
f = (log p, p, log p − max log p, r / (K−1), [r = 0]), log p the drafter's log-probability over its whole vocabulary
(the live logits: the loss's gradient reaches the drafter through them). Two pre-norm layers (RMSNorm, multi-head
attention with no mask and, per head, a learned bias per signed slot distance plus one more for the same slot; a
two-layer SiLU MLP) mix all n·K tokens of a block. The anchor a = RMSNorm(context_proj(ctx)) comes from the target's
row just before the block, projected by the drafter's own context fusion (ctx = hidden_norm(fc(taps)); zero when no
anchor is given); it enters only the heads:

    u = SiLU(factor_in([ĥ, a, ĥ ⊙ a])),  out = unit(out_head(u)),  in = unit(in_head(u)),  a_out = unit(anchor_head(a))
    start_j = σ · ⟨a_out, in_{1,j}⟩,   pair_s(i, j) = σ · ⟨out_{s,i}, in_{s+1,j}⟩,   σ fixed (8 by default)

The walk: j_1 = argmax start, j_{s+1} = argmax_j pair_s(j_s, j) (ties to the lower rank: the drafter's order). The
sampled walk at T>0 (`sample`, `draftlab.corrector.walks`) draws j_1 from ℓ_1 + start and j_{s+1} from
ℓ_{s+1} + pair_s(j_s, ·) over the K candidates: the drafter's logits supply the marginal its bounded σ·cos lacks. Our
choice beyond the sources: `in_head`'s weight is zero-initialised and its bias is one fixed unit-scale vector, so at
init every candidate's `in` is the same vector, every score row is constant and the walk returns the drafter's top-1
path (DCOCO's and the sequential correctors' fallback), while the gradient is that of a unit-norm input (a zero in
vector would divide by the normalisation's eps). The `nopair` ablation scores slot s+1's candidates against the anchor
instead of the predecessor (pair_s(i, j) = σ⟨a_out, in_{s+1,j}⟩: a per-slot choice with no pair factor).

Training (`loss`): teacher-forced on the true predecessor, node potentials ψ_1 = start, ψ_{s+1} = pair_s(g_s, ·)
(g_s = the index of the target's token among slot s's candidates), supervised on the prefix of slots whose target
token is among the candidates at every slot so far; per slot w_ce · CE(ψ, g) + w_margin · relu(m − (ψ_g − max_{j≠g}
ψ_j)) + w_pen · Σ_j softmax(ψ)_j · relu(z(g) − z(c_j)), z the target's logits (`DraftBlock.teacher`: [*, n, K], the
relu terms precomputed by the caller; the penalty needs them). Uniform over supervised slots (the sources'), as
num / den for data-parallel training; the drafter's own loss is added by the co-training recipe.

Its settings (`LiLiCorrConfig`, `corrector.families.lilicorr`), its variants and its arms are its record, `FAMILY`.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from draftlab.corrector.base import (ANCHOR, HIDDEN, LOGITS, PAIR_ROWS, SAMPLED_WALK, TEACHER, Contract, Correction,
                                     CorrectionLoss, Corrector, DraftBlock)
from draftlab.corrector.family import ArchDict, ArmEntry, Cost, Family, Shape
from draftlab.corrector.paths import greedy_path, path_tokens
from draftlab.corrector.variants import Variant
from draftlab.corrector.walks import SUFFIX as SAMPLED, SampledWalk, pair_walk
from draftlab.decoding.tree import OPTIONS as TREES
from draftlab.errors import ConfigError, DraftlabError

FORMAT = "draftlab-lilicorr-v1"
# (w_ce, w_margin, w_pen): the published two, and `nopen` (margin's without its penalty: the feature cache holds no
# target logits, so a run on cached features trains without the penalty)
PRESETS = {"base": (0.25, 0.0, 0.25), "margin": (0.125, 0.125, 0.25), "nopen": (0.125, 0.125, 0.0)}
N_FEATURES = 5


@dataclass
class LiLiCorrArch(ArchDict):
    hidden_size: int  # H: the drafter's hidden width
    embed_dim: int  # De: the frozen target embedding's width
    vocab_size: int  # rows of that embedding (checked when re-attached)
    slots: int  # n: proposed slots per block (block size − 1): the relative-slot bias's range
    k: int = 8  # candidates per slot (a power of two <= 16)
    width: int = 128  # h: the lattice transformer's width
    factor_dim: int = 128  # f: the out / in vectors' width
    layers: int = 2
    heads: int = 4
    mlp_ratio: float = 2.0
    scale: float = 8.0  # σ: the fixed scale of the cosines
    vector_eps: float = 1e-4  # the unit vectors' norm floor
    norm_eps: float = 1e-6
    pair: bool = True  # False: the `nopair` ablation (slot choices against the anchor, no pair factor)
    w_ce: float = 0.125  # the loss's weights (a preset's, `LiLiCorrConfig.loss_weights`) and the hinge's margin
    w_margin: float = 0.125
    w_pen: float = 0.0
    margin: float = 2.0
    variant: str = "lilicorr"
    format: str = FORMAT


def check_k(k: int, where: str = "corrector.k") -> None:
    if k < 1 or k > 16 or k & (k - 1):
        raise DraftlabError(f"{where}={k}: LiLiCorr needs K a power of two <= 16 (1, 2, 4, 8, 16); set {where}=8")


class Layer(nn.Module):
    """One pre-norm block of the lattice transformer: attention over all n·K tokens with an additive bias, then an
    MLP."""

    def __init__(self, width: int, heads: int, mlp: int, eps: float):
        super().__init__()
        self.heads = heads
        self.attn_norm, self.mlp_norm = nn.RMSNorm(width, eps=eps), nn.RMSNorm(width, eps=eps)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.up, self.down = nn.Linear(width, mlp), nn.Linear(mlp, width)

    def forward(self, x: Tensor, bias: Tensor) -> Tensor:
        """x [N, T, h], bias [heads, T, T] -> [N, T, h]."""
        N, T, h = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).view(N, T, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.to(q.dtype))  # [N, heads, T, d]
        x = x + self.proj(a.transpose(1, 2).reshape(N, T, h))
        return x + self.down(F.silu(self.up(self.mlp_norm(x))))


class LiLiCorrCorrector(Corrector):
    FORMAT = FORMAT
    # it reads the context row before each block (the anchor) and, for its penalty, the target's logits; its start
    # and pair scores rank trees; it walks at T > 0
    CONTRACT = Contract(reads=frozenset({HIDDEN, LOGITS, ANCHOR, TEACHER}), offers=frozenset({PAIR_ROWS, SAMPLED_WALK}))

    def __init__(self, arch: LiLiCorrArch, embed_tokens: nn.Embedding, context=None):
        super().__init__()
        self.share_embedding(embed_tokens, arch.vocab_size, arch.embed_dim)
        check_k(arch.k)
        if arch.width % arch.heads:
            raise ValueError(f"LiLiCorr width {arch.width} is not a multiple of its {arch.heads} heads")
        self.arch = arch
        self.__dict__["_context"] = context  # the drafter's context fusion, taps -> ctx (`DFlashDrafter.context_rows`)
        h, f, n, K = arch.width, arch.factor_dim, arch.slots, arch.k
        self.feature_norm = nn.LayerNorm(N_FEATURES)
        self.feature_up, self.feature_down = nn.Linear(N_FEATURES, h), nn.Linear(h, h)
        self.token_proj = nn.Linear(arch.embed_dim, h)
        self.hidden_proj = nn.Linear(arch.hidden_size, h)
        self.slot_emb = nn.Parameter(torch.zeros(n, h))
        self.rank_emb = nn.Parameter(torch.zeros(K, h))
        self.rel_bias = nn.Parameter(torch.zeros(arch.heads, 2 * n - 1))  # per head, per signed slot distance
        self.same_bias = nn.Parameter(torch.zeros(arch.heads))  # per head, candidates of one slot
        self.layers = nn.ModuleList(Layer(h, arch.heads, int(arch.mlp_ratio * h), arch.norm_eps)
                                    for _ in range(arch.layers))
        self.out_norm = nn.RMSNorm(h, eps=arch.norm_eps)
        self.context_proj = nn.Linear(arch.hidden_size, h)
        self.anchor_norm = nn.RMSNorm(h, eps=arch.norm_eps)
        self.factor_in = nn.Linear(3 * h, h)
        self.out_head, self.in_head, self.anchor_head = nn.Linear(h, f), nn.Linear(h, f), nn.Linear(h, f)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """N(0, 0.02) weights and zero biases (the sources'); the embeddings and attention biases at zero; `in_head`
        a zero weight and one shared bias vector (every candidate's `in` alike at init: the drafter's top-1 path)."""
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0.0, 0.02)
                nn.init.zeros_(m.bias)
        for p in (self.slot_emb, self.rank_emb, self.rel_bias, self.same_bias):
            nn.init.zeros_(p)
        nn.init.zeros_(self.in_head.weight)
        with torch.no_grad():
            self.in_head.bias.copy_(torch.randn(self.arch.factor_dim) / self.arch.factor_dim ** 0.5)

    # ---- facts --------------------------------------------------------------------------------------------
    def parameter_breakdown(self) -> dict[str, int]:
        return count_parameters(self.arch)

    # ---- the pieces -----------------------------------------------------------------------------------------
    def attention_bias(self, n: int) -> Tensor:
        """[heads, n·K, n·K]: rel_bias[s_i − s_j] + same_bias·[s_i = s_j] (a block of n <= arch.slots slots)."""
        s = torch.arange(n, device=self.device).repeat_interleave(self.arch.k)  # [n·K] slot of each token
        d = s[:, None] - s[None, :]  # [T, T] signed slot distance
        return self.rel_bias[:, d + self.arch.slots - 1] + self.same_bias[:, None, None] * (d == 0)

    def lattice(self, hidden: Tensor, ids: Tensor, vals: Tensor, lse: Tensor) -> Tensor:
        """hidden [N, n, H], ids [N, n, K] target ids, vals [N, n, K] their draft logits, lse [N, n] the draft
        logits' logsumexp -> the candidates' final states [N, n, K, h]."""
        N, n, K = ids.shape
        logp = (vals.float() - lse.float()[..., None])  # [N, n, K] log p over the whole draft vocabulary
        rank = torch.arange(K, device=ids.device, dtype=torch.float32)
        feats = torch.stack([logp, logp.exp(), logp - logp.amax(-1, keepdim=True),
                             (rank / max(K - 1, 1)).expand_as(logp), (rank == 0).float().expand_as(logp)], -1)
        x = self.feature_down(F.silu(self.feature_up(self.feature_norm(feats.to(self.dtype)))))  # [N, n, K, h]
        with torch.no_grad():
            e = self.embed_tokens(ids.to(self.embed_tokens.weight.device))  # [N, n, K, De], frozen
        x = x + self.token_proj(e.to(self.device, self.dtype)) + self.hidden_proj(hidden.to(self.dtype))[:, :, None]
        x = (x + self.slot_emb[:n, None] + self.rank_emb[:K]).reshape(N, n * K, -1)
        bias = self.attention_bias(n)
        for layer in self.layers:
            x = layer(x, bias)
        return self.out_norm(x).view(N, n, K, -1)

    def anchor_state(self, anchor: Tensor | None, N: int) -> Tensor:
        """anchor [N, n_taps*H] (the target's taps just before the block; an all-zero row: unknown) or None ->
        a [N, h] = RMSNorm(valid · context_proj(ctx)), ctx the drafter's context fusion of the taps (zero without)."""
        if anchor is None or self._context is None:
            return torch.zeros(N, self.arch.width, device=self.device, dtype=self.dtype)
        valid = (anchor != 0).any(-1, keepdim=True)  # [N, 1]
        ctx = self._context(anchor.to(self.device))  # [N, H]
        return self.anchor_norm(self.context_proj(ctx.to(self.dtype)) * valid)

    def unit(self, x: Tensor) -> Tensor:
        return F.normalize(x.float(), dim=-1, eps=self.arch.vector_eps)

    def forward(self, hidden: Tensor, ids: Tensor, vals: Tensor, lse: Tensor,
                anchor: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """hidden [*, n, H], ids / vals [*, n, K], lse [*, n], anchor [*, H] or None -> (start [*, K],
        pair [*, n−1, K, K]), fp32 log-potentials σ·cos."""
        lead, (n, K) = ids.shape[:-2], ids.shape[-2:]
        N = ids[..., 0, 0].numel()
        c = self.lattice(hidden.reshape(N, n, -1), ids.reshape(N, n, K), vals.reshape(N, n, K), lse.reshape(N, n))
        a = self.anchor_state(None if anchor is None else anchor.reshape(N, -1), N)  # [N, h]
        ab = a[:, None, None].expand_as(c)
        u = F.silu(self.factor_in(torch.cat([c, ab, c * ab], -1)))  # [N, n, K, h]
        v_in = self.unit(self.in_head(u))  # [N, n, K, f]
        a_out = self.unit(self.anchor_head(a))  # [N, f]
        s = self.arch.scale
        start = s * (v_in[:, 0] @ a_out[:, :, None])[..., 0]  # [N, K]
        if self.arch.pair:
            pair = s * (self.unit(self.out_head(u[:, :-1])) @ v_in[:, 1:].transpose(-1, -2))  # [N, n−1, K, K]
        else:  # no pair factor: each slot's candidates against the anchor, the same row for every predecessor
            pair = (s * (v_in[:, 1:] @ a_out[:, None, :, None])[..., 0])[:, :, None, :].expand(N, n - 1, K, K)
        return start.reshape(*lead, K), pair.reshape(*lead, n - 1, K, K)

    def scores(self, block: DraftBlock) -> tuple[Tensor, Tensor, Tensor]:
        """(candidate ids [*, n, K], start [*, K], pair [*, n−1, K, K]) of a drafted block."""
        ids, vals = block.candidates(self.arch.k)
        lse = block.full_logits().float().logsumexp(-1)  # [*, n]
        start, pair = self(block.hidden, ids, vals, lse, block.anchor)
        return ids, start, pair

    def transition_rows(self, block: DraftBlock) -> tuple[Tensor, Tensor]:
        """(start [*, K], pair [*, n−1, K, K]): the rows of a tree ranked by LiLiCorr (`draftlab.corrector.tree`)."""
        return self.scores(block)[1:]

    @property
    def contract(self) -> Contract:
        """Its class's contract; the target's logits only when the penalty weighs them (`w_pen` > 0)."""
        return self.CONTRACT if self.arch.w_pen > 0 else self.CONTRACT.without(TEACHER)

    def teacher_weights(self, block: DraftBlock, target_logits: Tensor, anchors: Tensor, labels: Tensor) -> Tensor:
        """The penalty's weights of a training block (`distractor_weights` at its candidates)."""
        return distractor_weights(target_logits, anchors, block.candidates(self.arch.k)[0], labels)

    # ---- the corrector interface -----------------------------------------------------------------------------
    @torch.no_grad()
    def propose(self, block: DraftBlock, rule: str = "greedy", lam: float = 0.75,
                backend: str | None = None) -> Correction:
        """The greedy walk over the start and pair scores -> tokens [*, n] (LiLiCorr has one rule: `greedy`)."""
        if rule != "greedy":
            raise DraftlabError(f"LiLiCorr walks one rule, greedy; path rule {rule!r} needs the dcoco family")
        ids, start, pair = self.scores(block)
        idx = greedy_path(pair, start, backend)  # [*, n]
        # recorded for the explorer's candidate grid: the chosen path and the rows it walked (`pair_start`,
        # `pair_rows`; not `transition_scores`, which the grid replays with DCOCO's path rules)
        return Correction(path_tokens(idx, ids), {"path_greedy": idx, "pair_start": start, "pair_rows": pair})

    @torch.no_grad()
    def sample(self, block: DraftBlock, sp, u: Tensor) -> SampledWalk:
        """The sampled walk (`draftlab.corrector.walks`): over the K candidates, slot 1 from ℓ_1 + start, slot s+1 from
        ℓ_{s+1} + pair_s(y_s, ·) of the sampled y_s (the drafter's logits supply the marginal: module doc); u [*, n]."""
        ids, start, pair = self.scores(block)
        vals = block.candidates(self.arch.k)[1].float()  # [*, n, K]
        return pair_walk(vals[..., 0, :] + start, pair + vals[..., 1:, None, :], ids, sp, u)

    def loss(self, block: DraftBlock, labels: Tensor, valid: Tensor, draft_index: Tensor, rho: float,
             cumulative_mask: bool = False, kind: str = "joint") -> CorrectionLoss:
        """w_ce·CE + w_margin·hinge + w_pen·penalty per supervised slot (module docstring), summed (num) and counted
        (den). block.hidden [B, A, n, H], block.logits [B, A, n, Vd], block.anchor [B, A, n_taps*H], block.teacher
        [B, A, n, K] (relu(z(label) − z(candidate)); needed when w_pen > 0); labels / valid [B, A, n]."""
        if kind != "joint":
            raise DraftlabError(f"LiLiCorr has one loss; loss kind {kind!r} needs the dcoco family")
        w_ce, w_margin, w_pen = self.arch.w_ce, self.arch.w_margin, self.arch.w_pen
        if w_pen > 0 and block.teacher is None:
            raise DraftlabError("LiLiCorr's penalty (w_pen > 0) needs the target's logits at the candidates; train "
                                "with the target online (pretrain.cache_features=false) or set "
                                "corrector.families.lilicorr.w_pen=0")
        ids, start, pair = self.scores(block)  # [B, A, n, K], [B, A, K], [B, A, n−1, K, K]
        hit = (ids == labels[..., None]) & valid[..., None]  # [B, A, n, K]
        g = hit.long().argmax(-1)  # [B, A, n] the label's candidate index (0 where absent: masked)
        mask = hit.any(-1).long().cumprod(-1).bool()  # [B, A, n] the prefix the lattice holds
        K = pair.shape[-1]
        rows = pair.gather(-2, g[..., :-1, None, None].expand(*g[..., :-1].shape, 1, K)).squeeze(-2)  # [B, A, n−1, K]
        node = torch.cat([start[..., None, :], rows], -2)  # [B, A, n, K] ψ_s, teacher-forced predecessor
        logq = node.log_softmax(-1)
        term = w_ce * -logq.gather(-1, g[..., None]).squeeze(-1)  # [B, A, n]
        if w_margin > 0 and K > 1:
            true = node.gather(-1, g[..., None]).squeeze(-1)
            rival = node.masked_fill(F.one_hot(g, K).bool(), float("-inf")).amax(-1)
            term = term + w_margin * F.relu(self.arch.margin - (true - rival))
        if w_pen > 0:
            term = term + w_pen * (logq.exp() * block.teacher.float()).sum(-1)
        m = mask.float()
        return CorrectionLoss((term * m).sum(), m.sum(), mask, valid)


def distractor_weights(target_logits: Tensor, anchors: Tensor, ids: Tensor, labels: Tensor) -> Tensor:
    """The penalty's weights relu(z(label) − z(candidate)) of every training block: target_logits [B, T, V] (those at
    t predict position t+1), anchors [B, A] (slot 0's positions), ids [B, A, n, K] the candidates, labels [B, A, n]
    -> [B, A, n, K] (detached; 0 at the label and at any candidate the target likes as much). Slot s's token sits at
    anchor + s, predicted at anchor + s − 1; gathered without forming [B, A, n, V]."""
    B, T, V = target_logits.shape
    n = ids.shape[-2]
    pos = (anchors[..., None] + torch.arange(n, device=anchors.device)).clamp(max=T - 1)  # [B, A, n]
    base = (torch.arange(B, device=anchors.device)[:, None, None] * T + pos) * V  # [B, A, n] row offsets
    z = target_logits.detach().reshape(-1)
    true = z[base + labels.clamp(min=0)].float()  # [B, A, n]
    return F.relu(true[..., None] - z[base[..., None] + ids].float())


def count_parameters(arch: LiLiCorrArch) -> dict[str, int]:
    """Trainable parameters per block (analytic; equals the module's count)."""
    h, f, H, mlp = arch.width, arch.factor_dim, arch.hidden_size, int(arch.mlp_ratio * arch.width)
    n = {"features": 2 * N_FEATURES + N_FEATURES * h + h + h * h + h,
         "inputs": arch.embed_dim * h + h + H * h + h + arch.slots * h + arch.k * h,
         "layers": arch.layers * (2 * h + 3 * h * h + 3 * h + h * h + h + h * mlp + mlp + mlp * h + h),
         "attention_bias": arch.heads * (2 * arch.slots - 1) + arch.heads,
         "anchor": H * h + h + h, "heads": h + 3 * h * h + h + 3 * (h * f + f)}
    n["total"] = sum(n.values())
    return n


# ---- the family's settings and its record ------------------------------------------------------------------------


@dataclass
class LiLiCorrConfig:
    """LiLiCorr's settings, `corrector.families.lilicorr` (its K is `corrector.k`: a power of two <= 16).
    preset: base | margin (the published weightings of CE / hinge / penalty; the penalty needs the target online) |
    nopen (margin's without the penalty: the default, it trains on cached features) | custom (the weights below)."""

    width: int = 128  # h (the sources' 1024 at H = 4096)
    factor_dim: int = 128  # f
    layers: int = 2
    heads: int = 4
    scale: float = 8.0  # σ
    preset: str = "nopen"
    w_ce: float = 0.125  # used when preset = custom
    w_margin: float = 0.125
    w_pen: float = 0.0
    margin: float = 2.0  # the hinge's margin, in σ·cos units

    def loss_weights(self) -> tuple[float, float, float]:
        return PRESETS[self.preset] if self.preset in PRESETS else (self.w_ce, self.w_margin, self.w_pen)

    def check(self, p: str) -> None:
        for key in ("width", "factor_dim", "layers", "heads"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"{p}.{key}={getattr(self, key)!r} must be > 0")
        if self.width % self.heads:
            raise ConfigError(f"{p}.width={self.width} must be a multiple of {p}.heads={self.heads}")
        if self.scale <= 0 or self.margin <= 0:
            raise ConfigError(f"{p}.scale and {p}.margin must be > 0")
        if self.preset not in (*PRESETS, "custom"):
            raise ConfigError(f"{p}.preset={self.preset!r} is not valid; choose {', '.join(PRESETS)} or custom")
        w = self.loss_weights()
        if min(w) < 0 or max(w) <= 0:
            raise ConfigError(f"{p}: the loss weights (w_ce, w_margin, w_pen) = {w} must be >= 0, one of them > 0")


def _build(cfg: LiLiCorrConfig, drafter, v: Variant, k: int) -> LiLiCorrCorrector:
    V, De = drafter.embed_tokens.weight.shape
    w_ce, w_margin, w_pen = cfg.loss_weights()
    arch = LiLiCorrArch(hidden_size=drafter.arch.hidden_size, embed_dim=De, vocab_size=V,
                        slots=drafter.block_size - 1, k=k, width=cfg.width, factor_dim=cfg.factor_dim,
                        layers=cfg.layers, heads=cfg.heads, scale=cfg.scale, pair=v.ablation != "nopair",
                        w_ce=w_ce, w_margin=w_margin, w_pen=w_pen, margin=cfg.margin, variant=v.name)
    return LiLiCorrCorrector(arch, drafter.embed_tokens, drafter.context_rows)


def _load(arch: LiLiCorrArch, drafter) -> LiLiCorrCorrector:
    shape = tuple(drafter.embed_tokens.weight.shape)
    if shape != (arch.vocab_size, arch.embed_dim) or drafter.arch.hidden_size != arch.hidden_size:
        raise DraftlabError(f"the corrector was trained on a ({arch.vocab_size}, {arch.embed_dim}) embedding and "
                            f"hidden width {arch.hidden_size}; this drafter's are {shape}, {drafter.arch.hidden_size}")
    if drafter.block_size - 1 > arch.slots:
        raise DraftlabError(f"the corrector was trained on blocks of {arch.slots} proposed slots; this drafter "
                            f"proposes {drafter.block_size - 1}")
    return LiLiCorrCorrector(arch, drafter.embed_tokens, drafter.context_rows)


def _cost(cfg: LiLiCorrConfig, s: Shape) -> Cost:
    """Its parameters (the analytic count: input projections (De + 2H)·h, ~8h² per layer, heads 3h² + 3hf: 6.6M at
    H = 4096, h = f = 128, 15 slots); per candidate ~(4 per layer + 4)·h + 2f activation values."""
    arch = LiLiCorrArch(s.hidden, s.embed_dim, s.vocab, s.slots, s.k, cfg.width, cfg.factor_dim, cfg.layers, cfg.heads)
    h, f, n, K, T = cfg.width, cfg.factor_dim, s.slots, s.k, s.slots * s.k  # T: the lattice's tokens per block
    per_token = (2 * (N_FEATURES * h + h * h) + 2 * s.embed_dim * h  # the features' MLP, the token projection
                 + cfg.layers * (8 * h * h + 4 * arch.mlp_ratio * h * h + 4 * T * h)  # attention, MLP, scores
                 + 6 * h * h + 4 * h * f)  # factor_in, the out and in heads
    flops = T * per_token + 2 * n * s.hidden * h + 2 * (n - 1) * K * K * f
    return Cost(count_parameters(arch)["total"], (4 * cfg.layers + 4) * cfg.width + 2 * cfg.factor_dim, flops)


FAMILY = Family(
    name="lilicorr", module=__name__, arch=LiLiCorrArch, format=FORMAT, config=LiLiCorrConfig, build=_build,
    load=_load, cost=_cost, budget="main", k_rule=check_k, corrector=LiLiCorrCorrector,
    variants=(Variant("lilicorr", "lilicorr"),
              Variant("lilicorr-nopair", "lilicorr", "nopair"),  # without pair factors
              Variant("lilicorr-frozen", "lilicorr", frozen=True)),  # the drafter held fixed
    arms={"lilicorr": {"": ArmEntry("lilicorr", colour="#e6550d"),
                       "nopair": ArmEntry("lilicorr-nopair", colour="#fdae6b"),
                       "frozen": ArmEntry("lilicorr-frozen", colour="#843c39"),
                       **{t: ArmEntry("lilicorr", t) for t in TREES},  # trees ranked by its start and pair scores
                       SAMPLED: ArmEntry("lilicorr", walk=SAMPLED)}},  # its sampled walk at T>0
)
