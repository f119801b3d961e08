"""Data-parallel training: the real stages launched as a user launches them, `python -m draftlab.pipeline <stage>
trainer.devices=2` (it re-executes itself under torchrun; CPU, gloo, one thread per rank), train
the same weights with the same per-step loss as one process on the same global batch (fp32
tolerance derived from the arithmetic, below), for pretraining (pretrain_drafter), SpecOPD and corrector
co-training; the tolerances hold when one rank's gradients carry rounding-sized noise and fail on a planted
error (tests/ddp_perturb.py); rank 0 alone
writes the outputs and a 2-process re-run resumes from the saved checkpoint. Each stage's one-process run is launched
once, the reference of both tests. One scratch pipeline folder
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
from draftlab.drafter import DFlashDrafter, DrafterDesign, arch_from_target, save_drafter
from draftlab.errors import ConfigError

pytestmark = pytest.mark.usefixtures("one_thread")

# small global batches (2 sequences per rank), few steps, no validation between, torch kernels; DDP_TEST_THREADS
# (default 1) sets the threads per process, to try the tolerances under other kernel schedules by hand
THREADS = os.environ.get("DDP_TEST_THREADS", "1")
COMMON = ["tracking.enabled=false", f"profile.threads={THREADS}"]
PERTURB = Path(__file__).resolve().parents[1] / "ddp_perturb.py"
STAGES = {
    "specopd": ["specopd.baselines=[]", "specopd.max_steps=2", "specopd.max_minutes=0", "specopd.batch_size=4",
                "specopd.anchors_per_seq=4", "specopd.cost_anchors=0", "specopd.tv_eval_seqs=0", "specopd.kernels=torch",
                "specopd.checkpoint_every=0", "specopd.warmup=0"],
    "corrector": ["corrector.variants=[dcoco]", "corrector.max_steps=2", "corrector.max_minutes=0",
                  "corrector.variant_max_minutes=0", "corrector.k=4", "corrector.families.dcoco.dim=8", "corrector.families.dcoco.hidden=16",
                  "corrector.batch_size=4", "corrector.anchors_per_seq=6", "corrector.val_every=0",
                  "corrector.kernels=torch"],
    "pretrain_drafter": ["pretrain.max_steps=3", "pretrain.max_minutes=0", "pretrain.batch_size=4",
                         "pretrain.anchors_per_seq=6", "pretrain.val_every=0", "pretrain.checkpoint_every=0",
                         "pretrain.warmup=0"],
}


def env(root: Path, perturb: str = "") -> dict:
    out = {**os.environ, "PYTHONPATH": str(root / "src"), "OMP_NUM_THREADS": THREADS, "MKL_NUM_THREADS": THREADS}
    out.pop("DRAFTLAB_TEST_PERTURB", None)
    return {**out, "DRAFTLAB_TEST_PERTURB": perturb} if perturb else out


def launch(root: Path, wd: Path, stage: str, ranks: int, extra: list[str] = (), perturb: str = "") -> subprocess.CompletedProcess:
    """Run the stage as 1 process or `ranks` ranks: started plainly, as dvc repro starts it (with trainer.devices =
    `ranks` it re-executes itself under torchrun: draftlab.pipeline.stage.relaunch_command); `perturb` (2 ranks):
    under torchrun through tests/ddp_perturb.py with its spec."""
    args = [*COMMON, *STAGES[stage], *extra, *([f"trainer.devices={ranks}"] if ranks > 1 else [])]
    cmd = ([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}", str(PERTURB),
            stage, *args] if perturb else [sys.executable, "-m", "draftlab.pipeline", stage, *args])
    r = subprocess.run(cmd, cwd=wd, env=env(root, perturb), capture_output=True, text=True, timeout=600)
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
    params = subprocess.run([sys.executable, "-m", "draftlab.cli", "compose", "target=tiny-random", "profile=smoke",
                             "seeded.methods=false", "benchmark/arms=all"], cwd=root, env=env(root), capture_output=True, text=True,
                            check=True).stdout
    (wd / "params.yaml").write_text(params)
    r = subprocess.run([sys.executable, "-m", "draftlab.pipeline", "prepare_target"], cwd=wd, env=env(root),
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
    d = DFlashDrafter.from_target(arch_from_target(t, DrafterDesign(4, 1, [0, 1], mask)), t)
    save_drafter(d, wd / "models" / "drafter" / "pretrained")
    two = wd.parent / "two"
    shutil.copytree(wd, two)
    shutil.copytree(wd, wd.parent / "pristine")  # for the perturbed runs (the other test trains in one and two)
    return wd, two


@pytest.fixture(scope="module")
def one_process(root, pipeline):
    """stage -> the last checkpoints of its one-process run in `one`, the reference both tests compare with: each
    stage launched once in this module, in STAGES order (the stages before it first: pretrain_drafter replaces the
    base drafter that specopd and corrector start from)."""
    one, done = pipeline[0], {}

    def run(stage: str) -> dict[str, dict]:
        for s in list(STAGES)[: list(STAGES).index(stage) + 1]:
            if s not in done:
                launch(root, one, s, 1)
                done[s] = last_checkpoints(one, s)
        return done[stage]
    return run


# ---- the comparison and its tolerances ---------------------------------------------------------------------------
# One process and 2 ranks compute the same global-batch gradient in another summation order, so every number differs
# by fp32 rounding (unit roundoff U = 2**-24 ~ 6e-8), and the optimiser propagates it. What is compared, and how:
# - step 1 (both runs at the same weights on the same data): the loss and the global gradient's norm are sums of at
#   most a few hundred supervised positions' terms taken in another order, equal to <= N*U ~ 1e-5 of themselves
#   (STEP1_RTOL). A planted error (one rank's gradient scaled by 1.01) moves the norm by ~0.5% of that rank's share,
#   ~300x that bound (test_rounding_sized_noise_passes_and_a_planted_error_fails);
# - later steps are not rounding-conditioned: AdamW's step m_hat / (sqrt(v_hat) + eps) is scale-free, so an element
#   whose gradient is at rounding level (|g| ~ eps = 1e-8) moves by anything in [-lr, lr] in either run (what an
#   AVX-512 machine showed: weights 2e-5 = 2% of lr apart), the next gradient is taken at those weights, and SpecOPD
#   samples its branches from the drafter there. What holds: every weight lies within the optimiser's own reach of
#   the other run's, 2 * sum_t lr_t * (C_t + weight decay), C_t = max |m_hat / sqrt(v_hat)| = (1-b1)/(1-b1^t) *
#   sqrt((1-b2^t)/(1-b2)) * sqrt(sum_k<t (b1^2/b2)^k) (Cauchy-Schwarz over the gradients); and each later loss moves
#   by at most sum_i |g_i| |dw_i| over those rounding-level elements, far below LATER_RTOL = 1e-4 of the loss (a
#   branch token flipped by a weight difference would need a uniform within ~1e-6 of a CDF boundary).
STEP1_RTOL = 1e-5
LATER_RTOL = 1e-4


def adam_step_bound(t: int, b1: float, b2: float) -> float:
    """C_t: the largest |m_hat / sqrt(v_hat)| of AdamW's step t for any gradients (see above)."""
    return ((1 - b1) / (1 - b1 ** t) * ((1 - b2 ** t) / (1 - b2)) ** 0.5
            * sum((b1 * b1 / b2) ** k for k in range(t)) ** 0.5)


def differences(a: dict, b: dict) -> list[str]:
    """What differs between two runs' last.ckpt beyond the bounds above (empty = the same training)."""
    bad = []
    da, db = a["draftlab"], b["draftlab"]
    la, lb = torch.tensor(da["loss_curve"]), torch.tensor(db["loss_curve"])
    ga, gb = torch.tensor(da["grad_norm_curve"]), torch.tensor(db["grad_norm_curve"])
    if la.shape != lb.shape or ga.shape != gb.shape or len(la) == 0:
        return [f"curves of other lengths: loss {la.tolist()} vs {lb.tolist()}, grad norm {ga.tolist()} vs {gb.tolist()}"]
    if abs(float(la[0] - lb[0])) > STEP1_RTOL * abs(float(la[0])):
        bad.append(f"step-1 loss {float(la[0])!r} vs {float(lb[0])!r}")
    if abs(float(ga[0] - gb[0])) > STEP1_RTOL * abs(float(ga[0])):
        bad.append(f"step-1 gradient norm {float(ga[0])!r} vs {float(gb[0])!r}")
    if not torch.all((la[1:] - lb[1:]).abs() <= LATER_RTOL * la[1:].abs()):
        bad.append(f"later losses {la.tolist()} vs {lb.tolist()}")
    # every weight within the optimiser's reach of the other run's (lr <= its initial value: warm-up, then decay)
    oa, steps = a["optimizer_states"][0], int(a["global_step"])
    reach = 0.0
    for g in oa["param_groups"]:  # the checkpoint does not map groups to names: the largest group's reach for all
        b1, b2 = g["betas"]
        lr = float(g.get("initial_lr", g["lr"]))
        reach = max(reach, 2 * sum(lr * (adam_step_bound(t, b1, b2) + g["weight_decay"]) for t in range(1, steps + 1)))
    for k, v in a["state_dict"].items():
        if not v.is_floating_point():
            continue
        if v.shape != b["state_dict"][k].shape:
            bad.append(f"{k}: shapes {tuple(v.shape)} vs {tuple(b['state_dict'][k].shape)}")
            continue
        d = float((v.float() - b["state_dict"][k].float()).abs().max())
        if d > reach * 1.001:  # (+ the rounding of the bound itself)
            bad.append(f"{k}: max |dw| {d:.3g} > the optimiser's reach {reach:.3g}")
    return bad


def assert_same_training(one: dict[str, dict], two: dict[str, dict], what: str) -> None:
    assert one.keys() == two.keys(), (what, one.keys(), two.keys())
    for run, a in one.items():
        b = two[run]
        assert a["global_step"] == b["global_step"] > 0, (what, run)
        assert len(a["draftlab"]["loss_curve"]) == a["global_step"], (what, run)
        bad = differences(a, b)
        assert not bad, (what, run, bad)
        # the counters are sums over ranks (the reports' slot predictions per second)
        assert a["draftlab"]["slot_predictions"] == b["draftlab"]["slot_predictions"] > 0, (what, run)


def assert_trained(ckpts: dict[str, dict], base: dict, what: str) -> None:
    """The drafter's weights moved away from the base drafter's (the comparison above is not of two copies of it)."""
    for run, c in ckpts.items():
        sd = {k[len("drafter."):]: v for k, v in c["state_dict"].items() if k.startswith("drafter.")}
        moved = [k for k, v in base.items() if k in sd and not torch.equal(sd[k], v)]
        assert moved, (what, run)


@pytest.mark.slow
def test_torchrun_two_ranks_equal_one_process(root, pipeline, one_process):
    from safetensors.torch import load_file

    one, two = pipeline
    base = load_file(two / "models" / "drafter" / "pretrained" / "model.safetensors")  # specopd's and corrector's start
    for stage in STAGES:
        ones = one_process(stage)
        r2 = launch(root, two, stage, 2)
        assert r2.stderr.count(f"[{stage}] done in") == 1, r2.stderr[-2000:]  # rank 0 alone logs
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


@pytest.mark.slow
def test_rounding_sized_noise_passes_and_a_planted_error_fails(root, pipeline, one_process):
    """The tolerances are not fitted to this machine's rounding: with relative noise of 1e-6 (the size of another
    kernel level's or summation order's rounding, 16x fp32's unit roundoff) on one rank's gradients the 2-rank
    SpecOPD run still matches the 1-process run (the other test's, from the same start); with that rank's gradients
    scaled by 1.01 it does not."""
    pristine = pipeline[0].parent / "pristine"
    runs = {"one": one_process("specopd")}
    for name, perturb in (("noise", "1:noise:1e-6"), ("planted", "1:scale:1.01")):
        wd = pristine.parent / f"perturb-{name}"
        shutil.copytree(pristine, wd)
        launch(root, wd, "specopd", 2, perturb=perturb)
        runs[name] = last_checkpoints(wd, "specopd")
    assert_same_training(runs["one"], runs["noise"], "specopd with rounding-sized noise")
    planted = [d for run, a in runs["one"].items() for d in differences(a, runs["planted"][run])]
    assert any("step-1 gradient norm" in d for d in planted), planted


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
    r = subprocess.run([sys.executable, "-m", "draftlab.pipeline", "pretrain_drafter", "trainer.devices=4096"],
                       cwd=root, env=env(root), capture_output=True, text=True)
    assert r.returncode == 2 and "trainer.devices=4096 but this machine has" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
