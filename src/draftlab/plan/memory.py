"""Peak device memory of one step of each stage, as a sum of named terms in bytes (the cost plan's model).

Each function returns `{term: bytes}`; the step's peak is their sum. The terms follow the tensors the code
keeps (read off `drafter/layers.py`, `training/module.py`, `specopd/terms.py`, `verifier/`), counted per row:
- weights: the target's (its dtype) and the drafter's trainable ones (fp32) with their gradients (fp32) and
  AdamW's two moments (fp32): 16 bytes per trainable parameter;
- the drafter's saved activations per block row per layer: 6 H-wide tensors (residual stream and norms, fp32),
  6 q-wide (projection, q-norm, rotary half, the contiguous copy, attention output), 6 kv-wide, 4 SwiGLU-wide;
  per context token per layer 6 kv-wide (its projected, normed, rotated keys and values) and once 3 H-wide (tap
  projection); under bf16-mixed the q/kv/SwiGLU tensors are 2 bytes and each linear's input gets a 2-byte
  autocast copy; gradients are counted in full beside the activations (conservative: Lightning frees them
  between steps, so at the forward's end they do not exist yet);
- attention: `split` (CPU) keeps the [h, L + S] probabilities per row twice (softmax output and the context
  slice's copy) in fp32; `fused` (CUDA SDPA) keeps the block mask, the concatenated keys / values and their
  per-head copies [B, h, L + A S, d] per layer, never the scores;
- the target's pass without gradients: what it keeps (taps, K/V for the tree pass, hidden states or logits)
  plus one layer's transient (4 H-wide and 3 SwiGLU-wide rows, and on CPU the [B, h, L, L] scores);
- logits [rows, V] in fp32: the CE keeps its log-softmax and the backward two gradients (3 × rows × V × 4);
  with row chunks only one chunk's (`chunk_rows`) of them exists, its backward recomputing it;
- DDP (a training step on more than one process): its gradient buckets, one more copy of the trainable gradients
  per rank (`ddp_buckets`);
- SpecOPD without vocab chunks: branch sampling's float64 softmax and cumsum over [rows, V]; the overlap's
  two softmaxes and their minimum; with row chunks all of these per chunk.
The test (tests/plan/test_plan.py) checks the sum against peak memory measured by the torch profiler at three
shapes of the real steps on CPU.
"""
from __future__ import annotations

from draftlab.plan.arch import DrafterShape, TargetShape


def _sum(terms: dict[str, float]) -> int:
    return int(sum(terms.values()))


def target_weights(t: TargetShape, tb: int) -> float:
    return t.params() * tb


def target_pass(t: TargetShape, B: int, L: int, tb: int, fused: bool, layers: int | None = None,
                taps: int = 0, keep_kv: bool = False, keep: str = "none", ctx: int = 0) -> dict[str, float]:
    """One pass of the target over B × L tokens without gradients (attending `ctx` cached tokens too):
    `layers` run (default all), `taps` tap outputs kept, K/V kept (`keep_kv`), and what it returns: none |
    hidden [B, L, H] | logits [B, L, V] (fp32)."""
    n = B * L
    layers = t.num_layers if layers is None else layers
    kd = t.kv_heads * t.head_dim
    out = {"target transient (one layer)": n * (4 * t.hidden + 3 * t.intermediate + 2 * t.heads * t.head_dim) * tb,
           "target mask": B * L * (L + ctx) * (1 + tb)}
    if not fused:
        out["target attention scores (one layer)"] = 2 * B * t.heads * L * (L + ctx) * 4
    if taps:
        out["target taps"] = n * taps * t.hidden * tb
    if keep_kv:
        out["target K/V"] = n * layers * 2 * kd * tb
    if keep == "hidden":
        out["target hidden"] = n * t.hidden * tb
    elif keep == "logits":
        out["target logits"] = n * t.vocab * 4
    return out


def drafter_rows(d: DrafterShape, B: int, L: int, A: int, ab: int, fused: bool) -> dict[str, float]:
    """The drafter's saved activations for B sequences of L context tokens and A blocks of S rows each."""
    R, S = B * A * d.block_size, d.block_size
    H, hd, kd, I = d.hidden, d.heads * d.head_dim, d.kv_heads * d.head_dim, d.intermediate
    cast = 5 * H * 2 if ab == 2 else 0  # autocast's bf16 copies of the q/k/v and gate/up inputs
    per_row = 6 * H * 4 + (6 * hd + 6 * kd + 4 * I) * ab + cast
    out = {"drafter block activations": R * per_row * d.num_layers,
           "drafter context K/V": B * L * (6 * kd * ab * d.num_layers + 3 * H * 4)}
    if fused:
        keys = L + A * S
        out["drafter attention (fused: mask, keys, values)"] = d.num_layers * B * (
            A * S * keys + 2 * keys * (kd + hd) * ab)
    else:
        out["drafter attention (split: probabilities)"] = d.num_layers * R * d.heads * 2 * (L + S) * 4
    return out


def drafter_state(d: DrafterShape, target_vocab: int, tb: int) -> dict[str, float]:
    """Trainable weights, gradients and AdamW moments (fp32) and the draft head's row copy."""
    out = {"drafter weights + grads + AdamW (16 B/param)": d.params() * 16}
    if d.draft_vocab < target_vocab:
        out["draft head rows"] = d.draft_vocab * d.hidden * tb
    return out


def ddp_buckets(trainable: int, world: int, gb: int = 4) -> dict[str, float]:
    """DDP's gradient buckets on each rank of a `world`-process run (none for one process): DDP reduces the
    gradients through flat buckets (bucket_cap_mb, 25 MB by default, is each bucket's size; together they hold every
    trainable gradient), kept beside the gradients themselves (Lightning's DDP keeps gradient_as_bucket_view off):
    one more gradient-sized buffer, `gb` bytes per trainable parameter (fp32 master weights under bf16-mixed)."""
    return {"DDP gradient buckets (a copy of the gradients)": trainable * gb} if world > 1 else {}


def head_logits(rows: int, V: int, chunk: int, kd: bool = False) -> dict[str, float]:
    """The head + CE (+ distillation) over `rows` supervised rows: 3 fp32 [rows, V] tensors, or a chunk's."""
    n = min(rows, chunk) if chunk > 0 else rows
    return {f"logits [{n}, {V}] x{6 if kd else 3}": n * V * 4 * (6 if kd else 3)}


def pretrain_step(t: TargetShape, d: DrafterShape, B: int, L: int, A: int, chunk: int, tb: int, ab: int,
                  fused: bool, labels_greedy: bool = False, kd: bool = False) -> dict[str, float]:
    """One pretraining step with online target features (no cache): the target's pass, the drafter's
    forward + backward, the head + CE; its AdamW state. The target pass is over once the drafter runs, so
    the peak is the larger of the two phases."""
    keep = "logits" if labels_greedy else "none"
    tp = target_pass(t, B, L, tb, fused, None if labels_greedy else d.deepest_tap + 1, d.n_taps, keep=keep)
    drafter = {**drafter_rows(d, B, L, A, ab, fused),
               **head_logits(B * A * (d.block_size - 1), d.draft_vocab, chunk, kd),
               "target taps": B * L * d.n_taps * t.hidden * tb}
    base = {"target weights": target_weights(t, tb), **drafter_state(d, t.vocab, tb)}
    return {**base, **(drafter if _sum(drafter) >= _sum(tp) else tp)}


def specopd_step(t: TargetShape, d: DrafterShape, B: int, L: int, A: int, W: int, chunk: int, vocab_chunk: int,
                 tb: int, ab: int, fused: bool, grad: bool = True) -> dict[str, float]:
    """One SpecOPD update (grad) or its held-out T=1 evaluation (no grad) at B references of L tokens, A
    anchors, W branch slots. Kept through the step: the trunk pass's K/V, taps and hidden states (chunked) or
    logits, the drafter's activations, and unchunked the q [rows, Vd] and p [rows, V] logits. On top, the
    largest of the phases that come and go: the trunk's / the packed tree pass's transient (B·A·(W-1) rows
    over L cached tokens), branch sampling (float64 softmax + cumsum over Vd, or one vocabulary chunk's
    int64 weights), the overlaps' softmaxes and minimum and the backward's gradients (whole, or one row chunk:
    its q and p logits are recomputed there)."""
    rows, V, Vd = B * A * W, t.vocab, d.draft_vocab
    n = min(rows, chunk) if chunk > 0 else rows
    out = {"target weights": target_weights(t, tb)}
    trunk = target_pass(t, B, L, tb, fused, taps=d.n_taps, keep_kv=True, keep="hidden" if chunk else "logits")
    trunk_tmp = {k: trunk.pop(k) for k in list(trunk) if "transient" in k or "scores" in k}
    out.update(trunk)
    act = drafter_rows(d, B, L, A, ab, fused)
    if grad:
        out.update(drafter_state(d, V, tb))
        out.update(act)
    else:  # no gradients: the drafter's activations live one layer at a time
        out.update({k + " (one layer)": v / d.num_layers for k, v in act.items()})
        out["drafter weights"] = d.params() * 4
    if chunk == 0:
        out["q logits [rows, Vd]"] = rows * Vd * 4
        out["p logits [rows, V] (tree)"] = rows * V * 4
    else:
        out["p hidden rows (tree)"] = rows * t.hidden * tb
    tree = target_pass(t, B, A * max(W - 1, 1), tb, fused, ctx=L)
    sampling = 2 * n * (min(vocab_chunk, Vd) if vocab_chunk else Vd) * 8
    overlap = 3 * n * V * 4 + (2 * n * Vd * 4 if grad else 0)
    if chunk:
        overlap += n * (Vd + V) * 4  # the chunk's own q and p logits
    phases = {"trunk pass transient": sum(trunk_tmp.values()), "tree pass transient": sum(tree.values()),
              f"branch sampling [{n}, {min(vocab_chunk, Vd) if vocab_chunk else Vd}] x2 (8 B)": sampling,
              f"overlap + backward [{n}, V]": overlap}
    big = max(phases, key=phases.get)
    out[f"largest phase: {big}"] = phases[big]
    return out


def cotrain_step(t: TargetShape, d: DrafterShape, B: int, L: int, A: int, K: int, width: int,
                 tb: int, ab: int, fused: bool, corrector_params: int) -> dict[str, float]:
    """One co-training step: the target's full pass (greedy labels need its logits), the drafter's step with
    dense logits [B, A, n, Vd] kept for the corrector, and the corrector over K candidates per slot (`width`: the
    fp32 activation values it keeps per candidate, its family's cost model: `Family.cost`)."""
    n = B * A * (d.block_size - 1)
    tp = target_pass(t, B, L, tb, fused, taps=d.n_taps, keep="logits")
    out = {"target weights": target_weights(t, tb), **drafter_state(d, t.vocab, tb),
           "corrector weights + grads + AdamW": corrector_params * 16}
    drafter = {**drafter_rows(d, B, L, A, ab, fused), **head_logits(n, d.draft_vocab, 0),
               "dense drafter logits kept": n * d.draft_vocab * 4,
               "corrector activations": n * K * width * 4 * 4, "target taps": B * L * d.n_taps * t.hidden * tb}
    out.update(drafter if _sum(drafter) >= _sum(tp) else tp)
    return out


def reference_step(t: TargetShape, batch: int, prompt: int, new: int, tb: int, fused: bool) -> dict[str, float]:
    """Batched AR generation: weights, the KV cache at full length, the prefill's transient, last-token logits."""
    kd = t.kv_heads * t.head_dim
    out = {"target weights": target_weights(t, tb),
           "KV cache": batch * (prompt + new) * t.num_layers * 2 * kd * tb,
           **target_pass(t, batch, prompt, tb, fused), "last-token logits": batch * t.vocab * 4}
    return out


def total(terms: dict[str, float]) -> int:
    return _sum(terms)
