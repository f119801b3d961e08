"""The explorer's Trees and LiLiCorr pages: the verdict tools' files (results/trees.json, results/lilicorr.json; read
by draftlab.explore.verdict_files) with every figure's 95% interval and its unit and count, the pairs as the tools
wrote them, and what only one tool writes (the trees' flat-verify model; LiLiCorr's co-training beside the corrector
stage's variants)."""
from __future__ import annotations

from pathlib import Path

import streamlit as st

import cached as C
from draftlab.explore import formats as F
from draftlab.explore import loaders as L
from draftlab.explore import verdict_files as VF
from cached import missing

NUMBER = {c: st.column_config.NumberColumn(c, format="%.3f") for c in
          ("τ", "τ lo", "τ hi", "× AR (total time)", "Δτ (a − b)", "Δτ lo", "Δτ hi", "tokens/s a ÷ b", "ratio lo",
           "ratio hi")}
NUMBER.update({c: st.column_config.NumberColumn(c, format="%.1f") for c in ("tokens/s", "tokens/s lo", "tokens/s hi")})


def labelled(df):
    """A frame as shown: its temperature key (t0) as the explorer writes temperatures everywhere (T=0)."""
    return df.assign(T=df["T"].map(F.temp_label))


def verdict_page(root: Path, name: str) -> dict | None:
    """The page's header, what the file says it is, its arms and pairs tables; the file (for the page's own
    sections) or None after saying what to run."""
    f = VF.FILES[name]
    C.header(root, f"{name} (`{f.tool}`)", (f.rel,))
    d = C.verdict_file(root, name)
    if isinstance(d, L.Missing):
        missing(d)
        return None
    about = " ".join(str(d.get("about", f.what)).split())
    st.markdown(about if about.endswith(".") else about + " …")  # files written before the tools kept the paragraph
    if d.get("note"):
        st.caption(f"Models: {d['note']}")
    temps = VF.temperatures(d)
    temp = st.selectbox("temperature", temps, key=f"verdict_{name}_temp", format_func=F.temp_label) if temps else None
    arms = VF.arms_frame(d)
    st.subheader("Arms")
    units = arms[arms["T"] == temp][["unit", "n"]].drop_duplicates().to_dict("records")
    st.caption("Intervals: 95% over " + "; ".join(F.count(u["n"], u["unit"]) for u in units) +
               " (the unit the tool resampled). × AR: tokens/s over AR's in the same run, by total time.")
    st.dataframe(labelled(arms[arms["T"] == temp]), hide_index=True, width="stretch", column_config=NUMBER)
    pairs = VF.pairs_frame(d)
    st.subheader("Pairs")
    if pairs.empty:
        st.caption("The file holds no pairs.")
    else:
        st.caption("Paired over the prompts both arms decoded (same prompts, same order); an interval that excludes "
                   "0 (Δτ) or 1 (ratio) is a difference beyond this run's noise — one run, so not a replicated verdict.")
        st.dataframe(labelled(pairs[pairs["T"] == temp]), hide_index=True, width="stretch", column_config=NUMBER)
    return d


def trees(root: Path) -> None:
    d = verdict_page(root, "Trees")
    if d is None:
        return
    flat = VF.flat_verify_frame(d)
    flat = flat[flat["T"] == st.session_state.get("verdict_Trees_temp")]
    if not flat.empty:
        st.subheader("If a verify pass cost the same at every width (a model, not a measurement)")
        st.caption("Each tree's round with its verify phase replaced by its chain's, tokens per round-millisecond "
                   "over the chain's; averaged over suites (equal weights). An accelerator's regime, modelled.")
        st.dataframe(labelled(flat), hide_index=True, width="stretch")


def lilicorr(root: Path) -> None:
    d = verdict_page(root, "LiLiCorr")
    if d is None:
        return
    tr = VF.training_frame(d)
    if not tr.empty:
        st.subheader("Co-training")
        st.caption("LiLiCorr as this tool trained it beside the corrector stage's families on the same base drafter: "
                   "updates, minutes, simulated τ before and after (and its standard error), the reachable oracle and "
                   "the share of its headroom closed.")
        st.dataframe(tr, hide_index=True, width="stretch")
