"""The reference stage's prompts and the held-out pool: training / held-out / eval prompts,
de-duplicated (no eval prompt reaches training), split, subsampled and encoded with the chat template;
and the open-chat benchmark suite carved out of the held-out pool.

Who sees which prompt: the training pool (ShareGPT, plus `data.local_jsonl`, minus every eval-suite prompt)
is split by a hash of the text into train and held-out (`data.heldout_fraction`, `data.split_seed`).
Training uses `reference.num_train_prompts` of the train part; checkpoint selection (every stage's
validation) uses the first `reference.num_heldout_prompts` of the held-out part in the seeded order
`rank(held, reference.seed)`. The rest of the held-out part is seen by no stage: its ShareGPT prompts
are the `sharegpt-chat` benchmark suite (`chat_suite`; 451 prompts on the cpu profile).

Library code (plain Python over `draftlab.data.suites`): takes the data / reference sections and a
tokenizer, returns prompts; the target writes their responses in `draftlab.recipes.reference`.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from draftlab.errors import DraftlabError
from draftlab.data.suites import (CHAT_SUITE, Prompt, dedupe, load_local_jsonl, load_suite, normalise, rank,
                                  read_sharegpt, split_heldout)
from draftlab.data.templates import encode_prompt


@dataclass
class EncodedPrompt:
    prompt: Prompt
    split: str  # train | heldout | eval
    ids: list[int]


@dataclass
class Pools:
    """The prompt pools of one data section: eval-suite prompts and the training pool's two parts."""

    evals: list[Prompt]  # every eval suite's prompts, de-duplicated
    train: list[Prompt]  # the training pool's train part (references for training come from here)
    held: list[Prompt]  # its held-out part (validation, then the chat suite)
    empty: int  # empty prompts skipped
    duplicates: int  # duplicates dropped from the training pool (eval prompts included)
    sharegpt_truncated_tail: int = 0  # 1: the ShareGPT file ended inside its last item, dropped (the packaged one does)


def split_pools(data_cfg) -> Pools:
    """Eval prompts, then the training pool without them, split into train / held-out by a text hash."""
    evals: list[Prompt] = []
    for s in data_cfg.eval_suites:
        evals += load_suite(s, data_cfg.local_suites)
    evals, e_empty, _ = dedupe(evals)
    train_pool, tail = [], 0
    if data_cfg.train_suite == "sharegpt":
        train_pool, read = read_sharegpt()
        tail = read.truncated_tail
    if data_cfg.local_jsonl:
        train_pool += load_local_jsonl(data_cfg.local_jsonl)
    train_pool, empty, dups = dedupe(train_pool, exclude={normalise(p.text) for p in evals})
    train, held = split_heldout(train_pool, data_cfg.heldout_fraction, data_cfg.split_seed)
    return Pools(evals, train, held, empty + e_empty, dups, tail)


def heldout_validation(held: list[Prompt], ref_cfg) -> list[Prompt]:
    """The held-out prompts the references hold for validation (checkpoint selection), in their order."""
    return rank(held, ref_cfg.seed)[: ref_cfg.num_heldout_prompts]


def select_prompts(data_cfg, ref_cfg, tokenizer, context_window: int,
                   pools: Pools | None = None) -> tuple[list[EncodedPrompt], dict]:
    """Training / held-out / eval prompts: de-duplicated, eval suites never in training, encoded
    (`pools`: `split_pools(data_cfg)`, when the caller has it already)."""
    pools = pools or split_pools(data_cfg)
    train, held, evals = pools.train, pools.held, pools.evals
    chosen = [(p, "train") for p in rank(train, ref_cfg.seed)[: ref_cfg.num_train_prompts]]
    chosen += [(p, "heldout") for p in heldout_validation(held, ref_cfg)]
    for s in data_cfg.eval_suites:
        chosen += [(p, "eval") for p in rank([p for p in evals if p.suite == s], ref_cfg.seed)[: ref_cfg.num_eval_per_suite]]
    max_tokens = min(data_cfg.max_prompt_tokens, max(16, context_window - ref_cfg.max_new_tokens))
    out, truncated = [], 0
    for p, split in chosen:
        ids, cut = encode_prompt(tokenizer, p.text, data_cfg.thinking, max_tokens, p.messages)
        truncated += cut
        out.append(EncodedPrompt(p, split, ids))
    stats = {"pool_train": len(train), "pool_heldout": len(held), "empty_skipped": pools.empty,
             "duplicates_dropped": pools.duplicates, "truncated": truncated, "max_prompt_tokens": max_tokens,
             "sharegpt_truncated_tail": pools.sharegpt_truncated_tail,
             "selected": {s: sum(1 for e in out if e.split == s) for s in ("train", "heldout", "eval")}}
    if not any(e.split == "train" for e in out):
        raise DraftlabError("no training prompts left after de-duplication; check data.train_suite / data.local_jsonl")
    return out, stats


def chat_suite(data_cfg, ref_cfg, pools: Pools | None = None) -> list[Prompt]:
    """The `sharegpt-chat` suite: the ShareGPT prompts of the held-out pool that the held-out validation
    does not take, so neither training nor checkpoint selection saw them (ids stay the ShareGPT ones;
    `pools`: `split_pools(data_cfg)`, when the caller has it already)."""
    held = (pools or split_pools(data_cfg)).held
    seen = {p.id for p in heldout_validation(held, ref_cfg)}
    out = [replace(p, suite=CHAT_SUITE) for p in held if p.suite == "sharegpt" and p.id not in seen]
    if not out:
        raise DraftlabError(f"benchmark suite '{CHAT_SUITE}' is empty: the held-out pool has "
                            f"{sum(p.suite == 'sharegpt' for p in held)} ShareGPT prompts and "
                            f"reference.num_heldout_prompts={ref_cfg.num_heldout_prompts} validates on them; "
                            "lower it or raise data.heldout_fraction")
    return out


def suite_prompts(name: str, data_cfg, ref_cfg) -> list[Prompt]:
    """A benchmark suite's prompts: the chat suite, or a packaged / local suite (`load_suite`)."""
    return chat_suite(data_cfg, ref_cfg) if name == CHAT_SUITE else load_suite(name, data_cfg.local_suites)
