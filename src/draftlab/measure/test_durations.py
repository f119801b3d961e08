"""tools/test_durations.py's measurements (that command says what it writes and why): one test file alone in its own
pytest process (`one_file`, the command's `--one` mode), the files one after another (`run_files`), `make install` and
`make test` in a fresh clone (`run_suite`), pytest's --durations lines read per test (`parse_durations`) and the
record kept in tests/durations.json (`record`, `slowest`, `file_totals`)."""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]  # the repository (src/draftlab/measure/test_durations.py)
TOOL = ROOT / "tools" / "test_durations.py"  # the command (its `--one` mode runs one file)
OUT = ROOT / "tests" / "durations.json"
# what `make test` sets for its unit tests: the Makefile's exports and the assignments before its pytest command, read
# from the Makefile (not written twice)
MAKE_EXPORT = re.compile(r"^export (\w+) :?= ?(.*)$", re.M)
MAKE_PYTEST = re.compile(r"^\t((?:\w+=\S+ )+)\$\(PY\) -m pytest tests --ignore=tests/kernels", re.M)
DURATION = re.compile(r"^\s*([\d.]+)s (setup|call|teardown)\s+(\S.*?)\s*$")
SESSION = re.compile(r"^=* ?(\d+ (?:passed|failed|error).*?) in ([\d.]+)s")  # pytest's summary line, -q or not
TOP = 10


class Recorder:
    """A pytest plugin: per test, the wall seconds of its phases (as --durations adds them) and its CPU seconds."""

    def __init__(self, out: Path):
        self.out, self.tests = out, {}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        cpu = cpu_seconds()
        yield
        self.tests.setdefault(item.nodeid, {"wall_s": 0.0, "outcome": "passed"})["cpu_s"] = round(cpu_seconds() - cpu, 2)

    def pytest_runtest_logreport(self, report):
        row = self.tests.setdefault(report.nodeid, {"wall_s": 0.0, "outcome": "passed"})
        row["wall_s"] = round(row["wall_s"] + report.duration, 2)
        if report.failed or (report.skipped and row["outcome"] == "passed"):
            row["outcome"] = "failed" if report.failed else "skipped"

    def pytest_sessionfinish(self, session, exitstatus):
        self.out.write_text(json.dumps(self.tests))


def cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def one_file(path: str, out: Path) -> int:
    """Run in the child process: pytest on one file with the Recorder."""
    return int(pytest.main([path, "-p", "no:xdist", "-p", "no:randomly", "-q", "--durations=0"],
                           plugins=[Recorder(out)]))


def make_test_env(makefile: Path) -> dict:
    """The variables `make test` gives its unit tests' pytest: the Makefile's exports and its recipe's assignments."""
    text = makefile.read_text()
    env = {k: v.strip() for k, v in MAKE_EXPORT.findall(text) if "$(" not in v}  # PATH: the venv's, set below
    m = MAKE_PYTEST.search(text)
    if m:
        env.update(a.split("=", 1) for a in m.group(1).split())
    return env


def test_env(root: Path) -> dict:
    env = {**os.environ, **make_test_env(root / "Makefile"), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    if root != ROOT:  # another checkout: its library, not the installed one
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root / "src"), env.get("PYTHONPATH", "")) if p)
    return env


def default_files(root: Path) -> list[str]:
    """tests/conftest.py's SLOW_FIRST (the files make test schedules first), read without importing it."""
    m = re.search(r"^SLOW_FIRST = \((.*?)\)\n", (root / "tests" / "conftest.py").read_text(), re.S | re.M)
    return [f"tests/{n}" for n in re.findall(r'"([^"]+\.py)"', m.group(1))] if m else []


def machine() -> dict:
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = re.search(r"^model name\s*:\s*(.*)$", info, re.M)
    return {"cpu": model.group(1) if model else "unknown", "cores": os.cpu_count(), "avx512": "avx512f" in info,
            "aten_cpu_capability": os.environ.get("ATEN_CPU_CAPABILITY", ""), "load_avg": list(os.getloadavg())}


def commit(root: Path) -> dict:
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "tests", "src", "tools", "Makefile"],
                           cwd=root, capture_output=True, text=True).stdout.strip()
    return {"commit": head or "unknown", "tests_or_src_changed": bool(dirty)}


def run_files(root: Path, files: list[str]) -> dict:
    """Each file in its own process, one after another: {tests: {nodeid: row}, files: {file: row}}."""
    tests, per_file = {}, {}
    for f in files:
        out = Path(os.environ.get("TMPDIR", "/tmp")) / f"draftlab-durations-{os.getpid()}.json"
        out.unlink(missing_ok=True)
        t0, cpu = time.perf_counter(), cpu_seconds()
        rc = subprocess.run([sys.executable, str(TOOL), "--one", f, "--json", str(out)], cwd=root, env=test_env(root)).returncode
        rows = json.loads(out.read_text()) if out.exists() else {}
        out.unlink(missing_ok=True)
        tests.update(rows)
        per_file[f] = {"wall_s": round(time.perf_counter() - t0, 1), "cpu_s": round(cpu_seconds() - cpu, 1),
                       "tests": len(rows), "exit": rc, "not_passed": sorted(k for k, v in rows.items() if v["outcome"] != "passed"),
                       "load_avg_after": round(os.getloadavg()[0], 2)}
        print(f"[durations] {f}: {per_file[f]['wall_s']} s, exit {rc}", file=sys.stderr)
    return {"tests": tests, "files": per_file}


def timed(cmd: list[str], cwd: Path, log: Path) -> tuple[float, int, str]:
    """Run `cmd` with its output into `log` (and this terminal); -> (seconds, exit status, output)."""
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        p = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in p.stdout:
            fh.write(line)
            sys.stdout.write(line)
        p.wait()
    return round(time.perf_counter() - t0, 1), p.returncode, log.read_text()


def run_suite(root: Path) -> dict:
    """`make install` then `make test` in root, each timed; the sessions' totals and the listed slowest tests."""
    install_s, rc, _ = timed(["make", "install"], root, root / "durations-install.log")
    if rc:
        raise SystemExit(f"error: make install failed in {root} (exit {rc}; durations-install.log there)")
    test_s, rc, text = timed(["make", "test"], root, root / "durations-test.log")
    return {"install_s": install_s, "test_s": test_s, "total_s": round(install_s + test_s, 1), "exit": rc,
            "sessions": [{"summary": m.group(1), "s": float(m.group(2))} for m in map(SESSION.match, text.splitlines()) if m],
            "slowest": parse_durations(text)}


def parse_durations(text: str) -> dict:
    """pytest's --durations lines -> {nodeid: {phase: seconds}}."""
    out: dict = {}
    for m in map(DURATION.match, text.splitlines()):
        if m:
            out.setdefault(m.group(3), {})[m.group(2)] = float(m.group(1))
    return out


def slowest(doc: dict) -> list[dict]:
    """The ten slowest tests of runs.before by wall seconds, each with its runs.after cost (None: not measured)."""
    before = doc.get("runs", {}).get("before", {}).get("tests", {})
    after = doc.get("runs", {}).get("after", {}).get("tests", {})
    top = sorted(before, key=lambda k: -before[k]["wall_s"])[:TOP]
    return [{"test": k, "before_s": before[k]["wall_s"], "after_s": after.get(k, {}).get("wall_s"),
             "before_cpu_s": before[k]["cpu_s"], "after_cpu_s": after.get(k, {}).get("cpu_s")} for k in top]


def file_totals(doc: dict) -> dict:
    """Each measured file's whole process, before and after: {file: {before_s, after_s}}."""
    runs = doc.get("runs", {})
    names = dict.fromkeys([*runs.get("before", {}).get("files", {}), *runs.get("after", {}).get("files", {})])
    return {f: {lab: runs.get(lab, {}).get("files", {}).get(f, {}).get("wall_s") for lab in ("before", "after")}
            for f in names}


def record(doc: dict, label: str, part: str, value, root: Path, argv: list[str]) -> dict:
    """value into runs.label.part: a dict of tests or files is merged into what earlier commands measured there
    (one label may be measured a few files at a time); the command's own record beside it."""
    run = doc.setdefault("runs", {}).setdefault(label, {})
    run[part] = {**run.get(part, {}), **value} if part in ("tests", "files") else value
    run[f"{part}_measured"] = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), **commit(root),
                               "machine": machine(), "command": "python tools/test_durations.py " + " ".join(argv)}
    return {**doc, "slowest": slowest(doc), "files": file_totals(doc)}
