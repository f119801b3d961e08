"""Recipe of the reference stage: the target writes responses to the selected prompts
(`draftlab.data.references.select_prompts`), batched with prompts sorted by length (little padding),
and the rows become data/references.parquet, the drafter's training and validation data.

Takes a target and token-id prompts, returns rows and throughput stats; the stage decides paths. With a
work folder (`draftlab.pipeline.shards`) each finished batch is written as a shard and a killed run resumes.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from draftlab.data.references import EncodedPrompt
from draftlab.pipeline import shards as S
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


def _fmt_s(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


@torch.no_grad()
def generate_references(target, prompts: list[EncodedPrompt], max_new_tokens: int, batch_size: int,
                        temperature: float = 0.0, top_p: float = 1.0, top_k: int = 0, seed: int = 0,
                        progress: bool = True, engine: str = "ar", shards: str | Path | None = None,
                        identity: dict | None = None) -> tuple[list[dict], dict]:
    """Batched generation, prompts sorted by length. Returns rows and throughput stats.
    engine "ar": the project's AR engine (drops finished streams, in-place KV buffers, prefill logits
    of the last prompt token only); "hf": transformers `generate` (finished rows keep computing).
    shards: a work folder (`draftlab.pipeline.shards`): each finished batch is written there and a re-run
    reads the batches that exist and generates only the others, as the uninterrupted run would batch them
    (`identity`: what else must match to resume, e.g. the target's settings). The rows are the same either way.
    progress: one line per finished batch (done / total batches and sequences, tokens/s, ETA) on stderr."""
    tok = target.tokenizer
    pad = tok.pad_token_id if tok is not None and tok.pad_token_id is not None else target.eos_token_ids[0]
    eos = set(target.eos_token_ids)
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i].ids))
    plan_idx = [order[s:s + batch_size] for s in range(0, len(order), batch_size)]
    rows: list[dict | None] = [None] * len(prompts)
    sp = SamplingParams(temperature, top_p, top_k)
    torch.manual_seed(seed)
    generator = torch.Generator(device=target.device).manual_seed(seed) if temperature > 0 else None
    if shards is not None:
        settings = {"engine": engine, "max_new_tokens": max_new_tokens, "batch_size": batch_size,
                    "temperature": temperature, "top_p": top_p, "top_k": top_k, "seed": seed, **(identity or {})}
        S.open_plan(Path(shards), S.make_plan([[prompts[i] for i in idx] for idx in plan_idx], settings))
        S.clean_temporaries(Path(shards))
    t0, n_tokens, n_prompt, n_gen_tokens, gen_wall, resumed, seqs = time.time(), 0, 0, 0, 0.0, 0, 0
    for k, idx in enumerate(plan_idx):
        got = S.read_shard(Path(shards), k, [prompts[i].prompt.id for i in idx]) if shards is not None else None
        if got is not None:
            batch_rows, rng = got
            S.set_rng_state(rng, generator, target.device)
            resumed += 1
        else:
            tb = time.time()
            batch = [prompts[i].ids for i in idx]
            if engine == "hf":
                outs = _generate_hf(target, batch, max_new_tokens, pad, eos, temperature, top_p, top_k)
            else:
                outs = generate_ar(target, batch, max_new_tokens, sp, sorted(eos), generator, pad).tokens
            batch_rows = []
            for i, resp in zip(idx, outs):
                cut = next((j + 1 for j, t in enumerate(resp) if t in eos), None)
                finish = "eos" if cut is not None else "length"
                resp = resp[:cut] if cut is not None else resp
                ep = prompts[i]
                batch_rows.append({"prompt_id": ep.prompt.id, "suite": ep.prompt.suite, "split": ep.split,
                                   "prompt_ids": ep.ids, "response_ids": resp,
                                   "text": tok.decode(resp, skip_special_tokens=True) if tok is not None else "",
                                   "finish_reason": finish})
            if shards is not None:
                S.write_shard(Path(shards), k, batch_rows, S.rng_state(generator, target.device))
            gen_wall += time.time() - tb
            n_gen_tokens += sum(len(r["response_ids"]) for r in batch_rows)
        for i, r in zip(idx, batch_rows):
            rows[i] = r
            n_tokens += len(r["response_ids"])
            n_prompt += len(prompts[i].ids)
        seqs += len(idx)
        if progress:
            gen = k + 1 - resumed
            rate = n_gen_tokens / gen_wall if gen_wall > 0 else 0.0
            eta = _fmt_s(gen_wall / gen * (len(plan_idx) - k - 1)) if gen else "?"
            print(f"reference: batch {k + 1}/{len(plan_idx)} ({resumed} resumed), {seqs}/{len(prompts)} sequences, "
                  f"{rate:.0f} tokens/s, ETA {eta}", file=sys.stderr, flush=True)
    wall = time.time() - t0
    stats = {"sequences": len(prompts), "tokens": n_tokens, "prompt_tokens": n_prompt, "wall_s": wall,
             "tokens_per_s": n_gen_tokens / gen_wall if gen_wall > 0 else 0.0,
             "finish_eos": sum(r["finish_reason"] == "eos" for r in rows),
             "finish_length": sum(r["finish_reason"] == "length" for r in rows), "engine": engine,
             "batches": len(plan_idx), "batches_resumed": resumed, "batches_generated": len(plan_idx) - resumed,
             "generated_tokens": n_gen_tokens, "generation_s": gen_wall}
    return rows, stats  # type: ignore[return-value]
