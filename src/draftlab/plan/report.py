"""The plan as a table or JSON, and the memory / disk check for the device a run will use (`check_params`)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from draftlab import paths
from draftlab.config import Params
from draftlab.plan.arch import target_shape
from draftlab.plan.stages import GiB, Device, Stage, check_fit, plan


def _si(x: float) -> str:
    for unit, f in (("E", 1e18), ("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= f:
            return f"{x / f:.3g}{unit}"
    return f"{x:.3g}"


def _hours(h: float) -> str:
    if h * 60 < 10:
        return f"{h * 3600:.0f} s"
    return f"{h * 60:.1f} min" if h < 1 else (f"{h:.1f} h" if h < 48 else f"{h / 24:.1f} d")


def _secs(x: float) -> str:
    return f"{x:.1f} s" if x < 600 else _hours(x / 3600)


def table(stages: list[Stage], dev: Device, target_line: str, terms: bool = True) -> str:
    """The plan as text: one row per stage, then each stage's memory terms and notes, then the assumptions."""
    head = f"{'stage':<17}{'tokens':>9}{'FLOPs':>9}{'time':>10}{'peak GiB':>10}{'disk GiB':>10}  largest step"
    lines = [target_line, head, "-" * len(head)]
    for s in stages:
        lines.append(f"{s.name:<17}{_si(s.tokens):>9}{_si(s.flops):>9}{_hours(s.hours):>10}{s.peak / GiB:>10.1f}"
                     f"{sum(s.disk.values()) / GiB:>10.1f}  {s.step}")
    total = sum(s.hours for s in stages)
    lines.append(f"{'total':<17}{'':>9}{_si(sum(s.flops for s in stages)):>9}{_hours(total):>10}"
                 f"{max(s.peak for s in stages) / GiB:>10.1f}{sum(sum(s.disk.values()) for s in stages) / GiB:>10.1f}")
    if terms:
        for s in stages:
            lines.append(f"{s.name}: " + ("; ".join(f"{k} {v / GiB:.2f}" for k, v in s.memory.items() if v >= GiB / 100)
                                          or "no device step")
                         + (f"\n  time: " + "; ".join(f"{k} {_secs(v)}" for k, v in s.times.items()) if s.times else "")
                         + "".join(f"\n  disk: {k} {v / GiB:.2f} GiB" for k, v in s.disk.items())
                         + "".join(f"\n  note: {n}" for n in s.notes))
    lines.append("assumptions: " + dev.assumptions())
    return "\n".join(lines)


def to_json(stages: list[Stage], dev: Device, shape, warnings: list[str], error: str | None) -> str:
    return json.dumps({"target": {"source": shape.source, "params": shape.params(), "notes": list(shape.notes)},
                       "device": vars(dev), "assumptions": dev.assumptions(), "fits": error is None, "error": error,
                       "warnings": warnings,
                       "stages": [s.to_dict() for s in stages],
                       "total_hours": sum(s.hours for s in stages)}, indent=2)


def run_device(target_device: str) -> tuple[Device, str]:
    """The device a run will use (target.device; auto = CUDA when present) and its memory: a CUDA device's
    total memory, or on CPU the machine's physical RAM (the step's tensors live there)."""
    import os

    import torch

    kind = "cuda" if target_device.startswith("cuda") or (target_device == "auto" and torch.cuda.is_available()) else "cpu"
    if kind == "cuda":
        index = int(target_device.split(":")[1]) if ":" in target_device else 0
        props = torch.cuda.get_device_properties(index)
        return Device.of("cuda", memory_gib=props.total_memory / GiB), f"cuda:{index} ({props.name})"
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return Device.of("cpu", memory_gib=ram / GiB), "cpu (the machine's RAM)"


def check_run(params: Params, prepared: str | Path | None = paths.TARGET, root: str | Path = ".",
              device: Device | None = None, where: str = "") -> str:
    """check_params's memory and disk check: the plan's largest steps against the run's device (or `device`)
    and the free disk under `root`; a one-line ConfigError naming the key when one does not fit. Returns a line
    saying what was checked."""
    if device is None:
        device, where = run_device(params.target.device)
    shape = target_shape(params.target, prepared)
    stages = plan(params, shape, device)
    free = shutil.disk_usage(root).free
    warnings = check_fit(stages, device.memory_gib, free, where or device.kind)
    big = max(stages, key=lambda s: s.peak)
    return (f"largest step {big.name} {big.peak / GiB:.1f} GiB of {device.memory_gib:.0f} GiB ({where}); disk "
            f"{sum(sum(s.disk.values()) for s in stages) / GiB:.1f} GiB of {free / GiB:.0f} GiB free"
            + "".join(f"; warning: {w}" for w in warnings))


def render(params: Params, device: Device, as_json: bool = False, prepared: str | Path | None = paths.TARGET,
           root: str | Path = ".", disk_gib: float | None = None) -> tuple[str, str | None]:
    """`draftlab plan`: (the plan's text or JSON, None) or, when a step does not fit in `device.memory_gib` or a
    cache not on the free disk (`disk_gib`, default: free under `root`), (the same text, the one-line reason)."""
    from draftlab.errors import ConfigError

    shape = target_shape(params.target, prepared)
    stages = plan(params, shape, device)
    line = (f"target {params.target.name}: {shape.params() / 1e9:.2f}B params, {shape.num_layers} layers, hidden "
            f"{shape.hidden}, heads {shape.heads}/{shape.kv_heads}, head_dim {shape.head_dim}, intermediate "
            f"{shape.intermediate}, vocab {shape.vocab} (from {shape.source})"
            + "".join(f"\nwarning: {n}" for n in shape.notes))
    free = shutil.disk_usage(root).free if disk_gib is None else disk_gib * GiB
    try:
        warnings, err = check_fit(stages, device.memory_gib, free), None
    except ConfigError as e:
        warnings, err = [], str(e)
    if as_json:
        return to_json(stages, device, shape, warnings, err), err
    return table(stages, device, line) + "".join(f"\nwarning: {w}" for w in warnings), err
