"""What every section of the accelerator check shares: its context (device, sizes, the time budgets), the clock
helpers, rounding for the JSON, one-line errors, the Triton switch of the dry mode, and the environment record.

Plain torch and the standard library: the accelerator machine has torch, triton, transformers and numpy, and no
OmegaConf, Hydra, MLflow or DVC (tests/checks/test_gpu_check.py imports this package with those blocked)."""
from __future__ import annotations

import contextlib
import math
import os
import platform
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]  # src/draftlab/checks/common.py -> the repository
SCHEMA = "draftlab-gpu-check-v2"
SECTIONS = ("kernels", "engine", "concurrency", "seeded", "specopd", "specopd_scale", "flex", "compiled")
MODULES = {"kernels": "kernels", "engine": "engine", "concurrency": "concurrency", "seeded": "seeded",
           "specopd": "specopd", "specopd_scale": "scale", "flex": "flex",
           "compiled": "compiled"}  # section -> its module in draftlab.checks


class UsageError(Exception):
    """Bad command-line input: printed as one line, exit code 2."""


class Budget:
    """Seconds left of a budget started at construction."""

    def __init__(self, seconds: float):
        self.seconds, self.t0 = seconds, time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def left(self) -> float:
        return self.seconds - self.elapsed()


@dataclass
class Ctx:
    """One run of the check: the device, dry or full, its sizes, the whole run's budget and the running section's
    own (`section`), the sections asked for, the concurrency sweep's stream counts, and a cache of built models."""

    dev: object
    dry: bool
    size: dict
    budget: Budget
    sections: list[str]
    streams: tuple[int, ...]
    section: Budget | None = None
    cache: dict = field(default_factory=dict)
    compile: str = "auto"  # the engine's steps in the eager sections (engine.compile): auto = off (the compiled
    # engine is measured in its own last section, `compiled`, until it has passed on a device)
    compile_backend: str = "cudagraphs"  # the `compiled` section's backend on CUDA: cudagraphs | inductor

    def compiled(self) -> bool:
        return self.compile == "on"

    def left(self) -> float:
        """Seconds left to the running section (its own budget, within the whole run's)."""
        own = self.section.left() if self.section is not None else math.inf
        return min(own, self.budget.left())


def sync(dev) -> None:
    import torch

    if getattr(dev, "type", "cpu") == "cuda":
        torch.cuda.synchronize(dev)


def time_us(fn, dev, warmup: int, reps: int) -> float:
    """Median wall time of fn() in µs over `reps` calls after `warmup` calls (device synchronised)."""
    for _ in range(warmup):
        fn()
    sync(dev)
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        sync(dev)
        ts.append((time.perf_counter() - t) * 1e6)
    return statistics.median(ts)


def rnd(x, sig: int = 6):
    """A float to `sig` significant digits for the JSON (None for NaN/inf); anything else unchanged."""
    if isinstance(x, float):
        return float(f"{x:.{sig}g}") if math.isfinite(x) else None
    return x


def round_tree(x):
    if isinstance(x, dict):
        return {k: round_tree(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [round_tree(v) for v in x]
    return rnd(x)


def tail(sec: dict, where) -> list[str]:
    """The end of a section's Markdown: each thing it skipped, then each error, `where(err)` naming its step."""
    return ([f"\nSkipped: {sk}." for sk in sec.get("skipped", [])]
            + [f"\nError ({where(err)}): {err['error']}" for err in sec.get("errors", [])])


def one_line(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0][:300] if msg else ''}"


@contextlib.contextmanager
def dry_triton(ctx: Ctx, inputs_fp32: bool):
    """In --dry, route the library's kernel dispatch to Triton (in the interpreter) where the kernel inputs are
    fp32, so the engine and SpecOPD run the same dispatch path as on CUDA; bf16 inputs stay on the torch
    reference there (no bf16 in the interpreter). On the accelerator the dispatch's own choice (Triton) is kept."""
    old = os.environ.get("DRAFTLAB_KERNELS")
    if ctx.dry and inputs_fp32:
        os.environ["DRAFTLAB_KERNELS"] = "triton"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("DRAFTLAB_KERNELS", None)
        else:
            os.environ["DRAFTLAB_KERNELS"] = old


def git_sha(root: Path = ROOT) -> str | None:
    """The commit checked out in `root` (None without git or outside a repository)."""
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                              timeout=10).stdout.strip() or None
    except Exception:  # noqa: BLE001  (no git, or not a repository: the device machine gets a bare tree)
        return None


def environment(dev, dry: bool) -> dict:
    import torch

    env = {"mode": "dry" if dry else "full", "device_type": dev.type, "python": platform.python_version(),
           "torch": torch.__version__, "torch_cuda": torch.version.cuda, "threads": torch.get_num_threads(),
           "triton_interpret": os.environ.get("TRITON_INTERPRET") == "1"}
    for mod in ("triton", "transformers"):
        try:
            env[mod] = __import__(mod).__version__
        except Exception as e:  # noqa: BLE001
            env[mod] = f"unavailable ({one_line(e)})"
    if dev.type == "cuda":
        p = torch.cuda.get_device_properties(dev)
        env.update(device=p.name, capability=f"{p.major}.{p.minor}", memory_gib=round(p.total_memory / 2 ** 30, 1))
    else:
        env["device"] = platform.processor() or "cpu"
    env["git_sha"] = git_sha()
    env["git_sha_source"] = "HEAD of the tree that ran" if env["git_sha"] else None
    return env
