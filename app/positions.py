"""The explorer's per-position reading, on the Speed page: τ and tokens/s by where in the answer a
round starts (plots/benchmark_positions.csv: one row per suite, temperature, arm and 32-token bin) and the
first-32-tokens vs later table of the summary (`positions_<t>`), so a reader sees where a copy-based method
gains; and the copy / loop reading per arm. Ablation arms are labelled `(ablation)` in every legend and table."""
from __future__ import annotations

from pathlib import Path

import altair as alt
import pandas as pd
import streamlit as st

import cached as C
from draftlab.explore import formats as F
from draftlab.explore import loaders as L
import plots as P
from cached import missing
from colours import arm_color

ABLATION = " (ablation)"


def label(arm: str, ablation) -> str:
    """The arm's name as the tables show it: `(ablation)` appended for an ablation arm."""
    return arm + (ABLATION if ablation is not None and not pd.isna(ablation) and bool(ablation) else "")


def positions_rows(df: pd.DataFrame, temp: str, suites: list) -> pd.DataFrame:
    """The bins at `temp` of `suites` pooled over those suites (tokens, rounds and seconds summed: τ = tokens ÷ rounds,
    tokens/s = tokens ÷ seconds, the speedup that over AR's in the same bin — total time, never a mean of the suites'
    ratios), with the `label` column. A bin's seconds are its tokens ÷ its tokens/s."""
    sel = df[(df["temperature"] == temp) & df["suite"].isin(suites)]
    if sel.empty:
        return sel.assign(label=pd.Series(dtype=str))
    if "ablation" not in sel.columns:
        sel = sel.assign(ablation=False)
    sel = sel.assign(seconds=sel["tokens"] / sel["tokens_per_s"].where(sel["tokens_per_s"] > 0))
    g = sel.groupby(["arm", "ablation", "start"], as_index=False).agg(
        rounds=("rounds", "sum"), tokens=("tokens", "sum"), seconds=("seconds", "sum"))
    g["tokens_per_s"] = g["tokens"] / g["seconds"].where(g["seconds"] > 0)
    ar = g[g["arm"] == "ar"].set_index("start")["tokens_per_s"]
    g["speedup"] = [t / ar[s] if s in ar.index and ar[s] and t == t else None
                    for t, s in zip(g["tokens_per_s"], g["start"])]
    g["tau"] = g["tokens"] / g["rounds"].where(g["rounds"] > 0)
    g["label"] = [label(a, x) for a, x in zip(g["arm"], g["ablation"])]
    return g


def positions_chart(g: pd.DataFrame, y: str, title: str, width: int = 32) -> alt.Chart:
    """One line per arm over the bins' start index. The x axis runs over the bins' edges (0, 32, 64, ...) up to the
    end of the last bin, with a tick on each edge: a run whose answers fill one bin still shows the bin's two edges
    (its axis was one "0.000000" tick)."""
    d = g.dropna(subset=[y])
    starts = sorted(int(s) for s in pd.unique(d["start"])) or [0]
    edges = list(range(starts[0], starts[-1] + width + 1, width))
    step = max(1, len(edges) // 12)  # at most ~12 labelled edges
    return P.fit_x(alt.Chart(d).mark_line(point=True).encode(
        x=alt.X("start:Q", scale=alt.Scale(domain=[edges[0], edges[-1]], nice=False),
                axis=P.int_axis(f"answer position where the round starts ({width}-token bins)", edges[::step])),
        y=alt.Y(f"{y}:Q", title=y, scale=P.spread(d[y]) or alt.Undefined), color=arm_color(sorted(g["arm"].unique())),
        detail="label:N", strokeDash=alt.StrokeDash("ablation:N", title="ablation"),
        tooltip=["label", "start", P.tip(y), "rounds", "tokens"]).properties(title=title, height=260))


def segments_frame(detail: dict, temp: str) -> pd.DataFrame:
    """Per arm: τ, tokens/s and speedup of the rounds starting in the first 32 tokens vs later (means over
    suites, summary `positions_<t>`), and the copy / loop shares."""
    rows = []
    for arm, e in (detail.get("summary") or {}).items():
        pos = e.get(f"positions_{temp}")
        if not pos:
            continue
        row = {"arm": label(arm, e.get("ablation"))}
        for seg in ("first", "later"):
            for k in ("tau", "tokens_per_s", "speedup"):
                row[f"{k} ({seg})"] = (pos.get(seg) or {}).get(k)
        for k in ("copy_share", "repeat_share", "loop_share"):
            row[k] = e.get(f"{k}_{temp}")
        rows.append(row)
    return pd.DataFrame(rows)


def positions_section(root: Path, detail: dict, temp: str, suites: list) -> None:
    st.subheader("By position in the answer")
    df = C.plot(root, "positions")
    if isinstance(df, L.Missing):
        missing(L.Missing(df.message + " (older benchmark runs did not write it: re-run the benchmark stage)", df.kind))
        return
    g = positions_rows(df, temp, suites)
    if g.empty:
        st.info(f"No per-position rows at {F.temp_label(temp)} for the chosen suites.")
        return
    metric = st.selectbox("per-position metric", ["tau", "tokens_per_s", "speedup"], key="pos_metric")
    st.altair_chart(positions_chart(g, metric, f"{metric} by where the round starts ({F.temp_label(temp)})"),
                    width="stretch")
    seg = segments_frame(detail, temp)
    if not seg.empty:
        st.dataframe(F.table(seg), hide_index=True, width="stretch")
    st.caption("Rounds binned by the output index they start at, pooled over prompts; tokens/s is decode time only "
               "(the prefill is in no bin), speedup against AR in the same bin. First = rounds starting in the first "
               "32 tokens. copy_share / repeat_share: output tokens inside a 4-token window found in the prompt / "
               "earlier in the answer; loop_share: answers with an 8-token span repeated later. Ablation arms decode "
               "a smaller sample (`benchmark.ablation_prompts_per_suite`).")
