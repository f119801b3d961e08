"""A second committed run beside the `cpu` one: a world's own DVC project folder (docs/decisions.md "Where the toy
run lives").

`dvc.yaml` at the root describes the pipeline once, with paths relative to the folder a stage runs in. A world (the
toy world: `worlds/toy/`) is a folder with its own `dvc.yaml`, `params.yaml` and `dvc.lock`: DVC runs a stage in the
folder of the `dvc.yaml` that declares it, so the same stage scripts write `models/`, `data/`, `results/`,
`metrics/`, `plots/` and `mlruns.db` under the world's folder and the root's committed run is never touched. Its
`dvc.yaml` is written from the root's by `world_dvc` (every command and code dependency — `stages/`, `src/`,
`conf/` — reached from the folder, every data path left relative), so the pipeline is still said once; a test holds
the committed file equal to what `world_dvc` writes. `dvc repro worlds/toy/dvc.yaml` runs it; `dvc status
worlds/toy/dvc.yaml` checks it; `draftlab explore --root worlds/toy` shows it.
"""
from __future__ import annotations

import copy
from pathlib import Path

CODE = ("stages/", "src/", "conf/", "tools/")  # what a world's stages reach in the repository, not in their folder
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
    for stage in out.get("stages", {}).values():
        cmd = stage.get("cmd", "")
        parts = cmd.split(" ")
        stage["cmd"] = " ".join(_up(p, depth) for p in parts)
        for key in ("deps", "outs", "metrics", "plots"):
            if key in stage:
                stage[key] = _entries(stage[key], depth)
    return out


def header(folder: str) -> str:
    return (f"# Written by draftlab.pipeline.worlds.world_dvc from the root dvc.yaml: the same stages, run in {folder}/\n"
            f"# (their outputs land here; the code they depend on is the repository's). Do not edit: regenerate with\n"
            f"#   python -m draftlab.pipeline.worlds {folder}\n")


def render(root_yaml: Path, folder: str) -> str:
    import yaml

    root = yaml.safe_load(root_yaml.read_text())
    return header(folder) + yaml.safe_dump(world_dvc(root, folder), sort_keys=False, width=120)


def main(argv: list[str] | None = None) -> int:
    import sys

    from draftlab.io import atomic_write

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m draftlab.pipeline.worlds worlds/<name>", file=sys.stderr)
        return 2
    folder = args[0].rstrip("/")
    text = render(Path("dvc.yaml"), folder)
    atomic_write(Path(folder) / "dvc.yaml", lambda p: p.write_text(text))
    print(f"wrote {folder}/dvc.yaml")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
