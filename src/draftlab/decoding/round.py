"""One round of speculative decoding, as a function: draft -> propose -> verify -> commit.

The engine loop (`draftlab.decoding.speculative.SpeculativeEngine.generate`) and the Draft-OPD rollout
(`draftlab.specopd.draft_opd`) both call `speculative_round`, so the two cannot drift apart:

1. draft    feed the pending context features to the drafter, then draft the block
            [slot 0 = last committed token, MASK × n] at positions next_pos + 0..n — or the drafter's own
            `block_input(state, last)` (a seeded drafter: seeds in slots 1..m; `block_input` here)
            (no drafter: skipped; a proposal step that `SkipsDrafts` and does not need this block drafted:
            skipped too, and the context waits for the next drafted round);
2. propose  the `ProposalStep` turns the draft into W ≤ n proposed tokens (+ optionally q);
3. verify   one target pass over [slot 0, proposals] (with the drafter's taps), then the one
            verification routine (`verify.verify_block`) gives the accepted length and the bonus token;
4. commit   keep slot 0 + the accepted proposals in the target cache (the rest become holes) and hand
            the verify pass's taps of those positions to the drafter as the next round's context
            (no extra target pass).
What the caller does with the tokens (emit, stop rules, drop finished streams, compaction) stays with
the caller. Shapes: b active streams, S block size, W proposals verified this round.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from draftlab.decoding.api import BlockInput, BuildsBlocks, Drafter, DraftOutput, Proposal, ProposalStep, SkipsDrafts
from draftlab.decoding.common import PhaseTimer, to_host
from draftlab.decoding.tree import walk
from draftlab.decoding.verify import SamplingParams, VerifyResult, verify_block
from draftlab.verifier.model import TargetOutput
from draftlab.verifier.streams import StreamCache

PHASES = ("draft", "propose", "verify", "commit")  # round_times columns of the speculative engine


@dataclass
class RoundResult:
    draft: DraftOutput
    proposal: Proposal  # tokens [b, W]
    verified: TargetOutput  # the target pass over [slot 0, proposals]: logits [b, W+1, V], taps [b, W+1, F]
    result: VerifyResult  # accepted [b] (acc), next_token [b] (bonus / replacement)
    accepted: list[int]  # acc per stream (from `host`)
    positions: Tensor  # [b, S] logical positions of the block's slots
    context: tuple  # the drafter's next context: feats [b, k, F], valid [b, k] bool, positions [b, k]
    committed: Tensor  # [b, W+1] the accepted proposals then the bonus / replacement (first acc+1 count), device
    host: Tensor  # [b, 1 + W+1] CPU: acc, then `committed` — the round's one device-to-host copy


def tap_ids(drafter: Drafter | None) -> list[int]:
    """The target layers whose outputs the drafter reads (none without a drafter)."""
    return [] if drafter is None else list(drafter.target_layer_ids)


def block_input(drafter: Drafter, state, last: Tensor) -> Tensor:
    """The block's input ids [b, S]: the drafter's own `block_input(state, last)` when it has one (a seeded
    drafter: [last, seeds, MASK...] from the committed text its state tracks), else [last, MASK × n]."""
    if isinstance(drafter, BuildsBlocks):
        return drafter.block_input(state, last)
    b, S = last.shape[0], drafter.block_size
    return torch.cat([last[:, None], last.new_full((b, S - 1), drafter.mask_token_id)], 1)


def join_context(first: tuple, then: tuple) -> tuple:
    """Two pending contexts (feats [b, k, F], valid [b, k], positions [b, k]) -> one, `first` before `then` (a
    round without a draft pass leaves its context pending; the next drafted round feeds both)."""
    return tuple(torch.cat([a, b], 1) for a, b in zip(first, then))


def valid_positions(valid: Tensor) -> Tensor:
    """Logical positions of slots valid [B, L] (count of valid slots before; holes get their neighbour's)."""
    return (valid.long().cumsum(-1) - 1).clamp(min=0)


def speculative_round(cache: StreamCache, drafter: Drafter | None, state, proposer: ProposalStep, last: Tensor,
                      context: tuple, sp: SamplingParams, generator: torch.Generator | None = None,
                      timer: PhaseTimer | None = None, block_size: int | None = None,
                      live: Tensor | None = None) -> RoundResult:
    """One round for the b active streams. last [b]: each stream's last committed token (slot 0);
    context: the (feats, valid, positions) the drafter has not seen yet (from prefill or the previous
    round); block_size: S when there is no drafter; live [b] long (None = all): a row with 0 is retired (kept for
    the batch's shape) and keeps nothing of the round. `timer` (`common.PhaseTimer`) gets the round's start
    and a mark after draft, propose and verify; the caller closes the round (`end_round`) after its own
    bookkeeping, which is the commit phase's rest."""
    mark = (lambda: None) if timer is None else timer.mark
    if timer is not None:
        timer.start_round()
    S = drafter.block_size if drafter is not None else block_size
    if not S or S < 2:
        raise ValueError(f"block size {S!r}: an arm without a drafter must give its proposal step's block_size (>= 2)")
    b, dev = last.shape[0], last.device
    slots = torch.arange(S, device=dev)  # [S]
    pos = cache.next_pos[:, None] + slots  # [b, S] slot 0 sits at the next logical position
    pending = None  # the context the drafter did not take this round
    if drafter is not None:
        block = block_input(drafter, state, last)  # [b, S]
        spans = getattr(getattr(state, "seeds", None), "spans", None)  # host: the seeded spans (a seeded drafter)
        if isinstance(proposer, SkipsDrafts) and not proposer.needs_draft(block, spans):
            d, pending = BlockInput(block, seed_spans=spans), context  # no draft pass this round
        else:
            drafter.extend_context(state, *context)
            d = drafter.draft(state, block, pos)
            if spans is not None:
                d.seed_spans = spans
    else:
        d = BlockInput(torch.cat([last[:, None], last.new_zeros((b, S - 1))], 1))
    mark()
    prop = proposer(d, sp, generator)  # tokens [b, W]
    mark()
    if prop.tree is not None:
        return _tree_round(cache, drafter, prop, d, sp, generator, mark, live, pending, slots, pos)
    W = prop.tokens.shape[1]
    block = torch.cat([last[:, None], prop.tokens], 1)  # [b, W+1]
    Tv = cache.verify_width(W + 1)
    if Tv > W + 1:  # compiled steps: the pass verifies a declared width; the extra slots are never kept
        block = torch.cat([block, block[:, -1:].expand(-1, Tv - W - 1)], 1)
    v = cache.append(block, taps=tap_ids(drafter))  # logits [b, Tv, V]
    if Tv > W + 1:
        v = TargetOutput(v.logits[:, :W + 1], None if v.taps is None else v.taps[:, :W + 1])
    res = verify_block(v.logits, prop.tokens, sp, prop.q, prop.q_vocab, generator)
    mark()
    acc = res.accepted  # [b]
    nxt = res.next_token[:, None]
    committed = torch.cat([prop.tokens, nxt], 1).scatter(1, acc[:, None], nxt)  # [b, W+1]
    host = to_host(torch.cat([acc[:, None], committed], 1))  # the round's one device-to-host copy
    acc_l = host[:, 0].tolist()
    k = max(acc_l) + 1  # the context grows by slot 0 + accepted proposals (acc + 1 positions)
    kept = acc + 1 if live is None else (acc + 1) * live  # [b] positions each stream keeps
    cache.commit(kept, Tv, k)
    ctx = (None if v.taps is None else v.taps[:, :k], slots[None, :k] < kept[:, None], pos[:, :k])
    if pending is not None:
        ctx = join_context(pending, ctx)
    return RoundResult(d, prop, v, res, acc_l, pos, ctx, committed, host)


def tree_record(tree, path: Tensor) -> dict[str, Tensor]:
    """What a tree round records for the explorer's tree view and `draftlab decode --show-tree` (references to tensors
    the round holds anyway; copied to the host only when rounds are recorded): its nodes' tokens, parents and path
    scores (the summed log-probability under the ranking's lattice; padding -inf), the node count, and the walk's
    accepted path as node indices by depth (past the accepted depth: the leaf again)."""
    rec = {"tree_nodes": tree.valid.long().sum(-1), "tree_tokens": tree.tokens, "tree_parent": tree.parent,
           "tree_path": path}
    return rec if tree.score is None else {**rec, "tree_score": tree.score}


def first_child(tree, node: Tensor) -> Tensor:
    """[b] the token of `node`'s best child (the lowest node index: a best-first tree's order), -1 where it has none:
    after the walk, the proposal the target rejected below the accepted path (every child of the path's last node
    failed; the decode marks show the first)."""
    kids = tree.valid & (tree.parent == node[:, None])
    first = kids.float().argmax(-1)
    return torch.where(kids.any(-1), tree.tokens.gather(1, first[:, None]).squeeze(1), torch.full_like(node, -1))


def _tree_round(cache: StreamCache, drafter, prop: Proposal, d, sp: SamplingParams, generator, mark, live,
                pending, slots: Tensor, pos: Tensor) -> RoundResult:
    """Steps 3-4 for a tree (`decoding.tree`): one target pass over its N nodes, the acceptance walk, then the
    accepted path's K/V moved into the stream's next slots and its taps handed to the drafter."""
    tree = prop.tree
    anc = tree.ancestors()
    v = cache.append_tree(tree.feed(), anc, tree.depth, taps=tap_ids(drafter))  # logits [b, N, V]
    w = walk(v.logits, tree, sp, generator, anc, max_depth=min(slots.numel(), tree.nodes) - 1)
    mark()
    acc, nxt = w.accepted, w.next_token[:, None]
    committed = torch.cat([w.tokens, nxt], 1).scatter(1, acc[:, None], nxt)  # [b, D+1]
    host = to_host(torch.cat([acc[:, None], committed], 1))  # the round's one device-to-host copy
    acc_l = host[:, 0].tolist()
    k = max(acc_l) + 1
    kept = acc + 1 if live is None else (acc + 1) * live
    cache.keep_path(w.path, kept, k)
    taps = None if v.taps is None else v.taps.gather(1, w.path[:, :k, None].expand(-1, -1, v.taps.shape[-1]))
    ctx = (taps, slots[None, :k] < kept[:, None], pos[:, :k])
    if pending is not None:
        ctx = join_context(pending, ctx)
    shown = Proposal(w.tokens, extras={**(prop.extras or {}), **tree_record(tree, w.path),
                                       "tree_rejected": first_child(tree, w.path.gather(1, acc[:, None]).squeeze(1))})
    res = VerifyResult(acc, w.next_token, w.target_tokens.gather(1, w.path) if sp.greedy else None)
    return RoundResult(d, shown, v, res, acc_l, pos, ctx, committed, host)
