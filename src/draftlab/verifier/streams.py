"""N streams of the target decoded together over one static K/V buffer (`slots.StreamSlots`).

Stream b's committed tokens sit in slots 0..lengths[b]-1 of its row: an append writes each stream's new tokens at
its next slots and logical positions, `commit` keeps the first n of them by moving the fill, a ragged prefill's left
padding writes into the scratch slot. So a verify pass of b streams and T tokens has the same shapes every round,
whatever the streams accepted, and no hole is ever compacted. Dropping finished streams keeps the capacity.
"""
from __future__ import annotations

import torch
from torch import Tensor

from draftlab.verifier.forward import stream_step, tree_step
from draftlab.verifier.model import TargetModel, TargetOutput
from draftlab.verifier.slots import StreamSlots, capacity_for  # noqa: F401  (the engines size with it)


class StreamCache(StreamSlots):
    def __init__(self, target: TargetModel, batch: int, capacity: int = 0, device: torch.device | None = None,
                 shapes=None):
        super().__init__(target.num_layers, batch, target.kv_heads, target.head_dim, target.dtype,
                         device or target.device, capacity)
        self.target = target
        self.shapes = shapes  # compiled steps: the run's declared shapes (`decoding.shapes.Shapes`), else None
        self.prompt_valid: Tensor | None = None  # [B, Tp] the prefill's token validity (left padding: False)
        self._last_valid: Tensor | None = None  # [B, T] of the last append

    @property
    def cache(self):
        return self.kv

    @property
    def next_pos(self) -> Tensor:
        return self.lengths

    def prefill(self, prompts: list[list[int]], pad_id: int, taps=(), last_logits_only: bool = False) -> TargetOutput:
        """One prompt per stream, left-padded to the longest: the output's rows follow the padded layout (logits
        [B, Tp, V] — or [B, 1, V], the last prompt token's, with last_logits_only — and taps [B, Tp, ...]);
        `prompt_valid` [B, Tp] says which rows are tokens; each stream's tokens land in its slots 0..len-1."""
        T = max(len(p) for p in prompts)
        dev = self.lengths.device
        ids = torch.full((self.batch, T), pad_id, dtype=torch.long, device=dev)
        new_valid = torch.zeros(self.batch, T, dtype=torch.bool, device=dev)
        for b, p in enumerate(prompts):
            ids[b, T - len(p):] = torch.tensor(p, dtype=torch.long, device=dev)
            new_valid[b, T - len(p):] = True
        self.prompt_valid = new_valid
        return self.append(ids, new_valid, taps=taps, logits_to_keep=1 if last_logits_only else 0, width=T)

    @torch.no_grad()
    def append(self, ids: Tensor, new_valid: Tensor | None = None, taps=(), logits_to_keep: int = 0,
               width: int | None = None) -> TargetOutput:
        """Run ids [B, T] after each stream's committed tokens; they are valid unless new_valid says not, and the
        valid ones take the next slots and logical positions. `width`: attend over the first `width` slots only
        (a prefill into empty rows); by default over the whole buffer (one shape for every round)."""
        B, T = ids.shape
        if new_valid is None:
            new_valid = torch.ones(B, T, dtype=torch.bool, device=ids.device)
        self.room(T)
        step = stream_step if width is not None else self.target.step  # a prefill's shape is its own: eager
        logits, tap, lengths = step(self.target.model, self.kv, self.lengths, ids, new_valid, width or self.capacity,
                                    tuple(taps), logits_to_keep)
        self.lengths.copy_(lengths)  # the fills live in one buffer, written in place (compiling: CUDA-graph rules)
        self.bound += T
        self._last_valid = new_valid
        return TargetOutput(logits, tap)

    @torch.no_grad()
    def append_tree(self, ids: Tensor, anc: Tensor, depth: Tensor, taps=()) -> TargetOutput:
        """Score a tree of N nodes per stream (ids [B, N], node 0 the last committed token: `decoding.tree`) after each
        stream's committed tokens: node i's K/V go to slot lengths + i, at position lengths + depth, and each node
        attends over the committed slots, its ancestors and itself. The fills do not move until `keep_path`."""
        N = ids.shape[1]
        self.room(N)
        logits, tap = self.target.tree(self.target.model, self.kv, self.lengths, ids, anc, depth, self.capacity,
                                       tuple(taps))
        return TargetOutput(logits, tap)

    def keep_path(self, path: Tensor, n_keep: Tensor, most_kept: int | None = None) -> None:
        """After `append_tree`: move the K/V of the nodes path [B, P] (node indices, root first) into the stream's
        next P slots and keep the first n_keep[b] of them (the accepted path); the other nodes are written over
        later. `most_kept`: max(n_keep) on the host, if known (the fill's upper bound)."""
        P = path.shape[1]
        src = self.lengths[:, None] + path  # [B, P]
        dst = self.lengths[:, None] + torch.arange(P, device=path.device)[None, :]
        kv = self.kv
        for i in range(len(kv.k)):
            for buf in (kv.k[i], kv.v[i]):
                at = lambda t: t[:, None, :, None].expand(-1, buf.shape[1], -1, buf.shape[3])  # noqa: E731
                buf.scatter_(2, at(dst), buf.gather(2, at(src)))
        self.advance(n_keep, P if most_kept is None else most_kept)

    def verify_width(self, T: int) -> int:
        """The width a verify pass of T tokens runs at: a declared width (compiled steps; the extra slots are never
        kept), else T."""
        return T if self.shapes is None else self.shapes.width(T)

    def commit(self, n_keep: Tensor, T: int, most_kept: int | None = None) -> None:
        """After an append of T tokens, keep only the first n_keep[b] of them per stream; `most_kept` (host side, if
        the caller has it) = max(n_keep): keeps the fill's upper bound tight, so the buffer is sized by what was
        committed, not by what was verified."""
        self.retract(self._last_valid[:, -T:].long().sum(-1) - n_keep, 0 if most_kept is None else T - most_kept)

    def compact(self, min_hole_fraction: float = 0.25) -> bool:
        """Nothing to squeeze: committed tokens are always contiguous."""
        return False

    def drop_streams(self, keep: Tensor) -> None:
        """Remove finished streams (keep: bool [B]); the buffer keeps its capacity."""
        idx = keep.nonzero().squeeze(-1)
        self.select(idx)
        if self._last_valid is not None:
            self._last_valid = self._last_valid.index_select(0, idx.to(self._last_valid.device))
