"""Data-parallel plumbing of the training stages (Lightning DDP over `trainer.devices` processes per node).

- `configure(cfg)` / `settings()`: the process's `TrainerConfig` (set once by stage_main from
  params.trainer; the default is one process, today's single-device run). `fit` reads it.
- `world_size()`, `global_rank()`, `is_rank_zero()`: from the initialised process group, else from the
  launcher's environment (torchrun sets WORLD_SIZE / RANK / LOCAL_RANK before the script starts).
- `local_device(name)`: target.device for this rank (`cuda` -> `cuda:<local rank>` when several run).
- `with rank_zero_first(device_type):` rank 0 runs the body (e.g. builds the feature cache), all ranks meet
  at a barrier, then the others run it (and reuse what rank 0 wrote). The process group is created
  from the environment when it does not exist yet (Lightning then reuses it).
Lightning is not imported here: every stage asks for its rank (tracking, the stage runner), and `import lightning`
costs seconds a stage that does not train need not pay (the DDP strategy is `training.fit.StreamKeepingDDP`).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch
import torch.distributed as dist

from draftlab.config.trainer import TrainerConfig, launched

_settings = TrainerConfig()


def configure(cfg: TrainerConfig) -> None:
    """Set the process's data-parallel settings (stage_main calls it with params.trainer)."""
    global _settings
    _settings = cfg


def settings() -> TrainerConfig:
    return _settings


def _initialised() -> bool:
    return dist.is_available() and dist.is_initialized()


def world_size() -> int:
    return dist.get_world_size() if _initialised() else launched()[0]


def global_rank() -> int:
    return dist.get_rank() if _initialised() else launched()[1]


def is_rank_zero() -> bool:
    return global_rank() == 0


def local_device(name: str) -> str:
    """The device this rank's target goes to: `cuda` / `auto` (with CUDA) -> cuda:<local rank> when
    several processes run; otherwise `name` unchanged."""
    world, _, local, _ = launched()
    if world > 1 and (name == "cuda" or (name == "auto" and torch.cuda.is_available())):
        return f"cuda:{local}"
    return name


def ensure_group(device_type: str) -> bool:
    """Create the default process group from the launcher's environment when several processes run
    (nccl on CUDA, gloo on CPU, as Lightning's DDP would); False for one process."""
    if launched()[0] <= 1:
        return False
    if not _initialised():
        if device_type == "cuda":
            torch.cuda.set_device(launched()[2])
        dist.init_process_group("nccl" if device_type == "cuda" else "gloo")
    return True


@contextmanager
def rank_zero_first(device_type: str = "cpu") -> Iterator[None]:
    """`with rank_zero_first(kind): body` — rank 0 runs the body, all ranks meet at a barrier, then the others run it
    (and reuse what rank 0 wrote); one process: the body alone. Every rank must enter it at the same point (it is a
    collective)."""
    if not ensure_group(device_type):
        yield
        return
    if dist.get_rank() != 0:
        dist.barrier()
    yield
    if dist.get_rank() == 0:
        dist.barrier()
