"""DCOCO co-training and its stage/arms (SPEC §2.3): gradient routing through the LightningModule
(co-training vs frozen backbone), a short co-training that lowers the corrector loss and does not
lose simulated τ, the stage end to end on a tiny random target (outputs, metrics, resume), the
dcoco arms lossless through the benchmark runner, and the summary's headroom / proposal share."""
from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest
import torch

from conftest import assert_reordered_close
from draftlab.config import CorrectorConfig, PretrainConfig
from draftlab.drafter import DFlashDrafter, save_drafter, DrafterDesign, arch_from_target
from draftlab.corrector.families import build_corrector
from draftlab.recipes.corrector.cotrain import CoTrain, CoTrainRun, train_corrector
from draftlab.training.data import DrafterDataModule
from draftlab.training.features import FeatureStore, SequenceSet
from draftlab.training.pretrain import train_drafter
from draftlab.stats import NOISE_SE

S = 5
TAPS = [0, 2, 3]
MASK = 1


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py (which also gives the tiny llama `target`)


def greedy_refs(target, n=8, prompt=6, resp=28, seed=7):
    """Prompts and the target's own greedy continuations (what the reference stage writes)."""
    from draftlab.decoding import generate_ar

    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(3, 97, (prompt,), generator=g).tolist() for _ in range(n)]
    return prompts, generate_ar(target, prompts, resp, eos_ids=[]).tokens


def pcfg(**kw) -> PretrainConfig:
    base = dict(max_steps=30, max_minutes=0, lr=3e-3, warmup=0.05, val_every=0, batch_size=4, anchors_per_seq=12,
                val_anchor_stride=2, checkpoint_every=0, topk=4)
    base.update(kw)
    return PretrainConfig(**base)


def ccfg(**kw) -> CorrectorConfig:
    base = dict(k=4, families={"dcoco": {"dim": 8, "hidden": 16}}, max_steps=6, max_minutes=0, lr=5e-3, drafter_lr=1e-3, batch_size=4,
                anchors_per_seq=12, val_every=0, seed=0)
    base.update(kw)
    return CorrectorConfig(**base)


@pytest.fixture(scope="module")
def data(target, tmp_path_factory):
    """Greedy references (6 train + 2 held-out), their feature cache, and a briefly pretrained base drafter."""
    tmp = tmp_path_factory.mktemp("cotrain")
    prompts, refs = greedy_refs(target)
    seqs = SequenceSet.from_lists(prompts, refs, ["train"] * 6 + ["heldout"] * 2)
    store, _ = FeatureStore.open_or_build(tmp / "f", target, seqs, TAPS, log=lambda m: None)
    torch.manual_seed(0)
    base = DFlashDrafter.from_target(arch_from_target(target, DrafterDesign(S, 1, TAPS, MASK)), target)
    train_drafter(base, seqs, pcfg(max_steps=4), tmp / "pre", store=store, log=lambda m: None)  # weak: headroom left
    return seqs, store, {k: v.clone() for k, v in base.state_dict().items()}


def base_drafter(target, state) -> DFlashDrafter:
    d = DFlashDrafter.from_target(arch_from_target(target, DrafterDesign(S, 1, TAPS, MASK)), target)
    d.load_state_dict(state)
    return d.train()


def one_batch(seqs, store, c):
    torch.manual_seed(0)
    dm = DrafterDataModule(seqs, c.run_settings(pcfg(), 0.0), S, store)
    return next(iter(dm.train_dataloader()))


@pytest.mark.parametrize("frozen", [False, True])
def test_gradient_routing_through_the_module(target, data, frozen):
    """Co-training: the corrector loss alone puts gradient on the drafter's weights (through its hidden
    states and logits). Frozen backbone: the drafter gets none, the corrector still learns."""
    seqs, store, state = data
    c = ccfg()
    d = base_drafter(target, state)
    corr = build_corrector(c, d, "frozen" if frozen else "dcoco")
    torch.nn.init.normal_(corr.mlp_out.weight, std=0.5)  # past init: Δθ depends on h as well
    m = CoTrain(d, corr, c.run_settings(pcfg(), 0.0), c, frozen=frozen, target=target)
    out = m.compute_losses(one_batch(seqs, store, c))
    assert out["den_corr"] > 0 and torch.isfinite(out["corrector"]) and out["corrector"] > 0
    out["corrector"].backward(retain_graph=not frozen)
    dgrads = [p.grad for p in d.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in (p.grad for p in corr.parameters()))
    assert corr.mlp_out.weight.grad.abs().sum() > 0
    if frozen:
        assert all(g is None for g in dgrads) and not any(p.requires_grad for p in d.parameters())
        assert out["loss"].grad_fn is not None  # the corrector part still trains
        torch.testing.assert_close(out["loss"], c.lambda_corr * out["corrector"])
    else:
        assert any(g is not None and g.abs().sum() > 0 for g in dgrads)
        assert d.fc.weight.grad.abs().sum() > 0  # reached back through the layers to the context projection
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in d.layers[0].parameters())
        torch.testing.assert_close(out["loss"], out["drafter"] + c.lambda_corr * out["corrector"])


def _grads(out: torch.Tensor, params: list, grad_out: torch.Tensor | None = None) -> list[torch.Tensor]:
    gs = torch.autograd.grad(out, params, grad_out, retain_graph=True, allow_unused=True)
    return [torch.zeros_like(p) if g is None else g for p, g in zip(params, gs)]


def test_hidden_path_stop_gradient_leaves_the_drafter_to_the_logit_path(target, data):
    """Gradient check of the co-training options. With the stop-gradient on the hidden-state path, the
    corrector loss's gradient on every drafter parameter is exactly that of the logit path alone (computed
    here by hand: the corrector reads a constant copy of h, only the draft logits carry the graph), so the
    hidden-state path leaves the drafter's parameters untouched; in joint training it does not. λ scales the
    joint gradient; λ = 0 leaves every drafter parameter untouched by the corrector loss."""
    from draftlab.corrector.base import DraftBlock
    from draftlab.corrector.families import variant_table
    from draftlab.training.ce import block_targets

    seqs, store, state = data
    c = ccfg()
    batch = one_batch(seqs, store, c)
    d = base_drafter(target, state)
    corr = build_corrector(c, d, "dcoco")
    torch.nn.init.normal_(corr.mlp_out.weight, std=0.5)  # past init (w_out = 0 would hide the hidden path)
    params = list(d.parameters())
    module = lambda v: CoTrain(d, corr, c.run_settings(pcfg(), 0.0), c, target=target,  # noqa: E731
                               variant=variant_table()[v])
    grads = {v: _grads(module(v).compute_losses(batch)["corrector"], params)
             for v in ("dcoco", "dcoco-sg", "dcoco-lam0.3", "dcoco-lam0")}
    m = module("dcoco")
    out = m.ce.loss_parts(batch, greedy=True)
    leaf = out["logits"].detach().requires_grad_()  # [B, A, n, Vd]
    labels, valid = block_targets(batch, out["greedy"], S)
    slot0 = batch["ids"].gather(1, batch["anchors"])
    cl = corr.loss(DraftBlock(out["hidden"][:, :, 1:].detach(), slot0, d.draft_vocab, leaf), labels, valid, m.ce.t2d, c.rho)
    (g_logits,) = torch.autograd.grad(cl.num / cl.den, leaf)
    logit_path = _grads(out["logits"], params, g_logits)
    assert sum(float(g.abs().sum()) for g in logit_path) > 0  # the logit path is kept
    rows = batch["anchors"].numel() * S  # the block rows each weight's gradient sums over
    for g_sg, g_l in zip(grads["dcoco-sg"], logit_path):
        assert_reordered_close(g_sg, g_l, rows, "stop-gradient path")
    assert any(not torch.allclose(g_j, g_l, rtol=1e-3, atol=1e-6) for g_j, g_l in zip(grads["dcoco"], logit_path))
    for g_lam, g_j in zip(grads["dcoco-lam0.3"], grads["dcoco"]):
        assert_reordered_close(g_lam, 0.3 * g_j, rows, "lambda 0.3")
    assert all(float(g.abs().sum()) == 0.0 for g in grads["dcoco-lam0"])
    assert corr.mlp_out.weight.requires_grad  # the corrector itself still learns in every option


def test_frozen_warmup_trains_the_corrector_alone_first(target, data):
    from draftlab.corrector.families import variant_table
    from draftlab.training.module import TrainModule
    from draftlab.training.objective import Counts, StepContext

    seqs, store, state = data
    c = ccfg(max_steps=0, max_minutes=1.0)
    batch = one_batch(seqs, store, c)
    d = base_drafter(target, state)
    corr = build_corrector(c, d, "dcoco")
    torch.nn.init.normal_(corr.mlp_out.weight, std=0.5)
    m = CoTrain(d, corr, c.run_settings(pcfg(), 1.0), c, target=target, variant=variant_table()["dcoco-warm"])
    w = variant_table()["dcoco-warm"].frozen_warmup
    params = list(d.parameters())
    at = lambda progress: StepContext(0, progress, 0.0, 0.0, Counts(), lambda x: x, 1)  # noqa: E731
    out = m.compute_losses(batch, at(0.0))  # progress 0: the drafter is frozen
    torch.testing.assert_close(out["loss"], c.lambda_corr * out["corrector"])
    assert all(float(g.abs().sum()) == 0.0 for g in _grads(out["loss"], params))
    assert float(_grads(out["loss"], [corr.mlp_out.weight])[0].abs().sum()) > 0
    out = m.compute_losses(batch, at(w + 0.01))  # past the warm-up: joint training
    torch.testing.assert_close(out["loss"], out["drafter"] + c.lambda_corr * out["corrector"])
    assert sum(float(g.abs().sum()) for g in _grads(out["loss"], params)) > 0
    # the drafter's learning rate restarts its warm-up when it joins; the corrector's schedule runs on
    tm = TrainModule(m)
    tm.train_seconds = 60.0 * (w + 0.01)  # the module's clock: past the warm-up
    sched = tm.configure_optimizers()["lr_scheduler"]["scheduler"]
    lr = {g["drafter"]: f(0) for g, f in zip(sched.optimizer.param_groups, sched.lr_lambdas)}  # factors now
    assert lr[True] < lr[False]


@pytest.mark.parametrize("frozen", [False, True])
def test_fit_updates_the_drafter_only_when_co_training(target, data, tmp_path, frozen):
    seqs, store, state = data
    c = ccfg(max_steps=3)
    d = base_drafter(target, state)
    corr = build_corrector(c, d, "dcoco")
    r = train_corrector(d, corr, seqs, CoTrainRun(c.run_settings(pcfg(), 0.0), c, tmp_path / "run", frozen=frozen),
                        store=store, log=lambda m: None)
    assert r.steps == 3 and r.extras["frozen"] == frozen
    changed = any(not torch.equal(v, state[k]) for k, v in d.state_dict().items())
    assert changed != frozen
    assert corr.mlp_out.weight.abs().sum() > 0  # the zero-initialised output layer moved in both modes


def _corr_loss(target, d, corr, c, batch) -> float:
    m = CoTrain(d, corr, c.run_settings(pcfg(), 0.0), c, frozen=False, target=target)
    with torch.no_grad():
        return float(m.compute_losses(batch)["corrector"])


def test_short_cotraining_lowers_corrector_loss(target, data, tmp_path):
    seqs, store, state = data
    c = ccfg(max_steps=60, val_every=30)
    d = base_drafter(target, state)
    corr = build_corrector(c, d, "dcoco")
    batch = one_batch(seqs, store, c)
    before = _corr_loss(target, d, corr, c, batch)
    r = train_corrector(d, corr, seqs, CoTrainRun(c.run_settings(pcfg(), 0.0), c, tmp_path / "run"), store=store,
                        log=lambda m: None)
    after = _corr_loss(target, d, corr, c, batch)
    assert after < 0.8 * before, (before, after)
    assert any(not torch.equal(v, state[k]) for k, v in d.state_dict().items())  # the drafter was co-trained
    m = r.best_metrics["train_sample"]
    # a re-selector picks among the same K candidates as the oracle: never above it
    assert m["blocks"] > 0 and max(m["sim_tau"], m["sim_tau_uncorrected"]) <= m["sim_tau_oracle"] + 1e-9
    h = r.best_metrics["heldout"]
    assert set(h) >= {"sim_tau", "sim_tau_uncorrected", "sim_tau_oracle", "sim_tau_per_slot", "headroom_closed",
                      "top4_cov"}
    assert h["sim_tau"] == pytest.approx(1 + sum(h["sim_tau_per_slot"]))
    assert [row["step"] for row in r.history] == [30, 60]


def test_trained_corrector_beats_the_drafter_argmax(target, data, tmp_path):
    """Frozen backbone (the drafter's argmax τ is fixed): the corrector learns to re-select the verifier's
    tokens and the corrected block's simulated τ on the training sample exceeds the uncorrected one."""
    seqs, store, state = data
    c = ccfg(max_steps=150, lr=1e-2)
    d = base_drafter(target, state)
    corr = build_corrector(c, d, "dcoco")
    r = train_corrector(d, corr, seqs, CoTrainRun(c.run_settings(pcfg(), 0.0), c, tmp_path / "run", frozen=True),
                        store=store, log=lambda m: None)
    m = r.best_metrics["train_sample"]
    assert m["sim_tau_uncorrected"] < m["sim_tau"] <= m["sim_tau_oracle"], m
    # the share closed: reported where the headroom stands above noise (NOISE_SE standard errors), None where not
    room = m["sim_tau_oracle"] - m["sim_tau_uncorrected"]
    if room >= NOISE_SE * m["headroom_se"]:
        assert m["headroom_closed"] == pytest.approx((m["sim_tau"] - m["sim_tau_uncorrected"]) / room) > 0, m
    else:
        assert m["headroom_closed"] is None, m


def test_resume_after_interruption(target, data, tmp_path):
    import lightning as L

    seqs, store, state = data

    class StopAt(L.Callback):
        def on_train_batch_end(self, trainer, *args):
            if trainer.global_step >= 3:
                trainer.should_stop = True

    c = ccfg(max_steps=5)
    view = c.run_settings(pcfg(checkpoint_every=2), 0.0)
    d = base_drafter(target, state)
    run = CoTrainRun(view, c, tmp_path / "run")
    r1 = train_corrector(d, build_corrector(c, d, "dcoco"), seqs, run, store=store, callbacks=[StopAt()],
                         log=lambda m: None)
    assert r1.steps == 3
    d2 = base_drafter(target, state)
    r2 = train_corrector(d2, build_corrector(c, d2, "dcoco", seed=9), seqs, run, store=store, log=lambda m: None)
    assert r2.resumed_from_step == 3 and r2.steps == 5 and r2.slot_predictions > r1.slot_predictions


# ---- the dcoco arms through the benchmark runner ----------------------------------------------------------


def write_variant(root, target, drafter, corrector, variant="dcoco", info=None):
    save_drafter(drafter, root / variant / "drafter")
    corrector.save(root / variant / "corrector", info={"lam": 0.75, "kernels": "torch", **(info or {})})


def test_dcoco_arms_lossless_in_the_runner_and_summary(target, data, tmp_path):
    from draftlab.bench import ArmContext, Checkpoints, PromptItem, build_arm, compute, run_benchmark
    from draftlab.config import BenchmarkConfig
    from draftlab.decoding import generate_ar
    from draftlab.drafter import load_drafter

    _, _, state = data
    d = base_drafter(target, state).eval()
    corr = build_corrector(ccfg(), d, "dcoco")
    with torch.no_grad():  # a strongly opinionated Δθ: corrected blocks differ from the drafter's argmax
        torch.nn.init.normal_(corr.mlp_out.weight, std=3.0)
    write_variant(tmp_path / "corr", target, d, corr)
    save_drafter(d, tmp_path / "pre")
    cache: dict = {}
    cfg = BenchmarkConfig(suites=["mt-bench"], max_new_tokens=14, temperatures=[0.0, 1.0], concurrency=[], topk=4,
                          warmup=False, drafter=str(tmp_path / "pre"))
    ctx = ArmContext(target, cfg, Checkpoints(cfg.drafter, "", "", str(tmp_path / "corr")),
                     load_drafter=lambda p: cache.setdefault(p, load_drafter(p, target)))
    names = ["ar", "dflash", "dcoco", "dcoco-globalsum", "dcoco-geometric"]
    arms = {n: build_arm(n, ctx) for n in names}
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(3, 97, (n,), generator=g).tolist() for n in (6, 9, 7)]
    ref = generate_ar(target, prompts, 14, eos_ids=[]).tokens
    suites = {"mt-bench": [PromptItem(f"p{i}", "mt-bench", p) for i, p in enumerate(prompts)]}
    runs = run_benchmark(arms, suites, cfg, [], target.device)
    corrected = False
    for r in runs.runs:
        if r.temperature == 0.0:
            assert r.result.tokens == [ref[int(i[1:])] for i in r.prompt_ids], r.arm  # lossless: == AR
        if r.arm.startswith("dcoco"):
            assert len(r.result.tokens[0]) == 14
            corrected |= any(bool((rec.proposals != rec.topk_ids[..., 0]).any()) for rec in r.result.records)
    assert corrected  # the corrector really re-selected tokens
    # the rounds Parquet carries each DCOCO round's K×K grids and path, which replay to the proposals
    from draftlab.bench.report import round_frame
    from draftlab.corrector.paths import path_tokens, select_path

    rf = round_frame(runs.runs)
    assert rf.loc[rf.arm == "dflash", "transition_scores"].isna().all()
    for arm, rule in (("dcoco", "greedy"), ("dcoco-geometric", "geometric")):
        rows = rf[rf.arm == arm]
        assert rows[f"path_{rule}"].notna().all() and len(rows) > 0
        for _, row in rows.head(5).iterrows():
            sc = torch.tensor([list(map(list, m)) for m in row["transition_scores"]])[None]  # [1, n−1, K, K]
            ids, lg = torch.tensor([list(x) for x in row["topk_ids"]])[None], torch.tensor([list(x) for x in row["topk_logits"]])[None]
            idx = select_path(sc, lg, rule, 0.75)
            assert idx[0].tolist() == list(row[f"path_{rule}"])
            assert path_tokens(idx, ids)[0].tolist() == list(row["proposals"])
    from draftlab.bench.uncertainty import add_intervals

    detail = compute(runs.runs, runs.arms)
    add_intervals(detail, runs.runs, 0)  # per-prompt figures (oracle τ too): the headroom's noise
    s = detail["summary"]
    for n in names[1:]:
        assert "headroom_closed_t0" in s[n] and 0 < s[n]["proposal_share_of_round"] < 1
    base = s["dflash"]
    assert s["dflash"]["headroom_closed_t0"] == 0
    if base["oracle_tau_t0"] > base["tau_t0"]:
        want = (s["dcoco"]["tau_t0"] - base["tau_t0"]) / (base["oracle_tau_t0"] - base["tau_t0"])
        note = s["dcoco"]["headroom_t0"]["oracle_tau"]
        assert note["delta"] == pytest.approx(base["oracle_tau_t0"] - base["tau_t0"], abs=1e-6)
        if note["why"]:  # a headroom within noise gives no ratio (draftlab.bench.oracles)
            assert s["dcoco"]["headroom_closed_t0"] is None and note["delta"] < 2 * (note["se"] or float("inf"))
        else:
            assert s["dcoco"]["headroom_closed_t0"] == pytest.approx(want) and note["delta"] >= 2 * note["se"]
    assert s["ar"]["headroom_closed_t0"] is None


def test_missing_checkpoint_is_one_line_when_the_arm_is_built(target, tmp_path):
    from draftlab.bench import ArmContext, Checkpoints, build_arm
    from draftlab.config import BenchmarkConfig
    from draftlab.errors import DraftlabError

    ctx = ArmContext(target, BenchmarkConfig(), Checkpoints("", "", "", str(tmp_path / "none")))
    for name in ("dcoco-nopair", "specopd-dcoco"):  # every arm is in the table; a missing folder fails at build
        with pytest.raises(DraftlabError, match=f"arm {name}: no corrector checkpoint") as e:
            build_arm(name, ctx)
        assert "\n" not in str(e.value)


# ---- the stage end to end -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def workdir(root, target, tmp_path_factory):
    """A scratch pipeline folder (tiny-random + smoke) with prepared target, references and a base drafter."""
    from draftlab.decoding import generate_ar
    from draftlab.verifier.load import load_target

    wd = tmp_path_factory.mktemp("stage")
    # the plain drafter as the methods' base (smoke trains them on the seeded one: seeded.methods, issue 20)
    params = subprocess.run([sys.executable, "-m", "draftlab.cli", "compose", "target=tiny-random", "profile=smoke",
                             "seeded.methods=false", "benchmark/arms=all", "tracking.uri=sqlite:///" + str(wd / "mlruns.db")],
                            cwd=root, capture_output=True, text=True, check=True).stdout
    (wd / "params.yaml").write_text(params)
    r = subprocess.run([sys.executable, "-m", "draftlab.pipeline", "prepare_target"], cwd=wd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    t = load_target(wd / "models" / "target", "cpu", "float32")
    V = t.vocab_size
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(100, V - 1, (8,), generator=g).tolist() for _ in range(7)]
    resps = generate_ar(t, prompts, 24, eos_ids=[]).tokens
    split = ["train"] * 4 + ["heldout"] * 2 + ["eval"]
    (wd / "data").mkdir()
    pd.DataFrame({"prompt_id": [str(i) for i in range(7)], "suite": ["sharegpt"] * 6 + ["mt-bench"], "split": split,
                  "prompt_ids": prompts, "response_ids": resps}).to_parquet(wd / "data" / "references.parquet")
    torch.manual_seed(0)
    mask = next(i for i in range(2, V) if all(i not in p + r for p, r in zip(prompts, resps)))
    d = DFlashDrafter.from_target(arch_from_target(t, DrafterDesign(4, 1, [0, 1], mask)), t)
    save_drafter(d, wd / "models" / "drafter" / "pretrained")
    return wd


STAGE_ARGS = ["corrector.variants=[dcoco,nopair,nocand,frozen,dcoco-sg,frozen-reach]", "corrector.max_steps=3", "corrector.max_minutes=0",
              "corrector.k=4", "corrector.families.dcoco.dim=8", "corrector.families.dcoco.hidden=16", "corrector.batch_size=2",
              "corrector.anchors_per_seq=6", "corrector.val_every=0", "corrector.kernels=torch"]


def test_stage_end_to_end(root, workdir):
    r = subprocess.run([sys.executable, "-m", "draftlab.pipeline", "corrector", *STAGE_ARGS], cwd=workdir,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    m = json.loads((workdir / "results" / "corrector.json").read_text())
    variants = {"dcoco", "nopair", "nocand", "frozen", "dcoco-sg", "frozen-reach"}
    assert set(m["variants"]) == variants
    # the headline: one small DVC metrics file per variant (+ the control), numbers equal to the report's
    rows = {f.stem: json.loads(f.read_text()) for f in (workdir / "metrics" / "corrector").glob("*.json")}
    assert set(rows) == variants | {"dflash-long"}
    assert rows["dcoco"] == {k: m["variants"]["dcoco"][k] for k in ("sim_tau", "sim_tau_uncorrected", "sim_tau_oracle")}
    assert rows["dflash-long"] == {"sim_tau": m["dflash-long"]["sim_tau"]}
    for v, rep in m["variants"].items():
        for k in ("sim_tau", "sim_tau_uncorrected", "sim_tau_oracle", "sim_tau_oracle_reachable", "sim_tau_per_slot",
                  "sim_tau_per_slot_uncorrected", "params_corrector", "train_minutes",
                  "rules", "steps", "drafter_tau_before", "drafter_tau_after", "headroom_closed_reachable"):
            assert k in rep, (v, k)
        assert rep["steps"] == 3 and len(rep["sim_tau_per_slot"]) == 3
        assert rep["sim_tau_uncorrected"] <= rep["sim_tau_oracle_reachable"] <= rep["sim_tau_oracle"]
        assert rep["drafter_tau_before"] == m["base_drafters"]["pretrained"]["sim_tau"]
        assert rep["drafter_tau_after"] == rep["sim_tau_uncorrected"]
        for o in ("", "_reachable"):  # a share of headroom only above twice its error over blocks, the error reported
            se, gap = rep["headroom_se" + o], rep["sim_tau_oracle" + o] - rep["sim_tau_uncorrected"]
            if rep["headroom_closed" + o] is not None:
                assert se is not None and gap >= 2 * se
            else:
                assert gap <= 1e-9 or se is None or gap < 2 * se
    frozen_drafters = [v for v, r in m["variants"].items() if r["frozen_backbone"]]
    assert all(m["variants"][v]["drafter_tau_change"] == 0.0 for v in frozen_drafters)  # an untouched drafter
    assert (m["variants"]["dcoco-sg"]["grad_hidden"], m["variants"]["dcoco-sg"]["grad_logits"]) == (0.0, 1.0)
    assert m["variants"]["frozen-reach"]["loss"] == "reach" and m["variants"]["dcoco"]["loss"] == "joint"
    # a corrector's share of a round is the benchmark's to measure (per arm, results/benchmark.json), not training's
    assert not any("engine" in r or "proposal_share_of_round" in r for r in m["variants"].values())
    for v in m["variants"]:
        for sub in ("drafter", "corrector"):
            cfg = json.loads((workdir / "models" / "corrector" / v / sub / "config.json").read_text())
            assert (workdir / "models" / "corrector" / v / sub / "model.safetensors").exists() and cfg["format"]
    sizes = {v: m["variants"][v]["params_corrector"] for v in m["variants"]}
    assert sizes["nopair"] < sizes["dcoco"] and sizes["nocand"] < sizes["dcoco"] and sizes["frozen"] == sizes["dcoco"]
    assert m["variants"]["frozen"]["params_drafter_trained"] == 0
    assert set(m["variants"]["dcoco"]["rules"]) == {"greedy", "globalsum", "geometric"}
    assert m["dflash-long"]["steps"] == 3 and (workdir / "models" / "drafter" / "long" / "config.json").exists()
    assert m["summary"]["sim_tau_base_drafter"] is not None
    # the base it trained on is recorded (seeded.methods=false: the plain drafter), in the report and every folder
    assert (m["base_kind"], m["base_folder"]) == ("plain", "models/drafter/pretrained")
    for sub in ("models/corrector/dcoco/drafter", "models/corrector/dcoco/corrector", "models/drafter/long"):
        assert json.loads((workdir / sub / "config.json").read_text())["info"]["base_kind"] == "plain", sub
    # a re-run with the same settings resumes every finished run instead of training again
    r2 = subprocess.run([sys.executable, "-m", "draftlab.pipeline", "corrector", *STAGE_ARGS], cwd=workdir,
                        capture_output=True, text=True)
    assert r2.returncode == 0, r2.stderr[-3000:]
    assert r2.stderr.count("resuming from") == 7  # 6 variants + the control
    # the stage's checkpoints drive the dcoco arm losslessly
    from draftlab.bench import ArmContext, Checkpoints, build_arm
    from draftlab.config import BenchmarkConfig
    from draftlab.decoding import generate_ar
    from draftlab.drafter import load_drafter
    from draftlab.verifier.load import load_target

    t = load_target(workdir / "models" / "target", "cpu", "float32")
    ckpts = Checkpoints("", "", str(workdir / "models" / "drafter" / "long"), str(workdir / "models" / "corrector"))
    ctx = ArmContext(t, BenchmarkConfig(), ckpts, load_drafter=lambda p: load_drafter(p, t))
    prompt = pd.read_parquet(workdir / "data" / "references.parquet").prompt_ids.iloc[5].tolist()
    ref = generate_ar(t, [prompt], 10, eos_ids=[]).tokens
    from draftlab.decoding import SamplingParams

    for name in ("dcoco", "dcoco-frozen", "dflash-long"):
        assert build_arm(name, ctx).generate([prompt], 10, SamplingParams(), [], None).tokens == ref, name
    from draftlab.errors import DraftlabError

    with pytest.raises(DraftlabError, match=r"^arm dcoco-seeded: .* was trained on the plain drafter"):  # the record
        build_arm("dcoco-seeded", ctx)


def test_stage_fails_with_one_line_without_base_drafter(root, workdir, tmp_path):
    import shutil

    wd = tmp_path / "w"
    shutil.copytree(workdir, wd, ignore=shutil.ignore_patterns("checkpoints", "drafter"))
    r = subprocess.run([sys.executable, "-m", "draftlab.pipeline", "corrector", *STAGE_ARGS], cwd=wd,
                       capture_output=True, text=True)
    assert r.returncode == 2 and "base drafter models/drafter/pretrained of variant dcoco not found" in r.stderr


def test_specopd_dcoco_builds_on_a_state_specopd_changed(target, tmp_path):
    from draftlab.recipes.corrector.recipe import base_state, specopd_bases

    d = DFlashDrafter.from_target(arch_from_target(target, DrafterDesign(S, 1, TAPS, MASK)), target)
    for name, step in (("t0", 0), ("t1", 3)):
        save_drafter(d, tmp_path / name, info={"selected_by": name, "best_step": step, "is_initialisation": step == 0})
    bases, note = specopd_bases(tmp_path)
    assert bases == {"specopd": str(tmp_path / "t1"), "specopd-t1": str(tmp_path / "t1")}
    assert note["specopd"] == "t1" and "initialisation" in note["reason"]
    assert base_state(tmp_path / "t0")["is_initialisation"] is True
    save_drafter(d, tmp_path / "t0", info={"selected_by": "t0", "best_step": 2, "is_initialisation": False})
    bases, note = specopd_bases(tmp_path)  # SpecOPD changed its greedy state: the T=0 arm builds on it
    assert bases["specopd"] == str(tmp_path / "t0") and note == {"specopd": "t0"}
    save_drafter(d, tmp_path / "plain")
    assert base_state(tmp_path / "plain") == {}  # not a SpecOPD state


def test_corrector_labels_greedy_or_the_references_own(target, data, monkeypatch):
    """corrector.labels: the corrector loss supervises the target's greedy tokens (the default) or, with `reference`,
    the reference's own tokens (sampled references: sampled labels), the drafter's own CE untouched; a bad value is
    one line."""
    import draftlab.recipes.corrector.cotrain as cotrain
    from draftlab.errors import ConfigError

    seqs, store, state = data
    seen = []
    real = cotrain.block_targets
    monkeypatch.setattr(cotrain, "block_targets", lambda *a, **k: seen.append(a[3] if len(a) > 3 else k) or real(*a, **k))
    for labels, greedy in (("greedy", True), ("reference", False)):
        c = ccfg()
        c.labels = labels
        d = base_drafter(target, state)
        m = CoTrain(d, build_corrector(c, d, "dcoco"), c.run_settings(pcfg(), 0.0), c, target=target)
        out = m.compute_losses(one_batch(seqs, store, c))
        assert seen[-1] is greedy and out["den_corr"] > 0
    c = ccfg()
    c.labels = "sampled"
    with pytest.raises(ConfigError, match="labels") as e:
        c.check("corrector")
    assert "\n" not in str(e.value)
