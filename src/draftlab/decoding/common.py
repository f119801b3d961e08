"""Pieces shared by the AR and speculative engines: the result type, the per-round record, the phase
timer (`PhaseTimer`: perf_counter on CPU; CUDA events on a GPU, one synchronisation per round), and the
per-stream output bookkeeping (EOS and max-new-tokens stops, finishing times) done with one host transfer
per round.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import Tensor

from draftlab.decoding.clock import turn
from draftlab.decoding.clock import now as perf_counter  # this thread's own time (lockstep runs: decoding/clock.py)


@dataclass
class RoundRecord:
    """One speculative round of the active streams (CPU tensors; b = active streams this round)."""

    stream: Tensor  # [b] long: original stream index
    offset: Tensor  # [b] long: output index of slot 0 (slot j is output index offset + j)
    accepted: Tensor  # [b] long: accepted proposals (acc)
    proposals: Tensor  # [b, n] proposed target ids
    topk_ids: Tensor | None = None  # [b, n, K] drafter's top-K target ids at slots 1..n
    topk_logits: Tensor | None = None  # [b, n, K]
    target_tokens: Tensor | None = None  # [b, S] target argmax after each verified slot (column j is the
    # target's choice for slot j+1; T=0 only)
    extras: dict[str, Tensor] = field(default_factory=dict)  # the proposal step's own [b, ...] records
    # (DCOCO: transition_scores [b, n−1, K, K], path_<rule> [b, n]); a seeded drafter's rounds add the seed
    # marks (`seed_marks`: seed_ids [b, n], seed_kept [b, n])


def seed_topk(block_ids: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """The top-K record of a round without a draft pass (seeds-only, `decoding.width`): block_ids [b, S] ->
    ids [b, S, K] (column 0 = the block's ids, the rest -1: no other candidate) and logits [b, S, K] (0, then
    -inf)."""
    ids = torch.full((*block_ids.shape, k), -1, dtype=torch.long, device=block_ids.device)
    ids[..., 0] = block_ids
    logits = torch.full(ids.shape, float("-inf"), device=block_ids.device)
    logits[..., 0] = 0.0
    return ids, logits


def seed_marks(block_ids: Tensor, mask_token_id: int, top1: Tensor) -> dict[str, Tensor]:
    """Per slot of a seeded block: block_ids [b, S] (slot 0 = last committed token, then seeds / MASK), the
    drafter's top-1 target ids top1 [b, n] -> seed_ids [b, n] (the slot's seed, -1 = unseeded) and seed_kept
    [b, n] (1 = the drafter kept the seed as its top-1, 0 = it changed it, -1 = unseeded)."""
    seeds = block_ids[:, 1:]
    has = seeds != mask_token_id
    none = torch.full_like(seeds, -1)
    return {"seed_ids": torch.where(has, seeds, none), "seed_kept": torch.where(has, (top1 == seeds).long(), none)}


@dataclass
class GenerationResult:
    tokens: list[list[int]]  # generated ids per stream (EOS included when hit)
    finish_reason: list[str]  # "eos" | "length"
    t_done: list[float]  # seconds from the start (prefill included) to the stream's last token
    prefill_s: float
    wall_s: float
    phases: tuple[str, ...]  # names of round_times' columns
    round_times: Tensor  # [R, len(phases)] seconds per round (AR: one round = one step); on CUDA the
    # GPU time between the phase marks (CUDA events), on CPU perf_counter differences (`PhaseTimer`)
    round_streams: Tensor  # [R] active streams per round
    accepted: list[list[int]] = field(default_factory=list)  # per stream, acc per round (speculative)
    records: list[RoundRecord] = field(default_factory=list)
    block_size: int = 1  # S of the speculative engine (1 = AR)
    round_wall: Tensor | None = None  # [R] wall seconds per round (end to end, read at the round's one
    # synchronisation); None for a run without rounds of its own (a peer's opaque loop)

    @property
    def num_tokens(self) -> int:
        return sum(len(t) for t in self.tokens)


def cuda_events(device: torch.device):
    """The event backend of `PhaseTimer` on `device`: `torch.cuda` (Event, synchronize) on a CUDA device,
    None elsewhere (perf_counter). Looked up on every timer built, so a test can swap in a fake."""
    return torch.cuda if device.type == "cuda" else None


class PhaseTimer:
    """Times the phases of the engines' rounds (the one timer every engine uses).

    A round is `start_round()`, one `mark()` per phase boundary, `end_round()` -> (seconds per phase, the
    round's wall seconds). On CPU every mark is a `perf_counter` read, as the engines always did: phase =
    the difference of consecutive marks. On CUDA a mark records an event on the current stream and never
    waits; `end_round()` records the last event, synchronises once (the round's wall time is read then)
    and resolves the events' elapsed times — the GPU time between the points where the stream reached
    consecutive marks. So a round synchronises exactly once, and only for its wall time; the host
    transfers the round needs anyway (accepted lengths, emitted tokens) still wait for their data.
    `now()` is a synchronised clock for the marks outside rounds (start, after prefill, end);
    `host_time()` reads perf_counter without waiting (a stream's finishing time, read after the round's
    host transfer of its tokens, needs no synchronisation of its own). The round's wall time runs from
    the previous round's end (or the last `now()`) to this round's end.
    """

    # With `annotate` on (the accelerator check's profiled decode, `draftlab.checks.timing.gpu_busy`), phase i of
    # every round runs inside a profiler range named ANNOTATION + str(i), so the profiler can sum the device time
    # of the kernels each phase launched. Off (always, in decoding) it costs nothing.
    ANNOTATION = "draftlab.phase."
    annotate = False

    def __init__(self, device: torch.device):
        self.events = cuda_events(device)
        self._marks: list = []
        self._last = perf_counter()
        self._range = None

    @property
    def method(self) -> str:
        """How the phases are timed: `cuda-events` or `perf_counter`."""
        return "perf_counter" if self.events is None else "cuda-events"

    def now(self) -> float:
        if self.events is not None:
            self.events.synchronize()
        self._last = perf_counter()
        return self._last

    @staticmethod
    def host_time() -> float:
        return perf_counter()

    def _mark(self):
        if self.events is None:
            return perf_counter()
        e = self.events.Event(enable_timing=True)
        e.record()
        return e

    def _annotate(self, opening: bool) -> None:
        if self._range is not None:
            self._range.__exit__(None, None, None)
            self._range = None
        if opening:
            self._range = torch.profiler.record_function(f"{self.ANNOTATION}{len(self._marks) - 1}")
            self._range.__enter__()

    def start_round(self) -> None:
        self._marks = [self._mark()]
        if self.annotate:
            self._annotate(True)

    def mark(self) -> None:
        self._marks.append(self._mark())
        if self.annotate:
            self._annotate(True)

    def end_round(self) -> tuple[list[float], float]:
        """-> (seconds of each phase, one per mark after the start, the round's wall seconds)."""
        self._marks.append(self._mark())
        if self._range is not None:
            self._annotate(False)
        m, self._marks = self._marks, []
        if self.events is None:
            phases, end = [b - a for a, b in zip(m, m[1:])], m[-1]
        else:
            self.events.synchronize()  # the round's one synchronisation
            end = perf_counter()
            phases = [a.elapsed_time(b) / 1e3 for a, b in zip(m, m[1:])]  # elapsed_time is in ms
        wall, self._last = end - self._last, end
        return phases, wall


class RoundLog:
    """The per-round record both engines keep: each round's phase and wall seconds (`PhaseTimer.end_round`) and the
    streams active in it. `close` ends a round at the lockstep's boundary; `result` assembles the GenerationResult."""

    def __init__(self, timer: PhaseTimer, phases: tuple[str, ...]):
        self.timer, self.phases = timer, phases
        self.times: list = []
        self.walls: list[float] = []
        self.active: list[int] = []

    def close(self, active: int) -> None:
        phases, wall = self.timer.end_round()
        self.times.append(phases)
        self.walls.append(wall)
        self.active.append(active)
        turn()  # a lockstep run's round boundary (decoding/clock.py); nothing otherwise

    def result(self, outputs: "Outputs", t_start: float, t_prefill: float, **extra) -> GenerationResult:
        t_end = self.timer.now()
        return GenerationResult(
            tokens=outputs.tokens, finish_reason=outputs.finish, t_done=outputs.t_done,
            prefill_s=t_prefill - t_start, wall_s=t_end - t_start, phases=self.phases,
            round_times=torch.tensor(self.times, dtype=torch.float64).reshape(-1, len(self.phases)),
            round_streams=torch.tensor(self.active, dtype=torch.long),
            round_wall=torch.tensor(self.walls, dtype=torch.float64), **extra)


def to_host(t: Tensor) -> Tensor:
    """The engines' one device-to-host copy per round (AR: the new tokens; speculative: the accepted counts and the
    committed tokens, packed): everything a round needs on the host (emitting, the stop rules, the lookup index and
    a seeded drafter's text) is read from it. tests/decoding/test_engine.py counts its calls per round."""
    return t.to("cpu", copy=True)


class Outputs:
    """Generated tokens per stream and the stop rules (EOS, max_new_tokens)."""

    def __init__(self, batch: int, max_new_tokens: int, eos_ids, start: float):
        self.tokens: list[list[int]] = [[] for _ in range(batch)]
        self.finish: list[str] = ["length"] * batch
        self.t_done: list[float] = [0.0] * batch
        self.max_new = max_new_tokens
        self.eos = frozenset(int(e) for e in (eos_ids or ()))
        self.start = start

    def emit(self, rows: list[int], new: Tensor, n_new: Tensor, clock: Callable[[], float]) -> Tensor:
        """Append the first n_new[i] tokens of new[i] (new [b, T], n_new [b], both on the host: `to_host`) to stream
        rows[i], cut at the first EOS and at max_new_tokens; a stream that stops gets `clock()` (e.g.
        `PhaseTimer.host_time`) as its finishing time. Returns done [b] bool (CPU). Plain Python over the host copy:
        a few small lists, no tensor ops (the round's host work is counted, tests/decoding/test_compiled.py)."""
        now = clock()
        done = []
        for r, row, n in zip(rows, new.tolist(), n_new.tolist()):
            if r < 0:  # a retired row, kept only for the batch's shape (`retire`): emits nothing
                done.append(False)
                continue
            take = row[:min(n, self.max_new - len(self.tokens[r]))]  # at most max_new_tokens in all
            cut = next((j + 1 for j, x in enumerate(take) if x in self.eos), 0)  # up to and incl. the first EOS
            self.tokens[r].extend(take[:cut] if cut else take)
            stop = bool(cut) or len(self.tokens[r]) >= self.max_new
            if stop:
                self.finish[r] = "eos" if cut else "length"
                self.t_done[r] = now - self.start
            done.append(stop)
        return torch.tensor(done, dtype=torch.bool)


@contextmanager
def partial_on_interrupt(outputs: Outputs):
    """Ctrl-C / SIGTERM (a KeyboardInterrupt) inside a generation loop leaves with the tokens emitted so far:
    the exception carries them as `partial` (one list per stream), which `draftlab decode` prints."""
    try:
        yield
    except KeyboardInterrupt as e:
        e.partial = [list(t) for t in outputs.tokens]
        raise


def retire(done: Tensor, rows: list[int], tensors: tuple, *caches, shapes=None) -> tuple[list[int], tuple]:
    """After a round: finished rows (done [b] bool, CPU) leave the batch. Eager (`shapes` None), at once
    (`drop_finished`). With compiled steps (`shapes`: the run's `decoding.shapes.Shapes`; every batch size is a graph),
    a finished row stays as a retired row (its stream id becomes -1: no tokens emitted, its fill frozen by the
    caller's `live` mask) until a smaller declared batch size holds the live rows; then the batch shrinks to the
    smallest such size, keeping every live row and the first retired ones."""
    if shapes is None:
        return drop_finished(done, rows, tensors, *caches)
    rows = [-1 if d else r for r, d in zip(rows, done.tolist())]
    alive = sum(r >= 0 for r in rows)
    size = shapes.shrink(alive, len(rows))
    if alive == 0 or size == len(rows):
        return rows, tensors
    keep = [r >= 0 for r in rows]
    spare = size - alive
    for i, r in enumerate(rows):
        if spare and r < 0:
            keep[i], spare = True, spare - 1
    keep_t = torch.tensor(keep)
    for c in caches:
        c.drop_streams(keep_t)
    idx = keep_t.nonzero().squeeze(-1)
    return [r for r, k in zip(rows, keep) if k], tuple(None if t is None else t.index_select(0, idx.to(t.device))
                                                       for t in tensors)


def live_rows(rows: list[int], device) -> Tensor:
    """[b] long on `device`: 1 for a live row, 0 for a retired one (its commits keep nothing)."""
    return torch.tensor([int(r >= 0) for r in rows], dtype=torch.long, device=device)


def drop_finished(done: Tensor, rows: list[int], tensors: tuple, *caches) -> tuple[list[int], tuple]:
    """Remove finished rows (done [b] bool, CPU) from the row list, from per-row tensors [b, ...] (None
    passes through) and from every cache-like object with `drop_streams(keep)`."""
    if not bool(done.any()):
        return rows, tensors
    keep = ~done  # CPU: every cache selects its rows with an index made here (no device read)
    rows = [r for r, k in zip(rows, keep.tolist()) if k]
    if not rows:
        return rows, tensors
    for c in caches:
        c.drop_streams(keep)
    idx = keep.nonzero().squeeze(-1)
    return rows, tuple(None if t is None else t.index_select(0, idx.to(t.device)) for t in tensors)
