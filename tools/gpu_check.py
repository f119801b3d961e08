"""The one prepared accelerator check: `python tools/gpu_check.py [--dry] [--out-dir DIR] [--commit SHA]`, or
`--render FILE.json`. What it runs and writes: `draftlab.checks` (src/draftlab/checks/) and docs/gpu.md. Needs
only the machine's own Python with torch, triton and transformers; the library is read from src/."""
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # the working tree's library
    from draftlab.checks.run import main, set_interpreter

    set_interpreter(sys.argv[1:])  # before anything imports Triton
    raise SystemExit(main())
