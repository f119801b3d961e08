"""The DCOCO corrector (docs/algorithms.md "Transition scores"): all (n−1)·K² transition scores of a block in one op.

Inputs, all from the single drafter pass, for the n proposed slots i = 1..n (slot 0 excluded):
slot hidden states h_i [N, n, d], the top-K candidate ids c_{ik} (target ids) [N, n, K] and their
draft logits ℓ_i(k) [N, n, K]. Any leading dims stand in for N (streams, or batch × anchors).

- candidate representation  b_{ik} = LN(W_c E[c_{ik}]),  g_i = LN(W_h h_i)  (LN without affine
  parameters; E is the target's frozen token embedding, not a parameter of this module), and
  z_{ik} = W_z [b_{ik}; g_i] + β_z  (g_i's half computed once per slot);
- pair state  s_p = W_pair [h_p; h_{p+1}], once per slot pair;
- Δθ(z_{p,a}, z_{p+1,b}, s_p) = w_out · silu(W_1 [z_{p,a}; z_{p+1,b}; s_p] + β_1) + β_out,
  a shared two-layer MLP whose output layer (w_out, β_out) is zero-initialised, so at init
  S_p(a, b) = ℓ_{p+1}(b) and every path rule returns the drafter's argmax block;
- S_p(a, b) = ℓ_{p+1}(b) + Δθ(...), scores [N, n−1, K, K].

W_1 is split column-wise into [W_1a | W_1b | W_1s]: the a-side W_1a z (per candidate), the b-side
W_1b z (per candidate) and the pair part W_1s s_p + β_1 (per pair) are computed once and
broadcast-added over the K×K grid by `draftlab.kernels.transition_scores` (the Triton kernel never
forms the (n−1)×K×K×hidden tensor). `naive_scores` applies the MLP to the materialised
concatenation (the literal formula; a test oracle).

Ablations: `use_pair_state=False` drops s_p (W_pair and W_1s do not exist); `use_candidate_state=False`
drops the slot state g_i from z (W_h does not exist; z = W_z b + β_z from the token alone).
(Zeroing the whole z instead would make Δθ constant over each K×K grid, i.e. exactly DFlash's
argmax at inference, so it could not be the paper's "−candidate state" row.)

On a seeded drafter the candidates are its top-K over the draft vocabulary and the seed column, with the
seed bias in their logits (`draftlab.corrector.base.drafter_block`): the seed competes with the model's
alternatives as in the engine's draft, and nothing else in the scorer changes.

It implements the corrector interface (`draftlab.corrector.base.Corrector`): `propose` scores the
top-K candidates of a drafted block and walks a path rule, `sample` walks the greedy rule's rows sampled at T>0
(`draftlab.corrector.walks`), `loss` is the joint K² loss of
`draftlab.corrector.loss`, `save` writes config.json (the `DCOCOArch`) + model.safetensors;
`draftlab.corrector.families.load_corrector` re-attaches the frozen embedding and checks its shape.
Its settings (`DCOCOConfig`, `corrector.families.dcoco`), its variants and its arms are its record, `FAMILY`, at the end.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from draftlab.corrector.base import (PAIR_ROWS, SAMPLED_WALK, Contract, Correction, CorrectionLoss, Corrector,
                                     DraftBlock, draft_candidates)
from draftlab.corrector.family import ArchDict, ArmEntry, Cost, Family, Shape
from draftlab.decoding.tree import OPTIONS as TREES
from draftlab.corrector.loss import corrector_loss
from draftlab.corrector.paths import path_tokens, select_path
from draftlab.corrector.variants import LOSSES, RULES, Variant
from draftlab.corrector.walks import SUFFIX as SAMPLED, SampledWalk, pair_walk
from draftlab.errors import ConfigError, DraftlabError
from draftlab.kernels.dispatch import transition_scores

FORMAT = "draftlab-dcoco-v1"


@dataclass
class DCOCOArch(ArchDict):
    hidden_size: int  # d: width of the drafter's slot hidden states h_i
    embed_dim: int  # width of the frozen token embedding E
    vocab_size: int  # rows of E (checked when re-attached)
    k: int = 16  # candidates per slot the corrector was trained with
    dim: int = 128  # r: width of b, g, z and s
    mlp_hidden: int = 256  # m: hidden width of Δθ
    use_pair_state: bool = True
    use_candidate_state: bool = True  # g_i (the slot's hidden state) inside z_{ik}
    ln_eps: float = 1e-5
    variant: str = "dcoco"  # informational: which trained variant this is
    format: str = FORMAT


def count_parameters(arch: DCOCOArch) -> dict[str, int]:
    """Trainable parameters per block (analytic; equals the module's count)."""
    r, m, d = arch.dim, arch.mlp_hidden, arch.hidden_size
    n = {"cand_proj": arch.embed_dim * r}  # W_c (no bias: LN follows)
    if arch.use_candidate_state:
        n["slot_proj"] = d * r  # W_h
    n["fuse"] = (2 if arch.use_candidate_state else 1) * r * r + r  # W_z, β_z
    if arch.use_pair_state:
        n["pair"] = 2 * d * r  # W_pair
    n["mlp_in"] = (3 if arch.use_pair_state else 2) * r * m + m  # W_1, β_1
    n["mlp_out"] = m + 1  # w_out, β_out (zero-initialised)
    n["total"] = sum(n.values())
    return n


def _ln(x: Tensor, eps: float) -> Tensor:
    return F.layer_norm(x, x.shape[-1:], eps=eps)  # no affine parameters


class DCOCOCorrector(Corrector):
    FORMAT = FORMAT
    CONTRACT = Contract(offers=frozenset({PAIR_ROWS, SAMPLED_WALK}))  # its K×K rows rank trees; it walks at T > 0

    def __init__(self, arch: DCOCOArch, embed_tokens: nn.Embedding):
        super().__init__()
        self.share_embedding(embed_tokens, arch.vocab_size, arch.embed_dim)
        self.arch = arch
        r, m, d = arch.dim, arch.mlp_hidden, arch.hidden_size
        self.cand_proj = nn.Linear(arch.embed_dim, r, bias=False)  # W_c: E[c] -> b
        self.slot_proj = nn.Linear(d, r, bias=False) if arch.use_candidate_state else None  # W_h: h -> g
        self.fuse = nn.Linear((2 if arch.use_candidate_state else 1) * r, r)  # W_z: [b; g] -> z
        self.pair = nn.Linear(2 * d, r, bias=False) if arch.use_pair_state else None  # W_pair
        self.mlp_in = nn.Linear((3 if arch.use_pair_state else 2) * r, m)  # W_1 on [z_a; z_b; s]
        self.mlp_out = nn.Linear(m, 1)  # w_out, zero-initialised
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for mod in (self.cand_proj, self.slot_proj, self.fuse, self.pair, self.mlp_in):
            if mod is not None:
                mod.reset_parameters()
        nn.init.zeros_(self.mlp_out.weight)
        nn.init.zeros_(self.mlp_out.bias)

    # ---- facts -------------------------------------------------------------------------------------
    def parameter_breakdown(self) -> dict[str, int]:
        return count_parameters(self.arch)

    # ---- the pieces of the transition score (docs/algorithms.md) -------------------------------------------
    def candidate_repr(self, hidden: Tensor, cand_ids: Tensor) -> Tensor:
        """hidden [N, n, d], cand_ids [N, n, K] -> z [N, n, K, r]."""
        r, eps = self.arch.dim, self.arch.ln_eps
        with torch.no_grad():
            e = self.embed_tokens(cand_ids.to(self.embed_tokens.weight.device))  # [N, n, K, De], frozen
        b = _ln(self.cand_proj(e.to(self.device, self.dtype)), eps)  # [N, n, K, r]
        w_b = self.fuse.weight[:, :r]  # [r, r]
        z = F.linear(b, w_b, self.fuse.bias)  # [N, n, K, r]
        if self.slot_proj is not None:
            g = _ln(self.slot_proj(hidden), eps)  # [N, n, r], once per slot
            z = z + F.linear(g, self.fuse.weight[:, r:])[:, :, None, :]  # broadcast over K
        return z

    def pair_state(self, hidden: Tensor) -> Tensor:
        """hidden [N, n, d] -> s [N, n−1, r], s_p = W_pair [h_p; h_{p+1}]."""
        return self.pair(torch.cat([hidden[:, :-1], hidden[:, 1:]], dim=-1))

    def first_layer_parts(self, hidden: Tensor, cand_ids: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The first layer of Δθ split per candidate and per pair:
        a_side [N, n−1, K, m] (slots 1..n−1), b_side [N, n−1, K, m] (slots 2..n), pair [N, n−1, m]."""
        r = self.arch.dim
        z = self.candidate_repr(hidden, cand_ids)  # [N, n, K, r]
        w1 = self.mlp_in.weight  # [m, 2r or 3r]
        a_side = F.linear(z[:, :-1], w1[:, :r])  # [N, n−1, K, m]   W_1a z_{p,a}
        b_side = F.linear(z[:, 1:], w1[:, r:2 * r])  # [N, n−1, K, m]   W_1b z_{p+1,b}
        if self.pair is not None:
            pair = F.linear(self.pair_state(hidden), w1[:, 2 * r:], self.mlp_in.bias)  # [N, n−1, m]
        else:
            pair = self.mlp_in.bias.expand(a_side.shape[0], a_side.shape[1], -1)  # [N, n−1, m]
        return a_side, b_side, pair

    # ---- scores --------------------------------------------------------------------------------------
    def forward(self, hidden: Tensor, cand_ids: Tensor, cand_logits: Tensor, backend: str | None = None) -> Tensor:
        """hidden [*, n, d], cand_ids [*, n, K] (target ids), cand_logits [*, n, K]
        -> scores [*, n−1, K, K] (fp32), scores[..., p, a, b] = S_p(a, b)."""
        lead, (n, K) = hidden.shape[:-2], cand_ids.shape[-2:]
        hidden = hidden.reshape(-1, n, hidden.shape[-1]).to(self.dtype)  # [N, n, d]
        cand_ids = cand_ids.reshape(-1, n, K)  # [N, n, K]
        cand_logits = cand_logits.reshape(-1, n, K)  # [N, n, K]
        if n < 2:
            return cand_logits.new_zeros(*lead, 0, K, K, dtype=torch.float32)
        a_side, b_side, pair = self.first_layer_parts(hidden, cand_ids)
        scores = transition_scores(a_side, b_side, pair, self.mlp_out.weight[0], self.mlp_out.bias,
                                   cand_logits[:, 1:], backend)  # [N, n−1, K, K]
        return scores.reshape(*lead, n - 1, K, K)

    def naive_scores(self, hidden: Tensor, cand_ids: Tensor, cand_logits: Tensor) -> Tensor:
        """The literal formula on the materialised [z_{p,a}; z_{p+1,b}; s_p] tensor (test oracle).
        hidden [N, n, d], cand_ids/cand_logits [N, n, K] -> [N, n−1, K, K]."""
        hidden = hidden.to(self.dtype)
        z = self.candidate_repr(hidden, cand_ids)  # [N, n, K, r]
        N, n, K, r = z.shape
        za = z[:, :-1, :, None, :].expand(N, n - 1, K, K, r)  # [N, n−1, K, K, r]
        zb = z[:, 1:, None, :, :].expand(N, n - 1, K, K, r)  # [N, n−1, K, K, r]
        parts = [za, zb]
        if self.pair is not None:
            parts.append(self.pair_state(hidden)[:, :, None, None, :].expand(N, n - 1, K, K, r))
        x = torch.cat(parts, dim=-1)  # [N, n−1, K, K, 2r or 3r]
        delta = self.mlp_out(F.silu(self.mlp_in(x))).squeeze(-1)  # [N, n−1, K, K]
        return cand_logits[:, 1:, None, :].to(delta.dtype) + delta

    def transition_rows(self, block: DraftBlock) -> tuple[None, Tensor]:
        """(None: slot 1 keeps the drafter's marginals, scores [*, n−1, K, K]) of a drafted block: the rows of a
        pair-ranked tree (`draftlab.corrector.tree`)."""
        ids, vals = block.candidates(self.arch.k)
        return None, self(block.hidden, ids, vals)

    # ---- the corrector interface ---------------------------------------------------------------------
    @torch.no_grad()
    def propose(self, block: DraftBlock, rule: str = "greedy", lam: float = 0.75,
                backend: str | None = None) -> Correction:
        """Score the top-K candidates of every proposed slot and walk `rule` -> tokens [*, n]; the
        extras are the K×K grid `transition_scores` [*, n−1, K, K] and the chosen indices `path_<rule>` [*, n]."""
        ids, logits = block.candidates(self.arch.k)  # [*, n, K] target ids and draft logits, best first
        scores = self(block.hidden, ids, logits, backend)  # [*, n−1, K, K]
        idx = select_path(scores, logits, rule, lam, backend)  # [*, n]
        return Correction(path_tokens(idx, ids), {"transition_scores": scores, f"path_{rule}": idx})

    @torch.no_grad()
    def sample(self, block: DraftBlock, sp, u: Tensor) -> SampledWalk:
        """The sampled walk (`draftlab.corrector.walks`): slot 1 from ℓ_1 over the K candidates, slot p+1 from the row
        S_p(y_p, ·) of the sampled y_p; u [*, n]."""
        ids, logits = block.candidates(self.arch.k)  # [*, n, K]
        scores = self(block.hidden, ids, logits)  # [*, n−1, K, K]
        return pair_walk(logits[..., 0, :], scores, ids, sp, u)

    @torch.no_grad()
    def propose_rules(self, block: DraftBlock, rules: tuple[str, ...], lam: float = 0.75,
                      backend: str | None = None) -> dict[str, Tensor]:
        ids, logits = block.candidates(self.arch.k)
        scores = self(block.hidden, ids, logits, backend)  # scored once for every rule
        return {r: path_tokens(select_path(scores, logits, r, lam, backend), ids) for r in rules}

    def loss(self, block: DraftBlock, labels: Tensor, valid: Tensor, draft_index: Tensor, rho: float,
             cumulative_mask: bool = False, kind: str = "joint") -> CorrectionLoss:
        """The masked joint-K² softmax CE (docs/algorithms.md "Training and co-training") over the transitions of every
        block, or one of the within-row ablations (`kind`: cond | reach, `draftlab.corrector.loss`)."""
        cand_ids, cand_logits = block.candidates(self.arch.k)  # [B, A, n, K] each (gradients into the logits)
        scores = self(block.hidden, cand_ids, cand_logits)  # [B, A, n−1, K, K]
        cl = corrector_loss(scores, cand_ids, labels, valid, rho, cumulative_mask, kind)
        return CorrectionLoss(cl.num, cl.den, cl.mask, valid[..., :-1] & valid[..., 1:])


# ---- inputs from a drafter pass -----------------------------------------------------------------------


def corrector_inputs(hidden: Tensor, logits: Tensor, k: int, vocab: Tensor | None = None,
                     detach: bool = False, extra: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Drafter outputs over the whole block (slot 0 included): hidden [*, S, d], logits [*, S, Vd]
    ([*, S, Vd+1] with a seeded drafter's seed column, extra [*, S] its target ids: a draft's `extra_ids`)
    -> the corrector's inputs for the n = S−1 proposed slots: hidden [*, n, d], cand_ids [*, n, K],
    cand_logits [*, n, K]. detach=True is the frozen-backbone mode (no gradient into the drafter)."""
    if detach:
        hidden, logits = hidden.detach(), logits.detach()
    ids, vals = draft_candidates(logits[..., 1:, :], k, vocab, None if extra is None else extra[..., 1:])
    return hidden[..., 1:, :], ids, vals


# ---- architecture of a trained variant, the family's settings and its record ----------------------------------


def arch_from_config(cfg, hidden_size: int, embed_tokens: nn.Embedding, variant: str = "dcoco",
                     k: int | None = None) -> DCOCOArch:
    """DCOCOArch for a trained ablation (dcoco | nopair | nocand | frozen) from the family's settings (a
    `DCOCOConfig`; k: the candidates per slot, default `cfg.k` where the settings carry it)."""
    if variant not in ABLATIONS:
        raise ValueError(f"corrector variant {variant!r} is not valid; choose dcoco, nopair, nocand or frozen")
    V, De = embed_tokens.weight.shape
    return DCOCOArch(hidden_size=hidden_size, embed_dim=De, vocab_size=V, k=cfg.k if k is None else k, dim=cfg.dim,
                     mlp_hidden=cfg.hidden, use_pair_state=variant != "nopair",
                     use_candidate_state=variant != "nocand", variant=variant)


ABLATIONS = ("dcoco", "nopair", "nocand", "frozen")  # DCOCO's architecture switches (`Variant.ablation`)


@dataclass
class DCOCOConfig:
    """DCOCO's settings, `corrector.families.dcoco` (docs/algorithms.md "DCOCO"). dim=128, hidden=256 give ~2.23M
    parameters at d=4096 (the paper's size)."""

    dim: int = 128  # width of the candidate representations z and the pair state s
    hidden: int = 256  # hidden width of the shared two-layer MLP Δθ
    path_rule: str = "greedy"  # greedy (the method) | globalsum | geometric
    lam: float = 0.75  # geometric discount λ

    def check(self, p: str) -> None:
        for key in ("dim", "hidden"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"{p}.{key}={getattr(self, key)!r} must be > 0")
        if self.path_rule not in RULES:
            raise ConfigError(f"{p}.path_rule={self.path_rule!r} is not valid; choose one of: {', '.join(RULES)}")
        if not 0.0 < self.lam <= 1.0:
            raise ConfigError(f"{p}.lam={self.lam} must lie in (0, 1]")


def _build(cfg: DCOCOConfig, drafter, v: Variant, k: int) -> DCOCOCorrector:
    arch = replace(arch_from_config(cfg, drafter.arch.hidden_size, drafter.embed_tokens, v.ablation, k), variant=v.name)
    return DCOCOCorrector(arch, drafter.embed_tokens)


def _load(arch: DCOCOArch, drafter) -> DCOCOCorrector:
    shape = tuple(drafter.embed_tokens.weight.shape)
    if shape != (arch.vocab_size, arch.embed_dim):
        raise DraftlabError(f"the corrector was trained on a ({arch.vocab_size}, {arch.embed_dim}) embedding; this "
                            f"target's is {shape}")
    return DCOCOCorrector(arch, drafter.embed_tokens)


def _cost(cfg: DCOCOConfig, s: Shape) -> Cost:
    """The candidate and pair projections (4 H × dim) and the two-layer MLP (~3 dim × hidden): 2.2M at H=4096,
    dim=128, hidden=256 (the paper's 2.23M); dim + hidden activation values per candidate; its forward FLOPs per block
    (per candidate, per slot, per slot pair and over the K x K grid)."""
    r, m, n, K, H = cfg.dim, cfg.hidden, s.slots, s.k, s.hidden
    flops = (2 * n * K * (s.embed_dim * r + r * r + 2 * r * m)  # candidate projections, fuse, both sides of W_1
             + 2 * n * (H * r + r * r) + 2 * (n - 1) * (2 * H * r + r * m)  # slot states, pair states
             + 4 * (n - 1) * K * K * m)  # the K x K grid: add, silu, w_out
    return Cost(4 * s.hidden * cfg.dim + 3 * cfg.dim * cfg.hidden, cfg.dim + cfg.hidden, flops)


FAMILY = Family(
    name="dcoco", module=__name__, arch=DCOCOArch, format=FORMAT, config=DCOCOConfig, build=_build, load=_load,
    cost=_cost, budget="ablation", losses=LOSSES, corrector=DCOCOCorrector,
    rules=lambda cfg: (cfg.path_rule, *[r for r in RULES if r != cfg.path_rule]), lam=lambda cfg: cfg.lam,
    variants=(
        # the paper's method, its ablations and the composed product (docs/algorithms.md "DCOCO", "Baselines and
        # controls"); rows of different issues sit in their own blocks so they can be added without conflict
        Variant("dcoco", "dcoco", "dcoco"),
        Variant("nopair", "dcoco", "nopair"),  # without the pair state s_p
        Variant("nocand", "dcoco", "nocand"),  # without the candidate (slot) state g_i
        Variant("frozen", "dcoco", "frozen", frozen=True),  # the drafter held fixed
        Variant("specopd-dcoco", "dcoco", "dcoco", base="specopd"),  # on SpecOPD's best-greedy-τ state (T=0 arm)
        Variant("specopd-dcoco-t1", "dcoco", "dcoco", base="specopd-t1"),  # on its best-T=1 state (T=1 arm)
        # co-training options (how the corrector loss reaches the drafter)
        Variant("dcoco-sg", "dcoco", "dcoco", grad_hidden=0.0, grad_logits=1.0),  # stop-gradient on the hidden path
        Variant("dcoco-lam0.3", "dcoco", "dcoco", grad_hidden=0.3, grad_logits=0.3),  # λ on both paths
        Variant("dcoco-lam0.1", "dcoco", "dcoco", grad_hidden=0.1, grad_logits=0.1),
        Variant("dcoco-lam0", "dcoco", "dcoco", grad_hidden=0.0, grad_logits=0.0),  # the drafter trains on its CE only
        Variant("dcoco-warm", "dcoco", "dcoco", frozen_warmup=0.3),  # drafter frozen for the first 30% of the budget
        # loss ablations (on the frozen backbone: the drafter cannot confound what the loss does)
        Variant("frozen-cond", "dcoco", "frozen", frozen=True, loss="cond"),
        Variant("frozen-reach", "dcoco", "frozen", frozen=True, loss="reach"),
        Variant("dcoco-cond", "dcoco", "dcoco", loss="cond"),
        Variant("dcoco-reach", "dcoco", "dcoco", loss="reach"),
    ),
    arms={"dcoco": {"": ArmEntry("dcoco", colour="#d62728"),
                    "globalsum": ArmEntry("dcoco", "globalsum", colour="#ff9896"),
                    "geometric": ArmEntry("dcoco", "geometric", colour="#e377c2"),
                    "nopair": ArmEntry("nopair", colour="#ff7f0e"), "nocand": ArmEntry("nocand", colour="#ffbb78"),
                    "frozen": ArmEntry("frozen", colour="#8c564b"),
                    **{t: ArmEntry("dcoco", t) for t in TREES},  # trees ranked by its pair scores
                    SAMPLED: ArmEntry("dcoco", walk=SAMPLED)},  # its sampled walk at T>0
          "specopd-dcoco": {"": ArmEntry("specopd-dcoco", sampled="specopd-dcoco-t1", colour="#9467bd"),
                            SAMPLED: ArmEntry("specopd-dcoco", sampled="specopd-dcoco-t1", walk=SAMPLED)}},
)
