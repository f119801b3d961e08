"""Compiling every declared graph before any timed generation (`warm`): each step a run's `GraphPlan` lists
(`draftlab.decoding.shapes`, which imports this module: its types are named here, not imported) is called once on
scratch buffers of its declared shape, dtype and strides, so no timed generation compiles anything."""
from __future__ import annotations

import time

import torch


def warm(plan: "GraphPlan", shapes: "Shapes", target) -> dict[str, float]:
    """Call every planned step once on scratch buffers of its declared shape (each call compiles its graph); ->
    seconds per step. The scratch inputs have the run's shapes, dtypes and (contiguous) strides — a graph is guarded
    on all three —, so no timed generation compiles anything."""
    from draftlab.verifier.streams import StreamCache

    seconds: dict[str, float] = {}
    dev = target.device
    with torch.no_grad():
        for step, _key, job in plan.jobs:
            t0 = time.perf_counter()
            kind = job[0]
            if kind == "target":
                _, b, w, taps = job
                sc = StreamCache(target, b, shapes.capacity)
                ids = torch.zeros(b, w, dtype=torch.long, device=dev)
                target.step(target.model, sc.kv, sc.lengths, ids, torch.ones(b, w, dtype=torch.bool, device=dev),
                            sc.capacity, taps, 0)
            elif kind == "tree":
                _, b, N, taps = job
                sc = StreamCache(target, b, shapes.capacity)
                depth = torch.arange(N, device=dev).repeat(b, 1)  # contiguous, as a round's
                anc = torch.ones(N, N, dtype=torch.bool, device=dev).tril().repeat(b, 1, 1)
                target.tree(target.model, sc.kv, sc.lengths, torch.zeros(b, N, dtype=torch.long, device=dev), anc,
                            depth, sc.capacity, taps)
            else:
                d, b = job[1], job[2]
                state = d.new_state(b, shapes.capacity)
                if kind == "context":
                    w = job[3]
                    F = len(d.target_layer_ids) * target.hidden_size
                    d._steps[0](d, state.kv, state.lengths, torch.zeros(b, w, F, dtype=d.dtype, device=d.device),
                                torch.zeros(b, w, dtype=torch.bool, device=d.device),
                                torch.zeros(b, w, dtype=torch.long, device=d.device))
                else:
                    last = torch.zeros(b, dtype=torch.long, device=d.device)
                    block = d.block_ids(last)
                    pos = torch.arange(d.block_size, device=d.device).repeat(b, 1)  # contiguous, as a round's
                    if kind == "block":
                        d._steps[1](d, state.kv, state.lengths, block, pos)
                    else:
                        draft = d.draft(state, block, pos)
                        if kind == "propose":
                            job[3](draft, job[4])
                        else:  # the verify-width cut
                            prop = job[3]
                            prop._cut(draft.block_ids, draft.logits, prop.mask_token_id, prop.rule, prop.extra,
                                      prop.min_prob, d.block_size - 1)
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            seconds[step] = seconds.get(step, 0.0) + time.perf_counter() - t0
    return {k: round(v, 3) for k, v in seconds.items()}
