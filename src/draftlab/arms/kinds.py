"""What a benchmark arm is (`Arm`) and the kinds the grammar's factories build (`draftlab.arms.grammar`): the target
alone (`ARArm`), a drafter and a proposal step through the speculative engine (`SpeculativeArm`), one arm per
temperature (`ByTemperature`); the context every factory reads (`ArmContext`) and the check a loaded drafter meets
(`DrafterSpec`, `check_drafter`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol

import torch

from draftlab.config import BenchmarkConfig
from draftlab.decoding.api import Drafter, DrafterProposal, ProposalStep
from draftlab.decoding.ar import generate_ar
from draftlab.decoding.common import GenerationResult
from draftlab.decoding.speculative import SpeculativeEngine
from draftlab.decoding.verify import SamplingParams
from draftlab.errors import DraftlabError
from draftlab.paths import Checkpoints

class Arm(Protocol):
    name: str
    speculative: bool  # produces rounds with accepted lengths (τ) and drafter records
    drafter: Any  # the drafter (None for AR or a drafter-less arm); used for simulated τ

    def generate(self, prompts: list[list[int]], max_new_tokens: int, sp: SamplingParams, eos_ids: list[int],
                 generator: torch.Generator | None, record_topk: int = 0) -> GenerationResult: ...


@dataclass(frozen=True)
class DrafterSpec:
    """What the params say a drafter of one kind (plain | seeded) is: its block size and its draft vocabulary's
    configured size (0 = the full vocabulary; a trained one may hold fewer ids, never more)."""

    block_size: int
    draft_vocab_size: int = 0


def check_drafter(arm: str, folder: str, drafter, kind: str, spec: DrafterSpec | None = None) -> None:
    """One line when the drafter loaded from `folder` for the arm is not of the arm's kind ('plain' | 'seeded'), or
    (with `spec`) has another block size or vocabulary than the params give that kind. A stub without `arch` passes."""
    arch = getattr(drafter, "arch", None)
    if arch is None:
        return
    got = "seeded" if arch.seeded else "plain"
    if got != kind:
        fix = ("give the arm a plain drafter folder (drafter.seed=none), or benchmark this one as dflash-seeded"
               if kind == "plain" else "train it with drafter.seed=lookup (the pretrain_seeded stage)")
        raise DraftlabError(f"arm {arm}: {folder} holds a {got} drafter (drafter.seed={arch.seed}), but the arm "
                            f"decodes with a {kind} one; {fix}")
    if spec is None:
        return
    where = "seeded.drafter.*" if kind == "seeded" else "drafter.*"
    if arch.block_size != spec.block_size:
        raise DraftlabError(f"arm {arm}: {folder} holds a drafter of block size {arch.block_size}, but the params give "
                            f"the {kind} drafter block size {spec.block_size} ({where}); set block_size="
                            f"{arch.block_size} there, or point the arm at a drafter of this run")
    reduced, want = bool(arch.draft_vocab_size), 0 < spec.draft_vocab_size < arch.target_vocab_size
    if reduced != want or (reduced and arch.draft_vocab_size > spec.draft_vocab_size):
        have = f"a {arch.draft_vocab_size}-token draft vocabulary" if reduced else "the full vocabulary"
        said = f"{spec.draft_vocab_size} tokens" if want else "the full vocabulary (0)"
        raise DraftlabError(f"arm {arm}: {folder} holds a drafter with {have}, but the params give the {kind} drafter "
                            f"draft_vocab_size = {said} ({where}); set it to {arch.draft_vocab_size}, or point the "
                            f"arm at a drafter of this run")


@dataclass
class ArmContext:
    target: Any  # TargetModel
    cfg: BenchmarkConfig
    checkpoints: Checkpoints
    pad_id: int = 0
    load_drafter: Callable[[str], Drafter] | None = None  # folder -> drafter (the stage caches loads)
    kernels: str | None = None  # overrides the kernel backend the correctors were saved with (auto | torch | triton)
    pld: Any = None  # prompt-lookup settings (a PLDConfig: max_ngram, num_tokens, min_match, hybrid)
    block_size: int = 8  # S of the drafter-less `pld` arm (the drafter's block size, for a same-width comparison)
    seeded_verify: Any = None  # the dflash-seeded-cut arm's verify-width rule (a VerifyConfig: rule, extra, min_prob)
    base: str = "plain"  # the kind of drafter the arm being built decodes with ('plain' | 'seeded'; `on_base` sets it)
    expect: dict[str, DrafterSpec] | None = None  # kind -> what the params say that drafter is (None: kind only)
    arm: str = ""  # the arm being built (named in the checks' messages)
    kv_capacity: int = 0  # KV slots per stream (engine.kv_capacity; 0 = sized from each request)

    def drafter(self, folder: str, kind: str | None = None) -> Drafter:
        """The drafter of `folder`, checked to be of `kind` (default: the arm's base) and of the params' shape."""
        if self.load_drafter is None:
            raise DraftlabError(f"no drafter loader given; cannot load {folder}")
        drafter = self.load_drafter(folder)
        kind = kind or self.base
        check_drafter(self.arm or "?", folder, drafter, kind, (self.expect or {}).get(kind))
        return self.like_target(drafter)

    def like_target(self, step):
        """A drafter or a proposal step compiled when the target's steps are (`engine.compile`), with the target's
        backend; once per object."""
        if getattr(self.target, "compiled", "off") != "off" and getattr(step, "compiled", None) == "off":
            step.compile_steps("on", getattr(self.target, "backend", None))
        return step


class ARArm:
    speculative = False
    drafter = None

    def __init__(self, target, pad_id: int = 0, kv_capacity: int = 0, name: str = "ar"):
        self.name, self.target, self.pad_id, self.kv_capacity = name, target, pad_id, kv_capacity

    def generate(self, prompts, max_new_tokens, sp, eos_ids, generator, record_topk=0) -> GenerationResult:
        return generate_ar(self.target, prompts, max_new_tokens, sp, eos_ids, generator, self.pad_id,
                           self.kv_capacity)


class SpeculativeArm:
    """A drafter (or None, when the proposal step needs none) and a proposal step, run by the engine."""

    speculative = True

    def __init__(self, name: str, target, drafter: Drafter | None, proposer: ProposalStep | None = None,
                 pad_id: int = 0, kv_capacity: int = 0):
        self.name, self.target, self.drafter = name, target, drafter
        self.proposer = proposer or DrafterProposal()
        self.pad_id, self.kv_capacity = pad_id, kv_capacity

    def generate(self, prompts, max_new_tokens, sp, eos_ids, generator, record_topk=0) -> GenerationResult:
        eng = SpeculativeEngine(self.target, self.drafter, self.proposer, record_topk, self.pad_id,
                                self.kv_capacity)
        return eng.generate(prompts, max_new_tokens, sp, eos_ids, generator)


class ByTemperature:
    """One arm that decodes greedy requests (T=0) with one arm and sampled ones (T>0) with another: SpecOPD
    keeps a state selected by greedy τ and one selected by T=1 acceptance, and each temperature decodes with
    its own. `drafter` (the simulated-τ check at T=0) is the greedy arm's."""

    speculative = True

    def __init__(self, name: str, greedy: Arm, sampled: Arm):
        self.name, self.greedy, self.sampled = name, greedy, sampled
        self.drafter = greedy.drafter

    def generate(self, prompts, max_new_tokens, sp, eos_ids, generator, record_topk=0) -> GenerationResult:
        arm = self.greedy if sp.greedy else self.sampled
        return arm.generate(prompts, max_new_tokens, sp, eos_ids, generator, record_topk)


ArmFactory = Callable[[str, ArmContext], Arm]
