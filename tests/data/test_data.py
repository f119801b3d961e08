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
    from stubs import WordTokenizer

    from draftlab.params import load_params
    from draftlab.data.references import select_prompts

    params = load_params(root / "params.yaml", ["reference.num_train_prompts=20000", "reference.num_eval_per_suite=1000"])
    chosen, stats = select_prompts(params.data, params.reference, WordTokenizer(), 4096)
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
    assert [p.text for p in ps] == ["hi", "there"] and ps[1].id == "local/7" and ps[0].id == "local/1"
    with pytest.raises(DraftlabError, match="not found"):
        suites.load_local_jsonl(tmp_path / "missing.jsonl")


CHAT = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"}]}


@pytest.mark.parametrize("lines,message", [
    (['{"prompt": 5}'], r"p.jsonl:1: 'prompt' must be a string, got int \(5\)$"),
    (['{"prompt": "ok"}', '{"text": "x"}'], r"p.jsonl:2: no 'prompt' or 'messages' field \(keys: text\)"),
    (['{"prompt": "ok"}', "", '{"prompt": "a" '], r"p.jsonl:3: not valid JSON"),
    (['["a list"]'], r"p.jsonl:1: expected a JSON object, got list"),
    (['{"prompt": "  "}'], r"p.jsonl:1: 'prompt' is empty"),
    (['{"prompt": null}'], r"p.jsonl:1: 'prompt' must be a string, got NoneType"),
    (['{"id": "a", "prompt": "x"}', '{"id": "a", "prompt": "y"}'], r"p.jsonl:2: id 'a' repeats .*p.jsonl:1"),
    (['{"messages": []}'], r"p.jsonl:1: 'messages' must be a non-empty list"),
    (['{"messages": [{"role": "user", "content": 3}]}'], r"p.jsonl:1: messages\[0\] must be an object with string"),
    (['{"messages": [{"role": "bot", "content": "x"}]}'], r"p.jsonl:1: messages\[0\] has role 'bot'"),
    (['{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}'],
     r"p.jsonl:1: the last message must be a non-empty user turn"),
    ([], r"p.jsonl: no prompts \(the file is empty\) \(data.local_suites.mine\)"),
])
def test_local_file_rejects_bad_records_in_one_line(tmp_path, lines, message):
    f = tmp_path / "p.jsonl"
    f.write_text("\n".join(lines) + ("\n" if lines else ""))
    with pytest.raises(DraftlabError, match=message) as e:
        suites.load_local_file(f, "mine", "data.local_suites.mine")
    assert "\n" not in str(e.value)


def test_local_file_formats(tmp_path):
    """JSONL with prompts and chat messages, Parquet with the same columns; ids, suites, turns kept."""
    import json

    import pandas as pd

    f = tmp_path / "mine.jsonl"
    f.write_text(json.dumps({"id": "q1", "prompt": "Why?"}) + "\n" + json.dumps(CHAT) + "\n")
    ps = suites.load_local_file(f, "mine")
    assert [p.id for p in ps] == ["mine/q1", "mine/2"] and {p.suite for p in ps} == {"mine"}
    assert ps[0].messages == () and ps[1].messages == (("system", "Be brief."), ("user", "Hi?"))
    assert suites.load_suite("mine", {"mine": str(f)}) == ps
    pq = tmp_path / "mine.parquet"
    pd.DataFrame({"prompt": ["Why?", None], "messages": [None, CHAT["messages"]]}).to_parquet(pq)
    assert [(p.text, p.messages) for p in suites.load_local_file(pq, "mine")] == [(p.text, p.messages) for p in ps]
    pd.DataFrame({"prompt": [3.5, 4.5]}).to_parquet(pq)
    with pytest.raises(DraftlabError, match=r"mine.parquet row 1: 'prompt' must be a string, got float \(3.5\)"):
        suites.load_local_file(pq, "mine")
    pq.write_bytes(b"PAR1 not really")
    with pytest.raises(DraftlabError, match=r"mine.parquet: not a readable Parquet file"):
        suites.load_local_file(pq, "mine")
    with pytest.raises(DraftlabError, match=r"mine.csv: unsupported prompt file type; use .jsonl or .parquet"):
        suites.load_local_file(tmp_path / "mine.csv", "mine")
    with pytest.raises(DraftlabError, match="'humaneval' is a packaged suite's name"):
        suites.check_suite_name("humaneval", "data.local_suites")
    with pytest.raises(DraftlabError, match="must start with a letter or digit"):
        suites.check_suite_name("my suite", "data.local_suites")


def test_chat_prompt_template_and_truncation(tmp_path):
    """A chat prompt is templated turn by turn; when too long, old turns go first, the system turn stays."""
    from draftlab.data.templates import encode_prompt

    class Tok:  # a chat template of its own: one id per character, a marker per role
        chat_template = "x"

        def apply_chat_template(self, msgs, add_generation_prompt, tokenize, **kw):
            ids = []
            for m in msgs:
                ids += [{"system": 1, "user": 2, "assistant": 3}[m["role"]], *[ord(c) for c in m["content"]]]
            return ids + [9]

        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [ord(c) for c in text]}

        def decode(self, ids):
            return "".join(chr(i) for i in ids)

    turns = [("system", "S"), ("user", "old question"), ("assistant", "old answer"), ("user", "new")]
    full, cut = encode_prompt(Tok(), "", messages=turns)
    assert not cut and full[0] == 1 and full[-1] == 9 and len(full) == 1 + 1 + 1 + 12 + 1 + 10 + 1 + 3 + 1
    short, cut = encode_prompt(Tok(), "", max_tokens=10, messages=turns)
    assert cut and short == [1, ord("S"), 2, *map(ord, "new"), 9]  # the history went, the system turn stayed
    tiny, cut = encode_prompt(Tok(), "", max_tokens=6, messages=turns)
    assert cut and tiny == [1, ord("S"), 2, ord("e"), ord("w"), 9]  # then the last turn lost its beginning