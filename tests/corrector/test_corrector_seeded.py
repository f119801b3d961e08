"""The corrector family on a seeded DFlash drafter (SPEC §5, issue 20 item 5): with the seed bias and the seed
column and a draft vocabulary that leaves seeds outside it, the training side's top-K candidates (ids and logits)
of every block equal the engine's `draft(...).topk(K)` on the same committed text; every family's proposal on the
training side's block equals the engine's round (simulated == engine) and greedy output equals AR; every family's
co-training step runs with a finite loss that supervises labels only the seed column expresses; the corrector
stage's simulated τ equals the drafter validation's; Domino's re-applied head is the drafter's seeded head on
h + U s. A plain drafter's blocks are what they were. CPU, tiny shapes."""
from __future__ import annotations

import pytest
import torch

from draftlab.config import CorrectorConfig, PretrainConfig
from draftlab.corrector.base import draft_candidates, drafter_block
from draftlab.corrector.families import build_corrector
from draftlab.corrector.proposal import CorrectorProposal
from draftlab.corrector.sequential import teacher_tokens
from draftlab.corrector.families import variant_table
from draftlab.decoding import SpeculativeEngine, generate_ar
from draftlab.recipes.corrector.evaluate import SetStats, candidates, corrected_paths, eval_batch, eval_block
from test_seeded import TAPS, _loop_prompts, make_seeded, motif_text

pytestmark = pytest.mark.usefixtures("one_thread")

S, K, VD = 5, 4, 10
FAMILIES = [("dcoco", "greedy"), ("dcoco", "globalsum"), ("dcoco", "geometric"), ("nopair", "greedy"),
            ("nocand", "greedy"), ("dspark", "greedy"), ("domino", "greedy"), ("dflash2", "greedy")]
VARIANTS = ["dcoco", "nopair", "nocand", "frozen", "frozen-reach", "dcoco-cond", "dspark", "domino", "dflash2"]


def ccfg(**kw) -> CorrectorConfig:
    base = dict(k=K, families={"dcoco": {"dim": 8, "hidden": 16}, "dspark": {"rank": 8}, "domino": {"rank": 8}, "dflash2": {"rank": 8}}, max_steps=2, max_minutes=0, lr=5e-3, drafter_lr=1e-3,
                batch_size=4, anchors_per_seq=12, val_every=0, seed=0)
    base.update(kw)
    return CorrectorConfig(**base)


def pcfg(**kw) -> PretrainConfig:
    base = dict(max_steps=2, max_minutes=0, lr=3e-3, warmup=0.05, val_every=0, batch_size=4, anchors_per_seq=12,
                val_anchor_stride=1, checkpoint_every=0, topk=K)
    base.update(kw)
    return PretrainConfig(**base)


def seeded(target, column=True, bias=0.3):
    """A tiny seeded drafter with a 10-token draft vocabulary (most seeds lie outside it), the seed column and a
    per-slot (unequal) seed bias; the draft vocabulary's logits flattened so the seed column often wins."""
    vocab = torch.randperm(target.vocab_size - 1, generator=torch.Generator().manual_seed(0))[:VD].sort().values
    d = make_seeded(target, S, vocab, std=0.3, mask=target.vocab_size - 1, seed_logit=column, seed_bias=bias)
    with torch.no_grad():
        if bias:
            d.seed_bias.copy_(torch.linspace(0.1, 0.6, S - 1))
        d.head_weight.mul_(0.05)
    return d


def perturbed(corrector, std=3.0, seed=1):
    """Past init: the zero-initialised output of every family made non-zero, so the corrector re-selects."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name in ("mlp_out", "out", "up", "successor_codebook"):
            mod = getattr(corrector, name, None)
            if mod is not None:
                mod.weight.normal_(0.0, std)
    return corrector.eval()


def training_block(d, target, text: list[int], a: int):
    """The training side's pass at anchor a of `text` (teacher-forced, seeds from x_{<=a}): (batch, hidden
    [1, 1, S, H], seeds [1, 1, n])."""
    ids = torch.tensor([text])
    anchors = torch.tensor([[a]])
    feats = target(ids, taps=TAPS).taps
    seeds = d.train_seeds(ids, anchors)
    with torch.no_grad():
        hidden = d.forward_train(feats, torch.ones(ids.shape, dtype=torch.bool), ids, anchors, seeds)
    return {"ids": ids, "anchors": anchors}, hidden, seeds


def rounds(res, prompts):
    """(row, committed text, anchor) of every round of a generation."""
    for i, rec in enumerate(res.records):
        for row, (b, off) in enumerate(zip(rec.stream.tolist(), rec.offset.tolist())):
            yield i, row, prompts[b] + res.tokens[b], len(prompts[b]) + off


@pytest.mark.parametrize("column,bias", [(True, 0.3), (True, 0.0), (False, 0.3)])
def test_training_candidates_equal_the_engines_topk(llama_target, column, bias):
    t = llama_target
    d = seeded(t, column, bias)
    prompts = _loop_prompts()
    outs, draft = [], d.draft
    d.draft = lambda state, ids, pos: outs.append(draft(state, ids, pos)) or outs[-1]
    res = SpeculativeEngine(t, d, record_topk=K).generate(prompts, 20, eos_ids=[])
    del d.draft
    seeded_rows = outside = 0
    for i, row, text, a in rounds(res, prompts):
        e_ids, e_vals = outs[i].topk(K)  # [b, S, K] the engine's top-K (slot 0 included)
        batch, hidden, seeds = training_block(d, t, text, a)
        ids, vals = candidates(d, hidden, K, seeds)  # [1, 1, n, K]: the corrector stage's row-chunked head
        assert torch.equal(ids[0, 0], e_ids[row, 1:]), (a, ids[0, 0], e_ids[row, 1:])
        torch.testing.assert_close(vals[0, 0], e_vals[row, 1:], atol=1e-4, rtol=1e-4)
        b_ids, b_vals = drafter_block(d, hidden[:, :, 1:], batch["ids"][:, a], seeds).candidates(K)  # co-training's
        assert torch.equal(b_ids[0, 0], ids[0, 0]) and torch.allclose(b_vals[0, 0], vals[0, 0])
        assert torch.equal(eval_block(d, batch, hidden, seeds, K).cand[0][0], ids[0, 0])
        seeded_rows += int((seeds != d.mask_token_id).any())
        outside += int((~torch.isin(ids, d.draft_vocab)).sum())
    assert seeded_rows > 5
    # with the seed column, seeds outside the draft vocabulary compete inside the top-K; without it, none can
    assert (outside > 5) if column else (outside == 0)


@pytest.mark.parametrize("variant,rule", FAMILIES)
def test_every_family_decodes_as_it_is_simulated_and_equals_ar(llama_target, variant, rule):
    t = llama_target
    d = seeded(t)
    corr = perturbed(build_corrector(ccfg(), d, variant), std=0.1 if variant == "dspark" else 3.0)  # DSpark: a
    prompts = _loop_prompts()  # bias on Vd columns only, a large one would bury the seed column
    res = SpeculativeEngine(t, d, CorrectorProposal(corr, rule), record_topk=1).generate(prompts, 20, eos_ids=[])
    assert res.tokens == generate_ar(t, prompts, 20, eos_ids=[]).tokens  # greedy == AR, token for token (fp32)
    assert any(bool((r.proposals != r.topk_ids[..., 0]).any()) for r in res.records)  # the corrector re-selected
    checked = 0
    for i, row, text, a in rounds(res, prompts):
        batch, hidden, seeds = training_block(d, t, text, a)
        block = eval_block(d, batch, hidden, seeds, K)  # what the stage's simulated τ proposes from
        sim = corrected_paths(corr, block, (rule,), 0.75)[rule]  # [1, n]
        assert torch.equal(sim[0], res.records[i].proposals[row]), (variant, a)
        checked += 1
    assert checked > 10
    outside = sum(int((~torch.isin(r.proposals, d.draft_vocab)).sum()) for r in res.records)
    assert outside > 0  # seeds outside the draft vocabulary were proposed through the corrector


def reference_labels(batch: dict) -> dict:
    """The batch with its greedy column cleared: the labels are the reference tokens (`block_targets`), so the
    looping texts' seeds are right over several slots (the tiny target's own greedy text repeats one token,
    whose seeds are one token long)."""
    return {**batch, "greedy": torch.full_like(batch["greedy"], -1)}


@pytest.fixture(scope="module")
def data(llama_target, tmp_path_factory):
    """Looping texts (a motif repeated, some tokens mutated), their feature cache and two batches of a seeded
    drafter's data module (training: carries the seeds; validation), labelled with the reference tokens."""
    from draftlab.training.data import DrafterDataModule
    from draftlab.training.features import FeatureStore, SequenceSet

    t = llama_target
    texts = [motif_text(32, 40, s) for s in range(6)]
    seqs = SequenceSet.from_lists([x[:8] for x in texts], [x[8:] for x in texts], ["train"] * 4 + ["heldout"] * 2)
    store, _ = FeatureStore.open_or_build(tmp_path_factory.mktemp("cs") / "f", t, seqs, TAPS, log=lambda m: None)
    torch.manual_seed(0)
    dm = DrafterDataModule(seqs, ccfg().run_settings(pcfg(), 0.0), S, store, arch=seeded(t).arch)
    return (seqs, store, reference_labels(next(iter(dm.train_dataloader()))),
            reference_labels(next(iter(dm.val_dataloader()[0]))))


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_family_trains_on_the_seeded_drafter(llama_target, data, variant):
    from draftlab.recipes.corrector.cotrain import CoTrain
    from draftlab.training.ce import block_targets

    t, (_, _, batch, _) = llama_target, data
    assert "seeds" in batch
    c, row = ccfg(), variant_table()[variant]
    d = seeded(t).train()
    corr = perturbed(build_corrector(c, d, variant), std=0.5).train()
    m = CoTrain(d, corr, c.run_settings(pcfg(), 0.0), c, frozen=row.frozen, target=t, variant=row)
    out = m.compute_losses(batch)
    assert out["den_corr"] > 0 and torch.isfinite(out["corrector"]) and torch.isfinite(out["loss"])
    out["loss"].backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in corr.parameters() if p.requires_grad)
    if not row.frozen:
        assert d.fc.weight.grad is not None and torch.isfinite(d.fc.weight.grad).all()
    # labels only the seed column expresses (outside the draft vocabulary, equal to the slot's seed) are supervised
    labels, valid = block_targets(batch, m.ce.loss_parts(batch, greedy=True)["greedy"], S)  # [B, A, n]
    col_only = valid & ~torch.isin(labels, d.draft_vocab) & (labels == batch["seeds"])  # [B, A, n]
    mask = out["mask"]
    if mask.shape[-1] == S - 2:  # DCOCO: transitions p, p+1
        col_only = col_only[..., :-1] | col_only[..., 1:]
    assert bool((mask & col_only).any()), variant


@pytest.mark.parametrize("variant", ["dcoco", "domino"])
def test_stage_tau_equals_the_drafters_validation_and_fits(llama_target, data, tmp_path, variant):
    """At init (zero output layer) the stage's corrected and uncorrected τ and top-K coverage equal the seeded
    drafter's own validation on the same batch; a short co-training run (fit driver, validation) completes."""
    from draftlab.recipes.corrector.cotrain import CoTrainRun, train_corrector
    from draftlab.training.ce import DrafterCE
    from draftlab.training.metrics import BlockStats

    t, (seqs, store, _, vbatch) = llama_target, data
    c = ccfg()
    d = seeded(t).eval()
    corr = build_corrector(c, d, variant).eval()
    mod = DrafterCE(d, pcfg(), t)
    own = BlockStats(S - 1, K)
    st = SetStats(S - 1, K, ("greedy",))
    with torch.no_grad():
        mod.validate_batch(vbatch, own)
        eval_batch(d, corr, vbatch, mod.features(vbatch, greedy=True), st, K, ("greedy",), 0.75)
    o, s = own.summary(), st.summary("greedy")
    assert o["sim_tau"] > 1.0  # the seeded drafter copies some right seeds
    assert s["sim_tau_uncorrected"] == o["sim_tau"] == s["sim_tau"]
    assert s[f"top{K}_cov"] == o[f"top{K}_cov"]
    r = train_corrector(seeded(t).train(), build_corrector(c, d, variant).train(), seqs,
                        CoTrainRun(c.run_settings(pcfg(), 0.0), c, tmp_path / variant), store, log=lambda m: None)
    assert r.best_metrics["heldout"]["sim_tau"] >= 1.0


def test_sequential_heads_on_the_seed_column(llama_target):
    """Domino: ℓ + δ is the drafter's seeded head (seed bias and seed column) on h + U s, and the teacher-forced
    δ equals the slot-by-slot one; DSpark adds no bias to the seed column. The labels' columns: the draft index,
    Vd where only the seed column expresses the label, -1 where nothing does."""
    t = llama_target
    d = seeded(t)
    g = torch.Generator().manual_seed(3)
    n, N = S - 1, 6
    hidden = torch.randn(N, n, t.hidden_size, generator=g)
    inside = d.draft_vocab[torch.randint(0, VD, (N, n), generator=g)]
    outside = torch.randint(0, t.vocab_size - 1, (N, n), generator=g)
    pick = torch.randint(0, 3, (N, n), generator=g)
    seeds = torch.where(pick == 0, inside, torch.where(pick == 1, outside, torch.full_like(inside, d.mask_token_id)))
    block = drafter_block(d, hidden, torch.randint(0, t.vocab_size, (N,), generator=g), seeds)
    logits = block.full_logits()  # [N, n, Vd+1]
    torch.testing.assert_close(logits, d.logits(hidden, seeds))
    assert logits.shape[-1] == VD + 1 and block.extra is not None
    dom = perturbed(build_corrector(ccfg(), d, "domino"))
    with torch.no_grad():
        tokens = dom.walk(hidden, logits, block.slot0, d.draft_vocab, block.extra)
        prev = teacher_tokens(block.slot0, tokens)
        delta = dom(hidden, prev, block.extra)  # [N, n, Vd+1]
        steps, state = [], None
        for p in range(n):
            dp, state = dom.step(hidden[:, p], prev[:, p], state, block.extra[:, p])
            steps.append(dp)
        s, _ = dom.gru(dom._inputs(prev))
        reapplied = d.logits(hidden + dom.up(s), seeds)  # the drafter's head (seed bias + column) on h + U s
    torch.testing.assert_close(torch.stack(steps, 1), delta)
    torch.testing.assert_close(reapplied, logits + delta, atol=1e-4, rtol=1e-4)
    assert torch.equal(d.to_target((logits + delta).argmax(-1), seeds), tokens)
    spark = perturbed(build_corrector(ccfg(), d, "dspark"))
    with torch.no_grad():
        sd = spark(hidden, prev, block.extra)
    assert sd.shape == (N, n, VD + 1) and not sd[..., -1].any() and sd[..., :-1].any()
    # label columns
    t2d = torch.full((t.vocab_size,), -1, dtype=torch.long)
    t2d[d.draft_vocab] = torch.arange(VD)
    labels = torch.where(pick == 1, outside, inside)
    lab = block.label_index(labels, t2d)
    want = torch.where(torch.isin(labels, d.draft_vocab), t2d[labels],
                       torch.where((pick == 1) & (labels == seeds), VD, -1))
    assert torch.equal(lab, want) and bool((lab == VD).any())


def test_plain_drafter_blocks_are_unchanged(llama_target):
    """A plain drafter (and a seeded one whose head reads no seeds) ignores seeds it is handed: Vd logits, the
    old candidates bit for bit."""
    t = llama_target
    vocab = torch.arange(3, 3 + VD)
    for mode in ("none", "lookup"):
        d = make_seeded(t, S, vocab, seed_mode=mode, mask=t.vocab_size - 1)
        h = torch.randn(3, S - 1, t.hidden_size, generator=torch.Generator().manual_seed(1))
        seeds = torch.randint(0, t.vocab_size, (3, S - 1), generator=torch.Generator().manual_seed(2))
        block = drafter_block(d, h, None, seeds)
        assert block.seeds is None and block.extra is None
        ids, vals = block.candidates(K)
        o_ids, o_vals = draft_candidates(d.logits(h), K, d.draft_vocab)
        assert torch.equal(ids, o_ids) and torch.equal(vals, o_vals)
        full = candidates(d, torch.cat([h[:, :1], h], 1)[None], K, seeds[None])  # slot 0 prepended
        assert torch.equal(full[0][0], o_ids) and torch.equal(full[1][0], o_vals)


def test_scale_grad_keeps_minus_inf_and_scales_the_gradient():
    """Co-training's per-path gradient weight on the seed column's -inf logits: the value stays x exactly (-inf, not
    NaN, which top-K would rank first), the gradient is weight × the upstream one."""
    from draftlab.corrector.base import scale_grad

    x = torch.tensor([1.5, float("-inf"), -2.0], requires_grad=True)
    for w in (0.1, 0.5):
        y = scale_grad(x, w)
        assert torch.equal(y.detach(), x.detach())
        (g,) = torch.autograd.grad(torch.where(torch.isfinite(y), y, torch.zeros_like(y)).mul(3.0).sum(), x)
        assert torch.allclose(g, torch.tensor([3.0 * w, 0.0, 3.0 * w]))
