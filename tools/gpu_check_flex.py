"""The drafter's block-sparse training attention on a CUDA device (issue 21, item 4; docs/gpu.md).

`python3 tools/gpu_check_flex.py [--out flex.json] [--dry]` compares `draftlab.drafter.flex.flex_block_attention`
(compiled flex attention with the forward's BlockMask) with the split path (`layers.block_attention`) and the
dense SDPA path, on random block-attention inputs with sorted anchors and padded context:
- exactness: outputs and the gradients of q and of the context and block K/V, in fp32, each within 4 x the split
  path's own fp32 error against a float64 run (dense SDPA) plus 8 fp32 ulps (the tolerance of tests/test_flex.py);
- cost: median ms of forward + backward and the peak allocated memory of each path, at the `gpu` profile's
  pretraining shape (A = 512 blocks of 16 over L = 2048 context positions; Qwen3-8B's 32 query / 8 kv heads of 128)
  in bf16, and the BlockMask's share of skipped tiles.
Needs only torch and `draftlab` from src/ (no pytest). `--dry` runs tiny shapes on CPU: the forward only, since
torch runs flex attention's backward on CUDA only (the CPU tests are tests/test_flex.py).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch  # noqa: E402

from draftlab.drafter import flex  # noqa: E402
from draftlab.drafter.layers import block_attention, dense_block_attention  # noqa: E402
from draftlab.drafter.masks import context_mask, sample_anchors  # noqa: E402
from draftlab.io import write_json  # noqa: E402

EXACT = dict(B=2, A=24, S=16, L=300, h=8, hk=2, d=64)
PROFILE = dict(B=2, A=512, S=16, L=2048, h=32, hk=8, d=128)
DRY = dict(B=2, A=6, S=4, L=40, h=4, hk=2, d=16)


def inputs(s: dict, dev, dtype, seed=0):
    """Random q [B, A, S, h, d], context k/v [B, hk, L, d], block k/v [B, A, S, hk, d], ctx_mask [B, A, L]."""
    g = torch.Generator().manual_seed(seed)
    B, A, S, L, h, hk, d = (s[k] for k in ("B", "A", "S", "L", "h", "hk", "d"))
    rn = lambda *shape: torch.randn(*shape, generator=g).to(dev, dtype)  # noqa: E731
    valid = torch.ones(B, L, dtype=torch.bool)
    valid[1, L - L // 8:] = False  # padding on the second row
    # sorted anchors in [L/8, the row's valid length]: every block sees context, the last ones all of it
    anchors = torch.stack([sample_anchors(L - (L // 8) * b + S, L // 8, S, A, g) for b in range(B)])  # [B, A]
    ctx = context_mask(anchors, valid).to(dev)
    return [rn(B, A, S, h, d), rn(B, hk, L, d), rn(B, hk, L, d), ctx, rn(B, A, S, hk, d), rn(B, A, S, hk, d)]


def run(path: str, x: list, s: dict, grad: bool):
    """(output, grads of q, k_ctx, v_ctx, k_blk, v_blk) of one attention path."""
    x = [t.detach().clone().requires_grad_(grad and t.dtype != torch.bool) for t in x]
    q, kc, vc, ctx, kb, vb = x
    scale = s["d"] ** -0.5
    if path == "flex":
        out = flex.flex_block_attention(q, kc, vc, flex.build_block_mask(ctx, s["S"]), kb, vb, scale)
    else:
        out = (block_attention if path == "split" else dense_block_attention)(q, kc, vc, ctx, kb, vb, scale)
    if not grad:
        return out.detach(), []
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(out)
    (out * w).sum().backward()
    return out.detach(), [t.grad for t in (q, kc, vc, kb, vb)]


def tol(r32, r64) -> float:
    return 4 * (r32.double() - r64).abs().max().item() + 8 * torch.finfo(torch.float32).eps * r64.abs().max().item()


def exactness(s: dict, dev, grad: bool) -> dict:
    x32 = inputs(s, dev, torch.float32)
    x64 = [t.double() if t.is_floating_point() else t for t in x32]
    # float64 reference: the dense SDPA path (the split path rounds its scores to fp32 whatever the input dtype)
    ref64, ref32, got = run("dense", x64, s, grad), run("split", x32, s, grad), run("flex", x32, s, grad)
    names = ["out"] + (["d_q", "d_k_ctx", "d_v_ctx", "d_k_blk", "d_v_blk"] if grad else [])
    rows = {}
    for i, n in enumerate(names):
        a64, a32, af = (ref64[0], ref32[0], got[0]) if i == 0 else (ref64[1][i - 1], ref32[1][i - 1], got[1][i - 1])
        err, t = (af.double() - a64).abs().max().item(), tol(a32, a64)
        rows[n] = {"max_err": err, "tol": t, "ok": err <= t}
    return {"shape": s, "grad": grad, "checks": rows, "ok": all(r["ok"] for r in rows.values())}


def cost(s: dict, dev, dtype, reps: int) -> dict:
    x = inputs(s, dev, dtype)
    bm = flex.build_block_mask(x[3], s["S"])
    out = {"shape": s, "dtype": str(dtype).replace("torch.", ""), "skipped_tile_pct": float(bm.sparsity())}
    for path in ("flex", "dense", "split"):
        try:
            ts = []
            for i in range(reps + 1):  # the first call compiles (flex) or warms up
                torch.cuda.synchronize(dev)
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats(dev)
                t = time.perf_counter()
                run(path, x, s, True)
                torch.cuda.synchronize(dev)
                ts.append(time.perf_counter() - t)
            out[path] = {"first_s": ts[0], "ms": 1e3 * statistics.median(ts[1:]),
                         "peak_gib": torch.cuda.max_memory_allocated(dev) / 2 ** 30}
        except Exception as e:  # noqa: BLE001  (an out-of-memory path is a result)
            out[path] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="flex_check.json")
    ap.add_argument("--dry", action="store_true", help="tiny shapes on CPU (forward only)")
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args(argv)
    cuda = torch.cuda.is_available() and not a.dry
    dev = torch.device("cuda" if cuda else "cpu")
    res = {"torch": torch.__version__, "device": torch.cuda.get_device_name(dev) if cuda else "cpu",
           "flex_available": flex.flex_available()}
    res["exact"] = [exactness(EXACT if cuda else DRY, dev, grad=cuda)]
    if cuda:
        res["exact"].append(exactness(dict(PROFILE, A=64), dev, grad=True))  # several 128-tiles per row, 64 blocks
        res["cost"] = cost(PROFILE, dev, torch.bfloat16, a.reps)
    res["ok"] = all(e["ok"] for e in res["exact"])
    write_json(a.out, res)
    print(json.dumps(res, indent=1))
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
