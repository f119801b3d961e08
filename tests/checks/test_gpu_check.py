"""tools/gpu_check.py (over draftlab.checks), the one prepared accelerator check, kept from rotting on CPU:

- its `--dry` mode (the same code at tiny sizes, Triton in its interpreter) runs in a subprocess and every section
  passes; the sanity gates a CPU can judge are each evaluated and reported with the value judged, its limit and
  rule, and recomputed here from the figures the run recorded — whether they hold is this machine's business (a
  CPU rehearsal beside other work is not quiet, and the dry run fails nothing on them): no test asserts a timing
  (tests/checks/test_checks_timing.py plants each gate's violation on fake figures);
- that same run happens under an import guard that records every import of a package the accelerator machine
  lacks (mlflow, dvc, hydra, omegaconf, streamlit, gguf) together with the file that imported it;
- bad input is a one-line error; the docs block is spliced without touching the prose; a divergence is located
  and judged; the time budget skips stream counts and says so.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from draftlab.checks import engine, gates, models, report, run
from draftlab.checks.common import SCHEMA, Budget, Ctx
from draftlab.corrector.families import records

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "gpu_check.py"
FORBIDDEN = ("mlflow", "dvc", "hydra", "omegaconf", "streamlit", "gguf")  # not on the accelerator machine

# Runs the script as __main__ with a meta-path finder in front that wraps the loader of every forbidden
# top-level package: an actual load is recorded with the first non-importlib frame (the importing file), and
# then proceeds, so one run both proves the sections and lists every forbidden import they reach.
GUARD = r"""
import importlib.abc, json, os, runpy, sys
FORBIDDEN = set(sys.argv[1].split(","))
REPORT = sys.argv[2]
seen = []

class Recorder(importlib.abc.Loader):
    def __init__(self, inner, name):
        self.inner, self.name = inner, name
    def __getattr__(self, attr):
        return getattr(self.inner, attr)
    def create_module(self, spec):
        return self.inner.create_module(spec)
    def exec_module(self, module):
        frame, where = sys._getframe(1), None
        while frame is not None:
            f = frame.f_code.co_filename
            if not (f.startswith("<") or "importlib" in f):
                where = f"{f}:{frame.f_lineno}"
                break
            frame = frame.f_back
        seen.append({"module": self.name, "imported_from": where})
        return self.inner.exec_module(module)

class Guard(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name not in FORBIDDEN:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is None:
                continue
            if spec.has_location and hasattr(spec.loader, "exec_module"):
                spec.loader = Recorder(spec.loader, name)  # recorded when really loaded
            else:  # namespace or built-in package: recorded when looked up
                seen.append({"module": name, "imported_from": None})
            return spec
        return None

sys.meta_path.insert(0, Guard())
script, args = sys.argv[3], sys.argv[4:]
sys.argv = [script] + args
code = 0
try:
    runpy.run_path(script, run_name="__main__")
except SystemExit as e:
    code = e.code
finally:
    third = sorted({m.split(".")[0] for m in sys.modules} - set(sys.stdlib_module_names) - {"__main__"})
    with open(REPORT, "w") as f:
        json.dump({"forbidden": seen, "top_level_modules": third}, f)
sys.exit(code)
"""


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gpu_check")
    rep = tmp / "imports.json"
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "DRAFTLAB_KERNELS")}
    proc = subprocess.run([sys.executable, "-c", GUARD, ",".join(FORBIDDEN), str(rep), str(SCRIPT), "--dry",
                           "--out-dir", str(tmp), "--commit", "0123abc"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    out = json.loads((tmp / "gpu_check.json").read_text()) if (tmp / "gpu_check.json").exists() else None
    return SimpleNamespace(proc=proc, out=out, doc=tmp / "gpu.md",
                           imports=json.loads(rep.read_text()) if rep.exists() else None)


CPU_GATES = {"break_even_tau_ge_1", "verify16_ge_verify1", "ar_step_matches_verify1", "first_arm_retimed"}  # the
# gates a CPU can judge (the copy gate needs a datasheet bandwidth)
RECORD_EPS = 5e-6  # each float of the JSON keeps 6 significant digits (`checks.common.rnd`): relative error <= 5e-6


def recorded_tol(value: float) -> float:
    """How far a gate's value recomputed from the recorded (rounded) figures may lie from the recorded value: a ratio
    a / b moves by <= 3 eps x value, |a - b| / b by <= eps (2 + 3 x value) (a / b <= 1 + value), |r - 1| by
    <= eps (1 + 2 x value); twice the largest."""
    return 2 * RECORD_EPS * (2 + 3 * abs(value))


def recomputed_gates(conc: dict) -> dict:
    """The gates recomputed from what the concurrency section recorded, as the section computes them: per level the
    p20 of the AR step, of each verify width and of each arm's round; the re-time furthest from 1; the floor."""
    flat = {k: {"ar_step_ms": v["ar"]["step_p20_ms"], "verify_ms": v["verify_p20_ms"],
                "arms": {a: x["round_total_p20_ms"] for a, x in v["arms"].items()}} for k, v in conc["levels"].items()}
    retimes = [v["retime"] for v in conc["levels"].values() if v.get("retime")]
    retime = max(retimes, key=lambda r: abs(r["ratio"] - 1.0)) if retimes else None
    return gates.gate_values(flat, retime, conc.get("ar_step_over_floor"))


def test_dry_mode_runs_every_section_and_reports_every_gate(dry_run):
    """Every section passes, whatever this machine's timings; each CPU-judgeable gate is reported with its value,
    limit and rule, its verdict is its rule applied to its value, the values are what the recorded figures give,
    and a gate that does not hold is named in the section's notes (reported, not judged)."""
    p, out = dry_run.proc, dry_run.out
    assert out is not None, f"no result written; stderr:\n{p.stderr[-3000:]}"
    status = {k: v["status"] for k, v in out["sections"].items()}
    errors = {k: v.get("error") or v.get("errors") or v.get("notes") for k, v in out["sections"].items()
              if v["status"] != "ok"}
    assert status == {s: "ok" for s in run.SECTIONS}, errors
    assert out["ok"] and out["schema"] == SCHEMA
    assert out["environment"]["triton_interpret"] and out["environment"]["git_sha"] == "0123abc"
    fl = out["ar_step_over_floor"]
    assert fl["value"] > 0 and fl["copy_gbps"] > 0 and fl["valid"] is False and "datasheet" in fl["why"]
    s = out["sections"]
    assert {(r["kernel"], r["dtype"]) for r in s["kernels"]["results"]} == {
        (k, d) for k in ("transition_scores", "greedy_walk", "tv_overlap") for d in ("float32", "bfloat16")}
    ident = s["engine"]["identity"]
    assert {(r["arch"], r["dtype"]) for r in ident} == {(a, d) for a in ("llama", "qwen3") for d in ("float32", "bfloat16")}
    assert {r["streams"] for r in ident} == {1, 4} and all(r["ok"] for r in ident)
    assert max(r["tau"] for r in ident if r["engine"] == "speculative/bigram") > 1.5  # blocks really get accepted
    assert {r["rule"] for r in s["engine"]["sampling"]["rules"]} == {"residual", "pointmass"}
    conc = s["concurrency"]
    assert set(conc["levels"]) == {str(n) for n in run.DRY["streams"]}
    for lvl in conc["levels"].values():
        assert set(lvl["arms"]) == {"dflash", *records()} and set(lvl["verify_ms"]) == {"1", "8", "16"}
        for a in lvl["arms"].values():
            assert set(a["round_ms"]) == set(a["round_p20_ms"]) == {"draft", "propose", "verify", "commit"}
            assert a["round_total_p20_ms"] <= a["round_total_ms"]  # a quantile below the median of the same rounds
            ratio = a["round_total_ms"] / lvl["ar"]["step_ms"]  # break-even τ as the section defines it
            assert abs(a["break_even_tau"] - ratio) <= recorded_tol(ratio), (a["break_even_tau"], ratio)
        assert lvl["ar"]["step_ms"] > 0 and lvl["retime"]["ratio"] > 0 and len(lvl["order"]) == run.DRY["reps"]
    # the gates: evaluated, reported with value, limit and rule, as the recorded figures give them
    values = conc["sanity_gate_values"]
    assert set(values) == set(conc["sanity_gates"]) == CPU_GATES
    assert out["sanity_gates"] == conc["sanity_gates"] and out["sanity_gate_values"] == values
    again = recomputed_gates(conc)
    assert set(again) == CPU_GATES
    for name, g in values.items():
        assert set(g) == {"value", "limit", "rule", "holds"} and isinstance(g["value"], float)
        assert (g["limit"], g["rule"]) == (gates.LIMITS[name], gates.RULES[name])
        assert g["holds"] is conc["sanity_gates"][name]
        tol = recorded_tol(g["value"])
        assert abs(again[name]["value"] - g["value"]) <= tol, (name, again[name]["value"], g["value"])
        assert g["holds"] == gates.holds(name, g["value"]) or abs(g["value"] - g["limit"]) <= tol, (name, g)
    failed = sorted(k for k, v in conc["sanity_gates"].items() if not v)
    named = [n for n in conc["notes"] if n.startswith("sanity gates failed")]
    assert (named == []) == (failed == []) and all(k in named[0] for k in failed), (failed, named)
    assert not failed or "reported, not judged" in named[0]
    assert "projected" not in json.dumps(conc)  # a CPU τ times a GPU round time of another model: dropped
    seeded = s["seeded"]  # the cycling target: the seeds are found and accepted
    assert seeded["measures_seeding"] and set(seeded["levels"]) == {"1", "2"}
    for lvl in seeded["levels"].values():
        a = lvl["arms"]
        assert a["dflash"]["seeded_slot_share"] == 0 and a["dflash-seeded"]["seeded_slot_share"] > 0.2
        assert a["dflash-seeded"]["tau"] > 2 and a["dflash"]["tau"] < a["dflash-seeded"]["tau"]
        assert a["dflash-seeded-cut"]["mean_verified_width"] <= a["dflash-seeded"]["mean_verified_width"]
    doc = dry_run.doc.read_text()
    assert "Dry mode" in doc and "Sanity gates" in doc and "bandwidth floor" in doc and "Seeded drafter rounds" in doc
    assert "| gate | value | limit | holds |" in doc and "reported, not judged" in doc
    assert all(h in doc for h in ("### 1.", "### 2.", "### 3."))


def test_the_compiled_section_runs_last_within_its_graphs(dry_run):
    """The compiled engine is measured in its own last section, after every eager figure: AR and one DFlash arm at one
    batch size, <= 8 graphs planned and compiled (here with the `eager` backend under the CPU emulation of CUDA
    graphs' memory rule), greedy output identical to the eager arms', no CUDA-graph fallback, compile seconds per
    step recorded apart from the timings; and the concurrency section ran eager (`--compile auto`)."""
    out = dry_run.out
    assert list(out["sections"])[-1] == "compiled"
    c = out["sections"]["compiled"]
    assert c["status"] == "ok" and c["backend"] == "eager", c
    assert c["graphs_planned"] == sum(c["graphs"].values()) == 4 <= 8
    assert set(c["compile_s"]) == {"stream_step", "context_step", "block_step"}
    assert all(v["identical"] for v in c["identity"].values()) and c["cudagraph_skips"] == 0
    assert out["sections"]["concurrency"]["compiled"]["target"] == "off"
    assert "The compiled engine" in dry_run.doc.read_text()


def test_the_dry_run_records_its_time_against_its_budget(dry_run):
    """The run keeps its budget and each section's, and the seconds each section took inside the run's wall time
    (the check skips what its budget cannot hold; no test judges this machine's speed)."""
    out = dry_run.out
    assert out["budget_s"] == run.DRY["budget_s"] and out["section_budgets_s"] == run.DRY["section_s"]
    secs = [v["seconds"] for v in out["sections"].values()]
    assert all(x >= 0 for x in secs) and set(out["sections"]) == set(run.SECTIONS)
    assert sum(secs) <= out["wall_s"] + 0.005 * (len(secs) + 1)  # each figure rounded to 0.01 s


def test_imports_only_what_the_accelerator_has(dry_run):
    """The whole dry run (every section) under the import guard: nothing the accelerator lacks is loaded."""
    rep = dry_run.imports
    assert rep is not None, dry_run.proc.stderr[-2000:]
    assert not rep["forbidden"], f"the accelerator machine lacks these: {rep['forbidden']}"


@pytest.mark.parametrize("argv,needle", [(["--sections", "nosuch"], "--sections"), (["--streams", "1,x"], "--streams"),
                                         (["--streams", "0"], "positive"), (["--budget-s", "-1"], "--budget-s"),
                                         (["--render", "/nonexistent.json"], "cannot read")])
def test_bad_input_is_one_line(argv, needle, capsys):
    assert run.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and needle in err and "\n" not in err


def test_importing_the_script_imports_nothing_heavy():
    code = (f"import importlib.util, sys; s = importlib.util.spec_from_file_location('g', {str(SCRIPT)!r}); "
            "m = importlib.util.module_from_spec(s); s.loader.exec_module(m); "
            "bad = [k for k in ('torch', 'triton', 'transformers', 'draftlab') if k in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stderr  # so --dry can set TRITON_INTERPRET first; no CUDA at import


def test_doc_splice_keeps_the_prose_and_render_refuses_another_schema(tmp_path, capsys):
    doc = tmp_path / "gpu.md"
    doc.write_text(f"# GPU\n\nprose before\n\n{report.DOC_BEGIN}\nold figures\n{report.DOC_END}\n\nprose after\n")
    out = {"schema": SCHEMA, "environment": {"mode": "full", "device": "X", "git_sha": "abc"}, "sections": {},
           "budget_s": 1}
    run.write_outputs(out, tmp_path / "m.json", doc)
    text = doc.read_text()
    assert "prose before" in text and "prose after" in text and "old figures" not in text and "**X**" in text
    assert run.main(["--render", str(tmp_path / "m.json"), "--out-dir", str(tmp_path / "copy")]) == 0
    assert json.loads((tmp_path / "copy" / "gpu_check.json").read_text()) == out
    (tmp_path / "v1.json").write_text(json.dumps({**out, "schema": "draftlab-gpu-check-v1"}))
    capsys.readouterr()
    assert run.main(["--render", str(tmp_path / "v1.json"), "--out-dir", str(tmp_path / "no")]) == 2
    err = capsys.readouterr().err.strip()
    assert "schema 'draftlab-gpu-check-v1'" in err and "\n" not in err and not (tmp_path / "no").exists()


def test_divergence_is_located_and_judged():
    from draftlab.decoding.ar import generate_ar

    t = models.build_target(torch.device("cpu"), torch.float32, "llama", 64, 32, 2, 4, 2, 64, seed=5)
    prompts = [[3, 4, 5], [7, 8]]
    ref = [generate_ar(t, [p], 6, eos_ids=[]).tokens[0] for p in prompts]
    assert engine.compare_streams(t, prompts, ref, ref, torch.float32) == {"identical": True, "ok": True,
                                                                           "divergences": []}
    bad = [ref[0], ref[1][:3] + [(ref[1][3] + 1) % 64] + ref[1][4:]]
    r = engine.compare_streams(t, prompts, ref, bad, torch.float32)
    assert not r["identical"] and not r["ok"]
    (d,) = r["divergences"]
    assert d["stream"] == 1 and d["index"] == 3 and d["gap"] > d["tol"] and not d["near_tie"]


def test_a_section_budget_skips_stream_counts_and_says_so():
    from draftlab.checks.concurrency import section_concurrency

    ctx = Ctx(dev=torch.device("cpu"), dry=True, size=run.DRY, budget=Budget(60.0), sections=["concurrency"],
              streams=(1, 2, 3), section=Budget(0.0))
    res = section_concurrency(ctx)
    assert list(res["levels"]) == ["1"] and res["skipped_streams"] == [2, 3]
    assert res["status"] == "partial"  # a dry run's gates are reported, not judged: only the skip counts
    assert "skipped [2, 3] streams" in res["notes"][0]


def test_a_gate_that_does_not_hold_fails_the_section_only_on_an_accelerator(monkeypatch):
    """A gate planted to fail (the re-time gate's limit below any |ratio - 1|): a rehearsal (`dry`) reports it with
    its value and names it in the notes, its status unchanged; the same section as an accelerator run fails."""
    from draftlab.checks.concurrency import section_concurrency

    monkeypatch.setitem(gates.LIMITS, "first_arm_retimed", -1.0)
    for dry, status in ((True, "ok"), (False, "failed")):
        ctx = Ctx(dev=torch.device("cpu"), dry=dry, size=run.DRY, budget=Budget(600.0), sections=["concurrency"],
                  streams=(1,), section=Budget(600.0))
        res = section_concurrency(ctx)
        g = res["sanity_gate_values"]["first_arm_retimed"]
        assert res["sanity_gates"]["first_arm_retimed"] is False and g["limit"] == -1.0 and g["value"] >= 0
        assert res["status"] == status and not res["errors"], (dry, res["status"], res["errors"], res["notes"])
        (note,) = [n for n in res["notes"] if n.startswith("sanity gates failed")]
        assert "first_arm_retimed" in note and ("reported, not judged" in note) == dry
