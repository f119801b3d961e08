"""Section `engine`: the speculative engine on the device. Greedy speculative output equals one-stream-at-a-time
AR (tiny random Llama and Qwen3 targets, fp32 and bf16, 1 and 4 ragged streams, the plain drafter, every
registered corrector family (perturbed: `checks.models.build_proposers`) and a bigram test double; a bf16
divergence is judged a near-tie when the target's two logits were within its rounding), and the verification
routine's residual and point-mass sampling rules pass chi-square tests on the device (with power: uncorrected
proposals fail)."""
from __future__ import annotations

from draftlab.checks.common import Ctx, dry_triton, one_line, rnd
from draftlab.checks.models import TINY, BigramProposal, bigram_table, build_drafter, build_proposers, build_target, \
    random_prompts
from draftlab.stats import chi_square_pvalue


def first_divergence(target, prompt, want, got, dtype) -> dict:
    """Where `got` first leaves `want`, and whether that step was a near-tie of the target's logits (gap within a
    few units of the dtype's rounding): batched and single-step passes round differently in bf16."""
    import torch

    j = next((i for i, (a, b) in enumerate(zip(want, got)) if a != b), min(len(want), len(got)))
    if j >= min(len(want), len(got)):
        return {"index": j, "length_mismatch": [len(want), len(got)], "near_tie": False}
    ids = torch.tensor([list(prompt) + list(want[:j])], device=target.device)
    logits = target(ids).logits[0, -1]  # [V] fp32
    gap = abs(float(logits[want[j]] - logits[got[j]]))
    tol = 4 * torch.finfo(dtype).eps * float(logits.abs().max())
    return {"index": j, "want": int(want[j]), "got": int(got[j]), "gap": rnd(gap, 6), "tol": rnd(tol, 6),
            "near_tie": bool(gap <= tol)}


def compare_streams(target, prompts, want, got, dtype) -> dict:
    div = [dict(stream=i, **first_divergence(target, p, w, g, dtype))
           for i, (p, w, g) in enumerate(zip(prompts, want, got)) if list(w) != list(g)]
    return {"identical": not div, "ok": all(d["near_tie"] for d in div), "divergences": div}


def engine_identity(ctx, arch: str, dtype) -> list[dict]:
    import torch

    from draftlab.decoding.ar import generate_ar
    from draftlab.decoding.speculative import SpeculativeEngine
    dev = ctx.dev
    t = build_target(dev, dtype, arch, TINY["vocab"], TINY["hidden"], TINY["layers"], TINY["heads"],
                     TINY["kv_heads"], TINY["intermediate"], seed=3 if arch == "llama" else 4)
    drafter = build_drafter(t, block_size=4, num_layers=1, dtype=dtype)
    max_new = 10 if ctx.dry else 24
    prompts = random_prompts(4, (5, 12, 8, 17), TINY["vocab"], seed=7)  # ragged
    with torch.no_grad():
        ref = [generate_ar(t, [p], max_new, eos_ids=[]).tokens[0] for p in prompts]  # one stream at a time
        proposers = build_proposers(t, drafter, k=4, perturb=True)[0]
        rows = []
        ar = generate_ar(t, prompts, max_new, eos_ids=[]).tokens
        rows.append({"arch": arch, "dtype": str(dtype).replace("torch.", ""), "streams": len(prompts),
                     "engine": "ar-batched", **compare_streams(t, prompts, ref, ar, dtype)})
        for n in (1, len(prompts)):
            proposers["bigram"] = BigramProposal(bigram_table(prompts[:n], ref[:n], TINY["vocab"], dev))
            for name, prop in proposers.items():
                row = {"arch": arch, "dtype": str(dtype).replace("torch.", ""), "streams": n,
                       "engine": f"speculative/{name}"}
                try:  # one broken proposal step (e.g. an op without a bf16 kernel) does not hide the others
                    res = SpeculativeEngine(t, drafter, prop).generate(prompts[:n], max_new, eos_ids=[])
                    acc = [a for s in res.accepted for a in s]
                    row.update(tau=rnd(1 + sum(acc) / max(len(acc), 1), 3),
                               **compare_streams(t, prompts[:n], ref[:n], res.tokens, dtype))
                except Exception as e:
                    row.update(identical=False, ok=False, divergences=[], error=one_line(e))
                rows.append(row)
    return rows


def engine_sampling(ctx) -> dict:
    """The verification routine's two stochastic rules on the device (as tests/decoding/test_verify.py on CPU): the first
    and second committed tokens follow the target p; the acceptance rate is Σ min(p, q) (residual rule) or p(ŷ)
    (point mass); and the test has power (uncorrected proposals are rejected)."""
    import torch

    from draftlab.decoding.verify import speculative_accept

    dev = ctx.dev
    N, V, n = (20_000 if ctx.dry else 400_000), 8, 3
    g0 = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(n + 1, V, generator=g0) * 1.5, -1).to(dev)  # [n+1, V]
    q = torch.softmax(torch.randn(n, V, generator=g0) * 2.0, -1).to(dev)  # [n, V]
    out = {"samples": N, "rules": []}
    ok = True
    for rule in ("residual", "pointmass"):
        g = torch.Generator(device=dev).manual_seed(1)
        P = p.expand(N, n + 1, V)
        if rule == "residual":
            props = torch.multinomial(q, N, replacement=True, generator=g).T.contiguous()  # [N, n] ~ q
            acc, nxt = speculative_accept(P, props, q.expand(N, n, V), generator=g)
            expected = float(torch.minimum(p[0], q[0]).sum())
        else:
            props = torch.tensor([2, 5, 1], device=dev).expand(N, n)  # deterministic proposals
            acc, nxt = speculative_accept(P, props, None, generator=g)
            expected = float(p[0, 2])
        first = torch.where(acc > 0, props[:, 0], nxt)
        sel = acc > 0
        second = torch.where(acc[sel] > 1, props[sel][:, 1], nxt[sel])
        r = {"rule": rule, "p_first": chi_square_pvalue(torch.bincount(first, minlength=V), p[0]),
             "p_second": chi_square_pvalue(torch.bincount(second, minlength=V), p[1]),
             "accept_rate": float((acc > 0).float().mean()), "expected_rate": expected}
        r["ok"] = bool(r["p_first"] > 1e-3 and r["p_second"] > 1e-3 and abs(r["accept_rate"] - expected) < 0.01)
        ok &= r["ok"]
        out["rules"].append({k: rnd(v, 5) for k, v in r.items()})
    g = torch.Generator(device=dev).manual_seed(2)
    raw = torch.multinomial(q, N, replacement=True, generator=g).T[:, 0]  # committed without correction
    power = chi_square_pvalue(torch.bincount(raw, minlength=V), p[0])
    out["power"] = {"p_uncorrected": power, "ok": bool(power < 1e-6)}
    out["ok"] = bool(ok and power < 1e-6)
    return out


def section_engine(ctx: Ctx) -> dict:
    import torch

    rows, errors = [], []
    for arch in ("llama", "qwen3"):
        for dtype in (torch.float32, torch.bfloat16):
            try:
                with dry_triton(ctx, dtype == torch.float32):
                    rows += engine_identity(ctx, arch, dtype)
            except Exception as e:
                errors.append({"arch": arch, "dtype": str(dtype), "error": one_line(e)})
    try:
        sampling = engine_sampling(ctx)
    except Exception as e:
        sampling = {"ok": False, "error": one_line(e)}
    identical = sum(r["identical"] for r in rows)
    ok = not errors and all(r["ok"] for r in rows) and sampling.get("ok", False)
    return {"status": "ok" if ok else "failed", "checks": len(rows), "identical": identical,
            "near_tie_only": sum(r["ok"] and not r["identical"] for r in rows), "identity": rows,
            "errors": errors, "sampling": sampling}
