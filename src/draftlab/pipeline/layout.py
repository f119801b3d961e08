"""What the method stages and the benchmark derive from the pipeline's file layout (the table itself:
`draftlab.paths`): the trained models the arms read, the drafter the method stages train from, and the check
of the model-folder keys a user may point elsewhere."""
from __future__ import annotations

import os
from dataclasses import dataclass

from draftlab.paths import (CORRECTORS, Checkpoints, DVC_YAML, LONG_DRAFTER, PLAIN_DRAFTER, SEEDED_DRAFTER, SPECOPD_DRAFTER,
                            producer)


def checkpoints(drafter: str) -> Checkpoints:
    """The trained models the benchmark arms read; `drafter` is benchmark.drafter (the dflash arm's)."""
    return Checkpoints(drafter, SPECOPD_DRAFTER, LONG_DRAFTER, CORRECTORS, SEEDED_DRAFTER)


@dataclass(frozen=True)
class MethodBase:
    """The drafter the method stages (specopd, corrector) train from: `kind` 'plain' | 'seeded' and its folder."""

    kind: str
    folder: str

    @property
    def stage(self) -> str:
        """The stage that writes the folder."""
        return "pretrain_seeded" if self.kind == "seeded" else "pretrain_drafter"

    def record(self) -> dict:
        """What a stage writes into its report and its model folders' info (read back by the benchmark's arms)."""
        return {"base_kind": self.kind, "base_folder": self.folder}

    def check(self) -> None:
        """One line when the folder holds a drafter of the other kind (a plain one where the seeded base should be,
        or the reverse); a folder without a drafter is left to the recipe's own message."""
        from pathlib import Path

        from draftlab.drafter.checkpoint import read_arch
        from draftlab.errors import DraftlabError

        if not (Path(self.folder) / "config.json").exists():
            return
        seeded = read_arch(self.folder)[0].seeded
        if seeded != (self.kind == "seeded"):
            raise DraftlabError(f"{self.folder} holds a {'seeded' if seeded else 'plain'} drafter, but seeded.methods="
                                f"{str(self.kind == 'seeded').lower()} trains the methods on the {self.kind} one; re-run "
                                f"the {self.stage} stage or fix the folder")


def method_base(seeded_methods: bool, plain: str = PLAIN_DRAFTER) -> MethodBase:
    """`seeded.methods` true: the seeded drafter (models/drafter/seeded); false: the plain one, `plain` (the
    stage's `base_drafter` key, default models/drafter/pretrained). Both folders are deps of both stages in
    dvc.yaml, so the graph does not change with the flag."""
    return MethodBase("seeded", SEEDED_DRAFTER) if seeded_methods else MethodBase("plain", str(plain))


def model_folder_keys(params) -> dict[str, str]:
    """params key -> the model folder it names, for every key that may point at a folder a user brings."""
    return {"benchmark.drafter": params.benchmark.drafter, "pretrain.init_from": params.pretrain.init_from,
            "specopd.base_drafter": params.specopd.base_drafter, "corrector.base_drafter": params.corrector.base_drafter,
            "corrector.specopd_drafter": params.corrector.specopd_drafter}


def check_model_folders(params) -> None:
    """One line for a model folder key that names a path no stage writes and that holds no model (a typo, or a
    folder not copied yet). A stage-written path is left alone: it does not exist before its stage runs. (An arm
    decoding a corrector variant no stage trains: `draftlab.arms.grammar.check_variants`, called where the arm table
    is known: check_params and `draftlab check`.)"""
    from pathlib import Path

    from draftlab.errors import ConfigError

    written = (PLAIN_DRAFTER, SEEDED_DRAFTER, SPECOPD_DRAFTER, LONG_DRAFTER, CORRECTORS)
    for key, path in model_folder_keys(params).items():
        norm = os.path.normpath(path) if path else ""
        if not path or any(norm == w or norm.startswith(w + os.sep) for w in written) or producer(path) is not None:
            continue
        folder = Path(path)
        if not folder.is_dir():
            raise ConfigError(f"{key}={path}: no such folder, and no stage of {DVC_YAML} writes it; give a drafter "
                              f"folder (config.json + model.safetensors, e.g. one `draftlab import` wrote) or the "
                              f"stage's default")
        if not (folder / "config.json").is_file() and not any(folder.glob("*/config.json")):
            raise ConfigError(f"{key}={path}: the folder holds no config.json (not a model folder); give a drafter "
                              f"folder (config.json + model.safetensors)")
