"""The plan's CPU stage times against the committed runs' measured ones (docs/plan.md): `draftlab.plan.calibrate`'s
table, with the method tables the plan's corrector stage reads (its families' budget roles and cost models: the
configuration imports no method, so this command line hands them in).

    python tools/calibrate_plan.py [--fit]
"""
from __future__ import annotations

import sys

from draftlab.pipeline.names import method_names
from draftlab.plan.calibrate import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], names=method_names()))
