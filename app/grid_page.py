"""The explorer's Candidate grid page: one round of one prompt of the recorded rounds
(data/benchmark_rounds.parquet) — every slot's top-K candidates with the paths each rule walked
(src/draftlab/explore/grid.py builds them), the accepted length per round, and for a DCOCO arm that records them the
K×K transition scores of every slot pair as a table and a heatmap. A seeded drafter's round also shows
its seeds (the block's input) and, per slot, whether the drafter kept or changed the seed."""
from __future__ import annotations

from pathlib import Path

import altair as alt
import pandas as pd
import streamlit as st

import cached as C
from draftlab.explore import grid as G
from draftlab.explore import loaders as L
from draftlab.explore import tree_view as TV
import plots as P
from cached import missing, options
from colours import arm_order
from tree_view import tree_section


def candidate_grid(root: Path) -> None:
    C.header(root, "Candidate grid", (L.ROUNDS,))
    df = C.rounds(root)
    if isinstance(df, L.Missing):
        return missing(df)
    tok = C.tokenizer(root)
    if not tok.available:
        st.caption(tok.source)
    c1, c2, c3 = st.columns(3)
    arm = c1.selectbox("arm", arm_order(df["arm"].unique()), key="grid_arm")
    d = df[df["arm"] == arm]
    suite = c2.selectbox("suite", options(d["suite"]), key="grid_suite")
    d = d[d["suite"] == suite]
    temp = c3.selectbox("temperature", options(d["temperature"]), key="grid_temp", format_func=lambda t: f"T={t:g}")
    d = d[d["temperature"] == temp]
    if "concurrency" in d.columns and d["concurrency"].nunique() > 1:
        conc = st.selectbox("concurrency", options(d["concurrency"]), key="grid_conc")
        d = d[d["concurrency"] == conc]
    prompt = st.selectbox("prompt", options(d["prompt_id"]), key="grid_prompt")
    d = d[d["prompt_id"] == prompt].sort_values("round")
    rounds_ = d["round"].astype(int).tolist()
    if len(rounds_) > 1:
        rnd = st.select_slider("round", options=rounds_, key="grid_round")
    else:
        rnd = st.selectbox("round", rounds_, key="grid_round_one")
    row = d[d["round"] == rnd].iloc[0]
    g = G.build(row)

    m1, m2, m3, m4 = st.columns(4)
    m1.metric("accepted length (acc)", g.accepted)
    m2.metric("tokens this round (acc + 1)", g.tau)
    m3.metric("τ of this prompt", f"{(d['accepted'].mean() + 1):.2f}")
    m4.metric("n × K", f"{g.n} × {g.K}" if g.K else f"{g.n} × –")
    st.markdown(G.grid_html(g, tok), unsafe_allow_html=True)
    seeds = g.seed_summary()
    if seeds is not None:
        prompt_kept = [k for v in d["seed_kept"] for k in (G.as_list(v) or []) if k >= 0]
        st.caption(f"Seeds: {seeds[0]} of this round's {g.n} slots started from the lookup's guess; the drafter kept "
                   f"{seeds[1]} and changed {seeds[2]} (its top-1 against the seed). Over this prompt's rounds it kept "
                   f"{sum(k == 1 for k in prompt_kept)} of {len(prompt_kept)} seeds.")
    for msg in g.missing:
        st.caption(f"Not shown: {msg}.")
    for p in g.paths:
        if p.note:
            st.caption(f"{p.name}: {p.note}")

    left, right = st.columns([3, 2])
    with left:
        st.altair_chart(accepted_chart(d, rnd, g.n), width="stretch")
        if (d["accepted"] == 0).all():
            st.caption("Every round of this prompt accepted 0 proposals (each round commits only the target's bonus "
                       "token: τ = 1); the dots mark the zeros.")
    with right:
        if g.scores is not None:
            st.subheader("Transition scores of one predecessor" if g.score_kind == "transition"
                         else "Pair scores of one predecessor")
            rule_paths = [p for p in g.paths if p.name.startswith("corrected")]
            pname = st.selectbox("predecessor from path", [p.name for p in rule_paths], key="grid_pred_path")
            slot = st.selectbox("from slot p → p+1", list(range(1, g.n)), key="grid_pred_slot")
            path = next(p for p in rule_paths if p.name == pname)
            a = g.cand_ids[slot - 1].index(path.tokens[slot - 1])
            what = "S_p(a, b)" if g.score_kind == "transition" else "pair_s(a, b)"
            st.caption(f"{what} for a = {tok(path.tokens[slot - 1])} (rank {a + 1} at slot {slot}) "
                       f"into slot {slot + 1}")
            st.dataframe(G.transition_table(g, slot - 1, a, tok), hide_index=True, width="stretch")
        else:
            st.caption("Per-slot transition scores: none recorded for this arm (a DCOCO arm's `transition_scores` "
                       "or LiLiCorr's `pair_rows` show here).")
    if g.scores is not None:
        transition_heatmap(g, tok)
    if TV.is_tree(row):
        later = d[d["round"] == rnd + 1]
        tree_section(row, tok, later.iloc[0] if len(later) else None)
    with st.expander("Output so far (committed tokens of the earlier rounds, then this round's block)"):
        before = [t for _, r in d[d["round"] < rnd].iterrows() for t in (G.as_list(r["committed"]) or [])[: int(r["accepted"]) + 1]]
        this = (g.committed or [])[: g.accepted + 1]
        st.code(tok.text(before) + " ⟦" + tok.text(this) + "⟧", language=None)


def accepted_chart(d: pd.DataFrame, rnd: int, n: int) -> alt.LayerChart:
    """Accepted length per round of one prompt: bars, and a dot on each round so rounds with acc = 0 (a bar of
    height zero) stay visible; the chosen round in orange; y from 0 to n (the block's proposals)."""
    fig = d[["round", "accepted"]].copy()
    fig["current"] = fig["round"] == rnd
    colour = alt.condition("datum.current", alt.value("#e8590c"), alt.value("#4c6ef5"))
    base = alt.Chart(fig, title="Accepted length per round").encode(
        x=alt.X("round:O", axis=alt.Axis(labelAngle=0)),
        y=alt.Y("accepted:Q", title="accepted length", scale=alt.Scale(domain=[0, max(1, n)]),
                axis=alt.Axis(format="d", tickMinStep=1)),
        color=colour, tooltip=["round", "accepted"])
    return alt.layer(base.mark_bar(), base.mark_point(filled=True, size=40))


HEATMAP_HELP = (
    "**How DCOCO picks the block.** For every pair of neighbouring slots p → p+1 the corrector scores all K×K "
    "transitions at once: **S_p(a, b) = ℓ_{p+1}(b) + Δθ(z_{p,a}, z_{p+1,b}, s_p)** "
    "(docs/algorithms.md, \"Transition scores\"). "
    "ℓ_{p+1}(b) is the drafter's own logit of candidate b — the same down a whole column, so without a "
    "corrector every row prefers the drafter's argmax. **Δθ** is what the corrector learned: a small two-layer MLP "
    "over the representations of the two candidates (z: token embedding and slot state) and of the slot pair "
    "(s_p), whose output layer starts at zero, so an untrained corrector changes nothing. A positive Δθ means "
    "'b reads well after a'. The greedy rule keeps the drafter's top candidate at slot 1 and then, in the row of "
    "the token it chose at slot p, takes the column with the highest S_p (markers: the cells each path rule "
    "walked through; dashed white outline: the drafter's argmax transition, rank 1 → rank 1)."
)


PAIR_HELP = (
    "**How LiLiCorr picks the block.** One pass of a small transformer over the block's n × K candidates gives every "
    "candidate an `out` and an `in` unit vector; **pair_s(a, b) = σ · ⟨out_{s,a}, in_{s+1,b}⟩** scores candidate b "
    "after candidate a (docs/algorithms.md \"LiLiCorr\"). Unlike DCOCO's S_p, the drafter's logit is not in the score. "
    "The walk takes slot 1's candidate with the best start score, then in the row of the token it chose at slot s the "
    "column with the highest pair score (markers: the cells its walk went through; dashed white outline: rank 1 → "
    "rank 1, the drafter's argmax transition)."
)


def transition_heatmap(g: G.RoundGrid, tok) -> None:
    """Every slot pair's K×K transition (DCOCO) or pair (LiLiCorr) scores of the round, with the paths drawn on them."""
    frame = G.heatmap_frame(g, tok)
    if g.score_kind == "pair":
        st.subheader("K×K pair scores, every slot pair")
        st.markdown(PAIR_HELP)
        if g.start:
            st.caption("Start scores of slot 1's candidates (rank: score): " +
                       ", ".join(f"{k + 1}·{tok(g.cand_ids[0][k])}: {v:+.2f}" for k, v in enumerate(g.start)))
        st.altair_chart(P.heatmap_chart(frame, "S", title="pair_s(a, b) = σ·⟨out_a, in_b⟩"))
        return
    st.subheader("K×K transition scores, every slot pair")
    st.markdown(HEATMAP_HELP)
    value = st.radio("colour by", ["S", "dtheta", "logit"], horizontal=True, key="grid_heat_value",
                     format_func={"S": "S_p(a, b)", "dtheta": "Δθ (the correction)", "logit": "ℓ_{p+1}(b) (drafter)"}.get)
    st.altair_chart(P.heatmap_chart(frame, value))
    cells = frame[frame["rule"] == ""]
    st.caption(f"Δθ over this round: mean {cells['dtheta'].mean():+.3f}, range {cells['dtheta'].min():+.3f} … "
               f"{cells['dtheta'].max():+.3f} (0 everywhere would reproduce the drafter's argmax).")
