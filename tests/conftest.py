"""Shared fixtures: tiny random targets (no network), the repository root, a tiny composed config."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("DVC_NO_ANALYTICS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
torch.set_num_threads(int(os.environ.get("DRAFTLAB_TEST_THREADS", "1")))

ROOT = Path(__file__).resolve().parents[1]


def tiny_target(arch: str = "llama", vocab: int = 97, layers: int = 4, seed: int = 0):
    from draftlab.config import RandomModelConfig
    from draftlab.target.load import build_random_model
    from draftlab.target.model import TargetModel

    cfg = RandomModelConfig(arch=arch, num_layers=layers, seed=seed)
    return TargetModel(build_random_model(cfg, vocab, None, None))


@pytest.fixture(scope="session")
def llama_target():
    return tiny_target("llama")


@pytest.fixture(scope="session")
def qwen3_target():
    return tiny_target("qwen3")


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT
