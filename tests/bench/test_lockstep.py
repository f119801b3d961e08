"""Arms decoded in lockstep (bench/lockstep.py, decoding/clock.py): rounds alternate, each arm's clock stops while
it waits, an error in one arm ends the run without a hang, and a benchmark run in lockstep decodes exactly the
tokens of the same run with the arms one after the other."""
from __future__ import annotations

import threading
import time

import pytest
import torch

from draftlab.bench import ArmContext, Checkpoints, PromptItem, build_arm, run_benchmark
from draftlab.bench.lockstep import Lockstep
from draftlab.config import BenchmarkConfig, PLDConfig
from draftlab.decoding import clock
from draftlab.errors import ConfigError
from draftlab.params import load_params


def _rounds(slot: int, n: int, log: list, pause: float = 0.0, fail_at: int = -1):
    def job():
        t0 = clock.now()
        for r in range(n):
            if r == fail_at:
                raise ValueError(f"slot {slot} failed at round {r}")
            log.append((slot, r))
            time.sleep(pause)
            clock.turn()
        return clock.now() - t0
    return job


def _within(seconds: float, fn):
    """Run fn in a thread; a hang fails the test instead of stalling the suite."""
    out: dict = {}
    th = threading.Thread(target=lambda: out.update(value=_catch(fn)), daemon=True)
    th.start()
    th.join(seconds)
    assert not th.is_alive(), "lockstep run hung"
    return out["value"]


def _catch(fn):
    try:
        return fn()
    except Exception as e:  # noqa: BLE001  inspected by the test
        return e


def test_rounds_alternate_and_finished_arms_drop_out():
    log: list = []
    res = _within(30, lambda: Lockstep().run([_rounds(0, 3, log), _rounds(1, 1, log), _rounds(2, 2, log)]))
    assert log == [(0, 0), (1, 0), (2, 0), (0, 1), (2, 1), (0, 2)]
    assert len(res) == 3 and not clock.in_lockstep()  # the caller's thread is not part of any run
    clock.turn()  # outside a run: nothing happens


def test_each_arm_clock_counts_only_its_own_rounds():
    log: list = []
    wall0 = time.perf_counter()
    own = _within(30, lambda: Lockstep().run([_rounds(i, 5, log, pause=0.02) for i in range(3)]))
    wall = time.perf_counter() - wall0
    # 15 rounds of 20 ms ran one at a time: each arm slept 5 x 20 ms of its own and waited for 10 rounds of others
    assert wall >= 15 * 0.02
    assert all(0.1 <= t < 0.1 + (wall - 0.3) / 2 + 0.05 for t in own), (own, wall)


def test_an_error_in_one_arm_stops_the_others_and_is_raised():
    log: list = []
    err = _within(30, lambda: Lockstep().run([_rounds(0, 50, log), _rounds(1, 50, log, fail_at=2), _rounds(2, 50, log)]))
    assert isinstance(err, ValueError) and "slot 1 failed at round 2" in str(err)
    assert max(r for _, r in log) <= 3  # the others stopped at their next turn, not after 50 rounds


def test_an_interrupt_stops_every_arm_at_its_next_round():
    """Ctrl-C reaches the main thread, which waits on the arms: once it has seen the interrupt, every arm stops at its
    next round boundary and has left its job when the interrupt leaves `run` (none is cut off inside a write; the
    stage then prints its one line). Counted from when the main thread ran its handler, not from when the signal was
    sent: on a loaded machine the main thread may wait several rounds for a core (CI saw 13), which `run` cannot help."""
    import signal

    log: list = []
    ended: list = []
    seen: list = []  # rounds logged when the main thread's handler ran
    main = threading.main_thread().ident

    def handler(signum, frame):
        seen.append(len(log))
        raise KeyboardInterrupt

    def arm(slot: int):
        def job():
            try:
                for r in range(200):
                    if slot == 1 and r == 3:
                        signal.pthread_kill(main, signal.SIGINT)
                    log.append((slot, r))
                    time.sleep(0.002)  # a round takes time, as a decoding round does
                    clock.turn()
            finally:
                time.sleep(0.05)  # an arm's last write, which the interrupt must not cut off
                ended.append(slot)
        return job

    assert threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGINT, handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            Lockstep().run([arm(0), arm(1), arm(2)])
    finally:
        signal.signal(signal.SIGINT, old)
    assert len(seen) == 1 and max(r for _, r in log) < 199, (seen, len(log))  # the run stopped, not ran to the end
    # after the handler: at most the round each arm had in progress, and one more for the arm whose turn came
    # before the main thread took the lock (3 arms)
    assert len(log) - seen[0] <= 4, (seen, len(log))
    assert sorted(ended) == [0, 1, 2]  # every arm had finished its job when the interrupt left run


def test_grad_mode_is_the_callers():
    seen: list = []

    def caller():
        with torch.no_grad():
            Lockstep().run([lambda: seen.append(torch.is_grad_enabled())] * 2)
        Lockstep().run([lambda: seen.append(torch.is_grad_enabled())])

    _within(30, caller)
    assert seen == [False, False, True]


def test_interleave_is_checked(root):
    with pytest.raises(ConfigError, match=r"benchmark.interleave='steps' is not one of arms, rounds") as e:
        load_params(root / "params.yaml", ["benchmark.interleave=steps"])
    assert "\n" not in str(e.value)


def test_benchmark_in_lockstep_decodes_the_same_tokens(llama_target):
    """ar, prompt lookup, a random DFlash drafter (T=0 and T=1: each arm keeps its own seeded generator) and
    Hugging Face generate (its steps reach the lockstep through a streamer): every token as in the plain run."""
    from test_bench import NO_CHECKPOINTS, _prompts, _real_drafter

    t = llama_target
    d = _real_drafter(t, S=4)
    runs = {}
    for mode in ("arms", "rounds"):
        cfg = BenchmarkConfig(suites=["mt-bench"], max_new_tokens=12, temperatures=[0.0, 1.0], concurrency=[], topk=0,
                              warmup=False, interleave=mode, arms=["ar", "dflash", "pld", "hf-generate"])
        ctx = ArmContext(t, cfg, NO_CHECKPOINTS, load_drafter=lambda path: d, pld=PLDConfig(num_tokens=3, min_match=1),
                         block_size=4)
        arms = {name: build_arm(name, ctx) for name in cfg.arms}
        suites = {"mt-bench": [PromptItem(f"p{i}", "mt-bench", p) for i, p in enumerate(_prompts(t, (5, 9), seed=7))]}
        runs[mode] = {(r.arm, r.temperature, tuple(r.prompt_ids)): r.result for r in run_benchmark(arms, suites, cfg, [], t.device).runs}
    assert runs["arms"].keys() == runs["rounds"].keys() and ("hf-generate", 0.0, ("p0",)) in runs["rounds"]
    for key, res in runs["arms"].items():
        assert runs["rounds"][key].tokens == res.tokens, key
        assert runs["rounds"][key].round_times.shape == res.round_times.shape, key
