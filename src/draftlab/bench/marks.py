"""Decoded text with each token's fate marked, for `draftlab decode`: from the engine's round records, which
tokens the target wrote itself, which draft tokens were accepted (corrected by a corrector, or a seeded slot
whose seed the drafter kept / changed) and the first rejected proposal of each round; rendered with ANSI
colours or brackets."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass
class Mark:
    token: int
    kind: str  # target (the verifier's own token) | accepted | corrected (accepted, a corrector changed it) | rejected
    # | seed-kept / seed-changed (accepted from a seeded slot whose seed the drafter kept / changed) | branch (a tree
    # round's accepted node that is not the drafter's first choice at its depth)


def siblings(rec, i: int, acc: int) -> dict[int, list[int]]:
    """A tree round's rejected nodes by depth (1 .. acc+1): the children of the accepted path's node at depth j-1 other
    than the path's node at depth j (at depth acc+1 every child of the path's last node), best first; from the
    round's recorded tree (`tree_tokens`, `tree_parent`, `tree_path`: draftlab.decoding.round.tree_record)."""
    tok, par = rec.extras["tree_tokens"][i].tolist(), rec.extras["tree_parent"][i].tolist()
    path = rec.extras["tree_path"][i].tolist()[: acc + 1]
    out = {}
    for j in range(1, acc + 2):
        kids = [n for n, p in enumerate(par) if p == path[j - 1] and tok[n] >= 0 and (j > acc or n != path[j])]
        out[j] = [tok[n] for n in kids]
    return out


def mark_tokens(result, corrects: bool, stream: int = 0, show_tree: bool = False) -> list[Mark]:
    """The output of `stream` with each token's fate, from the engine's round records: the accepted
    proposals of each round (`corrected` when the proposal step changed the drafter's argmax and
    `corrects`; `seed-kept` / `seed-changed` from a seeded slot, by the round's `seed_kept` record), the first
    rejected proposal of the round (not in the text; shown before the token the verifier put in its place),
    and the verifier's own tokens (the first token, each round's bonus). A tree round (its `tree_rejected` record)
    proposes nodes, not a chain: its proposals are the accepted path (then the bonus), an accepted node off the
    drafter's first choice is a `branch` (never `corrected`: the tree offered it, no corrector changed a token), and its
    rejected proposal is the best child of the path's last node (none when that node is a leaf). show_tree: also every
    other node the walk rejected on the way (`sibling`: the children of each accepted node off the path), before the
    token written in their place."""
    tokens = result.tokens[stream]
    kinds = ["target"] * len(tokens)
    rejected: dict[int, int] = {}
    others: dict[int, list[int]] = {}
    for rec in result.records:
        for i, s in enumerate(rec.stream.tolist()):
            if s != stream:
                continue
            off, acc = int(rec.offset[i]), int(rec.accepted[i])
            props = rec.proposals[i].tolist()
            argmax = rec.topk_ids[i, :, 0].tolist() if rec.topk_ids is not None else props
            kept = rec.extras["seed_kept"][i].tolist() if "seed_kept" in rec.extras else [-1] * len(props)
            tree = int(rec.extras["tree_rejected"][i]) if "tree_rejected" in rec.extras else None
            for j in range(1, acc + 1):
                if off + j < len(tokens):
                    seed = SEED_KINDS.get(kept[j - 1], "accepted")
                    off_first = props[j - 1] != argmax[j - 1]
                    kinds[off + j] = ("branch" if off_first else seed) if tree is not None else \
                        "corrected" if corrects and off_first else seed
            miss = props[acc] if tree is None and acc < len(props) else tree
            if miss is not None and miss >= 0 and off + acc + 1 < len(tokens):
                rejected[off + acc + 1] = miss
            if show_tree and tree is not None and "tree_path" in rec.extras:
                for j, kids in siblings(rec, i, acc).items():
                    if off + j < len(tokens):
                        others[off + j] = [k for k in kids if not (j == acc + 1 and k == miss)]
    out: list[Mark] = []
    for i, (t, k) in enumerate(zip(tokens, kinds)):
        out += [Mark(x, "sibling") for x in others.get(i, [])]
        if i in rejected:
            out.append(Mark(rejected[i], "rejected"))
        out.append(Mark(t, k))
    return out


def seed_counts(result, stream: int = 0) -> tuple[int, int] | None:
    """(seeded slots, of them kept by the drafter) over the rounds of `stream`; None without seed records."""
    recs = [(r, i) for r in result.records if "seed_kept" in r.extras for i, s in enumerate(r.stream.tolist()) if s == stream]
    if not recs:
        return None
    kept = [k for r, i in recs for k in r.extras["seed_kept"][i].tolist() if k >= 0]
    return len(kept), sum(kept)


SEED_KINDS = {1: "seed-kept", 0: "seed-changed"}  # seed_kept record -> kind of an accepted token (-1: no seed)
STYLE = {  # kind -> (ANSI SGR, bracket open, bracket close)
    "accepted": ("32", "[", "]"),
    "corrected": ("1;36", "{", "}"),
    "seed-kept": ("33", "«", "»"),
    "seed-changed": ("35", "‹", "›"),
    "branch": ("34", "<", ">"),
    "rejected": ("9;31", "(~", "~)"),
    "sibling": ("2;9;31", "(?", "?)"),
    "target": ("", "", ""),
}
LEGEND = {"accepted": "accepted draft token", "corrected": "corrected by the corrector, accepted",
          "branch": "accepted from another branch of the tree (not the drafter's first choice)",
          "seed-kept": "accepted, the drafter kept the slot's seed", "seed-changed": "accepted, the drafter changed the seed",
          "rejected": "rejected proposal (not in the text)",
          "sibling": "another node of the tree the walk rejected there (--show-tree; not in the text)",
          "target": "the target's own token"}


def render(marks: list[Mark], decode: Callable[[list[int]], str], color: bool) -> str:
    """Text of `marks` with runs of one kind coloured (ANSI) or bracketed; token text is decoded
    incrementally over the committed tokens, so multi-byte characters split across tokens stay intact."""
    pieces: list[tuple[str, str]] = []
    committed: list[int] = []
    prev = ""
    for m in marks:
        if m.kind in ("rejected", "sibling"):  # not in the text
            text = decode([m.token])
        else:
            committed.append(m.token)
            full = decode(committed)
            text, prev = full[len(prev):], full
        if pieces and pieces[-1][0] == m.kind:
            pieces[-1] = (m.kind, pieces[-1][1] + ("|" if m.kind == "sibling" else "") + text)
        else:
            pieces.append((m.kind, text))
    out = []
    for kind, text in pieces:
        sgr, left, right = STYLE[kind]
        if not text or not sgr:
            out.append(text)
        elif color:
            out.append(f"\x1b[{sgr}m{text}\x1b[0m")
        else:
            out.append(f"{left}{text}{right}")
    return "".join(out)


def legend(color: bool, seeded: bool = False, tree: bool = False, show_tree: bool = False) -> str:
    """The legend line; the seed kinds only for a seeded drafter's output, `branch` only for a tree's, `sibling` only
    for a tree's under --show-tree, `corrected` not for a tree's."""
    parts = []
    for kind, what in LEGEND.items():
        sgr, left, right = STYLE[kind]
        if (kind.startswith("seed-") and not seeded) or (kind == "branch" and not tree) or (kind == "corrected" and tree) \
                or (kind == "sibling" and not (tree and show_tree)):
            continue
        if kind == "target":
            parts.append(f"plain = {what}")
        else:
            parts.append(f"\x1b[{sgr}m{what}\x1b[0m" if color else f"{left}{what}{right}")
    return "legend: " + ", ".join(parts)
