"""Schema of the `seeded` section: whether the pipeline trains the seeded drafter (SPEC §5, issue 20) beside
the plain one, and how its settings differ from the plain drafter's.

The seeded drafter is the plain one's recipe with `drafter.seed=lookup` and a few keys changed, so the
section holds only the differences: `seeded.drafter` and `seeded.pretrain` are overrides of `drafter.*` and
`pretrain.*` (any key of those sections; a new drafter option is available here with no edit). `resolve`
applies them (seed=lookup implied) and the result passes the same checks as the sections themselves, with
errors naming `seeded.drafter.<key>` / `seeded.pretrain.<key>`. Disabled (`enabled: false`, the `gpu`
default), the pretrain_seeded stage writes a small "disabled" report and no model, and the `dflash-seeded`
arm is refused by the config check (`check_across`).

`seeded.verify` (issue 20 item 4) is the verify-width rule of the `dflash-seeded-cut` arm
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

SEEDED_ARM = "dflash-seeded"  # the benchmark arm that reads the seeded drafter (draftlab.bench.arms)
CUT_ARM = "dflash-seeded-cut"  # the seeded drafter with the verify-width rule `seeded.verify`
SEEDED_ARMS = (SEEDED_ARM, CUT_ARM)
# = draftlab.decoding.width.VERIFY_RULES (a test keeps them equal; importing decoding here would cost seconds)
VERIFY_RULES = ("full", "span")


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
    and an unsure slot 1: an AR step). Defaults: issue 20's CPU figures (a verified position ~1/7 of an AR step
    dearer, ~6.7 of 45 ms); re-derive min_prob from tools/verify_cost.py (`break_even_min_prob`)."""

    rule: str = "span"  # full (the whole block, = dflash-seeded) | span
    extra: int = 3  # drafter slots verified after the seeded span at most (0..S-1)
    min_prob: float = 0.15  # in 0..1: add a slot while the product of the added slots' top-1 probabilities >= it

    def check(self, p: str, block_size: int | None = None) -> None:
        """The checks of draftlab.decoding.width.check_verify, one line each naming `p.<key>`."""
        _choice(f"{p}.rule", self.rule, VERIFY_RULES)
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
    verify: VerifyConfig = field(default_factory=VerifyConfig)  # the dflash-seeded-cut arm's verify width

    def check(self, p: str) -> None:
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
            for arm in SEEDED_ARMS:
                if arm in names:
                    raise ConfigError(f"{key} names '{arm}' but {p}.enabled=false (no stage trains "
                                      f"models/drafter/seeded); set {p}.enabled=true or drop it from {key} "
                                      "(benchmark/arms=paper is the list without it)")
