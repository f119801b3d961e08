"""The offline regime run: `python3 tools/gpu_run.py --out DIR [--pack gpu-pack] [--commit SHA]` on a machine with no
network (an accelerator), `--dry --out DIR` for the CPU rehearsal, `--render BUNDLE [--commit SHA]` back here (SHA:
the commit the pack was made at, when HEAD has moved on). The library is draftlab.offline (src/draftlab/offline/);
docs/gpu.md "The regime run (gpu-small)". Needs only the machine's own Python with torch, transformers and lightning:
the pack carries the rest; the library is read from src/."""
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # the working tree's library
    from draftlab.offline.runner import main

    raise SystemExit(main())
