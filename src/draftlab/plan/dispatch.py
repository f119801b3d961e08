"""The cost plan's host-dispatch term: aten ops dispatched per step of an eager run, times a per-device cost per op.

On an accelerator a small target's eager step is bound by the host, not the device: every aten op the Python code
dispatches costs ~15 µs of CPU time on the 2026-12-04 H200 machine, whatever its size (docs/gpu.md "The first
accelerator run"). The plan's time model is therefore FLOPs term + bytes term + ops x per-op cost (`PER_OP_US`,
per device kind).

The ops are counted, not taken from the docs: `draftlab.measure.dispatch_count.count()` runs each step of the project's own code — the target's
prefill and AR step, one speculative round of every arm kind, a validation batch and the training steps — under a
`TorchDispatchMode` that counts every op it sees, on random models of the SmolLM2 widths (hidden 576, 9 / 3 heads,
intermediate 1536; bf16 as on the accelerator, training under bf16 autocast), at three layer counts, and fits
    ops = base + per_target_layer x target layers + per_drafter_layer x drafter layers (+ per_chunk x chunks)
(exact: an eager forward dispatches the same ops per layer). The counts depend on the code, not on the widths or the
weights, so they are counted once per commit that changes them and kept in `dispatch_counts.json` beside this module
with the commit and library versions they were counted at; `python -m draftlab.measure.dispatch_count --write` recounts
(~1 minute on 2 cores; the counting runs the methods' own code, so it lives in the benchmark's layer, above the
configuration this module belongs to) and `tests/plan/test_dispatch.py` recounts and compares (docs/decisions.md "A run that fits its
call"). Counted on CPU: the CUDA build dispatches the same ops but for the fused attention kernels' names.
"""
from __future__ import annotations

import json
from pathlib import Path

COUNTS = Path(__file__).with_name("dispatch_counts.json")
# host cost per dispatched aten op of an eager step, µs, per device kind: the 2026-12-04 H200 run (a target forward
# of ~2,400 ops took ~36 ms at any size below the bandwidth floor). CPU: the cpu preset's own fitted value
# (`draftlab.plan.stages.PRESETS`, docs/plan.md); a bare `Device(kind="cpu")` has none and says so.
PER_OP_US: dict[str, float] = {"cuda": 15.0}
# the round of every corrector family's arms: one family's round, counted (`draftlab.measure.dispatch_count --family`;
# dispatch_counts.json names it beside the counts), stands for all of them
CORRECTOR_ROUND = "corrector_round"
# the steps counted, and what one of them is
STEPS = {
    "prefill": "the target's prefill of a batch of prompts (AR and speculative engines alike)",
    "ar_step": "one AR decode step of a batch (target forward at width 1, sampling, bookkeeping)",
    "dflash_round": "one speculative round with the DFlash drafter (context + block step, verify at width S, commit)",
    "pld_round": "one prompt-lookup round (no drafter; verify at the matched width)",
    "hybrid_round": "one dflash-pld round (drafter + lookup)",
    "seeded_cut_round": "one dflash-seeded-cut round (seeded drafter, span-cut verify)",
    CORRECTOR_ROUND: "one corrector round (drafter + a corrector family's proposal step; the family counted is named "
                     "beside it)",
    "val_batch": "one validation batch of the drafter trainer (target taps + greedy, drafter blocks, top-K)",
    "pretrain_step": "one pretraining step (target taps, drafter forward + backward, chunked head + CE, AdamW)",
    "specopd_step": "one SpecOPD update (trunk pass, branches, tree scoring, E2E-TV, backward, AdamW)",
}
ROUND_STEPS = {"dflash": "dflash_round", "pld": "pld_round", "dflash-pld": "hybrid_round",
               "dflash-seeded-cut": "seeded_cut_round"}
WIDTHS = dict(hidden_size=576, num_heads=9, num_kv_heads=3, intermediate_size=1536)  # SmolLM2-135M's
LAYERS = ((2, 1), (4, 1), (2, 2))  # (target, drafter) layer counts the fit is made from
CHUNKS = (1, 3)  # head chunks of the training steps' fit


def per_op_us(kind: str) -> float | None:
    return PER_OP_US.get(kind)


def load() -> dict:
    return json.loads(COUNTS.read_text())


def ops(step: str, target_layers: int, drafter_layers: int = 0, chunks: int = 1, counts: dict | None = None) -> float:
    """Dispatched ops of one `step` (STEPS) for a target of `target_layers` and a drafter of `drafter_layers`, with
    `chunks` head chunks (training steps), from the fit in dispatch_counts.json."""
    c = (counts or load())["steps"][step]["fit"]
    return (c["base"] + c["per_target_layer"] * target_layers + c["per_drafter_layer"] * drafter_layers
            + c.get("per_chunk", 0.0) * max(chunks - 1, 0))


def corrector_arms(params) -> tuple[str, ...]:
    """The arm methods whose rounds run a corrector's proposal step: the corrector families' (their records' `arms`,
    handed in with the params' corrector section: this layer imports no method); () when loaded without them."""
    records = getattr(params.corrector, "records", None) or {}
    return tuple(m for f in records.values() for m in f.arms)


def round_step(arm: str, correctors: tuple[str, ...] = ()) -> str:
    """The counted round of a benchmark arm: an arm of a corrector family (`correctors`: `corrector_arms(params)`)
    runs the counted corrector round (`corrector_round`: drafter + corrector proposal step); an unknown speculative arm
    counts as a DFlash round."""
    base = arm.removesuffix("-t1")
    if base in ("ar", "hf-generate"):  # Hugging Face's generate: an AR step of the same model
        return "ar_step"
    if base == "hf-generate-pld":  # its prompt lookup: a lookup round
        return "pld_round"
    if base in ROUND_STEPS:
        return ROUND_STEPS[base]
    if any(base == m or base.startswith(m + "-") for m in correctors):
        return CORRECTOR_ROUND
    return "dflash_round"
