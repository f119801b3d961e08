"""Self-describing drafter checkpoints: `config.json` + `model.safetensors`.

`config.json` holds the architecture (`DrafterArch`: block size, taps, MASK id, slot convention,
sizes, draft-vocabulary size, the seed mode and its lookup settings — absent in older folders: "none" —,
the target's hidden size / vocabulary / layer count) plus optional
free-form `info`; `model.safetensors` holds only the drafter's own trained tensors and the draft
vocabulary (`draft_vocab`, draft index -> target id). The target's embedding and LM head are not
stored: `load_drafter(path, target)` re-attaches them and fails with one line when the target does
not fit. Nothing is pickled.
"""
from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import torch

from draftlab.drafter.model import FORMAT, DFlashDrafter, DrafterArch
from draftlab.errors import DraftlabError
from draftlab.ngram import check_seed
from draftlab.io import CONFIG, load_strict, read_folder_config, read_folder_tensors, save_weights_folder


# the only file of a drafter folder the pipeline leaves without a drafter (pretrain_seeded with seeded.enabled=false)
DISABLED = "disabled.json"

def save_drafter(drafter: DFlashDrafter, path: str | Path, info: dict | None = None,
                 state_dict: dict[str, torch.Tensor] | None = None) -> Path:
    """Write the folder atomically (a temporary sibling renamed onto `path`). `state_dict`
    overrides the module's own tensors (e.g. the best validation state)."""
    sd = state_dict if state_dict is not None else drafter.state_dict()
    cfg = {**drafter.arch.to_dict(), "target_hidden_size": drafter.arch.hidden_size, "info": info or {}}
    return save_weights_folder(path, cfg, sd, FORMAT)


def read_arch(path: str | Path) -> tuple[DrafterArch, dict]:
    raw = read_folder_config(path, FORMAT, "drafter", "run the pretrain_drafter stage first")
    names = {f.name for f in fields(DrafterArch)}
    try:
        arch = DrafterArch(**{k: v for k, v in raw.items() if k in names})
    except TypeError as e:
        raise DraftlabError(f"{Path(path) / CONFIG} is incomplete ({e}); re-export the drafter") from None
    try:
        check_seed(arch.seed, arch.seed_max_ngram, arch.seed_min_match, seed_logit=arch.seed_logit,
                   seed_bias=arch.seed_bias)
    except DraftlabError as e:
        raise DraftlabError(f"{Path(path) / CONFIG}: {e}") from None
    return arch, raw.get("info", {})


def check_compatible(arch: DrafterArch, target, where: str = "drafter") -> None:
    """One-line errors when the drafter was trained for a different target."""
    if arch.hidden_size != target.hidden_size:
        raise DraftlabError(f"{where} was trained for a target with hidden size {arch.hidden_size}, "
                            f"but this target has {target.hidden_size}; retrain the drafter for this target")
    if arch.target_vocab_size != target.vocab_size:
        raise DraftlabError(f"{where} was trained for a target vocabulary of {arch.target_vocab_size} tokens, "
                            f"but this target has {target.vocab_size}; retrain the drafter for this target")
    if arch.target_layer_ids and max(arch.target_layer_ids) >= target.num_layers:
        raise DraftlabError(f"{where} taps target layer {max(arch.target_layer_ids)}, but this target has only "
                            f"{target.num_layers} layers; retrain the drafter for this target")


def load_drafter(path: str | Path, target, device: str | torch.device | None = None,
                 dtype: torch.dtype | None = None) -> DFlashDrafter:
    """Rebuild a drafter from its folder, sharing `target`'s embedding and LM head."""
    path = Path(path)
    arch, _ = read_arch(path)
    check_compatible(arch, target, f"drafter {path}")
    tensors = read_folder_tensors(path, "drafter")
    vocab = tensors.get("draft_vocab")
    drafter = DFlashDrafter(arch, target.embed_tokens, target.lm_head, vocab)
    load_strict(drafter, tensors, path, "re-run the stage that wrote it, or re-import the drafter")
    drafter = drafter.to(device or target.device)
    if dtype is not None:
        drafter = drafter.to(dtype)
    return drafter.eval()


def warm_start(drafter: DFlashDrafter, path: str | Path, target, key: str = "pretrain.init_from") -> list[str]:
    """Initialise `drafter` from the drafter folder `path` (e.g. the plain drafter for a seeded one): every stored
    tensor, by name. The two architectures must agree in everything but the seed settings (`seed*`) and the draft
    vocabularies must be equal; one line naming `key` otherwise. Returns the drafter's tensors the folder lacks
    (the seed's own, e.g. `seed_bias`), which keep their initial values."""
    path = Path(path)
    if not (path / CONFIG).is_file():
        raise DraftlabError(f"{key}={path}: no drafter folder there ({CONFIG} missing); train that drafter first or "
                            f"set {key}=''")
    arch, _ = read_arch(path)
    check_compatible(arch, target, f"{key}={path}")
    mine, theirs = drafter.arch.to_dict(), arch.to_dict()
    diff = [k for k in mine if not k.startswith("seed") and k != "target_name" and mine[k] != theirs.get(k)]
    if diff:
        raise DraftlabError(f"{key}={path}: that drafter has {diff[0]}={theirs.get(diff[0])!r}, this one "
                            f"{mine[diff[0]]!r}; initialise from a drafter of the same shape")
    tensors = read_folder_tensors(path, "drafter")
    own = drafter.state_dict()
    if "draft_vocab" in own and not torch.equal(tensors.get("draft_vocab", torch.empty(0)), own["draft_vocab"]):
        raise DraftlabError(f"{key}={path}: that drafter's draft vocabulary differs from this one's (other "
                            f"references or drafter.draft_vocab_size); initialise from a drafter of the same run")
    extra = [k for k in tensors if k not in own]
    if extra:
        raise DraftlabError(f"{key}={path}: that drafter has a tensor this one lacks ({extra[0]}); initialise from a "
                            f"drafter of the same shape")
    drafter.load_state_dict(tensors, strict=False)
    return [k for k in own if k not in tensors]


def trained_base(folder: str, drafter=None) -> str | None:
    """'seeded' | 'plain': the base drafter the stage that wrote `folder` trained on (its info's `base_kind`); for a
    folder without that record (older stages), what its drafter is (`arch.seed`, else that of the loaded `drafter`);
    None when nothing says (a stub drafter that no folder holds)."""
    if (Path(folder) / "config.json").exists():
        arch, info = read_arch(folder)
        kind = info.get("base_kind")
        return kind if kind in ("plain", "seeded") else "seeded" if arch.seeded else "plain"
    arch = getattr(drafter, "arch", None)
    return None if arch is None else ("seeded" if arch.seeded else "plain")
