"""Shared CLI glue for stage scripts: parse `key=value` overrides, load and validate params.yaml (arm
names against the arm table), set threads and seeds, and turn a `DraftlabError` into one line on
stderr (exit 2); for an unreadable input file that line also names the stage that rebuilds it."""
from __future__ import annotations

import os
import sys
import time
from typing import Callable

PARAMS = "params.yaml"

# Idle OpenMP threads sleep instead of spinning. On a shared 2-core machine spinning threads made a
# training step ~10x slower and reference generation 7x slower (23 vs 170 tok/s measured); it must
# be set before torch is imported, which every stage does after importing this module.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def stage_main(name: str, run: Callable, argv: list[str] | None = None) -> int:
    os.environ.setdefault("DVC_NO_ANALYTICS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in argv):
        print(f"usage: python stages/{name}.py [section.key=value ...]  (reads {PARAMS})")
        return 0
    from draftlab.bench.arms import arm_names
    from draftlab.errors import DraftlabError, InputFileError
    from draftlab.params import load_params

    t0 = time.time()
    try:
        params = load_params(PARAMS, argv, arms=arm_names())
        import torch

        if params.profile.threads:
            torch.set_num_threads(params.profile.threads)
        torch.manual_seed(params.profile.seed)
        run(params)
    except InputFileError as e:
        from draftlab.pipeline.layout import rebuild_hint

        print(f"error [{name}]: {e}{rebuild_hint(e.path)}", file=sys.stderr)
        return 2
    except DraftlabError as e:
        print(f"error [{name}]: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"[{name}] interrupted; outputs were not replaced (re-run to resume)", file=sys.stderr)
        return 130
    print(f"[{name}] done in {time.time() - t0:.1f}s", file=sys.stderr)
    return 0
