"""Sequential correctors, the baselines DCOCO is compared with (docs/algorithms.md "Baselines and controls"): DSpark and
Domino (and the shared base / architecture of DFlash-2's candidate selector, `draftlab.corrector.selector`).

Both turn the drafter's parallel block into a slot-by-slot walk. Slot p (p = 1..n) is chosen from
the corrected draft logits ℓ_p + δ_p (draft vocabulary), where δ_p depends on the tokens chosen
before it: prev_p = the token at slot p−1 (prev_1 = slot 0, the last committed token).

- DSpark: a Markov bias from the previous token, δ_p = W2(W1[prev_p] ⊙ σ(G h_p)) — W1 a rank-r
  table over target ids, W2: r → Vd (zero-initialised), the gate σ(G h_p) ∈ (0,1)^r from the
  slot's hidden state (`gate=False` drops it).
- Domino: a GRU (width r) over the frozen target embeddings of the chosen tokens,
  s_p = GRU(W_in E[prev_p], s_{p−1}), s_0 = 0, adds the residual U s_p (U: r → H, zero-initialised)
  to the slot's hidden state before the drafter's own head: drafter.logits(h_p + U s_p). The head is
  linear, so this is ℓ_p + W_head U s_p, which is what is computed (exactly ℓ_p at init).

On a seeded drafter with the seed column (`draftlab.corrector.base.drafter_block`) the logits have Vd+1
columns, the last one slot p's seed (`extra` [*, n] its target id, -1: none): Domino's re-applied head adds
(U s_p)·W_full[seed] there (the column is the seed's full LM-head row, so ℓ_p + δ_p is still exactly the
drafter's head with its seed bias and seed column on h_p + U s_p), DSpark's table has no row for a token
outside its Vd outputs and adds 0 to the column. The seed bias is a constant per slot, already in ℓ_p.

The zero-initialised output (W2, U) makes δ ≡ 0 at init: the walk returns the drafter's argmax block.
`forward(hidden, prev)` is the teacher-forced δ of every slot at once (training; prev from
`teacher_tokens`); `step` is one slot of inference, `walk` walks a block with it (the argmax path) and `sample`
draws it at T>0 from softmax((ℓ_p + δ_p)/T) given the sampled predecessor (`draftlab.corrector.walks`).
Both implement the corrector interface (`draftlab.corrector.base.Corrector`): `propose` is the walk
from the block's slot-0 token, `loss` the decay-weighted CE of the teacher-forced ℓ + δ, `save`
writes config.json (the `SequentialArch`) + model.safetensors; `draftlab.corrector.families.load_corrector`
rebuilds them around the drafter (Domino shares its embedding and head). Their settings (`corrector.families.dspark`,
`.domino`) and records (`FAMILIES`) are at the end.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from draftlab.corrector.base import SAMPLED_WALK, Contract, Correction, CorrectionLoss, Corrector, DraftBlock, target_ids
from draftlab.corrector.family import ArchDict, ArmEntry, Cost, Family, Shape
from draftlab.corrector.loss import transition_weights
from draftlab.corrector.variants import Variant
from draftlab.corrector.walks import SUFFIX as SAMPLED, SampledWalk, draw, reshaped
from draftlab.errors import ConfigError, DraftlabError

FORMAT = "draftlab-seqcorr-v1"


@dataclass
class SequentialArch(ArchDict):
    kind: str  # dspark | domino
    hidden_size: int  # H: the drafter's slot hidden states
    vocab_size: int  # V: target ids (DSpark's W1 rows, Domino's embedding rows)
    draft_vocab_size: int  # Vd: width of δ (the drafter's draft vocabulary)
    embed_dim: int  # De: the frozen target embedding (Domino's input)
    rank: int = 64  # r
    gate: bool = True  # DSpark: σ(G h_p) on the bias
    top_k: int = 0  # dflash2 (draftlab.corrector.selector): K candidates per slot
    variant: str = ""  # informational: which trained variant this is
    format: str = FORMAT


def count_parameters(arch: SequentialArch) -> dict[str, int]:
    """Trainable parameters per block (analytic; equals the module's count)."""
    r, H = arch.rank, arch.hidden_size
    if arch.kind == "dflash2":
        n = {"predecessor": arch.vocab_size * r, "successor": arch.vocab_size * r, "hidden": H * r}
    elif arch.kind == "dspark":
        n = {"table": arch.vocab_size * r, "out": r * arch.draft_vocab_size + arch.draft_vocab_size}
        if arch.gate:
            n["gate"] = H * r + r
    else:
        n = {"inp": arch.embed_dim * r + r, "gru": 6 * r * r + 6 * r, "up": r * H}
    n["total"] = sum(n.values())
    return n


def head_weight(drafter) -> Tensor:
    """[Vd, H]: the drafter's frozen output head over its draft vocabulary."""
    return drafter.lm_head.weight if drafter.draft_vocab is None else drafter.head_weight


def teacher_tokens(slot0: Tensor, tokens: Tensor) -> Tensor:
    """The previous token of every slot: slot0 [*], tokens [*, n] (chosen or label at slots 1..n)
    -> prev [*, n] = [slot0, tokens_1..tokens_{n−1}]."""
    return torch.cat([slot0[..., None], tokens[..., :-1]], dim=-1)


class SequentialCorrector(Corrector):
    FORMAT = FORMAT
    CONTRACT = Contract(offers=frozenset({SAMPLED_WALK}))  # its walk draws at T > 0
    arch: SequentialArch

    def parameter_breakdown(self) -> dict[str, int]:
        return count_parameters(self.arch)

    def forward(self, hidden: Tensor, prev: Tensor, extra: Tensor | None = None) -> Tensor:
        """Teacher-forced: hidden [*, n, H], prev [*, n] target ids -> δ [*, n, Vd] fp32 ([*, n, Vd+1] with the
        seed column, extra [*, n] its target ids)."""
        raise NotImplementedError

    def step(self, h: Tensor, prev: Tensor, state, extra: Tensor | None = None):
        """One slot: h [N, H], prev [N] (extra [N]: the seed column's ids) -> (δ [N, Vd(+1)] fp32, next state)."""
        raise NotImplementedError

    # ---- the corrector interface ---------------------------------------------------------------------
    @torch.no_grad()
    def propose(self, block: DraftBlock, rule: str = "greedy", lam: float = 0.75,
                backend: str | None = None) -> Correction:
        """The slot-by-slot walk from the block's slot-0 token (its only path rule; `rule` is ignored)."""
        return Correction(self.walk(block.hidden, block.full_logits(), block.slot0, block.vocab, block.extra))

    @torch.no_grad()
    def sample(self, block: DraftBlock, sp, u: Tensor) -> SampledWalk:
        """The sampled walk (`draftlab.corrector.walks`): slot p drawn from ℓ_p + δ_p(y_{p−1}) over the draft vocabulary
        (and the seed column) given the sampled predecessor; u [*, n]."""
        uu = u.reshape(-1, u.shape[-1])
        tokens, qs, cols = self._walk(block.hidden, block.full_logits(), block.slot0, block.vocab, block.extra,
                                      lambda row, p: draw(row, sp, uu[:, p]))
        lead, N = block.hidden.shape[:-2], uu.shape[0]
        idx = torch.arange(qs[0].shape[-1], device=qs[0].device).expand(N, -1)  # draft indices (Vd: the seed column)
        ids = [target_ids(idx, block.vocab, None if c is None else c[:, None]) for c in cols]
        return reshaped(SampledWalk(tokens.reshape(N, -1), torch.stack(qs, 1), torch.stack(ids, 1)), lead)

    def loss(self, block: DraftBlock, labels: Tensor, valid: Tensor, draft_index: Tensor, rho: float,
             cumulative_mask: bool = False, kind: str = "joint") -> CorrectionLoss:
        """Decay-weighted CE of the teacher-forced corrected logits ℓ_p + δ_p (draft vocabulary) against
        the target's greedy tokens, w_p = exp(−(p−1)/ρ); teacher forcing: slot p's previous token is the
        label of slot p−1, slot 1's is the block's slot-0 token. Labels the head cannot express (outside the
        draft vocabulary, and not the slot's seed column) and invalid slots get weight 0. block.hidden
        [B, A, n, H], block.logits [B, A, n, Vd(+1)], block.slot0 [B, A]. One loss only: `kind` must be `joint`."""
        if kind != "joint":
            raise DraftlabError(f"the sequential correctors have one loss; loss kind {kind!r} needs the dcoco family")
        corrected = block.full_logits() + self(block.hidden, teacher_tokens(block.slot0, labels),
                                               block.extra)  # [B, A, n, Vd(+1)]
        didx = block.label_index(labels, draft_index)  # [B, A, n] logit column, -1 where not expressible
        mask = valid & (didx >= 0)  # [B, A, n]
        w = transition_weights(labels.shape[-1], rho, labels.device) * mask  # [B, A, n]
        ce = F.cross_entropy(corrected.flatten(0, 2), didx.clamp(min=0).flatten(), reduction="none").view_as(w)
        return CorrectionLoss((ce * w).sum(), w.sum(), mask, valid)

    @torch.no_grad()
    def walk(self, hidden: Tensor, logits: Tensor, slot0: Tensor, vocab: Tensor | None = None,
             extra: Tensor | None = None) -> Tensor:
        """Slot-by-slot walk: hidden [*, n, H], logits [*, n, Vd] (slots 1..n), slot0 [*] target ids,
        vocab [Vd] draft index -> target id (None: identity); with the seed column logits [*, n, Vd+1] and
        extra [*, n] its target ids -> tokens [*, n] target ids."""
        return self._walk(hidden, logits, slot0, vocab, extra, lambda row, p: (row.argmax(-1), None))[0]

    def _walk(self, hidden: Tensor, logits: Tensor, slot0: Tensor, vocab: Tensor | None, extra: Tensor | None,
              pick) -> tuple[Tensor, list, list]:
        """The slot-by-slot walk with `pick(row [N, Vd(+1)] fp32, p) -> (draft indices [N], the row it drew from or
        None)`: the argmax (`walk`) or a draw (`sample`) -> (tokens [*, n] target ids, the rows, each slot's seed
        column ids [N] or None)."""
        lead, (n, H) = hidden.shape[:-2], hidden.shape[-2:]
        h = hidden.reshape(-1, n, H).to(self.dtype)  # [N, n, H]
        lg = logits.reshape(-1, n, logits.shape[-1])  # [N, n, Vd(+1)]
        ex = None if extra is None else extra.reshape(-1, n)  # [N, n]
        prev, state, out, rows, cols = slot0.reshape(-1), None, [], [], []
        for p in range(n):
            col = None if ex is None else ex[:, p]  # [N]
            delta, state = self.step(h[:, p], prev, state, col)  # [N, Vd(+1)]
            idx, row = pick(lg[:, p].float() + delta, p)  # [N] draft indices
            prev = target_ids(idx, vocab, col)
            out.append(prev)
            rows.append(row)
            cols.append(col)
        return torch.stack(out, -1).reshape(*lead, n), rows, cols


class DSparkCorrector(SequentialCorrector):
    def __init__(self, arch: SequentialArch):
        super().__init__()
        self.arch, r = arch, arch.rank
        self.table = nn.Embedding(arch.vocab_size, r)  # W1
        self.out = nn.Linear(r, arch.draft_vocab_size)  # W2, zero-initialised
        self.gate = nn.Linear(arch.hidden_size, r) if arch.gate else None  # G
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def forward(self, hidden: Tensor, prev: Tensor, extra: Tensor | None = None) -> Tensor:
        e = self.table(prev.to(self.device))  # [..., r] (prev [...])
        if self.gate is not None:
            e = e * torch.sigmoid(self.gate(hidden.to(self.dtype)))  # [..., r] (hidden [..., H])
        delta = self.out(e).float()  # [..., Vd]
        if extra is None:
            return delta
        return torch.cat([delta, delta.new_zeros(*delta.shape[:-1], 1)], -1)  # [..., Vd+1]: no bias on the seed column

    def step(self, h: Tensor, prev: Tensor, state, extra: Tensor | None = None):
        return self(h, prev, extra), None  # Markov: no state beyond the previous token


class DominoCorrector(SequentialCorrector):
    def __init__(self, arch: SequentialArch, drafter):
        super().__init__()
        E = drafter.embed_tokens.weight
        if tuple(E.shape) != (arch.vocab_size, arch.embed_dim):
            raise ValueError(f"embedding is {tuple(E.shape)}, the corrector expects ({arch.vocab_size}, {arch.embed_dim})")
        self.arch, r = arch, arch.rank
        self.__dict__["_drafter"] = drafter  # shared embedding and head: not registered (not trained/saved/moved)
        self.inp = nn.Linear(arch.embed_dim, r)  # W_in
        self.gru = nn.GRU(r, r, batch_first=True)
        # the GRU's own parameters, as the walk's cell reads them (compiled graphs cannot trace an nn.GRU module)
        self.__dict__["_cell"] = (self.gru.weight_ih_l0, self.gru.bias_ih_l0, self.gru.weight_hh_l0, self.gru.bias_hh_l0)
        self.up = nn.Linear(r, arch.hidden_size, bias=False)  # U, zero-initialised
        nn.init.zeros_(self.up.weight)

    def _inputs(self, prev: Tensor) -> Tensor:
        emb = self._drafter.embed_tokens
        with torch.no_grad():
            e = emb(prev.to(emb.weight.device))  # [*, De], frozen
        return self.inp(e.to(self.device, self.dtype))  # [*, r]

    def _delta(self, s: Tensor, extra: Tensor | None = None) -> Tensor:
        """s [*, r] (extra [*]: the seed column's ids) -> W_head U s [*, Vd] (+ the column's (U s)·W_full[seed])."""
        w = head_weight(self._drafter)  # [Vd, H]
        u = self.up(s)  # [*, H]
        delta = F.linear(u.to(w.dtype), w).float()  # [*, Vd] = W_head U s
        if extra is None:
            return delta
        rows = self._drafter.lm_head.weight[extra.clamp(min=0)]  # [*, H] the seeds' full-head rows (frozen)
        col = (u.to(rows.dtype) * rows).sum(-1).float().masked_fill(extra < 0, 0.0)  # [*] (ℓ is −inf there)
        return torch.cat([delta, col[..., None]], -1)  # [*, Vd+1]

    def forward(self, hidden: Tensor, prev: Tensor, extra: Tensor | None = None) -> Tensor:
        lead, n = prev.shape[:-1], prev.shape[-1]
        x = self._inputs(prev.reshape(-1, n))  # [N, n, r]
        s, _ = self.gru(x)  # [N, n, r]: s_p has read prev_1..prev_p
        ex = None if extra is None else extra.reshape(-1, n)  # [N, n]
        return self._delta(s, ex).reshape(*lead, n, -1)  # [*, n, Vd(+1)]

    def step(self, h: Tensor, prev: Tensor, state, extra: Tensor | None = None):
        x = self._inputs(prev)  # [N, r]
        s = gru_cell(x, x.new_zeros(x.shape) if state is None else state, *self._cell)  # [N, r]
        return self._delta(s, extra), s


def gru_cell(x: Tensor, h: Tensor, w_ih: Tensor, b_ih: Tensor, w_hh: Tensor, b_hh: Tensor) -> Tensor:
    """One step of a one-layer `nn.GRU` as plain ops on its weights: x [N, r], h [N, r] -> the next state [N, r]
    (PyTorch's gate order r, z, n). The walk runs it slot by slot; unlike the module's fused call it compiles into
    the proposal step's graph and never re-packs the weights."""
    gi = F.linear(x, w_ih, b_ih)  # [N, 3r]
    gh = F.linear(h, w_hh, b_hh)
    i_r, i_z, i_n = gi.chunk(3, -1)
    h_r, h_z, h_n = gh.chunk(3, -1)
    r, z = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
    n = torch.tanh(i_n + r * h_n)
    return (1 - z) * n + z * h


def build_sequential(arch: SequentialArch, drafter) -> SequentialCorrector:
    """DSpark or Domino (dflash2 is `draftlab.corrector.selector.CandidateSelector`)."""
    if arch.kind not in ("dspark", "domino"):
        raise DraftlabError(f"sequential corrector {arch.kind!r} is not valid; choose dspark or domino")
    return DSparkCorrector(arch) if arch.kind == "dspark" else DominoCorrector(arch, drafter)


def sequential_arch(kind: str, drafter, rank: int = 64, gate: bool = True, variant: str = "",
                    top_k: int = 0) -> SequentialArch:
    """The architecture of a sequential corrector on top of `drafter` (top_k: dflash2's K)."""
    V, De = drafter.embed_tokens.weight.shape
    return SequentialArch(kind=kind, hidden_size=drafter.arch.hidden_size, vocab_size=V,
                          draft_vocab_size=head_weight(drafter).shape[0], embed_dim=De, rank=rank, gate=gate,
                          top_k=top_k if kind == "dflash2" else 0, variant=variant or kind)


# ---- the families' settings and records ------------------------------------------------------------------------


@dataclass
class DSparkConfig:
    """DSpark's settings, `corrector.families.dspark`."""

    rank: int = 64  # r: the bias's rank
    gate: bool = True  # gate the bias by the slot's hidden state

    def check(self, p: str) -> None:
        if self.rank <= 0:
            raise ConfigError(f"{p}.rank={self.rank!r} must be > 0")


@dataclass
class DominoConfig:
    """Domino's settings, `corrector.families.domino`."""

    rank: int = 64  # r: the GRU's width

    def check(self, p: str) -> None:
        if self.rank <= 0:
            raise ConfigError(f"{p}.rank={self.rank!r} must be > 0")


def checked_load(arch: SequentialArch, drafter, build: Callable[[SequentialArch, object], SequentialCorrector]):
    """A saved walk's module around `drafter`, after checking that it was trained for a drafter of this shape."""
    want = sequential_arch(arch.kind, drafter, arch.rank, arch.gate, arch.variant, arch.top_k)
    if want != arch:
        raise DraftlabError(f"the sequential corrector was trained for a drafter with (H, V, Vd, De) = "
                            f"{(arch.hidden_size, arch.vocab_size, arch.draft_vocab_size, arch.embed_dim)}; this one "
                            f"has {(want.hidden_size, want.vocab_size, want.draft_vocab_size, want.embed_dim)}")
    return build(arch, drafter)


def walk_cost(kind: str, rank: int, gate: bool, s: Shape) -> Cost:
    """A walk's parameters (`count_parameters`) and, per candidate, its state and its share of the slot's δ."""
    arch = SequentialArch(kind, s.hidden, s.vocab, s.draft_vocab, s.embed_dim, rank, gate, s.k)
    H, r, Vd = s.hidden, rank, s.draft_vocab
    per_slot = {"dspark": 2 * H * r * gate + 2 * r * Vd,  # the gate, W2 over the draft vocabulary
                "domino": 2 * s.embed_dim * r + 12 * r * r + 2 * r * H + 2 * H * Vd,  # W_in, the GRU, U, the head
                "dflash2": 2 * H * r + 2 * s.k * r}.get(kind, 0)  # W h, the K candidates' codebook products
    return Cost(count_parameters(arch)["total"], (rank + (s.draft_vocab if kind == "dspark" else s.hidden)) // s.k + 1,
                s.slots * per_slot)


# the baselines the paper compares with train on the main arms' budget (docs/algorithms.md "DCOCO")
DSPARK = Family(
    name="dspark", module=__name__, arch=SequentialArch, format=FORMAT, config=DSparkConfig, budget="main",
    corrector=DSparkCorrector,
    build=lambda cfg, drafter, v, k: build_sequential(sequential_arch("dspark", drafter, cfg.rank, cfg.gate), drafter),
    load=lambda arch, drafter: checked_load(arch, drafter, build_sequential),
    cost=lambda cfg, s: walk_cost("dspark", cfg.rank, cfg.gate, s),
    variants=(Variant("dspark", "dspark"),), arms={"dspark": {"": ArmEntry("dspark", colour="#bcbd22"), SAMPLED: ArmEntry("dspark", walk=SAMPLED)}})
DOMINO = Family(
    name="domino", module=__name__, arch=SequentialArch, format=FORMAT, config=DominoConfig, budget="main",
    corrector=DominoCorrector,
    build=lambda cfg, drafter, v, k: build_sequential(sequential_arch("domino", drafter, cfg.rank), drafter),
    load=lambda arch, drafter: checked_load(arch, drafter, build_sequential),
    cost=lambda cfg, s: walk_cost("domino", cfg.rank, True, s),
    variants=(Variant("domino", "domino"),), arms={"domino": {"": ArmEntry("domino", colour="#7f7f7f"), SAMPLED: ArmEntry("domino", walk=SAMPLED)}})
FAMILIES = (DSPARK, DOMINO)
