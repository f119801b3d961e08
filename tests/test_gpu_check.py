"""tools/gpu_check.py, the one prepared accelerator check (issue 15), kept from rotting on CPU:

- its `--dry` mode (the same code at tiny sizes, Triton in its interpreter) runs in a subprocess and every
  section passes;
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

from conftest import load_tool

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "gpu_check.py"
FORBIDDEN = ("mlflow", "dvc", "hydra", "omegaconf", "streamlit", "gguf")  # not on the accelerator machine
ERRORS_MODULE = ROOT / "src" / "draftlab" / "errors.py"  # issue 14: DraftlabError leaves draftlab.config

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
    report = tmp / "imports.json"
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "DRAFTLAB_KERNELS")}
    proc = subprocess.run([sys.executable, "-c", GUARD, ",".join(FORBIDDEN), str(report), str(SCRIPT), "--dry",
                           "--out-dir", str(tmp), "--budget-s", "540"],  # every section, even on a loaded machine
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    out = json.loads((tmp / "gpu_check.json").read_text()) if (tmp / "gpu_check.json").exists() else None
    return SimpleNamespace(proc=proc, out=out, doc=tmp / "gpu.md",
                           imports=json.loads(report.read_text()) if report.exists() else None)


def test_dry_mode_runs_every_section(dry_run):
    p, out = dry_run.proc, dry_run.out
    assert out is not None, f"no result written; stderr:\n{p.stderr[-3000:]}"
    status = {k: v["status"] for k, v in out["sections"].items()}
    errors = {k: v.get("error") or v.get("errors") for k, v in out["sections"].items() if v["status"] != "ok"}
    assert status == {s: "ok" for s in ("kernels", "engine", "concurrency", "seeded", "specopd", "specopd_scale")}, errors
    assert p.returncode == 0 and out["ok"] and out["schema"] == "draftlab-gpu-check-v1"
    assert out["environment"]["triton_interpret"]  # (its time is the budget logic's test below, not asserted here)
    s = out["sections"]
    assert {(r["kernel"], r["dtype"]) for r in s["kernels"]["results"]} == {
        (k, d) for k in ("transition_scores", "greedy_walk", "tv_overlap") for d in ("float32", "bfloat16")}
    ident = s["engine"]["identity"]
    assert {(r["arch"], r["dtype"]) for r in ident} == {(a, d) for a in ("llama", "qwen3") for d in ("float32", "bfloat16")}
    assert {r["streams"] for r in ident} == {1, 4} and all(r["ok"] for r in ident)
    assert max(r["tau"] for r in ident if r["engine"] == "speculative/bigram") > 1.5  # blocks really get accepted
    assert {r["rule"] for r in s["engine"]["sampling"]["rules"]} == {"residual", "pointmass"}
    seeded = s["seeded"]  # the seeded drafter's rounds (issue 20 item 6)
    assert set(seeded["levels"]) == {"1", "2"}
    for lvl in seeded["levels"].values():
        assert set(lvl["arms"]) == {"dflash", "dflash-seeded", "dflash-seeded-cut"}
        for name, a in lvl["arms"].items():
            assert set(a["round_ms"]) == {"draft", "propose", "verify", "commit"} and a["tau"] >= 1
            assert (a["seeded_slot_share"] > 0) == name.startswith("dflash-seeded")  # looping prompts: seeds exist
        assert lvl["arms"]["dflash-seeded-cut"]["mean_verified_width"] <= lvl["arms"]["dflash-seeded"]["mean_verified_width"]
    assert "Seeded drafter rounds" in dry_run.doc.read_text()
    conc = s["concurrency"]
    for lvl in conc["levels"].values():
        assert set(lvl["arms"]) == {"dflash", "dcoco", "dspark", "domino"} and set(lvl["verify_ms"]) == {"1", "8", "16"}
        for a in lvl["arms"].values():
            assert set(a["round_ms"]) == {"draft", "propose", "verify", "commit"} and a["break_even_tau"] > 0
        assert lvl["ar"]["step_ms"] > 0
    if (ROOT / "results" / "benchmark.json").exists():
        assert "projected_tokens_per_s_ratio" in conc["levels"]["1"]["arms"]["dcoco"]
    arms = s["specopd"]["arms"]
    assert arms["branch_parallel"]["positions"] > 0 and arms["sequential_b1"]["branch_parallel_ratio"] > 0
    scale = s["specopd_scale"]  # the gpu profile's SpecOPD shape (W=15), chunked, at tiny sizes
    assert scale["W"] == 15 and scale["chunk_rows"] < scale["rows"] and scale["vocab_chunk"] < scale["vocab"]
    assert set(scale["cases"]) == {"t1_eval", "update"} and all(c["positions"] > 0 for c in scale["cases"].values())
    doc = dry_run.doc.read_text()
    assert "Dry mode" in doc and "PROJECTED" not in doc.split("Dry mode")[0]
    assert all(h in doc for h in ("### 1.", "### 2.", "### 3.", "### 4.", "### 5."))


def test_imports_only_what_the_accelerator_has(dry_run):
    """The whole dry run (every section) under the import guard: nothing the accelerator lacks is loaded."""
    rep = dry_run.imports
    assert rep is not None, dry_run.proc.stderr[-2000:]
    hits = rep["forbidden"]
    if hits and not ERRORS_MODULE.exists():
        # Expected until issue 14 lands: library packages import DraftlabError from draftlab.config, whose
        # module imports omegaconf. Anything else is a real problem and fails here.
        others = [h for h in hits if not (h["module"] == "omegaconf" and "draftlab/config.py" in (h["imported_from"] or ""))]
        assert not others, others
        pytest.xfail(f"issue 14 pending: draftlab.config imports omegaconf ({hits[0]['imported_from']})")
    assert not hits, f"the accelerator machine lacks these: {hits}"


def _script():
    return load_tool("gpu_check")


@pytest.mark.parametrize("argv,needle", [(["--sections", "nosuch"], "--sections"), (["--streams", "1,x"], "--streams"),
                                         (["--streams", "0"], "positive"), (["--budget-s", "-1"], "--budget-s"),
                                         (["--render", "/nonexistent.json"], "cannot read")])
def test_bad_input_is_one_line(argv, needle, capsys):
    assert _script().main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and needle in err and "\n" not in err


def test_importing_the_script_imports_nothing_heavy():
    code = (f"import importlib.util, sys; s = importlib.util.spec_from_file_location('g', {str(SCRIPT)!r}); "
            "m = importlib.util.module_from_spec(s); s.loader.exec_module(m); "
            "bad = [k for k in ('torch', 'triton', 'transformers', 'draftlab') if k in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stderr  # so --dry can set TRITON_INTERPRET first; no CUDA at import


def test_doc_splice_keeps_the_prose(tmp_path):
    g = _script()
    doc = tmp_path / "gpu.md"
    doc.write_text(f"# GPU\n\nprose before\n\n{g.DOC_BEGIN}\nold figures\n{g.DOC_END}\n\nprose after\n")
    out = {"schema": g.SCHEMA, "environment": {"mode": "full", "device": "X"}, "sections": {}, "budget_s": 1}
    g.write_outputs(out, tmp_path / "m.json", doc)
    text = doc.read_text()
    assert "prose before" in text and "prose after" in text and "old figures" not in text and "**X**" in text
    assert json.loads((tmp_path / "m.json").read_text())["schema"] == g.SCHEMA
    assert g.main(["--render", str(tmp_path / "m.json"), "--out", str(tmp_path / "copy.json"), "--doc", str(doc)]) == 0
    copy = json.loads((tmp_path / "copy.json").read_text())
    assert copy["environment"].pop("git_sha_source") == "HEAD when rendered"  # the device run had no .git
    copy["environment"].pop("git_sha")
    assert copy == out


def test_divergence_is_located_and_judged():
    g = _script()
    sys.path.insert(0, str(ROOT / "src"))
    t = g.build_target(torch.device("cpu"), torch.float32, "llama", 64, 32, 2, 4, 2, 64, seed=5)
    prompts = [[3, 4, 5], [7, 8]]
    ref = [g.lib_decoding().generate_ar(t, [p], 6, eos_ids=[]).tokens[0] for p in prompts]
    assert g.compare_streams(t, prompts, ref, ref, torch.float32) == {"identical": True, "ok": True, "divergences": []}
    bad = [ref[0], ref[1][:3] + [(ref[1][3] + 1) % 64] + ref[1][4:]]
    r = g.compare_streams(t, prompts, ref, bad, torch.float32)
    assert not r["identical"] and not r["ok"]
    (d,) = r["divergences"]
    assert d["stream"] == 1 and d["index"] == 3 and d["gap"] > d["tol"] and not d["near_tie"]


def test_budget_skips_stream_counts_and_says_so():
    g = _script()
    sys.path.insert(0, str(ROOT / "src"))
    ctx = SimpleNamespace(dev=torch.device("cpu"), dry=True, size=g.DRY, budget=g.Budget(0.0), cache={},
                          sections=["concurrency"], streams=(1, 2, 3))
    res = g.section_concurrency(ctx)
    assert list(res["levels"]) == ["1"] and res["skipped_streams"] == [2, 3] and res["status"] == "partial"
    assert "skipped [2, 3] streams" in res["notes"][0]


def test_projection_uses_each_correctors_own_base(tmp_path):
    """The CPU τ ratio of a corrector is over its own base drafter: the seeded arms when the run has them."""
    g = _script()
    bench = tmp_path / "benchmark.json"
    summ = {"dflash": {"tau_t0": 1.2}, "dcoco": {"tau_t0": 1.8}, "dflash-seeded": {"tau_t0": 3.0},
            "dcoco-seeded": {"tau_t0": 3.3}, "domino-seeded": {"tau_t0": 2.7}}
    bench.write_text(json.dumps({"summary": summ}))
    taus, src = g.tau_ratios_cpu(bench)
    assert taus == pytest.approx({"dflash": 1.0, "dcoco": 1.1, "domino": 0.9}) and "dspark" not in taus
    assert "dflash-seeded" in src
    del summ["dflash-seeded"]  # a run with plain methods only
    bench.write_text(json.dumps({"summary": summ}))
    taus, src = g.tau_ratios_cpu(bench)
    assert taus == pytest.approx({"dflash": 1.0, "dcoco": 1.5}) and "seeded" not in src
    assert g.tau_ratios_cpu(tmp_path / "absent.json") == ({}, "results/benchmark.json absent: no projection")
