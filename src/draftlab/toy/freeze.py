"""The toy world's freeze (docs/toy-world.md): a method's figure is read only in the world fixed before any method
ran there.

The world's knobs are chosen from the target's and the plain drafter's properties alone; then `target.toy.frozen_hash`
records the world's hash (`draftlab.toy.tasks.WorldConfig.config_hash`) in a commit of its own. The stages that
measure the world itself (WORLD_STAGES) run on any world; the method stages (METHOD_STAGES) refuse, in one line, a
world that is not frozen, or whose hash — the params' world, and the one the target in models/target was trained on
(its WORLD_FILE) — differs from the frozen one. Every stage passes this gate (`pipeline.stage.stage_main`), so it
imports only the generator's config.
"""
from __future__ import annotations

import json
from pathlib import Path

from draftlab.errors import ConfigError, DraftlabError

WORLD_FILE = "toy_world.json"  # what a toy target's folder records of its world (draftlab.toy.train writes it)
WORLD_STAGES = ("check_params", "prepare_target", "reference", "pretrain_drafter")  # run on an unfrozen world
METHOD_STAGES = ("pretrain_seeded", "specopd", "corrector", "benchmark")  # need the frozen world


def world_hash(toy) -> str:
    """The hash of the world `target.toy.world` describes (one line when it is not a valid world)."""
    from draftlab.toy.tasks import WorldConfig

    try:
        return WorldConfig.from_dict(dict(toy.world or {})).config_hash()
    except (ConfigError, TypeError, ValueError) as e:
        raise ConfigError(f"target.toy.world: {e}") from None


def target_world_hash(target_folder: str | Path) -> str | None:
    """The hash of the world a prepared toy target was trained on (its toy_world.json), None when absent."""
    path = Path(target_folder) / WORLD_FILE
    if not path.is_file():
        return None
    return json.loads(path.read_text()).get("world_hash")


def check_frozen(stage: str, toy, target_folder: str | Path | None) -> None:
    """One line when a method stage would run on a world that is not the frozen one (module docstring)."""
    if stage not in METHOD_STAGES:
        return
    have = world_hash(toy)
    if not toy.frozen_hash:
        raise DraftlabError(f"stage {stage}: the toy world is not frozen (target.toy.frozen_hash is empty); choose the "
                            f"world from the target's and the plain drafter's properties, then freeze it "
                            f"(frozen_hash: {have}) before any method runs there (docs/toy-world.md)")
    if have != toy.frozen_hash:
        raise DraftlabError(f"stage {stage}: the toy world's config hashes to {have[:12]}…, not the frozen "
                            f"{toy.frozen_hash[:12]}…; a method runs only in the frozen world (restore "
                            f"target.toy.world, or freeze a new world in a commit of its own: docs/toy-world.md)")
    trained = target_world_hash(target_folder) if target_folder is not None else None
    if target_folder is not None and trained != toy.frozen_hash:
        raise DraftlabError(f"stage {stage}: the target in {target_folder} was trained on world "
                            f"{(trained or 'unknown')[:12]}…, not the frozen {toy.frozen_hash[:12]}…; re-run "
                            f"prepare_target")
