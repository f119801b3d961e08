"""The engines' phase timer (`draftlab.decoding.common.PhaseTimer`): on CPU the perf_counter marks the engines
always took (same phase keys, phase = difference of consecutive marks); on CUDA events with exactly one
synchronisation per round (a fake event backend stands in for torch.cuda), the same greedy output either way;
the benchmark report labels its tokens/s as in-engine."""
from __future__ import annotations

import pytest
import torch

from draftlab.bench.report import ENGINE, ENGINE_TABLES, engine_label, plot_frames
from draftlab.decoding import SpeculativeEngine, generate_ar
from draftlab.decoding import common
from draftlab.decoding.ar import AR_PHASES
from draftlab.decoding.common import PhaseTimer
from draftlab.decoding.round import PHASES
from stubs import OracleDrafter


class StepClock:
    """A perf_counter that advances by `step` seconds per read."""

    def __init__(self, step: float = 0.5):
        self.t, self.step = 0.0, step

    def __call__(self) -> float:
        self.t += self.step
        return self.t


class FakeCuda:
    """torch.cuda's timing surface (Event(enable_timing=True).record / elapsed_time, synchronize), logging every
    event recorded and every synchronisation. An event's time is a counter advanced by 3 ms per record."""

    def __init__(self):
        self.log: list[str] = []
        self.clock = 0.0

    def synchronize(self) -> None:
        self.log.append("sync")

    def Event(self, enable_timing: bool = False):  # noqa: N802 (torch.cuda's name)
        assert enable_timing, "phase events must be created with enable_timing=True"
        fake = self

        class _Event:
            def record(self):
                fake.clock += 3.0
                self.ms = fake.clock
                fake.log.append("event")

            def elapsed_time(self, other) -> float:
                return other.ms - self.ms

        return _Event()


def _prompts(target, lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, target.vocab_size, (n,), generator=g).tolist() for n in lengths]


def _spec(target, prompts, max_new=10):
    drafter = OracleDrafter(target, block_size=4, mode="mixed", p_right=0.6, seed=1)
    drafter.prompts = prompts
    return SpeculativeEngine(target, drafter).generate(prompts, max_new, eos_ids=[])


def test_cpu_timer_is_perf_counter_differences(monkeypatch):
    reads = iter([1.0, 2.0, 4.0, 7.0, 11.0, 20.0, 21.0])
    monkeypatch.setattr(common, "perf_counter", lambda: next(reads))
    timer = PhaseTimer(torch.device("cpu"))  # reads 1.0
    assert timer.method == "perf_counter" and timer.now() == 2.0
    timer.start_round()  # 4
    timer.mark()  # 7
    phases, wall = timer.end_round()  # 11
    assert phases == [3.0, 4.0] and wall == 9.0  # wall: from the last now() to the round's end
    timer.start_round()  # 20
    phases, wall = timer.end_round()  # 21
    assert phases == [1.0] and wall == 10.0  # from the previous round's end


def test_cpu_engines_keep_their_phase_marks(llama_target, monkeypatch):
    """With a clock that advances one step per read, each phase spans the reads the engines always took:
    speculative draft / propose / verify one step each, commit two (the finishing time read by `emit`, then
    the round's end); AR verify one, commit two. A round's phases sum to its marks' span, its wall time
    also covers the read that closed the previous round (or prefill)."""
    t = llama_target
    prompts = _prompts(t, (6, 9))
    monkeypatch.setattr(common, "perf_counter", StepClock(0.5))
    res = _spec(t, prompts)
    R = res.round_times.shape[0]
    assert res.phases == PHASES == ("draft", "propose", "verify", "commit") and R > 0
    assert torch.equal(res.round_times, torch.tensor([[0.5, 0.5, 0.5, 1.0]] * R, dtype=torch.float64))
    assert torch.equal(res.round_wall, torch.full((R,), 3.0, dtype=torch.float64))
    ar = generate_ar(t, prompts, 10, eos_ids=[])
    A = ar.round_times.shape[0]
    assert ar.phases == AR_PHASES == ("verify", "commit") and A == 9  # the first token comes from prefill
    assert torch.equal(ar.round_times, torch.tensor([[0.5, 1.0]] * A, dtype=torch.float64))
    assert torch.equal(ar.round_wall, torch.full((A,), 2.0, dtype=torch.float64))
    assert ar.wall_s > ar.prefill_s + float(ar.round_wall.sum()) - 1e-9


def test_cuda_path_synchronises_once_per_round(llama_target, monkeypatch):
    t = llama_target
    prompts = _prompts(t, (5, 11, 8), seed=2)
    cpu_spec, cpu_ar = _spec(t, prompts), generate_ar(t, prompts, 10, eos_ids=[])
    fake = FakeCuda()
    monkeypatch.setattr(common, "cuda_events", lambda device: fake)
    assert PhaseTimer(torch.device("cpu")).method == "cuda-events"
    spec = _spec(t, prompts)
    R = spec.round_times.shape[0]
    # start, after prefill: one sync each; then per round 5 events (start, draft, propose, verify, end) and
    # exactly one sync; one at the end
    assert fake.log == ["sync", "sync"] + (["event"] * 5 + ["sync"]) * R + ["sync"]
    assert torch.equal(spec.round_times, torch.full((R, 4), 3e-3, dtype=torch.float64))  # the events' ms / 1e3
    assert spec.tokens == cpu_spec.tokens and spec.accepted == cpu_spec.accepted  # greedy output unchanged
    fake.log.clear()
    ar = generate_ar(t, prompts, 10, eos_ids=[])
    A = ar.round_times.shape[0]
    assert fake.log == ["sync", "sync"] + (["event"] * 3 + ["sync"]) * A + ["sync"]
    assert ar.tokens == cpu_ar.tokens == spec.tokens
    assert bool((ar.round_wall >= 0).all()) and ar.round_wall.shape == (A,)


def test_report_labels_tokens_per_s_in_engine():
    label = engine_label("cpu")
    assert label["name"] == ENGINE == "draftlab" and label["tokens_per_s"] == "in-engine"
    assert label["phase_timing"] == "perf_counter" and engine_label("cuda")["phase_timing"] == "cuda-events"
    m = {"tau": 1.5, "tokens_per_s": 10.0, "speedup": 1.2}
    detail = {"suites": {"s": {"t0": {"dflash": m}}}, "concurrency": {"t0": {"dflash": {"1": m}}},
              "summary": {"dflash": {"tau_t0": 1.5, "tokens_per_s_t0": 10.0}}, "setup": {"engine": label}}
    frames = plot_frames(detail)
    for name in ENGINE_TABLES:
        assert "tokens_per_s" in frames[name].columns and "engine" in frames[name].columns, name
    for name in ("speedup", "concurrency", "peers"):
        assert frames[name]["engine"].tolist() == ["draftlab"], name


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (the real event path)")
def test_real_cuda_events_time_the_phases():
    timer = PhaseTimer(torch.device("cuda"))
    x = torch.randn(2048, 2048, device="cuda")
    timer.now()
    timer.start_round()
    for _ in range(4):
        x = x @ x / 2048
    timer.mark()
    phases, wall = timer.end_round()
    assert len(phases) == 2 and phases[0] > 0 and wall >= phases[0] + phases[1] - 1e-3
