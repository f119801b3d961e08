"""An example corrector family from a package of its own (docs/toy-world.md "Trying a new corrector here"): a fixed
rule, the drafter's top-1 at every slot but the last, where it takes the candidate of rank `last_rank`. It learns
nothing (one unused parameter keeps the optimiser and the checkpoint format whole): what it shows is the three files a
family is — this module with its record (`FAMILY`) at its end, the package's `__init__.py`, and its preset
(`lastrank.yaml` beside this file: the settings and step budget `draftlab compose` fills in when
`corrector.family_modules` names `lastrank.lastrank`). Put `examples/families` on PYTHONPATH to use it."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from draftlab.corrector.base import Correction, CorrectionLoss, Corrector
from draftlab.corrector.family import ArchDict, ArmEntry, Cost, Family
from draftlab.corrector.variants import Variant
from draftlab.errors import ConfigError

FORMAT = "example-lastrank-v1"


@dataclass
class LastRankArch(ArchDict):  # config.json of a checkpoint
    last_rank: int = 2
    variant: str = "lastrank"
    format: str = FORMAT


@dataclass
class LastRankConfig:  # corrector.families.lastrank
    last_rank: int = 2

    def check(self, p: str) -> None:
        if self.last_rank < 1:
            raise ConfigError(f"{p}.last_rank={self.last_rank} must be >= 1")


class LastRank(Corrector):
    FORMAT = FORMAT  # its contract is the default one: it reads the block's hidden states and logits, offers nothing

    def __init__(self, arch: LastRankArch):
        super().__init__()
        self.arch = arch
        self.unused = nn.Parameter(torch.zeros(1))  # a rule learns nothing; the optimiser and the checkpoint want one

    def parameter_breakdown(self) -> dict[str, int]:
        return {"unused": 1, "total": 1}

    def propose(self, block, rule="greedy", lam=0.75, backend=None) -> Correction:
        ids, _ = block.candidates(self.arch.last_rank)  # [*, n, K] target ids, best first
        tokens = ids[..., 0].clone()
        tokens[..., -1] = ids[..., -1, self.arch.last_rank - 1]
        return Correction(tokens)

    def loss(self, block, labels, valid, draft_index, rho, cumulative_mask=False, kind="joint") -> CorrectionLoss:
        den = valid.sum().float()
        return CorrectionLoss((self.unused ** 2).sum() * den, den, valid, valid)


FAMILY = Family(
    name="lastrank", module=__name__, arch=LastRankArch, format=FORMAT, config=LastRankConfig, budget="main",
    corrector=LastRank,
    build=lambda cfg, drafter, v, k: LastRank(LastRankArch(cfg.last_rank, v.name)),
    load=lambda arch, drafter: LastRank(arch),
    cost=lambda cfg, shape: Cost(1, 1),
    variants=(Variant("lastrank", "lastrank"),),
    arms={"lastrank": {"": ArmEntry("lastrank", colour="#000000")}},
)
