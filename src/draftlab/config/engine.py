"""The `engine` section: how the decoding engine runs the target and the drafters (the benchmark's arms,
`draftlab decode`, the reference stage's AR engine).

- `compile`: `off` runs every pass eagerly; `on` runs the static-shape steps (the target's decode and verify passes
  over the slot buffer) through `torch.compile` with a full graph and fixed shapes (mode `reduce-overhead`, i.e.
  CUDA graphs, on CUDA; inductor's default on CPU); `auto` = `on` on CUDA and `off` on CPU, where compiling was not
  faster (docs/decisions.md "A static-shape engine"). What ran is recorded in each run's setup.
- `kv_capacity`: KV slots per stream; 0 = sized from each request (its longest prompt + the new tokens + a block +
  a scratch slot). A value smaller than a run needs is one line at check time and at run time.
"""
from __future__ import annotations

from dataclasses import dataclass

from draftlab.config.checks import _choice
from draftlab.errors import ConfigError

COMPILE_MODES = ("auto", "off", "on")


@dataclass
class EngineConfig:
    compile: str = "auto"  # auto | off | on
    kv_capacity: int = 0  # KV slots per stream; 0 = sized from each request

    def check(self, p: str) -> None:
        self.compile = _choice(f"{p}.compile", self.compile, COMPILE_MODES)  # YAML's off (False) -> 'off'
        if self.kv_capacity < 0:
            raise ConfigError(f"{p}.kv_capacity={self.kv_capacity} must be >= 0 (0 = sized from each request)")

    def check_room(self, p: str, prompt_tokens: int, new_tokens: int, block: int) -> None:
        """One line when a fixed capacity cannot hold the longest request the run can make."""
        need = prompt_tokens + new_tokens + block + 1
        if self.kv_capacity and self.kv_capacity < need:
            raise ConfigError(f"{p}.kv_capacity={self.kv_capacity} is smaller than the longest request needs ({need}: "
                              f"data.max_prompt_tokens {prompt_tokens} + {new_tokens} new tokens + a block of {block} + "
                              f"a scratch slot); raise it, or set 0 to size it from each request")

    def resolved(self, device_type: str) -> str:
        """`on` or `off`: what `auto` means on this device."""
        if self.compile == "auto":
            return "on" if device_type == "cuda" else "off"
        return self.compile
