"""The toy world inside the pipeline: its config from `target.toy`, its prompt files, and the freeze.

- `world_config` / `train_config`: the `target.toy.world` and `.train` mappings as the generator's `WorldConfig` and
  the target's `TrainConfig` (an unknown key, a bad value or a training mix naming a family the world lacks: one line
  naming `target.toy...`).
- `write_prompts`: the world's prompts as the pipeline reads them — a training pool (the `train` split's mix) and
  one suite per family (the `eval` split, disjoint seeds) — as JSONL files (`{"id", "prompt"}` a line) that the
  `toy` profile names in `data.local_jsonl` and `data.local_suites`; committed beside the world's run, and a test
  regenerates them (the generator is deterministic).
The freeze, which every stage passes, is `draftlab.toy.freeze`.
"""
from __future__ import annotations

import json
from pathlib import Path

from draftlab.errors import ConfigError, DraftlabError

TRAIN_FILE = "train.jsonl"


def world_config(toy):
    """`target.toy.world` -> WorldConfig (defaults for keys not given)."""
    from draftlab.toy.tasks import WorldConfig

    try:
        return WorldConfig.from_dict(dict(toy.world or {}))
    except (ConfigError, TypeError, ValueError) as e:
        raise ConfigError(f"target.toy.world: {e}") from None


def train_config(toy):
    """`target.toy.train` -> TrainConfig (defaults for keys not given)."""
    from dataclasses import fields

    from draftlab.toy.train import TrainConfig

    d = dict(toy.train or {})
    known = {f.name for f in fields(TrainConfig)}
    bad = sorted(set(d) - known)
    if bad:
        raise ConfigError(f"target.toy.train has unknown keys {bad}; known: {sorted(known)}")
    try:
        cfg = TrainConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})
    except (TypeError, ValueError) as e:
        raise ConfigError(f"target.toy.train: {e}") from None
    if cfg.max_steps <= 0 or cfg.budget_s < 0:
        raise ConfigError(f"target.toy.train: max_steps={cfg.max_steps} must be > 0 and budget_s={cfg.budget_s} >= 0 "
                          f"(budget_s 0 = no wall-clock limit: the run stops at max_steps)")
    have = [f.name for f in world_config(toy).families]
    lacks = [name for name, _ in cfg.mix if name not in have]
    if lacks:
        raise ConfigError(f"target.toy.train.mix names {lacks[0]!r}, a family this world lacks (its families: "
                          f"{', '.join(have)}); name one of them or add it to target.toy.world.families")
    return cfg


def write_prompts(world, folder: str | Path, train_n: int, eval_n: int) -> dict:
    """The world's prompt files in `folder`: TRAIN_FILE (train_n prompts of the `train` split's mix) and
    `<family>.jsonl` (eval_n prompts of the `eval` split per family); -> what was written (files, counts, hash)."""
    from draftlab.io import atomic_write
    from draftlab.toy.tasks import examples

    folder = Path(folder)
    files = {TRAIN_FILE: examples(world, "train", train_n)}
    for f in world.families:
        files[f"{f.name}.jsonl"] = examples(world, "eval", eval_n, family=f.name)
    out = {"world_hash": world.config_hash(), "files": {}}
    for name, exs in files.items():
        text = "".join(json.dumps({"id": e.id, "prompt": e.prompt}, ensure_ascii=True) + "\n" for e in exs)
        atomic_write(folder / name, lambda p, t=text: p.write_text(t))
        out["files"][name] = len(exs)
    atomic_write(folder / "world.json", lambda p: p.write_text(json.dumps(
        {"world": world.to_dict(), "world_hash": out["world_hash"], "files": out["files"]}, indent=1) + "\n"))
    return out
