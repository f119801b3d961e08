"""The target (verifier) model: a Hugging Face causal LM behind one small, explicit API.

`TargetModel.forward` runs new tokens against a KV cache with explicit logical position ids and an
explicit boolean attention mask over [cache slots + new tokens], and returns logits plus the hidden
states of the chosen layers ("taps", docs/algorithms.md "DFlash": the output of layer i, i.e. HF `hidden_states[i+1]`).
Because the mask is always explicit, the same call serves prefill, cached extension, verification
of a block, ragged multi-stream batches (rejected slots stay in the cache as masked "holes") and
packed tree scoring (SpecOPD rows appended to a trunk cache). `need_logits=False` (training features:
no label reads the logits) stops the pass once the deepest tap is computed; `hidden_only=True` returns the
final-normed hidden state so a caller can apply the head (`head`) a few rows at a time. Plain torch: no paths, no Lightning.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3", "mistral")


@dataclass
class TargetOutput:
    logits: Tensor | None  # [B, T, V] float32; None when the pass stopped at the deepest tap (need_logits=False)
    taps: Tensor | None  # [B, T, n_taps * H] (model dtype); None when no taps were asked for
    hidden: Tensor | None = None  # [B, T, H] final-normed last hidden state (hidden_only=True; `head` -> logits)


class TargetModel(nn.Module):
    """A frozen causal LM with tap hooks. `model` is a transformers *ForCausalLM of a supported family."""

    def __init__(self, model: nn.Module, tokenizer=None, name: str = "target"):
        super().__init__()
        mtype = getattr(model.config, "model_type", "?")
        if mtype not in SUPPORTED_MODEL_TYPES:
            from draftlab.errors import DraftlabError

            raise DraftlabError(f"unsupported target architecture '{mtype}'; supported: {', '.join(SUPPORTED_MODEL_TYPES)}")
        self.model = model.eval().requires_grad_(False)
        self.tokenizer = tokenizer
        self.name = name
        self._tap_store: dict[int, Tensor] = {}
        for i, layer in enumerate(self.layers):
            layer.register_forward_hook(self._make_hook(i))
        self._active_taps: tuple[int, ...] = ()
        self._stop_at: int | None = None
        self._cache_kw = cache_keyword(model)
        self._base_cache_kw = cache_keyword(model.model)  # the decoder without its head (hidden_only)

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
    def _make_hook(self, i: int):
        def hook(_module, _inp, out):
            if i in self._active_taps:
                self._tap_store[i] = out[0] if isinstance(out, tuple) else out
                if i == self._stop_at:
                    raise _StopForward  # the deepest tap is in: nothing above it is needed

        return hook

    def new_cache(self) -> DynamicCache:
        """A DynamicCache whose layers grow in place (see `BufferedLayer`)."""
        cache = DynamicCache(config=self.config)
        cache.layers = [BufferedLayer() for _ in cache.layers]
        return cache

    @torch.no_grad()
    def forward(
        self,
        input_ids: Tensor,  # [B, T]
        cache: DynamicCache | None = None,
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
        if position_ids is None:
            position_ids = torch.arange(past, past + T, device=input_ids.device).expand(B, T)
        if mask is None:
            mask = causal_mask(torch.ones(B, past, dtype=torch.bool, device=input_ids.device), T)
        if mask.shape != (B, T, past + T):
            raise ValueError(f"mask shape {tuple(mask.shape)} != {(B, T, past + T)}")
        add = additive_mask(mask, self.dtype)  # [B, 1, T, L+T]
        self._active_taps, self._tap_store = tuple(taps), {}
        self._stop_at = None if need_logits else max(taps)
        logits = hidden = None
        try:
            try:
                if hidden_only:
                    hidden = self.model.model(input_ids=input_ids, position_ids=position_ids, attention_mask=add,
                                              use_cache=cache is not None,
                                              **{self._base_cache_kw: cache}).last_hidden_state  # [B, T, H]
                else:
                    out = self.model(input_ids=input_ids, position_ids=position_ids, attention_mask=add,
                                     use_cache=cache is not None, logits_to_keep=logits_to_keep,
                                     **{self._cache_kw: cache})
                    logits = out.logits.float()
            except _StopForward:
                pass
            tap = torch.cat([self._tap_store[i] for i in taps], dim=-1) if taps else None
        finally:
            self._active_taps, self._tap_store, self._stop_at = (), {}, None
        return TargetOutput(logits, tap, hidden)

    @torch.no_grad()
    def head(self, hidden: Tensor) -> Tensor:
        """Final-normed hidden states [..., H] (`hidden_only`) -> float32 logits [..., V]: the rest of the pass."""
        return self.lm_head(hidden).float()


class _StopForward(Exception):
    """Raised by the deepest tap's hook in a `need_logits=False` pass (caught by `TargetModel.forward`)."""


def cache_keyword(model: nn.Module) -> str:
    """The forward keyword of the KV cache: `cache` (transformers >= 5.2x; `past_key_values` is a deprecated
    alias there) or `past_key_values` (earlier 5.x, e.g. 5.17, where `cache=` would be silently ignored)."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


class BufferedLayer(DynamicLayer):
    """A cache layer that writes new K/V into a pre-allocated buffer (capacity doubles when full)
    and returns views, instead of concatenating the whole cache at every step. With 32 streams of
    a few hundred tokens the concatenation alone copied hundreds of MB per decoding step."""

    def __init__(self, **kwargs):
        self._k: Tensor | None = None
        self._v: Tensor | None = None
        self.length = 0
        super().__init__(**kwargs)

    @property
    def keys(self) -> Tensor | None:  # type: ignore[override]
        return None if self._k is None else self._k[:, :, : self.length]

    @keys.setter
    def keys(self, value: Tensor | None) -> None:
        self._k = value
        self.length = 0 if value is None or value.dim() < 3 else value.shape[-2]

    @property
    def values(self) -> Tensor | None:  # type: ignore[override]
        return None if self._v is None else self._v[:, :, : self.length]

    @values.setter
    def values(self, value: Tensor | None) -> None:
        self._v = value

    def update(self, key_states: Tensor, value_states: Tensor, *args, **kwargs) -> tuple[Tensor, Tensor]:
        if not self.is_initialized:
            self.device, self.is_initialized = key_states.device, True
            self._k = self._v = None
            self.length = 0
        B, H, T, D = key_states.shape  # [B, kv_heads, T, head_dim]
        need = self.length + T
        if self._k is None or self._k.dim() < 4 or need > self._k.shape[2] or self._k.shape[0] != B:
            cap = max(need, 2 * (self._k.shape[2] if self._k is not None and self._k.dim() == 4 else 0), 64)
            k = key_states.new_empty(B, H, cap, D)
            v = value_states.new_empty(B, value_states.shape[1], cap, value_states.shape[-1])
            if self.length:
                k[:, :, : self.length] = self._k[:, :, : self.length]
                v[:, :, : self.length] = self._v[:, :, : self.length]
            self._k, self._v = k, v
        self._k[:, :, self.length: need] = key_states
        self._v[:, :, self.length: need] = value_states
        self.length = need
        return self._k[:, :, :need], self._v[:, :, :need]

    @property
    def capacity(self) -> int:
        """Slots allocated per stream (>= `length`)."""
        return 0 if self._k is None or self._k.dim() < 4 else self._k.shape[2]

    def select_streams(self, idx: Tensor) -> None:
        """Keep the streams `idx` [B'] (long), in that order, at the same capacity: a dropped stream
        frees its rows, and the survivors do not re-allocate (and re-double) at their next append."""
        if self.capacity == 0:
            return
        L = self.length
        k = self._k.new_empty(idx.numel(), *self._k.shape[1:])  # [B', kv_heads, capacity, head_dim]
        v = self._v.new_empty(idx.numel(), *self._v.shape[1:])
        k[:, :, :L] = self._k[:, :, :L].index_select(0, idx)
        v[:, :, :L] = self._v[:, :, :L].index_select(0, idx)
        self._k, self._v = k, v

    def gather_slots(self, index: Tensor) -> None:
        """Re-order the slots of every stream in place: index [B, L'] (L' <= length) picks slot ids;
        the capacity stays (the gathered slots are written back into the buffer)."""
        k, v = self.keys, self.values  # [B, kv_heads, length, head_dim]
        idx = index[:, None, :, None].expand(-1, k.shape[1], -1, k.shape[-1])
        gk, gv = k.gather(2, idx), v.gather(2, idx)  # [B, kv_heads, L', head_dim]
        W = index.shape[1]
        self._k[:, :, :W] = gk
        self._v[:, :, :W] = gv
        self.length = W

    def get_seq_length(self) -> int:
        return self.length if self.is_initialized else 0

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError("crop takes a negative number of tokens to remove")
        self.length = max(0, self.length + tokens_to_remove)


# ---- masks --------------------------------------------------------------------------------------


def additive_mask(mask: Tensor, dtype: torch.dtype) -> Tensor:
    """bool [B, T, S] (True = attend) -> additive float [B, 1, T, S] (0 / dtype min)."""
    zero = torch.zeros((), dtype=dtype, device=mask.device)
    neg = torch.full((), torch.finfo(dtype).min, dtype=dtype, device=mask.device)
    return torch.where(mask, zero, neg)[:, None]


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


def crop_cache(cache: DynamicCache, n: int) -> None:
    """Keep the first n slots of every layer (transformers' crop takes a negative count to remove)."""
    cur = cache.get_seq_length()
    if n < cur:
        cache.crop(-(cur - n))


def gather_cache(cache: DynamicCache, index: Tensor) -> None:
    """Re-order cache slots per stream: index [B, L'] picks slot ids (used to compact holes)."""
    for layer in cache.layers:
        if getattr(layer, "keys", None) is None or layer.keys.numel() == 0:
            continue
        if isinstance(layer, BufferedLayer):
            layer.gather_slots(index)
            continue
        k, v = layer.keys, layer.values  # read both before assigning (the keys setter resets the length)
        idx = index[:, None, :, None].expand(-1, k.shape[1], -1, k.shape[-1])
        layer.keys = k.gather(2, idx)
        layer.values = v.gather(2, idx)
