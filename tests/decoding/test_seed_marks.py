"""Seed marks (issue 20 item 6): a seeded drafter's rounds record per slot the seed (the block's input) and
whether the drafter's top-1 kept or changed it, in the engine's round records and in the per-round frame the
explorer reads (data/benchmark_rounds.parquet), also for the cut arm whose blocks are verified shorter; a
plain drafter records none."""
from __future__ import annotations

import pytest
import torch

from draftlab.bench.metrics import coverage_metrics
from draftlab.bench.report import round_frame
from draftlab.bench.runner import BatchRun
from draftlab.decoding import SpeculativeEngine, generate_ar
from draftlab.decoding.common import seed_marks
from draftlab.decoding.width import SpanProposal
from test_seeded import _loop_prompts, make_seeded
from test_width import Recording

pytestmark = pytest.mark.usefixtures("one_thread")


def test_seed_marks_definition():
    block = torch.tensor([[9, 4, 5, 0, 0], [9, 0, 0, 0, 0]])  # MASK = 0
    top1 = torch.tensor([[4, 6, 7, 8], [1, 2, 3, 4]])
    m = seed_marks(block, 0, top1)
    assert m["seed_ids"].tolist() == [[4, 5, -1, -1], [-1, -1, -1, -1]]
    assert m["seed_kept"].tolist() == [[1, 0, -1, -1], [-1, -1, -1, -1]]


@pytest.mark.parametrize("cut,bias,mark", [(False, 6.0, 1), (True, -20.0, 0)])
def test_engine_records_seeds_and_the_frame_carries_them(llama_target, cut, bias, mark):
    """bias: the seed bias (a logit offset on each slot's seed): toward the seed the drafter keeps it (mark 1),
    away from it it changes it (mark 0)."""
    t = llama_target
    d = make_seeded(t, 5, mask=t.vocab_size - 1, seed_bias=6.0)
    with torch.no_grad():
        d.seed_bias.fill_(bias)
    prompts = _loop_prompts()
    inner = SpanProposal(d.mask_token_id, "span", 1, 0.5) if cut else None
    step = Recording(inner or SpanProposal(d.mask_token_id, "full", 0, 0.0))
    res = SpeculativeEngine(t, d, step, record_topk=2).generate(prompts, 12, eos_ids=[])
    assert res.tokens == generate_ar(t, prompts, 12, eos_ids=[]).tokens
    kept_all = []
    for (blocks, _), rec in zip(step.rounds, res.records):
        seeds, kept = rec.extras["seed_ids"], rec.extras["seed_kept"]
        has = blocks[:, 1:] != d.mask_token_id
        assert torch.equal(seeds, torch.where(has, blocks[:, 1:], torch.full_like(seeds, -1)))
        top1 = rec.topk_ids[:, :, 0]  # [b, n]: the full block's slots, even when fewer were proposed
        assert torch.equal(kept, torch.where(has, (top1 == seeds).long(), torch.full_like(kept, -1)))
        kept_all += kept[has].tolist()
    assert kept_all and set(kept_all) == {mark}
    if cut:
        assert any(rec.proposals.shape[1] < 4 for rec in res.records)
    run = BatchRun("dflash-seeded-cut" if cut else "dflash-seeded", "s", 0.0, len(prompts), False,
                   [f"p{i}" for i in range(len(prompts))], prompts, res)
    frame = round_frame([run])
    assert {"seed_ids", "seed_kept", "verify_len", "committed"} <= set(frame.columns)
    assert all(len(r.seed_ids) == 4 and len(r.committed) == 4 for r in frame.itertuples())
    assert len(coverage_metrics([run])["coverage"]) == 4  # top-K coverage over the drafter's 4 slots


def test_plain_drafter_records_no_seeds(llama_target):
    t = llama_target
    d = make_seeded(t, 5, seed_mode="none", mask=t.vocab_size - 1)
    res = SpeculativeEngine(t, d, record_topk=1).generate(_loop_prompts()[:1], 6, eos_ids=[])
    assert res.records and all("seed_ids" not in r.extras for r in res.records)
