"""Resumable, sharded references: a generation killed with SIGKILL after its first shard resumes from the
shards and writes the same final Parquet, byte for byte, as an uninterrupted run; sampled references
resume exactly too (RNG states stored per shard); a changed plan is refused in one line."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

from draftlab.errors import DraftlabError

pytestmark = pytest.mark.usefixtures("one_thread")

TESTS = Path(__file__).resolve().parents[1]

# the child and the parent build the same prompts and target (tests/conftest.py's tiny random llama)
SETUP = """
from conftest import tiny_target
from draftlab.data.references import EncodedPrompt
from draftlab.data.suites import Prompt

def setup():
    target = tiny_target("llama", seed=3)
    target.model.generation_config.eos_token_id = 1
    lengths = [3, 11, 5, 8, 1, 6, 9, 2, 4, 7]
    prompts = [EncodedPrompt(Prompt(id=f"p{i}", suite="sharegpt", text=""), "train" if i % 3 else "heldout",
                             [(7 * i + j) % 90 + 2 for j in range(n)]) for i, n in enumerate(lengths)]
    return target, prompts
"""
ARGS = dict(max_new_tokens=6, batch_size=3)  # 10 prompts: 4 batches


def _setup():
    ns: dict = {}
    exec(SETUP, ns)  # noqa: S102 (the same source the child runs)
    return ns["setup"]()


def _final_bytes(rows, path: Path) -> bytes:
    """What the stage writes: pd.DataFrame(rows) through draftlab.io.write_parquet."""
    from draftlab.io import write_parquet

    write_parquet(path, pd.DataFrame(rows))
    return path.read_bytes()


def test_sigkill_after_the_first_shard_then_resume_equals_the_uninterrupted_run(tmp_path):
    from draftlab.recipes.reference.recipe import generate_references

    shards = tmp_path / "references.shards"
    child = SETUP + textwrap.dedent(f"""
        import time, torch
        import draftlab.recipes.reference.recipe as R
        torch.set_num_threads(1)
        real, calls = R.generate_ar, [0]
        def slow(*a, **k):  # the second batch hangs: the parent kills the run while it is in flight
            calls[0] += 1
            if calls[0] == 2:
                time.sleep(300)
            return real(*a, **k)
        R.generate_ar = slow
        target, prompts = setup()
        R.generate_references(target, prompts, shards={str(shards)!r}, progress=False, **{ARGS!r})
    """)
    proc = subprocess.Popen([sys.executable, "-c", child], cwd=TESTS, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path])})
    try:
        deadline = time.time() + 120
        while not (shards / "batch-00000.parquet").exists():
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            assert time.time() < deadline, "no shard written in 120 s"
            time.sleep(0.05)
        time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert (shards / "plan.json").exists() and sorted(p.name for p in shards.glob("batch-*")) == ["batch-00000.parquet"]

    target, prompts = _setup()
    rows, stats = generate_references(target, prompts, shards=shards, progress=False, **ARGS)
    assert stats["batches"] == 4 and stats["batches_resumed"] == 1 and stats["batches_generated"] == 3
    assert stats["tokens"] == sum(len(r["response_ids"]) for r in rows) > stats["generated_tokens"] > 0
    whole, st_whole = generate_references(target, prompts, progress=False, **ARGS)  # no shards at all
    assert st_whole["batches_resumed"] == 0 and st_whole["tokens"] == stats["tokens"]
    assert _final_bytes(rows, tmp_path / "resumed.parquet") == _final_bytes(whole, tmp_path / "whole.parquet")
    assert [r["prompt_id"] for r in rows] == [p.prompt.id for p in prompts]  # the prompts' order, as before
    # a finished folder resumes every batch and generates nothing
    again, st = generate_references(target, prompts, shards=shards, progress=False, **ARGS)
    assert st["batches_resumed"] == 4 and st["generated_tokens"] == 0 and again == rows


@pytest.mark.parametrize("engine", ["ar", "hf"])  # the AR engine's generator; `generate`'s global torch RNG
def test_sampled_references_resume_exactly(tmp_path, capsys, engine):
    from draftlab.recipes.reference.recipe import generate_references

    target, prompts = _setup()
    kw = dict(ARGS, temperature=1.0, seed=5, engine=engine)
    whole, _ = generate_references(target, prompts, progress=False, **kw)
    shards = tmp_path / "s"
    rows, _ = generate_references(target, prompts, shards=shards, progress=True, **kw)
    assert rows == whole  # writing shards changes nothing
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("reference: batch")]
    assert len(lines) == 4 and lines[-1].startswith("reference: batch 4/4 (0 resumed), 10/10 sequences, ")
    assert "tokens/s, ETA 0:00:00" in lines[-1]
    (shards / "batch-00001.parquet").unlink()  # a middle and the last batch lost: regenerated from the
    (shards / "batch-00003.parquet").unlink()  # RNG state the batch before them left
    (shards / ".batch-00003.parquet.x.tmp").write_bytes(b"half")  # a killed write
    resumed, st = generate_references(target, prompts, shards=shards, progress=False, **kw)
    assert st["batches_resumed"] == 2 and st["batches_generated"] == 2 and resumed == whole
    assert not list(shards.glob("*.tmp"))
    other, _ = generate_references(target, prompts, progress=False, **dict(kw, seed=6))
    assert other != whole  # the comparison can fail: another seed samples other tokens


def test_a_changed_plan_is_refused_in_one_line(tmp_path):
    from draftlab.recipes.reference.recipe import generate_references

    target, prompts = _setup()
    shards = tmp_path / "s"
    generate_references(target, prompts, shards=shards, progress=False, identity={"target": {"dtype": "float32"}},
                        **ARGS)
    cases = [
        (dict(ARGS, batch_size=4), {"target": {"dtype": "float32"}}, prompts, r"batch_size: 3 -> 4"),
        (ARGS, {"target": {"dtype": "bfloat16"}}, prompts, r"target: \{'dtype': 'float32'\} -> \{'dtype': 'bfloat16'\}"),
        (ARGS, {"target": {"dtype": "float32"}}, prompts[:-1], r"prompts or their order changed \(10 prompts in 4 "
                                                               r"batches stored, 9 in 3 now\)"),
        (ARGS, {"target": {"dtype": "float32"}}, [*prompts[:-1], type(prompts[0])(prompts[-1].prompt, prompts[-1].split,
                                                                                  [3, *prompts[-1].ids[1:]])],
         r"token ids, split or suite changed"),
    ]
    for args, identity, ps, why in cases:
        with pytest.raises(DraftlabError, match=why) as e:
            generate_references(target, ps, shards=shards, progress=False, identity=identity, **args)
        msg = str(e.value)
        assert "\n" not in msg and msg.startswith(f"{shards} holds shards of another reference run: ")
        assert msg.endswith(f"delete the folder ({shards}) to start over, or restore those settings to resume it")
    assert sorted(p.name for p in shards.iterdir()) == ["batch-0000%d.parquet" % k for k in range(4)] + ["plan.json"]
