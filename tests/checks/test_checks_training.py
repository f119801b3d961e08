"""The accelerator check's training sections (issue 40, item 5) in dry mode on CPU: `flex` (block-sparse flex
attention vs dense vs split: exactness and cost with TFLOP/s), `specopd` (branch-parallel SpecOPD vs the sequential
Draft-OPD loop batched over streams, and at equal supervised positions), `specopd_scale` (memory at the `gpu`
profile's shapes, the plan's per-device one included, beside the plan's prediction).

Everything that runs a section runs once, in one subprocess with TRITON_INTERPRET=1 set before anything imports
Triton (the `specopd` section routes the library's kernels to Triton in --dry, as the whole check does; one process
also pays flex attention's first-call costs once): the three sections through a `Ctx` of the dry sizes, the list of
loaded modules the accelerator machine lacks, the flex section under a budget that fits only part of it or nothing,
and its gradient path (CUDA's) with the flex kernel replaced by SDPA over the BlockMask's tiles.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from draftlab.checks import flex, scale, specopd

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ("mlflow", "dvc", "hydra", "omegaconf", "streamlit", "gguf", "lightning")
SECTIONS = {"flex": "flex", "specopd": "specopd", "specopd_scale": "scale"}

RUN = r"""
import importlib, json, os, sys, time
os.environ["TRITON_INTERPRET"] = "1"
import torch
import torch.nn.functional as F
torch.set_num_threads(1)
from draftlab.checks.common import Budget, Ctx
from draftlab.checks.models import DRY_TARGET
size = dict(target=DRY_TARGET, drafter=dict(block_size=16, num_layers=1))


def ctx_for(name, size, seconds=60.0):
    ctx = Ctx(dev=torch.device("cpu"), dry=True, size=size, budget=Budget(60), sections=[name], streams=(1,))
    ctx.section = Budget(seconds)
    return ctx


out = {}
for name, mod in json.loads(sys.argv[1]).items():
    m = importlib.import_module(f"draftlab.checks.{mod}")
    t = time.perf_counter()
    sec = getattr(m, f"section_{name}")(ctx_for(name, size))
    out[name] = {"sec": sec, "seconds": time.perf_counter() - t, "render": getattr(m, f"render_{name}")(sec)}
out["loaded"] = sorted(k for k in sys.modules if k.split(".")[0] in sys.argv[3].split(",")
                       or k in ("draftlab.config", "draftlab.params"))

# the budget rule: the exactness step fits, the cost step does not; then nothing fits
from draftlab.checks import flex
tight = dict(size, flex=dict(flex.DRY_FLEX, need_s=dict(exact=0.0, cost=1e9)))
out["flex_partial"] = flex.section_flex(ctx_for("flex", tight))
out["flex_none"] = flex.section_flex(ctx_for("flex", tight, 0.0))

# the gradient path (CUDA's) with flex attention's kernel replaced by SDPA over the BlockMask's tiles
from draftlab.drafter import flex as dflex


def kernel(q, k, v, block_mask, scale, enable_gqa):  # flex attention's contract, computed densely
    return F.scaled_dot_product_attention(q, k, v, attn_mask=dflex.tile_mask(block_mask)[:, None], scale=scale,
                                          enable_gqa=enable_gqa)


dflex._kernel = lambda device: kernel
s = flex.DRY_FLEX["exact"][0]
out["flex_grad"] = {"exact": flex.exactness(s, torch.device("cpu"), True, 8),
                    "cost": flex.cost(s, torch.device("cpu"), torch.float32, 2, True, 8)}
open(sys.argv[2], "w").write(json.dumps(out))  # JSON-able
"""


@pytest.fixture(scope="module")
def dry(tmp_path_factory):
    path = tmp_path_factory.mktemp("dry") / "sections.json"
    env = {k: v for k, v in os.environ.items() if k != "DRAFTLAB_KERNELS"}
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", RUN, json.dumps(SECTIONS), str(path), ",".join(FORBIDDEN)], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(path.read_text())


def _table(lines: list[str]) -> bool:
    return any(x.startswith("### ") for x in lines) and any(x.startswith("|---") for x in lines)


def test_flex_section(dry):
    sec = dry["flex"]["sec"]
    assert sec["status"] == "ok", sec
    assert sec["flex_available"] and sec["grad"] is False and "forward only" in sec["note"]
    (ex,) = sec["exact"]
    assert ex["ok"] and set(ex["checks"]) == {"out"} and ex["skipped_tile_pct"] > 0  # 8-position tiles skip some
    c = sec["cost"]
    assert set(c) >= {"shape", "dtype", "grad", "skipped_tile_pct", "block_mask_ms", "reps", "clock", "paths",
                      "flex_speedup"}
    assert set(c["paths"]) == {"flex", "dense", "split"}
    for p, r in c["paths"].items():
        assert set(r) >= {"ms", "first_s", "tflop", "tflop_per_s", "peak_allocated_gib", "peak_reserved_gib"}, p
        assert r["ms"] > 0 and r["tflop"] > 0 and r["peak_allocated_gib"] is None  # no device memory on CPU
    # flex computes only the kept tiles, split the whole context, dense everything
    assert c["paths"]["flex"]["tflop"] < c["paths"]["dense"]["tflop"]
    assert c["paths"]["split"]["tflop"] < c["paths"]["dense"]["tflop"]
    assert _table(dry["flex"]["render"])


def test_specopd_section(dry):
    sec = dry["specopd"]["sec"]
    assert sec["status"] == "ok", sec
    s = specopd.DRY_SPECOPD
    assert list(sec["arms"]) == ["branch_parallel", "branch_parallel_equal", "sequential_b2", "sequential_b1"]
    for name, a in sec["arms"].items():
        assert set(a) >= {"kind", "batch", "positions", "step_s", "positions_per_s", "steps", "first_s",
                          "peak_allocated_gib", "peak_reserved_gib"}, name
        assert a["positions"] > 0 and a["step_s"] > 0
    assert sec["arms"]["sequential_b2"]["batch"] == 2  # the sequential loop batched over streams
    assert sec["arms"]["sequential_b2"]["positions"] == 2 * s["rounds"] * s["W"]
    eq = sec["equal_positions"]
    assert eq["positions"][0] == eq["positions"][1] == 2 * s["rounds"] * s["W"]  # equal by construction
    assert eq["update_time_ratio"] > 0 and "branch_parallel_ratio" in sec["arms"]["sequential_b1"]
    assert "dispatch-bound" in sec["note"] and "eager" in sec["engine"]
    assert _table(dry["specopd"]["render"])


def test_specopd_scale_section(dry):
    sec = dry["specopd_scale"]["sec"]
    assert sec["status"] == "ok", sec
    assert list(sec["cases"]) == ["update_per_device", "t1_eval", "update"]
    for name, c in sec["cases"].items():
        assert set(c) >= {"shape", "rows", "grad", "s", "steps", "positions", "peak_allocated_gib",
                          "peak_reserved_gib", "predicted_gib"}, name
        assert c["predicted_gib"] > 0 and c["positions"] > 0
        if c["grad"]:  # the plan's per-rank figure with DDP's gradient buckets is larger
            assert c["predicted_ddp_gib"] > c["predicted_gib"]
    assert sec["cases"]["update_per_device"]["shape"]["B"] == 1
    assert _table(dry["specopd_scale"]["render"])


def test_dry_sections_import_nothing_the_accelerator_lacks(dry):
    """(How long the sections take on this machine is not the test's: a timing belongs in a benchmark.)"""
    assert dry["loaded"] == []


def test_the_plan_device_shape_is_the_gpu_profile():
    """scale.GPU_PROFILE copies the gpu profile's composition (conf/profile/gpu.yaml and the presets it picks; the
    accelerator machine has no OmegaConf): keep them equal."""
    from draftlab.params import compose_params

    prof = compose_params(["profile=gpu"], ROOT / "conf")
    g = scale.GPU_PROFILE
    assert (g["batch_size"], g["anchors_per_seq"], g["chunk_rows"], g["vocab_chunk"]) == tuple(
        prof["specopd"][k] for k in ("batch_size", "anchors_per_seq", "chunk_rows", "vocab_chunk"))
    assert (g["max_prompt_tokens"], g["max_new_tokens"], g["block_size"]) == (
        prof["data"]["max_prompt_tokens"], prof["reference"]["max_new_tokens"], prof["drafter"]["block_size"])
    assert scale.GPU_PLAN_DEVICE["B"] == 1 and scale.GPU_PLAN_DEVICE["L"] == 4096


def test_flex_skips_what_does_not_fit_and_says_so(dry):
    """A step whose need exceeds what is left of the section's budget is skipped and named; the rest still runs;
    when nothing fits the section is an error that says why."""
    sec = dry["flex_partial"]
    assert sec["status"] == "partial" and sec["cost"] is None and len(sec["exact"]) == 1
    assert len(sec["skipped"]) == 1 and sec["skipped"][0].startswith("cost at B=")
    sec = dry["flex_none"]
    assert sec["status"] == "error" and "left of the section's budget" in sec["error"] and not sec["exact"]
    assert len(sec["skipped"]) == 2


def test_flex_gradient_path_on_cpu_with_the_kernel_replaced(dry):
    """The section's CUDA path (the five input gradients' exactness; forward + backward timed at 3x the forward
    FLOPs) run on CPU with flex attention's kernel replaced by SDPA over the BlockMask's tiles, as
    tests/drafter/test_flex.py does."""
    ex, c = dry["flex_grad"]["exact"], dry["flex_grad"]["cost"]
    assert ex["ok"] and set(ex["checks"]) == {"out", "d_q", "d_k_ctx", "d_v_ctx", "d_k_blk", "d_v_blk"}, ex
    for p in flex.PATHS:
        assert "error" not in c["paths"][p] and c["paths"][p]["ms"] > 0, (p, c["paths"][p])
    kept = 1 - c["skipped_tile_pct"] / 100
    s = flex.DRY_FLEX["exact"][0]
    assert c["grad"] and c["paths"]["flex"]["tflop"] == pytest.approx(flex.attention_tflop(s, "flex", kept, grad=True))


def test_attention_flops():
    """4·d per (query, key) pair per head: the profile's shape has ~2.75 TFLOP of dense forward attention; split
    skips the other blocks, flex all but the kept tiles; the backward is twice the forward."""
    s = flex.PROFILE
    dense = flex.attention_tflop(s, "dense", 1.0, grad=False)
    assert dense == pytest.approx(4 * 128 * 32 * 2 * 8192 * (2048 + 8192) / 1e12)
    assert flex.attention_tflop(s, "dense", 1.0, grad=True) == pytest.approx(3 * dense)
    assert flex.attention_tflop(s, "flex", 1.0, grad=False) == pytest.approx(dense)
    assert flex.attention_tflop(s, "flex", 0.125, grad=False) == pytest.approx(dense / 8)
    assert flex.attention_tflop(s, "split", 1.0, grad=False) == pytest.approx(dense * (2048 + 16) / (2048 + 8192))

