"""The engines' clock, and the round boundary where arms decoded in lockstep hand the machine on.

Timing two arms one after the other on a shared machine puts every slow spell (another tenant, the memory bus)
into one arm's time and not the other's: on the project's 2-core machines the same greedy decode of the same
prompt varies by ~10% (coefficient of variation) from one run to the next, in bursts lasting seconds. Decoded
in lockstep (`draftlab.bench.lockstep`: one round of each arm in turn, each in its own thread, one running at
a time), the arms share those spells and their paired tokens/s ratio keeps little of it.

- `now()`: `perf_counter()` minus the time this thread spent waiting for its turn, so an arm's phases, round
  walls, finishing times and total are its own time. Outside a lockstep run it is `perf_counter()`.
- `turn()`: called by an engine after each round's timing is read (and by a peer's loop after each step it
  can see); under a lockstep run it passes the machine to the next arm and returns at this arm's next turn;
  elsewhere it does nothing.
"""
from __future__ import annotations

import threading
from time import perf_counter
from typing import Protocol

_local = threading.local()


class TurnTaker(Protocol):
    def pass_turn(self, me: int) -> float: ...  # -> seconds spent waiting for the next turn


def now() -> float:
    """This thread's clock: perf_counter() less the seconds it waited for its turn in a lockstep run."""
    return perf_counter() - getattr(_local, "paused", 0.0)


def turn() -> None:
    """A round boundary: in a lockstep run, let the next arm run a round; otherwise nothing."""
    sched = getattr(_local, "sched", None)
    if sched is not None:
        _local.paused = getattr(_local, "paused", 0.0) + sched.pass_turn(_local.slot)


def in_lockstep() -> bool:
    """Whether this thread decodes in a lockstep run (a peer's loop then reports its steps through `turn`)."""
    return getattr(_local, "sched", None) is not None


def bind(sched: TurnTaker | None, slot: int = 0) -> None:
    """Make this thread slot `slot` of `sched` (None: leave any lockstep run), with a fresh clock."""
    _local.sched, _local.slot, _local.paused = sched, slot, 0.0
