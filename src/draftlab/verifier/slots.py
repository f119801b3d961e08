"""Per-stream rows of slots over a K/V buffer: the static layout both the target's streams and the drafter's context
use at inference.

Stream b's committed tokens sit in slots 0..lengths[b]-1 of its row, in order: no padding slots, no holes. New
tokens are written at the next free slots (their logical positions too), and each new token attends over its row's
slots below its own position + 1 — a mask made on the device from `lengths`, never from a host copy. Keeping only
the first n of the new tokens is moving `lengths` (the rest is written over later). A token marked invalid (a
left-padding position of a ragged prefill, a context slot the drafter must not see) writes into the buffer's last
slot, a scratch slot no mask reaches. So a pass of a given number of streams and new tokens always has the same
shapes, whatever the streams accepted.

The capacity is fixed when it is given (the longest prompt + the new tokens + two blocks + the scratch slot:
`capacity_for`); given as 0 it starts small and doubles. Room is judged on a host-side upper bound of the fills
(appends add their width, a commit that knows the most any stream kept takes the rest off), so no round reads the
fills from the device; only when the bound says the buffer is full are the fills read, once. A request that needs
more than a fixed capacity is refused in one line naming `engine.kv_capacity`.
"""
from __future__ import annotations

import torch
from torch import Tensor

from draftlab.compiling import static_buffer
from draftlab.errors import DraftlabError
from draftlab.verifier.forward import KVCache, slot_plan  # noqa: F401  (slot_plan: part of this module's API)


def capacity_for(prompt_lengths: list[int], max_new_tokens: int, block: int = 1) -> int:
    """Slots a stream needs: its prompt, max_new_tokens more, room for one append past the last committed token —
    two blocks: a verify pass appends a block, and the drafter's context after a round without a draft pass joins
    two rounds' positions (`round.join_context`; room is judged on the append's width) —, and the scratch slot.
    (Compiled steps: one capacity per run, `decoding.shapes`.)"""
    return max(prompt_lengths) + max_new_tokens + 2 * block + 1


class StreamSlots:
    """`num_layers` K/V buffers [B, heads, capacity, head_dim] with per-stream fills `lengths` [B] (device)."""

    def __init__(self, num_layers: int, batch: int, heads: int, head_dim: int, dtype, device, capacity: int = 0):
        self.kv = KVCache(num_layers)
        self.heads, self.head_dim, self.dtype, self.device = heads, head_dim, dtype, device
        self.fixed = capacity > 0
        self.lengths = static_buffer(torch.zeros(batch, dtype=torch.long, device=device))  # written in place
        self.bound = 0  # host-side upper bound of max(lengths) (no device read needed to size the buffer)
        self._grow(batch, capacity or 64)

    @property
    def capacity(self) -> int:
        return self.kv.capacity

    @property
    def batch(self) -> int:
        return self.lengths.shape[0]

    @property
    def width(self) -> int:
        return self.capacity

    @property
    def valid(self) -> Tensor:
        """[B, capacity] bool: the slots that hold committed tokens."""
        return torch.arange(self.capacity, device=self.lengths.device)[None, :] < self.lengths[:, None]

    def _grow(self, batch: int, capacity: int) -> None:
        """Buffers of exactly `capacity` slots, the existing slots copied over."""
        kv, old = self.kv, self.kv.capacity
        for i in range(len(kv.k)):
            # zeros, not empty: a masked slot's weight is exactly 0, but 0 x NaN (uninitialised memory) is NaN
            k = torch.zeros(batch, self.heads, capacity, self.head_dim, dtype=self.dtype, device=self.device)
            v = torch.zeros_like(k)
            if old:
                k[:, :, :old - 1] = kv.k[i][:, :, :old - 1]  # (the old scratch slot is not carried)
                v[:, :, :old - 1] = kv.v[i][:, :, :old - 1]
            kv.k[i], kv.v[i] = static_buffer(k), static_buffer(v)
        kv.length = capacity  # every slot belongs to the rows (select_streams copies them all)

    def room(self, T: int) -> None:
        """Make room for T more tokens per stream (grow a growable buffer; refuse past a fixed one)."""
        need = self.bound + T + 1  # + the scratch slot
        if need <= self.capacity:
            return
        self.bound = int(self.lengths.max()) if self.batch else 0  # the bound drifted up: read the fills (rare)
        need = self.bound + T + 1
        if need <= self.capacity:
            return
        if self.fixed:
            raise DraftlabError(f"the KV buffer holds {self.capacity - 1} tokens per stream and this request needs "
                                f"{need - 1}: raise engine.kv_capacity (0 = sized from the request)")
        self._grow(self.batch, max(need, 2 * self.capacity))

    def plan(self, new_valid: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """For T new tokens per stream (new_valid [B, T]): (write slots [B, T] — the next free slots for the valid
        ones, the scratch slot for the rest —, logical positions [B, T], mask [B, T, capacity])."""
        self.room(new_valid.shape[1])
        return slot_plan(self.lengths, new_valid, self.capacity)

    def advance(self, counts: Tensor, most: int) -> None:
        """lengths += counts [B]; `most` = an upper bound of counts (host side)."""
        self.lengths.add_(counts)
        self.bound += most

    def retract(self, counts: Tensor, released: int = 0) -> None:
        """lengths -= counts [B] (the rejected tail of the last append); `released`: a host-side lower bound of
        min(counts), taken off the fill's upper bound (0 when the caller does not know it)."""
        self.lengths.sub_(counts)
        self.bound -= released

    def select(self, idx: Tensor) -> None:
        """Keep the streams idx [B'] (long), in that order, at the same capacity."""
        idx = idx.to(self.lengths.device)
        self.kv.select_streams(idx)
        self.lengths = static_buffer(self.lengths.index_select(0, idx))  # a new batch: a new buffer, written in place
