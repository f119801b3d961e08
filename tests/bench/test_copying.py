"""Issue 23's readings on hand-made answers: copy / repeat shares and the loop rule (draftlab.bench.copying),
τ and tokens/s by position in the answer (draftlab.bench.positions), and which arms decode which batch
(headline, ablation, T>0 subsets: draftlab.bench.runner.batch_arms)."""
from __future__ import annotations

import pytest
import torch

from draftlab.bench.copying import batch_reading, copy_share, looped, reading, repeat_share
from draftlab.bench.positions import bins, reading as position_reading, round_spans, segments
from draftlab.bench.runner import BatchRun, batch_arms
from draftlab.config import BenchmarkConfig
from draftlab.decoding import GenerationResult


def test_copy_repeat_and_loop_rules():
    prompt = [5, 6, 7, 8, 9]
    out = [1, 5, 6, 7, 8, 2, 3]  # tokens 1..4 copy the prompt's 4-gram 5 6 7 8
    assert copy_share(prompt, out) == pytest.approx(4 / 7)
    assert repeat_share(out) == 0.0 and not looped(out)
    rep = [1, 2, 3, 4, 9, 1, 2, 3, 4]  # the 4-gram 1 2 3 4 again: its second copy repeats earlier output
    assert repeat_share(rep) == pytest.approx(4 / 9) and not looped(rep)  # 4 < LOOP_SPAN
    loop = list(range(20, 30)) + list(range(20, 28))  # an 8-token span repeated later
    assert looped(loop) and not looped(list(range(10)) + list(range(7)))  # 7 repeated tokens: not a loop
    assert looped([4] * 9) and not looped([4] * 8)  # a run of 9 equal tokens: the span at 0 recurs at 1
    assert copy_share(prompt, []) is None and reading(prompt, [])["loop"] is False
    b = batch_reading([prompt, prompt], [out, loop])  # weighted by length; loop if any answer looped
    assert b["loop"] is True and b["copy_share"] == pytest.approx(4 / (7 + 18))


def _spec_run(accepted: list[int], secs: list[float], length: int) -> BatchRun:
    res = GenerationResult(tokens=[list(range(length))], finish_reason=["length"], t_done=[sum(secs)], prefill_s=0.5,
                           wall_s=0.5 + sum(secs), phases=("a", "b"),
                           round_times=torch.tensor([[s / 2, s / 2] for s in secs], dtype=torch.float64),
                           round_streams=torch.ones(len(secs)), accepted=[accepted], block_size=8)
    return BatchRun("x", "s", 0.0, 1, False, ["p"], [[1]], res)


def _ar_run(length: int, sec: float) -> BatchRun:
    R = length - 1
    res = GenerationResult(tokens=[list(range(length))], finish_reason=["length"], t_done=[R * sec], prefill_s=0.5,
                           wall_s=0.5 + R * sec, phases=("v", "b"), round_times=torch.full((R, 2), sec / 2,
                                                                                        dtype=torch.float64),
                           round_streams=torch.ones(R))
    return BatchRun("ar", "s", 0.0, 1, False, ["p"], [[1]], res)


def test_positions_bin_rounds_by_where_they_start():
    # rounds commit acc + 1 tokens from index 1 on: starts 1, 8, 16, 32, 40; the last is cut at the answer's end
    run = _spec_run([6, 7, 15, 7, 7], [1.0, 1.0, 2.0, 1.0, 1.0], length=45)
    assert round_spans(run) == [(1, 7, 1.0), (8, 8, 1.0), (16, 16, 2.0), (32, 8, 1.0), (40, 5, 1.0)]
    b = bins([run], width=32)
    assert list(b) == [0, 32] and b[0].tokens == 31 and b[32].tokens == 13 and b[0].rounds == 3
    seg = segments([run], first=32)
    assert seg["first"]["tau"] == pytest.approx(31 / 3) and seg["later"]["tokens_per_s"] == pytest.approx(13 / 2)
    ar = _ar_run(45, 0.25)  # AR: one token per step at 4 tokens/s
    assert segments([ar])["first"]["tau"] == 1.0 and segments([ar])["later"]["tokens_per_s"] == pytest.approx(4.0)
    r = position_reading([run], [ar], width=32, first=32)
    assert r["segments"]["later"]["speedup"] == pytest.approx((13 / 2) / 4.0)
    assert [x["start"] for x in r["bins"]] == [0, 32]
    multi = _spec_run([1], [1.0], 3)
    multi.result.tokens.append([1, 2])  # two streams in one batch: rounds have no per-stream time
    assert round_spans(multi) is None and position_reading([multi]) is None


class _Arm:
    def __init__(self, greedy_only=False):
        self.greedy_only = greedy_only


def test_batch_arms_headline_ablation_and_sampled_subsets():
    arms = {"ar": _Arm(), "dflash": _Arm(), "hf": _Arm(greedy_only=True), "abl": _Arm()}
    cfg = BenchmarkConfig(arms=["ar", "dflash", "hf"], ablation_arms=["abl"], ablation_prompts_per_suite=2,
                          sampled_arms=["ar", "dflash", "abl"], sampled_prompts_per_suite=3, pairs=[])
    assert batch_arms(cfg, arms, 0, 0.0) == ["ar", "dflash", "hf", "abl"]
    assert batch_arms(cfg, arms, 2, 0.0) == ["ar", "dflash", "hf"]  # past the ablation sample
    assert batch_arms(cfg, arms, 1, 1.0) == ["ar", "dflash", "abl"]  # T>0: sampled arms, no greedy-only row
    assert batch_arms(cfg, arms, 2, 1.0) == ["ar", "dflash"] and batch_arms(cfg, arms, 3, 1.0) == []
    cfg.batch_size = 2  # batch 1 holds prompts 2-3: past the ablation sample of 2
    assert batch_arms(cfg, arms, 1, 0.0) == ["ar", "dflash", "hf"]


def test_batch_arms_past_the_headline_sample_only_the_larger_pairs_arms_at_t0():
    arms = {"ar": _Arm(), "a": _Arm(), "b": _Arm(), "c": _Arm(), "abl": _Arm()}
    cfg = BenchmarkConfig(arms=["ar", "a", "b", "c"], ablation_arms=["abl"], prompts_per_suite=3,
                          pairs=[["a", "b"], ["b", "c"], ["a", "ar"]], pair_prompts_per_suite={"a vs b": 6, "b vs c": 4})
    cfg.check("benchmark")
    assert cfg.prompts_selected() == 6 and [cfg.t0_prompts(x) for x in ("ar", "a", "b", "c", "abl")] == [3, 6, 6, 4, 3]
    assert batch_arms(cfg, arms, 2, 0.0) == ["ar", "a", "b", "c", "abl"]  # the headline sample: every arm
    assert batch_arms(cfg, arms, 3, 0.0) == ["a", "b", "c"] and batch_arms(cfg, arms, 4, 0.0) == ["a", "b"]
    assert batch_arms(cfg, arms, 6, 0.0) == [] and batch_arms(cfg, arms, 3, 1.0) == []  # extras: T=0 only


class _Gen(_Arm):
    """A stub arm: one token per prompt, instantly."""

    def generate(self, prompts, max_new, sp, eos_ids, gen, record_topk=0):
        return GenerationResult(tokens=[[1] for _ in prompts], finish_reason=["length"] * len(prompts),
                                t_done=[0.0] * len(prompts), prefill_s=0.0, wall_s=1e-3, phases=("v",),
                                round_times=torch.zeros(1, 1), round_streams=torch.ones(1))


def test_runner_puts_a_pairs_extra_prompts_apart():
    from draftlab.bench.runner import PromptItem, plan_size, run_benchmark

    arms = {n: _Gen() for n in ("ar", "a", "b")}
    cfg = BenchmarkConfig(arms=list(arms), prompts_per_suite=2, pairs=[["a", "b"]], pair_prompts_per_suite={"a vs b": 4},
                          temperatures=[0.0, 1.0], concurrency=[], warmup=False)
    cfg.check("benchmark")
    suites = {"s": [PromptItem(f"p{i}", "s", [1, 2]) for i in range(4)]}
    out = run_benchmark(arms, suites, cfg, [0], torch.device("cpu"))
    assert plan_size(cfg, suites, arms) == len(out.runs) + len(out.extra) == 2 * 3 * 2 + 2 * 2
    assert {(r.arm, r.prompt_ids[0]) for r in out.extra} == {(x, p) for x in "ab" for p in ("p2", "p3")}
    assert all(r.extra and r.temperature == 0 for r in out.extra) and not any(r.extra for r in out.runs)
