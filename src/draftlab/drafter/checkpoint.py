"""Self-describing drafter checkpoints: `config.json` + `model.safetensors`.

`config.json` holds the architecture (`DrafterSpec`: block size, taps, MASK id, slot convention,
sizes, draft-vocabulary size, the target's hidden size / vocabulary / layer count) plus optional
free-form `info`; `model.safetensors` holds only the drafter's own trained tensors and the draft
vocabulary (`draft_vocab`, draft index -> target id). The target's embedding and LM head are not
stored: `load_drafter(path, target)` re-attaches them and fails with one line when the target does
not fit. Nothing is pickled.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import fields
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from draftlab.errors import DraftlabError
from draftlab.drafter.model import FORMAT, DFlashDrafter, DrafterSpec

CONFIG = "config.json"
WEIGHTS = "model.safetensors"


def save_drafter(drafter: DFlashDrafter, path: str | Path, info: dict | None = None,
                 state_dict: dict[str, torch.Tensor] | None = None) -> Path:
    """Write the folder atomically (a temporary sibling renamed onto `path`). `state_dict`
    overrides the module's own tensors (e.g. the best validation state)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    sd = state_dict if state_dict is not None else drafter.state_dict()
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in sd.items() if v is not None}
    cfg = {**drafter.spec.to_dict(), "target_hidden_size": drafter.spec.hidden_size, "info": info or {}}
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        tmp.chmod(0o755)
        (tmp / CONFIG).write_text(json.dumps(cfg, indent=2) + "\n")
        save_file(tensors, str(tmp / WEIGHTS), metadata={"format": "pt", "draftlab": FORMAT})
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def read_spec(path: str | Path) -> tuple[DrafterSpec, dict]:
    path = Path(path)
    cfg_file = path / CONFIG
    if not cfg_file.exists():
        raise DraftlabError(f"drafter checkpoint {path} has no {CONFIG}; run the pretrain_drafter stage first")
    try:
        raw = json.loads(cfg_file.read_text())
    except json.JSONDecodeError:
        raise DraftlabError(f"{cfg_file} is not valid JSON; the drafter checkpoint is corrupt") from None
    if raw.get("format") != FORMAT:
        raise DraftlabError(f"{cfg_file} has format {raw.get('format')!r}, expected {FORMAT!r}")
    names = {f.name for f in fields(DrafterSpec)}
    try:
        spec = DrafterSpec(**{k: v for k, v in raw.items() if k in names})
    except TypeError as e:
        raise DraftlabError(f"{cfg_file} is incomplete ({e}); re-export the drafter") from None
    return spec, raw.get("info", {})


def check_compatible(spec: DrafterSpec, target, where: str = "drafter") -> None:
    """One-line errors when the drafter was trained for a different target."""
    if spec.hidden_size != target.hidden_size:
        raise DraftlabError(f"{where} was trained for a target with hidden size {spec.hidden_size}, "
                            f"but this target has {target.hidden_size}; retrain the drafter for this target")
    if spec.target_vocab_size != target.vocab_size:
        raise DraftlabError(f"{where} was trained for a target vocabulary of {spec.target_vocab_size} tokens, "
                            f"but this target has {target.vocab_size}; retrain the drafter for this target")
    if spec.target_layer_ids and max(spec.target_layer_ids) >= target.num_layers:
        raise DraftlabError(f"{where} taps target layer {max(spec.target_layer_ids)}, but this target has only "
                            f"{target.num_layers} layers; retrain the drafter for this target")


def load_drafter(path: str | Path, target, device: str | torch.device | None = None,
                 dtype: torch.dtype | None = None) -> DFlashDrafter:
    """Rebuild a drafter from its folder, sharing `target`'s embedding and LM head."""
    path = Path(path)
    spec, _ = read_spec(path)
    check_compatible(spec, target, f"drafter {path}")
    wfile = path / WEIGHTS
    if not wfile.exists():
        raise DraftlabError(f"drafter checkpoint {path} has no {WEIGHTS}")
    try:
        tensors = load_file(str(wfile))
    except Exception as e:  # corrupt / truncated file
        raise DraftlabError(f"could not read {wfile}: {str(e).splitlines()[0][:200]}") from None
    vocab = tensors.get("draft_vocab")
    drafter = DFlashDrafter(spec, target.embed_tokens, target.lm_head, vocab)
    try:
        drafter.load_state_dict(tensors, strict=True)
    except RuntimeError as e:
        raise DraftlabError(f"{wfile} does not match its {CONFIG}: {str(e).splitlines()[0][:200]}") from None
    drafter = drafter.to(device or target.device)
    if dtype is not None:
        drafter = drafter.to(dtype)
    return drafter.eval()
