"""Section `flex`: the drafter's block-sparse training attention (`draftlab.drafter.flex`: compiled flex attention
with the forward's BlockMask) against the dense SDPA path and the split path, exact and at what cost.

- **exactness**: outputs and the gradients of q and of the context and block K/V, in fp32, each within 4 x the split
  path's own fp32 error against a float64 run (dense SDPA) plus 8 fp32 ulps (the tolerance of tests/drafter/test_flex.py),
  on a ragged shape (L=300: partial tiles) and on the profile's heads with several 128-tiles per row;
- **cost** at the `gpu` profile's pretraining shape (B=2 sequences, A=512 blocks of 16 over L=2048 context positions;
  Qwen3-8B's 32 query / 8 kv heads of 128) in bf16: median ms of forward + backward per path, with the attention
  TFLOP each path really computes and the TFLOP/s it reaches, and the peak allocated and reserved memory.

Made fair (the first accelerator run timed 750 / 747 / 607 ms, mostly other work): the inputs are drawn on the device
(nothing made on the host and copied); the BlockMask is built once per input, outside the timed calls, and its own
build time is reported beside them (`block_mask_ms`: what a training forward pays once, shared by every layer); no
`empty_cache()` between the timed calls; each path is timed between CUDA events, the median of `reps` calls after an
untimed first call (which compiles flex attention). FLOPs: QK^T and PV are 4·d per (query, key) pair per head;
dense computes every pair of [A·S, L + A·S], split every [A·S, L] context pair plus its own block's [S, S], flex only
the tiles its BlockMask keeps (`BlockMask.sparsity()`); forward + backward = 3 x forward.
`--dry` (CPU): the same code at tiny shapes, forward only (torch runs flex attention's backward on CUDA only), with
8-position tiles so tiles are skipped; its times are host times of tiny shapes, not figures.
"""
from __future__ import annotations

import warnings

from draftlab.checks.common import Ctx, one_line, round_tree, tail
from draftlab.checks.events import clock_name, is_cuda, reset_memory, timed
from draftlab.markdown import markdown_table

EXACT = dict(B=2, A=24, S=16, L=300, h=8, hk=2, d=64)  # ragged tiles (L=300), 24 blocks
PROFILE = dict(B=2, A=512, S=16, L=2048, h=32, hk=8, d=128)  # conf/profile/gpu.yaml pretraining, Qwen3-8B's heads
PAPER_FLEX = dict(exact=(EXACT, dict(PROFILE, A=64)), cost=PROFILE, dtype="bfloat16", reps=10, tile=None,
                  need_s=dict(exact=12.0, cost=15.0))  # seconds a step needs (compiles included) before it starts
DRY_FLEX = dict(exact=(dict(B=2, A=6, S=4, L=40, h=4, hk=2, d=16),), cost=dict(B=2, A=8, S=4, L=48, h=4, hk=2, d=16),
                dtype="float32", reps=3, tile=8, need_s=dict(exact=1.0, cost=1.0))
PATHS = ("flex", "dense", "split")


def sizes(ctx: Ctx) -> dict:
    """This section's sizes: the runner's `flex` entry when it gives one, else PAPER_FLEX / DRY_FLEX."""
    return ctx.size.get("flex") or (DRY_FLEX if ctx.dry else PAPER_FLEX)


def inputs(s: dict, dev, dtype, seed: int = 0) -> list:
    """Drawn on `dev`: q [B, A, S, h, d], context k/v [B, hk, L, d], ctx_mask [B, A, L] (padding on the second
    row; sorted anchors in [L/8, the row's valid length]), block k/v [B, A, S, hk, d]. Only the anchors, B x A
    integers, come from a host generator (the library's sampler)."""
    import torch

    from draftlab.drafter.masks import context_mask, sample_anchors

    B, A, S, L, h, hk, d = (s[k] for k in ("B", "A", "S", "L", "h", "hk", "d"))
    g = torch.Generator(device=dev).manual_seed(seed)
    rn = lambda *shape: torch.randn(*shape, generator=g, device=dev, dtype=dtype)  # noqa: E731
    valid = torch.ones(B, L, dtype=torch.bool, device=dev)
    valid[1, L - L // 8:] = False  # padding on the second row
    ga = torch.Generator().manual_seed(seed)
    anchors = torch.stack([sample_anchors(L - (L // 8) * b + S, L // 8, S, A, ga) for b in range(B)]).to(dev)
    return [rn(B, A, S, h, d), rn(B, hk, L, d), rn(B, hk, L, d), context_mask(anchors, valid), rn(B, A, S, hk, d),
            rn(B, A, S, hk, d)]


def block_mask(x: list, s: dict, tile):
    """The BlockMask of inputs x (the library's `build_block_mask`, as a training forward builds it)."""
    from draftlab.drafter import flex

    return flex.build_block_mask(x[3], s["S"], tile)


def attend(path: str, x: list, s: dict, bm):
    """One attention path on inputs x (flex reads the prebuilt BlockMask bm)."""
    from draftlab.drafter import flex
    from draftlab.drafter.layers import block_attention, dense_block_attention

    q, kc, vc, ctx, kb, vb = x
    scale = s["d"] ** -0.5
    if path == "flex":
        return flex.flex_block_attention(q, kc, vc, bm, kb, vb, scale)
    return (block_attention if path == "split" else dense_block_attention)(q, kc, vc, ctx, kb, vb, scale)


def with_grad(x: list) -> list:
    """Leaf copies of the float inputs that require gradients (the mask stays as it is)."""
    return [t.detach().clone().requires_grad_(True) if t.is_floating_point() else t for t in x]


def upstream(shape, like, seed: int = 1):
    """The fixed upstream gradient: the same fp32 draw whatever the output's dtype (so the float64 reference and
    the fp32 paths are differentiated along the same direction), on the output's device."""
    import torch

    g = torch.Generator(device=like.device).manual_seed(seed)
    return torch.randn(shape, generator=g, device=like.device, dtype=torch.float32).to(like.dtype)


def run_path(path: str, x: list, s: dict, bm, grad: bool):
    """(output, [grads of q, k_ctx, v_ctx, k_blk, v_blk]) of one path; the upstream gradient is fixed by seed."""
    import torch

    if not grad:
        with torch.no_grad():
            return attend(path, x, s, bm), []
    x = with_grad(x)
    out = attend(path, x, s, bm)
    out.backward(upstream(out.shape, out))
    return out.detach(), [t.grad for t in x if t.is_floating_point()]


def tol(r32, r64) -> float:
    import torch

    return 4 * (r32.double() - r64).abs().max().item() + 8 * torch.finfo(torch.float32).eps * r64.abs().max().item()


def exactness(s: dict, dev, grad: bool, tile) -> dict:
    """flex (fp32) against dense SDPA in float64, with the split path's fp32 error setting the tolerance."""
    import torch

    x32 = inputs(s, dev, torch.float32)
    x64 = [t.double() if t.is_floating_point() else t for t in x32]
    bm = block_mask(x32, s, tile)  # built once from ctx_mask; only the flex path reads it
    # float64 reference: the dense SDPA path (the split path rounds its scores to fp32 whatever the input dtype)
    ref64, ref32, got = (run_path("dense", x64, s, None, grad), run_path("split", x32, s, None, grad),
                         run_path("flex", x32, s, bm, grad))
    names = ["out"] + (["d_q", "d_k_ctx", "d_v_ctx", "d_k_blk", "d_v_blk"] if grad else [])
    rows = {}
    for i, n in enumerate(names):
        a64, a32, af = (ref64[0], ref32[0], got[0]) if i == 0 else (ref64[1][i - 1], ref32[1][i - 1], got[1][i - 1])
        err, t = (af.double() - a64).abs().max().item(), tol(a32, a64)
        rows[n] = {"max_err": err, "tol": t, "ok": err <= t}
    return {"shape": s, "grad": grad, "tile": tile or "default", "skipped_tile_pct": float(bm.sparsity()),
            "checks": rows, "ok": all(r["ok"] for r in rows.values())}


def attention_tflop(s: dict, path: str, kept: float, grad: bool) -> float:
    """TFLOP of one call: 4·d per (query, key) pair per head; kept = the share of [A·S, L + A·S] that flex
    computes; x3 with the backward."""
    B, A, S, L, h, d = (s[k] for k in ("B", "A", "S", "L", "h", "d"))
    Q = A * S
    pairs = {"dense": Q * (L + Q), "split": Q * (L + S), "flex": kept * Q * (L + Q)}[path]
    return 4 * d * h * B * pairs * (3 if grad else 1) / 1e12


def cost_step(path: str, x: list, s: dict, bm, grad: bool):
    """The timed call: forward (+ backward with a fixed upstream gradient) of one path on leaf inputs x."""
    import torch

    if not grad:
        def step():
            with torch.no_grad():
                return attend(path, x, s, bm)
        return step
    w = []

    def step():
        for t in x:
            if t.is_floating_point():
                t.grad = None
        out = attend(path, x, s, bm)
        if not w:
            w.append(upstream(out.shape, out))
        out.backward(w[0])

    return step


def cost(s: dict, dev, dtype, reps: int, grad: bool, tile) -> dict:
    """Median ms, TFLOP, TFLOP/s and peak memory of each path at shape s; the BlockMask built once, beforehand."""
    x = inputs(s, dev, dtype)
    x = with_grad(x) if grad else x
    build = timed(lambda: block_mask(x, s, tile), dev, reps=max(3, reps // 2), memory=False)
    bm = build["last"]
    kept = 1 - float(bm.sparsity()) / 100
    out = {"shape": s, "dtype": str(dtype).replace("torch.", ""), "grad": grad, "tile": tile or "default",
           "skipped_tile_pct": 100 * (1 - kept), "block_mask_ms": build["ms"], "reps": reps, "clock": clock_name(dev),
           "paths": {}}
    for path in PATHS:
        try:
            t = timed(cost_step(path, x, s, bm, grad), dev, reps)
            tf = attention_tflop(s, path, kept, grad)
            out["paths"][path] = {"ms": t["ms"], "ms_min": t["ms_min"], "first_s": t["first_s"], "tflop": tf,
                                  "tflop_per_s": tf / (t["ms"] / 1e3) if t["ms"] > 0 else None,
                                  "peak_allocated_gib": t.get("peak_allocated_gib"),
                                  "peak_reserved_gib": t.get("peak_reserved_gib")}
        except Exception as e:  # noqa: BLE001  (an out-of-memory path is a result)
            out["paths"][path] = {"error": one_line(e)}
        for leaf in x:  # the last call's gradients go before the next path is measured
            leaf.grad = None
        reset_memory(dev)  # between paths, never inside a path's timed calls
    flex_ms = out["paths"]["flex"].get("ms")
    out["flex_speedup"] = {p: out["paths"][p]["ms"] / flex_ms for p in ("dense", "split")
                           if flex_ms and out["paths"][p].get("ms")}
    del x, bm
    return out


def section_flex(ctx: Ctx) -> dict:
    import torch

    from draftlab.drafter import flex

    s, dev = sizes(ctx), ctx.dev
    grad = is_cuda(dev)  # torch runs flex attention's backward on CUDA only
    res = {"flex_available": flex.flex_available(), "grad": grad, "tolerance": "4 x the split path's fp32 error vs "
           "a float64 dense run + 8 fp32 ulps", "exact": [], "cost": None, "errors": [], "skipped": []}
    if not flex.flex_supported(dev, grad):
        res.update(status="error", error=f"flex attention cannot run here (torch {torch.__version__}, {dev.type}, "
                                         f"gradients {grad})")
        return res
    shapes = list(s["exact"])
    plan = [("exact", shapes[0])] + [("cost", s["cost"])] + [("exact", sh) for sh in shapes[1:]]  # cost before extras
    with warnings.catch_warnings():  # CPU: torch warns that eager flex attention is unfused (known, and the point)
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        run_plan(ctx, s, plan, grad, res)
    if not grad:
        res["note"] = ("CPU: forward only (torch runs flex attention's backward on CUDA only), eager flex attention; "
                       "the times are host times of tiny shapes, not figures")
    ran = res["exact"] or res["cost"]
    bad = res["errors"] or not all(e["ok"] for e in res["exact"])
    res["status"] = "error" if not ran else ("failed" if bad else ("partial" if res["skipped"] else "ok"))
    if not ran:
        res["error"] = (res["errors"] or [{"error": "; ".join(res["skipped"])}])[0]["error"]
    return round_tree(res)


def run_plan(ctx: Ctx, s: dict, plan: list, grad: bool, res: dict) -> None:
    """The exactness and cost steps in order, each only if the section's budget still has its `need_s`."""
    import torch

    dev = ctx.dev
    for kind, shape in plan:
        label = f"{kind} at " + ", ".join(f"{k}={v}" for k, v in shape.items())
        if ctx.left() < s["need_s"][kind]:
            res["skipped"].append(f"{label}: {max(ctx.left(), 0):.0f} s left of the section's budget, needs "
                                  f"~{s['need_s'][kind]:.0f}")
            continue
        try:
            if kind == "exact":
                res["exact"].append(exactness(shape, dev, grad, s["tile"]))
            else:
                res["cost"] = cost(shape, dev, getattr(torch, s["dtype"]), s["reps"], grad, s["tile"])
        except Exception as e:  # noqa: BLE001  one failed step does not hide the others
            res["errors"].append({"step": label, "error": one_line(e)})
        reset_memory(dev)


def _f(x, fmt="{:.3g}"):
    return "–" if x is None else fmt.format(x)


def render_flex(sec: dict | None) -> list[str]:
    """The docs/gpu.md lines of this section."""
    if not sec or not (sec.get("exact") or sec.get("cost")):
        return []
    lines = ["", "### Flex attention for the drafter's training (block-sparse) vs dense SDPA vs split", "",
             f"Exactness ({sec['tolerance']}; "
             f"{'outputs and the gradients of q, K/V' if sec['grad'] else 'outputs only'}):",
             ""]
    rows = []
    for e in sec.get("exact", []):
        sh = e["shape"]
        worst = max(e["checks"].values(), key=lambda r: r["max_err"] / r["tol"] if r["tol"] else float("inf"))
        rows.append([f"B={sh['B']} A={sh['A']} S={sh['S']} L={sh['L']} h={sh['h']}/{sh['hk']} d={sh['d']}",
                     _f(e['skipped_tile_pct'], '{:.0f}%'), f"{_f(worst['max_err'])} / {_f(worst['tol'])}",
                     ', '.join(e['checks']), 'yes' if e['ok'] else '**NO**'])
    lines += markdown_table(["shape", "skipped tiles", "worst err / tol", "checks", "exact"], rows)
    c = sec.get("cost")
    if c:
        sh = c["shape"]
        what = "forward + backward" if c["grad"] else "forward only"
        lines += ["", f"Cost at B={sh['B']}, A={sh['A']} blocks of S={sh['S']}, L={sh['L']}, {sh['h']}/{sh['hk']} "
                      f"heads of {sh['d']}, {c['dtype']}, {what}; {c['clock']} of {c['reps']} calls after an untimed "
                      "first call; "
                      f"inputs drawn on the device; the BlockMask ({_f(c['skipped_tile_pct'], '{:.0f}')}% of tiles "
                      f"skipped) built once beforehand in {_f(c['block_mask_ms'], '{:.2f}')} ms (what each training "
                      f"forward pays once, for every layer):", ""]
        rows = []
        for p, r in c["paths"].items():
            if "error" in r:
                rows.append([p, r['error'], "", "", "", "", "", ""])
                continue
            ratio = 1.0 if p == "flex" else c.get("flex_speedup", {}).get(p)
            rows.append([p, _f(r['ms'], '{:.2f}'), _f(r['tflop']), _f(r['tflop_per_s']), _f(ratio, '{:.2f}×'),
                         _f(r['peak_allocated_gib'], '{:.2f}'), _f(r['peak_reserved_gib'], '{:.2f}'),
                         _f(r['first_s'], '{:.1f}')])
        lines += markdown_table(["path", "ms", "attention TFLOP", "TFLOP/s", "ms ÷ flex", "peak allocated GiB",
                                 "peak reserved GiB", "first call s"], rows)
    if sec.get("note"):
        lines.append(f"\nNote: {sec['note']}.")
    return lines + tail(sec, lambda err: err["step"])
