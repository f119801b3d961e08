"""The corrector families and their checkpoints: build a fresh corrector for a trained variant, or read
any saved one back (the family comes from config.json's `format`), both around a drafter.

`build_corrector(cfg, drafter, variant)` follows the variant table (`draftlab.corrector.variants`);
`load_corrector(folder, drafter)` and `read_corrector_info(folder)` read what `Corrector.save` wrote.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch

from draftlab.corrector.base import Corrector
from draftlab.corrector.dcoco import DCOCOArch, DCOCOCorrector, arch_from_config
from draftlab.corrector.sequential import FORMAT as SEQUENTIAL_FORMAT
from draftlab.corrector.selector import CandidateSelector
from draftlab.corrector.sequential import SequentialArch, SequentialCorrector, build_sequential, sequential_arch
from draftlab.corrector.variants import TABLE
from draftlab.errors import DraftlabError
from draftlab.io import load_strict, read_folder_config, read_folder_tensors

HINT = "run the corrector stage with that variant in corrector.variants"


def build_corrector(cfg, drafter, variant: str, seed: int | None = None) -> Corrector:
    """A freshly initialised corrector of `variant` on top of `drafter` (cfg: a CorrectorConfig)."""
    if variant not in TABLE:
        raise DraftlabError(f"corrector variant {variant!r} is not valid; choose one of: {', '.join(TABLE)}")
    v = TABLE[variant]
    torch.manual_seed(cfg.seed if seed is None else seed)
    if v.sequential:
        arch = sequential_arch(v.family, drafter, cfg.seq_rank, cfg.seq_gate, top_k=cfg.k)
        return build_walk(arch, drafter).to(drafter.device)
    arch = replace(arch_from_config(cfg, drafter.arch.hidden_size, drafter.embed_tokens, v.ablation), variant=variant)
    return DCOCOCorrector(arch, drafter.embed_tokens).to(drafter.device)


def build_walk(arch: SequentialArch, drafter) -> SequentialCorrector:
    """A slot-by-slot corrector of `arch.kind`: DSpark, Domino or DFlash-2's candidate selector."""
    return CandidateSelector(arch) if arch.kind == "dflash2" else build_sequential(arch, drafter)


def read_corrector_info(folder: str | Path) -> tuple[object, dict]:
    """(architecture dataclass, the `info` the stage saved with it) of a corrector checkpoint."""
    raw = read_folder_config(folder, (DCOCOCorrector.FORMAT, SEQUENTIAL_FORMAT), "corrector", HINT)
    cls = DCOCOArch if raw["format"] == DCOCOCorrector.FORMAT else SequentialArch
    try:
        return cls.from_dict(raw), raw.get("info", {})
    except TypeError as e:
        raise DraftlabError(f"{folder}/config.json is incomplete ({e})") from None


def load_corrector(folder: str | Path, drafter) -> Corrector:
    """Rebuild a saved corrector of any family around `drafter` (its frozen embedding / head; its device
    and dtype), checking that it was trained for a drafter of this shape."""
    arch, _ = read_corrector_info(folder)
    if isinstance(arch, DCOCOArch):
        shape = tuple(drafter.embed_tokens.weight.shape)
        if shape != (arch.vocab_size, arch.embed_dim):
            raise DraftlabError(f"corrector {folder} was trained on a ({arch.vocab_size}, {arch.embed_dim}) embedding; "
                                f"this target's is {shape}")
        model: Corrector = DCOCOCorrector(arch, drafter.embed_tokens)
    else:
        want = sequential_arch(arch.kind, drafter, arch.rank, arch.gate, arch.variant, arch.top_k)
        if want != arch:
            raise DraftlabError(f"sequential corrector {folder} was trained for a drafter with (H, V, Vd, De) = "
                                f"{(arch.hidden_size, arch.vocab_size, arch.draft_vocab_size, arch.embed_dim)}; this one "
                                f"has {(want.hidden_size, want.vocab_size, want.draft_vocab_size, want.embed_dim)}")
        model = build_walk(arch, drafter)
    load_strict(model, read_folder_tensors(folder, "corrector"), folder, "re-run the corrector stage that wrote it")
    return model.to(device=drafter.device, dtype=drafter.dtype).eval()
