"""Config: presets compose, params.yaml is the default composition, bad keys/values fail in one line."""
from __future__ import annotations

import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from draftlab.errors import ConfigError
from draftlab.params import build_params, compose_params, load_params


def test_committed_params_is_default_composition(root):
    committed = OmegaConf.to_container(OmegaConf.load(root / "params.yaml"))
    assert committed == compose_params([], root / "conf"), "params.yaml is stale: run `make params`"


@pytest.mark.parametrize("target", ["smollm2-135m", "qwen3-4b", "qwen3-8b", "llama-3.1-8b", "tiny-random"])
@pytest.mark.parametrize("profile", ["smoke", "cpu", "cpu-long", "gpu"])
def test_every_preset_composes_and_validates(root, target, profile):
    raw = compose_params([f"target={target}", f"profile={profile}"], root / "conf")
    params = build_params(raw)
    assert params.target.name == target and params.profile.name == profile


def test_unknown_key_names_valid_choices(root):
    with pytest.raises(ConfigError, match=r"unknown key 'reference.batch_sze' \(did you mean 'batch_size'\?\)"):
        load_params(root / "params.yaml", ["reference.batch_sze=3"])
    with pytest.raises(ConfigError, match="unknown key 'nosuch'"):
        build_params({"nosuch": {"a": 1}})


def test_wrong_type_and_impossible_values(root):
    with pytest.raises(ConfigError, match="reference.batch_size"):
        load_params(root / "params.yaml", ["reference.batch_size=abc"])
    with pytest.raises(ConfigError, match=r"reference.batch_size=-1 must be > 0"):
        load_params(root / "params.yaml", ["reference.batch_size=-1"])
    with pytest.raises(ConfigError, match="choose one of: auto, float32, bfloat16, float16"):
        load_params(root / "params.yaml", ["target.dtype=fp8"])
    with pytest.raises(ConfigError, match="target.path must name"):
        load_params(root / "params.yaml", ["target.source=local"])
    with pytest.raises(ConfigError, match=r"specopd.temperature=0.0 must be > 0"):  # E2E-TV needs a distribution
        load_params(root / "params.yaml", ["specopd.temperature=0.0"])
    with pytest.raises(ConfigError, match=r"corrector.grad_hidden=1.5 must lie in \[0, 1\]"):
        load_params(root / "params.yaml", ["corrector.grad_hidden=1.5"])
    with pytest.raises(ConfigError, match=r"corrector.frozen_warmup=1.0 must lie in \[0, 1\)"):
        load_params(root / "params.yaml", ["corrector.frozen_warmup=1.0"])


def test_unknown_preset_lists_presets(root):
    with pytest.raises(ConfigError, match="choose one of: cpu, cpu-long, gpu, smoke"):
        compose_params(["profile=fast"], root / "conf")


def test_stage_cli_prints_one_line_error(root, tmp_path):
    (tmp_path / "params.yaml").write_text((root / "params.yaml").read_text().replace("batch_size:", "batch_sise:", 1))
    r = subprocess.run([sys.executable, str(root / "stages" / "reference.py")], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 2
    lines = [l for l in r.stderr.strip().splitlines() if l.strip()]
    assert len(lines) == 1 and "unknown key 'reference.batch_sise'" in lines[0], r.stderr
