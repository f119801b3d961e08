"""The one verification routine (docs/algorithms.md "Rounds, τ and verification"): every caller — engine, benchmark,
explorer replay, training metrics and tests — judges drafted blocks here.

- Greedy rule (T=0): slot j is accepted iff every slot <= j equals the target's argmax; the bonus token
  is the target's argmax at the first rejected slot (or after the last slot).
- Lossless sampling (T>0) with a proposal distribution q: slot j is accepted with probability
  min(1, p_j(ŷ_j) / q_j(ŷ_j)); on the first rejection the replacement is drawn from
  norm(max(0, p_j − q_j)); when every slot is accepted the bonus is drawn from p_{n+1}.
- q is the whole row each proposal was drawn from: dense over the draft vocabulary (q_vocab [Vq] its target ids), or
  sparse per slot (q_vocab [B, n, Vq]: a corrector's sampled walk over its candidates, duplicates summed).
- Point-mass rule (T>0, deterministic proposal, q = None): accept with probability p_j(ŷ_j); on
  rejection draw from p_j with ŷ_j removed (p_j(v)·1[v≠ŷ_j] / (1 − p_j(ŷ_j))). This is the
  min(1, p/q) rule with a one-hot q, written without materialising q.

`process_logits` turns logits into the sampling distribution (temperature, top-k, top-p) and is applied
identically to target and drafter logits, so p and q live in the same processed space.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class SamplingParams:
    """How tokens are drawn. temperature 0 = greedy (top_p / top_k ignored)."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = off

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass
class VerifyResult:
    accepted: Tensor  # [B] long in 0..n: accepted prefix length (acc)
    next_token: Tensor  # [B] long: the bonus / replacement token (target ids)
    target_tokens: Tensor | None = None  # [B, S] target argmax per verified slot (greedy only)


def greedy_accept_length(proposals: Tensor, target_tokens: Tensor, valid: Tensor | None = None) -> Tensor:
    """Length of the accepted prefix. proposals, target_tokens: [..., n]; valid: [..., n] bool
    (False slots count as mismatches). Returns [...] long in 0..n."""
    match = proposals == target_tokens
    if valid is not None:
        match = match & valid
    return match.long().cumprod(-1).sum(-1)


def sampling_accept_length(p_tok: Tensor, q_tok: Tensor | None, u: Tensor, valid: Tensor | None = None) -> Tensor:
    """The accepted prefix length under the min(1, p/q) rule with given uniforms: slot j is accepted iff
    u_j < p_j(ŷ_j) / q_j(ŷ_j) (q_tok None: a point mass, u_j < p_j(ŷ_j)); a token q gives no mass counts as
    accepted by the ratio. p_tok, q_tok, u [..., n] (the target's and the proposal's probability of each
    proposed token; u in [0, 1)); valid [..., n] bool (False slots count as rejections). Returns [...] long."""
    if q_tok is None:
        ratio = p_tok  # point mass: accept with p(ŷ)
    else:
        ratio = torch.where(q_tok > 0, p_tok / q_tok.clamp_min(1e-30), torch.ones_like(p_tok))
    ok = u < ratio
    if valid is not None:
        ok = ok & valid
    return ok.long().cumprod(-1).sum(-1)


def process_logits(logits: Tensor, sp: SamplingParams) -> Tensor:
    """Logits [..., V] -> probabilities [..., V] fp32 after temperature, top-k and top-p.
    At temperature 0 the result is the one-hot of the argmax (the limit of the sampling rule)."""
    logits = logits.float()
    if sp.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    logits = logits / sp.temperature
    V = logits.shape[-1]
    if 0 < sp.top_k < V:
        kth = logits.topk(sp.top_k, dim=-1).values[..., -1:]  # [..., 1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if sp.top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)  # [..., V]
        sorted_p = sorted_logits.softmax(-1)
        # drop a token when the mass strictly before it already reaches top_p (the first is always kept)
        drop_sorted = (sorted_p.cumsum(-1) - sorted_p) >= sp.top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits.softmax(-1)


def sample(probs: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Draw one index per row. probs [..., V] (need not be normalised) -> [...] long."""
    flat = probs.reshape(-1, probs.shape[-1])
    return torch.multinomial(flat, 1, generator=generator).reshape(probs.shape[:-1])


def _uniform(shape, device, generator) -> Tensor:
    return torch.rand(shape, device=device, generator=generator)


def speculative_accept(
    p: Tensor,  # [B, n+1, V] target probabilities at the verified slots (slot j predicts proposal j+1)
    proposals: Tensor,  # [B, n] proposed target ids
    q: Tensor | None = None,  # [B, n, Vq] proposal probabilities, or None = point mass on each proposal
    q_vocab: Tensor | None = None,  # [Vq] q-index -> target id, or [B, n, Vq] per slot (a sparse row; None: q is
    # over the full target vocab)
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """Lossless speculative sampling of one block (min(1, p/q) rule, or the point-mass rule when q is
    None). Returns (accepted [B] long, next_token [B] long)."""
    B, n1, V = p.shape
    n = n1 - 1
    rows = torch.arange(B, device=p.device)
    p_tok = p[:, :n].gather(-1, proposals[..., None]).squeeze(-1)  # [B, n]
    q_tok = None if q is None else proposal_prob(q, proposals, q_vocab)  # [B, n]
    u = _uniform((B, n), p.device, generator)  # [B, n]
    accepted = sampling_accept_length(p_tok, q_tok, u)  # [B]
    # distribution of the next token: residual at the first rejected slot, or p after the last slot
    p_next = p[rows, accepted]  # [B, V]
    rejected = accepted < n  # [B]
    at = accepted.clamp(max=max(n - 1, 0))
    if n > 0:
        if q is None:
            resid = p_next.clone()
            resid[rows, proposals[rows, at]] = 0.0  # p with ŷ removed
        else:
            ids = q_vocab[rows, at] if q_vocab is not None and q_vocab.dim() > 1 else q_vocab
            resid = residual(p_next, _q_full_row(q[rows, at], ids, V))  # max(0, p − q) over the whole vocabulary
        # a residual of zero mass can only arise from rounding (p == q); fall back to p
        empty = resid.sum(-1, keepdim=True) <= 0
        resid = torch.where(empty, p_next, resid)
        dist = torch.where(rejected[:, None], resid, p_next)
    else:
        dist = p_next
    return accepted, sample(dist, generator)


def residual(p: Tensor, q: Tensor) -> Tensor:
    """The unnormalised residual max(0, p − q) of rows p, q [B, V] over the whole target vocabulary (the draw after a
    rejection; `sample` normalises)."""
    return (p - q).clamp_min(0.0)


def proposal_prob(q: Tensor, tokens: Tensor, q_vocab: Tensor | None) -> Tensor:
    """q [..., Vq] evaluated at target ids tokens [...] (0 where the token is outside q's vocab). q_vocab [Vq] maps
    q's columns to target ids; [..., Vq] (a sparse row per slot, e.g. a sampled walk's K candidates): every entry
    whose id is the token counts, duplicates summed."""
    if q_vocab is None:
        return q.gather(-1, tokens[..., None]).squeeze(-1)
    if q_vocab.dim() > 1:
        return (q * (q_vocab == tokens[..., None])).sum(-1)
    inv = torch.full((int(q_vocab.max()) + 2,), -1, dtype=torch.long, device=q.device)
    inv[q_vocab] = torch.arange(q_vocab.numel(), device=q.device)
    idx = inv[tokens.clamp(max=inv.numel() - 1)]  # [B, n] q-index or -1
    vals = q.gather(-1, idx.clamp(min=0)[..., None]).squeeze(-1)
    return torch.where(idx >= 0, vals, torch.zeros_like(vals))


def _q_full_row(q_row: Tensor, q_vocab: Tensor | None, V: int) -> Tensor:
    """q rows [B, Vq] -> [B, V] over the target vocabulary (q_vocab [Vq], or [B, Vq] per row: a sparse row whose
    duplicate ids are summed and whose -1 entries hold nothing)."""
    if q_vocab is None:
        return q_row
    if q_vocab.dim() > 1:
        full = torch.zeros(q_row.shape[0], V, dtype=q_row.dtype, device=q_row.device)
        return full.scatter_add_(1, q_vocab.clamp(min=0), q_row.masked_fill(q_vocab < 0, 0.0))
    return torch.zeros(q_row.shape[0], V, dtype=q_row.dtype, device=q_row.device).index_copy_(1, q_vocab, q_row)


def verify_block(
    target_logits: Tensor,  # [B, S, V] target logits at [slot0, proposals]
    proposals: Tensor,  # [B, n = S-1] proposed target ids
    sp: SamplingParams,
    q: Tensor | None = None,
    q_vocab: Tensor | None = None,
    generator: torch.Generator | None = None,
) -> VerifyResult:
    """Judge one drafted block per stream. Greedy at T=0 (q ignored); lossless sampling otherwise
    (min(1, p/q) with q, the point-mass rule without)."""
    if sp.greedy:
        tt = target_logits.argmax(-1)  # [B, S]
        acc = greedy_accept_length(proposals, tt[:, :-1])
        return VerifyResult(acc, tt.gather(1, acc[:, None]).squeeze(1), tt)
    p = process_logits(target_logits, sp)
    acc, nxt = speculative_accept(p, proposals, q, q_vocab, generator)
    return VerifyResult(acc, nxt)


def sample_next(logits: Tensor, sp: SamplingParams, generator: torch.Generator | None = None) -> Tensor:
    """One token per row from logits [B, V] under sp (argmax at T=0). The AR engine and the first token
    after prefill use this, so AR and speculative decoding share one sampler."""
    if sp.greedy:
        return logits.argmax(-1)
    return sample(process_logits(logits, sp), generator)
