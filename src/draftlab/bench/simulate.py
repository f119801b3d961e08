"""Simulated τ: the drafter teacher-forced over given sequences (at T=0 the engine's outputs, which equal
the target's greedy text), judged with the same `greedy_accept_length` as everything else.

Two paths, both over every `stride`-th anchor that leaves room for a full block:
- `train`: the drafter's training forward (`forward_train`, all blocks in one pass with block masks;
  a seeded drafter seeds every anchor teacher-forced, `draftlab.ngram.sequence_seeds`);
- `infer`: the inference API (`new_state` / `extend_context` / `block_input` / `draft`), one stream per
  anchor with the context after the anchor masked out; a seeded drafter's state is started on each
  anchor's text x_{<=a}, so its seeds come from the engine's incremental index.
A gap between the two points at the drafter's serving path; a gap between them and the engine's τ at
the engine's plumbing (positions, context features, cache cropping) — or at anchor placement, since
the engine only anchors where rounds start.
"""
from __future__ import annotations

import torch
from torch import Tensor

from draftlab.decoding.api import TracksStreams
from draftlab.decoding.round import block_input, tap_ids
from draftlab.decoding.verify import greedy_accept_length


def _anchors(seq_len: int, prompt_len: int, S: int, stride: int) -> Tensor:
    lo, hi = max(prompt_len, 1), seq_len - S  # anchor a: slot 0 = x_a, labels x_{a+1..a+S-1}
    return torch.arange(lo, hi + 1, stride) if hi >= lo else torch.zeros(0, dtype=torch.long)


@torch.no_grad()
def simulated_tau(target, drafter, seqs: list[tuple[list[int], list[int]]], stride: int = 1,
                  paths: tuple[str, ...] = ("train", "infer"), max_anchors_per_pass: int = 64) -> dict:
    """seqs: (prompt_ids, response_ids) pairs. Returns {path: τ} (per sequence, then averaged) and
    per-slot acceptance {path_curve: [n]}; sequences with no full block are skipped."""
    S, taps, dev = drafter.block_size, tap_ids(drafter), target.device
    per_path: dict[str, list[float]] = {p: [] for p in paths}
    curves: dict[str, list[Tensor]] = {p: [] for p in paths}
    for prompt, resp in seqs:
        ids = torch.tensor([list(prompt) + list(resp)], device=dev)  # [1, L]
        L = ids.shape[1]
        anchors = _anchors(L, len(prompt), S, stride).to(dev)  # [A]
        if anchors.numel() == 0:
            continue
        feats = target(ids, taps=taps).taps  # [1, L, n_taps*H]
        labels = ids[0, anchors[:, None] + torch.arange(1, S, device=dev)]  # [A, n]
        for path in paths:
            preds = []
            for chunk in anchors.split(max_anchors_per_pass):
                fn = _train_path if path == "train" else _infer_path
                preds.append(fn(drafter, feats, ids, chunk))
            acc = greedy_accept_length(torch.cat(preds), labels)  # [A]
            per_path[path].append(float((acc + 1).float().mean()))
            curves[path].append((acc[:, None] >= torch.arange(1, S, device=dev)).float().mean(0).cpu())
    out: dict = {}
    for p in paths:
        if per_path[p]:
            out[p] = sum(per_path[p]) / len(per_path[p])
            out[f"{p}_curve"] = torch.stack(curves[p]).mean(0).tolist()
    out["sequences"] = max((len(v) for v in per_path.values()), default=0)
    return out


def train_proposals(drafter, feats: Tensor, ids: Tensor, anchors: Tensor) -> Tensor:
    """The drafter's teacher-forced proposals [A, n] (target ids) at anchors [A] of ids [1, L] (feats [1, L, F],
    the target's taps): simulated τ's `train` path, also what the pretrain_seeded comparison judges."""
    return _train_path(drafter, feats, ids, anchors)


def _train_path(drafter, feats: Tensor, ids: Tensor, anchors: Tensor) -> Tensor:
    """Proposals [A, n] (target ids) from the training forward."""
    valid = torch.ones(ids.shape, dtype=torch.bool, device=ids.device)  # [1, L]
    if getattr(drafter, "reads_seeds", False):  # a seeded drafter whose logits read its seeds (column / bias)
        seeds = drafter.train_seeds(ids, anchors[None])  # [1, A, n]
        hidden = drafter.forward_train(feats, valid, ids, anchors[None], seeds)  # [1, A, S, H]
        return drafter.to_target(drafter.logits(hidden[0, :, 1:], seeds[0]).argmax(-1), seeds[0])  # [A, n]
    hidden = drafter.forward_train(feats, valid, ids, anchors[None])  # [1, A, S, H]
    idx = drafter.logits(hidden[0, :, 1:]).argmax(-1)  # [A, n]
    vocab = getattr(drafter, "draft_vocab", None)
    return idx if vocab is None else vocab[idx]


def _infer_path(drafter, feats: Tensor, ids: Tensor, anchors: Tensor) -> Tensor:
    """Proposals [A, n] through the inference API, one stream per anchor (context j < anchor)."""
    A, L, S = anchors.numel(), ids.shape[1], drafter.block_size
    state = drafter.new_state(A)
    pos = torch.arange(L, device=ids.device)  # [L]
    drafter.extend_context(state, feats.expand(A, -1, -1), pos[None, :] < anchors[:, None], pos.expand(A, L))
    last = ids[0, anchors]  # [A] slot 0
    if isinstance(state, TracksStreams):  # e.g. a seeded drafter: the committed text x_{<a} + slot 0
        row = ids[0].tolist()
        state.start([row[:a] for a in anchors.tolist()], last)
    block = block_input(drafter, state, last)  # [A, S]
    out = drafter.draft(state, block, anchors[:, None] + torch.arange(S, device=ids.device))
    if hasattr(out, "argmax"):  # the DFlash draft maps its own indices (incl. a seed column) to target ids
        return out.argmax()[:, 1:]  # [A, n]
    idx = out.logits[:, 1:].argmax(-1)  # [A, n]
    return idx if out.vocab is None else out.vocab[idx]
