"""The Candidate grid's tree view (a tree arm's round: draftlab.explore.tree_view builds it from the recorded tree):
the tree drawn by depth with each node's status after the walk, the accepted path and the bonus token, and the
nodes by depth with their step log-probabilities (the ranking's row value that placed them) and path scores."""
from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from draftlab.explore import tree_view as TV

STATUS_COLOURS = dict(zip(TV.STATUS_ORDER, ("#495057", "#2b8a3e", "#e03131", "#adb5bd")))  # grey, green, red, light


def tree_chart(frame: pd.DataFrame, bonus: str | None, accepted: int) -> alt.LayerChart:
    """frame (tree_view.layout with `text`): edges parent -> child, one dot per node coloured by its status, the
    token beside it; the bonus token one depth after the accepted path's last node, on a row of its own below."""
    d = frame.copy()
    leaves = max(1.0, float(d["y"].max()) + 1)
    colour = alt.Color("status:N", title="after the walk", scale=alt.Scale(domain=list(STATUS_COLOURS),
                                                                           range=list(STATUS_COLOURS.values())))
    xs = alt.Scale(domain=[-0.3, float(d["depth"].max()) + 1.6], nice=False)  # room for the bonus and its label
    ys = alt.Scale(domain=[-0.5, leaves + 0.5], reverse=True, nice=False)  # the bonus on a row of its own below
    x = alt.X("depth:Q", title="depth (slot of the block; 0 = the last committed token)",
              axis=alt.Axis(tickMinStep=1, format="d"), scale=xs)
    y = alt.Y("y:Q", axis=None, scale=ys)
    tips = ["node", "text", "depth", "parent", "rank", alt.Tooltip("step_logp:Q", format=".3f", title="step log-prob"),
            alt.Tooltip("score:Q", format=".3f", title="path score"), "status"]
    edges = alt.Chart(d.dropna(subset=["px"])).mark_rule(color="#ced4da").encode(
        x=alt.X("px:Q", axis=None, scale=xs), y=alt.Y("py:Q", axis=None, scale=ys), x2="depth:Q", y2="y:Q")
    dots = alt.Chart(d).mark_circle(size=70, opacity=1).encode(x=x, y=y, color=colour, tooltip=tips)
    labels = alt.Chart(d).mark_text(align="left", dx=7, fontSize=11).encode(x=x, y=y, text="text:N", color=colour)
    layers = [edges, dots, labels]
    if bonus is not None:
        leaf = d[d["status"].isin(["accepted", "root"])].sort_values("depth").iloc[-1]
        b = pd.DataFrame([{"depth": leaf["depth"] + 1, "y": leaves, "px": leaf["depth"], "py": leaf["y"],
                           "text": f"{bonus}  (bonus: the target's own token)"}])
        at = {"x": x, "y": y}
        layers += [alt.Chart(b).mark_rule(color="#2b8a3e", strokeDash=[4, 3]).encode(
                       x=alt.X("px:Q", axis=None, scale=xs), y=alt.Y("py:Q", axis=None, scale=ys), x2="depth:Q",
                       y2="y:Q"),
                   alt.Chart(b).mark_point(shape="diamond", size=90, filled=True, color="#2b8a3e").encode(**at),
                   alt.Chart(b).mark_text(align="left", dx=8, fontSize=11, fontWeight="bold", color="#2b8a3e").encode(
                       text="text:N", **at)]
    title = f"This round's tree: {len(d)} nodes, {accepted} accepted below the root"
    return alt.layer(*layers).properties(title=title, height=max(180, int(26 * (leaves + 1))))


def tree_section(row, tok, next_row=None) -> None:
    """The tree of one recorded round (a rounds row with the tree recorded), or a line saying why it is not there;
    next_row: the prompt's next round (its root is this round's bonus when the whole block was accepted)."""
    if not TV.has_tree(row):
        st.caption("This tree arm's rounds carry no recorded tree (`tree_tokens`, `tree_parent`, `tree_path`): they "
                   "were written by an older benchmark; run the benchmark stage again to see its trees here.")
        return
    nxt = TV.as_list(next_row["tree_tokens"]) if next_row is not None and TV.has_tree(next_row) else None
    t = TV.build(row, int(nxt[0]) if nxt else None)
    st.subheader("The round's tree")
    st.markdown(f"Ranked by **{t.ranking}**; grown best first to a budget of {t.budget} nodes (node 0 is the last "
                f"committed token). The walk follows the target's token from the root: green nodes were accepted, red "
                f"ones are children of an accepted node that did not hold the target's token, grey ones were never "
                f"reached. The grid above shows the accepted path as the arm's proposal, then the best child the walk rejected "
                f"below it (the first red node under the path's last one).")
    m1, m2, m3 = st.columns(3)
    m1.metric("nodes (real)", len(t.nodes))
    m2.metric("accepted depth", t.accepted)
    m3.metric("bonus token", "–" if t.bonus is None else tok(t.bonus))
    frame = TV.layout(t).assign(text=lambda f: [tok(x) for x in f["token"]])
    st.altair_chart(tree_chart(frame, None if t.bonus is None else tok(t.bonus), t.accepted), width="stretch")
    st.dataframe(TV.by_depth(t, tok), hide_index=True, width="stretch",
                 column_config={"step_logp": st.column_config.NumberColumn("step log-prob", format="%.3f"),
                                "score": st.column_config.NumberColumn("path score", format="%.3f"),
                                "text": "token (text)", "token": "token id"})
