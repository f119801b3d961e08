"""The reference stage's prompts: training / held-out / eval prompts, de-duplicated (no eval prompt
reaches training), split, subsampled and encoded with the chat template.

Library code (plain Python over `draftlab.data.suites`): takes the data / reference sections and a
tokenizer, returns encoded prompts; the target writes their responses in `draftlab.pipeline.reference`.
"""
from __future__ import annotations

from dataclasses import dataclass

from draftlab.errors import DraftlabError
from draftlab.data.suites import Prompt, dedupe, load_local_jsonl, load_suite, rank, split_heldout
from draftlab.data.templates import encode_prompt


@dataclass
class EncodedPrompt:
    prompt: Prompt
    split: str  # train | heldout | eval
    ids: list[int]


def select_prompts(data_cfg, ref_cfg, tokenizer, context_window: int) -> tuple[list[EncodedPrompt], dict]:
    """Training / held-out / eval prompts: de-duplicated, eval suites never in training, encoded."""
    evals: list[Prompt] = []
    for s in data_cfg.eval_suites:
        evals += load_suite(s, data_cfg.local_suites)
    evals, e_empty, _ = dedupe(evals)
    train_pool = load_suite("sharegpt") if data_cfg.train_suite == "sharegpt" else []
    if data_cfg.local_jsonl:
        train_pool += load_local_jsonl(data_cfg.local_jsonl)
    from draftlab.data.suites import normalise

    train_pool, empty, dups = dedupe(train_pool, exclude={normalise(p.text) for p in evals})
    train, held = split_heldout(train_pool, data_cfg.heldout_fraction, data_cfg.split_seed)
    chosen = [(p, "train") for p in rank(train, ref_cfg.seed)[: ref_cfg.num_train_prompts]]
    chosen += [(p, "heldout") for p in rank(held, ref_cfg.seed)[: ref_cfg.num_heldout_prompts]]
    for s in data_cfg.eval_suites:
        chosen += [(p, "eval") for p in rank([p for p in evals if p.suite == s], ref_cfg.seed)[: ref_cfg.num_eval_per_suite]]
    max_tokens = min(data_cfg.max_prompt_tokens, max(16, context_window - ref_cfg.max_new_tokens))
    out, truncated = [], 0
    for p, split in chosen:
        ids, cut = encode_prompt(tokenizer, p.text, data_cfg.thinking, max_tokens, p.messages)
        truncated += cut
        out.append(EncodedPrompt(p, split, ids))
    stats = {"pool_train": len(train), "pool_heldout": len(held), "empty_skipped": empty + e_empty,
             "duplicates_dropped": dups, "truncated": truncated, "max_prompt_tokens": max_tokens,
             "selected": {s: sum(1 for e in out if e.split == s) for s in ("train", "heldout", "eval")}}
    if not any(e.split == "train" for e in out):
        raise DraftlabError("no training prompts left after de-duplication; check data.train_suite / data.local_jsonl")
    return out, stats
