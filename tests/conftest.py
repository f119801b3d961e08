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


def arms_preset(name: str) -> dict:
    """conf/benchmark/arms/<name>.yaml with the ablation arms of the preset it picks (conf/benchmark/ablations/)."""
    import yaml

    conf = ROOT / "conf" / "benchmark"
    p = yaml.safe_load((conf / "arms" / f"{name}.yaml").read_text())
    picked = next(v for e in p.pop("defaults") if isinstance(e, dict) for v in e.values())
    return {**p, **yaml.safe_load((conf / "ablations" / f"{picked}.yaml").read_text())}


def tiny_target(arch: str = "llama", vocab: int = 97, layers: int = 4, seed: int = 0):
    from draftlab.config import RandomModelConfig
    from draftlab.verifier.load import build_random_model
    from draftlab.verifier.model import TargetModel

    cfg = RandomModelConfig(arch=arch, num_layers=layers, seed=seed)
    return TargetModel(build_random_model(cfg, vocab, None, None))


@pytest.fixture(scope="session", autouse=True)
def gguf_tokenizer_cache(tmp_path_factory):
    """The packaged GGUF's tokenizer converted once per test run, not once per random target a test or a stage it
    starts prepares (~5 s each): the run's xdist workers share the folder under pytest's base temp
    (draftlab.verifier.load.random_tokenizer)."""
    from draftlab.verifier.load import TOKENIZER_CACHE_ENV

    base = tmp_path_factory.getbasetemp()
    os.environ.setdefault(TOKENIZER_CACHE_ENV, str((base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base)
                                                   / "gguf-tokenizers"))


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


FP32_U = 2.0 ** -24  # fp32 unit roundoff


def reorder_tol(ref: torch.Tensor, terms: int, factor: float = 4.0) -> float:
    """Absolute tolerance for an fp32 result that another computation reaches by adding the same `terms` terms in
    another order (row chunks, DDP ranks, another autograd path): the classical bound |Δ| <= 2·γ_n·Σ|t|, γ_n ≈ n·u,
    with Σ|t| taken as `factor` × the result's largest magnitude (these small smooth losses' terms do not cancel by
    more). It scales with the values compared, not with one machine's rounding, so it holds at every kernel level
    (ATEN_CPU_CAPABILITY) and thread count; a missing or doubled term (a real bug) is of the values' own size."""
    return 2.0 * terms * FP32_U * factor * float(ref.abs().max()) + 1e-30


def assert_reordered_close(got: torch.Tensor, ref: torch.Tensor, terms: int, what=None) -> None:
    """got == ref up to `reorder_tol(ref, terms)`."""
    err, tol = float((got.double() - ref.double()).abs().max()), reorder_tol(ref, terms)
    assert err <= tol, f"{what}: |got - ref| {err:.3g} > {tol:.3g} (fp32 sums of {terms} terms in another order)"


# The slowest test files (make test's --durations), scheduled first: `make test` hands whole files to its two xdist
# workers in collection order, so a slow file collected last (tests/training/ sorts late) runs alone at the end.
SLOW_FIRST = ("decoding/test_bounded_engine.py", "training/test_ddp.py", "offline/test_gpu_run.py", "test_cli.py",
              "corrector/test_new_family.py", "app/test_app_browser.py", "training/test_resume_training.py",
              "specopd/test_specopd.py", "checks/test_gpu_check.py", "pipeline/test_corrector_stage.py")


def pytest_collection_modifyitems(session, config, items):
    rank = {f: i for i, f in enumerate(SLOW_FIRST)}
    where = lambda item: str(Path(item.fspath).relative_to(ROOT / "tests")) if ROOT / "tests" in Path(item.fspath).parents \
        else ""  # noqa: E731
    items.sort(key=lambda item: rank.get(where(item), len(rank)))  # stable: the rest keep their order


def stub_world(tmp_path: Path, params: dict, scripts: dict[str, str], world_hash: str) -> Path:
    """A toy world's folder as a replicate or a reading sees it (tests/pipeline): a prepared target (stub weights and its
    world record), references, one prompt file and params.yaml; and `scripts` (name -> source) as stub stage scripts in
    tmp_path/scripts, beside `stage.py`, which runs the one its first argument names (`stub_launch`: the command a
    replicate runs a stage with, `[*launch, stage]`, as the real one is `python -m draftlab.pipeline <stage>`)."""
    import json

    import yaml

    from draftlab import paths

    w = tmp_path / "world"
    (w / paths.TARGET).mkdir(parents=True)
    (w / paths.TARGET / "model.safetensors").write_bytes(b"weights")
    (w / paths.TARGET / "toy_world.json").write_text(json.dumps({"world_hash": world_hash}))
    (w / "data").mkdir()
    (w / paths.REFERENCES).write_bytes(b"refs")
    (w / "prompts").mkdir()
    (w / "prompts" / "x.jsonl").write_text("{}\n")
    (w / paths.PARAMS).write_text(yaml.safe_dump(params))
    (tmp_path / "scripts").mkdir()
    for name, source in scripts.items():
        (tmp_path / "scripts" / f"{name}.py").write_text(source)
    (tmp_path / "scripts" / "stage.py").write_text(
        "import pathlib, runpy, sys\n"
        "runpy.run_path(str(pathlib.Path(__file__).parent / (sys.argv.pop(1) + '.py')), run_name='__main__')\n")
    return w


def stub_launch(world: Path) -> tuple[str, ...]:
    """The command prefix that runs stub_world's stub stages: `[*stub_launch(world), stage]`."""
    import sys

    return sys.executable, str(world.parent / "scripts" / "stage.py")

