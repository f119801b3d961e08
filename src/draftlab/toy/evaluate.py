"""How well a toy target answers: greedy exact match per family and its uncertainty at T=1.

`greedy_answers` decodes a batch of prompts greedily with a plain batched KV-cache loop (left padding,
explicit positions). `evaluate` scores held-out examples per family with `tasks.valid` (any order counts for
`distinct`) and measures, on the target's own greedy answers (teacher-forced, `<|im_end|>` included), the
entropy of its next-token distribution at T=1: the share of answer positions at >= 0.5 nats. `teacher_forced`
is the cheap learning-curve reading used during training: per family, the share of sequences whose every
answer position has its argmax right (for `distinct`, the argmax is one of the symbols still owed, or the
end once none is; for `swap`, either symbol of the pair at its first position, then the other), which for deterministic families is exactly greedy exact match.
"""
from __future__ import annotations

import math
from collections import defaultdict
from statistics import fmean

import torch
import torch.nn.functional as F
from transformers import DynamicCache

from draftlab.toy.tasks import MARKS, Example, valid
from draftlab.verifier.model import left_pad
from draftlab.toy.tokenizer import EOS, PAD, chat_ids, encode_words

HIGH_ENTROPY = 0.5  # nats


@torch.no_grad()
def greedy_answers(model, prompts: list[list[int]], eos: int, pad: int, max_new: int) -> list[list[int]]:
    """Greedy continuations (without the eos) of templated prompt ids, decoded as one batch."""
    ids, mask = left_pad(prompts, pad)
    B = len(prompts)
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    cache = DynamicCache()
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, cache=cache, use_cache=True)
    nxt = out.logits[:, -1].argmax(-1)
    done = torch.zeros(B, dtype=torch.bool)
    gen: list[list[int]] = [[] for _ in range(B)]
    last_pos = pos[:, -1]
    for _ in range(max_new):
        for i in range(B):
            if not done[i]:
                if int(nxt[i]) == eos:
                    done[i] = True
                else:
                    gen[i].append(int(nxt[i]))
        if bool(done.all()):
            break
        mask = torch.cat([mask, torch.ones(B, 1, dtype=torch.long)], 1)
        last_pos = last_pos + 1
        out = model(input_ids=nxt[:, None], attention_mask=mask, position_ids=last_pos[:, None], cache=cache,
                    use_cache=True)
        nxt = out.logits[:, -1].argmax(-1)
    return gen


def _batches(xs: list, n: int):
    for i in range(0, len(xs), n):
        yield xs[i:i + n]


@torch.no_grad()
def answer_logits(model, tokenizer, prompts: list[str], answers: list[list[int]]) -> list[torch.Tensor]:
    """Per example, the target's logits at the answer positions ([len(answer) + 1, V]: each answer token,
    then the eos), teacher-forced on `answers` (right padding: no mask needed)."""
    eos, pad = tokenizer.convert_tokens_to_ids([EOS, PAD])
    rows = [(chat_ids(tokenizer, p), a + [eos]) for p, a in zip(prompts, answers)]
    T = max(len(p) + len(a) for p, a in rows)
    ids = torch.full((len(rows), T), pad, dtype=torch.long)
    for i, (p, a) in enumerate(rows):
        ids[i, :len(p) + len(a)] = torch.tensor(p + a)
    logits = model(input_ids=ids).logits.float()
    return [logits[i, len(p) - 1:len(p) + len(a) - 1] for i, (p, a) in enumerate(rows)]


def _entropy(logits: torch.Tensor) -> torch.Tensor:
    logp = F.log_softmax(logits, -1)
    return -(logp.exp() * logp).sum(-1)


@torch.no_grad()
def evaluate(model, tokenizer, exs: list[Example], batch: int = 64, max_new: int = 0) -> dict:
    """Greedy exact match and T=1 entropy per family and overall (every example weighs the same overall)."""
    model.eval()
    eos, pad = tokenizer.convert_tokens_to_ids([EOS, PAD])
    longest = max(len(e.answer.split()) for e in exs)
    max_new = max_new or longest + 8
    by: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    order = sorted(range(len(exs)), key=lambda i: len(exs[i].prompt.split()))
    for idx in _batches(order, batch):
        chunk = [exs[i] for i in idx]
        gen = greedy_answers(model, [chat_ids(tokenizer, e.prompt) for e in chunk], eos, pad, max_new)
        logits = answer_logits(model, tokenizer, [e.prompt for e in chunk], gen)
        for e, g, lg in zip(chunk, gen, logits):
            text = tokenizer.decode(g, skip_special_tokens=False)
            ok = valid(e.prompt, text) and len(g) < max_new
            h = _entropy(lg)
            d = by[e.family]
            d["exact"].append(float(ok))
            d["len"].append(len(g))
            d["high"].append(float((h >= HIGH_ENTROPY).float().mean()))
            d["positions"].append(len(h))
            d["high_n"].append(int((h >= HIGH_ENTROPY).sum()))
            d["entropy"].append(float(h.mean()))
            if not ok and len(d["failures"]) < 3:
                d["failures"].append({"id": e.id, "prompt": e.prompt, "expected": e.answer, "got": text})
    fam = {}
    for name, d in sorted(by.items()):
        fam[name] = {"n": len(d["exact"]), "exact_match": fmean(d["exact"]), "mean_answer_tokens": fmean(d["len"]),
                     "min_answer_tokens": min(d["len"]),
                     "high_entropy_share": sum(d["high_n"]) / max(1, sum(d["positions"])),
                     "mean_entropy_nats": fmean(d["entropy"]), "failures": d["failures"]}
    all_exact = [x for d in by.values() for x in d["exact"]]
    overall = {"n": len(all_exact), "exact_match": fmean(all_exact),
               "min_family_exact_match": min(f["exact_match"] for f in fam.values()),
               "high_entropy_share": sum(sum(d["high_n"]) for d in by.values())
               / max(1, sum(sum(d["positions"]) for d in by.values()))}
    return {"overall": overall, "families": fam}


@torch.no_grad()
def teacher_forced(model, tokenizer, exs: list[Example], batch: int = 64) -> dict[str, float]:
    """Per family, the share of sequences whose every answer position's argmax is right (see module doc)."""
    model.eval()
    eos = tokenizer.convert_tokens_to_ids(EOS)
    hits: dict[str, list[float]] = defaultdict(list)
    for chunk in _batches(exs, batch):
        answers = [encode_words(tokenizer, e.answer) for e in chunk]
        logits = answer_logits(model, tokenizer, [e.prompt for e in chunk], answers)
        for e, a, lg in zip(chunk, answers, logits):
            top = lg.argmax(-1).tolist()
            if e.family == "distinct":
                owed, ok = set(a), True
                for t, tok in zip(top, a + [eos]):
                    ok &= (t in owed) if owed else (t == eos)
                    owed.discard(tok)
            elif e.family in ("swap", "flip"):  # at a pair's first position either symbol of the pair, then the
                k = 3 if e.family == "flip" else 2  # other one; flip's `|` after each pair as written
                pairs = [set(a[i:i + 2]) for i in range(0, len(a), k)]
                ok = top[len(a)] == eos and all(
                    t == w if i % k == 2 else t in pairs[i // k] if i % k == 0 else {t, a[i - 1]} == pairs[i // k]
                    for i, (t, w) in enumerate(zip(top, a)))
            elif e.family in ("mark", "fill"):  # a mark position may hold either mark
                marks = set(encode_words(tokenizer, " ".join(MARKS)))
                ok = top[len(a)] == eos and all(t == w or (i % 2 and t in marks) for i, (t, w) in enumerate(zip(top, a)))
            else:
                ok = top == a + [eos]
            hits[e.family].append(float(ok))
    return {k: fmean(v) for k, v in sorted(hits.items())}


def flops_per_token(cfg, ctx: float) -> dict[str, float]:
    """Forward FLOPs per token of a Llama config at `ctx` keys, and of a 1- and 2-layer drafter of its width
    (one layer of the same shape each, plus a 4-tap context projection 4H -> H; the LM head shared)."""
    H, L, V = cfg.hidden_size, cfg.num_hidden_layers, cfg.vocab_size
    heads, kv = cfg.num_attention_heads, cfg.num_key_value_heads
    hd = getattr(cfg, "head_dim", None) or H // heads
    layer = H * heads * hd * 2 + H * kv * hd * 2 + 3 * H * cfg.intermediate_size
    attn = 4 * heads * hd * ctx
    target = L * (2 * layer + attn) + 2 * H * V
    drafter = {n: n * (2 * layer + attn) + 2 * 4 * H * H + 2 * H * V for n in (1, 2)}
    return {"target": float(target), "drafter_1_layer": float(drafter[1]), "drafter_2_layers": float(drafter[2]),
            "ratio_1_layer": target / drafter[1], "ratio_2_layers": target / drafter[2],
            "ctx": float(ctx), "non_embedding_params": float(L * layer), "log10_target": math.log10(target)}
