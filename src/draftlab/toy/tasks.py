"""The toy world: a seeded, deterministic generator of (prompt, answer) pairs from its task families
(`draftlab.toy.task_families`: what each family draws and which answers it accepts), and the world's configuration.

Splits draw from disjoint seed ranges (`WorldConfig.splits`: name, first seed, size): `target` (the
target's own training data), `train` (the pipeline's reference prompts), `eval` (benchmark suites),
`heldout` (the target's own held-out check, apart from the benchmark's prompts). The
i-th example of a split has seed `first + i`; its family (by the weights) and its content come from
`random.Random` seeded with strings of that seed and the world's `seed`, so a given example is the same
on every machine and Python >= 3.2. `WorldConfig.config_hash()` is the sha256 of its canonical JSON.
"""
from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict, dataclass, field
from typing import Mapping, Sequence

from draftlab.errors import ConfigError, DraftlabError
from draftlab.toy.mark_families import CapsLock, Drift, Fill, Flip, Mark, PairFill
# the families' words and types, re-exported: this module is the world's public face
from draftlab.toy.task_families import (  # noqa: F401
    ENTRY_END, LIST_SEP, MARK_NATS, MARK_P, MARKS, TASK_SEP, Copy, Distinct, Family, FamilySpec, Interleave, Lookup, Merge,
    Reverse, Shuffle, Sort, Swap, symbol_names)

FAMILIES: dict[str, Family] = {f.name: f for f in (Copy(), Reverse(), Sort(), Distinct(), Lookup(), Interleave(),
                                                   Shuffle(), Merge(), Swap(), Flip(), Mark(), Fill(), Drift(),
                                                   PairFill(), CapsLock())}
# the task words of generator version 3 (the first world's): in every world's vocabulary, in this order; a family
# added later has its word appended after the keys, in the worlds that use it only, so an older world's vocabulary
# (and its trained target's token ids) never changes (draftlab.toy.tokenizer.vocabulary)
TASK_WORDS = ("copy", "reverse", "sort", "distinct", "lookup", "interleave", "shuffle", "merge", "swap", "flip",
              "mark", "fill")

SPLITS = (("target", 0, 1_000_000_000), ("train", 1_000_000_000, 100_000_000),
          ("eval", 1_100_000_000, 100_000_000), ("heldout", 1_200_000_000, 100_000_000))
DEFAULT_FAMILIES = (FamilySpec("copy", 1.0, (48, 64)), FamilySpec("reverse", 1.0, (48, 64)),
                    FamilySpec("distinct", 1.0, (48, 56), (8, 16)), FamilySpec("lookup", 1.0, (10, 12), (4, 6)),
                    FamilySpec("interleave", 1.0, (24, 32)))


@dataclass(frozen=True)
class WorldConfig:
    """The generator's knobs; `config_hash()` names a world (a toy target records the hash it was trained on)."""
    families: tuple[FamilySpec, ...] = DEFAULT_FAMILIES
    alphabet: int = 96           # number of symbols
    keys: int = 32               # number of look-up keys (#0 ...)
    value_len: tuple[int, int] = (3, 4)  # symbols per look-up value
    min_answer_tokens: int = 48  # every family's shortest answer must reach this
    seed: int = 0                # the world's salt: another value, other examples at the same seeds
    splits: tuple[tuple[str, int, int], ...] = SPLITS
    version: int = 3             # the generator's version: bump when a family's output or the vocabulary changes (2: `fill`, 3: `flip`)

    def __post_init__(self):
        fams = tuple(f if isinstance(f, FamilySpec) else FamilySpec(**f) for f in self.families)
        fams = tuple(FamilySpec(f.name, float(f.weight), tuple(f.lengths), tuple(f.extra)) for f in fams)
        object.__setattr__(self, "families", fams)
        object.__setattr__(self, "value_len", tuple(self.value_len))
        object.__setattr__(self, "splits", tuple((str(n), int(a), int(s)) for n, a, s in self.splits))
        self.validate()

    # ---- identity ---------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        d = asdict(self)
        d["families"] = [asdict(f) for f in self.families]
        return json.loads(json.dumps(d))  # tuples -> lists

    @classmethod
    def from_dict(cls, d: Mapping) -> "WorldConfig":
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        unknown = sorted(set(d) - set(known))
        if unknown:
            raise ConfigError(f"toy world config has unknown keys {unknown}; known: {sorted(cls.__dataclass_fields__)}")
        return cls(**known)

    def canonical_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    def config_hash(self) -> str:
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()

    # ---- vocabulary ---------------------------------------------------------------------------------------
    def symbols(self) -> list[str]:
        return symbol_names(self.alphabet)

    def key_words(self) -> list[str]:
        return [f"#{i}" for i in range(self.keys)]

    def family(self, name: str) -> FamilySpec:
        for f in self.families:
            if f.name == name:
                return f
        raise DraftlabError(f"task family {name!r} is not in this toy world (it has {[f.name for f in self.families]})")

    def validate(self) -> None:
        if not self.families:
            raise ConfigError("toy world: no task families")
        names = [f.name for f in self.families]
        if len(set(names)) != len(names):
            raise ConfigError(f"toy world: a family is listed twice in {names}")
        if not 2 <= self.alphabet <= len(symbol_names(10 ** 6)):
            raise ConfigError(f"toy world: alphabet={self.alphabet} must be in 2..{len(symbol_names(10 ** 6))}")
        lo, hi = self.value_len
        if not 1 <= lo <= hi:
            raise ConfigError(f"toy world: value_len={self.value_len} must be a range lo <= hi, lo >= 1")
        for f in self.families:
            if f.name not in FAMILIES:
                raise ConfigError(f"toy world: unknown task family {f.name!r}; known: {sorted(FAMILIES)}")
            for what, (a, b) in (("lengths", f.lengths), ("extra", f.extra)):
                if not 0 <= a <= b:
                    raise ConfigError(f"toy world: {f.name}.{what}={(a, b)} must be a range 0 <= lo <= hi")
            if not f.weight >= 0:
                raise ConfigError(f"toy world: {f.name}.weight={f.weight} must be >= 0")
            FAMILIES[f.name].check(self, f)
            shortest = FAMILIES[f.name].min_answer(self, f)
            if shortest < self.min_answer_tokens:
                raise ConfigError(f"toy world: {f.name}'s shortest answer has {shortest} tokens, under "
                                  f"min_answer_tokens={self.min_answer_tokens}; raise {f.name}.lengths")
        if sum(f.weight for f in self.families) <= 0:
            raise ConfigError("toy world: the family weights sum to 0")
        ranges = sorted((a, a + s, n) for n, a, s in self.splits)
        for (a0, b0, n0), (a1, _, n1) in zip(ranges, ranges[1:]):
            if a1 < b0:
                raise ConfigError(f"toy world: the seed ranges of splits {n0!r} and {n1!r} overlap")




# ---- examples ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Example:
    id: str
    split: str
    seed: int
    family: str
    prompt: str  # `<task> : <body>`
    answer: str  # the canonical (training) answer
    meta: dict = field(default_factory=dict, compare=False, hash=False)

    def valid(self, answer: str) -> bool:
        return valid(self.prompt, answer)


def _split(cfg: WorldConfig, split: str) -> tuple[int, int]:
    for name, first, size in cfg.splits:
        if name == split:
            return first, size
    raise DraftlabError(f"toy world has no split {split!r} (it has {[s[0] for s in cfg.splits]})")


def _pick(rng: random.Random, names: Sequence[str], weights: Sequence[float]) -> str:
    x, acc = rng.random() * sum(weights), 0.0
    for n, w in zip(names, weights):
        acc += w
        if x < acc and w > 0:
            return n
    return [n for n, w in zip(names, weights) if w > 0][-1]


def example(cfg: WorldConfig, split: str, index: int, family: str | None = None,
            weights: Mapping[str, float] | None = None) -> Example:
    """The index-th example of a split: of `family` when given, else drawn by the world's (or `weights`') mix."""
    first, size = _split(cfg, split)
    if not 0 <= index < size:
        raise DraftlabError(f"toy world split {split!r} has {size} seeds; index {index} is outside")
    seed = first + index
    if family is None:
        names = [f.name for f in cfg.families]
        if weights is not None and set(weights) - set(names):
            raise DraftlabError(f"family weights name {sorted(set(weights) - set(names))}, not in this world ({names})")
        w = [cfg.family(n).weight if weights is None else float(weights.get(n, 0.0)) for n in names]
        family = _pick(random.Random(f"{cfg.seed}:{seed}"), names, w)
    spec = cfg.family(family)
    body, answer = FAMILIES[family].make(random.Random(f"{cfg.seed}:{family}:{seed}"), cfg, spec)
    prompt = " ".join([family, TASK_SEP, *body])
    return Example(f"{split}-{family}-{index:07d}", split, seed, family, prompt, " ".join(answer))


def examples(cfg: WorldConfig, split: str, n: int, start: int = 0, family: str | None = None,
             weights: Mapping[str, float] | None = None) -> list[Example]:
    """Examples start..start+n-1 of a split (a per-family benchmark suite when `family` is given)."""
    return [example(cfg, split, i, family, weights) for i in range(start, start + n)]


def family_of(prompt: str) -> str:
    """The task family a prompt asks for (its first word)."""
    words = prompt.split()
    if len(words) < 2 or words[1] != TASK_SEP or words[0] not in FAMILIES:
        raise DraftlabError(f"not a toy-world prompt (expected '<task> : ...' with a task in {sorted(FAMILIES)}): "
                            f"{prompt[:40]!r}")
    return words[0]


def valid(prompt: str, answer: str) -> bool:
    """Whether `answer` is a correct answer to `prompt` (any order for `distinct`)."""
    return FAMILIES[family_of(prompt)].valid(prompt, answer)
