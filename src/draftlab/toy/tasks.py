"""The toy world's task families: a seeded, deterministic generator of (prompt, answer) pairs.

A prompt is whitespace-separated words, `<task> : <body>`; its answer is determined by the prompt (for
`distinct`, `shuffle`, `merge`, `swap` and `mark`, up to order or marks). Symbols are the first `alphabet` of a-z, A-Z, 0-9, then a0..z9 (their order is
that list's, which `sort` uses); look-up keys are `#0`, `#1`, ... The families (`FamilySpec.lengths` and
`.extra` are inclusive ranges, drawn uniformly per example):

- `copy`: a list of `lengths` distinct symbols; the answer repeats it (prompt lookup reads it off).
- `reverse`: the same list; the answer is it reversed.
- `sort`: `lengths` symbols drawn with repeats; the answer is the list sorted in the alphabet's order.
- `distinct`: `lengths` distinct symbols, `extra` of them repeated once more, shuffled; the answer is the
  distinct symbols in ANY order (the training answer is a random order, so a trained target is uncertain
  at T=1; `valid` accepts every order).
- `lookup`: a table of `lengths + extra` entries `#k v v v ;` (distinct keys, values of `value_len` symbols),
  `|`, then `lengths` distinct queried keys; the answer is the queried entries in query order, each as
  the table writes it (`#k v v v ;`).
- `interleave`: two lists of `lengths` symbols each (all distinct), `a... | b...`; the answer alternates
  them `a1 b1 a2 b2 ...`.
- `shuffle`: `lengths` groups of `extra` symbols each (all distinct), separated by `|`; the answer writes
  the groups in order, separated by `|`, each group's symbols in ANY order (training: a random one).
- `swap`: `lengths` pairs of symbols (all distinct), written as one list; the answer writes the list with each
  consecutive pair (symbols 1-2, 3-4, ...) in EITHER order (training: each pair's order a fair coin), so the
  first symbol of a pair carries ln 2 nats at T=1 and the second is determined by it.
- `mark`: `lengths` symbols (all distinct); the answer writes each symbol followed by a mark, `+` or `-`, either
  valid (training: `+` with probability MARK_P = 0.7), so a mark carries 0.61 nats at T=1 while greedy always
  writes `+`.
- `flip`: `lengths` pairs of symbols (all distinct), each pair followed by `|` but the last; the answer writes them
  the same way with each pair in EITHER order (training: a fair coin): `swap` with its pairs marked, so the answer
  aligns with its source (each symbol at one of two distances) and a pair's second symbol is fixed by its first.
- `fill`: `lengths` symbols (all distinct), each followed by a blank `;`; the answer writes the list with each
  blank filled by a mark, `+` or `-`, either valid (training: `+` with probability MARK_P), so every answer token
  sits at one fixed distance from its source in the prompt (a one-layer drafter copies the symbols by position) and
  the marks carry 0.61 nats at T=1.
- `merge`: two lists of `lengths` symbols each (all distinct), `a... | b...`; the answer is ANY merge that
  keeps each list's own order (training: a uniformly random riffle).
- `drift` (drift copy): `lengths` symbols (all distinct), `extra` of them marked, each mark right after its symbol:
  `x +` (a stutter: the answer writes x twice) or `x -` (a skip: the answer leaves x out), a fair coin each; no two
  marked symbols side by side and the first symbol unmarked. The answer copies the list with its marks applied, so
  the source offset of an answer token drifts by (stutters − skips) so far: a drafter that reads the source at a fixed
  distance from its anchor holds the answer among the few symbols near that distance, more spread with depth, while
  "what follows this token" is one rule (the next source symbol, or the same one again after a stutter's first copy).
  The number of marks varies per prompt (one τ level per prompt).
- `capslock` (caps-lock copy): `lengths` letters drawn with repeats from a-z, `extra` of them (at distinct
  positions, any) written in upper case; the answer copies the list with caps lock: the lock starts off, an upper-case
  letter in the list toggles it, and every letter is written in the lock's current case (`a b C d e F g` ->
  `a b C D E f g`). Every answer token sits at one fixed distance from its source (a one-layer drafter reads its
  letter by position), but its case is the parity of the toggles since the anchor: a slot that sees its own source
  and the anchor's case holds the answer in its top two, first only while no toggle lies in between (more rarely with
  depth), while "this token's case given its predecessor's" is one local rule a transition score can learn. The
  number of toggles varies per prompt (one τ level per prompt).
- `pairfill` (paired fill): `lengths` symbols (all distinct), each followed by two blanks `; ;`; the answer writes each
  symbol followed by two EQUAL marks, `+ +` or `- -` (training: `+` with probability MARK_P), so the first mark of a
  pair carries 0.61 nats at T=1 and the second is fixed by it: independent per-slot sampling breaks pairs that a
  pair-aware proposal keeps.

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
import math
import random
import string
from dataclasses import asdict, dataclass, field, replace
from typing import Mapping, Sequence

from draftlab.errors import ConfigError, DraftlabError

TASK_SEP, LIST_SEP, ENTRY_END = ":", "|", ";"
MARKS, MARK_P = ("+", "-"), 0.7  # `mark`: the two marks and the first one's probability
MARK_NATS = -(MARK_P * math.log(MARK_P) + (1 - MARK_P) * math.log(1 - MARK_P))  # a drawn mark's entropy (0.61 nats)


@dataclass(frozen=True)
class FamilySpec:
    """One family in the world's mix: its name, sampling weight and size ranges (see the module doc)."""
    name: str
    weight: float = 1.0
    lengths: tuple[int, int] = (48, 64)
    extra: tuple[int, int] = (0, 0)


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


def symbol_names(n: int) -> list[str]:
    """The first n symbols: a-z, A-Z, 0-9, then a0, a1, ..., z9 (at most 322)."""
    base = list(string.ascii_lowercase + string.ascii_uppercase + string.digits)
    more = [c + d for c in string.ascii_lowercase for d in string.digits]
    return (base + more)[:n]


_ORDER = {s: i for i, s in enumerate(symbol_names(10 ** 6))}


# ---- families ---------------------------------------------------------------------------------------------
class Family:
    """A task family: `make` draws (body words, training answer words); `solve` gives the answer a prompt's
    body determines (None where several are valid); `valid(prompt, answer)` checks any answer (texts)."""
    name = ""

    def check(self, cfg: WorldConfig, spec: FamilySpec) -> None:
        if spec.lengths[1] > cfg.alphabet:
            raise ConfigError(f"toy world: {spec.name}.lengths {spec.lengths} needs more than alphabet={cfg.alphabet} symbols")

    def min_answer(self, cfg: WorldConfig, spec: FamilySpec) -> int:
        return spec.lengths[0]

    def scaled(self, spec: FamilySpec, f: float) -> FamilySpec:
        """The spec with its sizes scaled by f (rounded up, at least 1): a training curriculum's short lists."""
        def scale(r):
            return tuple(max(1, math.ceil(x * f)) for x in r)
        return replace(spec, lengths=scale(spec.lengths), extra=scale(spec.extra) if spec.extra[1] else spec.extra)

    def make(self, rng: random.Random, cfg: WorldConfig, spec: FamilySpec) -> tuple[list[str], list[str]]:
        body = rng.sample(cfg.symbols(), rng.randint(*spec.lengths))
        return body, self.solve(body)

    def solve(self, body: list[str]) -> list[str] | None:
        raise NotImplementedError

    def valid(self, prompt: str, answer: str) -> bool:
        words = prompt.split()
        if words[:2] != [self.name, TASK_SEP]:
            return False
        try:
            return self.check_answer(words[2:], answer.split())
        except (ValueError, KeyError, IndexError):
            return False

    def check_answer(self, body: list[str], answer: list[str]) -> bool:
        return answer == self.solve(body)

    def greedy(self, answer: list[str]) -> list[str]:
        """The answer a greedy target writes, from a training answer (a free choice at its likelier value)."""
        return answer

    def nats(self, answer: list[str]) -> list[float]:
        """Each answer position's entropy in the training distribution that this family draws (0: determined)."""
        return [0.0] * len(answer)

    def align(self, body: list[str], answer: list[str]) -> list[tuple[int | None, object, object]]:
        """Each answer token's (source: its index among the body's symbols, None for a mark or separator; its
        variant; the variant of the source word it reads) for the ideal drafter (`draftlab.toy.ideal`). Symbols
        are matched by identity here (the lists are distinct) and have no variants."""
        syms = [w for w in body if w not in MARKS and w not in (ENTRY_END, LIST_SEP)]
        where = {w: i for i, w in enumerate(syms)}
        return [(where.get(w), None, None) for w in answer]


class Copy(Family):
    name = "copy"

    def solve(self, body):
        return list(body)


class Reverse(Family):
    name = "reverse"

    def solve(self, body):
        return body[::-1]


class Sort(Family):
    name = "sort"

    def check(self, cfg, spec):
        pass  # drawn with repeats: any length fits

    def make(self, rng, cfg, spec):
        body = rng.choices(cfg.symbols(), k=rng.randint(*spec.lengths))
        return body, self.solve(body)

    def solve(self, body):
        return sorted(body, key=lambda s: _ORDER[s])


class Distinct(Family):
    name = "distinct"

    def make(self, rng, cfg, spec):
        uniq = rng.sample(cfg.symbols(), rng.randint(*spec.lengths))
        again = rng.sample(uniq, min(len(uniq), rng.randint(*spec.extra)))
        body = uniq + again
        rng.shuffle(body)
        answer = list(uniq)
        rng.shuffle(answer)  # the training answer: a random order
        return body, answer

    def solve(self, body):
        return None  # several valid answers

    def check_answer(self, body, answer):
        return len(answer) == len(set(answer)) and set(answer) == set(body)


class Lookup(Family):
    name = "lookup"

    def check(self, cfg, spec):
        if spec.lengths[1] + spec.extra[1] > cfg.keys:
            raise ConfigError(f"toy world: lookup needs {spec.lengths[1] + spec.extra[1]} keys, over keys={cfg.keys}")

    def min_answer(self, cfg, spec):
        return spec.lengths[0] * (cfg.value_len[0] + 2)

    def make(self, rng, cfg, spec):
        nq = rng.randint(*spec.lengths)
        keys = rng.sample(cfg.key_words(), nq + rng.randint(*spec.extra))
        syms = cfg.symbols()
        table = [[k, *rng.choices(syms, k=rng.randint(*cfg.value_len)), ENTRY_END] for k in keys]
        queries = rng.sample(keys, nq)
        body = [w for e in table for w in e] + [LIST_SEP] + queries
        return body, self.solve(body)

    def solve(self, body):
        cut = body.index(LIST_SEP)
        entries, cur = {}, []
        for w in body[:cut]:
            cur.append(w)
            if w == ENTRY_END:
                entries[cur[0]] = cur
                cur = []
        if cur:
            raise ValueError("unterminated table entry")
        return [w for q in body[cut + 1:] for w in entries[q]]


class Interleave(Family):
    name = "interleave"

    def check(self, cfg, spec):
        if 2 * spec.lengths[1] > cfg.alphabet:
            raise ConfigError(f"toy world: {spec.name}.lengths {spec.lengths} needs 2x that many symbols, "
                              f"over alphabet={cfg.alphabet}")

    def min_answer(self, cfg, spec):
        return 2 * spec.lengths[0]

    def make(self, rng, cfg, spec):
        n = rng.randint(*spec.lengths)
        both = rng.sample(cfg.symbols(), 2 * n)
        body = both[:n] + [LIST_SEP] + both[n:]
        return body, self.solve(body)

    def solve(self, body):
        cut = body.index(LIST_SEP)
        a, b = body[:cut], body[cut + 1:]
        if len(a) != len(b):
            raise ValueError("lists of different lengths")
        return [w for pair in zip(a, b) for w in pair]


class Shuffle(Family):
    name = "shuffle"

    def check(self, cfg, spec):
        if spec.extra[0] < 1:
            raise ConfigError(f"toy world: shuffle.extra (the group size) {spec.extra} must be >= 1")
        if spec.lengths[1] * spec.extra[1] > cfg.alphabet:
            raise ConfigError(f"toy world: shuffle needs {spec.lengths[1] * spec.extra[1]} symbols, over "
                              f"alphabet={cfg.alphabet}")

    def min_answer(self, cfg, spec):
        return spec.lengths[0] * (spec.extra[0] + 1) - 1

    def scaled(self, spec, f):
        return replace(super().scaled(spec, f), extra=spec.extra)  # fewer groups, same group size

    def make(self, rng, cfg, spec):
        n = rng.randint(*spec.lengths)
        sizes = [rng.randint(*spec.extra) for _ in range(n)]
        syms = rng.sample(cfg.symbols(), sum(sizes))
        groups, at = [], 0
        for k in sizes:
            groups.append(syms[at:at + k])
            at += k
        answer = []
        for g in groups:
            g = list(g)
            rng.shuffle(g)
            answer += [*(answer and [LIST_SEP]), *g]
        return [w for i, g in enumerate(groups) for w in ([LIST_SEP] if i else []) + g], answer

    def solve(self, body):
        return None  # several valid answers

    @staticmethod
    def _groups(words):
        out = [[]]
        for w in words:
            if w == LIST_SEP:
                out.append([])
            else:
                out[-1].append(w)
        return out

    def check_answer(self, body, answer):
        want, got = self._groups(body), self._groups(answer)
        return len(want) == len(got) and all(len(g) == len(set(g)) and sorted(g) == sorted(w)
                                             for g, w in zip(got, want))


class Merge(Interleave):  # two symbols per unit of `lengths`: Interleave's check and shortest answer
    name = "merge"

    def make(self, rng, cfg, spec):
        n = rng.randint(*spec.lengths)
        both = rng.sample(cfg.symbols(), 2 * n)
        a, b = both[:n], both[n:]
        from_a = set(rng.sample(range(2 * n), n))
        ia, ib, answer = iter(a), iter(b), []
        for i in range(2 * n):
            answer.append(next(ia) if i in from_a else next(ib))
        return a + [LIST_SEP] + b, answer

    def solve(self, body):
        return None  # several valid answers

    def check_answer(self, body, answer):
        cut = body.index(LIST_SEP)
        a, b = body[:cut], body[cut + 1:]
        if len(answer) != len(a) + len(b):
            return False
        i = j = 0
        for w in answer:  # the symbols are distinct: each word belongs to one list
            if i < len(a) and w == a[i]:
                i += 1
            elif j < len(b) and w == b[j]:
                j += 1
            else:
                return False
        return True


class Swap(Interleave):  # two symbols per unit of `lengths`: Interleave's check and shortest answer
    name = "swap"

    def make(self, rng, cfg, spec):
        body = rng.sample(cfg.symbols(), 2 * rng.randint(*spec.lengths))
        answer = []
        for i in range(0, len(body), 2):
            answer += body[i:i + 2] if rng.random() < 0.5 else body[i:i + 2][::-1]
        return body, answer

    def solve(self, body):
        return None  # several valid answers

    def check_answer(self, body, answer):
        return len(answer) == len(body) and len(body) % 2 == 0 and all(
            sorted(answer[i:i + 2]) == sorted(body[i:i + 2]) for i in range(0, len(body), 2))

    def nats(self, answer):
        """A pair's first symbol is a fair coin, its second fixed by it (separators determined)."""
        out, k = [], 0
        for w in answer:
            out.append(0.0 if w == LIST_SEP else (math.log(2) if k % 2 == 0 else 0.0))
            k += w != LIST_SEP
        return out


class Mark(Family):
    name = "mark"

    def min_answer(self, cfg, spec):
        return 2 * spec.lengths[0]

    def make(self, rng, cfg, spec):
        body = rng.sample(cfg.symbols(), rng.randint(*spec.lengths))
        return body, [w for x in body for w in (x, MARKS[0] if rng.random() < MARK_P else MARKS[1])]

    def solve(self, body):
        return None  # several valid answers

    def check_answer(self, body, answer):
        return answer[0::2] == body and len(answer) == 2 * len(body) and set(answer[1::2]) <= set(MARKS)

    def greedy(self, answer):
        return [MARKS[0] if w in MARKS else w for w in answer]

    def nats(self, answer):
        return [MARK_NATS if w in MARKS else 0.0 for w in answer]


class Flip(Swap):  # `swap` with a `|` after each pair: the pairs are marked in the prompt and in the answer
    name = "flip"

    def min_answer(self, cfg, spec):
        return 3 * spec.lengths[0] - 1

    def make(self, rng, cfg, spec):
        body, answer = super().make(rng, cfg, spec)
        return self._mark(body), self._mark(answer)

    @staticmethod
    def _mark(words):
        return [w for i in range(0, len(words), 2) for w in ([LIST_SEP] if i else []) + words[i:i + 2]]

    def check_answer(self, body, answer):
        unmark = lambda ws: [w for i, w in enumerate(ws) if i % 3 != 2]  # noqa: E731
        return (body == self._mark(unmark(body)) and answer == self._mark(unmark(answer))
                and super().check_answer(unmark(body), unmark(answer)))


class Fill(Mark):  # `mark` with a blank after each symbol in the prompt: the answer aligns with its source
    name = "fill"

    def make(self, rng, cfg, spec):
        syms, answer = super().make(rng, cfg, spec)
        return [w for x in syms for w in (x, ENTRY_END)], answer

    def check_answer(self, body, answer):
        return len(body) % 2 == 0 and body[1::2] == [ENTRY_END] * (len(body) // 2) and super().check_answer(body[0::2], answer)


class Drift(Family):
    name = "drift"
    STUTTER, SKIP = MARKS  # `x +`: x written twice; `x -`: x left out

    def check(self, cfg, spec):
        super().check(cfg, spec)
        if spec.extra[1] > spec.lengths[0] // 2:
            raise ConfigError(f"toy world: drift.extra {spec.extra} marks more symbols than a list of "
                              f"{spec.lengths[0]} holds with no two marked side by side and the first unmarked")

    def min_answer(self, cfg, spec):
        return spec.lengths[0] - spec.extra[1]  # every mark a skip

    def make(self, rng, cfg, spec):
        n = rng.randint(*spec.lengths)
        syms = rng.sample(cfg.symbols(), n)
        m = min(rng.randint(*spec.extra), n // 2)  # (a curriculum's scaled lists: at most every other symbol)
        # m marked positions among 1..n-1 with no two adjacent: choose m of the n-m slots, spread them apart
        picks = sorted(rng.sample(range(n - m), m))
        marked = {p + i + 1 for i, p in enumerate(picks)}
        body = []
        for i, x in enumerate(syms):
            body += [x, self.STUTTER if rng.random() < 0.5 else self.SKIP] if i in marked else [x]
        return body, self.solve(body)

    def solve(self, body):
        out = []
        for i, w in enumerate(body):
            if w in MARKS:
                continue
            mark = body[i + 1] if i + 1 < len(body) and body[i + 1] in MARKS else None
            out += [w, w] if mark == self.STUTTER else [] if mark == self.SKIP else [w]
        return out

    def check_answer(self, body, answer):
        if not body or body[0] in MARKS or any(a in MARKS and b in MARKS for a, b in zip(body, body[1:])):
            return False
        return answer == self.solve(body)


class PairFill(Family):
    name = "pairfill"

    def min_answer(self, cfg, spec):
        return 3 * spec.lengths[0]

    def make(self, rng, cfg, spec):
        syms = rng.sample(cfg.symbols(), rng.randint(*spec.lengths))
        answer = []
        for x in syms:
            m = MARKS[0] if rng.random() < MARK_P else MARKS[1]
            answer += [x, m, m]
        return [w for x in syms for w in (x, ENTRY_END, ENTRY_END)], answer

    def solve(self, body):
        return None  # several valid answers

    def check_answer(self, body, answer):
        syms = body[0::3]
        return (len(body) % 3 == 0 and body[1::3] == body[2::3] == [ENTRY_END] * len(syms) and answer[0::3] == syms
                and len(answer) == len(body) and answer[1::3] == answer[2::3] and set(answer[1::3]) <= set(MARKS))

    greedy = Mark.greedy

    def nats(self, answer):
        return [MARK_NATS if i % 3 == 1 else 0.0 for i in range(len(answer))]  # the pair's first mark; the second follows


class CapsLock(Family):
    name = "capslock"

    def check(self, cfg, spec):
        if cfg.alphabet < 52:
            raise ConfigError(f"toy world: capslock needs the 52 letters a-z, A-Z; raise alphabet={cfg.alphabet} to 52")
        if spec.extra[1] > spec.lengths[0]:
            raise ConfigError(f"toy world: capslock.extra {spec.extra} toggles more letters than a list of "
                              f"{spec.lengths[0]} has")

    def make(self, rng, cfg, spec):
        n = rng.randint(*spec.lengths)
        letters = [rng.choice(string.ascii_lowercase) for _ in range(n)]
        toggled = set(rng.sample(range(n), min(rng.randint(*spec.extra), n)))
        body = [x.upper() if i in toggled else x for i, x in enumerate(letters)]
        return body, self.solve(body)

    def solve(self, body):
        out, lock = [], False
        for w in body:
            lock ^= w.isupper()
            out.append(w.upper() if lock else w.lower())
        return out

    def check_answer(self, body, answer):
        return all(len(w) == 1 and w.isalpha() and w.isascii() for w in body) and answer == self.solve(body)

    def align(self, body, answer):
        """Answer token i reads body word i: its variant is its case, its source's is whether that word toggles."""
        return [(i, w.isupper(), body[i].isupper()) for i, w in enumerate(answer)]


FAMILIES: dict[str, Family] = {f.name: f for f in (Copy(), Reverse(), Sort(), Distinct(), Lookup(), Interleave(),
                                                   Shuffle(), Merge(), Swap(), Flip(), Mark(), Fill(), Drift(),
                                                   PairFill(), CapsLock())}
# the task words of generator version 3 (the first world's): in every world's vocabulary, in this order; a family
# added later has its word appended after the keys, in the worlds that use it only, so an older world's vocabulary
# (and its trained target's token ids) never changes (draftlab.toy.tokenizer.vocabulary)
TASK_WORDS = ("copy", "reverse", "sort", "distinct", "lookup", "interleave", "shuffle", "merge", "swap", "flip",
              "mark", "fill")


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
