"""The clock and the memory gauge of the training sections (`flex`, `specopd`, `specopd_scale`): one call timed
between two CUDA events, and a call's peak device memory, allocated and reserved.

Why not `common.time_us`: it reads the host clock around a synchronised call, which is right for the dispatch-bound
engine but not what a training figure should be. Here, on CUDA, each timed call lies between two CUDA events recorded
on the current stream (the device's own clock: the time from the first kernel the call queues to the end of its last
one, plus any gap the host leaves between them, since the host still launches every kernel), the first call is
untimed (it compiles, autotunes and grows the allocator; its wall seconds are reported as `first_s`), and the figure
is the median of the timed calls. Off CUDA the same code reads `time.perf_counter` (a CPU has no separate device
clock). Memory: the allocator's cache is emptied and its peaks reset *before* the timed calls (never between them),
so the peaks are the steady state of the timed calls: `torch.cuda.max_memory_allocated` (what the tensors hold) and
`max_memory_reserved` (what the caching allocator took from the device: what another process could not have)."""
from __future__ import annotations

import statistics
import time

from draftlab.checks.common import sync

GIB = 2 ** 30


def is_cuda(dev) -> bool:
    return getattr(dev, "type", str(dev)) == "cuda"


def clock_name(dev) -> str:
    return "CUDA events (median of the timed calls)" if is_cuda(dev) else "host clock (median of the timed calls)"


def reset_memory(dev) -> None:
    """Empty the allocator's cache and reset its peaks (CUDA; nothing elsewhere). Outside any timed loop."""
    import torch

    if is_cuda(dev):
        sync(dev)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(dev)


def peak_memory(dev) -> dict:
    """{"peak_allocated_gib", "peak_reserved_gib"} since the last `reset_memory` (None off CUDA)."""
    import torch

    if not is_cuda(dev):
        return {"peak_allocated_gib": None, "peak_reserved_gib": None}
    sync(dev)
    return {"peak_allocated_gib": torch.cuda.max_memory_allocated(dev) / GIB,
            "peak_reserved_gib": torch.cuda.max_memory_reserved(dev) / GIB}


def call_ms(fn, dev) -> tuple[float, object]:
    """(milliseconds of one call fn(), its result): CUDA events on CUDA, the host clock elsewhere."""
    import torch

    if is_cuda(dev):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end), out
    t = time.perf_counter()
    out = fn()
    return 1e3 * (time.perf_counter() - t), out


def timed(fn, dev, reps: int, warmup: int = 1, memory: bool = True) -> dict:
    """`warmup` untimed calls (the first one's wall seconds: `first_s`), then `reps` timed ones. -> first_s, ms
    (median), ms_min, ms_all, reps, last (the last call's result) and, with `memory`, the timed calls' peaks."""
    first = None
    for i in range(warmup):
        sync(dev)
        t = time.perf_counter()
        fn()
        sync(dev)
        if i == 0:
            first = time.perf_counter() - t
    if memory:
        reset_memory(dev)
    ms, last = [], None
    for _ in range(reps):
        m, last = call_ms(fn, dev)
        ms.append(m)
    out = {"first_s": first, "ms": statistics.median(ms), "ms_min": min(ms), "ms_all": ms, "reps": reps, "last": last}
    if memory:
        out.update(peak_memory(dev))
    return out


def device_busy_ms(fn, dev) -> float | None:
    """Milliseconds of device work of one call fn(): the durations of the device events (kernels, copies) that
    torch.profiler records while it runs, summed; None off CUDA. Beside an event time it says how much of that time
    the GPU was busy (the rest: the device idling while the host prepares the next launch)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    if not is_cuda(dev):
        return None
    sync(dev)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        sync(dev)
    us = sum(e.time_range.elapsed_us() for e in prof.events()
             if e.device_type == DeviceType.CUDA and not getattr(e, "is_user_annotation", False))
    return us / 1e3
