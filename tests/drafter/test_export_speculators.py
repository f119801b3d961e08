"""vLLM's `speculators` 0.9.0 DFlash converter on our `--for vllm` export (issue 22 item 3), in its own venv
(`make speculators-env` -> .specenv; it pins transformers<=5.19, the project runs 5.24): the converter and
its validation (`from_pretrained` of the converted folder, no NaN) succeed, its config takes our taps + 1 as
its aux layers, and every tensor it wrote is our export's. Skipped where that venv does not exist; the real
run, its commands and output are recorded in docs/export.md."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from conftest import tiny_target
from draftlab.drafter.model import DFlashDrafter, DrafterDesign, arch_from_target
from draftlab.drafter.serving import export_for, facts_from_folder

ROOT = Path(__file__).resolve().parents[2]
SPEC_PY = Path(os.environ.get("DRAFTLAB_SPECULATORS_PYTHON", ROOT / ".specenv" / "bin" / "python"))
VERSION = "0.9.0"
TAPS, S, MASK = [1, 3], 4, 7

pytestmark = pytest.mark.skipif(
    not SPEC_PY.exists(),
    reason=f"no speculators environment at {SPEC_PY} (make speculators-env builds it; set DRAFTLAB_SPECULATORS_PYTHON "
           "for another); docs/export.md records the converter's real run")


def _run(args: list[str], timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONPATH", None)  # the converter's venv only: never the project's transformers
    return subprocess.run([str(SPEC_PY), *args], capture_output=True, text=True, timeout=timeout, env=env)


def test_speculators_converts_and_validates_our_vllm_export(tmp_path):
    got = _run(["-c", "import importlib.metadata as m; print(m.version('speculators'), m.version('transformers'))"])
    assert got.returncode == 0, got.stderr
    spec_version, tf_version = got.stdout.split()
    assert spec_version == VERSION, f"{SPEC_PY} has speculators {spec_version}; this test checks {VERSION}"
    target = tiny_target("qwen3", layers=5)
    target.model.save_pretrained(tmp_path / "target")
    torch.manual_seed(0)
    arch = arch_from_target(target, DrafterDesign(block_size=S, num_layers=2, target_layer_ids=TAPS, mask_token_id=MASK))
    drafter = DFlashDrafter.from_target(arch, target).eval()
    export_for(drafter, tmp_path / "export", "vllm", facts_from_folder(tmp_path / "target"), "bfloat16")

    out = tmp_path / "converted"
    res = _run(["-m", "speculators", "convert", str(tmp_path / "export"), "--algorithm", "dflash",
                "--verifier", str(tmp_path / "target"), "--output-path", str(out), "--validate-device", "cpu"])
    log = res.stdout + res.stderr
    assert res.returncode == 0 and "Validation succeeded" in log, log[-3000:]
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["speculators_model_type"] == "dflash" and cfg["speculators_version"] == VERSION
    assert cfg["aux_hidden_state_layer_ids"] == [i + 1 for i in TAPS]  # hidden_states[i+1]: its layer-id convention
    assert cfg["block_size"] == S and cfg["mask_token_id"] == MASK and cfg["draft_vocab_size"] == target.vocab_size
    assert cfg["speculators_config"]["proposal_methods"][0]["speculative_tokens"] == S - 1
    ours, theirs = load_file(tmp_path / "export" / "model.safetensors"), load_file(out / "model.safetensors")
    assert ours.keys() == theirs.keys()  # embedding and heads come from the verifier at load time, not saved
    for k, v in ours.items():
        assert theirs[k].dtype == torch.bfloat16 and torch.equal(theirs[k], v), k
