"""One recorded tree round as the explorer's tree view shows it (docs/algorithms.md "Trees from the block").

A tree arm's rounds carry (draftlab.decoding.round.tree_record): `tree_tokens` [N] (node 0 = the last committed
token, padding -1), `tree_parent` [N] (-1 for the root and padding), `tree_score` [N] (the node's path score: its
summed log-probability under the ranking's lattice), `tree_path` [D+1] (the accepted path's node per depth, root
first) and `accepted`; `committed` holds the accepted path's tokens and then the bonus (the target's own token at
the path's last node). From these alone, never from the drafter's chain:

- a node's **step** log-probability = its score − its parent's: the value of its parent's lattice row that ranked it
  (the block's marginal at its slot for `dflash-tree*`, a corrector's pair row of its parent's candidate for
  `dcoco-tree*` / `lilicorr-tree*`); its **rank** among its siblings (a best-first tree adds a parent's children in
  their row's order);
- its **status** after the walk: `root`; `accepted` (on the accepted path); `rejected` (a child of an accepted node,
  off the path: the walk looked for the target's token among these children and did not find it here); `not
  reached` (below a rejected node: the walk never got there).
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from draftlab.explore.grid import as_list, tree_round

COLUMNS = ("tree_tokens", "tree_parent", "tree_path")
STATUS_ORDER = ("root", "accepted", "rejected", "not reached")  # a node's status after the walk (`build`)


@dataclass
class TreeRound:
    nodes: pd.DataFrame  # one row per real node: node, depth, token, parent, rank, step_logp, score, status
    accepted: int  # accepted nodes below the root (the path's depth)
    bonus: int | None  # the target's token after the path (the round's last committed token)
    budget: int  # the tree's node budget N (padding included)
    ranking: str  # what ranked the nodes, in words


def is_tree(row) -> bool:
    """Whether a rounds row is a tree round (recorded by a tree arm, with or without its tree)."""
    return tree_round(row) or has_tree(row)


def has_tree(row) -> bool:
    """Whether a rounds row is a tree round with the tree recorded (an older file has only `tree_rejected`)."""
    return all(c in row.index and as_list(row[c]) is not None for c in COLUMNS)


def ranking_of(arm: str) -> str:
    """What ranked an arm's tree, from its name (`draftlab.arms.grammar.parse`)."""
    from draftlab.arms.grammar import parse

    method = (parse(arm) or (arm.split("-")[0], "", ""))[0]
    if method.split("-")[-1] == "dflash":
        return ("the block's marginals (every parent gets the same row: a node's step log-probability is the "
                "drafter's at its slot)")
    return (f"{method}'s pair rows (a node's step log-probability is its parent's row: the corrector's transition "
            f"scores from the parent's candidate, normalised over the child slot's K candidates)")


def build(row, next_root: int | None = None) -> TreeRound:
    """The tree round of one rounds row (a pandas Series with the `COLUMNS`). next_root: the next round's node 0 (the
    last token this round committed), the bonus when the whole block was accepted (`committed` ends with the block)."""
    tokens = [int(t) for t in as_list(row["tree_tokens"])]
    parent = [int(p) for p in as_list(row["tree_parent"])]
    score_raw = as_list(row["tree_score"]) if "tree_score" in row.index else None
    score = [float(s) for s in score_raw] if score_raw is not None else [float("nan")] * len(tokens)
    acc = int(row["accepted"])
    path = [int(i) for i in as_list(row["tree_path"])][: acc + 1]
    on_path = set(path)
    depth = [0] * len(tokens)
    for i, p in enumerate(parent):
        if p >= 0:
            depth[i] = depth[p] + 1
    real = [i for i, t in enumerate(tokens) if i == 0 or (t >= 0 and parent[i] >= 0)]
    seen: dict[int, int] = {}
    rows = []
    for i in real:
        p = parent[i]
        rank = None
        if p >= 0:  # the children of a parent come in node order = their row's order (best first)
            rank = seen[p] = seen.get(p, 0) + 1
        if i == 0:
            status = "root"
        elif i in on_path:
            status = "accepted"
        elif p in on_path:
            status = "rejected"
        else:
            status = "not reached"
        rows.append({"node": i, "depth": depth[i], "token": tokens[i], "parent": p, "rank": rank,
                     "step_logp": score[i] - score[p] if p >= 0 else None, "score": score[i], "status": status})
    committed = as_list(row.get("committed"))
    bonus = int(committed[acc]) if committed is not None and acc < len(committed) else next_root
    nodes = pd.DataFrame(rows).astype({"rank": "Int64"})
    return TreeRound(nodes, acc, bonus, len(tokens), ranking_of(str(row["arm"])))


def interesting(rounds: pd.DataFrame) -> pd.Series | None:
    """A tree round worth showing (screenshots): the T=0 round with the most rejected nodes among those that accepted
    3 or more; None without recorded trees."""
    best, key = None, None
    for _, r in rounds.iterrows():
        if float(r.get("temperature", 0) or 0) > 0 or not has_tree(r):
            continue
        t = build(r)
        k = (t.accepted >= 3, int((t.nodes["status"] == "rejected").sum()), t.accepted)
        if key is None or k > key:
            best, key = r, k
    return best


def layout(t: TreeRound) -> pd.DataFrame:
    """The nodes with a drawing position: x = depth, y = the node's place in a depth-first order of its leaves (a
    parent in the middle of its children), so no two edges cross. Adds `y`, `px` / `py` (the parent's position)."""
    d = t.nodes.set_index("node")
    kids: dict[int, list[int]] = {}
    for i, p in d["parent"].items():
        if p >= 0:
            kids.setdefault(int(p), []).append(int(i))
    y: dict[int, float] = {}
    leaf = [0]

    def place(i: int) -> float:
        cs = kids.get(i, [])
        if not cs:
            y[i] = float(leaf[0])
            leaf[0] += 1
        else:
            ys = [place(c) for c in cs]
            y[i] = (ys[0] + ys[-1]) / 2
        return y[i]

    place(0)
    out = t.nodes.copy()
    out["y"] = out["node"].map(y)
    out["px"] = [d.at[p, "depth"] if p >= 0 else None for p in out["parent"]]
    out["py"] = [y.get(p) if p >= 0 else None for p in out["parent"]]
    return out


def by_depth(t: TreeRound, tok) -> pd.DataFrame:
    """The nodes by depth, best first within a parent: what the tree view's table shows (token as text)."""
    df = t.nodes.assign(text=[tok(x) for x in t.nodes["token"]])
    return df.sort_values(["depth", "parent", "rank"], na_position="first")[
        ["depth", "node", "text", "token", "parent", "rank", "step_logp", "score", "status"]]
