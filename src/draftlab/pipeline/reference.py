"""Recipe of the reference stage: the target writes responses to the selected prompts
(`draftlab.data.references.select_prompts`), batched with prompts sorted by length (little padding),
and the rows become data/references.parquet, the drafter's training and validation data.

Takes a target and token-id prompts, returns rows and throughput stats; the stage decides paths.
"""
from __future__ import annotations

import time

import torch

from draftlab.data.references import EncodedPrompt
from draftlab.decoding.ar import generate_ar
from draftlab.decoding.verify import SamplingParams


def _generate_hf(target, batch: list[list[int]], max_new_tokens: int, pad: int, eos: set[int], temperature: float,
                 top_p: float, top_k: int) -> list[list[int]]:
    """One left-padded batch through transformers `generate` (the "hf" engine)."""
    gen = dict(max_new_tokens=max_new_tokens, pad_token_id=pad, eos_token_id=list(eos))
    if temperature > 0:
        gen.update(do_sample=True, temperature=temperature, top_p=top_p, top_k=top_k or None)
    else:
        gen.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    L = max(len(p) for p in batch)
    ids = torch.full((len(batch), L), pad, dtype=torch.long)
    att = torch.zeros((len(batch), L), dtype=torch.long)
    for r, p in enumerate(batch):
        ids[r, L - len(p):] = torch.tensor(p)
        att[r, L - len(p):] = 1
    out = target.model.generate(input_ids=ids.to(target.device), attention_mask=att.to(target.device), **gen)
    return [out[r, L:].tolist() for r in range(len(batch))]


@torch.no_grad()
def generate_references(target, prompts: list[EncodedPrompt], max_new_tokens: int, batch_size: int,
                        temperature: float = 0.0, top_p: float = 1.0, top_k: int = 0, seed: int = 0,
                        progress: bool = True, engine: str = "ar") -> tuple[list[dict], dict]:
    """Batched generation, prompts sorted by length. Returns rows and throughput stats.
    engine "ar": the project's AR engine (drops finished streams, in-place KV buffers, prefill logits
    of the last prompt token only); "hf": transformers `generate` (finished rows keep computing)."""
    from tqdm import tqdm

    tok = target.tokenizer
    pad = tok.pad_token_id if tok is not None and tok.pad_token_id is not None else target.eos_token_ids[0]
    eos = set(target.eos_token_ids)
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i].ids))
    rows: list[dict | None] = [None] * len(prompts)
    sp = SamplingParams(temperature, top_p, top_k)
    torch.manual_seed(seed)
    generator = torch.Generator(device=target.device).manual_seed(seed) if temperature > 0 else None
    t0, n_tokens, n_prompt = time.time(), 0, 0
    bar = tqdm(total=len(prompts), desc="reference", unit="seq", disable=not progress)
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        batch = [prompts[i].ids for i in idx]
        if engine == "hf":
            outs = _generate_hf(target, batch, max_new_tokens, pad, eos, temperature, top_p, top_k)
        else:
            outs = generate_ar(target, batch, max_new_tokens, sp, sorted(eos), generator, pad).tokens
        for i, resp in zip(idx, outs):
            cut = next((j + 1 for j, t in enumerate(resp) if t in eos), None)
            finish = "eos" if cut is not None else "length"
            resp = resp[:cut] if cut is not None else resp
            n_tokens += len(resp)
            n_prompt += len(prompts[i].ids)
            ep = prompts[i]
            rows[i] = {"prompt_id": ep.prompt.id, "suite": ep.prompt.suite, "split": ep.split,
                       "prompt_ids": ep.ids, "response_ids": resp,
                       "text": tok.decode(resp, skip_special_tokens=True) if tok is not None else "",
                       "finish_reason": finish}
        bar.update(len(idx))
        bar.set_postfix(tok_s=f"{n_tokens / (time.time() - t0):.0f}")
    bar.close()
    wall = time.time() - t0
    stats = {"sequences": len(prompts), "tokens": n_tokens, "prompt_tokens": n_prompt, "wall_s": wall,
             "tokens_per_s": n_tokens / max(wall, 1e-9),
             "finish_eos": sum(r["finish_reason"] == "eos" for r in rows),
             "finish_length": sum(r["finish_reason"] == "length" for r in rows), "engine": engine}
    return rows, stats  # type: ignore[return-value]
