"""Benchmark arms: a registry of named decoding methods, so later issues add theirs without editing the
runner. An arm factory takes an `ArmContext` and returns an `Arm`:

    register_arm("mymethod", lambda ctx: SpeculativeArm("mymethod", ctx.target, ctx.drafter(path), MyProposal()))

An unknown arm name `x-y` is looked up by importing `draftlab.bench.arm_x_y` (which should call
`register_arm`), so a new method can live in its own module. Arms now: `ar`, `dflash`.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import torch

from draftlab.config import BenchmarkConfig
from draftlab.errors import DraftlabError
from draftlab.decoding import DrafterProposal, GenerationResult, SamplingParams, SpeculativeEngine, generate_ar
from draftlab.decoding.api import ProposalStep


class Arm(Protocol):
    name: str
    speculative: bool  # produces rounds with accepted lengths (τ) and drafter records
    drafter: Any  # the drafter (None for AR); used for simulated τ

    def generate(self, prompts: list[list[int]], max_new_tokens: int, sp: SamplingParams, eos_ids: list[int],
                 generator: torch.Generator | None, record_topk: int = 0) -> GenerationResult: ...


@dataclass
class ArmContext:
    target: Any  # TargetModel
    cfg: BenchmarkConfig
    pad_id: int = 0
    load_drafter: Callable[[str], Any] | None = None  # path -> drafter (the stage caches loads)
    extra: dict = field(default_factory=dict)  # anything later arms need (their own checkpoints, ...)

    def drafter(self, path: str) -> Any:
        if self.load_drafter is None:
            raise DraftlabError(f"no drafter loader given; cannot load {path}")
        return self.load_drafter(path)


class ARArm:
    speculative = False
    drafter = None

    def __init__(self, target, pad_id: int = 0, compact_threshold: float = 0.25, name: str = "ar"):
        self.name, self.target, self.pad_id, self.compact_threshold = name, target, pad_id, compact_threshold

    def generate(self, prompts, max_new_tokens, sp, eos_ids, generator, record_topk=0) -> GenerationResult:
        return generate_ar(self.target, prompts, max_new_tokens, sp, eos_ids, generator, self.pad_id,
                           self.compact_threshold)


class SpeculativeArm:
    speculative = True

    def __init__(self, name: str, target, drafter, proposer: ProposalStep | None = None, pad_id: int = 0,
                 compact_threshold: float = 0.25):
        self.name, self.target, self.drafter = name, target, drafter
        self.proposer = proposer or DrafterProposal()
        self.pad_id, self.compact_threshold = pad_id, compact_threshold

    def generate(self, prompts, max_new_tokens, sp, eos_ids, generator, record_topk=0) -> GenerationResult:
        eng = SpeculativeEngine(self.target, self.drafter, self.proposer, record_topk, self.pad_id,
                                self.compact_threshold)
        return eng.generate(prompts, max_new_tokens, sp, eos_ids, generator)


ARMS: dict[str, Callable[[ArmContext], Arm]] = {}


def register_arm(name: str, factory: Callable[[ArmContext], Arm]) -> None:
    ARMS[name] = factory


def build_arm(name: str, ctx: ArmContext) -> Arm:
    if name not in ARMS:
        mod = "draftlab.bench.arm_" + name.replace("-", "_")
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name != mod:
                raise
    if name not in ARMS:
        raise DraftlabError(f"unknown benchmark arm '{name}'; registered: {', '.join(sorted(ARMS))}")
    return ARMS[name](ctx)


register_arm("ar", lambda ctx: ARArm(ctx.target, ctx.pad_id, ctx.cfg.compact_threshold))
register_arm("dflash", lambda ctx: SpeculativeArm("dflash", ctx.target, ctx.drafter(ctx.cfg.drafter), None, ctx.pad_id,
                                                  ctx.cfg.compact_threshold))
