"""A second committed run beside the `cpu` one: a world's own DVC project folder (docs/decisions.md "Where the toy
run lives").

`dvc.yaml` at the root describes the pipeline once, with paths relative to the folder a stage runs in. A world (the
toy world: `worlds/toy/`) is a folder with its own `dvc.yaml`, `params.yaml` and `dvc.lock`: DVC runs a stage in the
folder of the `dvc.yaml` that declares it, so the same stage commands write `models/`, `data/`, `results/`,
`metrics/`, `plots/` and `mlruns.db` under the world's folder and the root's committed run is never touched. Its
`dvc.yaml` is written from the root's by `world_dvc` (the same commands, `python -m draftlab.pipeline <stage>`;
every code dependency — `src/`, `conf/`, `tools/` — reached from the folder, every data path left relative), both from the stage table
(draftlab.pipeline.dvcgen, `make dvc-yaml`), so the pipeline is still said once; a test holds the committed files
equal to what it writes. `dvc repro worlds/toy/dvc.yaml` runs it; `dvc status
worlds/toy/dvc.yaml` checks it; `draftlab explore --root worlds/toy` shows it.
"""
from __future__ import annotations

import copy
from pathlib import Path

CODE = ("src/", "conf/", "tools/")  # what a world's stages reach in the repository, not in their folder
WORLDS = "worlds"


def _up(path: str, depth: int) -> str:
    return "../" * depth + path if path.startswith(CODE) else path


def _entries(items, depth: int):
    out = []
    for it in items or []:
        if isinstance(it, str):
            out.append(_up(it, depth))
        elif isinstance(it, dict):
            out.append({_up(k, depth): v for k, v in it.items()})
        else:
            out.append(it)
    return out


def world_dvc(root: dict, folder: str) -> dict:
    """The root pipeline (`dvc.yaml` loaded) as the world in `folder` (relative to the repository) runs it."""
    depth = len(Path(folder).parts)
    out = copy.deepcopy(root)
    for stage in out.get("stages", {}).values():  # the command is the root's: it names a module, not a path
        for key in ("deps", "outs", "metrics", "plots"):
            if key in stage:
                stage[key] = _entries(stage[key], depth)
    return out


def header(folder: str) -> str:
    return (f"# GENERATED from the stage table (src/draftlab/pipeline/table.py) by draftlab.pipeline.dvcgen: the root\n"
            f"# dvc.yaml's stages as draftlab.pipeline.worlds.world_dvc runs them in {folder}/ (their outputs land here;\n"
            f"# the code they depend on is the repository's). Do not edit: regenerate with `make dvc-yaml`.\n")


def render(root: dict, folder: str) -> str:
    """The world's dvc.yaml text from the root pipeline (`root`: the root dvc.yaml loaded)."""
    import yaml

    return header(folder) + yaml.safe_dump(world_dvc(root, folder), sort_keys=False, width=120)
