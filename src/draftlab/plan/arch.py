"""The target's and the drafter's shapes for the cost plan (numbers only, no weights loaded).

`target_shape(cfg, prepared)` reads the architecture numbers from a config.json when one is at hand — the
local folder (`target.source=local`), the Hugging Face cache for a hub id (offline: the cache only), or the
prepared `models/target` folder when it was prepared from this very target — and otherwise from the preset's
`target.arch` (conf/target/*.yaml). Where both exist and disagree, the config.json wins and the disagreement
is reported. `drafter_shape` applies the drafter section's widths (0 = the target's) and its taps.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

from draftlab.errors import ConfigError

if TYPE_CHECKING:  # the schemas: kept out of the imports, so the accelerator check (draftlab.checks.scale)
    # can use the model bare
    from draftlab.config import DrafterConfig, TargetConfig

# config.json key -> TargetArchConfig field
HF_KEYS = {"num_hidden_layers": "num_layers", "hidden_size": "hidden_size", "num_attention_heads": "num_heads",
           "num_key_value_heads": "num_kv_heads", "head_dim": "head_dim", "intermediate_size": "intermediate_size",
           "vocab_size": "vocab_size", "tie_word_embeddings": "tie_word_embeddings"}
REQUIRED = ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "intermediate_size", "vocab_size")


@dataclass(frozen=True)
class _Stack:
    """A decoder stack's widths: what the target and the drafter share (and the layer's weight count)."""
    num_layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int

    def layer_params(self) -> int:
        """Weights of one decoder layer (attention, SwiGLU MLP, norms, q/k norms)."""
        H, hd, kd = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        return 2 * H * hd + 2 * H * kd + 3 * H * self.intermediate + 2 * H + 2 * self.head_dim


@dataclass(frozen=True)
class TargetShape(_Stack):
    vocab: int
    tied: bool
    source: str  # where the numbers came from (preset / a config.json path)
    notes: tuple[str, ...] = ()  # disagreements between the preset and the config.json

    def params(self) -> int:
        emb = self.vocab * self.hidden
        return self.num_layers * self.layer_params() + emb * (1 if self.tied else 2) + self.hidden


@dataclass(frozen=True)
class DrafterShape(_Stack):
    n_taps: int
    deepest_tap: int  # the target's pass stops after this layer when no label needs its logits
    block_size: int
    draft_vocab: int  # Vd (= the target's vocabulary when drafter.draft_vocab_size = 0)

    def params(self) -> int:
        """Trainable weights: the tap projection, the layers, the norms (embedding and LM head are the target's)."""
        H = self.hidden
        return self.n_taps * H * H + 2 * H + self.num_layers * self.layer_params()


def _from_json(path: Path) -> dict:
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path} is not a readable config.json ({e}); fix it or drop target.path") from None
    raw = raw.get("text_config", raw)  # multimodal wrappers keep the language model's numbers here
    out = {HF_KEYS[k]: v for k, v in raw.items() if k in HF_KEYS and v is not None}
    if "head_dim" not in out and out.get("hidden_size") and out.get("num_heads"):
        out["head_dim"] = out["hidden_size"] // out["num_heads"]
    out.setdefault("num_kv_heads", out.get("num_heads", 0))
    return out


def config_json(cfg: TargetConfig, prepared: str | Path | None = None) -> Path | None:
    """The config.json that describes this target, if one is on this machine (no network)."""
    if cfg.source == "local":
        p = Path(cfg.path) / "config.json"
        return p if p.exists() else None
    if cfg.source == "hub":
        try:
            from huggingface_hub import try_to_load_from_cache
        except ImportError:
            return None
        hit = try_to_load_from_cache(cfg.path, "config.json")
        return Path(hit) if isinstance(hit, str) else None
    if prepared is not None and cfg.source == "packaged-gguf":  # prepared from this GGUF?
        info = Path(prepared) / "draftlab_target.json"
        try:
            same = json.loads(info.read_text()).get("gguf") == cfg.gguf_file
        except (OSError, ValueError):
            return None
        p = Path(prepared) / "config.json"
        return p if same and p.exists() else None
    return None


def target_shape(cfg: TargetConfig, prepared: str | Path | None = None) -> TargetShape:
    """The target's numbers (see the module docstring); a one-line ConfigError when neither source has them."""
    preset = {f.name: getattr(cfg.arch, f.name) for f in fields(cfg.arch)}
    vals, source, notes = dict(preset), f"preset target.arch ({cfg.name})", []
    found, where = None, ""
    if cfg.source == "random":  # the random section is the model's own definition (the vocabulary: its tokenizer's)
        r = cfg.random
        found = dict(num_layers=r.num_layers, hidden_size=r.hidden_size, num_heads=r.num_heads,
                     num_kv_heads=r.num_kv_heads, head_dim=r.hidden_size // r.num_heads,
                     intermediate_size=r.intermediate_size, tie_word_embeddings=True)
        where = "target.random"
    elif (path := config_json(cfg, prepared)) is not None:
        found, where = _from_json(path), str(path)
    if found is not None:
        for k, v in found.items():
            if (isinstance(preset.get(k), bool) or preset.get(k)) and preset[k] != v:
                notes.append(f"target.arch.{k}={preset[k]} in the preset, {v} in {where}: using {v}")
        vals.update(found)
        source = where if cfg.source != "random" else f"{where} + the preset's vocabulary"
    if not vals.get("head_dim") and vals.get("hidden_size") and vals.get("num_heads"):
        vals["head_dim"] = vals["hidden_size"] // vals["num_heads"]
    missing = [k for k in REQUIRED if not vals.get(k)]
    if missing:
        raise ConfigError(f"target '{cfg.name}' has no architecture numbers ({', '.join('target.arch.' + k for k in missing)}"
                          f" unset and no config.json found); add them to conf/target/{cfg.name}.yaml or set "
                          "target.source=local target.path=FOLDER")
    return TargetShape(vals["num_layers"], vals["hidden_size"], vals["num_heads"], vals["num_kv_heads"],
                       vals["head_dim"], vals["intermediate_size"], vals["vocab_size"],
                       bool(vals.get("tie_word_embeddings")), source, tuple(notes))


def shapes_of(target, drafter) -> tuple[TargetShape, DrafterShape]:
    """The shapes of a live target (`verifier.TargetModel`: its Hugging Face config) and DFlash drafter (its arch)."""
    c, a = target.config, drafter.arch
    t = TargetShape(c.num_hidden_layers, c.hidden_size, c.num_attention_heads,
                    getattr(c, "num_key_value_heads", None) or c.num_attention_heads,
                    getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads, c.intermediate_size,
                    c.vocab_size, bool(getattr(c, "tie_word_embeddings", False)), "model")
    return t, DrafterShape(a.num_layers, a.hidden_size, a.num_heads, a.num_kv_heads, a.head_dim, a.intermediate_size,
                           a.n_taps, max(a.target_layer_ids), a.block_size, a.draft_vocab_size or c.vocab_size)


def drafter_shape(t: TargetShape, d: DrafterConfig) -> DrafterShape:
    """The drafter `arch_from_target` would build on t (widths 0 = the target's; taps: one per layer when unset,
    evenly spaced in [1, L-3], so the deepest is layer L-3), read through the section's one conversion."""
    d = d.design()  # draftlab.drafter.arch.DrafterDesign
    heads = d.num_heads or t.heads
    head_dim = t.head_dim if not d.num_heads else t.hidden // heads
    taps = list(d.target_layer_ids)
    n_taps = len(taps) or d.num_layers
    hi = max(1, t.num_layers - 3)  # verifier.model.TargetModel.default_taps: [1, L-3], one tap = the middle
    deepest = max(taps) if taps else (hi if n_taps > 1 else (1 + hi) // 2)
    return DrafterShape(d.num_layers, t.hidden, heads, d.num_kv_heads or t.kv_heads, head_dim,
                        d.intermediate_size or t.intermediate, n_taps, deepest, d.block_size,
                        d.draft_vocab_size or t.vocab)
