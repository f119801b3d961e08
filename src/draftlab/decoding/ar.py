"""Autoregressive decoding with the target alone: the baseline every speedup divides by.

Same model code, dtype, batching (the static `StreamCache`, finished streams dropped) and
sampler (`verify.sample_next`) as the speculative engine, so the two differ only by speculation.
One round = one target step of one token per active stream; its time splits into `verify` (the
target forward + sampling, the same phase name as the speculative engine's target pass) and `commit`.
"""
from __future__ import annotations

import torch

from draftlab.decoding.common import GenerationResult, PhaseTimer, Outputs, RoundLog, live_rows, retire, to_host
from draftlab.decoding.verify import SamplingParams, sample_next
from draftlab.verifier.streams import StreamCache, capacity_for, target_bucket
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
    B = len(prompts)
    sc = StreamCache(target, B, kv_capacity or capacity_for([len(p) for p in prompts], max_new_tokens, 1,
                                                         target_bucket(target)))
    out = sc.prefill(prompts, pad_id, last_logits_only=True)
    last = sample_next(out.logits[:, -1], sp, generator)  # [B]
    outputs = Outputs(B, max_new_tokens, eos_ids, t_start)
    rows = list(range(B))  # original stream index of each active row
    done = outputs.emit(rows, to_host(last[:, None]), torch.ones(B, dtype=torch.long), timer.host_time)
    keep_shape = getattr(target, "compiled", "off") != "off"  # compiled steps: batch sizes B, B/2, ... only
    rows, (last,) = retire(done, rows, (last,), sc, keep_shape=keep_shape)
    t_prefill = timer.now()
    log = RoundLog(timer, AR_PHASES)
    while any(i >= 0 for i in rows):
        timer.start_round()
        live = live_rows(rows, dev).bool()[:, None] if keep_shape else None  # a retired row's token is not kept
        logits = sc.append(last[:, None], live).logits[:, -1]  # [b, V]
        last = sample_next(logits, sp, generator)  # [b]
        timer.mark()  # verify | commit
        done = outputs.emit(rows, to_host(last[:, None]), torch.ones(len(rows), dtype=torch.long), timer.host_time)
        n = sum(i >= 0 for i in rows)
        rows, (last,) = retire(done, rows, (last,), sc, keep_shape=keep_shape)
        log.close(n)
    return log.result(outputs, t_start, t_prefill)
