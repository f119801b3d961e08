"""The one verification routine: greedy rule, lossless min(1, p/q) sampling, the point-mass rule, and
the shared temperature / top-k / top-p processing (chi-square tests with fixed seeds, all on tensors)."""
from __future__ import annotations

import pytest
import torch

from draftlab.stats import chi_square_pvalue
from draftlab.decoding.verify import (
    SamplingParams, greedy_accept_length, process_logits, sample_next, speculative_accept, verify_block,
)

N = 200_000  # samples (one batched call)


def _fixed(V=8, n=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(n + 1, V, generator=g) * 1.5, -1)  # [n+1, V] target
    q = torch.softmax(torch.randn(n, V, generator=g) * 2.0, -1)  # [n, V] a different drafter
    return p, q


def test_greedy_accept_length():
    prop = torch.tensor([[1, 2, 3], [1, 9, 3], [0, 2, 3]])
    tgt = torch.tensor([[1, 2, 3], [1, 2, 3], [1, 2, 3]])
    assert greedy_accept_length(prop, tgt).tolist() == [3, 1, 0]
    valid = torch.tensor([[True, True, False]] * 3)
    assert greedy_accept_length(prop, tgt, valid).tolist() == [2, 1, 0]


def test_verify_block_greedy_bonus():
    V = 5
    tt = torch.tensor([[1, 2, 3, 4], [1, 0, 3, 4]])  # target argmax at slots 0..3
    logits = torch.nn.functional.one_hot(tt, V).float() * 3
    prop = torch.tensor([[1, 2, 3], [1, 2, 3]])
    r = verify_block(logits, prop, SamplingParams())
    assert r.accepted.tolist() == [3, 1] and r.next_token.tolist() == [4, 0]
    assert torch.equal(r.target_tokens, tt)


def _first_token(acc, nxt, props):
    return torch.where(acc > 0, props[:, 0], nxt)


@pytest.mark.parametrize("rule", ["minpq", "pointmass"])
def test_first_committed_token_follows_target(rule):
    V, n = 8, 3
    p, q = _fixed(V, n)
    g = torch.Generator().manual_seed(1)
    P = p.expand(N, n + 1, V)
    if rule == "minpq":
        Q = q.expand(N, n, V)
        props = torch.multinomial(q, N, replacement=True, generator=g).T  # [N, n] ~ q
        acc, nxt = speculative_accept(P, props, Q, generator=g)
        expected_rate = torch.minimum(p[0], q[0]).sum()  # P(accept slot 1) = Σ min(p, q)
    else:
        props = torch.tensor([2, 5, 1]).expand(N, n)  # deterministic proposals
        acc, nxt = speculative_accept(P, props, None, generator=g)
        expected_rate = p[0, 2]
    first = _first_token(acc, nxt, props)
    assert chi_square_pvalue(torch.bincount(first, minlength=V).double(), p[0]) > 1e-3
    assert abs(float((acc > 0).float().mean()) - float(expected_rate)) < 0.01
    # second committed token within the block, given the first proposal was accepted: ~ p[1]
    sel = acc > 0
    second = torch.where(acc[sel] > 1, props[sel][:, 1], nxt[sel])
    assert chi_square_pvalue(torch.bincount(second, minlength=V).double(), p[1]) > 1e-3
    # the bonus after a fully accepted block ~ p[n]
    full = acc == n
    if int(full.sum()) > 200:
        assert chi_square_pvalue(torch.bincount(nxt[full], minlength=V).double(), p[n]) > 1e-3


def test_tests_have_power():
    """Sanity: the chi-square check rejects proposals committed without correction."""
    V, n = 8, 3
    p, q = _fixed(V, n)
    props = torch.multinomial(q, N, replacement=True, generator=torch.Generator().manual_seed(2)).T
    assert chi_square_pvalue(torch.bincount(props[:, 0], minlength=V).double(), p[0]) < 1e-6


def test_point_mass_is_min_rule_with_one_hot_q():
    V, n, B = 7, 4, 5000
    p, _ = _fixed(V, n, seed=3)
    P = p.expand(B, n + 1, V)
    props = torch.randint(0, V, (B, n), generator=torch.Generator().manual_seed(4))
    a1, x1 = speculative_accept(P, props, None, generator=torch.Generator().manual_seed(5))
    onehot = torch.nn.functional.one_hot(props, V).float()
    a2, x2 = speculative_accept(P, props, onehot, generator=torch.Generator().manual_seed(5))
    assert torch.equal(a1, a2) and torch.equal(x1, x2)


def test_draft_vocabulary_subset_is_lossless():
    """q lives on a draft vocabulary (a subset of the target's): still exactly p."""
    V, n = 10, 2
    p, _ = _fixed(V, n, seed=6)
    vocab = torch.tensor([7, 1, 3, 4])  # draft index -> target id
    q = torch.softmax(torch.randn(n, 4, generator=torch.Generator().manual_seed(7)) * 2, -1)  # [n, 4]
    g = torch.Generator().manual_seed(8)
    idx = torch.multinomial(q, N, replacement=True, generator=g).T  # [N, n]
    props = vocab[idx]
    acc, nxt = speculative_accept(p.expand(N, n + 1, V), props, q.expand(N, n, 4), vocab, generator=g)
    first = _first_token(acc, nxt, props)
    assert chi_square_pvalue(torch.bincount(first, minlength=V).double(), p[0]) > 1e-3


def test_process_logits_top_k_top_p_and_greedy():
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0, -1.0]])
    assert torch.equal(process_logits(logits, SamplingParams()), torch.tensor([[1.0, 0, 0, 0, 0]]))
    pk = process_logits(logits, SamplingParams(temperature=1.0, top_k=2))
    assert (pk[0, 2:] == 0).all() and torch.allclose(pk[0, :2], torch.softmax(logits[0, :2], -1))
    full = torch.softmax(logits, -1)[0]  # [.64 .24 .09 .03 .01]
    pp = process_logits(logits, SamplingParams(temperature=1.0, top_p=0.8))  # needs the top 2 (0.64 < 0.8)
    assert (pp[0, 2:] == 0).all() and torch.allclose(pp[0, :2], full[:2] / full[:2].sum())
    pt = process_logits(logits, SamplingParams(temperature=0.5))
    assert torch.allclose(pt, torch.softmax(logits / 0.5, -1))
    # identical processing on a draft vocabulary subset == processing the full vocabulary with the rest at -inf
    sp = SamplingParams(temperature=0.7, top_p=0.9, top_k=3)
    sub = torch.tensor([0, 2, 3])
    masked = torch.full_like(logits, float("-inf"))
    masked[:, sub] = logits[:, sub]
    assert torch.allclose(process_logits(logits[:, sub], sp), process_logits(masked, sp)[:, sub])
    assert sample_next(logits, SamplingParams()).tolist() == [0]


def test_verify_block_sampling_rules_at_their_extremes():
    """T>0 through verify_block: proposals drawn from q = p are always accepted in full (ratio 1), and the
    bonus comes from p after the last slot; a proposal outside p's support (top_k=1: p is one-hot) is
    rejected at slot 1 and replaced by p's only token — with q given and with the point-mass rule."""
    B, S, V = 64, 4, 11
    n = S - 1
    logits = torch.randn(B, S, V, generator=torch.Generator().manual_seed(9)) * 2
    sp = SamplingParams(temperature=0.8)
    p = process_logits(logits, sp)  # [B, S, V]
    g = torch.Generator().manual_seed(10)
    props = torch.multinomial(p[:, :n].reshape(-1, V), 1, generator=g).view(B, n)
    r = verify_block(logits, props, sp, p[:, :n], generator=g)
    assert r.accepted.tolist() == [n] * B and r.target_tokens is None
    assert bool((p[torch.arange(B), n, r.next_token] > 0).all())
    one = SamplingParams(temperature=1.0, top_k=1)
    top = logits.argmax(-1)  # [B, S] the only token with p > 0
    wrong = (top[:, :n] + 1) % V  # [B, n] never the argmax
    for q in (torch.nn.functional.one_hot(wrong, V).float(), None):
        r = verify_block(logits, wrong, one, q, generator=torch.Generator().manual_seed(11))
        assert r.accepted.tolist() == [0] * B and torch.equal(r.next_token, top[:, 0])
