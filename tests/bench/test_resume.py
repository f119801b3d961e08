"""The benchmark's resumable record (draftlab.bench.resume): a group's runs read back equal to what was written
(tensors, records, extras), an interrupted run resumes at its first unfinished group without decoding the finished
ones again, and another key (settings, prompts) starts afresh."""
from __future__ import annotations

from dataclasses import fields

import pytest
import torch

from draftlab.bench.resume import RunStore, discard, tree_digest, _REC_TENSORS
from draftlab.bench.runner import BatchRun, PromptItem, run_benchmark
from draftlab.config import BenchmarkConfig
from draftlab.decoding import GenerationResult
from draftlab.decoding.common import RoundRecord


def _result(n: int, with_records: bool) -> GenerationResult:
    recs = [RoundRecord(stream=torch.tensor([0]), offset=torch.tensor([i]), accepted=torch.tensor([1]),
                        proposals=torch.tensor([[5, 6]]), topk_ids=torch.arange(4).view(1, 2, 2),
                        topk_logits=torch.randn(1, 2, 2), extras={"transition_scores": torch.randn(1, 1, 2, 2)})
            for i in range(2)] if with_records else []
    times = torch.rand(n, 2, dtype=torch.float64)
    return GenerationResult(tokens=[[1] * n], finish_reason=["length"], t_done=[0.5], prefill_s=0.1, wall_s=0.6,
                            phases=("draft", "verify"), round_times=times, round_streams=torch.ones(n),
                            accepted=[[1] * n] if with_records else [], records=recs, block_size=4 if with_records else 1,
                            round_wall=times.sum(1) if with_records else None)


def test_record_fields_cover_round_records():
    assert {f.name for f in fields(RoundRecord)} == {*_REC_TENSORS, "extras"}  # a new field needs bench/resume.py


def test_a_group_reads_back_equal(tmp_path):
    store = RunStore(tmp_path / "rec", {"k": 1})
    runs = [BatchRun("ar", "s", 0.0, 1, False, ["p"], [[1, 2]], _result(3, False)),
            BatchRun("dcoco", "s", 0.0, 1, False, ["p"], [[1, 2]], _result(2, True), extra=True)]
    store.put("g", runs)
    back = RunStore(tmp_path / "rec", {"k": 1}).get("g")
    for a, b in zip(runs, back):
        assert (a.arm, a.prompt_ids, a.prompts, a.extra) == (b.arm, b.prompt_ids, b.prompts, b.extra)
        ra, rb = a.result, b.result
        assert (ra.tokens, ra.accepted, ra.wall_s, ra.phases, ra.block_size) == (rb.tokens, rb.accepted, rb.wall_s,
                                                                                   rb.phases, rb.block_size)
        assert torch.equal(ra.round_times, rb.round_times) and (ra.round_wall is None) == (rb.round_wall is None)
        for x, y in zip(ra.records, rb.records):
            assert all((getattr(x, k) is None and getattr(y, k) is None) or torch.equal(getattr(x, k), getattr(y, k))
                       for k in _REC_TENSORS)
            assert torch.equal(x.extras["transition_scores"], y.extras["transition_scores"])
    assert RunStore(tmp_path / "rec", {"k": 2}).get("g") is None  # another key: a fresh record
    assert not (tmp_path / "rec" / "key.json").read_text().count('"k": 1')
    discard(tmp_path / "rec")
    assert not (tmp_path / "rec").exists()


class _Counting:
    """A stub arm that counts its calls and can fail on a given one (a killed run)."""

    greedy_only = False

    def __init__(self, fail_at: int | None = None):
        self.calls, self.fail_at = 0, fail_at

    def generate(self, prompts, max_new, sp, eos_ids, gen, record_topk=0):
        self.calls += 1
        if self.fail_at is not None and self.calls == self.fail_at:
            raise KeyboardInterrupt
        return _result(max_new, False)


def test_an_interrupted_run_resumes_at_its_first_unfinished_group(tmp_path):
    cfg = BenchmarkConfig(arms=["ar", "x"], prompts_per_suite=3, temperatures=[0.0], concurrency=[], warmup=False, pairs=[])
    suites = {"s": [PromptItem(f"p{i}", "s", [1, 2]) for i in range(3)]}
    key = {"cfg": "same"}
    arms = {"ar": _Counting(), "x": _Counting(fail_at=3)}  # x dies on the third prompt
    with pytest.raises(KeyboardInterrupt):
        run_benchmark(arms, suites, cfg, [0], torch.device("cpu"), store=RunStore(tmp_path, key))
    fresh = {"ar": _Counting(), "x": _Counting()}
    store = RunStore(tmp_path, key)
    out = run_benchmark(fresh, suites, cfg, [0], torch.device("cpu"), store=store)
    assert store.resumed == 2 and fresh["ar"].calls == fresh["x"].calls == 1  # only the third prompt decoded again
    assert [(r.arm, r.prompt_ids[0]) for r in out.runs] == [("ar", "p0"), ("x", "p0"), ("x", "p1"), ("ar", "p1"),
                                                            ("ar", "p2"), ("x", "p2")]  # the rotation kept
    again = {"ar": _Counting(), "x": _Counting()}
    run_benchmark(again, suites, cfg, [0], torch.device("cpu"), store=RunStore(tmp_path, {"cfg": "other"}))
    assert again["ar"].calls == 3  # another key measures everything


def test_tree_digest_reads_contents(tmp_path):
    (tmp_path / "m" / "sub").mkdir(parents=True)
    (tmp_path / "m" / "sub" / "w.bin").write_bytes(b"abc")
    d = tree_digest(tmp_path / "m")
    (tmp_path / "m" / "sub" / "w.bin").write_bytes(b"abd")
    assert tree_digest(tmp_path / "m") != d and tree_digest(tmp_path / "none") == tree_digest(tmp_path / "none")
