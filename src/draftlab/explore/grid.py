"""The candidate grid of one recorded round: the drafter's n×K candidates, the paths through them
(drafter argmax, the arm's proposal, each corrector path rule available) and their verification.

Columns of data/benchmark_rounds.parquet used (draftlab.bench.report.round_frame): `proposals` [n],
`topk_ids` / `topk_logits` [n][K], `target_tokens` [S] (T=0: the target's argmax after each verified slot,
column j for slot j+1), `committed` [n] (the final output token at each slot, -1 beyond the end),
`accepted` (acc). Optional columns that corrector arms may add, shown when present:
- `transition_scores` [n−1][K][K]: S_p(a, b) (docs/algorithms.md "Transition scores"); every rule in
  draftlab.corrector.paths.RULES is
  then replayed with `select_path`;
- `path_<rule>` [n]: candidate indices chosen by that rule (e.g. the live proposal step's `last_extras["path_<rule>"]`);
- `pair_rows` [n−1][K][K] and `pair_start` [K]: a pair-scoring family's rows (LiLiCorr's pair_s(a, b) = σ·⟨out_a, in_b⟩
  and its start scores), shown like DCOCO's scores but never replayed with DCOCO's path rules (its walk is recorded).
A seeded drafter's arms add (draftlab.decoding.common.seed_marks), shown as the grid's first row when present:
- `seed_ids` [n]: the block's seed at each slot (its input; -1 = MASK, no seed);
- `seed_kept` [n]: 1 = the drafter's top-1 kept the seed, 0 = it changed it, -1 = no seed.

Replays never judge tokens here: accepted lengths come from draftlab.decoding.verify.greedy_accept_length,
the one verification routine. At T=0 the committed output is the target's greedy continuation, so any
path's accepted prefix is exactly its greedy match length against `committed`; at T>0 acceptance was
random and only the recorded `accepted` of the arm's own proposal is shown.
"""
from __future__ import annotations

import html
import math

from dataclasses import dataclass, field

import numpy as np

STATUS_COLOURS = {
    "accepted": "#b7e4c7",
    "rejected": "#f4a5a5",
    "corrected-accepted": "#9ecbff",
    "corrected-rejected": "#ffc078",
    "unverified": "#eeeeee",
    "cut": "#f8f9fa",
    "corrected": "#dbe4ff",
    "": "#ffffff",
}
SEED_COLOURS = {1: "#fff3bf", 0: "#e5dbff", -1: "#f1f3f5"}  # seed_kept -> background of the seed row
SEED_CLASS = {1: "kept", 0: "changed", -1: "none"}  # seed_kept -> the cell's class (seed-kept, ...)
SEED_HELP = {1: "seed, kept by the drafter (its top-1)", 0: "seed, changed by the drafter (its top-1 differs)",
             -1: "no seed (MASK)"}
STATUS_HELP = {
    "accepted": "accepted (drafter's token)",
    "rejected": "first rejected slot",
    "corrected-accepted": "corrected (≠ drafter argmax) and accepted",
    "corrected-rejected": "corrected (≠ drafter argmax) and rejected",
    "unverified": "after the first rejection (not judged)",
    "cut": "not proposed (the verify-width rule cut the block)",
    "corrected": "corrected (≠ drafter argmax), not judged",
}


def as_list(v) -> list | None:
    if v is None:
        return None
    if isinstance(v, float) and np.isnan(v):
        return None
    if isinstance(v, np.ndarray):
        return [as_list(x) if isinstance(x, np.ndarray) else x for x in v.tolist()] if v.dtype == object else v.tolist()
    return list(v)


@dataclass
class Path:
    name: str
    tokens: list[int]  # [n] target ids
    accepted: int | None  # accepted prefix (None: cannot be replayed)
    statuses: list[str] = field(default_factory=list)
    note: str = ""


@dataclass
class RoundGrid:
    n: int
    K: int
    cand_ids: list[list[int]] | None  # [n][K]
    cand_logits: list[list[float]] | None  # [n][K]
    argmax: list[int] | None  # [n]
    paths: list[Path]
    target: list[int] | None  # [n] verifier's token per slot (T=0 record) or the committed output
    target_label: str
    committed: list[int] | None
    accepted: int
    greedy: bool
    scores: np.ndarray | None  # [n−1, K, K]
    missing: list[str]
    path_ranks: dict[str, list[int]] = field(default_factory=dict)  # rule -> candidate rank per slot [n]
    seeds: list[int] | None = None  # [n] the block's seed per slot (-1 = MASK); None: not a seeded drafter
    seed_kept: list[int] | None = None  # [n] 1 kept / 0 changed by the drafter's top-1 / -1 no seed
    score_kind: str = "transition"  # scores: DCOCO's S_p(a, b) ("transition") or a pair-scoring family's rows ("pair")
    start: list[float] | None = None  # [K] the pair-scoring family's start scores of slot 1's candidates

    def seed_summary(self) -> tuple[int, int, int] | None:
        """(seeded slots, kept, changed) of the round; None without seed records."""
        if self.seed_kept is None:
            return None
        return sum(k >= 0 for k in self.seed_kept), sum(k == 1 for k in self.seed_kept), sum(k == 0 for k in self.seed_kept)

    @property
    def tau(self) -> int:
        return self.accepted + 1


def statuses(tokens: list[int], argmax: list[int] | None, acc: int | None) -> list[str]:
    out = []
    for j, t in enumerate(tokens):
        corrected = argmax is not None and t != argmax[j]
        if t < 0:  # a slot the arm did not propose (a verify-width rule verified fewer)
            out.append("cut")
        elif acc is None:
            out.append("corrected" if corrected else "")
        elif j < acc:
            out.append("corrected-accepted" if corrected else "accepted")
        elif j == acc:
            out.append("corrected-rejected" if corrected else "rejected")
        else:
            out.append("unverified")
    return out


def replay(paths: dict[str, list[int]], committed: list[int]) -> dict[str, int]:
    """Accepted prefix of each path against the committed (greedy target) tokens, via verify."""
    import torch

    from draftlab.decoding.verify import greedy_accept_length

    names = list(paths)
    if not names:
        return {}
    props = torch.tensor([paths[k] for k in names], dtype=torch.long)  # [P, n]
    c = torch.tensor(committed, dtype=torch.long)[None].expand_as(props)  # [P, n]
    acc = greedy_accept_length(props, c, c >= 0)  # [P]
    return dict(zip(names, acc.tolist()))


def corrected_paths(row, cand_ids, cand_logits) -> tuple[dict[str, list[int]], np.ndarray | None, list[str]]:
    """Candidate-index paths per rule: recorded `path_<rule>` columns, else replayed from transition scores."""
    from_rows: dict[str, list[int]] = {}
    missing = []
    for col in row.index:
        if col.startswith("path_") and as_list(row[col]) is not None:
            from_rows[col[len("path_"):]] = [int(i) for i in as_list(row[col])]
    scores = None
    ts = as_list(row["transition_scores"]) if "transition_scores" in row.index else None
    if ts is not None and cand_logits is not None:
        scores = nested_array(ts)
        import torch

        from draftlab.corrector.paths import RULES, select_path

        for rule in RULES:
            if rule in from_rows:
                continue
            idx = select_path(torch.tensor(scores, dtype=torch.float32)[None],
                              torch.tensor(cand_logits, dtype=torch.float32)[None], rule)[0]
            from_rows[rule] = idx.tolist()
    elif not from_rows:
        missing.append("corrected paths: this arm recorded no `transition_scores` or `path_<rule>` columns "
                       "(a DCOCO arm adds them; run `dvc repro benchmark` with it in `benchmark.arms`)")
    return from_rows, scores, missing


def build(row) -> RoundGrid:
    """RoundGrid of one parquet row (a pandas Series)."""
    props = [int(t) for t in as_list(row["proposals"])]
    tree = tree_round(row)
    if tree:  # a tree round records its accepted path and then the bonus: show the path, then the node the walk
        acc0 = int(row["accepted"])  # rejected below it (`tree_rejected`, -1: none), never the bonus as a proposal
        props = props[:acc0] + [int(row["tree_rejected"])] + [-1] * max(0, len(props) - acc0 - 1)
    cand_ids = as_list(row.get("topk_ids"))
    cand_logits = as_list(row.get("topk_logits"))
    cand_ids = [[int(x) for x in r] for r in cand_ids] if cand_ids else None
    cand_logits = [[float(x) for x in r] for r in cand_logits] if cand_logits else None
    K = len(cand_ids[0]) if cand_ids else 0
    n = len(cand_ids) if cand_ids else len(props)  # the drafter's slots; a verify-width rule proposes W <= n
    missing = []
    if len(props) < n:
        missing.append(f"slots {len(props) + 1}..{n}: not proposed (the arm's verify-width rule verified {len(props)} "
                       f"of {n}); a 0 means the round was one AR step")
        props = props + [-1] * (n - len(props))
    if cand_ids is None:
        missing.append("the drafter's top-K candidates (`topk_ids`) were not recorded for this arm")
    argmax = [r[0] for r in cand_ids] if cand_ids else None
    tt = as_list(row.get("target_tokens"))
    committed = as_list(row.get("committed"))
    committed = [int(x) for x in committed] if committed else None
    greedy = float(row.get("temperature", 0.0) or 0.0) <= 0.0
    acc = int(row["accepted"])
    if tt is not None:
        target = [int(x) for x in tt[:n]]
        target, label = target + [-1] * (n - len(target)), "target (verifier argmax)"  # -1: a slot not verified
    elif committed is not None:
        target, label = committed, "committed output"
    else:
        target, label = None, ""
    raw: dict[str, list[int]] = {}
    if argmax is not None:
        raw["drafter argmax"] = argmax
    raw[f"proposal ({row['arm']})"] = props
    cpaths, scores, miss = corrected_paths(row, cand_ids, cand_logits) if cand_ids else ({}, None, [])
    missing += miss
    for rule, idx in cpaths.items():
        if any(i >= len(cand_ids[j]) for j, i in enumerate(idx)):
            missing.append(f"the `{rule}` path uses candidates beyond the recorded top-{K} (benchmark.topk is smaller "
                           f"than the corrector's K)")
            continue
        raw[f"corrected: {rule}"] = [cand_ids[j][i] for j, i in enumerate(idx)]
    can_replay = greedy and committed is not None
    accs = replay(raw, committed) if can_replay else {}
    paths = []
    for name, toks in raw.items():
        a = accs.get(name)
        note = ""
        if name.startswith("proposal"):
            if a is not None and a != acc and not tree:
                note = f"replay gives {a}, the engine recorded {acc}"
            a = acc  # the engine's own verdict
        elif not can_replay:
            note = "T>0: acceptance was random; only the arm's own proposal was judged"
        marks = statuses(toks, argmax, a)
        if tree and name.startswith("proposal"):  # past the rejected node: not judged (not cut by a width rule)
            marks = ["unverified" if m == "cut" else m for m in marks]
        paths.append(Path(name, toks, a, marks, note))
    if not greedy:
        missing.append("replaying other paths needs T=0 rounds (at T>0 acceptance is random)")
    ranks = {rule: [int(i) for i in idx] for rule, idx in cpaths.items() if f"corrected: {rule}" in raw}
    seeds, kept = (as_list(row.get(c)) for c in ("seed_ids", "seed_kept"))
    kind, start = "transition", None
    if scores is None and as_list(row.get("pair_rows")) is not None:  # LiLiCorr: the rows its walk read
        kind, scores = "pair", nested_array(as_list(row["pair_rows"]))
        start = [float(x) for x in as_list(row.get("pair_start")) or []] or None
    return RoundGrid(n, K, cand_ids, cand_logits, argmax, paths, target, label, committed, acc, greedy, scores, missing,
                     ranks, None if seeds is None else [int(x) for x in seeds],
                     None if kept is None else [int(x) for x in kept], kind, start)


def tree_round(row) -> bool:
    """Whether a rounds row is a tree arm's round (its `tree_rejected` record is there)."""
    v = row.get("tree_rejected")
    return v is not None and not (isinstance(v, float) and np.isnan(v))


def nested_array(v) -> np.ndarray:
    """A parquet cell of nested lists ([n−1][K][K]) as a float array."""
    return np.asarray([np.asarray([np.asarray(r, dtype=float) for r in p]) for p in v], dtype=float)


def cell_status(g: RoundGrid, j: int, k: int) -> str:
    """Colour of candidate (slot j, rank k) in the n×K grid: the status of the arm's proposal when it
    chose this candidate, else blank."""
    prop = next(p for p in g.paths if p.name.startswith("proposal"))
    if g.cand_ids and g.cand_ids[j][k] == prop.tokens[j]:
        return prop.statuses[j]
    return ""


def transition_table(g: RoundGrid, slot: int, pred_rank: int, tok) -> "object":
    """S_p(a, ·) for predecessor candidate a (rank pred_rank at slot `slot`, 0-based) into slot+1."""
    import pandas as pd

    s = g.scores[slot, pred_rank]  # [K]
    ids = g.cand_ids[slot + 1]
    logits = g.cand_logits[slot + 1]
    if g.score_kind == "pair":  # a pair score is the corrector's alone (the drafter's logit is not in it)
        df = pd.DataFrame({"rank": range(1, g.K + 1), "token": [tok(i) for i in ids], "draft logit": logits,
                           "pair_s(a, b)": s})
        return df.sort_values("pair_s(a, b)", ascending=False)
    df = pd.DataFrame({"rank": range(1, g.K + 1), "token": [tok(i) for i in ids], "draft logit": logits,
                       "S_p(a, b)": s, "Δθ": np.asarray(s) - np.asarray(logits)})
    return df.sort_values("S_p(a, b)", ascending=False)


def heatmap_frame(g: RoundGrid, tok) -> "object":
    """Long frame of every transition score of the round, for the K×K heatmaps: one row per (slot pair p → p+1,
    predecessor rank a, successor rank b) with S = S_p(a, b), logit = ℓ_{p+1}(b), dtheta = Δθ = S − ℓ, the
    cell of the drafter's argmax path (rank 1 → rank 1) and the path rules through it; then one marker row per
    (rule, pair) at the cell that rule walked through (`rule` non-empty)."""
    import pandas as pd

    if g.scores is None:
        return pd.DataFrame()
    P, Kc = g.scores.shape[0], g.scores.shape[1]  # [n−1, Kc, Kc]

    def label(j: int, k: int) -> str:
        known = g.cand_ids is not None and k < len(g.cand_ids[j])
        return f"{k + 1}·{tok(g.cand_ids[j][k])}" if known else f"{k + 1}·#"

    through: dict[tuple[int, int, int], list[str]] = {}
    for rule, ranks in g.path_ranks.items():
        for p in range(P):
            through.setdefault((p, ranks[p], ranks[p + 1]), []).append(rule)
    rows = []
    for p in range(P):
        pair = f"slot {p + 1} → {p + 2}"
        for a in range(Kc):
            for b in range(Kc):
                S = float(g.scores[p, a, b])
                logit = g.cand_logits[p + 1][b] if g.cand_logits and b < len(g.cand_logits[p + 1]) else float("nan")
                rows.append({"pair": pair, "p": p + 1, "a": a, "b": b, "a_label": label(p, a), "b_label": label(p + 1, b),
                             "S": S, "logit": logit, "dtheta": S - logit, "argmax_cell": a == 0 and b == 0,
                             "on_paths": ", ".join(through.get((p, a, b), [])) or "–", "rule": ""})
    df = pd.DataFrame(rows)
    marks = [{**df[(df.p == p + 1) & (df.a == ranks[p]) & (df.b == ranks[p + 1]) & (df.rule == "")].iloc[0].to_dict(),
              "rule": rule} for rule, ranks in g.path_ranks.items() for p in range(P)]
    return pd.concat([df, pd.DataFrame(marks)], ignore_index=True) if marks else df


# ---- HTML rendering of a grid (no Streamlit: the Candidate grid page shows it) -----------------------------
GRID_CSS = """<style>
table.dl-grid {border-collapse: collapse; font-family: ui-monospace, monospace; font-size: 0.8rem; margin-bottom: .6rem}
table.dl-grid th, table.dl-grid td {border: 1px solid #ccc; padding: 2px 5px; text-align: center; white-space: nowrap}
table.dl-grid th.rowh {text-align: right; background: #fafafa; font-weight: 600}
table.dl-grid td small {color: #555}
table.dl-grid td.tgt {outline: 2px dashed #2b8a3e; outline-offset: -3px}
table.dl-grid tr.sep td {border: none; height: 6px}
span.dl-leg {display: inline-block; padding: 1px 6px; margin-right: 6px; border: 1px solid #ccc; font-size: .75rem}
</style>"""


def cell_html(text: str, status: str = "", sub: str = "", cls: str = "", title: str = "") -> str:
    bg = STATUS_COLOURS.get(status, "#fff")
    klass = " ".join(c for c in ("dl-cell", cls, f"st-{status}" if status else "") if c)
    sub_html = f"<br><small>{html.escape(sub)}</small>" if sub else ""
    return (f'<td class="{klass}" style="background:{bg}" title="{html.escape(title or STATUS_HELP.get(status, ""))}">'
            f"{html.escape(text)}{sub_html}</td>")


def grid_html(g: RoundGrid, tok) -> str:
    n = g.n
    head = "".join(f"<th>slot {j + 1}</th>" for j in range(n))
    rows = [f'<tr><th class="rowh">rank \\ slot</th>{head}<th>acc</th></tr>']
    if g.seeds is not None:  # the block's input: what the seeded drafter started from, and what it did with it
        cells = []
        for sid, k in zip(g.seeds, g.seed_kept or [-1] * len(g.seeds)):
            text = "MASK" if sid < 0 else tok(sid)
            cells.append(f'<td class="dl-seed seed-{SEED_CLASS.get(k, "none")}" '
                         f'style="background:{SEED_COLOURS.get(k, "#fff")}" title="{html.escape(SEED_HELP.get(k, ""))}'
                         f'{"" if sid < 0 else f" · id {sid}"}">{html.escape(text)}</td>')
        rows.append(f'<tr><th class="rowh">seed (block input)</th>{"".join(cells)}<td></td></tr>')
    if g.cand_ids:
        for k in range(g.K):
            cells = []
            for j in range(n):
                tid = g.cand_ids[j][k]
                tgt = g.target is not None and g.target[j] == tid
                logit = g.cand_logits[j][k] if g.cand_logits else float("nan")
                cells.append(cell_html("–" if tid < 0 else tok(tid), cell_status(g, j, k),  # -1: no candidate (a
                                       f"{logit:.2f}" if math.isfinite(logit) else "",  # seeds-only round's ranks 2..K)
                                   "tgt" if tgt else "", f"id {tid}" + (" · the verifier's token" if tgt else "")))
            rows.append(f'<tr><th class="rowh">top-{k + 1}</th>{"".join(cells)}<td></td></tr>')
        rows.append(f'<tr class="sep"><td colspan="{n + 2}"></td></tr>')
    for p in g.paths:
        cells = "".join(cell_html("–" if t < 0 else tok(t), s, title=f"id {t} · {STATUS_HELP.get(s, '')}")
                        for t, s in zip(p.tokens, p.statuses))
        acc = "–" if p.accepted is None else str(p.accepted)
        rows.append(f'<tr class="dl-path"><th class="rowh" title="{html.escape(p.note)}">{html.escape(p.name)}'
                    f'{" ⚠" if p.note else ""}</th>{cells}<td><b>{acc}</b></td></tr>')
    if g.target is not None:
        cells = "".join(cell_html("–" if t < 0 else tok(t), title=f"id {t}") for t in g.target)
        rows.append(f'<tr><th class="rowh">{html.escape(g.target_label)}</th>{cells}<td></td></tr>')
    if g.committed is not None and g.target_label != "committed output":
        cells = "".join(cell_html("–" if t < 0 else tok(t), title=f"id {t}") for t in g.committed)
        rows.append(f'<tr><th class="rowh">committed output</th>{cells}<td></td></tr>')
    legend = "".join(f'<span class="dl-leg" style="background:{STATUS_COLOURS[s]}">{html.escape(h)}</span>'
                     for s, h in STATUS_HELP.items())
    legend += '<span class="dl-leg" style="outline:2px dashed #2b8a3e">the verifier\'s token among the candidates</span>'
    if g.seeds is not None:
        legend += "".join(f'<span class="dl-leg" style="background:{SEED_COLOURS[k]}">{html.escape(h)}</span>'
                          for k, h in SEED_HELP.items())
    return f'{GRID_CSS}<div class="dl-grid-wrap"><table class="dl-grid">{"".join(rows)}</table>{legend}</div>'
