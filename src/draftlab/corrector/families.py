"""The registry of corrector families, and their checkpoints: build a fresh corrector for a trained variant, or read
any saved one back (the family comes from config.json's `format`), both around a drafter.

Each family is a record (`draftlab.corrector.family.Family`) at the end of its module; `BUILT_IN` imports the built-in
family modules statically (`MODULES`: their names), and `corrector.family_modules` in params.yaml names extra ones (importable modules, e.g. a package of
your own on PYTHONPATH: `corrector.family_modules: [my_pkg.fixed_rule]`). The configuration's check of a loaded
params file calls `use(those modules)` (through `draftlab.pipeline.names.method_names`), so in that process every
reader — the variant table, the co-training recipe, the plan, the arm grammar, the benchmark's checkpoint loading —
sees the same families: `records()`. A module that cannot be imported, or two families / variants of one name,
are one line.

`build_corrector(cfg, drafter, variant)` builds the variant's family with its settings (`cfg.families.<family>`);
`load_corrector(folder, drafter)` and `read_corrector_info(folder)` read what `Corrector.save` wrote.
"""
from __future__ import annotations

import importlib
from functools import lru_cache
from pathlib import Path

import torch

from draftlab import paths
from draftlab.corrector import dcoco, lilicorr, selector, sequential
from draftlab.corrector.base import Corrector
from draftlab.corrector.family import Family
from draftlab.corrector.variants import Variant
from draftlab.errors import DraftlabError
from draftlab.io import load_strict, read_folder_config, read_folder_tensors

HINT = "run the corrector stage with that variant in corrector.variants"
BUILT_IN = (dcoco, sequential, selector, lilicorr)  # the built-in family modules, imported statically (one list)
MODULES = tuple(m.__name__ for m in BUILT_IN)
_extra: tuple[str, ...] = ()  # the extra family modules of the params this process loaded (`use`)


@lru_cache(maxsize=None)
def _read(modules: tuple[str, ...]) -> dict[str, Family]:
    out: dict[str, Family] = {}
    variants: dict[str, str] = {}
    for name in dict.fromkeys(modules):
        try:
            mod = importlib.import_module(name)
        except ImportError as e:
            raise DraftlabError(f"corrector family module {name!r} cannot be imported ({e}); put its package on "
                                f"PYTHONPATH or drop it from corrector.family_modules") from None
        fams = getattr(mod, "FAMILIES", None) or ((mod.FAMILY,) if hasattr(mod, "FAMILY") else ())
        if not fams:
            raise DraftlabError(f"corrector family module {name!r} defines no FAMILY (a draftlab.corrector.family."
                                f"Family record) at its end")
        for f in fams:
            try:
                f.check()
            except ValueError as e:
                raise DraftlabError(f"corrector family module {name!r}: {e}") from None
            if f.name in out:
                raise DraftlabError(f"corrector family {f.name!r} is defined twice ({out[f.name].module}, {name})")
            if name not in MODULES:  # an outside family is its module + its preset
                missing = paths.family_preset(name, getattr(mod, "__file__", "") or name)[1]
                if missing:
                    raise DraftlabError(missing)
            for v in f.variants:
                if v.name in variants:
                    raise DraftlabError(f"corrector variant {v.name!r} is defined by families {variants[v.name]} and "
                                        f"{f.name}; rename one")
                variants[v.name] = f.name
            out[f.name] = f
    return out


def use(extra: tuple[str, ...] | list[str] = ()) -> dict[str, Family]:
    """Make the built-in families plus the `extra` modules (`corrector.family_modules`) this process's families;
    returns them by name."""
    global _extra
    fams = _read((*MODULES, *extra))  # import first: a bad module leaves the families as they were
    _extra = tuple(extra)
    return fams


def records() -> dict[str, Family]:
    """The families of this process: the built-in ones and the extra modules the loaded params named, by name."""
    return _read((*MODULES, *_extra))


def variant_table() -> dict[str, Variant]:
    """Every trained variant's row, by name, in the families' order."""
    return {v.name: v for f in records().values() for v in f.variants}


def family_of(variant: str) -> Family:
    """The family record that builds `variant`."""
    table = variant_table()
    if variant not in table:
        raise DraftlabError(f"corrector variant {variant!r} is not valid; choose one of: {', '.join(table)}")
    return records()[table[variant].family]


def build_corrector(cfg, drafter, variant: str, seed: int | None = None) -> Corrector:
    """A freshly initialised corrector of `variant` on top of `drafter` (cfg: a CorrectorConfig: its seed, k and its
    family's settings `cfg.families.<family>`)."""
    fam = family_of(variant)
    torch.manual_seed(cfg.seed if seed is None else seed)
    return fam.build(fam.section(cfg), drafter, variant_table()[variant], cfg.k).to(drafter.device)


def fresh_proposal(cfg, drafter, family: str):
    """(proposal step, the family's settings): a freshly initialised corrector of `family`'s first variant
    (`build_corrector`; cfg: its seed, k and `families`) proposing as the family decodes by default — its record's
    first path rule and its λ. What an instrument measures a family by (the accelerator check, the dispatch count)."""
    from draftlab.corrector.proposal import CorrectorProposal

    fam = records()[family]
    section = fam.section(cfg)
    corrector = build_corrector(cfg, drafter, fam.variants[0].name)
    return CorrectorProposal(corrector, fam.rules(section)[0], fam.lam(section)), section


def _family_of_folder(raw: dict, folder) -> tuple[Family, object]:
    fams = [f for f in records().values() if f.format == raw["format"]]
    try:
        arch = fams[0].arch.from_dict(raw)
    except TypeError as e:
        raise DraftlabError(f"{folder}/config.json is incomplete ({e})") from None
    if len(fams) > 1:  # families sharing one format (the sequential walks) are told apart by the arch's `kind`
        fams = [f for f in fams if f.name == getattr(arch, "kind", None)] or fams[:1]
    return fams[0], arch


def read_corrector_info(folder: str | Path) -> tuple[object, dict]:
    """(architecture dataclass, the `info` the stage saved with it) of a corrector checkpoint."""
    formats = tuple(dict.fromkeys(f.format for f in records().values()))
    raw = read_folder_config(folder, formats, "corrector", HINT)
    return _family_of_folder(raw, folder)[1], raw.get("info", {})


def load_corrector(folder: str | Path, drafter) -> Corrector:
    """Rebuild a saved corrector of any family around `drafter` (its frozen embedding / head; its device
    and dtype), checking that it was trained for a drafter of this shape."""
    formats = tuple(dict.fromkeys(f.format for f in records().values()))
    fam, arch = _family_of_folder(read_folder_config(folder, formats, "corrector", HINT), folder)
    try:
        model: Corrector = fam.load(arch, drafter)
    except DraftlabError as e:
        raise DraftlabError(f"corrector {folder}: {e}") from None
    load_strict(model, read_folder_tensors(folder, "corrector"), folder, "re-run the corrector stage that wrote it")
    return model.to(device=drafter.device, dtype=drafter.dtype).eval()
