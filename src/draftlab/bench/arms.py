"""Benchmark arms: one explicit table, `ARM_TABLE`, from arm name to factory.

A factory takes the arm's name and an `ArmContext` (the target, the benchmark section, where the
stages wrote each checkpoint, a cached drafter loader) and returns an `Arm`. Nothing is registered
by import and nothing checks a path before an arm is built: a missing checkpoint is a one-line
`DraftlabError` when the benchmark builds that arm.

Adding an arm = one entry in `ARM_TABLE` + its name in conf/benchmark/arms/*.yaml (see
docs/architecture.md). A speculative arm is a drafter (or None) plus a proposal step
(`draftlab.decoding.api.ProposalStep`); `SpeculativeArm` runs them through the engine.

| arm | drafter | proposal step |
|---|---|---|
| `ar` | — (the target alone) | — |
| `dflash` | pretrained drafter | its own choice |
| `dflash-long` | the long-control drafter | its own choice |
| `dflash-seeded` | the seeded drafter (`drafter.seed=lookup`: blocks start from the lookup continuation) | its own choice |
| `dflash-seeded-cut` | the seeded drafter | its own choice, cut to the seeded span + sure slots (`seeded.verify`, `SpanProposal`) |
| `dflash-specopd` | SpecOPD's t0 state at T=0, its t1 state at T>0 | its own choice |
| `dcoco` (+ `-globalsum`, `-geometric`) | the dcoco variant's co-trained drafter | DCOCO, that path rule |
| `dcoco-nopair` / `-nocand` / `-frozen` | that variant's drafter | DCOCO, greedy |
| `specopd-dcoco` | the specopd-dcoco variant at T=0, specopd-dcoco-t1 at T>0 | DCOCO, greedy |
| `dspark`, `domino`, `dflash2` | that variant's drafter | the sequential walk / DFlash-2's candidate selector |
| `pld` | — (none: no drafter pass, no taps) | prompt lookup (n-gram) |
| `dflash-pld` (`-switch`, `-splice`) | pretrained drafter | lookup where an n-gram of ≥ `pld.min_match` matched, else the drafter |
| `dflash-ref` | pretrained drafter, run by the authors' `dflash_generate` (batch 1, greedy) | theirs |
| `hf-generate`, `hf-generate-pld` | — (Hugging Face `generate`, batch 1, greedy; plain / `prompt_lookup_num_tokens`) | — |
The method arms (`METHOD_ARMS`: `dflash-specopd`, `dflash-long`, the `dcoco*` rows, `specopd-dcoco`, `dspark`,
`domino`, `dflash2`) are each in the table twice: the plain name decodes the stages' checkpoints trained on the plain
drafter (`seeded.methods=false`), the name + `-seeded` (`dcoco-seeded`, ...) the same folders trained on the seeded
drafter (`seeded.methods=true`); an arm whose name does not match the base its checkpoint records is one line
(`on_base`). `dflash-pld`, `dflash-ref` always use the plain drafter, `dflash-seeded` the seeded one alone.
Corrector and lookup proposals are deterministic, so at T>0 the verifier applies the point-mass rule. Arms built on
SpecOPD decode each temperature with the state selected by that temperature's metric (`ByTemperature`).
The reference rows (`dflash-ref`, `hf-generate*`) are greedy only: the runner skips them at T>0.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Protocol

import torch

from draftlab.config import BenchmarkConfig
from draftlab.config.seeded import SEEDED_SUFFIX, plain_name
from draftlab.corrector.families import load_corrector, read_corrector_info
from draftlab.corrector.proposal import CorrectorProposal
from draftlab.decoding.api import Drafter, DrafterProposal, ProposalStep
from draftlab.decoding.ar import generate_ar
from draftlab.decoding.lookup import LookupHybrid, PromptLookup
from draftlab.decoding.common import GenerationResult
from draftlab.decoding.speculative import SpeculativeEngine
from draftlab.decoding.verify import SamplingParams
from draftlab.decoding.width import SpanProposal
from draftlab.drafter.checkpoint import DISABLED, trained_base
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
        """A drafter or a proposal step compiled when the target's steps are (`engine.compile`); once per object."""
        if getattr(self.target, "compiled", "off") != "off" and getattr(step, "compiled", None) == "off":
            step.compile_steps("on")
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


def ar_arm(name: str, ctx: ArmContext) -> Arm:
    return ARArm(ctx.target, ctx.pad_id, ctx.kv_capacity, name)


def drafter_arm(folder: Callable[[Checkpoints], str]) -> ArmFactory:
    """DFlash decoding with the drafter saved in `folder(ctx.checkpoints)`, proposing its own choice."""
    def build(name: str, ctx: ArmContext) -> Arm:
        return SpeculativeArm(name, ctx.target, ctx.drafter(folder(ctx.checkpoints)), None, ctx.pad_id,
                              ctx.kv_capacity)

    return build


def seeded_drafter(name: str, ctx: ArmContext) -> Drafter:
    """The seeded drafter of `ctx.checkpoints.seeded_drafter` (one line when it is absent, disabled or plain)."""
    folder = ctx.checkpoints.seeded_drafter
    if not folder:
        raise DraftlabError(f"arm {name}: no seeded drafter folder given (Checkpoints.seeded_drafter); the benchmark "
                            f"stage passes models/drafter/seeded")
    if (Path(folder) / DISABLED).exists():
        raise DraftlabError(f"arm {name}: {folder} holds no drafter (the pretrain_seeded stage ran with "
                            f"seeded.enabled=false); set seeded.enabled=true and re-run it, or drop {name} from the arms")
    return ctx.drafter(folder, "seeded")


def seeded_arm(name: str, ctx: ArmContext) -> Arm:
    """DFlash decoding with the seeded drafter (its blocks start from the lookup continuation; docs/algorithms.md "Seeded block drafting")."""
    return SpeculativeArm(name, ctx.target, seeded_drafter(name, ctx), None, ctx.pad_id, ctx.kv_capacity)


def seeded_cut_arm(name: str, ctx: ArmContext) -> Arm:
    """The seeded drafter, verifying only its seeded span + the slots it is sure of (`seeded.verify`)."""
    v = ctx.seeded_verify
    if v is None:
        from draftlab.config.seeded import VerifyConfig  # the defaults

        v = VerifyConfig()
    drafter = seeded_drafter(name, ctx)
    step = ctx.like_target(SpanProposal(drafter.mask_token_id, v.rule, v.extra, v.min_prob, full_span=v.full_span))
    return SpeculativeArm(name, ctx.target, drafter, step, ctx.pad_id, ctx.kv_capacity)


def by_temperature(greedy: ArmFactory, sampled: ArmFactory) -> ArmFactory:
    """An arm decoding T=0 with the arm `greedy` builds and T>0 with the arm `sampled` builds."""
    def build(name: str, ctx: ArmContext) -> Arm:
        return ByTemperature(name, greedy(name, ctx), sampled(name, ctx))

    return build


def corrector_arm(variant: str, rule: str = "greedy") -> ArmFactory:
    """A corrector variant's co-trained drafter + its corrector as the proposal step (any family), read
    from <checkpoints.correctors>/<variant>/{drafter,corrector}; `rule` is DCOCO's path rule."""
    def build(name: str, ctx: ArmContext) -> Arm:
        folder = Path(ctx.checkpoints.correctors) / variant
        if not (folder / "corrector" / "config.json").exists():
            raise DraftlabError(f"arm {name}: no corrector checkpoint at {folder}/corrector; run the corrector stage "
                                f"with '{variant}' in corrector.variants")
        drafter = ctx.drafter(str(folder / "drafter"))
        _, info = read_corrector_info(folder / "corrector")
        kernels = ctx.kernels or info.get("kernels", "auto")
        prop = ctx.like_target(CorrectorProposal(load_corrector(folder / "corrector", drafter), rule,
                                                 float(info.get("lam", 0.75)), None if kernels == "auto" else kernels))
        return SpeculativeArm(name, ctx.target, drafter, prop, ctx.pad_id, ctx.kv_capacity)

    return build


def on_base(factory: ArmFactory, base: str) -> ArmFactory:
    """The method arm `factory` builds, checked to decode checkpoints trained on the `base` drafter ('plain' |
    'seeded'): every drafter folder it reads is compared with the stage's record (`trained_base`); a mismatch is
    one line naming the arm and the fix."""
    def build(name: str, ctx: ArmContext) -> Arm:
        def load(folder: str) -> Drafter:  # the kind and shape are checked by the context's `drafter` after this
            if ctx.load_drafter is None:
                raise DraftlabError(f"no drafter loader given; cannot load {folder}")
            drafter = ctx.load_drafter(folder)
            got = trained_base(folder, drafter)
            if got is not None and got != base:
                fix = (f"benchmark it as '{plain_name(name)}' (benchmark/arms=all), or set seeded.methods=true and re-run "
                       f"the specopd and corrector stages" if base == "seeded" else
                       f"benchmark it as '{name}{SEEDED_SUFFIX}' (benchmark/arms=seeded), or set seeded.methods=false "
                       f"and re-run the specopd and corrector stages")
                raise DraftlabError(f"arm {name}: {folder} was trained on the {got} drafter, but the arm's name says the "
                                    f"{base} one; {fix}")
            return drafter

        return factory(name, replace(ctx, load_drafter=load, base=base))

    return build


def _pld(ctx: ArmContext):
    if ctx.pld is None:
        from draftlab.config import PLDConfig  # the defaults

        return PLDConfig()
    return ctx.pld


def pld_arm(name: str, ctx: ArmContext) -> Arm:
    """Prompt lookup without a drafter: the engine runs no drafter pass and requests no taps."""
    p = _pld(ctx)
    return SpeculativeArm(name, ctx.target, None, PromptLookup(ctx.block_size, p.max_ngram, p.num_tokens),
                          ctx.pad_id, ctx.kv_capacity)


def hybrid_arm(mode: str | None = None) -> ArmFactory:
    """The pretrained drafter + prompt lookup (`LookupHybrid`); mode None = `pld.hybrid`."""
    def build(name: str, ctx: ArmContext) -> Arm:
        p, drafter = _pld(ctx), ctx.drafter(ctx.checkpoints.drafter)
        look = PromptLookup(drafter.block_size, p.max_ngram, min(p.num_tokens, drafter.block_size - 1))
        step = LookupHybrid(look, ctx.target.vocab_size, DrafterProposal(), mode or p.hybrid, p.min_match)
        return SpeculativeArm(name, ctx.target, drafter, step, ctx.pad_id, ctx.kv_capacity)

    return build


def reference_arm(kind: str) -> ArmFactory:
    """The peers run by other code: the authors' `dflash_generate` and Hugging Face `generate`."""
    def build(name: str, ctx: ArmContext) -> Arm:
        from draftlab.bench.peers import DFlashRefArm, HFGenerateArm

        if kind == "dflash-ref":
            return DFlashRefArm(name, ctx.target, ctx.drafter(ctx.checkpoints.drafter))
        p = _pld(ctx)
        lookup = kind == "hf-pld"
        return HFGenerateArm(name, ctx.target, p.num_tokens if lookup else 0, ctx.pad_id, p.max_ngram if lookup else 0)

    return build


# The method arms: what the specopd and corrector stages train (and the dflash-long control), on the base drafter
# `seeded.methods` picks. Each is in ARM_TABLE twice, under its plain name (trained on the plain drafter) and with the
# suffix -seeded (on the seeded drafter); both read the same folders, and each refuses a checkpoint the stage
# trained on the other base (`on_base`).
METHOD_ARMS: dict[str, ArmFactory] = {
    "dflash-specopd": by_temperature(drafter_arm(lambda c: f"{c.specopd_drafter}/t0"),
                                     drafter_arm(lambda c: f"{c.specopd_drafter}/t1")),
    "dflash-long": drafter_arm(lambda c: c.long_drafter),
    "dcoco": corrector_arm("dcoco"),
    "dcoco-globalsum": corrector_arm("dcoco", "globalsum"),
    "dcoco-geometric": corrector_arm("dcoco", "geometric"),
    "dcoco-nopair": corrector_arm("nopair"),
    "dcoco-nocand": corrector_arm("nocand"),
    "dcoco-frozen": corrector_arm("frozen"),
    "specopd-dcoco": by_temperature(corrector_arm("specopd-dcoco"), corrector_arm("specopd-dcoco-t1")),
    "dspark": corrector_arm("dspark"),
    "domino": corrector_arm("domino"),
    "dflash2": corrector_arm("dflash2"),
}

ARM_TABLE: dict[str, ArmFactory] = {
    "ar": ar_arm,
    "dflash": drafter_arm(lambda c: c.drafter),
    **{name: on_base(f, "plain") for name, f in METHOD_ARMS.items()},
    "dflash-seeded": seeded_arm,
    "dflash-seeded-cut": seeded_cut_arm,
    **{name + SEEDED_SUFFIX: on_base(f, "seeded") for name, f in METHOD_ARMS.items()},
    "pld": pld_arm,
    "dflash-pld": hybrid_arm(),
    "dflash-pld-switch": hybrid_arm("switch"),
    "dflash-pld-splice": hybrid_arm("splice"),
    "dflash-ref": reference_arm("dflash-ref"),
    "hf-generate": reference_arm("hf"),
    "hf-generate-pld": reference_arm("hf-pld"),
}


def arm_names(table: dict[str, ArmFactory] | None = None) -> tuple[str, ...]:
    """Every arm name of `table` (default: ARM_TABLE), in table order: what the config checks against."""
    return tuple(ARM_TABLE if table is None else table)


def build_arm(name: str, ctx: ArmContext, table: dict[str, ArmFactory] | None = None) -> Arm:
    """The arm `name` of `table` (default: ARM_TABLE)."""
    table = ARM_TABLE if table is None else table
    if name not in table:
        raise DraftlabError(f"unknown benchmark arm '{name}'; known: {', '.join(sorted(table))} "
                            f"(a new arm is an entry in ARM_TABLE, draftlab/bench/arms.py)")
    return table[name](name, replace(ctx, arm=name))
