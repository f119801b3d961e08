"""Run a stage with one rank's gradients perturbed before DDP's all-reduce (tests/training/test_ddp.py).

`python tests/ddp_perturb.py <stage> ARGS...` (under torchrun) runs `python -m draftlab.pipeline <stage> ARGS...`
after wrapping `DistributedDataParallel.__init__`, so that on the rank named by DRAFTLAB_TEST_PERTURB every
parameter's local gradient passes through a hook before the reducer sums it:
- `RANK:noise:EPS`: g * (1 + EPS * N(0, 1)) elementwise (a fixed generator per rank): rounding of relative size
  EPS, as another kernel level, thread count or summation order would cause;
- `RANK:scale:FACTOR`: g * FACTOR (a planted error: the comparison must fail on it).
Without the variable (or in a 1-process run, which builds no DDP) the stage runs untouched.
"""
from __future__ import annotations

import os
import runpy


def install(spec: str) -> None:
    import torch
    from torch.nn.parallel import DistributedDataParallel

    rank, kind, value = spec.split(":")
    rank, value = int(rank), float(value)
    if kind not in ("noise", "scale"):
        raise SystemExit(f"DRAFTLAB_TEST_PERTURB={spec!r}: kind must be noise or scale")
    init = DistributedDataParallel.__init__

    def wrapped(self, module, *args, **kwargs):
        if int(os.environ.get("RANK", "0")) == rank:
            gen = torch.Generator().manual_seed(1234 + rank)

            def hook(g):
                if kind == "scale":
                    return g * value
                noise = torch.randn(g.shape, generator=gen, dtype=torch.float64).to(g.dtype)
                return g * (1 + value * noise)

            for p in module.parameters():
                if p.requires_grad:
                    p.register_hook(hook)
        init(self, module, *args, **kwargs)

    DistributedDataParallel.__init__ = wrapped


if __name__ == "__main__":  # the stage's command, python -m draftlab.pipeline <stage> ARGS, in this process
    if os.environ.get("DRAFTLAB_TEST_PERTURB"):
        install(os.environ["DRAFTLAB_TEST_PERTURB"])
    runpy.run_module("draftlab.pipeline", run_name="__main__", alter_sys=True)  # sys.argv[1:]: <stage> ARGS
