"""The DFlash drafter's architecture record (`DrafterArch`, serialised as the checkpoint's config.json)
and `arch_from_target`, which builds one from the target's config and a `DrafterDesign` (what the drafter is apart
from its target: drafter.* of params.yaml, `DrafterConfig.design()`). Plain dataclasses; the model
(`draftlab.drafter.model`) and its layers (`draftlab.drafter.layers`) both read the arch."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from draftlab.drafter.masks import CONVENTION
from draftlab.errors import DraftlabError
from draftlab.ngram import check_seed

FORMAT = "draftlab-dflash-v1"


@dataclass
class DrafterArch:
    block_size: int  # S, slot 0 included
    num_layers: int
    hidden_size: int  # = the target's hidden size
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    rope_theta: float
    target_layer_ids: list[int]  # tap i = output of target layer i (HF hidden_states[i+1])
    mask_token_id: int
    target_vocab_size: int
    target_num_layers: int
    draft_vocab_size: int = 0  # 0 = the full target vocabulary
    convention: str = CONVENTION  # slot k predicts token anchor+k; slot 0 unsupervised
    initializer_range: float = 0.02
    target_name: str = ""
    format: str = FORMAT
    # RMSNorm each tap before `fc` (own weight per tap): the taps differ in scale by orders of
    # magnitude (late layers carry ~96% of the concatenated energy), so `fc` otherwise sees mostly them
    tap_norm: bool = False
    out_norm_init: float = 1.0  # initial weight of the drafter's final norm (in front of the shared head)
    # kv heads of the first layer initialised to attend to the block's own slots (slot 0 = the token the
    # block continues) rather than spread over hundreds of context positions (see `init_block_heads`)
    init_block_heads: int = 0
    # seeded block drafting (docs/algorithms.md "Seeded block drafting"): "none" = the paper's [x_a, MASK, ...];
    # "lookup" = slots 1..n start from the prompt-lookup continuation of x_{<=a} (`draftlab.ngram`); a config.json
    # without the field loads as "none"
    seed: str = "none"
    seed_max_ngram: int = 3  # the longest suffix n-gram the seed looks up (then shorter, down to seed_min_match)
    seed_min_match: int = 1
    # the seed column: beside a draft vocabulary's logits, each seeded slot's seed gets its own logit from its
    # full LM-head row, so a seed outside the draft vocabulary can still be proposed (no effect without one)
    seed_logit: bool = False
    # the seed bias: one learned scalar per proposed slot (1..n), added to the logit of that slot's seed (in the
    # draft vocabulary, or on the seed column); this value is its initial value (0 = no bias, no parameter)
    seed_bias: float = 0.0

    @property
    def seeded(self) -> bool:
        return self.seed != "none"

    @property
    def n_taps(self) -> int:
        return len(self.target_layer_ids)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class DrafterDesign:
    """A drafter's architecture apart from its target (the target gives width, eps, rotary base and vocabulary):
    what `DrafterConfig.design()` reads from params.yaml, with the run's MASK id and draft vocabulary resolved."""

    block_size: int  # S, slot 0 included
    num_layers: int
    target_layer_ids: list[int] = field(default_factory=list)  # taps; [] = evenly spaced, one per layer
    mask_token_id: int = -1  # a token id: drafter.mask_token_id=-1 (auto) is resolved from the tokenizer first
    draft_vocab_size: int = 0  # the head's vocabulary; 0 = the full target vocabulary
    intermediate_size: int = 0  # 0 = the target's
    num_heads: int = 0  # 0 = the target's
    num_kv_heads: int = 0  # 0 = the target's
    tap_norm: bool = False
    out_norm_init: float = 1.0
    init_block_heads: int = 0
    seed: str = "none"
    seed_max_ngram: int = 3
    seed_min_match: int = 1
    seed_logit: bool = False
    seed_bias: float = 0.0


def _rope_theta(cfg) -> float:
    params = getattr(cfg, "rope_parameters", None)
    if isinstance(params, dict) and "rope_theta" in params:
        return float(params["rope_theta"])
    return float(getattr(cfg, "rope_theta", 10000.0) or 10000.0)


def arch_from_target(target, d: DrafterDesign) -> DrafterArch:
    """The drafter arch of design `d` on this target (its width, heads, eps, rotary base and vocabulary)."""
    if d.mask_token_id < 0:
        raise DraftlabError(f"the drafter's MASK id is {d.mask_token_id}: resolve drafter.mask_token_id=-1 (auto) to a "
                            "token id first (DrafterConfig.design(mask_token_id=...))")
    cfg = target.config
    H = target.hidden_size
    heads = d.num_heads or cfg.num_attention_heads
    kv = d.num_kv_heads or getattr(cfg, "num_key_value_heads", None) or heads
    head_dim = getattr(cfg, "head_dim", None) if not d.num_heads else None
    head_dim = head_dim or H // heads
    check_seed(d.seed, d.seed_max_ngram, d.seed_min_match, seed_logit=d.seed_logit, seed_bias=d.seed_bias)
    taps = list(d.target_layer_ids) or target.default_taps(d.num_layers)
    for i in taps:
        if not 0 <= i < target.num_layers:
            raise DraftlabError(f"drafter tap layer {i} does not exist; the target has layers 0..{target.num_layers - 1}")
    return DrafterArch(
        block_size=d.block_size, num_layers=d.num_layers, hidden_size=H, num_heads=heads, num_kv_heads=kv,
        head_dim=head_dim, intermediate_size=d.intermediate_size or cfg.intermediate_size,
        rms_norm_eps=float(getattr(cfg, "rms_norm_eps", 1e-6)), rope_theta=_rope_theta(cfg),
        target_layer_ids=taps, mask_token_id=int(d.mask_token_id), target_vocab_size=target.vocab_size,
        target_num_layers=target.num_layers, draft_vocab_size=int(d.draft_vocab_size),
        initializer_range=float(getattr(cfg, "initializer_range", 0.02)), target_name=getattr(target, "name", ""),
        tap_norm=bool(d.tap_norm), out_norm_init=float(d.out_norm_init), init_block_heads=int(d.init_block_heads),
        seed=d.seed, seed_max_ngram=int(d.seed_max_ngram), seed_min_match=int(d.seed_min_match),
        seed_logit=bool(d.seed_logit), seed_bias=float(d.seed_bias))


def require_plain(arch: DrafterArch, where: str) -> None:
    """One line when a seeded drafter reaches a path that builds plain `[x_a, MASK, ...]` blocks."""
    if arch.seeded:
        raise DraftlabError(f"{where} cannot seed its blocks, but this drafter was trained with drafter.seed="
                            f"{arch.seed!r}; use a plain drafter (drafter.seed=none) here, or an arm that seeds "
                            f"(dflash-seeded)")
