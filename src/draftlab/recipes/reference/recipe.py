"""Recipe of the reference stage: the target writes responses to the selected prompts
(`draftlab.data.references.select_prompts`), batched with prompts sorted by length (little padding),
and the rows become data/references.parquet, the drafter's training and validation data.

Takes a target and token-id prompts, returns rows and throughput stats; the stage decides paths. With a
work folder (`draftlab.recipes.reference.shards`) each finished batch is written as a shard and a killed run resumes.
Engine "openai" (`draftlab.recipes.reference.openai_engine`): the same prompt ids go to OpenAI-compatible servers instead
of the local target (which then only lends its tokenizer and EOS ids); each row records which server and model
answered, and greedy runs send a sample of prompts twice for the agreement reading.
"""
from __future__ import annotations

import hashlib
import sys
import time
from pathlib import Path

import torch

from draftlab.data.references import EncodedPrompt
from draftlab.recipes.reference import shards as S  # the module, not the package
from draftlab.decoding.ar import generate_ar
from draftlab.decoding.verify import SamplingParams
from draftlab.verifier.model import left_pad
from draftlab.recipes.reference.openai_engine import OpenAIEngine, agreement


def _generate_hf(target, batch: list[list[int]], max_new_tokens: int, pad: int, eos: set[int], temperature: float,
                 top_p: float, top_k: int) -> list[list[int]]:
    """One left-padded batch through transformers `generate` (the "hf" engine)."""
    gen = dict(max_new_tokens=max_new_tokens, pad_token_id=pad, eos_token_id=list(eos))
    if temperature > 0:
        gen.update(do_sample=True, temperature=temperature, top_p=top_p, top_k=top_k or None)
    else:
        gen.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    ids, att = left_pad(batch, pad)
    L = ids.shape[1]
    out = target.model.generate(input_ids=ids.to(target.device), attention_mask=att.to(target.device), **gen)
    return [out[r, L:].tolist() for r in range(len(batch))]


def _key(seed: int, prompt_id: str) -> int:
    """A stable 63-bit number per (seed, prompt id): the openai engine's per-request sampling seed and the
    agreement sample's order (independent of batching and of resuming)."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{prompt_id}".encode()).digest()[:8], "big") >> 1


def _agreement(client: OpenAIEngine, prompts: list[EncodedPrompt], rows: list[dict], max_new_tokens: int,
               sample: int, threshold: float, seed: int) -> dict:
    """Send `sample` prompts (a seeded choice) a second time and compare with their rows, token for token."""
    pick = sorted(range(len(prompts)), key=lambda i: _key(seed, "agreement:" + prompts[i].prompt.id))[:sample]
    again = client.generate([prompts[i].ids for i in pick], max_new_tokens)
    out = agreement([list(rows[i]["response_ids"]) for i in pick], [a.tokens for a in again], threshold)
    out["other_server"] = sum(a.server != rows[i]["server"] for a, i in zip(again, pick))
    return out


def _fmt_s(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def compile_run(target, prompts: list[EncodedPrompt], max_new_tokens: int, batch_size: int, temperature: float,
                engine) -> dict:
    """A compiled reference run's declaration (`draftlab.decoding.shapes`): one capacity (the longest selected prompt
    + max_new_tokens), the batch sizes reference.batch_size and engine.batch_sizes (the last, smaller batch padded up),
    verify width 1; every graph compiled before the first batch. -> the record the stage keeps."""
    from draftlab.decoding.shapes import declare, prepare_run

    shapes = declare(max(len(p.ids) for p in prompts), max_new_tokens, 1, [min(batch_size, len(prompts))],
                     [1], engine.batch_sizes, engine.kv_capacity, where="engine")
    sizes = [min(batch_size, len(prompts) - s) for s in range(0, len(prompts), batch_size)]
    return prepare_run(target, shapes, [(None, n, temperature) for n in sizes], engine.max_graphs)


@torch.no_grad()
def generate_references(target, prompts: list[EncodedPrompt], max_new_tokens: int, batch_size: int,
                        temperature: float = 0.0, top_p: float = 1.0, top_k: int = 0, seed: int = 0,
                        progress: bool = True, engine: str = "ar", shards: str | Path | None = None,
                        identity: dict | None = None, client: OpenAIEngine | None = None,
                        agreement_sample: int = 0, agreement_threshold: float = 0.95) -> tuple[list[dict], dict]:
    """Batched generation, prompts sorted by length. Returns rows and throughput stats.
    engine "ar": the project's AR engine (drops finished streams, in-place KV buffers, prefill logits
    of the last prompt token only); "hf": transformers `generate` (finished rows keep computing); "openai":
    `client`'s servers answer each batch's prompts (rows gain `server` and `server_model`; greedy: the stats'
    `agreement` over `agreement_sample` prompts sent twice, flagged below `agreement_threshold`).
    shards: a work folder (`draftlab.recipes.reference.shards`): each finished batch is written there and a re-run
    reads the batches that exist and generates only the others, as the uninterrupted run would batch them
    (`identity`: what else must match to resume, e.g. the target's settings). The rows are the same either way.
    progress: one line per finished batch (done / total batches and sequences, tokens/s, ETA) on stderr."""
    if engine == "openai" and client is None:
        raise ValueError("engine openai needs a client (draftlab.recipes.reference.openai_engine.OpenAIEngine)")
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
            served = None
            if engine == "openai":
                served = client.generate(batch, max_new_tokens, [_key(seed, prompts[i].prompt.id) for i in idx])
                outs = [a.tokens for a in served]
            elif engine == "hf":
                outs = _generate_hf(target, batch, max_new_tokens, pad, eos, temperature, top_p, top_k)
            else:
                outs = generate_ar(target, batch, max_new_tokens, sp, sorted(eos), generator, pad).tokens
            batch_rows = []
            for n, (i, resp) in enumerate(zip(idx, outs)):
                cut = next((j + 1 for j, t in enumerate(resp) if t in eos), None)
                finish = "eos" if cut is not None else "length"
                resp = resp[:cut] if cut is not None else resp
                ep = prompts[i]
                batch_rows.append({"prompt_id": ep.prompt.id, "suite": ep.prompt.suite, "split": ep.split,
                                   "prompt_ids": ep.ids, "response_ids": resp,
                                   "text": tok.decode(resp, skip_special_tokens=True) if tok is not None else "",
                                   "finish_reason": finish})
                if served is not None:
                    batch_rows[-1].update(server=served[n].server, server_model=served[n].model)
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
    if engine == "openai":
        stats["servers"] = [{"url": u, "rows": sum(r["server"] == u for r in rows)}  # a list: URLs are no metric names
                            for u in sorted({r["server"] for r in rows})]
        stats["server_models"] = sorted({r["server_model"] for r in rows})
        if temperature == 0 and agreement_sample > 0:
            a = _agreement(client, prompts, rows, max_new_tokens, agreement_sample, agreement_threshold, seed)
            stats["agreement"] = a
            if progress or a["below_threshold"]:
                print(f"reference: greedy agreement {a['identical']}/{a['sample']} prompts answered alike twice "
                      f"(rate {a['rate']:.3f}, threshold {agreement_threshold:g}"
                      f"{'; BELOW the threshold' if a['below_threshold'] else ''})", file=sys.stderr, flush=True)
    return rows, stats  # type: ignore[return-value]
