"""The verify-width rule (`draftlab.decoding.width.SpanProposal`, the `dflash-seeded-cut` arm, issue 20 item 4):
the cut lengths, greedy output == AR on a tiny seeded drafter (1 and several ragged streams) and with stub
drafters that are always / never sure (the never-sure one: every round a 0-length proposal, one AR step),
losslessness at T=1 (chi-square of the first three tokens, the test_lookup pattern), the arm, and the
one-line errors of `seeded.verify`."""
from __future__ import annotations

import pytest
import torch

from draftlab.decoding import SamplingParams, SpeculativeEngine, generate_ar
from draftlab.decoding.api import DrafterProposal
from draftlab.decoding.width import FULL_SPAN, VERIFY_RULES, SpanProposal, check_verify, cut_lengths, seeded_span
from draftlab.errors import ConfigError, DraftlabError
from draftlab.stats import chi_square_pvalue
from stubs import FixedDrafter, OracleDrafter
from test_lookup import _seeded_drafter, _t1_case, _t1_pvalue
from test_seeded import _loop_prompts, make_seeded

pytestmark = pytest.mark.usefixtures("one_thread")


class Recording:
    """A proposal step recording each round's proposal (tokens [b, W] and extras) around `inner`."""

    def __init__(self, inner):
        self.inner, self.rounds = inner, []

    def needs_draft(self, block_ids, spans=None):  # api.SkipsDrafts, as the inner step says
        return self.inner.needs_draft(block_ids, spans) if hasattr(self.inner, "needs_draft") else True

    def __call__(self, draft, sp, generator=None):
        p = self.inner(draft, sp, generator)
        self.rounds.append((draft.block_ids.clone(), p))
        return p


def test_cut_lengths_and_seeded_span():
    mask = 0
    ids = torch.tensor([[9, 4, 5, 0, 0, 0], [9, 0, 0, 0, 0, 0], [9, 4, 0, 7, 0, 0], [9, 1, 2, 3, 4, 5]])
    span = seeded_span(ids, mask)
    assert span.tolist() == [2, 0, 1, 5]  # leading seeded slots only (slot 3 of row 2 follows a MASK)
    conf = torch.tensor([[0.1, 0.1, 0.9, 0.5, 0.9], [0.9, 0.5, 0.2, 0.9, 0.9], [0.3, 0.9, 0.9, 0.9, 0.9],
                         [0.1] * 5])
    # row 0: seeds 1-2, then 0.9 (run 0.9), 0.5 (run 0.45 >= 0.4), extra 3 -> 0.9 (run 0.405) -> L = 5
    # row 1: no seed: 0.9, 0.45, 0.09 < 0.4 -> L = 2;  row 2: seed 1, then 0.9, 0.81, 0.729 -> L = 4 (extra 3)
    assert cut_lengths(span, conf, 3, 0.4).tolist() == [5, 2, 4, 5]
    assert cut_lengths(span, conf, 0, 0.4).tolist() == [2, 0, 1, 5]  # the seeded span alone
    assert cut_lengths(span, conf, 3, 0.95).tolist() == [2, 0, 1, 5]  # nothing sure: seeds only, else an AR step
    assert cut_lengths(span, conf, 5, 0.0).tolist() == [5, 5, 5, 5]  # min_prob 0: the whole block


@pytest.mark.parametrize("extra,min_prob", [(3, 0.15), (1, 0.5), (0, 0.5), (7, 0.0)])
@pytest.mark.parametrize("streams", [1, 4])
def test_greedy_equals_ar_on_a_seeded_drafter(llama_target, extra, min_prob, streams):
    t = llama_target
    d = make_seeded(t, 5, mask=t.vocab_size - 1)
    prompts = _loop_prompts()[:streams]
    step = Recording(SpanProposal(d.mask_token_id, "span", min(extra, 4), min_prob))
    res = SpeculativeEngine(t, d, step, record_topk=1).generate(prompts, 14, eos_ids=[])
    assert res.tokens == generate_ar(t, prompts, 14, eos_ids=[]).tokens
    for (blocks, p), rec in zip(step.rounds, res.records):
        L, span = p.extras["verify_len"], p.extras["seed_span"]
        assert p.tokens.shape[1] == int(L.max()) and bool((L >= span).all())  # the seeded span is always verified
        assert torch.equal(span, seeded_span(blocks, d.mask_token_id))
        assert torch.equal(rec.extras["verify_len"], L)
        if extra == 0:  # the seeded span alone (0 without a seed: an AR step)
            assert torch.equal(L, span)
        if min_prob == 0.0:  # the whole block: the inner step unchanged
            assert L.tolist() == [4] * len(L)
    assert any(bool((p.extras["seed_span"] > 0).any()) for _, p in step.rounds)  # seeds were there


def test_full_rule_is_the_drafters_own_proposal(llama_target):
    t = llama_target
    d = make_seeded(t, 5, mask=t.vocab_size - 1)
    prompts = _loop_prompts()
    a = SpeculativeEngine(t, d, SpanProposal(d.mask_token_id, "full", 0, 1.0)).generate(prompts, 12, eos_ids=[])
    b = SpeculativeEngine(t, d, DrafterProposal()).generate(prompts, 12, eos_ids=[])
    assert a.tokens == b.tokens and a.accepted == b.accepted


def test_always_and_never_sure_stub_drafters(llama_target):
    t = llama_target
    prompts = _loop_prompts()[:2]
    ar = generate_ar(t, prompts, 10, eos_ids=[]).tokens
    # always sure and right (OracleDrafter: logit 10 on the target's greedy token): every round verifies `extra`
    step, oracle = Recording(SpanProposal(0, "span", 2, 0.5)), OracleDrafter(t, 5, "right")
    oracle.prompts = prompts
    out = SpeculativeEngine(t, oracle, step).generate(prompts, 10, eos_ids=[])
    assert out.tokens == ar
    assert all(p.tokens.shape[1] == 2 and p.extras["verify_len"].tolist() == [2] * len(blocks)
               for blocks, p in step.rounds)
    assert all(a == 2 for s in out.accepted for a in s[:-1])  # each round: 2 accepted + the bonus
    # never sure (flat logits): every round is a 0-length proposal, i.e. one AR step, at T=0 and T=1
    flat = FixedDrafter(torch.zeros(4, t.vocab_size))
    for sp in (SamplingParams(), SamplingParams(temperature=1.0)):
        step = Recording(SpanProposal(0, "span", 3, 0.15))
        out = SpeculativeEngine(t, flat, step, record_topk=1).generate(prompts, 10, sp, eos_ids=[],
                                                                        generator=torch.Generator().manual_seed(0))
        assert all(p.tokens.shape == (len(blocks), 0) for blocks, p in step.rounds)
        assert all(a == 0 for s in out.accepted for a in s) and [len(x) for x in out.tokens] == [10, 10]
        assert all(r.proposals.shape[1] == 0 for r in out.records)
        if sp.greedy:
            assert out.tokens == ar


def test_lossless_at_t1():
    """T=1: with the rule cutting blocks to every width (0 included), the joint law of the first three committed
    tokens equals the target's; the seeded drafter of test_lookup, seeds outside its draft vocabulary."""
    t, sp, prompt, joint, vocab = _t1_case()
    d, _ = _seeded_drafter(t, vocab)
    step = Recording(SpanProposal(d.mask_token_id, "span", 2, 0.5))
    assert _t1_pvalue(SpeculativeEngine(t, d, step), prompt, sp, joint, 31) > 1e-3
    lens = torch.cat([p.extras["verify_len"] for _, p in step.rounds])
    spans = torch.cat([p.extras["seed_span"] for _, p in step.rounds])
    assert set(lens.tolist()) >= {0, 1} and bool((lens > spans).any())  # AR steps, short cuts, drafter slots added


def counting_drafts(d):
    """`d` with its draft passes' logits kept in round order (a list returned beside it)."""
    kept, draft = [], d.draft

    def counted(state, block_ids, positions):
        out = draft(state, block_ids, positions)
        kept.append(out.logits.clone())
        return out

    d.draft = counted
    return d, kept


# prompts after which the tiny target's output meets a seed span that fills the block (S = 5) once, then drafts on
FULL_SPAN_PROMPTS = [[79, 5, 62, 2, 49, 3, 29, 47, 57, 2], [6, 29, 12, 78, 30, 66, 77, 5, 74, 53],
                     [86, 5, 33, 20, 69, 14, 65, 24, 17, 55]]


@pytest.mark.parametrize("batch", [False, True])
def test_seeds_only_rounds_skip_the_draft_pass(llama_target, batch):
    """full_span=seeds: a round whose every block is seeded to its end runs no draft pass and proposes the seeds;
    with a drafter that keeps its seeds (seed bias) the output, the accepted lengths, and every drafted round's
    logits (the context of the skipped round fed late, with the next one's) equal those of the arm drafting every
    round; greedy == AR. One stream at a time (each meets a full span) and the three as one batch (a round skips
    only when every stream's block is full)."""
    t = llama_target
    for prompts in [FULL_SPAN_PROMPTS] if batch else [[p] for p in FULL_SPAN_PROMPTS]:
        runs = {}
        for mode in FULL_SPAN:
            d, kept = counting_drafts(make_seeded(t, 5, mask=t.vocab_size - 1, seed_bias=50.0))
            step = Recording(SpanProposal(d.mask_token_id, "span", 2, 0.3, full_span=mode))
            runs[mode] = (kept, step, SpeculativeEngine(t, d, step, record_topk=3).generate(prompts, 24, eos_ids=[]))
        (cs, ss, seeds), (cd, sd, draft) = runs["seeds"], runs["draft"]
        assert seeds.tokens == draft.tokens == generate_ar(t, prompts, 24, eos_ids=[]).tokens
        assert seeds.accepted == draft.accepted
        full = [bool((p.extras["seed_span"] == 4).all()) for _, p in ss.rounds]
        skipped = [i for i, (_, p) in enumerate(ss.rounds) if not bool(p.extras["drafted"].any())]
        assert skipped == [i for i, f in enumerate(full) if f] and (batch or skipped)
        assert len(cs) == len(ss.rounds) - len(skipped) and len(cd) == len(sd.rounds)
        assert all(bool(p.extras["drafted"].all()) for _, p in sd.rounds)
        drafted = [i for i in range(len(ss.rounds)) if i not in skipped]
        for j, i in enumerate(drafted):  # the same round of both runs drafts the same block from the same context
            assert torch.allclose(cs[j], cd[i], atol=1e-5)
        for i in skipped:
            (blocks, p), rec = ss.rounds[i], seeds.records[i]
            assert torch.equal(p.tokens, blocks[:, 1:]) and p.q is None  # the seeds, unchanged
            assert p.extras["verify_len"].tolist() == [4] * len(blocks)
            assert torch.equal(rec.topk_ids[..., 0], blocks[:, 1:]) and bool((rec.topk_ids[..., 1:] == -1).all())
            assert bool((rec.extras["seed_kept"] == 1).all())
            assert torch.equal(sd.rounds[i][1].tokens, p.tokens)  # what the drafting arm proposed there too


def test_seeds_only_rounds_lossless_at_t1():
    """T=1 with seeds-only rounds among drafted ones (point-mass and q proposals in one stream's rounds): the first
    three committed tokens keep the target's joint law. One stream per run (a batch skips the draft pass only when
    every block is full), so the first token decides whether the first round is seeds-only."""
    t, sp, prompt, joint, vocab = _t1_case()
    d, _ = _seeded_drafter(t, vocab)
    step = Recording(SpanProposal(d.mask_token_id, "span", 2, 0.5, full_span="seeds"))
    eng, g, V, N = SpeculativeEngine(t, d, step), torch.Generator().manual_seed(5), t.vocab_size, 2500
    counts = torch.zeros(V ** 3, dtype=torch.float64)
    for _ in range(N):
        a, b, c = eng.generate([prompt], 3, sp, eos_ids=[], generator=g).tokens[0]
        counts[(a * V + b) * V + c] += 1
    assert chi_square_pvalue(counts, joint.double()) > 1e-3
    drafted = torch.cat([p.extras["drafted"] for _, p in step.rounds])
    assert 0.05 < float((drafted == 0).double().mean()) < 0.95  # both kinds of round, often


def test_cut_arm(llama_target, tmp_path):
    from draftlab.arms.grammar import ARM_TABLE, ArmContext, Checkpoints, build_arm
    from draftlab.config import BenchmarkConfig
    from draftlab.config.seeded import VerifyConfig
    from draftlab.drafter import load_drafter, save_drafter

    t = llama_target
    assert "dflash-seeded-cut" in ARM_TABLE
    folder = save_drafter(make_seeded(t, 5, mask=t.vocab_size - 1), tmp_path / "seeded")
    plain = save_drafter(make_seeded(t, 5, seed_mode="none", mask=t.vocab_size - 1), tmp_path / "plain")

    def ctx(f, verify=None):
        return ArmContext(t, BenchmarkConfig(), Checkpoints("", "", "", "", str(f)), 0, lambda x: load_drafter(x, t),
                          seeded_verify=verify)

    arm = build_arm("dflash-seeded-cut", ctx(folder, VerifyConfig(extra=1, min_prob=0.9)))
    assert isinstance(arm.proposer, SpanProposal) and (arm.proposer.extra, arm.proposer.min_prob) == (1, 0.9)
    assert build_arm("dflash-seeded-cut", ctx(folder)).proposer.extra == VerifyConfig().extra  # the defaults
    prompts = _loop_prompts()[:2]
    assert arm.generate(prompts, 10, SamplingParams(), [], None).tokens == generate_ar(t, prompts, 10, eos_ids=[]).tokens
    with pytest.raises(DraftlabError, match="drafter.seed=none") as e:
        build_arm("dflash-seeded-cut", ctx(plain))
    assert "\n" not in str(e.value)


def test_bad_input_lines(root):
    from draftlab.config import seeded as cs
    from draftlab.params import load_params

    assert cs.VERIFY_RULES == VERIFY_RULES and cs.FULL_SPAN == FULL_SPAN  # the config's copies of the names
    p = load_params(root / "params.yaml")
    assert p.seeded.verify == cs.VerifyConfig()  # conf/config.yaml states the defaults
    for ov, msg in (("seeded.verify.rule=cut", r"^seeded.verify.rule='cut' is not valid; choose one of: full, span$"),
                    ("seeded.verify.extra=-1", r"^seeded.verify.extra=-1 must be >= 0"),
                    ("seeded.verify.extra=8", r"^seeded.verify.extra=8 must lie in 0..7 \(at most S-1 proposals, S = "
                                              r"drafter.block_size=8\)$"),
                    ("seeded.verify.min_prob=1.5", r"^seeded.verify.min_prob=1.5 must lie in \[0, 1\]$"),
                    ("seeded.verify.extra=two", r"^seeded.verify.extra"),
                    ("seeded.verify.full_span=skip", r"^seeded.verify.full_span='skip' is not valid; choose one of: "
                                                     r"seeds, draft$"),
                    ("seeded.verify.bogus=1", r"seeded.verify.bogus")):
        with pytest.raises(ConfigError, match=msg) as e:
            load_params(root / "params.yaml", [ov])
        assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match=r"^benchmark.arms names 'dflash-seeded-cut' but seeded.enabled=false") as e:
        load_params(root / "params.yaml", ["seeded.enabled=false", "seeded.methods=false",
                                           "benchmark.arms=[ar,dflash-seeded-cut]", "benchmark.pairs=[]",
                                           "benchmark.sampled_arms=[]", "benchmark.ablation_arms=[]",
                                           "benchmark.concurrency_arms=[ar]"])
    assert "\n" not in str(e.value)
    for args, msg in ((("cut", 1, 0.5), "seeded.verify.rule='cut'"), (("span", -1, 0.5), "seeded.verify.extra=-1"),
                      (("span", 8, 0.5, 8), r"seeded.verify.extra=8 must lie in 0..7"),
                      (("span", 1, -0.1), "seeded.verify.min_prob=-0.1")):
        with pytest.raises(DraftlabError, match=msg) as e:
            check_verify(*args)
        assert "\n" not in str(e.value)
    with pytest.raises(DraftlabError, match=r"^seeded.verify.full_span='never' is not valid") as e:
        SpanProposal(0, full_span="never")
    assert "\n" not in str(e.value)
