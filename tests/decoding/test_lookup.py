"""Prompt lookup (`pld`) and the lookup hybrid (`dflash-pld`): the n-gram index, greedy output identical to
AR (1 and several ragged streams; prompts with no repeated n-gram and prompts of one repeated token), the
point-mass rule at T=1 through the engine (chi-square; also seeded drafters whose seeds lie outside the
draft vocabulary, with and without the seed column), per-round source records, no drafter work for
`pld`, and the bad-input lines."""
from __future__ import annotations

import pytest
import torch

from conftest import tiny_target
from draftlab.stats import chi_square_pvalue
from draftlab.decoding import SamplingParams, SpeculativeEngine, generate_ar
from draftlab.decoding.lookup import LookupHybrid, NgramIndex, PromptLookup
from draftlab.decoding.verify import process_logits
from draftlab.errors import DraftlabError
from stubs import FixedDrafter, OracleDrafter

PROMPTS = {
    "distinct": [[3, 17, 42, 8, 61, 25, 90, 11]],  # no repeated n-gram
    "one-token": [[7] * 12],  # one token repeated
    "ragged": [[5, 9, 17, 5, 9, 17, 5, 9], [44] * 5, [12, 90, 4], [3, 17, 42, 8, 61, 25, 90, 11, 2, 71]],
}


def test_ngram_index_finds_the_most_recent_longest_match():
    idx = NgramIndex([1, 2, 3, 9, 1, 2, 3], max_ngram=3)
    assert idx.lookup(4) == ([9, 1, 2, 3], 3)
    idx = NgramIndex([5, 7, 5, 8, 5], max_ngram=3)
    assert idx.lookup(3) == ([8, 5], 1)  # the later occurrence of 5, not the first; runs into the suffix
    idx.extend([7])  # ... 5 7: the bigram (5, 7) occurred at 0
    assert idx.lookup(2) == ([5, 8], 2)
    assert NgramIndex([1, 2, 3], 3).lookup(5) == ([], 0)
    assert NgramIndex([4, 4, 4], 2).lookup(5) == ([4], 2)
    assert NgramIndex([1, 2, 9, 2], 3).lookup(5, min_m=2) == ([], 0)  # only a 1-gram matches


def _pld(t, S=5, **kw):
    return SpeculativeEngine(t, None, PromptLookup(S, **kw))


@pytest.mark.parametrize("case", list(PROMPTS))
def test_pld_greedy_equals_ar(llama_target, case):
    t = llama_target
    prompts = PROMPTS[case]
    ref = generate_ar(t, prompts, 18, eos_ids=[]).tokens
    res = _pld(t, S=5, max_ngram=3, num_tokens=4).generate(prompts, 18, eos_ids=[])
    assert res.tokens == ref
    if case == "one-token":  # a looping stream: lookup gets whole blocks accepted
        assert max(res.accepted[0]) >= 1


@pytest.mark.parametrize("mode", ["switch", "splice"])
@pytest.mark.parametrize("case", ["one-token", "ragged"])
def test_hybrid_greedy_equals_ar_and_records_sources(llama_target, mode, case):
    t = llama_target
    prompts = PROMPTS[case]
    ref = generate_ar(t, prompts, 16, eos_ids=[]).tokens
    drafter = OracleDrafter(t, block_size=5, mode="wrong", seed=1)  # never right: only the lookup can be
    drafter.prompts = prompts
    step = LookupHybrid(PromptLookup(5, 3, 4), t.vocab_size, None, mode, min_match=1)
    res = SpeculativeEngine(t, drafter, step, record_topk=2).generate(prompts, 16, eos_ids=[])
    assert res.tokens == ref
    look = torch.cat([r.extras["lookup_len"] for r in res.records])
    acc = torch.cat([r.accepted for r in res.records])
    assert bool((look > 0).any())
    assert bool((acc[look == 0] == 0).all())  # the always-wrong drafter's rounds accept nothing
    if mode == "splice":  # lookup slots first, the drafter's after
        for r in res.records:
            assert torch.equal(r.extras["lookup_slots"], r.extras["lookup_len"])


def test_hybrid_min_match_leaves_short_matches_to_the_drafter(llama_target):
    t = llama_target
    prompts = [[3, 17, 42, 8, 61, 25, 90, 11]]
    drafter = OracleDrafter(t, block_size=4, mode="right")
    drafter.prompts = prompts
    step = LookupHybrid(PromptLookup(4, 3, 3), t.vocab_size, None, "switch", min_match=3)
    res = SpeculativeEngine(t, drafter, step, record_topk=2).generate(prompts, 10, eos_ids=[])
    match = torch.cat([r.extras["match_len"] for r in res.records])
    assert bool(((match == 0) | (match >= 3)).all())
    assert res.tokens == generate_ar(t, prompts, 10, eos_ids=[]).tokens


def _t1_case():
    """The T=1 setting of the chi-square tests: a 6-token target, a looping prompt, the exact joint law of
    the first three committed tokens [V^3], a draft vocabulary [0, 2, 3, 5]."""
    t = tiny_target("llama", vocab=6, layers=2, seed=3)
    V, sp = t.vocab_size, SamplingParams(temperature=1.0)
    prompt = [1, 2, 3, 1, 2, 3, 1, 2]  # the lookup proposes 3, 1, 2 ... at the first round
    p1 = process_logits(t(torch.tensor([prompt])).logits[0, -1], sp)  # [V]
    p2 = process_logits(t(torch.tensor([prompt + [a] for a in range(V)])).logits[:, -1], sp)  # [V, V]
    p3 = process_logits(t(torch.tensor([prompt + [a, b] for a in range(V) for b in range(V)])).logits[:, -1], sp)
    joint = (p1[:, None, None] * p2[:, :, None] * p3.view(V, V, V)).flatten()
    return t, sp, prompt, joint, torch.tensor([0, 2, 3, 5])


def _t1_pvalue(eng, prompt, sp, joint, seed: int, N: int = 6000) -> float:
    """Chi-square p-value of the engine's first three committed tokens against `joint`; proposals must have
    been accepted (the rule was exercised)."""
    V = round(joint.numel() ** (1 / 3))
    res = eng.generate([prompt] * N, 3, sp, eos_ids=[], generator=torch.Generator().manual_seed(seed))
    toks = torch.tensor(res.tokens)
    assert sum(sum(a) for a in res.accepted) > 0
    counts = torch.bincount((toks[:, 0] * V + toks[:, 1]) * V + toks[:, 2], minlength=V ** 3).double()
    return chi_square_pvalue(counts, joint.double())


def test_point_mass_rule_at_t1_through_the_engine():
    """T=1: the joint law of the first three committed tokens equals the target's, for `pld` (point mass)
    and for the splice hybrid whose q mixes one-hot lookup rows with a drafter's q over a draft vocabulary."""
    t, sp, prompt, joint, vocab = _t1_case()
    V, N = t.vocab_size, 6000
    q_logits = torch.tensor([[2.0, 0, 1, 0], [0, 3, 0, 1], [1, 0, 0, 2]])  # [n=3, Vd]
    engines = {
        "pld": SpeculativeEngine(t, None, PromptLookup(4, 3, 3)),
        "splice": SpeculativeEngine(t, FixedDrafter(q_logits, vocab=vocab),
                                    LookupHybrid(PromptLookup(4, 3, 1), V, None, "splice", min_match=1)),
    }
    for i, (name, eng) in enumerate(engines.items()):
        assert _t1_pvalue(eng, prompt, sp, joint, 21 + i) > 1e-3, name
    # power: the same engine with a proposal step that lies about its q (claims a uniform q for a point mass)
    from draftlab.decoding.api import Proposal

    class Lying(PromptLookup):
        def __call__(self, draft, sp_, g):
            p = super().__call__(draft, sp_, g)
            return Proposal(p.tokens, torch.full((*p.tokens.shape, V), 1.0 / V))

    res = SpeculativeEngine(t, None, Lying(4, 3, 3)).generate([prompt] * N, 3, sp, eos_ids=[],
                                                              generator=torch.Generator().manual_seed(5))
    toks = torch.tensor(res.tokens)
    counts = torch.bincount((toks[:, 0] * V + toks[:, 1]) * V + toks[:, 2], minlength=V ** 3).double()
    assert chi_square_pvalue(counts, joint.double()) < 1e-6


def test_seeded_drafter_is_lossless_at_t1():
    """T=1 with a seeded drafter (SPEC §5) whose block inputs hold seeds outside its draft vocabulary (token
    1): the drafter's q over the draft vocabulary never covers them; and the same drafter with the seed
    column, whose q is over the target vocabulary with a per-row support (the seed's own logit)."""
    t, sp, prompt, joint, vocab = _t1_case()
    seeded, blocks = _seeded_drafter(t, vocab)
    assert _t1_pvalue(SpeculativeEngine(t, seeded), prompt, sp, joint, 23) > 1e-3
    seeds = torch.cat([b[:, 1:] for b in blocks])
    assert bool(torch.isin(seeds, torch.tensor([1])).any()) and seeds.ne(seeded.mask_token_id).any()
    column, _ = _seeded_drafter(t, vocab, seed_logit=True)
    step = _Recording()
    assert _t1_pvalue(SpeculativeEngine(t, column, step), prompt, sp, joint, 24) > 1e-3
    assert bool((~torch.isin(torch.cat(step.tokens), vocab)).any())  # the column proposed seeds outside Vd


class _Recording:
    """The drafter's own proposal step, recording the proposed tokens of every round."""

    def __init__(self):
        from draftlab.decoding.api import DrafterProposal

        self.inner, self.tokens = DrafterProposal(), []

    def __call__(self, draft, sp, generator=None):
        p = self.inner(draft, sp, generator)
        self.tokens.append(p.tokens.flatten().cpu())
        return p


def _seeded_drafter(t, vocab, seed_logit=False):
    """A seeded DFlash drafter on target t with draft vocabulary `vocab`, and the list its block inputs are
    recorded in (one [b, S] tensor per round). seed_logit: with the seed column (and flattened draft-vocabulary
    logits, so the column often wins)."""
    from draftlab.drafter import DFlashDrafter, DrafterDesign, arch_from_target

    torch.manual_seed(2)
    arch = arch_from_target(t, DrafterDesign(4, 1, [0, 1], 4, len(vocab), seed="lookup", seed_logit=seed_logit))
    d = DFlashDrafter.from_target(arch, t, vocab).eval()
    with torch.no_grad():  # opinions: larger weights than the init
        for p in d.parameters():
            p.mul_(5.0)
        if seed_logit:
            d.head_weight.mul_(0.2)
    blocks, draft = [], d.draft

    def spy(state, block_ids, positions):
        blocks.append(block_ids.clone())
        return draft(state, block_ids, positions)

    d.draft = spy
    return d, blocks


def test_pld_arm_runs_no_drafter_and_requests_no_taps(llama_target, monkeypatch):
    from draftlab.arms.grammar import ARM_TABLE, ArmContext, Checkpoints
    from draftlab.config import BenchmarkConfig, PLDConfig

    t = llama_target

    def no_drafter(folder):
        raise AssertionError("the pld arm must not load a drafter")

    ctx = ArmContext(t, BenchmarkConfig(), Checkpoints("d", "s", "l", "c"), 0, no_drafter,
                     pld=PLDConfig(max_ngram=2, num_tokens=3), block_size=4)
    arm = ARM_TABLE["pld"]("pld", ctx)
    import draftlab.verifier.streams as streams

    seen = []
    step = streams.stream_step  # every target pass of the streams (prefill: this; rounds: target.step): taps 7th

    def spy(*a, **kw):
        seen.append(tuple(a[6] if len(a) > 6 else kw.get("taps") or ()))
        return step(*a, **kw)

    monkeypatch.setattr(streams, "stream_step", spy)
    monkeypatch.setattr(t, "step", spy)
    res = arm.generate(PROMPTS["ragged"], 10, SamplingParams(), [], None)
    assert res.tokens == generate_ar(t, PROMPTS["ragged"], 10, eos_ids=[]).tokens
    assert seen and all(s == () for s in seen)


def test_bad_input_lines():
    from draftlab.params import build_params

    for bad, key in ((dict(max_ngram=0), "pld.max_ngram"), (dict(num_tokens=0), "pld.num_tokens"),
                     (dict(num_tokens=5), "pld.num_tokens")):
        with pytest.raises(DraftlabError, match=key) as e:
            PromptLookup(5, **{"max_ngram": 3, "num_tokens": 4, **bad})
        assert "\n" not in str(e.value)
    for ov, key in (("pld.max_ngram=0", "pld.max_ngram"), ("pld.num_tokens=8", "pld.num_tokens"),
                    ("pld.num_tokens=0", "pld.num_tokens"), ("pld.min_match=4", "pld.min_match"),
                    ("pld.hybrid=both", "pld.hybrid")):
        with pytest.raises(DraftlabError, match=key) as e:
            build_params({"drafter": {"block_size": 8}}, [ov])
        assert "\n" not in str(e.value)
    assert build_params({"drafter": {"block_size": 8}}, ["pld.num_tokens=7"]).pld.num_tokens == 7
    with pytest.raises(DraftlabError, match="pld.hybrid"):
        LookupHybrid(PromptLookup(4, 2, 3), 10, None, "both")
