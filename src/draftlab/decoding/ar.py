"""Autoregressive decoding with the target alone: the baseline every speedup divides by.

Same model code, dtype, batching (the static `StreamCache`, finished streams dropped) and
sampler (`verify.sample_next`) as the speculative engine, so the two differ only by speculation.
One round = one target step of one token per active stream; its time splits into `verify` (the
target forward + sampling, the same phase name as the speculative engine's target pass) and `commit`.
"""
from __future__ import annotations

import torch

from draftlab.decoding.common import (GenerationResult, PhaseTimer, Outputs, RoundLog, live_rows, partial_on_interrupt,
                                     retire, to_host)
from draftlab.decoding.shapes import pad_batch, run_shapes
from draftlab.decoding.verify import SamplingParams, sample_next
from draftlab.verifier.streams import StreamCache, capacity_for
from draftlab.verifier.model import TargetModel

AR_PHASES = ("verify", "commit")


@torch.no_grad()
def generate_ar(
    target: TargetModel,
    prompts: list[list[int]],
    max_new_tokens: int,
    sp: SamplingParams = SamplingParams(),
    eos_ids=None,
    generator: torch.Generator | None = None,
    pad_id: int = 0,
    kv_capacity: int = 0,
) -> GenerationResult:
    dev = target.device
    eos_ids = target.eos_token_ids if eos_ids is None else eos_ids
    timer = PhaseTimer(dev)
    t_start = timer.now()
    n = len(prompts)
    shapes = run_shapes(target, prompts, max_new_tokens, 1)  # compiled: the run's shapes, its graphs planned first
    if shapes is None:
        rows = list(range(n))  # original stream index of each active row
        sc = StreamCache(target, n, kv_capacity or capacity_for([len(p) for p in prompts], max_new_tokens, 1))
    else:  # a declared batch size (padding rows retired from the start) and the run's capacity
        prompts, rows = pad_batch(prompts, shapes.batch(n))
        sc = StreamCache(target, len(prompts), shapes.capacity)
    B = len(prompts)
    out = sc.prefill(prompts, pad_id, last_logits_only=True)
    last = sample_next(out.logits[:, -1], sp, generator)  # [B]
    outputs = Outputs(n, max_new_tokens, eos_ids, t_start)
    done = outputs.emit(rows, to_host(last[:, None]), torch.ones(B, dtype=torch.long), timer.host_time)
    rows, (last,) = retire(done, rows, (last,), sc, shapes=shapes)  # compiled: declared batch sizes only
    t_prefill = timer.now()
    log = RoundLog(timer, AR_PHASES)
    with partial_on_interrupt(outputs):  # Ctrl-C: the exception carries the tokens so far
        while any(i >= 0 for i in rows):
            timer.start_round()
            live = live_rows(rows, dev).bool()[:, None] if shapes is not None else None  # a retired row's token is not kept
            logits = sc.append(last[:, None], live).logits[:, -1]  # [b, V]
            last = sample_next(logits, sp, generator)  # [b]
            timer.mark()  # verify | commit
            done = outputs.emit(rows, to_host(last[:, None]), torch.ones(len(rows), dtype=torch.long), timer.host_time)
            n = sum(i >= 0 for i in rows)
            rows, (last,) = retire(done, rows, (last,), sc, shapes=shapes)
            log.close(n)
    return log.result(outputs, t_start, t_prefill)
