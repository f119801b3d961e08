"""Sequential correctors DSpark / Domino (SPEC §2.4): init = drafter argmax, teacher-forced forward ==
slot-by-slot walk, lossless in the real engine, checkpoints (round trip, one-line errors), co-training
through `cotrain_from_references` and gradient routing (co-training vs frozen backbone). CPU, tiny shapes."""
from __future__ import annotations

import pandas as pd
import pytest
import torch

from draftlab.config import CorrectorConfig, PretrainConfig
from draftlab.errors import DraftlabError
from draftlab.corrector.families import load_corrector
from draftlab.corrector.proposal import CorrectorProposal
from draftlab.corrector.sequential import build_sequential, count_parameters, sequential_arch, teacher_tokens
from draftlab.drafter import DFlashDrafter, save_drafter, DrafterDesign, arch_from_target

KINDS = ["dspark", "dspark-nogate", "domino"]
VD = 50  # draft vocabulary

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py (which also gives the tiny llama `target`)


def make_drafter(target, S=5, vocab_size=VD, seed=0, scale=1.0) -> DFlashDrafter:
    torch.manual_seed(seed)
    vocab = torch.randperm(target.vocab_size - 1, generator=torch.Generator().manual_seed(seed))[:vocab_size].sort().values
    vocab = vocab if vocab_size else None  # 0: the full target vocabulary
    spec = arch_from_target(target, DrafterDesign(S, 1, [0, 2], target.vocab_size - 1, draft_vocab_size=vocab_size))
    d = DFlashDrafter.from_target(spec, target, vocab).eval()
    with torch.no_grad():  # scale > 1: a random drafter with opinions (some acceptances)
        for p in d.parameters():
            p.mul_(scale)
    return d


def make_corrector(kind, drafter, out_std=0.0, seed=1, rank=8):
    torch.manual_seed(seed)
    c = build_sequential(sequential_arch(kind.split("-")[0], drafter, rank, gate=not kind.endswith("nogate")), drafter)
    if out_std:  # past init: the zero-initialised output layer (DSpark W2, Domino U) made non-zero
        with torch.no_grad():
            for p in (c.out.parameters() if hasattr(c, "out") else c.up.parameters()):
                p.normal_(0.0, out_std)
    return c.eval()


def random_block(target, drafter, N, n, seed=0):
    """hidden [N, n, H], logits [N, n, Vd] (the drafter's head on hidden), slot0 [N] target ids."""
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(N, n, target.hidden_size, generator=g)
    return hidden, drafter.logits(hidden), torch.randint(0, target.vocab_size, (N,), generator=g)


# ---- the models ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", [1, 2, 4, 8, 15])
def test_init_reproduces_the_drafter_argmax(target, kind, n):
    d = make_drafter(target)
    c = make_corrector(kind, d)
    hidden, logits, slot0 = random_block(target, d, 6, n, seed=n)
    with torch.no_grad():
        tokens = c.walk(hidden, logits, slot0, d.draft_vocab)
        delta = c(hidden, teacher_tokens(slot0, tokens))
    assert torch.equal(tokens, d.draft_vocab[logits.argmax(-1)])
    assert delta.shape == (6, n, VD) and not delta.any()  # δ ≡ 0 exactly
    # leading dims are batched
    with torch.no_grad():
        t2 = c.walk(hidden.view(2, 3, n, -1), logits.view(2, 3, n, VD), slot0.view(2, 3), d.draft_vocab)
    assert torch.equal(t2.view(6, n), tokens)


@pytest.mark.parametrize("kind", KINDS)
def test_teacher_forced_forward_equals_the_slot_by_slot_walk(target, kind):
    d = make_drafter(target)
    c = make_corrector(kind, d, out_std=2.0)
    hidden, logits, slot0 = random_block(target, d, 8, 6, seed=3)
    with torch.no_grad():
        tokens = c.walk(hidden, logits, slot0, d.draft_vocab)  # [8, 6]
        prev = teacher_tokens(slot0, tokens)  # the walk's own previous tokens
        delta = c(hidden, prev)  # [8, 6, Vd] teacher-forced, all slots at once
        steps, state = [], None
        for p in range(6):
            dp, state = c.step(hidden[:, p], prev[:, p], state)
            steps.append(dp)
    torch.testing.assert_close(torch.stack(steps, 1), delta)
    assert torch.equal(d.draft_vocab[(logits + delta).argmax(-1)], tokens)
    assert not torch.equal(tokens, d.draft_vocab[logits.argmax(-1)])  # the corrector really re-selected
    if kind == "domino":  # ℓ + W_head U s is the drafter's head on h + U s
        with torch.no_grad():
            s, _ = c.gru(c._inputs(prev))
            torch.testing.assert_close(d.logits(hidden + c.up(s)), logits + delta, atol=1e-4, rtol=1e-4)


def test_parameter_counts(target):
    d = make_drafter(target)
    for kind in KINDS:
        c = make_corrector(kind, d)
        assert count_parameters(c.arch)["total"] == c.num_parameters(), kind
    assert "embed" not in "".join(make_corrector("domino", d).state_dict())  # the frozen table is not inside


# ---- the engine --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["dspark", "domino"])
def test_lossless_in_the_engine(target, kind):
    from draftlab.decoding import SamplingParams, SpeculativeEngine, generate_ar

    d = make_drafter(target, S=5, scale=3.0)
    c = make_corrector(kind, d, out_std=3.0)
    prompts = [[5, 9, 17, 3], [44, 2, 8, 61, 7, 30], [12, 90, 4]]
    prop = CorrectorProposal(c)
    res = SpeculativeEngine(target, d, prop, record_topk=4).generate(prompts, 14, eos_ids=[])
    assert res.tokens == generate_ar(target, prompts, 14, eos_ids=[]).tokens  # greedy == AR, token for token
    assert any(bool((r.proposals != r.topk_ids[..., 0]).any()) for r in res.records)  # re-selected some tokens
    # deterministic at T>0 too (point-mass verification); the walk starts from the block's slot 0
    seen = []
    step = lambda draft, sp, g: seen.append(draft.block_ids[:, 0].clone()) or prop(draft, sp, g)  # noqa: E731
    out = SpeculativeEngine(target, d, step).generate(prompts[:1], 6, SamplingParams(temperature=1.0), eos_ids=[],
                                                      generator=torch.Generator().manual_seed(0))
    assert len(out.tokens[0]) == 6 and int(seen[0][0]) == out.tokens[0][0]  # round 1's slot 0 = the first token


# ---- checkpoints -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["dspark", "domino"])
def test_checkpoint_roundtrip_and_errors(target, tmp_path, kind):
    d = make_drafter(target)
    c = make_corrector(kind, d, out_std=1.0)
    hidden, logits, slot0 = random_block(target, d, 4, 4, seed=5)
    c.save(tmp_path / "c", info={"steps": 3})
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == ["config.json", "model.safetensors"]
    back = load_corrector(tmp_path / "c", d)
    assert back.arch == c.arch and not back.training and type(back) is type(c)
    with torch.no_grad():
        walk = lambda m: m.walk(hidden, logits, slot0, d.draft_vocab)  # noqa: E731
        assert torch.equal(walk(back), walk(c))

    def one_line(path, drafter, match):
        with pytest.raises(DraftlabError, match=match) as e:
            load_corrector(path, drafter)
        assert "\n" not in str(e.value)

    one_line(tmp_path / "missing", d, "has no config.json")
    one_line(tmp_path / "c", make_drafter(target, vocab_size=VD + 1), "was trained for a drafter")
    (tmp_path / "c" / "model.safetensors").write_bytes(b"not a safetensors file")
    one_line(tmp_path / "c", d, "c/model.safetensors is not a readable safetensors file")
    (tmp_path / "c" / "config.json").write_text("{ truncated")
    one_line(tmp_path / "c", d, "not valid JSON")


# ---- co-training --------------------------------------------------------------------------------------------------


S = 4


def pcfg(**kw) -> PretrainConfig:
    base = dict(max_steps=10, max_minutes=0, val_every=0, batch_size=3, anchors_per_seq=8, val_anchor_stride=2,
                checkpoint_every=0, topk=4, cache_features=False)
    return PretrainConfig(**{**base, **kw})


def ccfg(**kw) -> CorrectorConfig:
    base = dict(k=4, max_steps=12, max_minutes=0, lr=2e-2, drafter_lr=1e-3, batch_size=3, anchors_per_seq=8,
                val_every=0, seed=0, families={"dspark": {"rank": 8}, "domino": {"rank": 8}, "dflash2": {"rank": 8}}, control=False, kernels="torch")
    return CorrectorConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def refs(target, tmp_path_factory):
    """Greedy references (4 train + 2 held-out) and a random base drafter saved where the stage reads it."""
    from draftlab.decoding import generate_ar

    tmp = tmp_path_factory.mktemp("seq")
    g = torch.Generator().manual_seed(7)
    prompts = [torch.randint(3, 96, (6,), generator=g).tolist() for _ in range(6)]
    resps = generate_ar(target, prompts, 20, eos_ids=[]).tokens
    df = pd.DataFrame({"prompt_id": [str(i) for i in range(6)], "suite": ["x"] * 6, "split": ["train"] * 4 + ["heldout"] * 2,
                       "prompt_ids": prompts, "response_ids": resps})
    save_drafter(make_drafter(target, S=S, scale=2.0), tmp / "pretrained")
    return df, tmp


def seq_loss(target, drafter, corrector, c, batch, frozen=False):
    from draftlab.recipes.corrector.cotrain import CoTrain

    return CoTrain(drafter, corrector, c.run_settings(pcfg(), 0.0), c, frozen=frozen, target=target).compute_losses(batch)


def one_batch(df, c):
    from draftlab.training.data import DrafterDataModule
    from draftlab.training.features import SequenceSet

    torch.manual_seed(0)
    dm = DrafterDataModule(SequenceSet.from_dataframe(df), c.run_settings(pcfg(), 0.0), S, None)
    return next(iter(dm.train_dataloader()))


@pytest.mark.parametrize("kind", ["dspark", "domino"])
@pytest.mark.parametrize("frozen", [False, True])
def test_gradient_routing(target, refs, kind, frozen):
    from draftlab.drafter import load_drafter
    from draftlab.corrector.families import build_corrector

    df, tmp = refs
    c = ccfg()
    d = load_drafter(tmp / "pretrained", target).train()
    corr = build_corrector(c, d, kind)
    out = seq_loss(target, d, corr, c, one_batch(df, c), frozen)
    assert out["den_corr"] > 0 and torch.isfinite(out["corrector"])
    out["corrector"].backward(retain_graph=True)
    zero_init = corr.out.weight if kind == "dspark" else corr.up.weight
    assert zero_init.grad is not None and zero_init.grad.abs().sum() > 0
    dgrads = [p.grad for p in d.parameters()]
    if frozen:
        assert all(g is None for g in dgrads)
        torch.testing.assert_close(out["loss"], c.lambda_corr * out["corrector"])
    else:
        assert d.fc.weight.grad is not None and d.fc.weight.grad.abs().sum() > 0
        torch.testing.assert_close(out["loss"], out["drafter"] + c.lambda_corr * out["corrector"])


def test_cotrain_from_references(target, refs):
    from draftlab.drafter import load_drafter
    from draftlab.corrector.families import build_corrector
    from draftlab.recipes.corrector.recipe import CotrainPaths, cotrain_from_references

    df, tmp = refs
    c = ccfg(variants=["dspark", "domino"])
    out = cotrain_from_references(target, df, c, pcfg(), CotrainPaths({"pretrained": tmp / "pretrained"}, tmp / "work"),
                                  log=lambda m: None)
    assert set(out.variants) == {"dspark", "domino"} and out.report["summary"]["main"] == "dspark"
    batch = one_batch(df, c)
    for v, o in out.variants.items():
        rep = o.report
        for k in ("sim_tau", "sim_tau_uncorrected", "sim_tau_oracle", "headroom_closed", "sim_tau_per_slot",
                  "params_corrector", "params_corrector_breakdown", "steps", "train_minutes", "supervised_transition_frac"):
            assert k in rep, (v, k)
        assert rep["steps"] == 12 and rep["path_rule"] == "greedy" and set(rep["rules"]) == {"greedy"}
        assert rep["params_corrector"] == rep["params_corrector_breakdown"]["total"] == o.corrector.num_parameters()
        assert "proposal_share_of_round" not in rep  # the benchmark's to measure, not training's
        assert rep["sim_tau_uncorrected"] <= rep["sim_tau_oracle"] + 1e-9  # (not sim_tau: δ may lift any token)
        d0 = load_drafter(tmp / "pretrained", target).train()
        with torch.no_grad():
            before = float(seq_loss(target, d0, build_corrector(c, d0, v), c, batch)["corrector"])
            after = float(seq_loss(target, o.drafter.train(), o.corrector.train(), c, batch)["corrector"])
        assert after < before, (v, before, after)


@pytest.mark.parametrize("kind", ["dspark", "domino"])
def test_trained_corrector_beats_the_drafter_argmax(target, refs, kind, tmp_path):
    """Frozen backbone (the drafter's argmax τ is fixed): validated slot by slot, the corrected block's
    simulated τ on the training sample exceeds the uncorrected one."""
    from draftlab.drafter import load_drafter
    from draftlab.corrector.families import build_corrector
    from draftlab.recipes.corrector.cotrain import CoTrainRun, train_corrector
    from draftlab.training.features import SequenceSet

    df, tmp = refs
    c = ccfg(max_steps=80, lr=1e-2)
    d = load_drafter(tmp / "pretrained", target).train()
    r = train_corrector(d, build_corrector(c, d, kind), SequenceSet.from_dataframe(df),
                        CoTrainRun(c.run_settings(pcfg(), 0.0), c, tmp_path / "run", frozen=True, rule="greedy"),
                        target=target, log=lambda m: None)
    m = r.best_metrics["train_sample"]
    assert m["blocks"] > 0 and m["sim_tau"] > m["sim_tau_uncorrected"], m


# ---- the benchmark arms --------------------------------------------------------------------------------------------


def test_arms_lossless_and_missing_checkpoint(target, tmp_path):
    from draftlab.bench import ArmContext, Checkpoints, build_arm
    from draftlab.config import BenchmarkConfig
    from draftlab.decoding import SamplingParams, generate_ar
    from draftlab.drafter import load_drafter

    d = make_drafter(target, S=5, scale=3.0)
    for kind in ("dspark", "domino"):
        save_drafter(d, tmp_path / kind / "drafter")
        make_corrector(kind, d, out_std=3.0).save(tmp_path / kind / "corrector")
    ctx = ArmContext(target, BenchmarkConfig(), Checkpoints("", "", "", str(tmp_path)),
                     load_drafter=lambda p: load_drafter(p, target))
    prompts = [[5, 9, 17, 3], [44, 2, 8]]
    ref = generate_ar(target, prompts, 10, eos_ids=[]).tokens
    for kind in ("domino", "dspark"):
        assert build_arm(kind, ctx).generate(prompts, 10, SamplingParams(), [], None).tokens == ref, kind
    with pytest.raises(DraftlabError, match="arm domino: no corrector checkpoint") as e:
        build_arm("domino", ArmContext(target, BenchmarkConfig(), Checkpoints("", "", "", str(tmp_path / "none"))))
    assert "\n" not in str(e.value)
