"""Exporting a drafter for serving engines: the DFlash folder that z-lab's `dflash` package, vLLM and
SGLang load (`draftlab export SRC OUT --for dflash|vllm|sglang`), and the check of such a folder
against each loader's rules (docs/export.md says what each loader reads, with the commit read).

The folder is the reference format of `draftlab.drafter.refformat` (config.json = a Qwen3 config +
`dflash_config`, model.safetensors = the drafter's own weights under the reference names), plus:
- `max_position_embeddings`, `num_target_layers` from the target (vLLM and SGLang size their rotary
  tables from the first; the second is the target's depth); `dflash_config.mask_token`, the MASK's token
  string, when the target's tokenizer has one for that id (SGLang versions that look the MASK up by string);
- the weights in one chosen dtype (`dtype` in config.json);
- for a reduced draft vocabulary, and only for vLLM (the one engine whose DFlash model has one):
  `draft_vocab_size`, `d2t` [Vd] int64 *offsets* (target id = draft index + d2t[index], EAGLE-3's
  convention) and `lm_head.weight` [Vd, H] = the target's head rows of the draft vocabulary (vLLM
  builds a head of the draft vocabulary's size, so the shared target head cannot stand in).
What the format cannot carry is refused in one line naming the drafter key (e.g. `drafter.tap_norm`).
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields
from pathlib import Path

import torch
from torch import Tensor

from draftlab.drafter.model import DFlashDrafter, DrafterArch
from draftlab.drafter.refformat import reference_config, reference_state, write_reference_folder
from draftlab.errors import DraftlabError
from draftlab.io import CONFIG, WEIGHTS, read_json

ENGINES = ("dflash", "vllm", "sglang")
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
ARCHITECTURE = "DFlashDraftModel"  # the class name every loader dispatches on
# DrafterArch fields the format carries, and those that only shaped the initialisation or describe the
# checkpoint; any other field at a non-default value changes the network, and the format cannot say so
CARRIED = {"block_size", "num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim", "intermediate_size",
           "rms_norm_eps", "rope_theta", "target_layer_ids", "mask_token_id", "target_vocab_size",
           "target_num_layers", "draft_vocab_size", "convention"}
INIT_ONLY = {"initializer_range", "out_norm_init", "init_block_heads"}
META = {"target_name", "format"}
VOCAB_ENGINES = ("vllm",)  # engines whose DFlash model has a reduced draft vocabulary (d2t + own lm_head)


@dataclass
class TargetFacts:
    """What the export needs of the target: its depth, vocabulary, width, context length, and (only for a
    reduced draft vocabulary) its LM-head rows."""

    num_layers: int
    vocab_size: int
    hidden_size: int
    max_position_embeddings: int
    head: Callable[[], Tensor]  # -> [V, H] the target's LM head weight (loaded on demand)
    where: str = "target"
    token: Callable[[int], str | None] = lambda i: None  # id -> its token string in the target's tokenizer, if any


def _token_string(tokenizer, i: int) -> str | None:
    """The token string of id `i` when the tokenizer maps it back to `i` (SGLang looks the MASK up by string)."""
    if tokenizer is None or i >= len(tokenizer):
        return None
    tok = tokenizer.convert_ids_to_tokens(int(i))
    return tok if isinstance(tok, str) and tok and tokenizer.get_vocab().get(tok) == i else None


def facts_from_target(target) -> TargetFacts:
    """TargetFacts of a loaded `TargetModel`."""
    cfg = target.config
    mpe = getattr(cfg, "max_position_embeddings", None)
    if not mpe:
        raise DraftlabError("the target's config has no max_position_embeddings; cannot size the drafter's rotary table")
    return TargetFacts(target.num_layers, target.vocab_size, target.hidden_size, int(mpe),
                       lambda: target.lm_head.weight.detach(), getattr(target, "name", "target"),
                       lambda i: _token_string(getattr(target, "tokenizer", None), i))


def facts_from_folder(path: str | Path) -> TargetFacts:
    """TargetFacts of a target folder on disk (a prepared `models/target`, following its manifest to a
    local folder, or any Hugging Face folder), reading config.json and, on demand, one tensor."""
    from draftlab.verifier.load import MANIFEST

    path = Path(path)
    manifest = path / MANIFEST
    info = read_json(manifest) if manifest.exists() else {}
    if info.get("source") == "hub":
        raise DraftlabError(f"target {path} points at the hub id {info.get('path')!r}; pass --target a local model "
                            f"folder (the export reads its config.json and LM head)")
    folder = Path(info["path"]) if info.get("source") == "local" else path
    if not (folder / CONFIG).exists():
        raise DraftlabError(f"--target {folder} has no {CONFIG}; give the target's model folder (default: the "
                            f"prepare_target output models/target)")
    cfg = read_json(folder / CONFIG)
    cfg = cfg.get("text_config", cfg)
    missing = [k for k in ("num_hidden_layers", "vocab_size", "hidden_size", "max_position_embeddings") if k not in cfg]
    if missing:
        raise DraftlabError(f"{folder / CONFIG} lacks {missing[0]!r}; it is not a decoder config the export can read")
    tied = bool(cfg.get("tie_word_embeddings", False))
    return TargetFacts(int(cfg["num_hidden_layers"]), int(cfg["vocab_size"]), int(cfg["hidden_size"]),
                       int(cfg["max_position_embeddings"]), lambda: _read_head(folder, tied), str(folder),
                       lambda i: _token_string(_folder_tokenizer(folder), i))


def _folder_tokenizer(folder: Path):
    """The folder's tokenizer, or None when it has none (a weights-only folder)."""
    if not any((folder / f).exists() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
        return None
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(folder))
    except Exception:  # noqa: BLE001  an unreadable tokenizer only costs the optional mask_token string
        return None


def _read_head(folder: Path, tied: bool) -> Tensor:
    """The LM head weight [V, H] from a folder's safetensors files (the embedding when tied)."""
    from safetensors import safe_open

    names = ("model.embed_tokens.weight",) if tied else ("lm_head.weight",)
    files = sorted(folder.glob("*.safetensors"))
    for name in names:
        for f in files:
            with safe_open(str(f), framework="pt") as h:
                if name in h.keys():
                    return h.get_tensor(name)
    raise DraftlabError(f"no LM head ({' or '.join(names)}) in the *.safetensors of {folder}")


# ---- what may be exported ------------------------------------------------------------------------


def _default(f):
    return f.default if f.default is not MISSING else (f.default_factory() if f.default_factory is not MISSING else None)


def check_exportable(arch: DrafterArch, engine: str, facts: TargetFacts | None = None) -> None:
    """One line for a drafter the format (or this engine) cannot carry, or a target it was not trained for."""
    if engine not in ENGINES:
        raise DraftlabError(f"--for {engine!r} is not an engine; choose one of {', '.join(ENGINES)}")
    for f in fields(DrafterArch):
        if f.name in CARRIED | INIT_ONLY | META:
            continue
        value = getattr(arch, f.name)
        if value != _default(f):
            raise DraftlabError(f"cannot export for {engine}: drafter.{f.name}={json.dumps(value)} changes the network "
                                f"in a way the DFlash format has no key or tensor for; train with drafter.{f.name}="
                                f"{json.dumps(_default(f))} to serve it")
    if arch.draft_vocab_size and engine not in VOCAB_ENGINES:
        raise DraftlabError(f"cannot export for {engine}: this drafter has a {arch.draft_vocab_size}-token draft "
                            f"vocabulary and {engine}'s DFlash model has none (it drafts through the target's full LM "
                            f"head and would silently ignore d2t); train with drafter.draft_vocab_size=0, or export "
                            f"--for {' / '.join(VOCAB_ENGINES)}")
    if facts is not None:
        mine = (arch.target_num_layers, arch.target_vocab_size, arch.hidden_size)
        theirs = (facts.num_layers, facts.vocab_size, facts.hidden_size)
        if mine != theirs:
            raise DraftlabError(f"the drafter was trained for a target with (layers, vocabulary, width) {mine}, but "
                                f"{facts.where} has {theirs}; pass --target the drafter's own target")


# ---- config and tensors --------------------------------------------------------------------------


def serving_config(arch: DrafterArch, engine: str, facts: TargetFacts, dtype: str) -> dict:
    """config.json of the export: the reference config with the target's context length and depth, the
    dtype, and the draft vocabulary's size where the engine has one."""
    cfg = reference_config(arch, max_position_embeddings=facts.max_position_embeddings)
    cfg["num_target_layers"] = facts.num_layers
    cfg["dtype"] = cfg["torch_dtype"] = dtype  # transformers >= 5 reads `dtype`, older ones `torch_dtype`
    if arch.draft_vocab_size:
        cfg["draft_vocab_size"] = arch.draft_vocab_size
    mask = facts.token(arch.mask_token_id)
    if mask is not None:  # SGLang versions that resolve the MASK by string find the same id
        cfg["dflash_config"]["mask_token"] = mask
    return cfg


def d2t_offsets(vocab: Tensor) -> Tensor:
    """vocab [Vd] (draft index -> target id) -> d2t [Vd] int64 offsets: target id = index + d2t[index]."""
    return vocab.long().cpu() - torch.arange(vocab.numel(), dtype=torch.long)


def serving_state(drafter: DFlashDrafter, facts: TargetFacts, dtype: str) -> dict[str, Tensor]:
    """The tensors of the export in `dtype` (d2t stays int64)."""
    dt = DTYPES[dtype]
    state = {k: v.detach().to("cpu", dt) for k, v in reference_state(drafter).items()}
    if drafter.arch.draft_vocab_size:
        vocab = drafter.draft_vocab.cpu()
        state["d2t"] = d2t_offsets(vocab)
        state["lm_head.weight"] = facts.head().detach().to("cpu")[vocab].to(dt)  # [Vd, H]
    return state


def expected_tensors(cfg: dict) -> dict[str, tuple[int, ...]]:
    """Every tensor name and shape a DFlash loader reads, from the config alone."""
    H, n, I = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"]), int(cfg["intermediate_size"])
    heads, kv = int(cfg["num_attention_heads"]), int(cfg["num_key_value_heads"])
    hd = int(cfg.get("head_dim") or H // heads)
    taps = len((cfg.get("dflash_config") or {}).get("target_layer_ids") or [])
    out = {"fc.weight": (H, taps * H), "hidden_norm.weight": (H,), "norm.weight": (H,)}
    for i in range(n):
        p = f"layers.{i}."
        out |= {p + "self_attn.q_proj.weight": (heads * hd, H), p + "self_attn.k_proj.weight": (kv * hd, H),
                p + "self_attn.v_proj.weight": (kv * hd, H), p + "self_attn.o_proj.weight": (H, heads * hd),
                p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,),
                p + "mlp.gate_proj.weight": (I, H), p + "mlp.up_proj.weight": (I, H), p + "mlp.down_proj.weight": (H, I),
                p + "input_layernorm.weight": (H,), p + "post_attention_layernorm.weight": (H,)}
    vd = cfg.get("draft_vocab_size")
    if vd and int(vd) != int(cfg["vocab_size"]):
        out |= {"d2t": (int(vd),), "lm_head.weight": (int(vd), H)}
    return out


# ---- the loaders' rules ----------------------------------------------------------------------------


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def check_format(cfg: dict, tensors: dict[str, Tensor], engine: str) -> list[str]:
    """Every rule the loaders apply to a DFlash folder (docs/export.md), as a list of problems (empty =
    loadable). `tensors` are the folder's tensors (names, shapes, dtypes and the d2t values are checked)."""
    bad: list[str] = []
    if cfg.get("architectures") != [ARCHITECTURE]:
        bad.append(f"architectures is {cfg.get('architectures')!r}, the loaders dispatch on [{ARCHITECTURE!r}]")
    if cfg.get("model_type") != "qwen3":
        bad.append(f"model_type is {cfg.get('model_type')!r}; the draft config is parsed as a Qwen3 config ('qwen3')")
    need = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
            "intermediate_size", "vocab_size", "max_position_embeddings", "num_target_layers", "block_size")
    for k in need:
        if not _is_int(cfg.get(k)) or cfg[k] <= 0:
            bad.append(f"{k} must be a positive integer (got {cfg.get(k)!r})")
    if bad:
        return bad  # the rest reads these keys
    if not isinstance(cfg.get("rms_norm_eps"), float):
        bad.append("rms_norm_eps must be a float")
    rope = (cfg.get("rope_parameters") or {}).get("rope_theta", cfg.get("rope_theta"))
    if not isinstance(rope, (int, float)) or rope <= 0:
        bad.append("rope_theta (or rope_parameters.rope_theta) must be set: vLLM would default it to 1e6")
    if cfg.get("hidden_act") != "silu":
        bad.append(f"hidden_act is {cfg.get('hidden_act')!r}; SGLang's DFlash MLP supports only 'silu'")
    if cfg.get("attention_bias") or cfg.get("tie_word_embeddings"):
        bad.append("attention_bias and tie_word_embeddings must be false")
    if any(t != "full_attention" for t in cfg.get("layer_types") or []):
        bad.append("layer_types must be full attention only (a sliding layer is causal in vLLM)")
    for k in ("eagle_aux_hidden_state_layer_ids", "is_causal"):
        if k in cfg:
            bad.append(f"{k} must be absent (vLLM would read it before dflash_config, in another convention)")
    dc = cfg.get("dflash_config")
    if not isinstance(dc, dict):
        return bad + ["dflash_config is missing"]
    taps, mask, V = dc.get("target_layer_ids"), dc.get("mask_token_id"), cfg["vocab_size"]
    if not isinstance(taps, list) or not taps or not all(_is_int(i) and 0 <= i < cfg["num_target_layers"] for i in taps):
        bad.append(f"dflash_config.target_layer_ids must be target layers in [0, {cfg['num_target_layers']}) "
                   f"(tap i = hidden_states[i+1]); got {taps!r}")
    if not _is_int(mask) or not 0 <= mask < V:
        bad.append(f"dflash_config.mask_token_id must be an id in [0, {V}); got {mask!r}")
    if "mask_token" in dc and (not isinstance(dc["mask_token"], str) or not dc["mask_token"]):
        bad.append(f"dflash_config.mask_token must be a non-empty string (SGLang); got {dc['mask_token']!r}")
    if dc.get("block_size", cfg["block_size"]) != cfg["block_size"]:
        bad.append("block_size and dflash_config.block_size differ")
    if engine == "sglang" and "auto_map" in cfg:
        bad.append("auto_map must be absent for SGLang (it would try the remote code path)")
    vd = cfg.get("draft_vocab_size")
    if vd is not None and (not _is_int(vd) or not 0 < vd <= V):
        bad.append(f"draft_vocab_size must be in (0, {V}]; got {vd!r}")
    elif vd and vd != V and engine not in VOCAB_ENGINES:
        bad.append(f"a {vd}-token draft vocabulary cannot be served by {engine} (no d2t support)")
    # tensors: exactly the expected names and shapes, one float dtype (the config's)
    want = expected_tensors(cfg)
    for k in sorted(set(tensors) - set(want)):
        bad.append(f"tensor {k!r} is not part of the DFlash format")
    for k in sorted(set(want) - set(tensors)):
        bad.append(f"tensor {k!r} is missing")
    for k in sorted(set(want) & set(tensors)):
        if tuple(tensors[k].shape) != want[k]:
            bad.append(f"tensor {k!r} has shape {tuple(tensors[k].shape)}, the config implies {want[k]}")
    dt = DTYPES.get(cfg.get("dtype"))
    if dt is None:
        bad.append(f"dtype is {cfg.get('dtype')!r}; one of {', '.join(DTYPES)}")
    floats = {k: v.dtype for k, v in tensors.items() if k != "d2t"}
    if dt is not None and any(d != dt for d in floats.values()):
        bad.append(f"tensor dtypes {sorted({str(d) for d in floats.values()})} differ from dtype {cfg['dtype']}")
    if "d2t" in tensors and "d2t" in want and tuple(tensors["d2t"].shape) == want["d2t"]:
        d2t = tensors["d2t"]
        if d2t.dtype != torch.int64:
            bad.append(f"d2t must be int64 (got {d2t.dtype})")
        ids = torch.arange(d2t.numel()) + d2t.long()  # target id of each draft index
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= V or ids.unique().numel() != ids.numel()):
            bad.append(f"d2t offsets must map the draft indices to distinct target ids in [0, {V})")
    return bad


def read_export(folder: str | Path) -> tuple[dict, dict[str, Tensor]]:
    """config.json and tensors of an exported folder (one-line errors when absent or unreadable)."""
    from draftlab.io import read_folder_tensors

    folder = Path(folder)
    if not (folder / CONFIG).exists():
        raise DraftlabError(f"{folder} has no {CONFIG}; export the drafter first (draftlab export SRC {folder} --for ...)")
    return read_json(folder / CONFIG), read_folder_tensors(folder, "exported drafter")


def check_export(folder: str | Path, engine: str) -> dict:
    """Validate an exported folder for `engine`; returns its config, or raises one line naming the first problem."""
    cfg, tensors = read_export(folder)
    bad = check_format(cfg, tensors, engine)
    if bad:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise DraftlabError(f"{folder} is not loadable by {engine}: {bad[0]}{more}")
    return cfg


def export_for(drafter: DFlashDrafter, folder: str | Path, engine: str, facts: TargetFacts,
               dtype: str = "bfloat16") -> Path:
    """Write `drafter` as a DFlash folder for `engine` (checked against its rules first), atomically."""
    if dtype not in DTYPES:
        raise DraftlabError(f"--dtype {dtype!r} is not supported; choose one of {', '.join(DTYPES)}")
    arch = drafter.arch
    check_exportable(arch, engine, facts)
    cfg, state = serving_config(arch, engine, facts, dtype), serving_state(drafter, facts, dtype)
    bad = check_format(cfg, state, engine)
    if bad:
        raise DraftlabError(f"cannot export for {engine}: {bad[0]}")
    return write_reference_folder(folder, cfg, state)


def export_folder(src: str | Path, dst: str | Path, engine: str, target: str | Path, dtype: str = "bfloat16",
                  force: bool = False) -> Path:
    """`draftlab export`: our drafter folder `src` -> the DFlash folder `dst` for `engine`, reading the target
    folder's facts. `dst` must be new, empty, or a previous export (then only with `force`, which replaces only the
    export's own two files; `draftlab.destination`). An unsupported drafter is refused before the target is read."""
    from torch import nn

    from draftlab.destination import check_destination
    from draftlab.drafter.checkpoint import read_arch
    from draftlab.io import load_strict, read_folder_tensors

    check_destination(dst, src, "export", force)
    arch, _ = read_arch(src)
    check_exportable(arch, engine)
    facts = facts_from_folder(target)
    tensors = read_folder_tensors(src, "drafter")
    # the target's embedding and head are not needed (the head rows come from `facts`): stand-ins, the head
    # one of the target's row count so the drafter can index its draft vocabulary
    head = nn.Linear(1, arch.target_vocab_size, bias=False)
    drafter = DFlashDrafter(arch, nn.Embedding(1, 1), head, tensors.get("draft_vocab"))
    load_strict(drafter, tensors, src, "re-run the stage that wrote it")
    export_for(drafter, dst, engine, facts, dtype)
    return Path(dst)
