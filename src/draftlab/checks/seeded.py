"""Section `seeded`: a seeded drafter's rounds beside plain DFlash's, on a target whose text repeats.

A random target continues no text, so on random prompts a lookup finds nothing and a seeded drafter seeds nothing
(the first accelerator run: τ 1.00, 0-1% of slots seeded: it measured no seeding). Here the random target of the
paper's shape is made a *cycler*: its layers' output projections are zeroed (the residual stream keeps the input
token's embedding; every layer still runs its full attention and MLP, so a pass costs what it costs) and its LM
head is the embedding permuted, so its greedy next token is pi(x) for a permutation pi whose cycles are each
stream's span of the prompt. Prompts are that span repeated, the lookup finds the continuation the target will
produce, and a seeded round's seeds are accepted: the seeding path runs as it does on real looping text. Arms:
    dflash              the plain random drafter (its proposals are rejected: τ ≈ 1), the base of the ratios;
    dflash-seeded       a random seeded drafter with a seed bias (it keeps its seeds, as a trained one starts);
    dflash-seeded-cut   the same, verifying only the seeded span + sure slots (`decoding.width.SpanProposal`).
Timed with `checks.timing` (warm-up per arm, rotated order, median and p20), with τ, the verified width and the
share of proposal slots that held a seed. τ of the seeded arms is the cycler's, not a trained drafter's: it says the
seeds were found and accepted, not how often a real target repeats itself.
"""
from __future__ import annotations

import time

from draftlab.checks.common import Ctx, one_line, round_tree, tail
from draftlab.checks.models import build_drafter, paper_target
from draftlab.checks.timing import rounds_of, time_arms
from draftlab.markdown import markdown_table

PAPER_SEEDED = dict(streams=(1, 8), new_tokens=48, seed_bias=8.0, extra=3, min_prob=0.15, span=12, reps=2)
DRY_SEEDED = dict(streams=(1, 2), new_tokens=16, seed_bias=8.0, extra=3, min_prob=0.15, span=6, reps=1)
ARMS = ("dflash", "dflash-seeded", "dflash-seeded-cut")


class Counting:
    """A proposal step counting what it proposes: verified width and seeded slots (kept on the device)."""

    def __init__(self, inner, mask_id: int):
        from draftlab.decoding.width import seeded_span

        self.inner, self.mask_id, self.span = inner, mask_id, seeded_span
        self.widths, self.slots, self.seeded = [], 0, None

    def __getattr__(self, name):  # the optional protocols of the inner step (e.g. SkipsDrafts) pass through
        return getattr(self.inner, name)

    def __call__(self, draft, sp, generator=None):
        p = self.inner(draft, sp, generator)
        self.widths.append(p.tokens.shape[1])
        s = self.span(draft.block_ids, self.mask_id).sum()
        self.seeded = s if self.seeded is None else self.seeded + s
        self.slots += draft.block_ids.shape[0] * (draft.block_ids.shape[1] - 1)
        return p


def cycling_prompts(n: int, length: int, span: int, vocab: int, seed: int) -> tuple[list[list[int]], list[list[int]]]:
    """n prompts, each a distinct random span of `span` ids repeated to `length`; -> (prompts, spans)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    ids = torch.randperm(vocab - 2, generator=g)[: n * span] + 1  # distinct ids across streams, never 0 or the MASK
    spans = [ids[i * span:(i + 1) * span].tolist() for i in range(n)]
    return [(s * (length // span + 1))[:length] for s in spans], spans


def make_cycler(target, spans: list[list[int]]) -> None:
    """Turn the random target into one whose greedy next token after x is the token after x in x's span (cyclic);
    ids outside the spans map to themselves. In place: zero each layer's attention and MLP output projection (the
    residual stream is the input embedding) and set the LM head to the embedding rows permuted accordingly."""
    import torch

    model = target.model
    V = target.vocab_size
    nxt = torch.arange(V)
    for s in spans:
        for a, b in zip(s, s[1:] + s[:1]):
            nxt[a] = b
    prev = torch.empty_like(nxt)
    prev[nxt] = torch.arange(V)  # logit_v = <E[prev[v]], h(x)>, largest at prev[v] = x, i.e. v = nxt[x]
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        emb = model.get_input_embeddings().weight
        head = model.get_output_embeddings()
        if head.weight.data_ptr() == emb.data_ptr():
            raise ValueError("the cycler needs an untied LM head")
        head.weight.copy_(emb[prev.to(emb.device)])


def section_seeded(ctx: Ctx) -> dict:
    import torch

    from draftlab.decoding.api import DrafterProposal
    from draftlab.decoding.speculative import SpeculativeEngine
    from draftlab.decoding.width import SpanProposal

    s = DRY_SEEDED if ctx.dry else PAPER_SEEDED
    sz = ctx.size
    target = paper_target(ctx)
    S, L = sz["drafter"]["block_size"], sz["drafter"]["num_layers"]
    n_max = max(s["streams"])
    prompts_all, spans = cycling_prompts(n_max, sz["prompt_tokens"], s["span"], target.vocab_size, seed=7)
    saved = {k: v.detach().clone() for k, v in target.model.named_parameters()
             if k.endswith(("o_proj.weight", "down_proj.weight", "lm_head.weight"))}
    res = {"block_size": S, "drafter_layers": L, "seed_bias": s["seed_bias"], "span": s["span"],
           "rule": {"rule": "span", "extra": s["extra"], "min_prob": s["min_prob"], "full_span": "seeds"},
           "prompt_tokens": sz["prompt_tokens"], "new_tokens": s["new_tokens"], "temperature": 0.0,
           "target": "the random target made a cycler (zeroed output projections, permuted LM head): its greedy text "
                     "repeats each prompt's span, so the lookup's seeds are right",
           "levels": {}, "errors": [], "skipped_streams": []}
    try:
        make_cycler(target, spans)
        plain = build_drafter(target, S, L, target.dtype)
        seeded = build_drafter(target, S, L, target.dtype, seed="lookup", seed_bias=s["seed_bias"])
        mask = seeded.mask_token_id
        steps = {"dflash": (plain, DrafterProposal), "dflash-seeded": (seeded, DrafterProposal),
                 "dflash-seeded-cut": (seeded, lambda: SpanProposal(mask, "span", s["extra"], s["min_prob"]))}
        for n in s["streams"]:
            if ctx.left() < (5 if ctx.dry else 20):
                res["skipped_streams"] = [m for m in s["streams"] if m >= n]
                break
            prompts, t0 = prompts_all[:n], time.perf_counter()
            counters: dict = {}

            def arm(name, drafter, make):
                def run():
                    counters[name] = step = Counting(make(), mask)
                    with torch.no_grad():
                        r = SpeculativeEngine(target, drafter, step).generate(prompts, s["new_tokens"], eos_ids=[])
                    acc = [a for x in r.accepted for a in x]
                    run.tau = 1 + sum(acc) / max(len(acc), 1)
                    return rounds_of(r)

                return run

            arms = {name: arm(name, d, make) for name, (d, make) in steps.items()}
            timing = time_arms(arms, reps=s["reps"])
            lvl = {"order": timing["orders"], "arms": {}}
            base = timing["arms"]["dflash"]["round_median_ms"]
            for name in ARMS:
                a, c = timing["arms"][name], counters[name]
                lvl["arms"][name] = {"round_ms": a["median_ms"], "round_p20_ms": a["p20_ms"],
                                     "round_total_ms": a["round_median_ms"],
                                     "round_total_p20_ms": a["round_p20_ms"], "rounds": a["rounds"],
                                     "tau": arms[name].tau, "round_time_ratio": base / a["round_median_ms"],
                                     "mean_verified_width": sum(c.widths) / max(len(c.widths), 1),
                                     "seeded_slot_share": (0.0 if c.seeded is None else float(c.seeded)) / max(c.slots, 1)}
            lvl["seconds"] = time.perf_counter() - t0
            res["levels"][str(n)] = lvl
    except Exception as e:  # noqa: BLE001
        res["errors"].append({"arm": "seeded", "streams": 0, "error": one_line(e)})
    finally:  # the shared target goes back to its random weights for the sections after this one
        with torch.no_grad():
            for k, p in target.model.named_parameters():
                if k in saved:
                    p.copy_(saved[k])
    seeded_share = [a["seeded_slot_share"] for lvl in res["levels"].values() for k, a in lvl["arms"].items()
                    if k != "dflash"]
    res["measures_seeding"] = bool(seeded_share) and min(seeded_share) > 0.2
    if res["levels"] and not res["measures_seeding"]:
        res["errors"].append({"arm": "seeded", "streams": 0, "error": "under 20% of the seeded arms' slots held a "
                              "seed: the section did not exercise seeding"})
    res["status"] = "error" if not res["levels"] else ("failed" if res["errors"] else (
        "partial" if res["skipped_streams"] else "ok"))
    return round_tree(res)


def render_seeded(sec: dict | None) -> list[str]:
    """The docs/gpu.md lines of this section."""
    if not sec or not sec.get("levels"):
        return []
    f = lambda x, fmt="{:.2f}": "–" if x is None else fmt.format(x)  # noqa: E731
    r = sec["rule"]
    lines = ["", f"### Seeded drafter rounds (a cycling target: {sec['target']}; block {sec['block_size']}, "
                 f"{sec['drafter_layers']} layers, seed bias {sec['seed_bias']}; cut rule {r['rule']}, extra "
                 f"{r['extra']}, min_prob {r['min_prob']}). Median ms per round (p20 in brackets):", ""]
    lines += markdown_table(
        ["streams", "arm", "draft", "propose", "verify", "commit", "round", "DFlash round ÷ this", "τ", "verified width",
         "seeded slots"],
        [[n, arm, f(a["round_ms"].get('draft')), f(a["round_ms"].get('propose')), f(a["round_ms"].get('verify')),
          f(a["round_ms"].get('commit')), f"{f(a['round_total_ms'])} ({f(a.get('round_total_p20_ms'))})",
          f(a.get('round_time_ratio'), '{:.3f}'), f(a['tau']), f(a['mean_verified_width']),
          f(a['seeded_slot_share'], '{:.0%}')] for n, lvl in sec["levels"].items() for arm, a in lvl["arms"].items()])
    lines.append("\nτ of the seeded arms is the cycler's: the seeds were found and accepted; it is not a trained "
                 "drafter's τ on real text.")
    return lines + tail(sec, lambda err: f"{err['arm']}, {err['streams']} streams")
