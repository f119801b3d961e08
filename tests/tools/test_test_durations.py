"""tools/test_durations.py, the command that writes tests/durations.json: pytest's --durations lines are read per test
and phase; the `slowest` table is the ten slowest tests of `before` with their `after` cost; a label measured a few
files at a time keeps them all; the committed file holds both runs of the slowest tests; bad input is one line."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "test_durations.py"


def _tool():
    spec = importlib.util.spec_from_file_location("test_durations_tool", TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_durations_lines_are_read_per_test_and_phase():
    text = ("=== slowest 15 durations ===\n"
            "161.02s call     tests/decoding/test_bounded_engine.py::test_the_profiles[profiles0]\n"
            "60.10s setup    tests/app/test_app_browser.py::test_explorer_in_chromium\n"
            "0.50s teardown tests/app/test_app_browser.py::test_explorer_in_chromium\n"
            "=== 990 passed in 978.12s (0:16:18) ===\n")
    t = _tool()
    assert t.parse_durations(text) == {
        "tests/decoding/test_bounded_engine.py::test_the_profiles[profiles0]": {"call": 161.02},
        "tests/app/test_app_browser.py::test_explorer_in_chromium": {"setup": 60.1, "teardown": 0.5}}
    m = t.SESSION.match(text.splitlines()[-1])
    assert m and (m.group(1), m.group(2)) == ("990 passed", "978.12")
    m = t.SESSION.match("1078 passed, 4 skipped in 499.24s (0:08:19)")  # make test's -q summary
    assert m and (m.group(1), m.group(2)) == ("1078 passed, 4 skipped", "499.24")
    assert t.SESSION.match("....... [100%]") is None


def test_the_environment_is_the_makefiles():
    """The variables `make test` gives its unit tests, read from the Makefile (its exports and the recipe's own)."""
    env = _tool().make_test_env(ROOT / "Makefile")
    assert env["OMP_WAIT_POLICY"] == "PASSIVE" and env["DRAFTLAB_INSTALL_CHROMIUM"] == "1"
    assert env["PYTHONWARNINGS"] == "ignore" and "PATH" not in env


def test_the_slowest_are_those_of_before_with_their_after_cost():
    t = _tool()
    before = {f"t{i}": {"wall_s": float(i), "cpu_s": float(i)} for i in range(14)}
    doc = {"runs": {"before": {"tests": before}, "after": {"tests": {"t13": {"wall_s": 2.0, "cpu_s": 1.5}}}}}
    rows = t.slowest(doc)
    assert [r["test"] for r in rows] == [f"t{i}" for i in range(13, 3, -1)]  # ten, slowest first
    assert (rows[0]["before_s"], rows[0]["after_s"], rows[0]["after_cpu_s"]) == (13.0, 2.0, 1.5)
    assert rows[1]["after_s"] is None  # not measured after: shown as such, not as zero


def test_a_label_measured_in_parts_keeps_every_part(tmp_path):
    t = _tool()
    doc = t.record({}, "after", "tests", {"a": {"wall_s": 1.0, "cpu_s": 1.0}}, ROOT, ["files", "after", "x"])
    doc = t.record(doc, "after", "tests", {"b": {"wall_s": 2.0, "cpu_s": 2.0}}, ROOT, ["files", "after", "y"])
    assert set(doc["runs"]["after"]["tests"]) == {"a", "b"}
    assert doc["runs"]["after"]["tests_measured"]["command"] == "python tools/test_durations.py files after y"


def test_the_committed_file_has_both_runs_of_the_ten_slowest():
    doc = json.loads((ROOT / "tests" / "durations.json").read_text())
    assert len(doc["slowest"]) == 10
    assert all(r["before_s"] > 0 and r["after_s"] is not None for r in doc["slowest"]), doc["slowest"]
    for label in ("before", "after"):
        assert doc["runs"][label]["tests_measured"]["command"].startswith("python tools/test_durations.py files")


def test_bad_input_is_one_line(tmp_path, capsys):
    t = _tool()
    assert t.main(["files", "after", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a draftlab checkout" in err
    assert t.main(["files", "after", "tests/no_such_test.py", "--out", str(tmp_path / "d.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such test file" in err and not (tmp_path / "d.json").exists()
