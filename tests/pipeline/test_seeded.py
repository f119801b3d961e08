"""Seeded block drafting (SPEC §5): the one seeding routine (teacher-forced == incremental == a brute-force
reading of the definition), no leak from tokens after the anchor, the engine's blocks carry the training
path's seeds, simulated τ == engine τ per round at T=0, greedy output == AR, a plain drafter unchanged,
the architecture record (old config.json = plain), the arm, and the bad-input lines."""
from __future__ import annotations

import json

import pytest
import torch

from conftest import tiny_target
from draftlab.bench.simulate import _infer_path, _train_path, simulated_tau
from draftlab.decoding import SamplingParams, SpeculativeEngine, generate_ar
from draftlab.decoding.verify import greedy_accept_length
from draftlab.drafter import DFlashDrafter, DrafterDesign, arch_from_target, load_drafter, save_drafter
from draftlab.drafter.masks import block_input_ids
from draftlab.errors import DraftlabError
from draftlab.ngram import StreamSeeds, sequence_seeds, seed_starts

pytestmark = pytest.mark.usefixtures("one_thread")

TAPS = [0, 2]


def brute_seed(text: list[int], a: int, n: int, max_ngram: int, min_match: int, mask: int) -> list[int]:
    """SPEC §5 read literally: the tokens after the most recent earlier occurrence of the longest suffix of
    x_{<=a} (max_ngram down to min_match), cut to n and to x_{<=a}; MASK-filled."""
    x = text[:a + 1]
    for m in range(min(max_ngram, len(x)), min_match - 1, -1):
        suf = x[len(x) - m:]
        for j in range(len(x) - m - 1, -1, -1):  # j + m <= a: the occurrence has a following token
            if x[j:j + m] == suf:
                return (x[j + m:j + m + n] + [mask] * n)[:n]
    return [mask] * n


def motif_text(L: int, vocab: int, seed: int) -> list[int]:
    """A looping text: a random motif of 4..7 tokens repeated, each token mutated with probability 0.1."""
    g = torch.Generator().manual_seed(seed)
    motif = torch.randint(2, vocab, (int(torch.randint(4, 8, (), generator=g)),), generator=g).tolist()
    out = [motif[i % len(motif)] for i in range(L)]
    return [int(torch.randint(2, vocab, (), generator=g)) if torch.rand((), generator=g) < 0.1 else t for t in out]


def looping_text(L: int, vocab: int, seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    base = torch.randint(2, vocab, (L,), generator=g).tolist()
    for i in range(6, L):  # copy spans of earlier text now and then: repeats of every length
        if torch.rand((), generator=g) < 0.35:
            base[i] = base[i - int(torch.randint(2, 6, (), generator=g))]
    return base


@pytest.mark.parametrize("max_ngram,min_match", [(3, 1), (2, 2), (4, 2)])
def test_teacher_forced_seeds_equal_incremental_and_the_definition(max_ngram, min_match):
    n, mask, L = 4, 1, 60
    texts = [looping_text(L, 9, s) for s in range(3)]
    ids = torch.tensor(texts)
    anchors = torch.arange(L)[None].expand(3, L)
    tf = sequence_seeds(ids, anchors, n, mask, max_ngram, min_match)  # [3, L, n]
    inc = StreamSeeds(max_ngram, min_match)
    inc.start([t[:1] for t in texts], ids[:, 1])  # streams start at anchor 1, then commit one token a round
    seen = 0
    for a in range(1, L):
        if a > 1:
            inc.extend(ids[:, a:a + 1], torch.ones(3, dtype=torch.long))
        got = inc.seeds(3, n, mask)  # [3, n]
        assert torch.equal(got, tf[:, a]), a
        for b in range(3):
            assert got[b].tolist() == brute_seed(texts[b], a, n, max_ngram, min_match, mask)
        seen += int((got != mask).any(-1).sum())
    assert seen > L  # most anchors were seeded: the test compared real seeds, not only MASK
    # ragged commits (several tokens a round) and dropped streams leave the same seeds
    inc = StreamSeeds(max_ngram, min_match)
    inc.start([texts[0][:4], texts[1][:9]], torch.tensor([texts[0][4], texts[1][9]]))
    inc.extend(torch.tensor([texts[0][5:8], texts[1][10:13]]), torch.tensor([3, 1]))
    assert inc.seeds(2, n, mask)[0].tolist() == tf[0, 7].tolist()
    assert inc.seeds(2, n, mask)[1].tolist() == tf[1, 10].tolist()
    inc.drop_streams(torch.tensor([False, True]))
    assert inc.seeds(1, n, mask)[0].tolist() == tf[1, 10].tolist()
    assert seed_starts([5, 5], 3, 1) == [-1, 1]  # x_1 = 5 follows the earlier 5: the seed starts at index 1


def make_seeded(target, S=5, vocab=None, seed_mode="lookup", std=0.2, seed=0, mask=1, seed_logit=False, seed_bias=0.0):
    arch = arch_from_target(target, DrafterDesign(S, 1, TAPS, mask, 0 if vocab is None else len(vocab), seed=seed_mode,
                            seed_logit=seed_logit, seed_bias=seed_bias))
    torch.manual_seed(seed)
    d = DFlashDrafter.from_target(arch, target, vocab)
    with torch.no_grad():  # larger weights than the init, so the drafter has opinions and leaks would show
        for m in d.modules():
            if isinstance(m, torch.nn.Linear):
                m.weight.normal_(0, std)
    return d.eval()


def test_no_leak_from_tokens_after_the_anchor(target):
    d = make_seeded(target, S=4)
    L = 40
    ids = torch.tensor([looping_text(L, 12, 7)])
    feats = target(ids, taps=TAPS).taps
    valid = torch.ones(1, L, dtype=torch.bool)
    anchors = torch.tensor([[10, 20, 30]])
    seeds = d.train_seeds(ids, anchors)  # [1, 3, n]
    assert (seeds != d.mask_token_id).any()
    with torch.no_grad():
        base = d.logits(d.forward_train(feats, valid, ids, anchors))[0]  # [A, S, V]
    for i, a in enumerate(anchors[0].tolist()):
        ids2 = ids.clone()
        ids2[0, a + 1:] = torch.randint(2, 12, (L - a - 1,), generator=torch.Generator().manual_seed(a))
        feats2 = feats.clone()
        feats2[0, a:] += torch.randn_like(feats2[0, a:])
        assert torch.equal(d.train_seeds(ids2, anchors)[0, i], seeds[0, i])
        with torch.no_grad():
            out = d.logits(d.forward_train(feats2, valid, ids2, anchors))[0]
        assert torch.equal(out[i], base[i])
    # the seeds are inputs: a block seeded differently drafts differently (the seeds are really read)
    plain = block_input_ids(ids, anchors, 4, d.mask_token_id)
    assert not torch.equal(plain, block_input_ids(ids, anchors, 4, d.mask_token_id, seeds))
    with torch.no_grad():
        unseeded = d.logits(d.forward_train(feats, valid, ids, anchors, torch.full_like(seeds, d.mask_token_id)))[0]
    assert (unseeded - base).abs().max() > 1e-4


def _loop_prompts():
    return [[5, 9, 17, 5, 9, 17, 5, 9, 30], [44, 12, 44, 12], [12, 90, 4, 61, 12, 90], [3, 17, 42, 8, 61, 25, 90, 11]]


@pytest.mark.parametrize("vocab_size,seed_logit,seed_bias", [(0, False, 0.0), (40, False, 0.0), (10, True, 0.0),
                                                             (0, False, 0.3), (10, True, 0.3)])
def test_engine_seeds_equal_training_seeds_and_tau_agrees(llama_target, vocab_size, seed_logit, seed_bias):
    """Every round's block carries the training routine's seeds of the final text at that anchor; the
    round's accepted length equals simulated τ's (train and infer paths) there; greedy output == AR.
    With the seed column (a 10-token draft vocabulary) the drafter also proposes seeds outside it; with a
    seed bias (`drafter.seed_bias`, per slot: set unequal here) the engine's head adds the training path's bias."""
    t = llama_target
    vocab = None
    if vocab_size:
        vocab = torch.randperm(t.vocab_size - 1, generator=torch.Generator().manual_seed(0))[:vocab_size].sort().values
    S = 5
    d = make_seeded(t, S, vocab, std=0.3, mask=t.vocab_size - 1, seed_logit=seed_logit, seed_bias=seed_bias)
    if seed_bias:  # unequal per slot: a slot mix-up between the paths would show
        with torch.no_grad():
            d.seed_bias.copy_(torch.linspace(0.1, 0.6, S - 1))
    if seed_logit:  # flatten the draft vocabulary's logits so the seed column often wins (it reads the full head)
        d.head_weight.mul_(0.05)
    prompts = _loop_prompts()
    ref = generate_ar(t, prompts, 24, eos_ids=[]).tokens
    blocks = []
    draft = d.draft

    def spy(state, block_ids, positions):
        blocks.append(block_ids.clone())
        return draft(state, block_ids, positions)

    d.draft = spy
    res = SpeculativeEngine(t, d, record_topk=1, ).generate(prompts, 24, eos_ids=[])
    del d.draft
    assert res.tokens == ref
    assert len(blocks) == len(res.records)
    seeded = checked = 0
    for blk, rec in zip(blocks, res.records):
        for row, (b, off) in enumerate(zip(rec.stream.tolist(), rec.offset.tolist())):
            text = prompts[b] + res.tokens[b]
            a = len(prompts[b]) + off  # slot 0's index in the committed text
            assert int(blk[row, 0]) == text[a]
            tf = sequence_seeds(torch.tensor([text]), torch.tensor([[a]]), S - 1, d.mask_token_id, 3, 1)[0, 0]
            assert torch.equal(blk[row, 1:], tf), (b, a)
            seeded += int((tf != d.mask_token_id).any())
            if a + S <= len(text):  # a full block of labels: simulated τ at this anchor == the round's
                ids = torch.tensor([text])
                feats = t(ids, taps=TAPS).taps
                labels = ids[0, a + 1:a + S][None]
                for path in (_train_path, _infer_path):
                    pred = path(d, feats, ids, torch.tensor([a]))
                    assert torch.equal(pred[0], rec.proposals[row]), (path.__name__, b, a)
                    assert int(greedy_accept_length(pred, labels)[0]) == int(rec.accepted[row])
                checked += 1
    assert seeded > 3 and checked > 5
    if vocab is not None:
        outside = sum(int((~torch.isin(r.proposals, vocab)).sum()) for r in res.records)
        assert (outside > 0) == seed_logit  # only the seed column proposes tokens outside the draft vocabulary
    sim = simulated_tau(t, d, [(p, o) for p, o in zip(prompts, res.tokens)], stride=1)
    assert abs(sim["train"] - sim["infer"]) < 1e-9


def test_plain_drafter_builds_plain_blocks_bit_for_bit(llama_target):
    t = llama_target
    d = make_seeded(t, 5, seed_mode="none", mask=t.vocab_size - 1)
    st = d.new_state(2)
    assert st.seeds is None
    last = torch.tensor([7, 9])
    assert torch.equal(d.block_input(st, last), torch.cat([last[:, None], torch.full((2, 4), t.vocab_size - 1)], 1))
    ids = torch.tensor([looping_text(30, 12, 1)])
    anchors = torch.tensor([[8, 16]])
    feats = t(ids, taps=TAPS).taps
    valid = torch.ones(1, 30, dtype=torch.bool)
    seeds = sequence_seeds(ids, anchors, 4, t.vocab_size - 1, 3, 1)
    with torch.no_grad():  # a plain drafter ignores any seeds it is handed
        assert torch.equal(d.forward_train(feats, valid, ids, anchors), d.forward_train(feats, valid, ids, anchors, seeds))


def test_architecture_record_and_paths_that_cannot_seed(target, tmp_path):
    d = make_seeded(target, 4)
    path = save_drafter(d, tmp_path / "seeded")
    cfg = json.loads((path / "config.json").read_text())
    assert (cfg["seed"], cfg["seed_max_ngram"], cfg["seed_min_match"]) == ("lookup", 3, 1)
    assert load_drafter(path, target).arch.seeded
    # an older config.json without the fields loads as a plain drafter
    plain = save_drafter(make_seeded(target, 4, seed_mode="none"), tmp_path / "plain")
    old = {k: v for k, v in json.loads((plain / "config.json").read_text()).items() if not k.startswith("seed")}
    (plain / "config.json").write_text(json.dumps(old))
    assert load_drafter(plain, target).arch.seed == "none"
    # a config.json with a bad seed: one line naming the file and the key
    (plain / "config.json").write_text(json.dumps({**old, "seed": "bogus"}))
    with pytest.raises(DraftlabError, match="drafter.seed='bogus'") as e:
        load_drafter(plain, target)
    assert "\n" not in str(e.value) and "config.json" in str(e.value)
    # the authors' format builds [last, MASK, ...]: export and the dflash-ref peer refuse a seeded drafter
    from draftlab.drafter.refformat import export_reference, reference_config

    for call in (lambda: export_reference(d, tmp_path / "ref"), lambda: reference_config(d.arch)):
        with pytest.raises(DraftlabError, match="drafter.seed='lookup'") as e:
            call()
        assert "\n" not in str(e.value)


def test_seeded_arm(llama_target, tmp_path):
    from draftlab.arms.grammar import ARM_TABLE, ArmContext, Checkpoints, build_arm
    from draftlab.config import BenchmarkConfig
    from draftlab.pipeline.layout import SEEDED_DRAFTER, checkpoints

    t = llama_target
    assert "dflash-seeded" in ARM_TABLE and checkpoints("models/drafter/pretrained").seeded_drafter == SEEDED_DRAFTER
    seeded = save_drafter(make_seeded(t, 5, mask=t.vocab_size - 1), tmp_path / "seeded")
    plain = save_drafter(make_seeded(t, 5, seed_mode="none", mask=t.vocab_size - 1), tmp_path / "plain")

    def ctx(folder):
        return ArmContext(t, BenchmarkConfig(), Checkpoints("", "", "", "", str(folder)), 0,
                          lambda f: load_drafter(f, t))

    arm = build_arm("dflash-seeded", ctx(seeded))
    prompts = _loop_prompts()[:2]
    assert arm.generate(prompts, 10, SamplingParams(), [], None).tokens == generate_ar(t, prompts, 10, eos_ids=[]).tokens
    for folder, msg in ((tmp_path / "missing", "run the pretrain_drafter stage"), (plain, "drafter.seed=none"),
                        ("", "no seeded drafter folder")):
        with pytest.raises(DraftlabError, match=msg) as e:
            build_arm("dflash-seeded", ctx(folder))
        assert "\n" not in str(e.value)


def test_bad_input_lines(target, root):
    from draftlab.params import load_params

    for ov, key in (("drafter.seed=bogus", "drafter.seed='bogus' is not valid; choose one of: none, lookup"),
                    ("drafter.seed_max_ngram=0", "drafter.seed_max_ngram=0 must be >= 1"),
                    ("drafter.seed_min_match=4", r"drafter.seed_min_match=4 must lie in 1..drafter.seed_max_ngram=3"),
                    ("drafter.seed_min_match=0", "drafter.seed_min_match=0"),
                    ("drafter.seed_logit=true", "drafter.seed_logit=true needs seeds")):
        with pytest.raises(DraftlabError, match=key) as e:
            load_params(root / "params.yaml", [ov])
        assert "\n" not in str(e.value)
    assert load_params(root / "params.yaml", ["drafter.seed=lookup"]).drafter.seed == "lookup"
    assert load_params(root / "params.yaml").drafter.seed == "none"
    for kw, key in ((dict(seed="bogus"), "drafter.seed="), (dict(seed="lookup", seed_max_ngram=0), "seed_max_ngram"),
                    (dict(seed="lookup", seed_min_match=5), "seed_min_match"),
                    (dict(seed_logit=True), "drafter.seed_logit=true needs seeds")):
        with pytest.raises(DraftlabError, match=key) as e:
            arch_from_target(target, DrafterDesign(4, 1, TAPS, 1, **kw))
        assert "\n" not in str(e.value)
    # a seeded state that nobody drives (start / extend) is a one-line error, not silent MASK blocks
    d = make_seeded(target, 4)
    with pytest.raises(DraftlabError, match="tracks the text of 0 streams") as e:
        d.block_input(d.new_state(2), torch.tensor([3, 4]))
    assert "\n" not in str(e.value)


def test_training_batches_carry_the_seeds_and_the_recipe_trains_seeded(target, tmp_path):
    """The data path's cached per-sequence pass gives the drafter's own teacher-forced seeds for every
    batch (training and validation); the pretrain recipe with drafter.seed=lookup writes a seeded drafter."""
    import pandas as pd

    from draftlab.config import DrafterConfig, PretrainConfig
    from draftlab.recipes.pretrain.recipe import pretrain_from_references
    from draftlab.training.data import DrafterDataModule
    from draftlab.training.features import SequenceSet

    texts = [looping_text(36, 30, s) for s in range(6)]
    prompts, resps = [x[:6] for x in texts], [x[6:] for x in texts]
    splits = ["train"] * 4 + ["heldout"] * 2
    seqs = SequenceSet.from_lists(prompts, resps, splits)
    c = PretrainConfig(max_steps=3, max_minutes=0, val_every=0, batch_size=3, anchors_per_seq=8, val_anchor_stride=1,
                       checkpoint_every=0, topk=4)
    d = make_seeded(target, 4)
    dm = DrafterDataModule(seqs, c, 4, None, train_sample=2, arch=d.arch)
    batches = [next(iter(dm.train_dataloader())), next(iter(dm.val_dataloader()[0]))]
    for b in batches:
        want = d.train_seeds(b["ids"], b["anchors"], b["seq_len"])
        assert torch.equal(b["seeds"], want) and (want != d.mask_token_id).any()
    assert "seeds" not in next(iter(DrafterDataModule(seqs, c, 4, None, arch=make_seeded(
        target, 4, seed_mode="none").arch).train_dataloader()))  # a plain drafter's batches are as before
    df = pd.DataFrame({"prompt_id": [str(i) for i in range(6)], "suite": ["sharegpt"] * 6, "split": splits,
                       "prompt_ids": prompts, "response_ids": resps})
    dcfg = DrafterConfig(block_size=4, num_layers=1, target_layer_ids=TAPS, mask_token_id=1, draft_vocab_size=0,
                         seed="lookup", seed_max_ngram=2)
    out = pretrain_from_references(target, df, dcfg, c, tmp_path / "work", log=lambda m: None)
    assert out.drafter.arch.seeded and out.drafter.arch.seed_max_ngram == 2 and out.report["steps"] == 3
    assert load_drafter(save_drafter(out.drafter, tmp_path / "seeded"), target).arch.seed == "lookup"


def test_seed_column_makes_seeds_outside_the_draft_vocabulary_learnable(target, tmp_path):
    """A draft vocabulary that shares no token with the text: the seeded drafter can never be right (τ = 1
    exactly), the same drafter with the seed column learns to copy its seeds (τ well above 1). Plain and
    seeded drafters without the column keep Vd logits; the column's logit is the seed's full-head logit."""
    from draftlab.config import PretrainConfig
    from draftlab.training.features import FeatureStore, SequenceSet
    from draftlab.training.pretrain import train_drafter

    texts = [motif_text(40, 30, s) for s in range(8)]
    seqs = SequenceSet.from_lists([x[:6] for x in texts], [x[6:] for x in texts], ["train"] * 6 + ["heldout"] * 2)
    store, _ = FeatureStore.open_or_build(tmp_path / "f", target, seqs, TAPS, log=lambda m: None)
    vocab = torch.arange(40, 48)  # no text token (2..29) is in it
    c = PretrainConfig(max_steps=30, max_minutes=0, lr=3e-3, warmup=0.05, val_every=0, batch_size=3, anchors_per_seq=16,
                       val_anchor_stride=1, checkpoint_every=0, topk=4)
    tau = {}
    for col in (False, True):
        d = make_seeded(target, 4, vocab, std=0.02, seed_logit=col)
        r = train_drafter(d, seqs, c, tmp_path / f"run{col}", store=store, val_labels="reference", log=lambda m: None)
        tau[col] = r.best_metrics["heldout"]["sim_tau"]
    assert tau[False] == 1.0 and tau[True] > 1.5, tau
    d = make_seeded(target, 4, vocab, seed_logit=True)
    h = torch.randn(3, target.hidden_size)
    seeds = torch.tensor([5, 41, d.mask_token_id])  # outside the vocabulary, inside it, MASK
    lg = d.logits(h, seeds)  # [3, Vd+1]
    assert lg.shape == (3, 9) and torch.isinf(lg[1:, -1]).all()
    assert torch.allclose(lg[0, -1], target.lm_head(h[:1].to(target.lm_head.weight.dtype))[0, 5].float(), atol=1e-4)
    assert d.to_target(torch.tensor([8, 0]), torch.tensor([5, 5])).tolist() == [5, 40]
    assert make_seeded(target, 4, vocab).logits(h, seeds).shape == (3, 8)  # no column without seed_logit
