"""A trained corrector as the speculative engine's proposal step (docs/algorithms.md "Rounds, τ and verification",
"Path rules", "Baselines and controls").

`CorrectorProposal(corrector, rule, lam, backend, walk)` implements `draftlab.decoding.api.ProposalStep` for
every corrector family: called once per round with the drafter's draft output (logits [B, S, Vd],
hidden [B, S, H], vocab, block_ids [B, S]), it hands the n = S−1 proposed slots to
`corrector.propose` (DCOCO: score the top-K grid in one batched op and walk the path rule; DSpark /
Domino: walk slot by slot from the block's slot-0 token) and returns `Proposal(tokens [B, n], q=None)` — or, for a
sampled walk at T>0, to `corrector.sample` and returns the tokens with the rows they were drawn from.
On a seeded drafter the draft's logits already carry the seed bias and, with the seed column, one column
more whose target id per slot is the draft's `extra_ids`: the block hands both on, so the candidates and
the walks see what the training side's `drafter_block` gives them. With the point-mass walk (`walk=""`) the
proposal is deterministic at every temperature: at T>0 the verifier applies the point-mass rule (accept with
p_j(ŷ_j), on rejection resample from p_j without ŷ_j), which keeps decoding lossless without any proposal
distribution. With `walk="sampled"` (the `-sampled` arms, greedy rule only) at T>0 the path is the family's sampled
walk (`Corrector.sample`, `draftlab.corrector.walks`) and the proposal carries the rows it was drawn from (q and their
target ids), verified by the min(1, p/q) rule; at T=0 it is the point-mass walk. The corrector's
extras (DCOCO's K×K grid and chosen path) are recorded with the round for the explorer.

`compile_steps` compiles the step like the target's and the drafter's passes (`propose_step`: full graph, fixed
shapes, CUDA graphs on CUDA); compiled, its kernels are the pure-torch references, which inductor fuses (a Triton
kernel is the eager step's way of avoiding the same dispatch).
"""
from __future__ import annotations

import torch

from draftlab.compiling import compiled_steps
from draftlab.corrector.base import ANCHOR, Corrector, DraftBlock
from draftlab.corrector.variants import RULES
from draftlab.corrector.walks import SUFFIX as SAMPLED
from draftlab.decoding.api import DraftOutput, Proposal
from draftlab.decoding.verify import SamplingParams
from draftlab.errors import DraftlabError


def propose_step(corrector: Corrector, hidden, logits, slot0, vocab, extra, rule: str, lam: float,
                 backend: str | None, anchor=None, sp: SamplingParams | None = None, u=None) -> tuple:
    """The corrector's proposal over the n proposed slots as a function of tensors -> (tokens [B, n], extras, q, q_ids):
    the point-mass walk of `rule` (q, q_ids None), or with sp (T > 0) and the round's uniforms u [B, n] drawn outside
    the sampled walk and the rows it drew from (q [B, n, M], their target ids [B, n, M])."""
    block = DraftBlock(hidden=hidden, slot0=slot0, vocab=vocab, logits=logits, extra=extra, anchor=anchor)
    if sp is not None:
        w = corrector.sample(block, sp, u)
        return w.tokens, {}, w.q, w.ids
    out = corrector.propose(block, rule, lam, backend)
    return out.tokens, out.extras, None, None


class CorrectorProposal:
    def __init__(self, corrector: Corrector, rule: str = "greedy", lam: float = 0.75, backend: str | None = None,
                 walk: str = ""):
        if rule not in RULES:
            raise DraftlabError(f"path rule {rule!r} is not valid; choose one of: {', '.join(RULES)}")
        if walk not in ("", SAMPLED):
            raise DraftlabError(f"walk {walk!r} is not valid; choose '' (the point mass) or '{SAMPLED}'")
        if walk and rule != "greedy":
            raise DraftlabError(f"the {rule} path rule has no sampled walk (it picks a whole path by Viterbi; its "
                                f"conditionals would need a forward-backward pass): use the greedy rule")
        self.corrector, self.rule, self.lam, self.walk = corrector.eval(), rule, lam, walk
        self.backend = backend  # None: DRAFTLAB_KERNELS, else Triton on CUDA / torch elsewhere
        self.last_extras: dict[str, torch.Tensor] = {}  # the corrector's extras of the last round
        self.step, self.compiled = propose_step, "off"

    def compile_steps(self, mode: str = "on", backend=None) -> str:
        """Compile `propose_step` (`off` restores it eager); returns what runs."""
        (self.step,), self.compiled = compiled_steps(mode, (propose_step,), self.corrector.device.type == "cuda",
                                                     backend)
        return self.compiled

    @torch.no_grad()
    def __call__(self, draft: DraftOutput, sp=None, generator: torch.Generator | None = None) -> Proposal:
        if draft.hidden is None or draft.logits is None:
            raise DraftlabError(f"a {type(self.corrector).__name__} reads the drafter's hidden states and logits; this "
                                f"arm's drafter gives none (put the corrector on a DFlash drafter)")
        extra = getattr(draft, "extra_ids", None)  # [B, S] a seeded drafter's seed column (logits [B, S, Vd+1])
        # [B, n_taps*H] the target's taps before each block, for a family whose contract reads the anchor
        anchor = getattr(draft, "anchor", None) if ANCHOR in self.corrector.contract.reads else None
        backend = "torch" if self.compiled != "off" else self.backend
        hidden = draft.hidden[:, 1:]
        sampled = self.walk == SAMPLED and sp is not None and not sp.greedy
        # the sampled walk's uniforms, drawn here (a compiled step cannot hold a Generator): reproducible from the seed
        u = torch.rand(hidden.shape[:2], device=hidden.device, generator=generator) if sampled else None
        tokens, extras, q, q_ids = self.step(self.corrector, hidden, draft.logits[:, 1:], draft.block_ids[:, 0],
                                             draft.vocab, None if extra is None else extra[:, 1:], self.rule, self.lam,
                                             backend, anchor, sp if sampled else None, u)  # tokens [B, n]
        self.last_extras = extras
        # the point mass (q None: the verifier's point-mass rule at T>0), or the rows the sampled walk drew from
        return Proposal(tokens, q, q_ids, extras=extras or None)
