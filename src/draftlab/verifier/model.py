"""The target (verifier) model: a Hugging Face causal LM's weights behind one small, explicit API.

`TargetModel.forward` runs new tokens against a KV cache (`forward.KVCache`) with explicit logical position ids and an
explicit boolean attention mask over [cache slots + new tokens], and returns logits plus the hidden states of the
chosen layers ("taps", docs/algorithms.md "DFlash": the output of layer i, i.e. HF `hidden_states[i+1]`). The pass
is the project's own loop over the model's weights (`draftlab.verifier.forward`): no forward hooks, no additive
float mask, no `repeat_kv`. Because the mask is always explicit, the same call serves prefill, cached extension,
verification of a block, ragged multi-stream batches (rejected slots stay in the cache as masked "holes") and
packed tree scoring (SpecOPD rows appended to a trunk cache). `need_logits=False` (training features: no label reads
the logits) stops the pass once the deepest tap is computed; `hidden_only=True` returns the final-normed hidden
state so a caller can apply the head (`head`) a few rows at a time. Plain torch: no paths, no Lightning.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from draftlab.verifier.forward import KVCache, decoder_forward, stream_step, tree_step
from draftlab.compiling import compiled_steps
from draftlab.compiling import MAX_GRAPHS

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3", "mistral")


@dataclass
class TargetOutput:
    logits: Tensor | None  # [B, T, V] float32; None when the pass stopped at the deepest tap (need_logits=False)
    taps: Tensor | None  # [B, T, n_taps * H] (model dtype); None when no taps were asked for
    hidden: Tensor | None = None  # [B, T, H] final-normed last hidden state (hidden_only=True; `head` -> logits)


class TargetModel(nn.Module):
    """A frozen causal LM. `model` is a transformers *ForCausalLM of a supported family; its weights run through
    `draftlab.verifier.forward` (its own forward is not called)."""

    def __init__(self, model: nn.Module, tokenizer=None, name: str = "target"):
        super().__init__()
        mtype = getattr(model.config, "model_type", "?")
        if mtype not in SUPPORTED_MODEL_TYPES:
            from draftlab.errors import DraftlabError

            raise DraftlabError(f"unsupported target architecture '{mtype}'; supported: {', '.join(SUPPORTED_MODEL_TYPES)}")
        if getattr(model.config, "sliding_window", None) and getattr(model.config, "use_sliding_window", True) and \
                any(t == "sliding_attention" for t in (getattr(model.config, "layer_types", None) or [])):
            from draftlab.errors import DraftlabError

            raise DraftlabError(f"target {name} has sliding-window layers, which the project's forward does not model")
        self.model = model.eval().requires_grad_(False)
        self.tokenizer = tokenizer
        self.name = name
        self.step = stream_step  # the streams' pass (`forward.stream_step`); `compile_steps` swaps in a compiled one
        self.tree = tree_step  # a tree round's pass (`forward.tree_step`), compiled with it
        self.compiled = "off"
        self.backend = None  # the torch.compile backend the steps were compiled with (None: the project's default)
        self.shapes = None  # a compiled run's declared shapes (`decoding.shapes`), set before anything compiles
        self.max_graphs = MAX_GRAPHS  # engine.max_graphs: the most graphs one compiled run may plan

    def compile_steps(self, mode: str = "on", backend=None, max_graphs: int = MAX_GRAPHS) -> str:
        """Compile the streams' pass and the tree pass (`compiling.compiled_steps`): `torch.compile(fullgraph=True,
        dynamic=False)`, mode `reduce-overhead` (CUDA graphs) on CUDA, inductor's default on CPU; one graph per shape
        (batch, new tokens, slots, taps). A decode plans its graphs before its first compiled call and refuses a plan of
        more than `max_graphs` (engine.max_graphs) in one line (`decoding.shapes.run_shapes`). `off` restores the
        eager passes. Returns what runs (recorded by the benchmark)."""
        if isinstance(max_graphs, bool) or not isinstance(max_graphs, int) or max_graphs < 1:
            from draftlab.errors import DraftlabError

            raise DraftlabError(f"max_graphs={max_graphs!r} must be an integer >= 1 (engine.max_graphs: the most "
                                f"compiled graphs one run may plan)")
        (self.step, self.tree), self.compiled = compiled_steps(mode, (stream_step, tree_step),
                                                               self.device.type == "cuda", backend)
        if mode == "off":  # eager: no backend, no declared run
            self.backend, self.shapes, self.max_graphs = None, None, MAX_GRAPHS
        else:
            self.backend, self.max_graphs = backend, max_graphs
        return self.compiled

    # ---- facts about the model ------------------------------------------------------------
    @property
    def config(self):
        return self.model.config

    @property
    def layers(self) -> nn.ModuleList:
        return self.model.model.layers

    @property
    def num_layers(self) -> int:
        return self.config.num_hidden_layers

    @property
    def hidden_size(self) -> int:
        return self.config.hidden_size

    @property
    def kv_heads(self) -> int:
        return getattr(self.config, "num_key_value_heads", None) or self.config.num_attention_heads

    @property
    def head_dim(self) -> int:
        return getattr(self.config, "head_dim", None) or self.hidden_size // self.config.num_attention_heads

    @property
    def vocab_size(self) -> int:
        return self.model.get_input_embeddings().weight.shape[0]

    @property
    def embed_tokens(self) -> nn.Embedding:
        return self.model.get_input_embeddings()

    @property
    def lm_head(self) -> nn.Linear:
        return self.model.get_output_embeddings()

    @property
    def final_norm(self) -> nn.Module:
        return self.model.model.norm

    @property
    def device(self) -> torch.device:
        return self.embed_tokens.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.embed_tokens.weight.dtype

    @property
    def eos_token_ids(self) -> list[int]:
        eos = self.model.generation_config.eos_token_id if self.model.generation_config else None
        eos = eos if eos is not None else self.config.eos_token_id
        return [eos] if isinstance(eos, int) else list(eos or [])

    def default_taps(self, n: int) -> list[int]:
        """n layer ids evenly spaced in [1, L-3] (one drafter layer -> the middle layer)."""
        lo, hi = 1, max(1, self.num_layers - 3)
        if n == 1:
            return [(lo + hi) // 2]
        return [round(lo + (hi - lo) * i / (n - 1)) for i in range(n)]

    # ---- forward ----------------------------------------------------------------------------
    def new_cache(self) -> KVCache:
        """An empty KV cache (its buffers grow in place, `forward.KVCache`)."""
        return KVCache(self.num_layers)

    @torch.no_grad()
    def forward(
        self,
        input_ids: Tensor,  # [B, T]
        cache: KVCache | None = None,
        position_ids: Tensor | None = None,  # [B, T] logical positions
        mask: Tensor | None = None,  # [B, T, L+T] bool, True = may attend (L = cache length)
        taps: list[int] | tuple[int, ...] = (),
        logits_to_keep: int = 0,  # 0 = logits of every new token; n = only the last n (prefill: 1)
        need_logits: bool = True,  # False: stop after the deepest tap (no later layers, no head; no cache)
        hidden_only: bool = False,  # True: the final-normed hidden state instead of logits (`head` applies later)
    ) -> TargetOutput:
        B, T = input_ids.shape
        if not need_logits and (cache is not None or not taps):
            raise ValueError("need_logits=False stops the pass after the deepest tap: it needs taps and no KV cache "
                             "(a cache would be left with only the lower layers filled)")
        past = cache.get_seq_length() if cache is not None else 0
        dev = input_ids.device
        if position_ids is None:
            position_ids = torch.arange(past, past + T, device=dev).expand(B, T)
        if mask is None:
            mask = causal_mask(torch.ones(B, past, dtype=torch.bool, device=dev), T)
        if mask.shape != (B, T, past + T):
            raise ValueError(f"mask shape {tuple(mask.shape)} != {(B, T, past + T)}")
        if cache is not None:
            cache.reserve(B, T, self.kv_heads, self.head_dim, self.dtype, dev)
        keep = None if not logits_to_keep else torch.arange(T - logits_to_keep, T, device=dev).expand(B, -1)
        logits, tap, hidden = decoder_forward(self.model, input_ids, position_ids, mask, cache, None, tuple(taps),
                                              stop_at_taps=not need_logits, logits_at=keep, hidden_only=hidden_only)
        if cache is not None:
            cache.advance(T)
        return TargetOutput(logits, tap, hidden)

    @torch.no_grad()
    def head(self, hidden: Tensor) -> Tensor:
        """Final-normed hidden states [..., H] (`hidden_only`) -> float32 logits [..., V]: the rest of the pass."""
        return self.lm_head(hidden).float()


# ---- masks --------------------------------------------------------------------------------------


def left_pad(rows: list[list[int]], pad: int) -> tuple[Tensor, Tensor]:
    """(ids, attention mask) of token rows of unequal length, padded on the left with `pad` (as Hugging Face
    `generate` and a batched prefill take them): mask 1 on each row's own tokens."""
    T = max(len(r) for r in rows)
    ids = torch.full((len(rows), T), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), T), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, T - len(r):] = torch.tensor(r)
        mask[i, T - len(r):] = 1
    return ids, mask


def causal_mask(past_valid: Tensor, T: int, new_valid: Tensor | None = None) -> Tensor:
    """Mask for T new tokens appended after a cache whose slots are `past_valid` [B, L] (False =
    padding or a rejected hole). New tokens are causal among themselves; an invalid new token
    (padding) is seen by nobody but itself (so no row is empty). Returns bool [B, T, L+T]."""
    B, L = past_valid.shape
    dev = past_valid.device
    tri = torch.ones(T, T, dtype=torch.bool, device=dev).tril()  # [T, T]
    new = tri.expand(B, T, T)
    if new_valid is not None:
        eye = torch.eye(T, dtype=torch.bool, device=dev)
        new = (new & new_valid[:, None, :]) | eye
    return torch.cat([past_valid[:, None, :].expand(B, T, L), new], dim=-1)


def crop_cache(cache: KVCache, n: int) -> None:
    """Keep the first n slots."""
    cache.crop(n)


def gather_cache(cache: KVCache, index: Tensor) -> None:
    """Re-order cache slots per stream: index [B, L'] picks slot ids (used to compact holes)."""
    cache.gather_slots(index)
