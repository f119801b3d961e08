"""The `trainer` section: how many processes / devices every training stage runs on (Lightning DDP),
and the launch facts the check reads from the environment (`torchrun` sets WORLD_SIZE, RANK,
LOCAL_RANK, LOCAL_WORLD_SIZE before the stage starts).

One process (devices=1, num_nodes=1, the default) is today's single-device run. More processes are
launched by `torchrun --nproc_per_node <devices> [--nnodes <num_nodes> ...] -m draftlab.pipeline <stage>
trainer.devices=<devices> ...`: every rank runs the stage; Lightning does not re-launch it. On one
node a training stage started plainly (`python -m draftlab.pipeline <stage>`, `dvc repro`) re-executes itself
under torchrun (draftlab.pipeline.stage); several nodes need the user's launcher on each.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from draftlab.config.checks import _choice
from draftlab.errors import ConfigError

STRATEGIES = ("auto", "ddp")  # auto = one device for one process, DDP for more


def launched() -> tuple[int, int, int, int]:
    """(world size, global rank, local rank, local world size) of this process as its launcher set them
    (torchrun / a cluster launcher); (1, 0, 0, 1) for a plain `python -m draftlab.pipeline <stage>`."""
    env = os.environ
    world = int(env.get("WORLD_SIZE", "1") or 1)
    return (world, int(env.get("RANK", "0") or 0), int(env.get("LOCAL_RANK", "0") or 0),
            int(env.get("LOCAL_WORLD_SIZE", str(world)) or world))


def machine_devices(device: str) -> tuple[int, str]:
    """(how many devices of the kind `device` (target.device) names this machine has, their name)."""
    import torch

    if device.startswith("cuda") or (device == "auto" and torch.cuda.is_available()):
        return torch.cuda.device_count(), "CUDA devices"
    return os.cpu_count() or 1, "CPU cores"


@dataclass
class TrainerConfig:
    """Data-parallel training of every training stage (pretrain_drafter, pretrain_seeded, specopd, corrector):
    each of `devices` processes per node trains on its share of every global batch (the batch sizes
    stay global)."""

    devices: int = 1  # processes (= GPUs on CUDA) per node
    strategy: str = "auto"  # auto | ddp
    num_nodes: int = 1

    @property
    def world(self) -> int:
        return self.devices * self.num_nodes

    def check(self, p: str) -> None:
        _choice(f"{p}.strategy", self.strategy, STRATEGIES)
        for k in ("devices", "num_nodes"):
            if getattr(self, k) < 1:
                raise ConfigError(f"{p}.{k}={getattr(self, k)} must be >= 1")

    def check_machine(self, p: str, device: str) -> None:
        """Against this machine and the launch: `device` is target.device."""
        have, what = machine_devices(device)
        if self.devices > have:
            raise ConfigError(f"{p}.devices={self.devices} but this machine has {have} {what}; lower {p}.devices")
        if self.world > 1 and device.startswith("cuda:"):
            raise ConfigError(f"target.device={device} pins one GPU but {p}.devices={self.devices}: set "
                              f"target.device=cuda (each rank takes the GPU of its local rank)")
        world, _, _, local = launched()
        if world == 1 and self.num_nodes > 1:
            raise ConfigError(f"{p}.num_nodes={self.num_nodes}: launch each node's processes with torchrun --nnodes "
                              f"{self.num_nodes} --nproc_per_node {self.devices} ... -m draftlab.pipeline <stage> (or set "
                              f"{p}.num_nodes=1)")
        if world > 1 and (world != self.world or local != self.devices):
            raise ConfigError(f"the launcher started {world} processes ({local} per node) but {p}.devices="
                              f"{self.devices} x {p}.num_nodes={self.num_nodes}; make them agree")
