"""A world's properties from its generator alone, before anything trains: what an ideal slot-wise drafter would see.

The ideal slot-wise drafter knows the answer up to its anchor and where in the prompt that anchor's source sits, and
nothing about the prompt beyond it: for slot k it spreads its mass over the source symbols at relative offsets from
the anchor's source (and the marks), by how often each holds the answer at that slot over the family's examples (a
prior per family, slot and the anchor's phase: whether it and its predecessor are symbols or marks, and whether it
repeats its predecessor; and, where a family's source symbols come in variants, the variant it reads at its own
source: `capslock`'s toggles, with the case relative to the anchor's as part of what it predicts). So it is right at
slot k exactly when the drift between the anchor and slot k is the most common one, and it holds the answer among its
top K while the drift stays within the K most common ones. Marks (`+`, `-`) are ranked by their frequency in the target's T=0 answers (greedy
writes the likelier mark). Three figures per family and slot (T=0, the greedy answers the target is trained to
write, marks at their likelier value):
- `top1[k]`, `topk[k]`: the share of anchors whose slot-k answer is the drafter's first candidate / among its K;
- `tau_argmax`: 1 + the leading run of slots whose first candidate is right (a chain of `block` − 1 proposals and the
  bonus token), averaged over anchors (every answer position but the last); `tau_oracle`: the same with "among the
  top K" (the reachable oracle: a corrector that re-selects the right candidate wherever the drafter holds it);
- `high_entropy_share` (over the world's mix, by family weight): answer positions whose training distribution has
  ≥ 0.5 nats (a mark drawn with MARK_P: 0.61 nats), the T=1 room; `pair_break_t1` for families whose marks come in
  equal pairs: how often independent per-slot sampling of both marks writes an unequal pair (2 p (1 − p)).
The bars the trained world must meet are read against these (docs/decisions.md, "A world with room for correctors").
"""
from __future__ import annotations

from collections import Counter, defaultdict

from draftlab.toy.tasks import FAMILIES, MARK_P, WorldConfig, examples

ENTROPY_BAR = 0.5  # nats


def _phase(answer: list[str], src: list[int | None], t: int) -> tuple:
    """What the drafter knows of where its anchor sits in the answer's pattern: whether the anchor and the token
    before it are symbols or marks, and whether the anchor repeats its predecessor (a stutter's second copy)."""
    prev = answer[t - 1] if t else None
    return (src[t] is None, t == 0 or src[t - 1] is None, answer[t] == prev)


def _slot_events(answer: list[str], src: list[tuple], block: int):
    """(anchor t, slot k, (what the slot knows, what it holds)) for every anchor t and slot k < block: it knows its
    anchor's phase and what it reads at its own source (a variant: `capslock`'s toggle); it holds a relative source
    offset and whether its variant equals the anchor's (`capslock`'s case), or the mark."""
    n, idx = len(answer), [s for s, _, _ in src]
    for t in range(n - 1):
        ref = next((j for j in range(t, -1, -1) if idx[j] is not None), None)  # the anchor's source
        phase = _phase(answer, idx, t)
        for k in range(1, min(block, n - t)):
            w, (s, variant, seen) = answer[t + k], src[t + k]
            if s is None or ref is None:
                yield t, k, ((phase, None), ("mark", w))
            else:
                yield t, k, ((phase, seen), ("sym", s - idx[ref], variant == src[ref][1]))


def family_properties(world: WorldConfig, family: str, n: int, block: int, k: int) -> dict:
    exs = examples(world, "eval", n, family=family)
    seqs = []
    for e in exs:
        body = e.prompt.split()[2:]
        ans = FAMILIES[family].greedy(e.answer.split())
        seqs.append((ans, FAMILIES[family].align(body, ans)))
    prior: dict[tuple, Counter] = defaultdict(Counter)  # (slot, phase) -> how often each offset / mark is the answer
    for ans, src in seqs:
        for _, slot, (knows, ev) in _slot_events(ans, src, block):
            prior[slot, knows][ev] += 1
    rank = {key: {ev: r for r, (ev, _) in enumerate(c.most_common())} for key, c in prior.items()}
    hit1, hitk, tot = Counter(), Counter(), Counter()
    tau_a, tau_o, anchors = 0.0, 0.0, 0
    for ans, src in seqs:
        by_anchor: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for t, slot, (knows, ev) in _slot_events(ans, src, block):
            r = rank[slot, knows][ev]
            by_anchor[t].append((slot, r))
            tot[slot] += 1
            hit1[slot] += r == 0
            hitk[slot] += r < k
        for t, slots in by_anchor.items():
            slots.sort()
            run_a = next((i for i, (_, r) in enumerate(slots) if r != 0), len(slots))
            run_o = next((i for i, (_, r) in enumerate(slots) if r >= k), len(slots))
            tau_a += 1 + run_a
            tau_o += 1 + run_o
            anchors += 1
    depth = sorted(tot)
    return {"examples": n, "anchors": anchors,
            "answer_tokens": sum(len(a) for a, _ in seqs) / max(1, len(seqs)),
            "top1": {s: hit1[s] / tot[s] for s in depth}, f"top{k}": {s: hitk[s] / tot[s] for s in depth},
            "tau_argmax": tau_a / max(1, anchors), "tau_oracle": tau_o / max(1, anchors)}


def entropy_positions(world: WorldConfig, family: str, n: int) -> tuple[int, int]:
    """(answer positions with >= ENTROPY_BAR nats in the training distribution, all answer positions) over n examples
    (each family says its positions' nats: `Family.nats`)."""
    high = total = 0
    for e in examples(world, "eval", n, family=family):
        nats = FAMILIES[family].nats(e.answer.split())
        total += len(nats)
        high += sum(h >= ENTROPY_BAR for h in nats)
    return high, total


def ideal_properties(world: WorldConfig, n: int = 128, block: int = 16, k: int = 8) -> dict:
    """Every family's ideal figures and the world's T=1 room (see the module doc)."""
    fams = {f.name: family_properties(world, f.name, n, block, k) for f in world.families}
    weights = {f.name: f.weight for f in world.families}
    high = total = 0.0
    for f in world.families:
        hi, tot = entropy_positions(world, f.name, n)
        high += weights[f.name] * hi / n
        total += weights[f.name] * tot / n
    out = {"world_hash": world.config_hash(), "examples_per_family": n, "block": block, "k": k,
           "families": fams, "high_entropy_share": high / total if total else 0.0}
    if any(f.name == "pairfill" for f in world.families):
        out["pair_break_t1"] = 2 * MARK_P * (1 - MARK_P)
    return out
