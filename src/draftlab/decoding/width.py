"""Verify-width rules: a proposal step that verifies fewer positions where a (seeded) drafter is unsure.

On a CPU the target's verify pass costs about linearly in the positions it verifies (measured
8 positions ~92 ms against ~45 ms for one AR step), so proposing a slot costs time whether or not it is
accepted. `SpanProposal` wraps the drafter's own choice (or any proposal step) and cuts each stream's
block to
    L = m + e,
where m is the block's seeded span (the leading slots 1..m of `DraftOutput.block_ids` that hold a seed, not
MASK; 0 for a plain drafter) and e the number of the following slots m+1..m+`extra` the drafter is sure
of: slot j is added while the drafter's probability that every added slot up to j is right,
Π_{i=m+1..j} c_i with c_i its top-1 probability at slot i, stays >= `min_prob`. Without a seed and with
c_1 < min_prob, L = 0: nothing is proposed and the round is one AR step (the target's token after slot 0,
as `pld` does when nothing matched). Rule `full` proposes the whole block (the inner step unchanged).

A batch verifies W = max_b L_b (one width per verify pass); a stream with L_b < W keeps the inner step's own
proposals up to W (its q too), which costs nothing extra. Exact by construction:
- the cut only shortens the inner step's proposal (tokens [:, :W], q [:, :W]); at T=0 every verified
  token is the target's greedy choice, so the output is AR's token for token;
- W is a function of the block's input and the drafter's logits only (c_i is read from the logits at
  temperature 1, never from the sampled tokens), so it is fixed before any proposal is drawn; verifying the
  first W proposals with the min(1, p/q) rule is lossless for any such W (past the cut the bonus token is
  drawn from the target's p).
Every round records `verify_len` [B] (L_b), `seed_span` [B] (m) and `drafted` [B] (1 = the drafter ran) in
its extras.

Seeds-only rounds (`full_span="seeds"`, the default): when every stream's block is seeded to its end (m = n,
so no drafter slot can follow the span), the step tells the round it needs no draft pass (`needs_draft`,
`api.SkipsDrafts`) and proposes the seeds unchanged (q = None: a point mass, verified with the point-mass rule
at T>0, as prompt lookup's). What that gives up is the drafter overriding a seed inside a full span; the
cpu run of 2026-12-04 recorded 0 overrides in 2,653 seeded slots of this arm (the seed bias keeps them) and
50% of its rounds fully seeded, each paying a draft pass of ~8.5 ms for nothing. `full_span="draft"` drafts
every round (the arm as it was).
"""
from __future__ import annotations

import torch
from torch import Tensor

from draftlab.compiling import compiled_steps
from draftlab.decoding.api import DraftOutput, DrafterProposal, Proposal, ProposalStep
from draftlab.decoding.verify import SamplingParams
from draftlab.errors import DraftlabError

VERIFY_RULES = ("full", "span")  # seeded.verify.rule: the whole block | the seeded span + sure drafter slots
FULL_SPAN = ("seeds", "draft")  # seeded.verify.full_span: a fully seeded round proposes its seeds | drafts


def check_verify(rule: str, extra: int, min_prob: float, block_size: int | None = None,
                 where: str = "seeded.verify", full_span: str = "seeds") -> None:
    """One-line errors naming the `seeded.verify.*` key (the library's check; the config checks the same)."""
    if full_span not in FULL_SPAN:
        raise DraftlabError(f"{where}.full_span={full_span!r} is not valid; choose one of: {', '.join(FULL_SPAN)}")
    if rule not in VERIFY_RULES:
        raise DraftlabError(f"{where}.rule={rule!r} is not valid; choose one of: {', '.join(VERIFY_RULES)}")
    if isinstance(extra, bool) or not isinstance(extra, int) or extra < 0:
        raise DraftlabError(f"{where}.extra={extra!r} must be an integer >= 0 (drafter slots verified after the "
                            f"seeded span)")
    if block_size is not None and extra > block_size - 1:
        raise DraftlabError(f"{where}.extra={extra} must lie in 0..{block_size - 1} (at most S-1 proposals, S = "
                            f"drafter.block_size={block_size})")
    if not 0.0 <= min_prob <= 1.0:
        raise DraftlabError(f"{where}.min_prob={min_prob} must lie in 0..1 (the drafter's probability that the "
                            f"added slots are right)")


def seeded_span(block_ids: Tensor, mask_token_id: int) -> Tensor:
    """block_ids [B, S] -> m [B] long: the number of leading proposal slots (1..m) that hold a seed (not MASK)."""
    return (block_ids[:, 1:] != mask_token_id).long().cumprod(-1).sum(-1)


def confidence(logits: Tensor) -> Tensor:
    """Draft logits [B, n, Vd(+1)] of the proposal slots -> the drafter's top-1 probability c [B, n] (softmax at
    temperature 1: a function of the logits alone, whatever the sampling parameters)."""
    return logits.float().softmax(-1).amax(-1)


def cut_lengths(span: Tensor, conf: Tensor, extra: int, min_prob: float) -> Tensor:
    """span m [B], c [B, n] -> L [B] in 0..n: m plus the slots m+1..m+extra added while the running product of
    their c stays >= min_prob."""
    B, n = conf.shape
    j = torch.arange(n, device=conf.device)[None, :]  # [1, n] slot j+1
    after = (j >= span[:, None]) & (j < span[:, None] + extra)  # [B, n] the candidate drafter slots
    run = torch.where(after, conf, torch.ones_like(conf)).cumprod(-1)  # [B, n] product over added slots up to j
    sure = (run >= min_prob) & after  # [B, n]
    ok = sure | (j < span[:, None])  # seeded slots always; then sure slots, prefix only
    return ok.long().cumprod(-1).sum(-1)


def span_cut(block_ids: Tensor, logits: Tensor, mask_token_id: int, rule: str, extra: int, min_prob: float,
             n: int) -> tuple[Tensor, Tensor]:
    """The rule on one round's draft: block_ids [B, S], the draft logits [B, S, Vd(+1)], n proposals -> (L [B] the
    verified proposals per stream, m [B] the seeded spans). One function: compiled with the steps."""
    span = seeded_span(block_ids, mask_token_id).clamp(max=n)  # [B]
    if rule == "full":
        return torch.full_like(span, n), span
    return cut_lengths(span, confidence(logits[:, 1:n + 1]).to(span.device), extra, min_prob), span


class SpanProposal(DrafterProposal):
    """The verify-width rule (module docstring): `inner` (default: the drafter's own choice) cut to the seeded
    span + up to `extra` slots the drafter is sure of (`rule="span"`), or left whole (`rule="full"`).
    mask_token_id: the drafter's MASK id (an unseeded slot of `block_ids`)."""

    def __init__(self, mask_token_id: int, rule: str = "span", extra: int = 3, min_prob: float = 0.15,
                 inner: ProposalStep | None = None, full_span: str = "seeds"):
        check_verify(rule, extra, min_prob, full_span=full_span)
        self.mask_token_id, self.rule, self.extra, self.min_prob = int(mask_token_id), rule, extra, float(min_prob)
        self.inner, self.full_span = inner, full_span
        self.compiled, self._cut = "off", span_cut

    def compile_steps(self, mode: str = "on", backend=None) -> str:
        """With compiled steps (`on`) the widths come from the host's seeded spans, never from the device: the
        verify width is the bound max_b m_b + extra (at most n), which the round rounds to its fixed widths, and
        no round reads L back; eager (`off`), W = max_b L_b, read from the device (free on a CPU). The inner
        step is compiled alike when it can be."""
        (self._cut,), _ = compiled_steps(mode, (span_cut,), torch.cuda.is_available(), backend)
        self.compiled = "off" if mode == "off" else "host-widths"
        if hasattr(self.inner, "compile_steps"):
            self.inner.compile_steps(mode, backend)
        return self.compiled

    def verify_tokens(self, block: int) -> range:
        """The tokens a round can verify: slot 0 and 0..S-1 proposals (`span`), the whole block (`full`)."""
        return range(block, block + 1) if self.rule == "full" else range(1, block + 1)

    def can_skip_drafts(self) -> bool:
        """Whether a round can go without a draft pass (its context then joins the next round's: width 2S)."""
        return self.rule == "span" and self.full_span == "seeds"

    def needs_draft(self, block_ids: Tensor, spans: list[int] | None = None) -> bool:
        """False when the seeds alone are the proposal: rule `span`, full_span `seeds` and every block [B, S]
        seeded to its end (read from the host's `spans` when given, else from the block)."""
        if self.rule != "span" or self.full_span != "seeds":
            return True
        n = block_ids.shape[1] - 1
        if spans is not None:
            return min(spans, default=n) < n
        return bool((seeded_span(block_ids, self.mask_token_id) < n).any())

    def __call__(self, draft: DraftOutput, sp: SamplingParams, generator: torch.Generator | None = None) -> Proposal:
        if draft.logits is None:  # a seeds-only round (`needs_draft` said so): the seeds, unchanged
            seeds = draft.block_ids[:, 1:]  # [B, n]
            B, n = seeds.shape
            full = torch.full((B,), n, dtype=torch.long)
            return Proposal(seeds, None, None, {"verify_len": full, "seed_span": full,
                                                "drafted": torch.zeros(B, dtype=torch.long)})
        base = self.inner(draft, sp, generator) if self.inner is not None else super().__call__(draft, sp, generator)
        n = base.tokens.shape[1]
        L, span = self._cut(draft.block_ids, draft.logits, self.mask_token_id, self.rule, self.extra, self.min_prob,
                            n)  # [B] each
        spans = getattr(draft, "seed_spans", None)
        if self.compiled != "off" and spans is not None:  # a host-side bound of max L: no device read
            W = n if self.rule == "full" else min(n, max(spans, default=0) + self.extra)
            extras = {**(base.extras or {}), "verify_len": L, "seed_span": span, "drafted": torch.ones_like(L)}
        else:
            W = int(L.max()) if L.numel() else 0
            extras = {**(base.extras or {}), "verify_len": L.cpu(), "seed_span": span.cpu(),
                      "drafted": torch.ones_like(L).cpu()}
        q = None if base.q is None else base.q[:, :W]
        ids = base.q_vocab[:, :W] if base.q_vocab is not None and base.q_vocab.dim() > 1 else base.q_vocab
        return Proposal(base.tokens[:, :W], q, ids, extras)
