"""OpenMP's wait policy for a process, set before torch is imported (the OpenMP runtime reads it once, at load).

`profile.omp_wait_policy` in the run's params.yaml: `passive` (idle threads sleep — the default: on a shared 2-core
machine spinning threads made a training step ~10x slower and reference generation 7x slower) or `active` (idle
threads spin — for a run that has the machine to itself and many small ops: the toy target trains 1.8x faster, 435
vs 246 steps in its first 60 s on 2 cores, measured 2026-12-05). An OMP_WAIT_POLICY already in the environment
wins (`make test` sets passive: its workers share the cores). This reads params.yaml with a plain YAML parse and
no validation — `check_params` validates the key; a file that cannot be read means the default.

`configure` is the one place a process of ours (a stage, the offline runner, `draftlab decode`, a tool, the
accelerator check, the toy trainer) sets OpenMP: the wait policy, and torch's thread count. Call it once before
anything imports torch (the policy), and again with the profile's `threads` once the params are loaded.
"""
from __future__ import annotations

import os

POLICIES = ("passive", "active")


def wanted(params_file: str = "params.yaml") -> str:
    """The policy params.yaml asks for (the default when it is absent, unreadable or says nothing valid)."""
    import yaml

    try:
        with open(params_file) as f:
            value = ((yaml.safe_load(f) or {}).get("profile") or {}).get("omp_wait_policy", POLICIES[0])
    except (OSError, yaml.YAMLError, AttributeError):
        return POLICIES[0]
    return value if value in POLICIES else POLICIES[0]


def configure(params_file: str | os.PathLike | None = "params.yaml", threads: int = 0) -> str | None:
    """Set OMP_WAIT_POLICY from params_file unless the environment has it (None: leave it as it is), then, when
    threads > 0, torch's intra-op thread count (this imports torch: the policy must be set before, by an earlier
    call); -> the policy in force (None when none is set)."""
    if params_file is not None:
        os.environ.setdefault("OMP_WAIT_POLICY", wanted(str(params_file)).upper())
    if threads > 0:
        import torch

        torch.set_num_threads(threads)
    return os.environ.get("OMP_WAIT_POLICY")
