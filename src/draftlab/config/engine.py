"""The `engine` section: how the decoding engine runs the target and the drafters (the benchmark's arms,
`draftlab decode`, the reference stage's AR engine).

- `compile`: `off` runs every pass eagerly; `on` runs the static-shape steps (the target's decode and verify passes
  over the slot buffer, the drafter's passes, the correctors' proposal steps) through `torch.compile` with a full
  graph and fixed shapes (mode `reduce-overhead`, i.e. CUDA graphs, on CUDA; inductor's default on CPU); `auto` =
  `off` everywhere until an accelerator run has measured the compiled engine (greedy identity and the AR step
  against the bandwidth floor: docs/gpu.md); on CPU compiling was not faster (docs/decisions.md "A static-shape
  engine"). `on` on CUDA is opt-in and recorded as unmeasured. What ran is recorded in each run's setup.
- `kv_capacity`: KV slots per stream; 0 = sized from each request (eager) or from the run's longest request
  (compiled: one capacity per run). A value smaller than a run needs is one line at check time and at run time.
- `batch_sizes`, `verify_widths`, `max_graphs` (compiled runs only; `draftlab.decoding.shapes`): the run declares its
  shapes before anything compiles — the batch sizes it asks for (a stage's batch, the benchmark's batch and
  concurrency levels) plus `batch_sizes`, and the verify widths (`[]` = powers of two up to the block, and the
  block) —; a run whose declared graphs exceed `max_graphs` is one line before anything runs.
- `omp_wait_policy`, `threads` (decoding processes: the benchmark stage and `draftlab decode`; `draftlab.omp`):
  OpenMP's wait policy while decoding (`active`: the threads spin between the many small ops of a step —
  measured best for decoding on the project's 2-core CPUs, docs/decisions.md "Threads that do not sleep while
  decoding"; `passive` for a machine shared with other heavy work) and torch's thread count (0 = the profile's
  `threads`; above the machine's cores is one line at run time). AR and every arm of a run decode under the same
  setting; what ran is in the results' setup (`omp`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from draftlab.compiling import MAX_GRAPHS
from draftlab.config.checks import _choice
from draftlab.errors import ConfigError

COMPILE_MODES = ("auto", "off", "on")


@dataclass
class EngineConfig:
    compile: str = "auto"  # auto (= off until measured on an accelerator) | off | on
    kv_capacity: int = 0  # KV slots per stream; 0 = sized from each request (compiled: from the run's longest)
    batch_sizes: list[int] = field(default_factory=list)  # compiled: batch sizes declared beside the run's own
    verify_widths: list[int] = field(default_factory=list)  # compiled: verify widths; [] = powers of two + the block
    max_graphs: int = MAX_GRAPHS  # compiled: the most graphs a run may declare (each costs seconds to compile)
    omp_wait_policy: str = "active"  # decoding processes: active (threads spin between ops) | passive (draftlab.omp)
    threads: int = 0  # decoding processes: torch's thread count; 0 = profile.threads

    def check(self, p: str) -> None:
        self.compile = _choice(f"{p}.compile", self.compile, COMPILE_MODES)  # YAML's off (False) -> 'off'
        self.omp_wait_policy = _choice(f"{p}.omp_wait_policy", self.omp_wait_policy, ("passive", "active"))
        if isinstance(self.threads, bool) or not isinstance(self.threads, int) or self.threads < 0:
            raise ConfigError(f"{p}.threads={self.threads!r} must be an integer >= 0 (0 = the profile's threads)")
        if self.kv_capacity < 0:
            raise ConfigError(f"{p}.kv_capacity={self.kv_capacity} must be >= 0 (0 = sized from each request)")
        for key, vals in (("batch_sizes", self.batch_sizes), ("verify_widths", self.verify_widths)):
            if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in vals):
                raise ConfigError(f"{p}.{key}={list(vals)} must be a list of integers >= 1")
        if self.verify_widths and 1 not in self.verify_widths:
            raise ConfigError(f"{p}.verify_widths={list(self.verify_widths)} must include 1 (an AR step, a round "
                              f"with nothing proposed)")
        if isinstance(self.max_graphs, bool) or not isinstance(self.max_graphs, int) or self.max_graphs < 1:
            raise ConfigError(f"{p}.max_graphs={self.max_graphs!r} must be an integer >= 1 (the most compiled graphs "
                              f"one run may plan; default {MAX_GRAPHS})")

    def check_room(self, p: str, prompt_tokens: int, new_tokens: int, block: int) -> None:
        """One line when a fixed capacity cannot hold the longest request the run can make."""
        need = prompt_tokens + new_tokens + 2 * block + 1  # (verifier.slots.capacity_for)
        if self.kv_capacity and self.kv_capacity < need:
            raise ConfigError(f"{p}.kv_capacity={self.kv_capacity} is smaller than the longest request needs ({need}: "
                              f"data.max_prompt_tokens {prompt_tokens} + {new_tokens} new tokens + two blocks of {block} "
                              f"+ a scratch slot); raise it, or set 0 to size it from each request")

    def resolved(self, device_type: str) -> str:
        """`on` or `off`: what `auto` means on this device — `off` everywhere until an accelerator run has measured
        the compiled engine (docs/gpu.md "The compiled engine")."""
        return "off" if self.compile == "auto" else self.compile

    def label(self, device_type: str) -> str:
        """What the run records: the resolved mode, and `on (unmeasured on cuda)` for the opt-in CUDA path."""
        mode = self.resolved(device_type)
        return f"{mode} (unmeasured on cuda)" if mode == "on" and device_type == "cuda" else mode
