"""The reference stage end to end with `reference.engine=openai`: a prepared tiny-random target folder, served
by the test server (tests/openai_server.py) on 127.0.0.1, and the real stage against it: the stage reads
only the target's tokenizer / config / EOS ids, writes rows with server and model, and reports the agreement."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from openai_server import free_port, running

NAME = "tiny-random"


@pytest.fixture(scope="module")
def served(root, tmp_path_factory):
    """(workdir, url): params composed for the openai engine, the target prepared, its server up (killed at the end)."""
    wd, port = tmp_path_factory.mktemp("ref-openai"), free_port()
    url = f"http://127.0.0.1:{port}"
    params = subprocess.run([sys.executable, "-m", "draftlab.cli", "compose", "target=tiny-random", "profile=smoke",
                             "reference.num_train_prompts=6", "reference.num_heldout_prompts=2",
                             "reference.num_eval_per_suite=1", "reference.max_new_tokens=8", "reference.batch_size=4",
                             "reference.engine=openai", f"reference.servers=['{url}']",
                             f"reference.server_model={NAME}", "reference.concurrency=2", "reference.retries=0",
                             "reference.agreement_sample=3", "tracking.uri=sqlite:///" + str(wd / "mlruns.db")],
                            cwd=root, capture_output=True, text=True)
    assert params.returncode == 0, params.stderr[-2000:]
    (wd / "params.yaml").write_text(params.stdout)
    r = subprocess.run([sys.executable, "-m", "draftlab.pipeline", "prepare_target"], cwd=wd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    with running(port, "--name", NAME, "--target-dir", str(wd / "models" / "target")) as got:
        assert got == url
        yield wd, url


def test_reference_stage_with_the_openai_engine(root, served):
    wd, url = served
    r = subprocess.run([sys.executable, "-m", "draftlab.pipeline", "reference"], cwd=wd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    df = pd.read_parquet(wd / "data" / "references.parquet")
    assert len(df) == 6 + 2 + 3 and set(df.split) == {"train", "heldout", "eval"}
    assert set(df.server) == {url} and set(df.server_model) == {NAME}
    assert df.response_ids.map(len).between(1, 8).all() and set(df.finish_reason) <= {"eos", "length"}
    m = json.loads((wd / "results" / "reference.json").read_text())
    assert m["engine"] == "openai" and m["servers"] == [{"url": url, "rows": 11}] and m["server_models"] == [NAME]
    assert (m["agreement"]["sample"], m["agreement"]["rate"]) == (3, 1.0)
    assert "reference: greedy agreement 3/3" in r.stderr and not (wd / "data" / "references.shards").exists()
    # the rows are the target's own greedy continuations of the project's prompt ids (fp32)
    import torch

    from draftlab.verifier.load import load_target

    target = load_target(wd / "models" / "target", "cpu", "float32")
    for _, row in df.iloc[:2].iterrows():
        ids = torch.tensor([list(row.prompt_ids)])
        out = target.model.generate(input_ids=ids, max_new_tokens=8, do_sample=False,
                                    eos_token_id=target.eos_token_ids, pad_token_id=target.eos_token_ids[0])
        assert out[0, ids.shape[1]:].tolist()[: len(row.response_ids)] == list(row.response_ids)
