"""The toy world's task families: what each one draws and which answers it accepts (the families whose answers carry
marks or a case: `draftlab.toy.mark_families`; the registry `FAMILIES`, the examples and the world's configuration:
`draftlab.toy.tasks`).

A prompt is whitespace-separated words, `<task> : <body>`; its answer is determined by the prompt (for
`distinct`, `shuffle`, `merge`, `swap` and `mark`, up to order or marks). Symbols are the first `alphabet` of a-z, A-Z,
0-9, then a0..z9 (their order is that list's, which `sort` uses); look-up keys are `#0`, `#1`, ... The families
(`FamilySpec.lengths` and `.extra` are inclusive ranges, drawn uniformly per example):

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
- `merge`: two lists of `lengths` symbols each (all distinct), `a... | b...`; the answer is ANY merge that
  keeps each list's own order (training: a uniformly random riffle).
"""
from __future__ import annotations

import math
import random
import string
from dataclasses import dataclass, replace

from draftlab.errors import ConfigError


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



def symbol_names(n: int) -> list[str]:
    """The first n symbols: a-z, A-Z, 0-9, then a0, a1, ..., z9 (at most 322)."""
    base = list(string.ascii_lowercase + string.ascii_uppercase + string.digits)
    more = [c + d for c in string.ascii_lowercase for d in string.digits]
    return (base + more)[:n]


_ORDER = {s: i for i, s in enumerate(symbol_names(10 ** 6))}

# ---- families ---------------------------------------------------------------------------------------------
class Family:
    """A task family: `make` draws (body words, training answer words); `solve` gives the answer a prompt's
    body determines (None where several are valid); `valid(prompt, answer)` checks any answer (texts). `cfg` is the
    world's `WorldConfig` (draftlab.toy.tasks, which imports the families: named here, not imported)."""
    name = ""

    def check(self, cfg: "WorldConfig", spec: FamilySpec) -> None:
        if spec.lengths[1] > cfg.alphabet:
            raise ConfigError(f"toy world: {spec.name}.lengths {spec.lengths} needs more than alphabet={cfg.alphabet} symbols")

    def min_answer(self, cfg: "WorldConfig", spec: FamilySpec) -> int:
        return spec.lengths[0]

    def scaled(self, spec: FamilySpec, f: float) -> FamilySpec:
        """The spec with its sizes scaled by f (rounded up, at least 1): a training curriculum's short lists."""
        def scale(r):
            return tuple(max(1, math.ceil(x * f)) for x in r)
        return replace(spec, lengths=scale(spec.lengths), extra=scale(spec.extra) if spec.extra[1] else spec.extra)

    def make(self, rng: random.Random, cfg: "WorldConfig", spec: FamilySpec) -> tuple[list[str], list[str]]:
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
