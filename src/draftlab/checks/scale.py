"""Section `specopd_scale`: SpecOPD's memory and time at the `gpu` profile's shapes, chunking on, beside the cost
plan's prediction (`draftlab.plan.memory.specopd_step`, the model `draftlab plan` sums).

On the random target of Qwen3-8B's shape (bf16) and the paper-shape drafter (5 layers, fp32, bf16 autocast), cases:
    update_per_device  one SpecOPD update at the `gpu` plan's own per-device shape: `specopd.batch_size` 8 split over
                       8 GPUs' ranks (B=1), L = data.max_prompt_tokens + reference.max_new_tokens = 4096, A=256, W=15,
                       the profile's chunks: what each rank of `-S trainer.devices=8` holds, less DDP's gradient
                       buckets (one process here; the plan's per-rank figure with them is `predicted_ddp_gib`);
    t1_eval            the held-out T=1 evaluation step (`specopd_terms` without gradients) at B=8, L=2048 (the first
                       accelerator run's shape);
    update             one full update (terms, backward, AdamW step) at B=8, L=2048.
Each case: the median seconds of its calls after an untimed first one (CUDA events on CUDA), and the peak device memory
of the timed calls, allocated (`torch.cuda.max_memory_allocated`: what the tensors hold, the plan's quantity) and
reserved (`max_memory_reserved`: what the caching allocator took from the device, the figure that decides whether
the step fits beside anything else); the allocator's cache is emptied before each case. A case that does not fit the
section's budget is skipped and named; an out-of-memory is a result. `--dry` runs the same code at tiny sizes on CPU
(no device memory there: the CPU test of bounded memory is tests/specopd/test_chunked.py, with the torch profiler).
"""
from __future__ import annotations

from draftlab.checks.common import Ctx, one_line, round_tree, tail
from draftlab.checks.events import GIB, clock_name, is_cuda, reset_memory, timed
from draftlab.checks.models import build_drafter, paper_target
from draftlab.markdown import markdown_table

# the gpu profile's composition (conf/profile/gpu.yaml + conf/recipe/gpu.yaml; copied: the accelerator machine has no OmegaConf; keep in step with that file):
# specopd.batch_size 8 on trainer.devices 8 -> B=1 per rank; data.max_prompt_tokens 2048 + reference.max_new_tokens
# 2048 -> L=4096 (the plan's lengths at fill 1); specopd.anchors_per_seq 256; drafter.block_size 16 -> W=15
# (specopd.branch_width 0 = block - 1); specopd.chunk_rows 2048, specopd.vocab_chunk 16384.
GPU_PROFILE = dict(batch_size=8, devices=8, max_prompt_tokens=2048, max_new_tokens=2048, anchors_per_seq=256,
                   block_size=16, chunk_rows=2048, vocab_chunk=16384)
GPU_PLAN_DEVICE = dict(B=GPU_PROFILE["batch_size"] // GPU_PROFILE["devices"],
                       L=GPU_PROFILE["max_prompt_tokens"] + GPU_PROFILE["max_new_tokens"],
                       A=GPU_PROFILE["anchors_per_seq"], W=GPU_PROFILE["block_size"] - 1,
                       prompt=GPU_PROFILE["max_prompt_tokens"], chunk_rows=GPU_PROFILE["chunk_rows"],
                       vocab_chunk=GPU_PROFILE["vocab_chunk"])
FIRST_RUN = dict(B=8, A=256, W=15, L=2048, prompt=256, chunk_rows=2048, vocab_chunk=16384)
PAPER_SCALE = dict(cases=(("update_per_device", GPU_PLAN_DEVICE, True), ("t1_eval", FIRST_RUN, False),
                          ("update", FIRST_RUN, True)), steps=2, need_s=8.0)
DRY_DEVICE = dict(B=1, A=6, W=15, L=64, prompt=24, chunk_rows=16, vocab_chunk=100)
DRY_FIRST_RUN = dict(B=2, A=6, W=15, L=48, prompt=12, chunk_rows=16, vocab_chunk=100)
DRY_SCALE = dict(cases=(("update_per_device", DRY_DEVICE, True), ("t1_eval", DRY_FIRST_RUN, False),
                        ("update", DRY_FIRST_RUN, True)), steps=1, need_s=1.0)


def sizes(ctx: Ctx) -> dict:
    """This section's sizes: the runner's `specopd_scale` entry when it gives one, else PAPER_SCALE / DRY_SCALE."""
    return ctx.size.get("specopd_scale") or (DRY_SCALE if ctx.dry else PAPER_SCALE)


def scale_batch(ctx: Ctx, s: dict, seed: int = 0) -> dict:
    """B random references of L tokens with A response anchors each (the batch dict SpecOPD reads), on the device."""
    import torch

    from draftlab.specopd.tree import sample_branch_anchors

    dev = ctx.dev
    V = paper_target(ctx).vocab_size
    g = torch.Generator().manual_seed(seed)
    anchors = torch.stack([sample_branch_anchors(s["L"], s["prompt"], s["A"], g) for _ in range(s["B"])])
    gd = torch.Generator(device=dev).manual_seed(seed)
    return {"ids": torch.randint(1, V - 1, (s["B"], s["L"]), generator=gd, device=dev),
            "seq_len": torch.full((s["B"],), s["L"], device=dev), "anchors": anchors.to(dev),
            "anchor_valid": torch.ones(anchors.shape, dtype=torch.bool, device=dev),
            "seq": torch.arange(s["B"], device=dev)}


def predicted_gib(target, drafter, s: dict, grad: bool, cuda: bool) -> dict:
    """The plan's peak for this case (bf16 activations on CUDA; the target's own dtype), one process; and with
    DDP's gradient buckets (what `draftlab plan --gpus N` adds per rank for N > 1)."""
    from draftlab.plan import memory as M
    from draftlab.plan.arch import shapes_of

    t, d = shapes_of(target, drafter)
    tb, ab = target.embed_tokens.weight.element_size(), 2 if cuda else 4
    terms = M.specopd_step(t, d, B=s["B"], L=s["L"], A=s["A"], W=s["W"], chunk=s["chunk_rows"],
                           vocab_chunk=s["vocab_chunk"], tb=tb, ab=ab, fused=cuda, grad=grad)
    out = {"predicted_gib": M.total(terms) / GIB}
    if grad:
        out["predicted_ddp_gib"] = M.total({**terms, **M.ddp_buckets(d.params(), 2)}) / GIB
    return out


def case_fn(target, drafter, batch: dict, s: dict, grad: bool, amp, opt):
    """One call of the case: the T=1 evaluation (no gradients) or a full update."""
    import torch

    from draftlab.specopd.terms import specopd_terms

    kw = dict(chunk_rows=s["chunk_rows"], vocab_chunk=s["vocab_chunk"])
    count = [0]

    def run():
        i = count[0]
        count[0] += 1
        if not grad:
            with torch.no_grad(), amp:
                t = specopd_terms(target, drafter, batch, s["W"], 1.0, seed=0, step=i, **kw)
            return {"positions": t.positions, "mean_alpha": t.mean_alpha}
        with amp:
            t = specopd_terms(target, drafter, batch, s["W"], 1.0, seed=0, step=i, **kw)
            loss = t.numerator / t.count.clamp(min=1)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return {"positions": t.positions, "loss": float(loss.detach())}

    return run


def measure(ctx: Ctx, target, drafter, s: dict, grad: bool, steps: int) -> dict:
    """One case: its shape, median seconds, supervised positions, peak allocated / reserved memory, the prediction."""
    import torch

    batch = scale_batch(ctx, s)
    opt = torch.optim.AdamW(drafter.parameters(), lr=1e-6) if grad else None
    amp = torch.autocast(ctx.dev.type, dtype=torch.bfloat16)
    reset_memory(ctx.dev)
    t = timed(case_fn(target, drafter, batch, s, grad, amp, opt), ctx.dev, steps)
    out = {"shape": {k: s[k] for k in ("B", "L", "A", "W", "chunk_rows", "vocab_chunk")},
           "rows": s["B"] * s["A"] * s["W"], "grad": grad, "s": t["ms"] / 1e3, "first_s": t["first_s"],
           "steps": steps, **t["last"], "peak_allocated_gib": t.get("peak_allocated_gib"),
           "peak_reserved_gib": t.get("peak_reserved_gib"),
           **predicted_gib(target, drafter, s, grad, is_cuda(ctx.dev))}
    del batch, opt
    return out


def section_specopd_scale(ctx: Ctx) -> dict:
    import torch

    sz = sizes(ctx)
    target = paper_target(ctx)
    W = sz["cases"][0][1]["W"]
    res = {"vocab": target.vocab_size, "precision": "bf16-mixed (fp32 drafter, autocast; bf16 target)",
           "clock": clock_name(ctx.dev), "plan_profile": GPU_PROFILE, "cases": {}, "errors": [], "skipped": []}
    if is_cuda(ctx.dev):
        res["device_memory_gib"] = torch.cuda.get_device_properties(ctx.dev).total_memory / GIB
    for name, s, grad in sz["cases"]:
        if ctx.left() < sz["need_s"]:
            res["skipped"].append(f"{name}: {max(ctx.left(), 0):.0f} s left of the section's budget, needs "
                                  f"~{sz['need_s']:.0f}")
            continue
        drafter = build_drafter(target, W + 1, ctx.size["drafter"]["num_layers"], torch.float32).train()
        try:
            res["cases"][name] = measure(ctx, target, drafter, s, grad, sz["steps"])
        except Exception as e:  # noqa: BLE001  an out-of-memory is a result: recorded, the next case still runs
            res["errors"].append({"case": name, "error": one_line(e)})
        del drafter
        reset_memory(ctx.dev)
    res["status"] = "error" if not res["cases"] else ("failed" if res["errors"] else (
        "partial" if res["skipped"] else "ok"))
    if not res["cases"]:
        res["error"] = (res["errors"] or [{"error": "; ".join(res["skipped"])}])[0]["error"]
    return round_tree(res)


def _f(x, fmt="{:.3g}"):
    return "–" if x is None else fmt.format(x)


def render_specopd_scale(sec: dict | None) -> list[str]:
    """The docs/gpu.md lines of this section."""
    if not sec or not sec.get("cases"):
        return []
    lines = ["", f"### SpecOPD memory at the gpu profile's shapes (V={sec['vocab']:,}; {sec['precision']}; "
                 f"{sec['clock']})",
             ""]
    lines += markdown_table(
        ["case", "B", "L", "A", "W", "chunk_rows / vocab_chunk", "supervised positions", "s", "peak allocated GiB",
         "peak reserved GiB", "predicted GiB (draftlab plan)", "predicted with DDP buckets"],
        [[name, c["shape"]['B'], c["shape"]['L'], c["shape"]['A'], c["shape"]['W'],
          f"{c['shape']['chunk_rows']} / {c['shape']['vocab_chunk']}", c.get('positions'), _f(c.get('s'), '{:.3f}'),
          _f(c.get('peak_allocated_gib'), '{:.1f}'), _f(c.get('peak_reserved_gib'), '{:.1f}'),
          _f(c.get('predicted_gib'), '{:.1f}'), _f(c.get('predicted_ddp_gib'), '{:.1f}')]
         for name, c in sec["cases"].items()])
    lines.append("\n`update_per_device` is the `gpu` plan's per-rank step on 8 GPUs (specopd.batch_size 8 / 8 ranks, "
                 "L = 2048 + 2048), measured in one process: without DDP's gradient buckets, which the last column "
                 "adds.")
    if sec.get("device_memory_gib"):
        lines.append(f"\nDevice memory: {sec['device_memory_gib']:.0f} GiB.")
    return lines + tail(sec, lambda err: err["case"])
