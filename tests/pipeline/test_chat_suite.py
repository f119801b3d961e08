"""The reference stage's selection is pinned, and the `sharegpt-chat` benchmark suite is carved out of the
held-out pool only: disjoint from every training prompt and from the held-out validation (checkpoint
selection), free of eval-suite prompts, deterministic; bad settings fail in one line."""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import replace

import pytest
from stubs import WordTokenizer as Tok

from draftlab.data import references as R
from draftlab.data.suites import CHAT_SUITE, Prompt, load_suite, normalise
from draftlab.errors import ConfigError, DraftlabError
from draftlab.params import build_params, compose_params

# The cpu profile's reference selection as main selected it before the chat suite existed (commit 0cbb00e):
# sha256 over "split<TAB>prompt id<TAB>encoded ids" per selected prompt, in the stage's order (which fixes
# the batches), with the whitespace stub tokenizer (tests/stubs.py). A change here moves the references: regenerate
# them on purpose, then update the pin.
PINNED = {"train": (1400, "5253a318d36a76b08c9fa620c231051db86725fc592c12f8f0d9ae09a19dbe0c"),
          "heldout": (48, "24c709f3f8ea69495a8342b369516eba84c10b431625cba1968f4d2587820783"),
          "eval": (24, "25957a4d673d38567b912306d280473ad9de358a0ded2974b4383ed5c8f98546")}
PINNED_ALL = "41624c6359cc061e6dfd0f2b889b6b9ca391cb680ac4fd7cefc2821e7e23ffe3"
# the cpu profile's chat suite (its prompt ids in order): the same on every machine and run
PINNED_CHAT = (451, "29b221cb354feca11df2d717c8e766efd711d13ecad5c7cb08401095a2b87080")


def _sha(lines) -> str:
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


@pytest.fixture(scope="module")
def cpu(root):
    """The cpu profile's params, its reference selection, its prompt pools and its chat suite, at the 1,400 training
    references the pins were taken with (the profile now selects 450: docs/decisions.md, "The cpu profile fits one
    session")."""
    params = build_params(compose_params(["profile=cpu", "reference.num_train_prompts=1400"], root / "conf"))
    pools = R.split_pools(params.data)  # loads ShareGPT once for the module
    chosen, stats = R.select_prompts(params.data, params.reference, Tok(), 4096, pools)
    return params, chosen, stats, pools, R.chat_suite(params.data, params.reference, pools)


def test_the_reference_selection_does_not_move(cpu):
    """The train prompt list (and the held-out and eval ones) of the cpu profile, order and encoding
    included, is the one main selected before the chat suite was carved out."""
    params, chosen = cpu[:2]
    assert CHAT_SUITE in params.benchmark.suites  # the profile benchmarks the suite ...
    for split, (n, sha) in PINNED.items():  # ... and its references stay where they were
        ids = [e.prompt.id for e in chosen if e.split == split]
        assert (len(ids), _sha(ids)) == (n, sha), split
    assert _sha(f"{e.split}\t{e.prompt.id}\t{e.ids}" for e in chosen) == PINNED_ALL


def test_chat_suite_is_unseen_by_training_and_checkpoint_selection(cpu):
    _, chosen, stats, pools, chat = cpu
    ids = [p.id for p in chat]
    validation = {e.prompt.id for e in chosen if e.split == "heldout"}
    assert len(ids) == len(set(ids)) > 0 and all(p.suite == CHAT_SUITE for p in chat)
    assert not set(ids) & {p.id for p in pools.train}  # the whole training pool, not only the chosen prompts
    assert not set(ids) & validation  # checkpoint selection's prompts
    assert not {normalise(p.text) for p in chat} & {normalise(p.text) for p in pools.evals}
    # everything else of the held-out pool's ShareGPT part is in it: the pool minus the validation prompts
    assert len(ids) == stats["pool_heldout"] - stats["selected"]["heldout"]
    assert set(ids) | validation == {p.id for p in pools.held}
    assert (len(ids), _sha(ids)) == PINNED_CHAT  # deterministic: hashes of the text and id, no state


def test_the_benchmark_reports_the_chat_suite_per_suite(cpu, monkeypatch):
    """The benchmark recipe draws the suite from the carving and reports it in its own per-suite rows."""
    from conftest import tiny_target

    from draftlab.arms.grammar import Checkpoints
    from draftlab.pipeline.benchmark import BenchPaths, run

    class VocabTok(Tok):  # word ids folded into the tiny target's vocabulary
        pad_token_id = 0

        def __call__(self, text, add_special_tokens=True):
            return {"input_ids": [3 + i % 90 for i in super().__call__(text)["input_ids"]][:24]}

    params, pools, chat = cpu[0], cpu[3], cpu[4]
    monkeypatch.setattr(R, "split_pools", lambda data: pools)  # the pools of the same data section, loaded once
    target = tiny_target("llama")
    target.tokenizer = VocabTok()
    cfg = replace(params.benchmark, arms=["ar"], suites=["mt-bench", CHAT_SUITE], prompts_per_suite=2,
                  max_new_tokens=2, temperatures=[0.0], concurrency=[], warmup=False, bootstrap=0, simulated=False,
                  pairs=[], ablation_arms=[])
    detail, runs = run(target, replace(params, benchmark=cfg), BenchPaths(Checkpoints("", "", "", "")))
    assert set(detail["suites"]) == {"mt-bench", CHAT_SUITE} and detail["setup"]["prompts"][CHAT_SUITE] == 2
    from datetime import datetime

    made = datetime.strptime(detail["setup"]["finished"], "%Y-%m-%dT%H:%M:%S%z")  # what the explorer reads first
    assert abs(made.timestamp() - time.time()) < 3600
    drawn = {i for r in runs.runs if r.suite == CHAT_SUITE for i in r.prompt_ids}
    assert len(drawn) == 2 and drawn <= {p.id for p in chat}


def test_local_training_prompts_share_the_held_out_pool(cpu, tmp_path, monkeypatch):
    """With `data.local_jsonl`, validation ranks local and ShareGPT held-out prompts together: the chat
    suite leaves out exactly the ShareGPT ones it takes, and no local prompt (nor an eval prompt) enters it."""
    params = cpu[0]
    share = [Prompt(f"sharegpt/{i}", "sharegpt", f"chat prompt number {i}") for i in range(600)]
    evals = [Prompt("mt-bench/1", "mt-bench", share[7].text.upper())]  # a ShareGPT text that is also an eval prompt
    monkeypatch.setattr(R, "load_suite", lambda name, local=None: share if name == "sharegpt" else
                        [p for p in evals if p.suite == name])
    local = tmp_path / "mine.jsonl"
    local.write_text("".join(json.dumps({"prompt": f"my own prompt {i}"}) + "\n" for i in range(300)))
    data = replace(params.data, local_jsonl=str(local), heldout_fraction=0.2)
    ref = params.reference
    pools = R.split_pools(data)
    validation = R.heldout_validation(pools.held, ref)
    chat = R.chat_suite(data, ref)
    assert {p.suite for p in validation} == {"sharegpt", "local"}  # the case this test is about
    assert {p.id for p in chat} == {p.id for p in pools.held if p.suite == "sharegpt"} - {p.id for p in validation}
    assert "sharegpt/7" not in {p.id for p in pools.held + pools.train}
    chosen, _ = R.select_prompts(data, ref, Tok(), 4096)
    assert not {p.id for p in chat} & {e.prompt.id for e in chosen if e.split != "eval"}
    with pytest.raises(DraftlabError, match=r"^benchmark suite 'sharegpt-chat' is empty: the held-out pool has \d+ "
                                            r"ShareGPT prompts and reference.num_heldout_prompts=10000 .*lower it or "
                                            r"raise data.heldout_fraction$"):
        R.chat_suite(data, replace(ref, num_heldout_prompts=10_000))


def test_bad_settings_fail_in_one_line(root, tmp_path):
    with pytest.raises(DraftlabError, match="chat_suite"):
        load_suite(CHAT_SUITE)
    local = tmp_path / "p.jsonl"
    local.write_text('{"prompt": "hi"}\n')
    raw = compose_params(["profile=smoke"], root / "conf")
    with pytest.raises(ConfigError, match=r"benchmark.suites names 'sharegpt-chat'.*data.train_suite='local'"):
        build_params(raw, ["data.train_suite=local", f"data.local_jsonl={local}",
                           "benchmark.suites=[mt-bench,sharegpt-chat]"])
    with pytest.raises(ConfigError, match="'sharegpt-chat' is a packaged suite's name"):
        build_params(raw, [f"data.local_suites.sharegpt-chat={local}"])
