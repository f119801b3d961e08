"""Recipe of the pretrain_seeded stage: the seeded drafter (docs/algorithms.md "Seeded block drafting") trained beside
the plain one, and its comparison table against what it must beat, teacher-forced on the held-out references.
`pretrain_seeded` trains with `draftlab.recipes.pretrain.recipe` (the plain drafter's
recipe, the seeded sections resolved from the `seeded` config section) and adds `report["comparison"]`
(`heldout_comparison`).

On the anchors of the pretraining validation (every `stride`-th response position that leaves room for a full
block: `drafter.masks.strided_anchors`) and against the same labels (the target's greedy token at a+k, from
its forward over the reference), four proposal steps are judged by `greedy_accept_length`:
- `seeded`: the seeded drafter's training forward (`bench.simulate.train_proposals`, seeds from the text x_{<=a});
- `lookup`: prompt lookup alone, as the `pld` arm proposes with one stream (`pld.max_ngram`, `pld.num_tokens`,
  any match; only the proposed tokens are verified, so without a match the block is τ 1);
- `hybrid`: the `dflash-pld` routing hybrid — the lookup where an n-gram of >= `pld.min_match` tokens matched,
  the plain drafter elsewhere, in the arm's `pld.hybrid` mode (`switch`: the whole block from the lookup,
  padded as the arm pads; `splice`: the lookup's tokens, then the plain drafter's);
- `plain`: the plain drafter (models/drafter/pretrained) alone.
Both lookups walk `draftlab.ngram.NgramIndex` once per sequence, the index the engine's lookup uses.

Figures, on all held-out sequences and separately on looping and non-looping ones (`bench.copying.looped` on the
reference answer: an 8-token span repeated later in it):
- `tau`: the mean over blocks of 1 + accepted prefix (the pretraining validation's averaging: the seeded row
  equals the stage's held-out simulated τ up to the feature cache's fp16 rounding), `tau_per_sequence`: the
  mean over sequences of each sequence's block mean;
- pairs `seeded - X`: the difference of those two means, each with a percentile-bootstrap interval that
  resamples *sequences* (the blocks of one sequence are not independent), and whether it excludes 0.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from draftlab.bench.copying import LOOP_SPAN, looped
from draftlab.bench.simulate import train_proposals
from draftlab.decoding.lookup import pad
from draftlab.decoding.verify import greedy_accept_length
from draftlab.drafter.masks import strided_anchors
from draftlab.errors import DraftlabError
from draftlab.ngram import NgramIndex
from draftlab.recipes.pretrain.recipe import PretrainOutcome, pretrain_from_references
from draftlab.stats import percentile_interval
from draftlab.training.features import SequenceSet, target_features

METHODS = ("seeded", "lookup", "hybrid", "plain")
PAIRS = (("seeded", "lookup"), ("seeded", "hybrid"), ("seeded", "plain"))
SUBSETS = ("all", "looping", "non_looping")


def lookup_blocks(tokens: list[int], anchors: list[int], n: int, max_ngram: int, num_tokens: int,
                  min_match: int) -> list[list[int]]:
    """Per anchor a: the lookup's proposal on the text tokens[:a+1] (at most min(num_tokens, n) tokens; [] when no
    n-gram of >= min_match tokens matched), one pass over the sequence."""
    want, out, idx = set(anchors), {}, NgramIndex([], max_ngram)
    for p, t in enumerate(tokens[:max(anchors, default=-1) + 1]):
        idx.extend([t])
        if p in want:
            out[p] = idx.lookup(min(num_tokens, n), min_match)[0]
    return [out[a] for a in anchors]


def block_proposals(tokens: list[int], anchors: list[int], plain: torch.Tensor, n: int, pld) -> dict:
    """{lookup, hybrid}: (proposals [A, n], valid [A, n]) of the two lookup steps; plain [A, n] the plain
    drafter's proposals (the hybrid's fallback). pld: max_ngram, num_tokens, min_match, hybrid."""
    A = len(anchors)
    look = lookup_blocks(tokens, anchors, n, pld.max_ngram, pld.num_tokens, 1)
    route = look if pld.min_match == 1 else lookup_blocks(tokens, anchors, n, pld.max_ngram, pld.num_tokens,
                                                          pld.min_match)
    lk = torch.tensor([pad(t, n, tokens[a]) for t, a in zip(look, anchors)], dtype=torch.long).view(A, n)
    lv = torch.arange(n)[None, :] < torch.tensor([len(t) for t in look])[:, None]  # the engine verifies what matched
    hy = plain.clone()
    for j, (t, a) in enumerate(zip(route, anchors)):
        if t:
            row = pad(t, n, tokens[a]) if pld.hybrid == "switch" else t
            hy[j, :len(row)] = torch.tensor(row, dtype=torch.long)
    return {"lookup": (lk, lv), "hybrid": (hy, torch.ones(A, n, dtype=torch.bool))}


@torch.no_grad()
def sequence_blocks(target, seeded, plain, seqs: SequenceSet, indices: list[int], stride: int, pld,
                    log: Callable[[str], None] = print) -> list[dict]:
    """Per sequence with at least one anchor: {index, loop, tau: {method: [A] float array of 1 + accepted}}."""
    S = seeded.block_size
    if plain.block_size != S:
        raise DraftlabError(f"the seeded drafter's block size ({S}) differs from the plain drafter's "
                            f"({plain.block_size}); the comparison needs the same anchors: drop seeded.drafter.block_size")
    n, dev, rows = S - 1, target.device, []
    taps = {id(d): list(d.target_layer_ids) for d in (seeded, plain)}
    for count, i in enumerate(indices):
        tokens, P = seqs.seq(i).tolist(), int(seqs.prompt_len[i])
        anchors = strided_anchors(len(tokens), P, S, stride)  # [A]
        if anchors.numel() == 0:
            continue
        ids = torch.tensor([tokens], device=dev)  # [1, L]
        valid = torch.ones_like(ids, dtype=torch.bool)
        feats: dict[tuple, torch.Tensor] = {}
        greedy = None
        for t in {tuple(v) for v in taps.values()}:
            feats[t], g = target_features(target, ids, valid, list(t), greedy=greedy is None)
            greedy = g if greedy is None else greedy
        a = anchors.to(dev)
        labels = greedy[0, a[:, None] + torch.arange(1, S, device=dev)].cpu()  # [A, n] the target's greedy tokens
        props = {name: train_proposals(d, feats[tuple(taps[id(d)])], ids, a).cpu()  # [A, n]
                 for name, d in (("seeded", seeded), ("plain", plain))}
        steps = {"seeded": (props["seeded"], None), "plain": (props["plain"], None),
                 **block_proposals(tokens, anchors.tolist(), props["plain"], n, pld)}
        tau = {m: (1 + greedy_accept_length(steps[m][0], labels, steps[m][1])).double().numpy() for m in METHODS}
        rows.append({"index": int(i), "loop": looped(tokens[P:], LOOP_SPAN), "tau": tau})
        if (count + 1) % 16 == 0:
            log(f"comparison: {count + 1}/{len(indices)} held-out sequences")
    return rows


def summarise(rows: list[dict], n_boot: int = 2000, level: float = 0.95, seed: int = 0) -> dict:
    """{subset: {sequences, blocks, tau: {method: τ}, tau_per_sequence: {...}, pairs: {"seeded-X": {...}}}}
    from `sequence_blocks` rows; intervals resample sequences (n_boot percentile-bootstrap replicates, the
    same resamples for every pair of a subset; None below two sequences or with n_boot = 0)."""
    out = {}
    for subset in SUBSETS:
        sel = [r for r in rows if subset == "all" or r["loop"] == (subset == "looping")]
        m = len(sel)
        blocks = np.array([len(r["tau"]["seeded"]) for r in sel], dtype=float)  # [m]
        sums = {k: np.array([r["tau"][k].sum() for r in sel]) for k in METHODS}  # [m] per method
        means = {k: sums[k] / np.maximum(blocks, 1) for k in METHODS}  # [m] each sequence's block mean
        entry: dict = {"sequences": m, "blocks": int(blocks.sum()),
                       "tau": {k: float(sums[k].sum() / blocks.sum()) if m else None for k in METHODS},
                       "tau_per_sequence": {k: float(means[k].mean()) if m else None for k in METHODS}, "pairs": {}}
        boot = np.random.default_rng(seed).integers(0, m, (n_boot, m)) if m >= 2 and n_boot else None  # [R, m]
        for a, b in PAIRS:
            d_sum, d_mean = sums[a] - sums[b], means[a] - means[b]  # [m]
            row: dict = {"diff": float(d_sum.sum() / blocks.sum()) if m else None,
                         "diff_per_sequence": float(d_mean.mean()) if m else None, "ci": None, "ci_per_sequence": None,
                         "units": {"unit": "sequence", "n": m}}  # both intervals resample held-out sequences
            if boot is not None:
                row["ci"] = percentile_interval(d_sum[boot].sum(1) / blocks[boot].sum(1), level)
                row["ci_per_sequence"] = percentile_interval(d_mean[boot].mean(1), level)
            for key in ("ci", "ci_per_sequence"):
                ci = row[key]
                row[f"{key}_excludes_0"] = None if ci is None else bool(ci[0] > 0 or ci[1] < 0)
            entry["pairs"][f"{a}-{b}"] = row
        out[subset] = entry
    return out


def heldout_comparison(target, seeded, plain, seqs: SequenceSet, stride: int, pld, n_boot: int = 2000,
                       level: float = 0.95, seed: int = 0, split: str = "heldout",
                       log: Callable[[str], None] = print) -> dict:
    """The comparison table (module docstring) on the `split` sequences of `seqs`."""
    indices = seqs.indices(split)
    if not indices:
        raise DraftlabError(f"the references have no split=='{split}' sequences to compare the seeded drafter on; "
                            "raise reference.num_heldout_prompts")
    rows = sequence_blocks(target, seeded, plain, seqs, indices, stride, pld, log)
    return {"split": split, "anchor_stride": stride, "labels": "target greedy", "loop_rule":
            f"an {LOOP_SPAN}-token span of the reference answer repeated later in it",
            "lookup": {"max_ngram": pld.max_ngram, "num_tokens": pld.num_tokens, "hybrid_min_match": pld.min_match,
                       "hybrid": pld.hybrid}, "ci_level": level, "bootstrap": n_boot,
            "looping_sequences": [r["index"] for r in rows if r["loop"]],
            **summarise(rows, n_boot, level, seed),
            "per_sequence": [{"index": r["index"], "loop": r["loop"], "blocks": len(r["tau"]["seeded"]),
                              "tau": {m: float(r["tau"][m].mean()) for m in METHODS}} for r in rows]}


def pretrain_seeded(target, df, plain, dcfg, pcfg, pld, work_root, logger=None, log: Callable[[str], None] = print,
                    n_boot: int = 2000, level: float = 0.95, seed: int = 0, feature_root=None) -> PretrainOutcome:
    """references (DataFrame) -> the trained seeded drafter + its report with `comparison` (the held-out table
    against prompt lookup, the `dflash-pld` hybrid and `plain`, the plain drafter of models/drafter/pretrained).
    dcfg / pcfg: the seeded drafter's resolved sections (`SeededConfig.resolve`); pld: the `pld` section;
    feature_root: where the tap-feature cache lives (None: work_root/features)."""
    if dcfg.seed == "none":
        raise DraftlabError("pretrain_seeded trains a seeded drafter: resolve its drafter section with "
                            "SeededConfig.resolve (seed=lookup)")
    if plain.arch.seeded:
        raise DraftlabError("the comparison's plain drafter is seeded; models/drafter/pretrained must hold the plain "
                            "drafter (drafter.seed=none): re-run the pretrain_drafter stage")
    out = pretrain_from_references(target, df, dcfg, pcfg, work_root, logger=logger, log=log, feature_root=feature_root)
    seqs = SequenceSet.from_dataframe(df)
    comp = heldout_comparison(target, out.drafter, plain, seqs, pcfg.val_anchor_stride, pld, n_boot, level, seed,
                              log=log)
    a = comp["all"]
    log(f"comparison on {a['sequences']} held-out sequences ({a['blocks']} blocks): seeded {a['tau']['seeded']:.3f}, "
        f"lookup {a['tau']['lookup']:.3f}, hybrid {a['tau']['hybrid']:.3f}, plain {a['tau']['plain']:.3f}; "
        f"seeded - lookup {a['pairs']['seeded-lookup']['diff']:+.3f} {a['pairs']['seeded-lookup']['ci']}")
    out.report["comparison"] = comp
    return out
