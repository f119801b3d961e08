"""Engines: greedy speculative decoding equals AR decoding token for token (fp32), τ bookkeeping, ragged
multi-stream batches, stop rules, context plumbing, and the engine-level sampling distribution."""
from __future__ import annotations

import pytest
import torch

from draftlab.stats import chi_square_pvalue
from draftlab.decoding import SamplingParams, SpeculativeEngine, generate_ar
from stubs import FixedDrafter, OracleDrafter


def _prompts(target, lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, target.vocab_size, (n,), generator=g).tolist() for n in lengths]


def _spec(target, drafter, prompts, max_new, **kw):
    drafter.prompts = prompts
    return SpeculativeEngine(target, drafter, record_topk=kw.pop("record_topk", 4)).generate(prompts, max_new, eos_ids=kw.pop("eos_ids", []), **kw)


def _ar_single(target, prompts, max_new, eos_ids=()):
    return [generate_ar(target, [p], max_new, eos_ids=list(eos_ids)).tokens[0] for p in prompts]


@pytest.mark.parametrize("mode", ["right", "wrong", "random", "mixed"])
@pytest.mark.parametrize("lengths", [(9,), (5, 12, 8)])
def test_greedy_speculative_equals_ar(llama_target, mode, lengths):
    t = llama_target
    prompts = _prompts(t, lengths)
    ref = _ar_single(t, prompts, 14)
    ar_batch = generate_ar(t, prompts, 14, eos_ids=[]).tokens
    assert ar_batch == ref  # batched (ragged, left-padded) AR == one stream at a time
    drafter = OracleDrafter(t, block_size=4, mode=mode, seed=1, check_feats=True, taps=(0, 2))
    res = _spec(t, drafter, prompts, 14)
    assert res.tokens == ref
    assert drafter.max_ctx_err < 1e-4  # context features = the target's taps of the committed tokens
    assert all(len(x) == 14 for x in res.tokens) and res.finish_reason == ["length"] * len(prompts)


def test_greedy_exact_on_qwen3(qwen3_target):
    t = qwen3_target
    prompts = _prompts(t, (6, 10), seed=3)
    drafter = OracleDrafter(t, block_size=5, mode="mixed", p_right=0.7, seed=2)
    assert _spec(t, drafter, prompts, 12).tokens == _ar_single(t, prompts, 12)


def test_tau_bookkeeping(llama_target):
    t = llama_target
    prompts = _prompts(t, (7, 4, 10), seed=4)
    S = 4
    right = _spec(t, OracleDrafter(t, block_size=S, mode="right"), prompts, 1 + 3 * S)
    wrong = _spec(t, OracleDrafter(t, block_size=S, mode="wrong"), prompts, 9)
    for acc in right.accepted:
        assert acc == [S - 1] * 3  # every round accepts all n: τ = S
    for acc in wrong.accepted:
        assert acc == [0] * 8  # τ = 1, one token per round
    # records: slot-1 top-1 is the proposal, offsets index the output
    rec = right.records[0]
    assert rec.topk_ids.shape == (3, S - 1, 4) and torch.equal(rec.topk_ids[..., 0], rec.proposals)
    assert rec.offset.tolist() == [0, 0, 0]
    toks = torch.tensor(right.tokens)
    assert torch.equal(rec.proposals, toks[:, 1:S])


def test_eos_stops_each_stream(llama_target):
    t = llama_target
    prompts = _prompts(t, (6, 9, 5, 11), seed=5)
    ref = _ar_single(t, prompts, 20)
    eos = ref[1][7]  # a token that ends stream 1 at step 8 (and maybe others elsewhere)
    ref_eos = _ar_single(t, prompts, 20, eos_ids=[eos])
    for p, r in zip(ref_eos, ref):
        assert r[: len(p)] == p and (p[-1] == eos or len(p) == 20)
    ar = generate_ar(t, prompts, 20, eos_ids=[eos])
    assert ar.tokens == ref_eos
    res = _spec(t, OracleDrafter(t, block_size=6, mode="mixed", p_right=0.8, seed=3), prompts, 20, eos_ids=[eos])
    assert res.tokens == ref_eos
    assert res.finish_reason == ar.finish_reason and "eos" in res.finish_reason
    assert all(td > 0 for td in res.t_done)


def test_max_new_tokens_one_and_timing_split(llama_target):
    t = llama_target
    prompts = _prompts(t, (5, 7), seed=6)
    res = _spec(t, OracleDrafter(t, block_size=4, mode="right"), prompts, 1)
    assert [len(x) for x in res.tokens] == [1, 1] and res.round_times.shape == (0, 4)
    res = _spec(t, OracleDrafter(t, block_size=4, mode="random"), prompts, 10)
    assert res.round_times.shape[1] == 4 and bool((res.round_times >= 0).all())
    assert res.round_streams.max() == 2


def test_many_ragged_streams(llama_target):
    t = llama_target
    lengths = [3 + (7 * i) % 11 for i in range(9)]
    prompts = _prompts(t, lengths, seed=7)
    ref = generate_ar(t, prompts, 16, eos_ids=[]).tokens
    drafter = OracleDrafter(t, block_size=5, mode="mixed", p_right=0.6, seed=5)
    drafter.prompts = prompts
    eng = SpeculativeEngine(t, drafter)
    assert eng.generate(prompts, 16, eos_ids=[]).tokens == ref


def test_engine_sampling_matches_target(llama_target):
    """T>0 through the whole engine: the joint law of the first tokens the verifier commits matches the
    target's (min(1, p/q) rule with a fixed, badly calibrated q; and the point-mass rule)."""
    from draftlab.decoding.verify import process_logits
    t = tiny_target_small_vocab()
    V, N = t.vocab_size, 4000
    sp = SamplingParams(temperature=0.5)
    prompt = [1, 2, 3]
    # exact joint of (token 1, token 2) under the target
    p1 = process_logits(t(torch.tensor([prompt])).logits[0, -1], sp)  # [V]
    p2 = process_logits(t(torch.tensor([prompt + [a] for a in range(V)])).logits[:, -1], sp)  # [V, V]
    joint = (p1[:, None] * p2).flatten()
    q_logits = torch.tensor([[4.0, 0, 0, 1, 0, 0], [0, 0, 3.0, 0, 0, 2]])  # [n=2, V]
    for deterministic in (False, True):
        drafter = FixedDrafter(q_logits)
        proposer = None
        if deterministic:
            from draftlab.decoding.api import Proposal

            proposer = lambda d, sp_, g: Proposal(d.logits[:, 1:].argmax(-1))  # noqa: E731  point mass
        eng = SpeculativeEngine(t, drafter, proposer=proposer)
        g = torch.Generator().manual_seed(11 + deterministic)
        res = eng.generate([prompt] * N, 2, sp, eos_ids=[], generator=g)
        toks = torch.tensor(res.tokens)
        counts = torch.bincount(toks[:, 0] * V + toks[:, 1], minlength=V * V).double()
        assert chi_square_pvalue(counts, joint.double()) > 1e-3
    # the test has power: through the same engine, a proposal step that samples from q but tells the
    # verifier a different q (uniform) commits tokens whose law is far from the target's
    from draftlab.decoding.api import Proposal
    from draftlab.decoding.verify import sample

    def lying(d, sp_, g):
        q = process_logits(d.logits[:, 1:], sp_)  # [B, n, V] what the tokens are drawn from
        return Proposal(sample(q, g), torch.full_like(q, 1.0 / V))  # ... but a uniform q is reported

    res = SpeculativeEngine(t, FixedDrafter(q_logits), proposer=lying).generate(
        [prompt] * N, 2, sp, eos_ids=[], generator=torch.Generator().manual_seed(13))
    toks = torch.tensor(res.tokens)
    counts = torch.bincount(toks[:, 0] * V + toks[:, 1], minlength=V * V).double()
    assert chi_square_pvalue(counts, joint.double()) < 1e-6


def tiny_target_small_vocab():
    from conftest import tiny_target

    return tiny_target("llama", vocab=6, layers=2, seed=3)  # at T=0.5 p is spread: [.11 .09 .13 .46 .10 .11]


class _LookupStep:
    """A drafter-less proposal step (the shape of prompt lookup): proposes the n tokens that followed the
    last occurrence of the current token in the stream's own committed text, tracked via TracksStreams."""

    block_size = 4

    def start(self, prompts, first):
        self.hist = [list(p) + [int(f)] for p, f in zip(prompts, first.tolist())]

    def extend(self, tokens, counts):
        for h, row, c in zip(self.hist, tokens.tolist(), counts.tolist()):
            h.extend(row[:c])

    def drop_streams(self, keep):
        self.hist = [h for h, k in zip(self.hist, keep.tolist()) if k]

    def __call__(self, draft, sp, generator):
        from draftlab.decoding.api import Proposal

        assert draft.logits is None and draft.block_ids.shape[1] == self.block_size
        n, out = self.block_size - 1, []
        for h, last in zip(self.hist, draft.block_ids[:, 0].tolist()):
            assert h[-1] == last  # the tracked text ends with the block's slot 0
            i = max((j for j in range(len(h) - 1) if h[j] == last), default=None)
            nxt = h[i + 1:i + 1 + n] if i is not None else []
            out.append((nxt + [last] * n)[:n])
        return Proposal(torch.tensor(out, device=draft.block_ids.device))


def test_an_arm_without_a_drafter(llama_target):
    """drafter=None: the round skips the draft phase, the step declares block_size and sees the committed
    tokens through TracksStreams; greedy output still equals AR, and some blocks are accepted."""
    t = llama_target
    prompts = [[5, 9, 17, 5, 9, 17, 5, 9], [44, 2, 8, 44, 2], [12, 90, 4]]
    res = SpeculativeEngine(t, None, _LookupStep()).generate(prompts, 16, eos_ids=[])
    assert res.tokens == generate_ar(t, prompts, 16, eos_ids=[]).tokens
    assert res.block_size == 4 and res.round_times.shape[1] == 4 and res.records == []
    assert all(sum(a) > 0 for a in res.accepted)  # the tracked text made some proposals right
    with pytest.raises(ValueError, match="block_size"):
        SpeculativeEngine(t, None, lambda d, sp, g: None)


def test_one_device_to_host_copy_per_round(llama_target, monkeypatch):
    """Each round of either engine copies to the host once (`common.to_host`: the AR step's tokens; the
    speculative round's accepted counts and committed tokens, packed), plus the prefill's first token; emitting,
    the stop rules, the lookup index and a seeded drafter's text all read that copy; finished streams are dropped
    with an index made on the host."""
    import draftlab.decoding.ar as ar_mod
    import draftlab.decoding.common as common
    import draftlab.decoding.round as round_mod
    import draftlab.decoding.speculative as spec_mod
    from draftlab.decoding.lookup import PromptLookup

    calls = []
    real = common.to_host

    def counting(t):
        calls.append(tuple(t.shape))
        return real(t)

    for mod in (ar_mod, round_mod, spec_mod):
        monkeypatch.setattr(mod, "to_host", counting)
    t = llama_target
    prompts = _prompts(t, (6, 11, 9))
    res = generate_ar(t, prompts, 10, eos_ids=[])
    assert len(calls) == 1 + len(res.round_times)
    calls.clear()
    eng = SpeculativeEngine(t, None, PromptLookup(4, 2, 3))
    res = eng.generate(prompts, 10, eos_ids=[])
    assert len(calls) == 1 + len(res.round_times) and res.tokens == generate_ar(t, prompts, 10, eos_ids=[]).tokens
