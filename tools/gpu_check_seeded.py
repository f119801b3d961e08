"""Section `seeded` of tools/gpu_check.py (issue 20 item 6): a seeded drafter's rounds, timed on the accelerator.

On the random target of Qwen3-8B's shape (bf16; tiny shapes in --dry) with DFlash drafters of the paper's shape,
at 1 and 8 streams (--dry: 1 and 2) on prompts that loop, for 64 new tokens (random targets fall into loops
within ~10 tokens, so the lookup finds seeds; --dry: 24), it times each round
(draft / propose / verify / commit, median ms) of
    dflash              the plain drafter, its own choice (the base of the comparison);
    dflash-seeded       a seeded drafter (`drafter.seed=lookup`; a seed bias so that, with random weights, it
                        copies its seeds as a trained one starts), its own choice: the draft phase includes
                        building the seeded block (the per-stream lookup);
    dflash-seeded-cut   the same drafter, verifying only its seeded span + the slots it is sure of
                        (`draftlab.decoding.width.SpanProposal`, the `seeded.verify` defaults);
with τ, the mean verified width per round and the share of proposal slots that held a seed. Random weights:
the τ figures say little; the round costs, and what a shorter verify saves on this device, are the reading.

Kept apart from gpu_check.py (already ~1,100 lines); it reaches the library through `lib_width` here and
gpu_check's helpers through the `g` module handed in (`g.paper_target`, `g.build_drafter`, `g.phase_medians`, ...).
"""
from __future__ import annotations

import time

# new_tokens: random targets fall into loops after ~5-10 tokens, from then on the lookup finds seeds
PAPER_SEEDED = dict(streams=(1, 8), new_tokens=64, seed_bias=8.0, extra=3, min_prob=0.15)
DRY_SEEDED = dict(streams=(1, 2), new_tokens=24, seed_bias=8.0, extra=3, min_prob=0.15)
ARMS = ("dflash", "dflash-seeded", "dflash-seeded-cut")


def lib_width():
    from draftlab.decoding.api import DrafterProposal
    from draftlab.decoding.width import SpanProposal, seeded_span

    return DrafterProposal, SpanProposal, seeded_span


class Counting:
    """A proposal step counting what it proposes: verified width and seeded slots (kept on the device)."""

    def __init__(self, inner, mask_id: int, seeded_span):
        self.inner, self.mask_id, self.span = inner, mask_id, seeded_span
        self.widths, self.slots, self.seeded = [], 0, None

    def __call__(self, draft, sp, generator=None):
        p = self.inner(draft, sp, generator)
        self.widths.append(p.tokens.shape[1])
        s = self.span(draft.block_ids, self.mask_id).sum()
        self.seeded = s if self.seeded is None else self.seeded + s
        self.slots += draft.block_ids.shape[0] * (draft.block_ids.shape[1] - 1)
        return p


def seeded_drafter(g, target, block_size: int, num_layers: int, dtype, seed_bias: float, seed: int = 1):
    """A random DFlash drafter of the target's width that seeds its blocks (full vocabulary, seed bias)."""
    import torch

    D = g.lib_drafter()
    spec = D.arch_from_target(target, block_size, num_layers, [], target.vocab_size - 1, seed="lookup",
                              seed_bias=seed_bias)
    torch.manual_seed(seed)
    with torch.device(target.device):
        drafter = D.DFlashDrafter.from_target(spec, target)
    drafter.attention = "dense"
    return drafter.to(dtype).eval()


def looping_prompts(n: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    """n prompts of `length` ids: a 16-token random motif per prompt, repeated."""
    import torch

    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        motif = torch.randint(1, vocab - 1, (16,), generator=g).tolist()
        out.append([motif[i % 16] for i in range(length)])
    return out


def section_seeded(g, ctx) -> dict:
    import torch

    s = DRY_SEEDED if ctx.dry else PAPER_SEEDED
    sz, dev = ctx.size, ctx.dev
    Dc = g.lib_decoding()
    DrafterProposal, SpanProposal, span = lib_width()
    target = g.paper_target(ctx)
    S, L = sz["drafter"]["block_size"], sz["drafter"]["num_layers"]
    plain = g.build_drafter(target, S, L, target.dtype)
    seeded = seeded_drafter(g, target, S, L, target.dtype, s["seed_bias"])
    mask = seeded.mask_token_id
    arms = {"dflash": (plain, lambda: DrafterProposal()),
            "dflash-seeded": (seeded, lambda: DrafterProposal()),
            "dflash-seeded-cut": (seeded, lambda: SpanProposal(mask, "span", s["extra"], s["min_prob"]))}
    res = {"block_size": S, "drafter_layers": L, "seed_bias": s["seed_bias"],
           "rule": {"rule": "span", "extra": s["extra"], "min_prob": s["min_prob"], "full_span": "seeds"},
           "prompt_tokens": sz["prompt_tokens"], "new_tokens": s["new_tokens"], "temperature": 0.0,
           "levels": {}, "errors": [], "skipped_streams": []}
    with torch.no_grad():  # warm-up
        p1 = looping_prompts(1, sz["prompt_tokens"], target.vocab_size, seed=7)
        for name, (d, make) in arms.items():
            try:
                Dc.SpeculativeEngine(target, d, make()).generate(p1, 3, eos_ids=[])
            except Exception as e:
                res["errors"].append({"arm": name, "streams": 0, "error": g.one_line(e)})
    for n in s["streams"]:
        if ctx.budget.left() < 10:
            res["skipped_streams"] = [m for m in s["streams"] if m >= n]
            break
        prompts = looping_prompts(n, sz["prompt_tokens"], target.vocab_size, seed=200 + n)
        lvl, t0 = {"arms": {}}, time.perf_counter()
        for name, (d, make) in arms.items():
            step = Counting(make(), mask, span)
            try:
                with torch.no_grad():
                    r = Dc.SpeculativeEngine(target, d, step).generate(prompts, s["new_tokens"], eos_ids=[])
                acc = [a for x in r.accepted for a in x]
                lvl["arms"][name] = {**g.phase_medians(r), "tau": 1 + sum(acc) / max(len(acc), 1),
                                     "mean_verified_width": sum(step.widths) / max(len(step.widths), 1),
                                     "seeded_slot_share": (0.0 if step.seeded is None else float(step.seeded)) / max(step.slots, 1)}
            except Exception as e:
                res["errors"].append({"arm": name, "streams": n, "error": g.one_line(e)})
        base = lvl["arms"].get("dflash")
        for a in lvl["arms"].values():
            if base:
                a["round_time_ratio"] = base["round_total_ms"] / a["round_total_ms"]  # > 1: rounds faster than DFlash's
        lvl["seconds"] = time.perf_counter() - t0
        res["levels"][str(n)] = lvl
    del plain, seeded
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    res["status"] = "error" if not res["levels"] else ("failed" if res["errors"] else (
        "partial" if res["skipped_streams"] else "ok"))
    return g._round_tree(res)


def render_seeded(sec: dict) -> list[str]:
    """The docs/gpu.md lines of this section."""
    if not sec or not sec.get("levels"):
        return []
    f = lambda x, fmt="{:.2f}": "–" if x is None else fmt.format(x)  # noqa: E731
    r = sec["rule"]
    lines = ["", f"### Seeded drafter rounds (issue 20; random weights, block {sec['block_size']}, "
                 f"{sec['drafter_layers']} layers, seed bias {sec['seed_bias']}; cut rule {r['rule']}, extra {r['extra']}, "
                 f"min_prob {r['min_prob']})", "",
             "| streams | arm | draft | propose | verify | commit | round | ÷ DFlash round | τ | verified width | seeded slots |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for n, lvl in sec["levels"].items():
        for arm, a in lvl["arms"].items():
            m = a["round_ms"]
            lines.append(f"| {n} | {arm} | {f(m['draft'])} | {f(m['propose'])} | {f(m['verify'])} | {f(m['commit'])} | "
                         f"{f(a['round_total_ms'])} | {f(a.get('round_time_ratio'), '{:.3f}')} | {f(a['tau'])} | "
                         f"{f(a['mean_verified_width'])} | {f(a['seeded_slot_share'], '{:.0%}')} |")
    for err in sec.get("errors", []):
        lines.append(f"\nError ({err['arm']}, {err['streams']} streams): {err['error']}")
    return lines
