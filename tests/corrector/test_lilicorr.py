"""LiLiCorr (docs/algorithms.md "LiLiCorr"): at init the walk is the drafter's top-1 path; the scores are σ·cosines of
one parallel pass (batched = per block, the pair rows read the predecessor, `nopair` does not); the loss (CE over the
K candidates given the true predecessor on the lattice's prefix, hinge, penalty) and its fall on a fixed batch;
checkpoints; greedy decoding = AR and the T=1 joint law through the real engine; bad input in one line. CPU, tiny."""
from __future__ import annotations

import math

import pytest
import torch

from draftlab.config import CorrectorConfig
from draftlab.corrector.base import DraftBlock
from draftlab.corrector.families import build_corrector, load_corrector
from draftlab.corrector.lilicorr import PRESETS, count_parameters, distractor_weights
from draftlab.corrector.proposal import CorrectorProposal
from draftlab.decoding import SamplingParams, SpeculativeEngine, generate_ar
from draftlab.drafter import save_drafter
from draftlab.errors import DraftlabError
from test_sequential import ccfg, make_drafter, one_batch, pcfg, random_block, refs, seq_loss  # noqa: F401 (refs: a fixture)

pytestmark = pytest.mark.usefixtures("one_thread")

SMALL = {"width": 32, "factor_dim": 16, "heads": 4}


def lilicorr(drafter, k=4, variant="lilicorr", seed=1, trained=False, **settings):
    cfg = CorrectorConfig(k=k, families={"lilicorr": {**SMALL, **settings}}, seed=seed)
    c = build_corrector(cfg, drafter, variant)
    if trained:  # past init: the zero-initialised weight of in_head made non-zero
        with torch.no_grad():
            c.in_head.weight.normal_(0.0, 0.5)
    return c.eval()


def block(target, drafter, N=6, n=4, seed=0, anchor=True):
    hidden, logits, slot0 = random_block(target, drafter, N, n, seed)
    taps = drafter.arch.n_taps * target.hidden_size
    a = torch.randn(N, taps, generator=torch.Generator().manual_seed(seed + 1)) if anchor else None
    return DraftBlock(hidden=hidden, slot0=slot0, vocab=drafter.draft_vocab, logits=logits, anchor=a)


def test_init_walks_the_drafters_top1_path(target):
    d = make_drafter(target, S=6)
    c = lilicorr(d)
    b = block(target, d, n=5)
    ids, start, pair = c.scores(b)
    assert torch.equal(start, start[..., :1].expand_as(start))  # every in-vector alike: constant rows
    assert torch.equal(pair, pair[..., :1].expand_as(pair))
    assert torch.equal(c.propose(b).tokens, d.draft_vocab[b.logits.argmax(-1)])
    assert not start.eq(0).all()  # not a dead (all-zero) product: the in-vectors have unit norm


def test_scores_are_one_parallel_pass_of_cosines(target):
    d = make_drafter(target, S=6)
    c = lilicorr(d, trained=True)
    b = block(target, d, N=6, n=5)
    ids, start, pair = c.scores(b)
    assert start.abs().max() <= c.arch.scale + 1e-4 and pair.abs().max() <= c.arch.scale + 1e-4
    # leading dims are batched, and a block's scores do not depend on the other blocks of the batch
    lse = b.logits.logsumexp(-1)
    s2, p2 = c(b.hidden.view(2, 3, 5, -1), ids.view(2, 3, 5, 4), b.cand[1].view(2, 3, 5, 4), lse.view(2, 3, 5),
               b.anchor.view(2, 3, -1))
    s1, p1 = c(b.hidden[2:3], ids[2:3], b.cand[1][2:3], lse[2:3], b.anchor[2:3])
    torch.testing.assert_close(s2.view(6, 4), start)
    torch.testing.assert_close(p2.view(6, 4, 4, 4), pair)
    torch.testing.assert_close(p1[0], pair[2], atol=1e-5, rtol=1e-5)
    # the walk: j_1 = argmax start, j_{s+1} = argmax_j pair_s(j_s, j)
    idx = c.propose(b).extras["path_greedy"]
    for row in range(6):
        j = int(start[row].argmax())
        assert int(idx[row, 0]) == j
        for s in range(4):
            j = int(pair[row, s, j].argmax())
            assert int(idx[row, s + 1]) == j
    assert not torch.equal(c.propose(b).tokens, d.draft_vocab[b.logits.argmax(-1)])  # it really re-selects
    # pair rows depend on the predecessor; without pair factors they do not; the anchor moves the scores
    assert (pair - pair[..., :1, :]).abs().max() > 1e-3
    nop = lilicorr(d, variant="lilicorr-nopair", trained=True)
    _, _, pn = nop.scores(block(target, d, N=6, n=5))
    assert torch.equal(pn, pn[..., :1, :].expand_as(pn))
    s3, _ = c(b.hidden, ids, b.cand[1], lse, None)
    assert (s3 - start).abs().max() > 1e-3


def test_loss_terms_and_prefix_mask(target):
    d = make_drafter(target, S=5)
    c = lilicorr(d, preset="margin")
    b = block(target, d, N=3, n=4, seed=2)
    ids, _ = b.candidates(4)
    labels = ids[..., 0].clone()  # the drafter's top-1 everywhere ...
    labels[1, 2] = -5  # ... but block 1's slot 3 holds a token outside the lattice: slots 3, 4 unsupervised
    valid = torch.ones(3, 4, dtype=torch.bool)
    valid[2, 3] = False
    with pytest.raises(DraftlabError, match="w_pen=0"):  # the penalty needs the target's logits
        c.loss(b, labels, valid, None, 4.0)
    z = torch.randn(3, 9, target.vocab_size)  # three sequences' target logits; block b anchored at position b + 1
    b.teacher = distractor_weights(z, torch.arange(1, 4)[:, None], ids[:, None], labels[:, None])[:, 0]
    for blk, s, j in [(0, 0, 2), (1, 3, 1), (2, 1, 3)]:  # slot s + 1's token sits at anchor + s + 1: z at anchor + s
        zz = z[blk, blk + 1 + s]
        assert float(b.teacher[blk, s, j]) == pytest.approx(max(0.0, float(zz[labels[blk, s].clamp(min=0)] - zz[ids[blk, s, j]])))
    assert (b.teacher >= 0).all() and b.teacher[..., 0].eq(0).where(labels != -5, True).all()
    cl = c.loss(b, labels, valid, None, 4.0)
    expect = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]], dtype=torch.bool)
    assert torch.equal(cl.mask, expect) and float(cl.den) == 9.0
    # at init every row is constant: CE = log K, the hinge = its margin, the penalty = the mean distractor weight
    w_ce, w_margin, w_pen = PRESETS["margin"]
    per_slot = w_ce * math.log(4) + w_margin * 2.0 + w_pen * b.teacher.mean(-1)
    torch.testing.assert_close(cl.num, (per_slot * expect).sum())


def test_loss_falls_on_a_fixed_batch_and_reaches_the_drafter(target):
    d = make_drafter(target, S=5, scale=2.0).train()
    c = lilicorr(d).train()
    hidden, logits, slot0 = random_block(target, d, 16, 4, seed=5)
    hidden.requires_grad_(True)
    g = torch.Generator().manual_seed(6)
    labels = d.draft_vocab[torch.randint(0, 4, (16, 4), generator=g)]  # targets among the top-K mostly
    labels = torch.where(torch.rand(16, 4, generator=g) < 0.8, d.draft_vocab[d.logits(hidden).topk(4).indices[..., 1]],
                         labels)
    valid = torch.ones(16, 4, dtype=torch.bool)
    opt = torch.optim.Adam(c.parameters(), lr=3e-3)
    losses = []
    for step in range(40):
        b = DraftBlock(hidden=hidden, slot0=slot0, vocab=d.draft_vocab, head=d.logits)
        cl = c.loss(b, labels, valid, None, 4.0)
        loss = cl.num / cl.den
        opt.zero_grad()
        loss.backward()
        if step == 0:
            assert hidden.grad is not None and hidden.grad.abs().sum() > 0  # through the features and h_s
        opt.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < 0.5 * losses[0]
    assert count_parameters(c.arch)["total"] == c.num_parameters()


def test_checkpoint_round_trip(target, tmp_path):
    d = make_drafter(target, S=5)
    c = lilicorr(d, trained=True)
    c.save(tmp_path / "c")
    back = load_corrector(tmp_path / "c", d)
    b = block(target, d, n=4)
    assert torch.equal(back.propose(b).tokens, c.propose(b).tokens)
    assert back.arch == c.arch


def test_greedy_equals_ar_in_the_engine(target):
    d = make_drafter(target, S=5, scale=3.0)
    c = lilicorr(d, trained=True)
    prompts = [[5, 9, 17, 3], [44, 2, 8, 61, 7, 30], [12, 90, 4]]
    res = SpeculativeEngine(target, d, CorrectorProposal(c), record_topk=4).generate(prompts, 14, eos_ids=[])
    assert res.tokens == generate_ar(target, prompts, 14, eos_ids=[]).tokens  # greedy == AR, token for token
    assert any(bool((r.proposals != r.topk_ids[..., 0]).any()) for r in res.records)  # it re-selected


def test_the_engines_anchor_is_the_targets_row_before_each_block():
    """Every round hands the proposal step the target's taps at the position before the block's slot 0 (the row that
    predicted it), for ragged streams that finish at different rounds."""
    from conftest import tiny_target
    from draftlab.training.features import target_features

    target = tiny_target("llama", seed=2)  # its third stream's greedy text reaches token 37 (the EOS here) early

    d = make_drafter(target, S=4, scale=3.0)
    prop = CorrectorProposal(lilicorr(d, trained=True))
    seen = []

    def step(draft, sp, g):
        seen.append(draft.anchor.clone())
        return prop(draft, sp, g)

    prompts = [[5, 9, 17, 3], [44, 2, 8, 61, 7, 30], [12, 90, 4]]
    res = SpeculativeEngine(target, d, step, record_topk=4).generate(prompts, 12, eos_ids=[37])
    assert len(seen) == len(res.records) > 2
    assert any(len(r.stream) < 3 for r in res.records)  # streams finished at different rounds (dropped rows)
    for p, out, i in zip(prompts, res.tokens, range(3)):
        text = torch.tensor([p + out])
        taps, _ = target_features(target, text, torch.ones_like(text, dtype=torch.bool), d.target_layer_ids, False)
        rounds = [(r, a) for r, a in zip(res.records, seen) if i in r.stream.tolist()]
        assert rounds
        for r, a in rounds:
            row = r.stream.tolist().index(i)
            torch.testing.assert_close(a[row], taps[0, len(p) + int(r.offset[row]) - 1].to(a.dtype))


def test_t1_joint_law_through_the_engine():
    """T=1: the law of the first two committed tokens is the target's (its proposals are point masses, verified by
    the project's one point-mass rule), on a 6-token target whose drafter proposes several candidates per slot."""
    from conftest import tiny_target
    from draftlab.decoding.verify import process_logits
    from draftlab.stats import chi_square_pvalue

    t = tiny_target("llama", vocab=6, layers=3, seed=3)
    d = make_drafter(t, S=3, vocab_size=0, scale=3.0)
    c = lilicorr(d, k=4, trained=True)
    V, N, prompt, sp = 6, 4000, [1, 2, 3], SamplingParams(temperature=1.0)
    p1 = process_logits(t(torch.tensor([prompt])).logits[0, -1], sp)
    p2 = process_logits(t(torch.tensor([prompt + [a] for a in range(V)])).logits[:, -1], sp)
    joint = (p1[:, None] * p2).flatten().double()
    res = SpeculativeEngine(t, d, CorrectorProposal(c)).generate([prompt] * N, 2, sp, eos_ids=[],
                                                                 generator=torch.Generator().manual_seed(7))
    toks = torch.tensor(res.tokens)
    counts = torch.bincount(toks[:, 0] * V + toks[:, 1], minlength=V * V).double()
    assert chi_square_pvalue(counts, joint) > 1e-3


def test_bad_input_is_one_line(target):
    d = make_drafter(target, S=5)
    for k in (3, 6, 32):
        with pytest.raises(DraftlabError, match="power of two <= 16"):
            lilicorr(d, k=k)
    c = lilicorr(d)
    b = block(target, d)
    with pytest.raises(DraftlabError, match="one rule, greedy"):
        c.propose(b, "globalsum")
    from types import SimpleNamespace

    draft = SimpleNamespace(hidden=None, logits=torch.zeros(2, 5, 50), block_ids=torch.zeros(2, 5, dtype=torch.long),
                            vocab=d.draft_vocab)
    with pytest.raises(DraftlabError, match="hidden states"):
        CorrectorProposal(c)(draft)


def test_k_is_checked_with_the_params(root):
    """A K LiLiCorr cannot take is refused when the params load (`draftlab check`, every stage's start), in one
    line naming the key, only where a LiLiCorr variant is listed (DCOCO takes any K >= 2)."""
    from draftlab.errors import ConfigError
    from draftlab.params import load_params
    from draftlab.pipeline.names import method_names

    with pytest.raises(ConfigError) as e:
        load_params(root / "params.yaml", ["corrector.variants=[dcoco,lilicorr]", "corrector.k=6"], names=method_names())
    assert str(e.value).count("\n") == 0 and str(e.value).startswith("corrector.k=6: LiLiCorr needs K a power of two")
    assert load_params(root / "params.yaml", ["corrector.variants=[dcoco]", "corrector.k=6"], names=method_names()).corrector.k == 6
    assert load_params(root / "params.yaml", ["corrector.variants=[lilicorr-nopair]", "corrector.k=16"],
                       names=method_names()).corrector.k == 16


# ---- co-training ------------------------------------------------------------------------------------------------


def test_cotrain_online_with_the_penalty(target, refs):
    """Both LiLiCorr variants co-train through the recipe with the penalty (the `margin` preset: the target runs
    online), their anchors from the taps; the loss on a fixed batch falls, and the decoded arm is lossless."""
    from draftlab.drafter import load_drafter
    from draftlab.corrector.families import build_corrector
    from draftlab.recipes.corrector.recipe import CotrainPaths, cotrain_from_references

    df, tmp = refs
    c = ccfg(variants=["lilicorr", "lilicorr-frozen"], lr=3e-3, k=16,
             families={"lilicorr": {**SMALL, "preset": "margin"}})
    # a base drafter over the whole vocabulary, pretrained briefly: its K=16 lattices hold the references' tokens
    from draftlab.training.features import SequenceSet
    from draftlab.training.pretrain import train_drafter

    base = make_drafter(target, S=4, vocab_size=0)
    train_drafter(base, SequenceSet.from_dataframe(df), pcfg(max_steps=40, lr=1e-2), tmp / "pre", target=target,
                  log=lambda m: None)
    save_drafter(base, tmp / "full")
    out = cotrain_from_references(target, df, c, pcfg(), CotrainPaths({"pretrained": tmp / "full"}, tmp / "lili"),
                                  log=lambda m: None)
    assert set(out.variants) == {"lilicorr", "lilicorr-frozen"}
    batch = one_batch(df, c)
    for v, o in out.variants.items():
        rep = o.report
        assert rep["steps"] == 12 and set(rep["rules"]) == {"greedy"}
        assert rep["params_corrector"] == o.corrector.num_parameters()
        assert (o.corrector.arch.w_ce, o.corrector.arch.w_margin, o.corrector.arch.w_pen) == PRESETS["margin"]
        d0 = load_drafter(tmp / "full", target).train()
        with torch.no_grad():
            before = seq_loss(target, d0, build_corrector(c, d0, v), c, batch)
            after = seq_loss(target, o.drafter.train(), o.corrector.train(), c, batch)
        assert before["den_corr"] > 0 and float(after["corrector"]) < float(before["corrector"]), v


def test_cached_features_refuse_the_penalty_in_one_line(target, refs, tmp_path):
    from draftlab.recipes.corrector.recipe import CotrainPaths, cotrain_from_references

    df, tmp = refs
    c = ccfg(variants=["lilicorr"], families={"lilicorr": {**SMALL, "preset": "base"}})
    with pytest.raises(DraftlabError, match="preset=nopen") as e:
        cotrain_from_references(target, df, c, pcfg(cache_features=True),
                                CotrainPaths({"pretrained": tmp / "pretrained"}, tmp_path),
                                log=lambda m: None)
    assert "\n" not in str(e.value)


# ---- trees ranked by LiLiCorr -------------------------------------------------------------------------------------


@pytest.mark.parametrize("nodes", [8, 64])
def test_greedy_lilicorr_ranked_tree_equals_ar(target, nodes):
    """Its start row ranks slot 1's candidates and its pair rows (one per parent) the rest; lossless at budgets 8, 64."""
    from draftlab.corrector.tree import PairTreeProposal

    d = make_drafter(target, S=5, scale=3.0)
    c = lilicorr(d, trained=True)
    prop = PairTreeProposal(c, nodes)
    seen, lattice = [], prop.lattice
    prop.lattice = lambda draft: seen.append(lattice(draft)) or seen[-1]  # the rounds' lattices, recorded

    g = torch.Generator().manual_seed(2)
    prompts = [torch.randint(1, target.vocab_size, (n,), generator=g).tolist() for n in (6, 11, 4)]
    res = SpeculativeEngine(target, d, prop).generate(prompts, 14, eos_ids=[])
    assert res.tokens == generate_ar(target, prompts, 14, eos_ids=[]).tokens
    lat = seen[0]
    assert not torch.allclose(lat.lp[:, 1:, :1], lat.lp[:, 1:, 1:2])  # two parents rank their children differently
