"""Section `kernels`: every Triton kernel against its torch reference on the device, fp32 and bf16 inputs; the
tolerance is 4 x the fp32 reference's own error against float64 (+ fp32 ulps), as tests/kernels do; median µs of
each against torch eager at the paper's shapes (transition scores for 64 streams of block 16 with K=16 and an MLP
of 256; the TV overlap over SpecOPD's rows with Qwen3's full vocabulary and a 32k draft vocabulary)."""
from __future__ import annotations

from draftlab.checks.common import Ctx, one_line, rnd, time_us


def lib_kernels():
    from types import SimpleNamespace

    from draftlab.kernels.dispatch import resolve_backend
    from draftlab.kernels.greedy_walk import greedy_walk_torch, greedy_walk_triton
    from draftlab.kernels.transition_scores import transition_scores_torch, transition_scores_triton
    from draftlab.kernels.tv_overlap import tv_overlap_torch, tv_overlap_triton

    return SimpleNamespace(resolve_backend=resolve_backend,
                           transition_scores=(transition_scores_torch, transition_scores_triton),
                           greedy_walk=(greedy_walk_torch, greedy_walk_triton),
                           tv_overlap=(tv_overlap_torch, tv_overlap_triton))


def kernel_cases(dry: bool):
    """(kernel, shape dict) pairs; transition_scores at DCOCO's paper size (64 streams, block 16, K=16,
    MLP 256), tv_overlap over SpecOPD rows with the full Qwen3 vocabulary and a 32k draft vocabulary."""
    if dry:
        return [("transition_scores", dict(N=2, P=3, K=4, M=8)), ("transition_scores", dict(N=2, P=4, K=16, M=40)),
                ("greedy_walk", dict(N=5, P=6, K=16)),
                ("tv_overlap", dict(N=3, Vq=100, V=300, vocab=True)), ("tv_overlap", dict(N=2, Vq=1100, V=1100, vocab=False))]
    return [("transition_scores", dict(N=1, P=15, K=16, M=256)), ("transition_scores", dict(N=64, P=15, K=16, M=256)),
            ("greedy_walk", dict(N=64, P=15, K=16)),
            ("tv_overlap", dict(N=3584, Vq=151936, V=151936, vocab=False)),
            ("tv_overlap", dict(N=3584, Vq=32768, V=151936, vocab=True))]


def kernel_inputs(kind: str, shape: dict, dtype, dev, seed: int):
    """Inputs as the library produces them (a/b sides are strided slices of one per-slot tensor)."""
    import torch

    g = torch.Generator(device=dev).manual_seed(seed)

    def rn(*s, scale=1.0):
        return torch.randn(*s, generator=g, device=dev) * scale

    if kind == "transition_scores":
        N, P, K, M = shape["N"], shape["P"], shape["K"], shape["M"]
        za, zb = rn(N, P + 1, K, M), rn(N, P + 1, K, M)  # [N, n, K, M]
        args = [za[:, :-1], zb[:, 1:], rn(N, P, M), rn(M, scale=M ** -0.5), rn(1)]
        return [a.to(dtype) for a in args] + [rn(N, P + 1, K, scale=3.0)[:, 1:]]
    if kind == "greedy_walk":
        N, P, K = shape["N"], shape["P"], shape["K"]
        return [rn(N, P, K, K).to(dtype), torch.randint(0, K, (N,), generator=g, device=dev)]
    N, Vq, V = shape["N"], shape["Vq"], shape["V"]
    vocab = torch.randperm(V, generator=g, device=dev)[:Vq] if shape["vocab"] else None
    return [rn(N, Vq, scale=3.0).to(dtype), rn(N, V, scale=3.0).to(dtype), vocab]


def kernel_check(kind: str, ref, tri, args) -> dict:
    """Error of the Triton kernel against fp64 and the tolerance the fp32 reference's own error allows."""
    import torch

    eps32 = torch.finfo(torch.float32).eps
    out = tri(*args)
    if kind == "greedy_walk":
        want = ref(*args)
        return {"mismatched_rows": int((out != want).any(-1).sum()), "match": bool(torch.equal(out, want)),
                "rule": "exact (ties to the lowest index in both)"}
    up = [a.double() if a is not None and a.is_floating_point() else a for a in args]
    ref64 = ref(*up)
    ref32 = ref(*args)
    err_ref = float((ref32.double() - ref64).abs().max())
    if kind == "transition_scores":
        tol = 4 * err_ref + eps32 * float(ref64.abs().max())
    else:
        tol = 4 * err_ref + 4 * eps32
    err = float((out.double() - ref64).abs().max())
    return {"max_err": err, "tol": tol, "match": bool(err <= tol and out.dtype == torch.float32),
            "rule": "err vs fp64 <= 4 x (fp32 reference err vs fp64) + fp32 ulps"}


def section_kernels(ctx: Ctx) -> dict:
    import torch

    K = lib_kernels()
    dev, dry = ctx.dev, ctx.dry
    warm, reps = ctx.size["kernel_reps"]
    res = {"backend_auto": K.resolve_backend(dev), "interpreter": dry, "results": []}
    ok = True
    for i, (kind, shape) in enumerate(kernel_cases(dry)):
        ref, tri = getattr(K, kind)
        for dtype in (torch.float32, torch.bfloat16):
            row = {"kernel": kind, "dtype": str(dtype).replace("torch.", ""), "shape": shape}
            try:
                args = kernel_inputs(kind, shape, dtype, dev, seed=100 + i)
                with torch.no_grad():
                    row.update(kernel_check(kind, ref, tri, args))
                    row["torch_us"] = time_us(lambda: ref(*args), dev, warm, reps)
                    row["triton_us"] = time_us(lambda: tri(*args), dev, warm, reps)
                row["speedup"] = row["torch_us"] / row["triton_us"] if row["triton_us"] > 0 else None
            except Exception as e:  # one broken kernel/dtype does not hide the others
                row.update(match=False, error=one_line(e))
            ok &= bool(row.get("match"))
            res["results"].append({k: rnd(v) for k, v in row.items()})
            del row
    res["status"] = "ok" if ok else "failed"
    if dry:
        res["note"] = "interpreter (TRITON_INTERPRET=1): correctness only; the times are not kernel times"
    return res
