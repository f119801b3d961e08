"""Sanity gates of the accelerator check's timings, and the AR step against the memory-bandwidth floor.

A timing that breaks a law of the machine measures the harness, not the device; each gate names one:
- `break_even_tau_ge_1`: a speculative round costs at least one AR step (it runs one target pass and more);
  break-even τ = round time / AR step time below 1 means the AR step carried costs the round did not;
- `verify16_ge_verify1`: a 16-token verify does at least the work of a 1-token one: verify(16) >= 0.95 x verify(1)
  at every stream count (a 16-token pass no dearer than a 1-token one means both are bound by something else);
- `ar_step_matches_verify1`: the AR step is one 1-token target pass plus a token pick: within 10% of verify(1)
  at the same shape;
- `first_arm_retimed`: the first arm, timed again at the end, within 5% of its first timing (no drift, no
  warm-up charged to it);
- `copy_bandwidth`: the device-to-device copy reaches >= 80% of the device's datasheet bandwidth; otherwise (or
  when the datasheet is unknown) `ar_step_over_floor` is marked invalid.
The concurrency section hands the gates the p20 of each figure (interference from elsewhere only ever adds time,
so the faster rounds are the device's own). Each gate is recorded with the figure it judged, its limit and its rule
(`gate_values`: value >= or <= limit); on an accelerator a gate that does not hold fails the section, while a CPU
rehearsal (`--dry`) reports the gates and fails nothing on them (its timings are not a device's).
`ar_step_over_floor` = the AR step at 1 stream / ((the target's weight bytes + its KV bytes at that shape) / the
copy bandwidth measured in the same run): 1.0 is the hardware's limit for a memory-bound decode step.
"""
from __future__ import annotations

# datasheet memory bandwidth, GB/s (HBM), by a substring of torch.cuda.get_device_properties().name
DATASHEET_GBPS = {"H200": 4800.0, "H100 SXM": 3350.0, "H100 PCIe": 2000.0, "H100 NVL": 3900.0, "H100": 3350.0,
                  "A100-SXM4-80GB": 2039.0, "A100 80GB PCIe": 1935.0, "A100": 1555.0, "L40S": 864.0,
                  "B200": 8000.0}
LIMITS = {"break_even_tau_ge_1": 1.0, "verify16_ge_verify1": 0.95, "ar_step_matches_verify1": 0.10,
          "first_arm_retimed": 0.05, "copy_bandwidth": 0.80}
RULES = {"break_even_tau_ge_1": ">=", "verify16_ge_verify1": ">=", "ar_step_matches_verify1": "<=",
         "first_arm_retimed": "<=", "copy_bandwidth": ">="}  # how a gate's value must stand to its limit


def datasheet_gbps(device_name: str) -> float | None:
    for key, v in DATASHEET_GBPS.items():  # insertion order: the more specific names first
        if key in device_name:
            return v
    return None


def measure_copy_gbps(device, nbytes: int = 1 << 30, reps: int = 5) -> float:
    """Device-to-device copy bandwidth, GB/s (bytes read + bytes written per second), best of `reps` copies of
    `nbytes` (>= 1 GiB on a GPU, so caches do not flatter it)."""
    import time

    import torch

    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device)
    src.fill_(1.0)
    dst = torch.empty_like(src)
    cuda = getattr(device, "type", str(device)) == "cuda"
    best = float("inf")
    for _ in range(reps + 1):  # the first copy is warm-up
        if cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            dst.copy_(src)
            b.record()
            b.synchronize()
            t = a.elapsed_time(b) / 1e3
        else:
            t0 = time.perf_counter()
            dst.copy_(src)
            t = time.perf_counter() - t0
        best = min(best, t)
    del src, dst
    return 2 * nbytes / best / 1e9


def kv_bytes(layers: int, kv_heads: int, head_dim: int, positions: int, dtype_bytes: int) -> int:
    """Bytes of K and V that one decode step reads: every layer's keys and values at `positions` (all streams)."""
    return 2 * layers * kv_heads * head_dim * positions * dtype_bytes


def floor_report(ar_step_ms: float | None, weight_bytes: int, kv: int, copy_gbps: float, device_name: str) -> dict:
    """ar_step_over_floor with its terms; `valid` only when the copy reached its gate."""
    sheet = datasheet_gbps(device_name)
    floor_ms = (weight_bytes + kv) / (copy_gbps * 1e9) * 1e3 if copy_gbps > 0 else None
    out = {"ar_step_ms": ar_step_ms, "floor_ms": floor_ms, "weight_bytes": weight_bytes, "kv_bytes": kv,
           "copy_gbps": copy_gbps, "datasheet_gbps": sheet,
           "value": (ar_step_ms / floor_ms) if (ar_step_ms and floor_ms) else None}
    if sheet is None:
        out.update(valid=False, why=f"no datasheet bandwidth known for {device_name!r}: the copy cannot be judged")
    elif copy_gbps < LIMITS["copy_bandwidth"] * sheet:
        out.update(valid=False, why=f"the copy reached {copy_gbps:.0f} GB/s, below {LIMITS['copy_bandwidth']:.0%} of "
                                    f"the datasheet's {sheet:.0f}")
    else:
        out["valid"] = True
    return out


def holds(name: str, value: float) -> bool:
    """Whether gate `name` holds at `value` (its rule against its limit)."""
    return value >= LIMITS[name] if RULES[name] == ">=" else value <= LIMITS[name]


def gate_values(levels: dict, retime: dict | None, floor: dict | None) -> dict:
    """name -> {"value", "limit", "rule", "holds"} over a concurrency result: `levels` = stream count ->
    {"ar_step_ms", "verify_ms" {T: ms}, "arms" {name: round ms}}; `retime` = {"ratio"}; `floor` = `floor_report`.
    The value is the worst case over levels and arms: the least round / AR step, the least verify(16) / verify(1),
    the largest |AR step - verify(1)| / verify(1); |retime ratio - 1|; copy / datasheet bandwidth. A gate with
    nothing to judge (no AR step, no verify table, no datasheet) is left out."""
    be, v16, arv = [], [], []
    for lvl in levels.values():
        ar, v = lvl.get("ar_step_ms"), lvl.get("verify_ms") or {}
        if ar:
            be += [ms / ar for ms in (lvl.get("arms") or {}).values() if ms is not None]
            if v.get("1"):
                arv.append(abs(ar - v["1"]) / v["1"])
        if v.get("1") and v.get("16"):
            v16.append(v["16"] / v["1"])
    worst = {"break_even_tau_ge_1": min(be, default=None), "verify16_ge_verify1": min(v16, default=None),
             "ar_step_matches_verify1": max(arv, default=None)}
    if retime and retime.get("ratio") is not None:
        worst["first_arm_retimed"] = abs(retime["ratio"] - 1.0)
    if floor and floor.get("datasheet_gbps"):
        worst["copy_bandwidth"] = floor["copy_gbps"] / floor["datasheet_gbps"]
    return {k: {"value": v, "limit": LIMITS[k], "rule": RULES[k], "holds": holds(k, v)}
            for k, v in worst.items() if v is not None}


def gates(levels: dict, retime: dict | None, floor: dict | None) -> dict:
    """name -> True / False: whether each gate of `gate_values` holds."""
    return {k: g["holds"] for k, g in gate_values(levels, retime, floor).items()}
