"""Data-parallel training (issue 21): the real stage scripts launched as a user launches them,
`torchrun --nproc_per_node 2 stages/<stage>.py trainer.devices=2` (CPU, gloo, one thread per rank), train
the same weights with the same per-step loss as one process on the same global batch (fp32
tolerance), for pretraining (pretrain_drafter), SpecOPD and corrector co-training; rank 0 alone
writes the outputs and a 2-process re-run resumes from the saved checkpoint. One scratch pipeline folder
(tiny random target, smoke profile) per process count; specopd and corrector run on a fixed random
base drafter before pretrain_drafter replaces it. And the trainer section's one-line errors."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from draftlab.config.trainer import TrainerConfig
from draftlab.drafter import DFlashDrafter, arch_from_target, save_drafter
from draftlab.errors import ConfigError

pytestmark = pytest.mark.usefixtures("one_thread")

# small global batches (2 sequences per rank), few steps, no validation between, torch kernels
COMMON = ["tracking.enabled=false", "profile.threads=1"]
STAGES = {
    "specopd": ["specopd.baselines=[]", "specopd.max_steps=2", "specopd.max_minutes=0", "specopd.batch_size=4",
                "specopd.anchors_per_seq=4", "specopd.cost_anchors=0", "specopd.tv_eval_seqs=0", "specopd.kernels=torch",
                "specopd.checkpoint_every=0", "specopd.warmup=0"],
    "corrector": ["corrector.variants=[dcoco]", "corrector.max_steps=2", "corrector.max_minutes=0",
                  "corrector.variant_max_minutes=0", "corrector.k=4", "corrector.dim=8", "corrector.hidden=16",
                  "corrector.batch_size=4", "corrector.anchors_per_seq=6", "corrector.val_every=0",
                  "corrector.kernels=torch"],
    "pretrain_drafter": ["pretrain.max_steps=3", "pretrain.max_minutes=0", "pretrain.batch_size=4",
                         "pretrain.anchors_per_seq=6", "pretrain.val_every=0", "pretrain.checkpoint_every=0",
                         "pretrain.warmup=0"],
}


def env(root: Path) -> dict:
    return {**os.environ, "PYTHONPATH": str(root / "src"), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def launch(root: Path, wd: Path, stage: str, ranks: int, extra: list[str] = ()) -> subprocess.CompletedProcess:
    script = str(root / "stages" / f"{stage}.py")
    args = [*COMMON, *STAGES[stage], *extra]
    cmd = ([sys.executable, script, *args] if ranks == 1 else
           [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}", script,
            f"trainer.devices={ranks}", *args])
    r = subprocess.run(cmd, cwd=wd, env=env(root), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{stage} x{ranks}: {r.stderr[-4000:]}"
    return r


def last_checkpoints(wd: Path, stage: str) -> dict[str, dict]:
    """{run folder: its last.ckpt} of a stage (the final weights, optimiser state and the loss curve)."""
    found = sorted((wd / "checkpoints" / stage).glob("**/last.ckpt"))
    assert found, f"no last.ckpt under {wd / 'checkpoints' / stage}"
    return {str(p.parent.relative_to(wd)): torch.load(p, map_location="cpu", weights_only=True) for p in found}


@pytest.fixture(scope="module")
def pipeline(root, tmp_path_factory):
    """A scratch pipeline folder: params (tiny-random + smoke, plain base), prepared target, references
    (8 train, 2 held-out, 1 eval) and a random base drafter."""
    from draftlab.decoding import generate_ar
    from draftlab.verifier.load import load_target

    wd = tmp_path_factory.mktemp("ddp") / "one"
    wd.mkdir()
    params = subprocess.run([sys.executable, "-m", "draftlab.config", "compose", "target=tiny-random", "profile=smoke",
                             "seeded.methods=false", "benchmark/arms=all"], cwd=root, env=env(root), capture_output=True, text=True,
                            check=True).stdout
    (wd / "params.yaml").write_text(params)
    r = subprocess.run([sys.executable, str(root / "stages" / "prepare_target.py")], cwd=wd, env=env(root),
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    t = load_target(wd / "models" / "target", "cpu", "float32")
    V = t.vocab_size
    g = torch.Generator().manual_seed(0)
    n = 11
    prompts = [torch.randint(100, V - 1, (int(torch.randint(5, 10, (1,), generator=g)),), generator=g).tolist()
               for _ in range(n)]
    resps = generate_ar(t, prompts, 20, eos_ids=[]).tokens
    split = ["train"] * 8 + ["heldout"] * 2 + ["eval"]
    (wd / "data").mkdir()
    pd.DataFrame({"prompt_id": [str(i) for i in range(n)], "suite": ["sharegpt"] * 10 + ["mt-bench"], "split": split,
                  "prompt_ids": prompts, "response_ids": resps}).to_parquet(wd / "data" / "references.parquet")
    torch.manual_seed(0)
    mask = next(i for i in range(2, V) if all(i not in p + r for p, r in zip(prompts, resps)))
    d = DFlashDrafter.from_target(arch_from_target(t, 4, 1, [0, 1], mask), t)
    save_drafter(d, wd / "models" / "drafter" / "pretrained")
    two = wd.parent / "two"
    shutil.copytree(wd, two)
    return wd, two


def assert_same_training(one: dict[str, dict], two: dict[str, dict], what: str) -> None:
    assert one.keys() == two.keys(), (what, one.keys(), two.keys())
    for run, a in one.items():
        b = two[run]
        assert a["global_step"] == b["global_step"] > 0, (what, run)
        la, lb = a["draftlab"]["loss_curve"], b["draftlab"]["loss_curve"]
        assert len(la) == len(lb) == a["global_step"], (what, run, la, lb)
        assert torch.allclose(torch.tensor(la), torch.tensor(lb), rtol=1e-5, atol=1e-6), (what, run, la, lb)
        sa, sb = a["state_dict"], b["state_dict"]
        assert sa.keys() == sb.keys()
        for k, v in sa.items():
            assert torch.allclose(v.float(), sb[k].float(), rtol=1e-4, atol=1e-6), (what, run, k,
                                                                                    float((v - sb[k]).abs().max()))
        # the counters are sums over ranks (the reports' slot predictions per second)
        assert a["draftlab"]["slot_predictions"] == b["draftlab"]["slot_predictions"] > 0, (what, run)


def assert_trained(ckpts: dict[str, dict], base: dict, what: str) -> None:
    """The drafter's weights moved away from the base drafter's (the comparison above is not of two copies of it)."""
    for run, c in ckpts.items():
        sd = {k[len("drafter."):]: v for k, v in c["state_dict"].items() if k.startswith("drafter.")}
        moved = [k for k, v in base.items() if k in sd and not torch.equal(sd[k], v)]
        assert moved, (what, run)


@pytest.mark.slow
def test_torchrun_two_ranks_equal_one_process(root, pipeline):
    from safetensors.torch import load_file

    one, two = pipeline
    base = load_file(one / "models" / "drafter" / "pretrained" / "model.safetensors")  # specopd's and corrector's start
    for stage in STAGES:
        launch(root, one, stage, 1)
        r2 = launch(root, two, stage, 2)
        assert r2.stderr.count(f"[{stage}] done in") == 1, r2.stderr[-2000:]  # rank 0 alone logs
        ones = last_checkpoints(one, stage)
        assert_same_training(ones, last_checkpoints(two, stage), stage)
        if stage != "pretrain_drafter":
            assert_trained(ones, base, stage)
    # every output of the stages written once, by rank 0: the same files in both folders
    outs = lambda wd: sorted(str(p.relative_to(wd)) for p in (wd / "models").rglob("*") if p.is_file())  # noqa: E731
    assert outs(one) == outs(two)
    assert sorted(p.name for p in (two / "metrics").rglob("*.json")) == sorted(
        p.name for p in (one / "metrics").rglob("*.json"))
    # the feature caches (one per key the stages ask for) are the 1-process run's, each complete, and no rank left a
    # half-built one behind (rank 0 builds behind a barrier; a second builder would leave a temp folder or a clash)
    caches = lambda wd: sorted(p.name for p in (wd / "checkpoints" / "pretrain_drafter" / "features").iterdir())  # noqa: E731
    assert caches(two) == caches(one) and all(not n.startswith(".") for n in caches(two)), (caches(one), caches(two))
    assert all((two / "checkpoints" / "pretrain_drafter" / "features" / n / "meta.json").exists() for n in caches(two))
    # a re-run on 2 ranks resumes the finished run from its last.ckpt (both ranks load it; nothing retrains)
    # (tensors compared, not bytes: safetensors writes its metadata map in a per-process hash order)
    weights = two / "models" / "drafter" / "pretrained" / "model.safetensors"
    before = load_file(weights)
    r = launch(root, two, "pretrain_drafter", 2)
    assert "resuming from" in r.stderr
    rep = json.loads((two / "results" / "pretrain_drafter.json").read_text())
    assert rep["resumed_from_step"] == 3 and rep["steps"] == 3, rep
    after = load_file(weights)
    assert after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)


# ---- the trainer section's checks ---------------------------------------------------------------------------------


def test_trainer_checks_are_one_line(monkeypatch):
    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)
    with pytest.raises(ConfigError, match="strategy") as e:
        TrainerConfig(strategy="deepspeed").check("trainer")
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="trainer.devices=4096 but this machine has"):
        TrainerConfig(devices=4096).check_machine("trainer", "cpu")
    with pytest.raises(ConfigError, match="num_nodes=2: launch each node"):
        TrainerConfig(devices=1, num_nodes=2).check_machine("trainer", "cpu")
    TrainerConfig(devices=2).check_machine("trainer", "cpu")  # one node: the stage re-executes under torchrun
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "3")
    with pytest.raises(ConfigError, match="launcher started 3 processes"):
        TrainerConfig(devices=2).check_machine("trainer", "cpu")


def test_devices_beyond_the_machine_fail_before_anything_runs(root, tmp_path):
    r = subprocess.run([sys.executable, str(root / "stages" / "pretrain_drafter.py"), "trainer.devices=4096"],
                       cwd=root, env=env(root), capture_output=True, text=True)
    assert r.returncode == 2 and "trainer.devices=4096 but this machine has" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
