"""Decoding several arms in lockstep: one round of each arm in turn, so that they share the machine's slow spells.

`benchmark.interleave: rounds` (the `cpu` profile). Each arm decodes in its own thread; exactly one runs at a
time. An engine calls `draftlab.decoding.clock.turn()` after each round: the machine passes to the next arm
still decoding (cyclically), and the arm's clock (`clock.now()`) stops while it waits, so every time it
reports (phases, round walls, finishing times, tokens/s) is its own. The tokens are those of the arms run one
after the other: each arm keeps its own caches and random generator, and nothing else runs meanwhile.

Why: on a shared 2-core machine the same decode varies by ~10% from run to run, in spells of seconds; two arms
timed one after the other each take their own spells, two arms in lockstep take the same ones, and the paired
tokens/s ratio the benchmark reports keeps only what differs between them (docs/decisions.md
"Arms decoded in lockstep").
"""
from __future__ import annotations

import threading
from time import perf_counter
from typing import Callable, TypeVar

import torch

from draftlab.decoding import clock

T = TypeVar("T")


class _Stopped(BaseException):
    """Raised in an arm's thread at its next turn once another arm failed: the run ends with that error."""


class Lockstep:
    """Run `jobs` (each decodes one arm) in lockstep, round by round; `run` returns their results in order."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._current = 0
        self._alive: list[bool] = []
        self._failed = False

    def _next(self, me: int) -> int:
        n = len(self._alive)
        for k in range(1, n + 1):
            if self._alive[(me + k) % n]:
                return (me + k) % n
        return me

    def pass_turn(self, me: int) -> float:
        """Slot `me` ends a round: the next live slot runs; returns the seconds until `me` runs again."""
        t0 = perf_counter()
        with self._cv:
            self._current = self._next(me)
            self._cv.notify_all()
            self._cv.wait_for(lambda: self._current == me or self._failed)
            if self._failed:
                raise _Stopped
        return perf_counter() - t0

    def run(self, jobs: list[Callable[[], T]]) -> list[T]:
        n = len(jobs)
        self._alive, self._current, self._failed = [True] * n, 0, False
        results: list = [None] * n
        errors: list[BaseException | None] = [None] * n
        grad = torch.is_grad_enabled()  # grad mode is per thread: the arms run as the caller does

        def worker(i: int) -> None:
            clock.bind(self, i)
            try:
                with self._cv:
                    self._cv.wait_for(lambda: self._current == i or self._failed)
                if not self._failed:
                    with torch.set_grad_enabled(grad):
                        results[i] = jobs[i]()
            except _Stopped:
                pass
            except BaseException as e:  # noqa: BLE001  re-raised in the caller's thread below
                errors[i] = e
                self._failed = True
            finally:
                clock.bind(None)
                with self._cv:
                    self._alive[i] = False
                    if any(self._alive):
                        self._current = self._next(i)
                    self._cv.notify_all()

        threads = [threading.Thread(target=worker, args=(i,), name=f"lockstep-{i}", daemon=True) for i in range(n)]
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        except KeyboardInterrupt:  # Ctrl-C / SIGTERM reach the main thread: every arm stops at its next round boundary
            started = [t.ident is not None for t in threads]
            with self._cv:  # wait until each started arm has left its job, so none is cut off inside a write
                self._failed = True
                self._cv.notify_all()
                # (not Thread.join: a join the interrupt cut short can mark a running thread stopped, bpo-45274)
                self._cv.wait_for(lambda: not any(a and s for a, s in zip(self._alive, started)))
            raise
        for e in errors:
            if e is not None:
                raise e
        return results
