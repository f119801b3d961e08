"""What the slowest tests cost, measured and written to tests/durations.json by the command that measured it (issue 62).

    python tools/test_durations.py files LABEL [--root DIR] [FILE ...]
        each test file alone, one after another, in its own pytest process (no xdist, no other file beside it), with
        the environment `make test` gives its unit tests; every test's seconds (setup + call + teardown: pytest's
        --durations, and the CPU seconds of the process and the children it reaped) go to runs.LABEL.tests, each
        file's whole process to runs.LABEL.files. FILE defaults to tests/conftest.py's SLOW_FIRST.
        --root: another checkout's test files (a clone of the unchanged commit, for `before`), its src/ put ahead of
        the installed draftlab.
    python tools/test_durations.py suite LABEL --root DIR
        `make install`, then `make test`, in DIR (a fresh clone), each timed; runs.LABEL.suite keeps both times, the
        pytest sessions' own totals and the slowest tests `make test` listed (its --durations, two workers beside each other).

The file's `slowest` table: the ten slowest tests of runs.before with their cost in runs.after; `files`: each
measured file's whole cost in both. A module-scoped fixture's cost lands in the setup of the test that first asks for
it, as in pytest's own report. Timings need a quiet machine: each run records its load average and CPU.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from draftlab.measure.test_durations import *  # noqa: F401,F403 (the functions: tests/tools reads them here too)
from draftlab.measure.test_durations import OUT, ROOT, default_files, one_file, record, run_files, run_suite


def main(argv: list[str]) -> int:
    if argv[:1] == ["--one"]:
        return one_file(argv[1], Path(argv[3]))
    ap = argparse.ArgumentParser(prog="tools/test_durations.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=["files", "suite"])
    ap.add_argument("label", help="the run's name in the file: before or after")
    ap.add_argument("paths", nargs="*", help="test files (mode files; default: conftest's slow files)")
    ap.add_argument("--root", type=Path, default=ROOT)
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_intermixed_args(argv)
    root = a.root.resolve()
    if not (root / "tests" / "conftest.py").is_file():
        print(f"error: --root {a.root} is not a draftlab checkout (no tests/conftest.py)", file=sys.stderr)
        return 2
    missing = [p for p in a.paths if not (root / p).is_file()]
    if missing or (a.mode == "suite" and a.paths):
        print(f"error: {'no such test file under ' + str(root) + ': ' + missing[0] if missing else 'suite takes no FILE'}",
              file=sys.stderr)
        return 2
    doc = json.loads(a.out.read_text()) if a.out.exists() else {}
    if a.mode == "files":
        got = run_files(root, a.paths or default_files(root))
        doc = record(doc, a.label, "tests", got["tests"], root, argv)
        doc = record(doc, a.label, "files", got["files"], root, argv)
    else:
        doc = record(doc, a.label, "suite", run_suite(root), root, argv)
    a.out.write_text(json.dumps({"about": __doc__.split("\n\n")[0], **{k: v for k, v in doc.items() if k != "about"}},
                                indent=1) + "\n")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
