"""The authors' reference checkpoint format (z-lab's `dflash` package, `DFlashDraftModel`) and ours.

A reference folder is `config.json` — a Qwen3 config of the drafter (hidden size, `num_hidden_layers`
= drafter layers, heads, head_dim, intermediate size, eps, rotary base, `vocab_size` = the target's,
`num_target_layers`) with `dflash_config` {target_layer_ids, mask_token_id, block_size} — and
`model.safetensors` with the drafter's own weights under the reference names:

    ours                               reference
    layers.i.{q,k,v,o}_proj.weight     layers.i.self_attn.{q,k,v,o}_proj.weight
    layers.i.{q,k}_norm.weight         layers.i.self_attn.{q,k}_norm.weight
    layers.i.{gate,up,down}_proj.weight  layers.i.mlp.{gate,up,down}_proj.weight
    fc, hidden_norm, norm, layers.i.{input,post_attention}_layernorm: unchanged

Neither format stores the target's embedding or LM head. The reference has no draft vocabulary (its
logits are the target's full head), so `export_reference` needs a full-vocabulary drafter and says so
otherwise; `draftlab.drafter.serving` adds what vLLM and SGLang need (target facts, dtype, vLLM's d2t). `import_reference` refuses what this drafter cannot represent (DFlash-2's convolutions,
sliding-window layers, attention biases, logit scaling / soft-capping, a scaled input embedding).
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from draftlab.drafter.model import FORMAT, DFlashDrafter, DrafterArch
from draftlab.drafter.arch import require_plain
from draftlab.errors import DraftlabError
from draftlab.destination import WRITTEN_BY, check_destination, write_files
from draftlab.io import CONFIG, WEIGHTS, load_strict, read_folder_tensors, weight_files

ATTN = ("q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm")
MLP = ("gate_proj", "up_proj", "down_proj")


def to_reference_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our drafter's state dict -> the reference's parameter names (module docstring's table)."""
    out = {}
    for k, v in state.items():
        parts = k.split(".")
        if parts[0] == "layers" and parts[2] in ATTN:
            k = ".".join(parts[:2] + ["self_attn"] + parts[2:])
        elif parts[0] == "layers" and parts[2] in MLP:
            k = ".".join(parts[:2] + ["mlp"] + parts[2:])
        out[k] = v
    return out


def from_reference_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The inverse of `to_reference_names`."""
    out = {}
    for k, v in state.items():
        parts = k.split(".")
        if parts[0] == "layers" and len(parts) > 3 and parts[2] in ("self_attn", "mlp"):
            k = ".".join(parts[:2] + parts[3:])
        out[k] = v
    return out


def reference_config(arch: DrafterArch, max_position_embeddings: int | None = None) -> dict:
    """The reference config.json of a drafter architecture (a Qwen3 config + dflash_config).
    `max_position_embeddings` is the target's context length (an export passes it; without it the key
    is left out, and an in-memory model takes transformers' default). The authors' loop builds
    `[last, MASK, ...]` blocks: a seeded drafter is refused (export and `dflash-ref` alike)."""
    require_plain(arch, "the authors' DFlash format (draftlab export, the dflash-ref arm)")
    cfg = {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3",
        "hidden_size": arch.hidden_size, "num_hidden_layers": arch.num_layers,
        "num_attention_heads": arch.num_heads, "num_key_value_heads": arch.num_kv_heads, "head_dim": arch.head_dim,
        "intermediate_size": arch.intermediate_size, "rms_norm_eps": arch.rms_norm_eps, "hidden_act": "silu",
        "rope_parameters": {"rope_type": "default", "rope_theta": arch.rope_theta}, "rope_theta": arch.rope_theta,
        "attention_bias": False, "attention_dropout": 0.0, "tie_word_embeddings": False,
        "vocab_size": arch.target_vocab_size, "num_target_layers": arch.target_num_layers,
        "initializer_range": arch.initializer_range, "block_size": arch.block_size,
        "dflash_config": {"target_layer_ids": list(arch.target_layer_ids), "mask_token_id": arch.mask_token_id,
                          "block_size": arch.block_size},
    }
    if max_position_embeddings is not None:
        cfg["max_position_embeddings"] = int(max_position_embeddings)
    return cfg


def reference_state(drafter: DFlashDrafter) -> dict[str, torch.Tensor]:
    """The drafter's own weights under the reference names (no draft vocabulary)."""
    return to_reference_names({k: v for k, v in drafter.state_dict().items() if k != "draft_vocab"})


def check_exportable(arch: DrafterArch) -> None:
    """The reference format has no draft vocabulary: one line saying so."""
    if arch.draft_vocab_size:
        raise DraftlabError(f"cannot export: this drafter has a {arch.draft_vocab_size}-token draft vocabulary, and the "
                            f"reference format has none (its logits are the target's full head); train a "
                            f"full-vocabulary drafter (drafter.draft_vocab_size=0) to export it")


def write_reference_folder(folder: str | Path, cfg: dict, state: dict[str, torch.Tensor]) -> Path:
    """config.json (a plain transformers config: no `format` key) + model.safetensors (its metadata marks it as
    the project's export), each atomically; nothing else in `folder` is touched (`draftlab.destination`)."""
    return write_files(folder, weight_files(cfg, state, "dflash-reference", {WRITTEN_BY: "export"}))


def export_reference(drafter: DFlashDrafter, folder: str | Path) -> Path:
    """Write the drafter as a reference folder in fp32 without target facts (what `dflash`'s own loader
    needs; `draftlab.drafter.serving.export_for` writes the serving engines' folders)."""
    check_exportable(drafter.arch)
    return write_reference_folder(folder, reference_config(drafter.arch), reference_state(drafter))


def _refuse(cfg: dict, where: Path) -> None:
    """One line for what this drafter cannot represent."""
    dc = cfg.get("dflash_config", {}) or {}
    get = lambda k, d=None: dc.get(k, cfg.get(k, d))  # noqa: E731  the reference's lookup order
    why = None
    if any("DFlash2" in a for a in cfg.get("architectures", [])) or get("conv_kernel_size") is not None:
        why = "it is a DFlash-2 drafter (dynamic convolutions + candidate selector); only DFlash (V1) imports"
    elif any(t == "sliding_attention" for t in cfg.get("layer_types") or []):
        why = "it has sliding-window layers"
    elif cfg.get("attention_bias"):
        why = "its attention projections have biases"
    elif float(get("output_multiplier", 1.0)) != 1.0 or float(get("final_logit_softcapping") or 0) > 0:
        why = "it scales or soft-caps its logits"
    elif float(get("input_embedding_scale", 1.0)) != 1.0:
        why = "it scales its input embeddings"
    elif get("mask_token_id") is None:
        why = "its config has no mask_token_id"
    elif cfg.get("draft_vocab_size") and int(cfg["draft_vocab_size"]) != int(cfg.get("vocab_size", -1)):
        why = (f"it drafts over a reduced {cfg['draft_vocab_size']}-token vocabulary (a `draftlab export --for vllm` "
               f"folder: d2t + its own lm_head); import a full-vocabulary folder (export --for dflash), or benchmark "
               f"the original drafter folder with benchmark.drafter=...")
    if why:
        raise DraftlabError(f"cannot import {where}: {why}")


def arch_from_reference(cfg: dict, where: Path) -> DrafterArch:
    """Our DrafterArch of a reference config.json."""
    _refuse(cfg, where)
    dc = cfg.get("dflash_config", {}) or {}
    try:
        H, layers, heads = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"]), int(cfg["num_attention_heads"])
        n_target = int(cfg["num_target_layers"])
        rope = cfg.get("rope_parameters") or {}
        taps = dc.get("target_layer_ids", cfg.get("target_layer_ids"))
        if taps is None:  # the reference's default: evenly spaced in [1, L-3] (one layer: the middle)
            taps = [n_target // 2] if layers == 1 else [round(1 + i * (n_target - 4) / (layers - 1)) for i in range(layers)]
        return DrafterArch(
            block_size=int(dc.get("block_size", cfg.get("block_size", 16))), num_layers=layers, hidden_size=H,
            num_heads=heads, num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(cfg.get("head_dim") or H // heads), intermediate_size=int(cfg["intermediate_size"]),
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            rope_theta=float(rope.get("rope_theta", cfg.get("rope_theta", 10000.0))),
            target_layer_ids=[int(i) for i in taps], mask_token_id=int(dc.get("mask_token_id", cfg.get("mask_token_id"))),
            target_vocab_size=int(cfg["vocab_size"]), target_num_layers=n_target, draft_vocab_size=0,
            initializer_range=float(cfg.get("initializer_range", 0.02)))
    except KeyError as e:
        raise DraftlabError(f"cannot import {where}: its config.json lacks {e.args[0]!r}") from None


def import_reference(src: str | Path, folder: str | Path, info: dict | None = None, force: bool = False) -> Path:
    """Read a reference folder and write it as our drafter folder (full vocabulary) into `folder`, which must be
    new, empty, or a previous import (then only with `force`; `draftlab.destination`)."""
    src = Path(src)
    if not src.is_dir():
        raise DraftlabError(f"cannot import {src}: no such folder (give a reference DFlash folder: config.json + "
                            "model.safetensors, e.g. one written by `draftlab export`)")
    dst = check_destination(folder, src, "import", force)
    cfg_file = src / CONFIG
    if not cfg_file.exists():
        raise DraftlabError(f"cannot import {src}: no {CONFIG} there (a reference DFlash folder has config.json + "
                            f"model.safetensors)")
    try:
        cfg = json.loads(cfg_file.read_text())
    except json.JSONDecodeError:
        raise DraftlabError(f"{cfg_file} is not valid JSON") from None
    if isinstance(cfg, dict) and cfg.get("format"):  # our own folders say their format; an export does not
        raise DraftlabError(f"cannot import {src}: it is not an export but a draftlab {cfg['format']!r} folder, which "
                            "the pipeline reads as it is (benchmark.drafter=..., or `draftlab export` it for "
                            "dflash / vLLM / SGLang)")
    arch = arch_from_reference(cfg, src)
    if not (src / WEIGHTS).exists():
        raise DraftlabError(f"cannot import {src}: no {WEIGHTS} there (sharded checkpoints: merge them first)")
    state = from_reference_names(read_folder_tensors(src, "reference drafter"))
    check = DFlashDrafter(arch, nn.Embedding(1, 1), nn.Linear(1, 1))  # shapes only; the target attaches at load
    load_strict(check, state, src, "it is not a DFlash (V1) reference folder this drafter can hold")
    out = {**arch.to_dict(), "target_hidden_size": arch.hidden_size, "format": FORMAT,
           "info": {"imported_from": str(src), **(info or {})}}
    write_files(dst, weight_files(out, check.state_dict(), FORMAT, {WRITTEN_BY: "import"}))
    return Path(folder)
