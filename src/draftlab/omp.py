"""OpenMP's wait policy for a process, set before torch is imported (the OpenMP runtime reads it once, at load).

`profile.omp_wait_policy` in the run's params.yaml: `passive` (idle threads sleep — the default: on a shared 2-core
machine spinning threads made a training step ~10x slower and reference generation 7x slower) or `active` (idle
threads spin — for a run that has the machine to itself and many small ops: the toy target trains 1.8x faster, 435
vs 246 steps in its first 60 s on 2 cores, measured 2026-12-05). An OMP_WAIT_POLICY already in the environment
wins (`make test` sets passive: its workers share the cores). This reads params.yaml with a plain YAML parse and
no validation — `check_params` validates the key; a file that cannot be read means the default.

A decoding process (the benchmark stage, `draftlab decode`) reads `engine.omp_wait_policy` instead (default
`active`): a decoding step is a few hundred small ops whose threads would otherwise sleep and wake between them
(on 2 cores a width-8 verify pass took 182 ms passive against 119-141 active; `dflash-seeded` ran 1.82x faster
and AR 1.13x, measured 2026-12-06: passive shrank every speedup against AR). `setup()` is what its results
record: the policy, the thread count, the cores, the load average and how many other threads were runnable when
the process started (sampled before torch loads), with a one-line warning when another process competes for the
cores — spinning threads beside another heavy process run ~10x slower.

`configure` is the one place a process of ours (a stage, the offline runner, `draftlab decode`, a tool, the
accelerator check, the toy trainer) sets OpenMP: the wait policy, and torch's thread count. Call it once before
anything imports torch (the policy), and again with the profile's `threads` once the params are loaded.
"""
from __future__ import annotations

import os
import time

POLICIES = ("passive", "active")


DECODING_DEFAULT = "active"  # engine.omp_wait_policy's default (config.engine)
_START: dict = {}  # the machine's state when the process first configured OpenMP (`setup`)


def wanted(params_file: str = "params.yaml", decoding: bool = False) -> str:
    """The policy params.yaml asks for (the default when it is absent, unreadable or says nothing valid);
    decoding: `engine.omp_wait_policy` (default active)."""
    import yaml

    section, key, default = ("engine", "omp_wait_policy", DECODING_DEFAULT) if decoding else \
        ("profile", "omp_wait_policy", POLICIES[0])
    try:
        with open(params_file) as f:
            value = ((yaml.safe_load(f) or {}).get(section) or {}).get(key, default)
    except (OSError, yaml.YAMLError, AttributeError):
        return default
    return value if value in POLICIES else default


def _others_running(samples: int = 5, gap_s: float = 0.05) -> int:
    """The median count of runnable threads on the machine besides this one (/proc/loadavg's 4th field; 0 where
    it cannot be read)."""
    counts = []
    for i in range(samples):
        try:
            with open("/proc/loadavg") as f:
                counts.append(max(0, int(f.read().split()[3].split("/")[0]) - 1))
        except (OSError, IndexError, ValueError):
            return 0
        if i + 1 < samples:
            time.sleep(gap_s)
    return sorted(counts)[len(counts) // 2]


def configure(params_file: str | os.PathLike | None = "params.yaml", threads: int = 0,
              decoding: bool = False) -> str | None:
    """Set OMP_WAIT_POLICY from params_file unless the environment has it (None: leave it as it is; decoding: the
    engine's policy), then, when threads > 0, torch's intra-op thread count (this imports torch: the policy must
    be set before, by an earlier call); -> the policy in force (None when none is set)."""
    if not _START:
        _START.update(load_avg=[round(x, 2) for x in os.getloadavg()], others_running=_others_running()
                      if decoding else None)
    if params_file is not None:
        os.environ.setdefault("OMP_WAIT_POLICY", wanted(str(params_file), decoding).upper())
    if threads > 0:
        cores = os.cpu_count() or 1
        if threads > cores:
            from draftlab.errors import ConfigError

            raise ConfigError(f"{threads} threads asked for, but this machine has {cores} cores; set the profile's "
                              f"threads (or engine.threads) to at most {cores}, or 0 for the default")
        import torch

        torch.set_num_threads(threads)
    return os.environ.get("OMP_WAIT_POLICY")


def setup() -> dict:
    """What a decoding run's results record about OpenMP and the machine when it started (see the docstring)."""
    import torch

    policy = (os.environ.get("OMP_WAIT_POLICY") or "unset").lower()
    cores = os.cpu_count() or 1
    out = {"wait_policy": policy, "threads": torch.get_num_threads(), "cores": cores,
           "load_avg_start": _START.get("load_avg"), "others_running_start": _START.get("others_running")}
    busy = _START.get("others_running") or 0
    if busy >= max(1, cores // 2):
        out["warning"] = (f"{busy} other thread(s) were runnable when this run started on {cores} cores: with the "
                          f"{policy} wait policy beside another heavy process a step can run ~10x slower; these "
                          "timings are not the machine's")
    return out
