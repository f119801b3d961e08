"""Reference stage end to end on the tiny-random target, templates/truncation, and bad input."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pandas as pd
import pytest

from draftlab.errors import DraftlabError
from draftlab.verifier.load import load_target


@pytest.fixture(scope="module")
def workdir(root, tmp_path_factory):
    """A scratch pipeline folder with params for tiny-random + smoke, prepared by the real stage."""
    wd = tmp_path_factory.mktemp("ref")
    params = subprocess.run([sys.executable, "-m", "draftlab.cli", "compose", "target=tiny-random", "profile=smoke",
                             "reference.num_train_prompts=6", "reference.num_heldout_prompts=2",
                             "reference.num_eval_per_suite=1", "reference.max_new_tokens=8", "reference.batch_size=4",
                             "tracking.uri=sqlite:///" + str(wd / "mlruns.db")],
                            cwd=root, capture_output=True, text=True, check=True).stdout
    (wd / "params.yaml").write_text(params)
    r = subprocess.run([sys.executable, "-m", "draftlab.pipeline", "prepare_target"], cwd=wd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    return wd


def test_reference_stage_end_to_end(root, workdir):
    r = subprocess.run([sys.executable, "-m", "draftlab.pipeline", "reference"], cwd=workdir, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    df = pd.read_parquet(workdir / "data" / "references.parquet")
    assert len(df) == 6 + 2 + 3
    assert set(df.split) == {"train", "heldout", "eval"}
    assert set(df[df.split == "eval"].suite) == {"mt-bench", "humaneval", "math500"}
    assert df.response_ids.map(len).between(1, 8).all()
    assert set(df.finish_reason) <= {"eos", "length"}
    m = json.loads((workdir / "results" / "reference.json").read_text())
    assert m["sequences"] == 11 and m["tokens"] == int(df.response_ids.map(len).sum()) and m["tokens_per_s"] > 0
    assert not list((workdir / "data").glob("*.tmp"))
    # 11 prompts in batches of 4, each written as a shard as it finished; the work folder is gone now
    assert (m["batches"], m["batches_resumed"], m["batches_generated"]) == (3, 0, 3)
    assert m["generated_tokens"] == m["tokens"] and not (workdir / "data" / "references.shards").exists()
    assert [line for line in r.stderr.splitlines() if line.startswith("reference: batch")][-1].startswith(
        "reference: batch 3/3 (0 resumed), 11/11 sequences, ")
    # greedy references are reproducible: row == target's own greedy continuation
    target = load_target(workdir / "models" / "target", "cpu", "float32")
    row = df.iloc[0]
    import torch

    ids = torch.tensor([list(row.prompt_ids)])
    out = target.model.generate(input_ids=ids, max_new_tokens=len(row.response_ids), do_sample=False,
                                eos_token_id=target.eos_token_ids, pad_token_id=target.eos_token_ids[0])
    assert out[0, ids.shape[1]:].tolist()[: len(row.response_ids)] == list(row.response_ids)


def test_encode_prompt_truncates_left_and_keeps_template(workdir):
    from draftlab.data.templates import encode_prompt

    tok = load_target(workdir / "models" / "target", "cpu", "float32").tokenizer
    text = " ".join(f"word{i}" for i in range(400)) + " FINAL QUESTION"
    full, cut = encode_prompt(tok, text, max_tokens=0)
    short, cut2 = encode_prompt(tok, text, max_tokens=64)
    assert not cut and cut2 and len(short) <= 64 < len(full)
    assert short[-6:] == full[-6:]  # the end of the prompt and the generation header survive
    assert short[:3] == full[:3]  # the template's opening survives
    assert "FINAL QUESTION" in tok.decode(short)


def test_bad_target_folders(tmp_path, workdir):
    with pytest.raises(DraftlabError, match="does not exist"):
        load_target(tmp_path / "missing")
    bad = tmp_path / "corrupt"
    shutil.copytree(workdir / "models" / "target", bad)
    (bad / "config.json").write_text("{not json")
    with pytest.raises(DraftlabError, match="not valid JSON"):
        load_target(bad)
    (bad / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(DraftlabError, match="unsupported target architecture 'gpt2'"):
        load_target(bad)
    shutil.copytree(workdir / "models" / "target", tmp_path / "noweights")
    for f in (tmp_path / "noweights").glob("*.safetensors"):
        f.unlink()
    with pytest.raises(DraftlabError, match="no \\*.safetensors"):
        load_target(tmp_path / "noweights")
    broken = tmp_path / "broken"
    shutil.copytree(workdir / "models" / "target", broken)
    for f in broken.glob("*.safetensors"):
        f.write_bytes(b"garbage")
    with pytest.raises(DraftlabError, match=r"broken/model.safetensors is not a readable safetensors file"):
        load_target(broken)
    for f in broken.glob("*.safetensors"):
        f.unlink()
    shutil.copy2(next((workdir / "models" / "target").glob("*.safetensors")), broken)
    (broken / "tokenizer.json").write_text('{"version": ')  # a truncated tokenizer is named, too
    with pytest.raises(DraftlabError, match=r"broken/tokenizer.json is not valid JSON"):
        load_target(broken)


def test_a_corrupt_references_file_names_the_stage_that_rebuilds_it(root, workdir, tmp_path):
    """One line naming data/references.parquet and `dvc repro -f -s reference`, not a pyarrow traceback."""
    shutil.copytree(workdir / "models", tmp_path / "models")
    shutil.copy2(workdir / "params.yaml", tmp_path / "params.yaml")
    shutil.copy2(root / "dvc.yaml", tmp_path / "dvc.yaml")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "references.parquet").write_bytes(b"PAR1 truncated by a full disk")
    r = subprocess.run([sys.executable, "-m", "draftlab.pipeline", "pretrain_drafter"], cwd=tmp_path,
                       capture_output=True, text=True)
    lines = [line for line in r.stderr.splitlines() if line.startswith("error")]  # (loading bars aside)
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert lines[0].startswith("error [pretrain_drafter]: data/references.parquet is not a readable Parquet file (")
    assert lines[0].endswith("; stage 'reference' writes it: rebuild with `dvc repro -f -s reference` "
                             "(or restore the last version: dvc checkout data/references.parquet)")


def test_gguf_checksum_mismatch_is_reported(tmp_path):
    from draftlab.verifier.load import convert_gguf

    fake = tmp_path / "m.gguf"
    fake.write_bytes(b"not a gguf")
    with pytest.raises(DraftlabError, match="sha256"):
        convert_gguf(fake, tmp_path / "out", expected_sha256="0" * 64)
    assert not (tmp_path / "out").exists()


def test_atomic_write_leaves_nothing_on_failure(tmp_path):
    from draftlab.io import atomic_write

    target = tmp_path / "x.json"
    target.write_text("old")

    def boom(p):
        p.write_text("half")
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        atomic_write(target, boom)
    assert target.read_text() == "old" and len(list(tmp_path.iterdir())) == 1


def test_reference_engines_agree():
    """The AR engine (default) and transformers `generate` write the same greedy references, ragged
    prompt lengths and early EOS included."""
    from conftest import tiny_target

    from draftlab.data.references import EncodedPrompt
    from draftlab.recipes.reference.recipe import generate_references
    from draftlab.data.suites import Prompt

    target = tiny_target("llama", seed=3)
    prompts = [EncodedPrompt(Prompt(id=f"p{i}", suite="sharegpt", text=""), "train", ids)
               for i, ids in enumerate([[5, 6, 7], [9] * 11, [3, 1, 4, 1, 5, 9, 2, 6], [42]])]
    target.model.generation_config.eos_token_id = 1  # no EOS: learn which tokens come, then pick one as EOS
    free, _ = generate_references(target, prompts, 12, 3, progress=False, engine="ar")
    eos = free[1]["response_ids"][4]
    target.model.generation_config.eos_token_id = eos
    rows_ar, st_ar = generate_references(target, prompts, 12, 3, progress=False, engine="ar")
    rows_hf, st_hf = generate_references(target, prompts, 12, 3, progress=False, engine="hf")
    assert [r["response_ids"] for r in rows_ar] == [r["response_ids"] for r in rows_hf]
    assert st_ar["engine"] == "ar" and st_hf["engine"] == "hf" and st_ar["tokens"] == st_hf["tokens"] > 0
    assert st_ar["finish_eos"] >= 1 and rows_ar[1]["finish_reason"] == "eos" and rows_ar[1]["response_ids"][-1] == eos
