"""Schema of the `seeded` section: whether the pipeline trains the seeded drafter (docs/algorithms.md
"Seeded block drafting") beside the plain one, and how its settings differ from the plain drafter's.

The seeded drafter is the plain one's recipe with `drafter.seed=lookup` and a few keys changed, so the
section holds only the differences: `seeded.drafter` and `seeded.pretrain` are overrides of `drafter.*` and
`pretrain.*` (any key of those sections; a new drafter option is available here with no edit). `resolve`
applies them (seed=lookup implied) and the result passes the same checks as the sections themselves, with
errors naming `seeded.drafter.<key>` / `seeded.pretrain.<key>`. Disabled (`enabled: false`, the `gpu`
default), the pretrain_seeded stage writes a small "disabled" report and no model, and the `dflash-seeded`
arm is refused by the config check (`check_across`).

`methods`: the method stages (specopd, corrector: DCOCO and its ablations, DSpark, Domino,
DFlash-2, the dflash-long control) train on the seeded drafter instead of the plain one. Their benchmark arms
then carry the suffix `-seeded` (`dcoco-seeded`, ...): the arm table holds every method arm under both names
(draftlab.arms.grammar), and `check_arm_bases` refuses, in one line, a name that does not match the base the
flag picks.

`seeded.verify` is the verify-width rule of the `dflash-seeded-cut` arm
(`draftlab.decoding.width.SpanProposal`): `rule` full | span, `extra` drafter slots after the seeded span,
`min_prob` the drafter's probability that they are right. Only the benchmark reads it (dvc.yaml: the
pretrain_seeded stage depends on seeded.enabled / drafter / pretrain, not on it).
"""
from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field
from typing import Any

from draftlab.config.checks import _choice, _unit
from draftlab.errors import ConfigError

SEEDED_ARM = "dflash-seeded"  # the benchmark arm that reads the seeded drafter (draftlab.arms.grammar)
PLAIN_ARM = "dflash"  # the plain drafter's arm (no method: its -seeded twin is SEEDED_ARM, the seeded drafter alone)
# the naming rule of the method arms: the arm of a method trained on the seeded drafter is its plain name + this
SEEDED_SUFFIX = "-seeded"


def drafter_tree(name: str) -> bool:
    """A drafter's own tree arm (`dflash-tree16`, `dflash-treecost-seeded`: `draftlab.arms.grammar`): the plain or the
    seeded drafter's block as a tree, no method's checkpoint."""
    return plain_name(name).startswith(PLAIN_ARM + "-tree")


def method_arm_base(name: str, known) -> str | None:
    """Which base drafter the arm `name` of the arm table (`known`: its names) decodes a method trained on:
    'seeded' for a method arm with the suffix (`dcoco-seeded`), 'plain' for one whose seeded twin is in the
    table (`dcoco`), None for every other arm (ar, dflash, dflash-seeded, the drafters' trees, the peers)."""
    if name in (SEEDED_ARM, PLAIN_ARM) or drafter_tree(name):
        return None
    if name.endswith(SEEDED_SUFFIX) and name[: -len(SEEDED_SUFFIX)] in known:
        return "seeded"
    return "plain" if name + SEEDED_SUFFIX in known else None


def plain_name(name: str) -> str:
    """The arm name without the seeded suffix (`dcoco-seeded` -> `dcoco`)."""
    return name[: -len(SEEDED_SUFFIX)] if name.endswith(SEEDED_SUFFIX) else name


CUT_ARM = "dflash-seeded-cut"  # the seeded drafter with the verify-width rule `seeded.verify`
SEEDED_ARMS = (SEEDED_ARM, CUT_ARM)
# = draftlab.decoding.width.VERIFY_RULES (a test keeps them equal; importing decoding here would cost seconds)
VERIFY_RULES = ("full", "span")
FULL_SPAN = ("seeds", "draft")  # = draftlab.decoding.width.FULL_SPAN (the same test)


def _override(section: Any, over: dict[str, Any], key: str) -> Any:
    """A copy of the dataclass `section` with the overrides `over` applied; a key it lacks or a value of
    another kind than the section's own is a one-line error naming `key.<name>`."""
    names = [f.name for f in dataclasses.fields(section)]
    values = {}
    for k, v in over.items():
        if k not in names:
            near = difflib.get_close_matches(k, names, n=1)
            hint = f" (did you mean '{near[0]}'?)" if near else ""
            raise ConfigError(f"unknown key '{key}.{k}'{hint}; {key} overrides keys of {key.split('.')[-1]}: "
                              f"{', '.join(names)}")
        cur = getattr(section, k)
        if isinstance(cur, bool) or isinstance(v, bool):
            ok = isinstance(cur, bool) and isinstance(v, bool)
        elif isinstance(cur, float):
            ok, v = isinstance(v, (int, float)), float(v) if isinstance(v, (int, float)) else v
        else:
            ok = isinstance(v, type(cur))
        if not ok:
            raise ConfigError(f"{key}.{k}={v!r} must be of type {type(cur).__name__}, like {key.split('.')[-1]}.{k}={cur!r}")
        values[k] = list(v) if isinstance(v, list) else v
    return dataclasses.replace(section, **values)


@dataclass
class VerifyConfig:
    """The verify-width rule of the `dflash-seeded-cut` arm (draftlab.decoding.width: the seeded span, then up
    to `extra` drafter slots while the drafter's probability that they are all right stays >= min_prob; no seed
    and an unsure slot 1: an AR step). Defaults: the CPU's measured costs (a verified position ~1/7 of an AR step
    dearer, ~6.7 of 45 ms); re-derive min_prob from tools/verify_cost.py (`break_even_min_prob`)."""

    rule: str = "span"  # full (the whole block, = dflash-seeded) | span
    extra: int = 3  # drafter slots verified after the seeded span at most (0..S-1)
    min_prob: float = 0.15  # in 0..1: add a slot while the product of the added slots' top-1 probabilities >= it
    full_span: str = "seeds"  # seeds: a round whose every block is seeded to its end runs no draft pass | draft

    def check(self, p: str, block_size: int | None = None) -> None:
        """The checks of draftlab.decoding.width.check_verify, one line each naming `p.<key>`."""
        _choice(f"{p}.rule", self.rule, VERIFY_RULES)
        _choice(f"{p}.full_span", self.full_span, FULL_SPAN)
        if self.extra < 0:
            raise ConfigError(f"{p}.extra={self.extra} must be >= 0 (drafter slots verified after the seeded span)")
        if block_size is not None and self.extra > block_size - 1:
            raise ConfigError(f"{p}.extra={self.extra} must lie in 0..{block_size - 1} (at most S-1 proposals, S = "
                              f"drafter.block_size={block_size})")
        _unit(f"{p}.min_prob", self.min_prob)


@dataclass
class SeededConfig:
    """The seeded drafter of the pretrain_seeded stage (models/drafter/seeded, the `dflash-seeded` arm)."""

    enabled: bool = False  # false: the stage writes a "disabled" report and no model
    drafter: dict[str, Any] = field(default_factory=dict)  # overrides of drafter.* (seed=lookup is implied)
    pretrain: dict[str, Any] = field(default_factory=dict)  # overrides of pretrain.* (the budget, the lr, ...)
    # the specopd and corrector stages train on the seeded drafter (models/drafter/seeded) instead of the plain
    # one; their arms are then named <method>-seeded (dcoco-seeded, dflash-specopd-seeded, ...)
    methods: bool = False
    verify: VerifyConfig = field(default_factory=VerifyConfig)  # the dflash-seeded-cut arm's verify width

    def check(self, p: str) -> None:
        if self.methods and not self.enabled:
            raise ConfigError(f"{p}.methods=true needs {p}.enabled=true (the methods train on the seeded drafter, which "
                              f"stage pretrain_seeded trains only when enabled); set {p}.enabled=true or {p}.methods=false")
        self.verify.check(f"{p}.verify")
        if self.drafter.get("seed", "lookup") != "lookup":
            raise ConfigError(f"{p}.drafter.seed={self.drafter['seed']!r}: the seeded drafter always seeds "
                              f"(seed=lookup); drop the key (the plain drafter is drafter.*)")

    def resolve(self, drafter, pretrain, p: str = "seeded"):
        """(DrafterConfig, PretrainConfig) of the seeded drafter: the plain sections with the overrides,
        seed=lookup; each checked as its section is, its errors naming seeded.drafter / seeded.pretrain."""
        d = _override(drafter, {**self.drafter, "seed": "lookup"}, f"{p}.drafter")
        t = _override(pretrain, self.pretrain, f"{p}.pretrain")
        d.check(f"{p}.drafter")
        t.check(f"{p}.pretrain")
        return d, t

    def check_across(self, drafter, pretrain, benchmark, p: str = "seeded") -> None:
        """`verify.extra` fits the block. Enabled: the resolved sections pass their checks. Disabled: a benchmark
        arm list that names a seeded arm (no stage trains the drafter) is one line."""
        self.verify.check(f"{p}.verify", drafter.block_size)
        if self.enabled:
            d, _ = self.resolve(drafter, pretrain, p)
            if d.block_size != drafter.block_size:
                raise ConfigError(f"{p}.drafter.block_size={d.block_size} differs from drafter.block_size="
                                  f"{drafter.block_size}; the comparison with the plain drafter needs the same blocks: "
                                  f"drop {p}.drafter.block_size")
            return
        for key, names in (("benchmark.arms", benchmark.arms), ("benchmark.ablation_arms", benchmark.ablation_arms)):
            for arm in [*SEEDED_ARMS, *(a for a in names if drafter_tree(a) and a.endswith(SEEDED_SUFFIX))]:
                if arm in names:
                    raise ConfigError(f"{key} names '{arm}' but {p}.enabled=false (no stage trains "
                                      f"models/drafter/seeded); set {p}.enabled=true or drop it from {key} "
                                      "(benchmark/arms=paper is the list without it)")

    def check_arm_bases(self, benchmark, known, p: str = "seeded") -> None:
        """Every method arm the benchmark section names (arms, ablation_arms, sampled_arms, pairs, the sweep's arms
        and base) matches the base drafter `methods` picks: `<method>-seeded` when true, the plain name when
        false; `known` is the arm table's names (the rule: `method_arm_base`)."""
        want = "seeded" if self.methods else "plain"
        lists = (("arms", benchmark.arms), ("ablation_arms", benchmark.ablation_arms),
                 ("sampled_arms", benchmark.sampled_arms), ("pairs", [a for pair in benchmark.pairs for a in pair]),
                 ("concurrency_arms", benchmark.concurrency_arms), ("concurrency_base", [benchmark.concurrency_base]))
        for key, names in lists:
            for a in names:
                base = method_arm_base(a, known)
                if base is None or base == want:
                    continue
                if self.methods:
                    raise ConfigError(f"benchmark.{key} names '{a}', a method trained on the plain drafter, but "
                                      f"{p}.methods=true (the specopd and corrector stages train on models/drafter/seeded):"
                                      f" name it '{a}{SEEDED_SUFFIX}' (benchmark/arms=seeded lists them) or set "
                                      f"{p}.methods=false")
                raise ConfigError(f"benchmark.{key} names '{a}', a method trained on the seeded drafter, but {p}.methods="
                                  f"false (the specopd and corrector stages train on models/drafter/pretrained): name it "
                                  f"'{plain_name(a)}' (benchmark/arms=all lists them) or set {p}.methods=true")
