"""Rounds of a tree arm and of LiLiCorr for the explorer's fixture (tests/app/test_app.py adds them): the tree is
grown and walked by the engine's own code (draftlab.decoding.tree: `grow`, `walk`; the record is
draftlab.decoding.round.tree_record), so the tree view is tested on what a real tree round records."""
from __future__ import annotations

import torch

CAND = [[26, 27, 28], [20, 21, 10], [22, 23, 15], [24, 25, 7]]  # These/The/A, key/keys/dog, is/are/was, missing/here/mat
LOGITS = [[4.2, 3.6, 2.8], [2.7, 2.5, 1.1], [3.1, 2.9, 0.8], [2.8, 1.6, 0.5]]
ROOT_TOKEN = 9  # " a": the last committed token
NEXT = {ROOT_TOKEN: 26, 26: 21, 21: 23, 23: 24, 24: 8}  # the target's argmax after a token ("These keys are missing\n")
V = 30


def tree_round(nodes: int = 8):
    """(tree, walk, record row fields) of one T=0 round of a marginal-ranked tree over CAND."""
    from draftlab.decoding.round import tree_record
    from draftlab.decoding.tree import grow, marginal_lattice, walk
    from draftlab.decoding.verify import SamplingParams

    ids = torch.tensor([CAND])
    logp = torch.tensor([LOGITS]).log_softmax(-1)  # over the K candidates: a small lattice
    tree = grow(marginal_lattice(ids, logp), torch.tensor([ROOT_TOKEN]), nodes)
    logits = torch.full((1, nodes, V), -5.0)
    for i, t in enumerate(tree.tokens[0].tolist()):
        logits[0, i, NEXT.get(t, 8)] = 5.0  # the target's token at each node, by the node's own token
    w = walk(logits, tree, SamplingParams(), max_depth=len(CAND))  # a round's depth: the block's slots at most
    acc = int(w.accepted[0])
    out, t = [], ROOT_TOKEN  # `committed` in the rounds file: the final output at each of the block's slots
    for _ in CAND:
        out.append(t := NEXT[t])
    rec = {k: v[0].tolist() for k, v in tree_record(tree, w.path).items()}
    row = {"accepted": acc, "proposals": w.tokens[0].tolist(), "committed": out,
           "target_tokens": w.target_tokens[0].gather(0, w.path[0]).tolist(), "tree_rejected": -1, **rec}
    return tree, w, row


def pair_rows():
    """LiLiCorr's recorded rows of one round: start [K], pair [n−1][K][K] and its greedy walk's path (ranks)."""
    K, n = len(CAND[0]), len(CAND)
    start = [0.5, 2.0, -1.0]  # slot 1: rank 2 ("The")
    pair = [[[float(a == b) * 2.0 - 0.3 * b for b in range(K)] for a in range(K)] for _ in range(n - 1)]
    path = [max(range(K), key=lambda j: start[j])]
    for s in range(n - 1):
        path.append(max(range(K), key=lambda j: pair[s][path[-1]][j]))
    return start, pair, path


def extra_rounds() -> list[dict]:
    """Rows for test_app's rounds file: `dflash-tree8` (the tree above) and `lilicorr` (its pair rows) at T=0 on one
    prompt, two rounds each."""
    _, _, tree = tree_round()
    start, pair, path = pair_rows()
    lili = [CAND[j][r] for j, r in enumerate(path)]
    committed = [26, 21, 23, 24]
    acc = next((j for j, (a, b) in enumerate(zip(lili, committed)) if a != b), len(lili))
    base = {"suite": "mt-bench", "temperature": 0.0, "concurrency": 1, "prompt_id": "mt-bench/1", "topk_ids": CAND,
            "topk_logits": LOGITS}
    rows = []
    for r in range(2):
        rows.append({**base, "arm": "dflash-tree8", "round": r, "offset": 5 * r, **tree})
        rows.append({**base, "arm": "lilicorr", "round": r, "offset": 5 * r, "accepted": acc, "proposals": lili,
                     "target_tokens": committed + [8], "committed": committed, "pair_start": start, "pair_rows": pair,
                     "path_greedy": path})
    return rows
