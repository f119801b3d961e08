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


def load_tool(name: str):
    """tools/<name>.py imported as a module (the tools are scripts, not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def tiny_target(arch: str = "llama", vocab: int = 97, layers: int = 4, seed: int = 0):
    from draftlab.config import RandomModelConfig
    from draftlab.verifier.load import build_random_model
    from draftlab.verifier.model import TargetModel

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


@pytest.fixture
def one_thread():
    """Tiny ops are fastest (and least disturbed by other jobs) on one thread; the thread count is
    restored after the test. Opt in per module with `pytestmark = pytest.mark.usefixtures("one_thread")`."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def target():
    """A tiny random llama target, fresh for each test module (a module may override `target`)."""
    return tiny_target("llama")


def chi_square_pvalue(counts: torch.Tensor, probs: torch.Tensor, min_expected: float = 5.0) -> float:
    """Pearson chi-square goodness of fit; cells with expected count < min_expected are pooled."""
    expected = probs.double() / probs.double().sum() * counts.sum()
    small = expected < min_expected
    obs = torch.cat([counts[~small], counts[small].sum()[None]]).double()
    exp = torch.cat([expected[~small], expected[small].sum()[None]])
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    stat = ((obs - exp) ** 2 / exp).sum()
    df = obs.numel() - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2.0, dtype=torch.float64), stat / 2.0))
