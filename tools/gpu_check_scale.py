"""Section 5 of tools/gpu_check.py (issue 21): SpecOPD at the `gpu` profile's shape, chunking on.

The profile trains SpecOPD with B=8 sequences, A=256 branches each, W=15 (block 16) over the full target
vocabulary (Qwen3-8B: 151,936), `specopd.chunk_rows` 2048 and `specopd.vocab_chunk` 16384. This case runs
exactly that on the random target of Qwen3-8B's shape (bf16) with the paper-shape drafter (5 layers, fp32,
bf16 autocast) and records, for each of
    t1_eval   the held-out T=1 evaluation step (`specopd_terms` without gradients: what SpecOPD's
              step-0 `heldout_tv` runs per batch),
    update    one full SpecOPD update (terms, backward, AdamW step),
the median seconds and the peak allocated device memory (`torch.cuda.max_memory_allocated`, reset
before each), beside the cost plan's prediction for the same step (`draftlab.plan.memory.specopd_step`, the
model `draftlab plan` sums; issue 21 item 1). `--dry` runs the same code at tiny sizes on CPU (no peak memory there: the CPU test of
bounded memory is tests/test_chunked.py, measured with the torch profiler).

Kept apart from gpu_check.py (already ~1,100 lines); it reaches the library and gpu_check's helpers
through the `g` module handed in (`g.lib_specopd`, `g.paper_target`, `g.build_drafter`, ...).
"""
from __future__ import annotations

import statistics
import time

PAPER_SCALE = dict(B=8, A=256, W=15, L=2048, prompt=256, chunk_rows=2048, vocab_chunk=16384, steps=2)
DRY_SCALE = dict(B=2, A=6, W=15, L=48, prompt=12, chunk_rows=16, vocab_chunk=100, steps=1)


def scale_batch(g, ctx, s: dict, seed: int = 0) -> dict:
    """B random references of L tokens with A response anchors each (the batch dict SpecOPD reads)."""
    import torch

    S = g.lib_specopd()
    V = g.paper_target(ctx).vocab_size
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, V - 1, (s["B"], s["L"]), generator=gen)
    anchors = torch.stack([S.sample_branch_anchors(s["L"], s["prompt"], s["A"], gen) for _ in range(s["B"])])
    dev = ctx.dev
    return {"ids": ids.to(dev), "seq_len": torch.full((s["B"],), s["L"], device=dev), "anchors": anchors.to(dev),
            "anchor_valid": torch.ones_like(anchors, dtype=torch.bool).to(dev), "seq": torch.arange(s["B"], device=dev)}


def _measure(g, ctx, fn, steps: int) -> dict:
    """Median seconds of fn() over `steps` calls after one warm-up, and the peak allocated memory."""
    import torch

    dev = ctx.dev
    if dev.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(dev)
    ts, last = [], None
    for i in range(steps + 1):
        g.sync(dev)
        t = time.perf_counter()
        last = fn(i)
        g.sync(dev)
        if i:
            ts.append(time.perf_counter() - t)
    out = {"s": statistics.median(ts), "steps": steps, **(last or {})}
    out["peak_gib"] = torch.cuda.max_memory_allocated(dev) / 2 ** 30 if dev.type == "cuda" else None
    return out


def predicted_gib(target, drafter, s: dict, cuda: bool) -> dict:
    """The plan's peak for each case at this shape (bf16 activations on CUDA; the target's own dtype)."""
    from draftlab.plan import memory as M
    from draftlab.plan.arch import shapes_of

    t, d = shapes_of(target, drafter)
    tb, ab = target.embed_tokens.weight.element_size(), 2 if cuda else 4
    kw = dict(B=s["B"], L=s["L"], A=s["A"], W=s["W"], chunk=s["chunk_rows"], vocab_chunk=s["vocab_chunk"], tb=tb,
              ab=ab, fused=cuda)
    return {name: M.total(M.specopd_step(t, d, grad=grad, **kw)) / 2 ** 30
            for name, grad in (("t1_eval", False), ("update", True))}


def section_specopd_scale(g, ctx) -> dict:
    import torch

    s = DRY_SCALE if ctx.dry else PAPER_SCALE
    S = g.lib_specopd()
    target = g.paper_target(ctx)
    res = {"B": s["B"], "A": s["A"], "W": s["W"], "L": s["L"], "vocab": target.vocab_size,
           "rows": s["B"] * s["A"] * s["W"], "chunk_rows": s["chunk_rows"], "vocab_chunk": s["vocab_chunk"],
           "precision": "bf16-mixed (fp32 drafter, autocast; bf16 target)", "cases": {}, "errors": []}
    if ctx.dev.type == "cuda":
        res["device_memory_gib"] = torch.cuda.get_device_properties(ctx.dev).total_memory / 2 ** 30
    drafter = g.build_drafter(target, s["W"] + 1, ctx.size["drafter"]["num_layers"], torch.float32).train()
    batch = scale_batch(g, ctx, s)
    amp = torch.autocast(ctx.dev.type, dtype=torch.bfloat16)
    kw = dict(chunk_rows=s["chunk_rows"], vocab_chunk=s["vocab_chunk"])

    def t1_eval(i):
        with torch.no_grad(), amp:
            t = S.specopd_terms(target, drafter, batch, s["W"], 1.0, seed=0, step=i, **kw)
        return {"positions": t.positions, "mean_alpha": t.mean_alpha}

    opt = torch.optim.AdamW(drafter.parameters(), lr=1e-6)

    def update(i):
        with amp:
            t = S.specopd_terms(target, drafter, batch, s["W"], 1.0, seed=0, step=i, **kw)
            loss = t.numerator / t.count.clamp(min=1)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return {"positions": t.positions, "loss": float(loss.detach())}

    predicted = predicted_gib(target, drafter, s, ctx.dev.type == "cuda")
    for name, fn in (("t1_eval", t1_eval), ("update", update)):
        if ctx.budget.left() < 5:
            res["errors"].append({"case": name, "error": "skipped: time budget spent"})
            continue
        try:
            res["cases"][name] = {**_measure(g, ctx, fn, s["steps"]), "predicted_gib": predicted[name]}
        except Exception as e:  # an out-of-memory is a result: recorded, the next case still runs
            res["errors"].append({"case": name, "error": g.one_line(e)})
        if ctx.dev.type == "cuda":
            torch.cuda.empty_cache()
    del drafter, opt
    res["status"] = "error" if not res["cases"] else ("failed" if res["errors"] else "ok")
    return g._round_tree(res)


def render_scale(sp: dict) -> list[str]:
    """The docs/gpu.md lines of this section."""
    if not sp or not sp.get("cases"):
        return []
    f = lambda x, fmt: "–" if x is None else fmt.format(x)  # noqa: E731
    lines = ["", f"### 5. SpecOPD at the gpu profile's shape (B={sp['B']}, A={sp['A']}, W={sp['W']}, L={sp['L']}, "
                 f"V={sp['vocab']:,}; chunk_rows {sp['chunk_rows']}, vocab_chunk {sp['vocab_chunk']}; {sp['precision']})",
             "", "| case | supervised positions | s | peak allocated GiB | predicted GiB (draftlab plan) |",
             "|---|---|---|---|---|"]
    for name, c in sp["cases"].items():
        lines.append(f"| {name} | {c.get('positions')} | {f(c.get('s'), '{:.3f}')} | {f(c.get('peak_gib'), '{:.1f}')} | "
                     f"{f(c.get('predicted_gib'), '{:.1f}')} |")
    if sp.get("device_memory_gib"):
        lines.append(f"\nDevice memory: {sp['device_memory_gib']:.0f} GiB.")
    for err in sp.get("errors", []):
        lines.append(f"\nError ({err['case']}): {err['error']}")
    return lines
