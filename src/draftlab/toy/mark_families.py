"""The toy world's task families whose answers carry marks, blanks or a case — the worlds built for sampled decoding
and for the correctors (`draftlab.toy.task_families`: the base class and the other families; the registry
`FAMILIES`: `draftlab.toy.tasks`):

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
"""
from __future__ import annotations

import string

from draftlab.errors import ConfigError
from draftlab.toy.task_families import ENTRY_END, LIST_SEP, MARK_NATS, MARK_P, MARKS, Family, Swap


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
