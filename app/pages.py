"""The explorer's pages, one function each: `page(root)` renders into the current Streamlit container;
`PAGES` (title -> function) is the sidebar's list. Every loader returns a `Missing` (shown with st.info, or
st.warning for a corrupt file, naming the stage to run) instead of raising. Readers are cached by file stamp
(app/cached.py); charts come from app/plots.py with one fixed colour per arm (app/colours.py). The Candidate
grid lives in app/grid_page.py, Acceptance and Speed in app/bench_pages.py, Compare in app/compare.py, Trees and LiLiCorr in app/verdict_pages.py; this
file holds the Runs (MLflow) and Pipeline plots (DVC) pages."""
from __future__ import annotations

from pathlib import Path

import altair as alt
import pandas as pd
import streamlit as st

import bench_pages
import cached as C
import compare
from draftlab import paths
from draftlab.explore import formats as F
import grid_page
from draftlab.explore import loaders as L
import dvc_plots as DP
import plots as P
import runs_data as M
import verdict_pages
from cached import missing, options


# ---------------------------------------------------------------- Runs
def runs(root: Path) -> None:
    uri = M.tracking_uri(root)
    db = M.sqlite_path(uri)
    C.header(root, "Runs (MLflow)", (str(db.relative_to(root)) if db and db.is_relative_to(root) else str(db),)
             if db else ())
    st.caption(f"store: `{uri}`")
    df = C.runs(uri)
    if isinstance(df, L.Missing):
        return missing(df)
    exps = options(df["dvc_exp"].replace("", "(workspace)"))
    c1, c2 = st.columns(2)
    pick_exp = c1.multiselect("DVC experiment (tag `dvc_exp`)", exps, default=exps, key="runs_exp")
    stages = options(df["stage"])
    pick_stage = c2.multiselect("stage", stages, default=stages, key="runs_stage")
    f = df[df["dvc_exp"].replace("", "(workspace)").isin(pick_exp) & df["stage"].isin(pick_stage)]
    if f.empty:
        return st.info("No run matches these filters.")
    f = f.assign(label=[M.run_label(r) for _, r in f.iterrows()])
    latest = f.sort_values("start", ascending=False).drop_duplicates("stage")["label"].tolist()[:4]
    chosen = st.multiselect("runs to compare", f["label"].tolist(), default=latest, key="runs_pick")
    st.dataframe(f[["label", "stage", "dvc_exp", "status", "start", "run_id"]], hide_index=True, width="stretch")
    sel = f[f["label"].isin(chosen)]
    if sel.empty:
        return st.info("Pick at least one run to compare.")
    st.subheader("Params")
    only = st.checkbox("only params that differ", value=True, key="runs_only_diff")
    pdiff = M.params_diff(sel, only_diff=only)
    if pdiff.empty:
        st.caption("The selected runs have identical params." if only else "No params logged.")
    else:
        st.dataframe(pdiff, width="stretch")
    st.subheader("Metrics")
    mt = pd.DataFrame({M.run_label(r): pd.Series(r["metrics"], dtype=float) for _, r in sel.iterrows()}).sort_index()
    filt = st.text_input("filter metric names", "", key="runs_metric_filter")
    if filt:
        mt = mt[mt.index.str.contains(filt, case=False, regex=False)]
    st.dataframe(metric_text(mt), width="stretch")
    keys = sorted(set().union(*[set(m) for m in sel["metrics"]]))
    if keys:
        key = st.selectbox("metric curve", keys, key="runs_curve_key",
                           index=next((i for i, k in enumerate(keys) if "loss" in k), 0))
        h = C.history(uri, tuple(sel["run_id"]), key)
        if h.empty:
            st.caption("No history for this metric.")
        else:
            h = h.merge(sel[["run_id", "label"]], on="run_id")
            st.altair_chart(curve_chart(h, key), width="stretch")
            if h["step"].nunique() == 1:
                st.caption(f"`{key}` was logged at one step ({int(h['step'].iloc[0])}) only: one point per run.")


def metric_text(mt: pd.DataFrame) -> pd.DataFrame:
    """MLflow metrics (rows) × runs as text: a metric whose name says its kind (τ, tokens/s, ratio, share, ms) in
    that kind's format (formats.py), any other (a loss, a learning rate) with 4 significant digits."""
    out = mt.astype(object).copy()
    for name in mt.index:
        k = F.kind(str(name).split("/")[-1])
        out.loc[name] = [F.NA if pd.isna(v) else (F.number(v, k) if k != "other" else f"{v:.4g}")
                         for v in mt.loc[name]]
    return out


def curve_chart(h: pd.DataFrame, key: str) -> alt.Chart:
    """A metric's history per run over its steps; whole-number steps, and a history of one step (or one value) gets
    an axis with two ticks around it instead of a lone "0.000000"."""
    steps = sorted(int(s) for s in pd.unique(h["step"]))
    xs = alt.Scale(domain=[steps[0], steps[0] + 1]) if len(steps) == 1 else alt.Undefined
    return P.fit_x(alt.Chart(h, title=key).mark_line(point=True).encode(
        x=alt.X("step:Q", axis=P.int_axis("step"), scale=xs),
        y=alt.Y("value:Q", title=key, scale=P.spread(h["value"]) or alt.Scale(zero=False)), color="label:N",
        tooltip=["label", "step", alt.Tooltip("value:Q", format=".4g")]))


# ---------------------------------------------------------------- Pipeline plots (DVC)
def pipeline_plots(root: Path) -> None:
    defs = DP.dvc_plot_defs(root / "dvc.yaml")
    C.header(root, "Pipeline plots (DVC, offline)", sorted({d["path"] for d in defs}))
    if not defs:
        st.info(f"No plots declared in `{root / 'dvc.yaml'}`.")
    temps, suites = plot_dimensions(root, defs)
    c1, c2 = st.columns(2)
    temp = c1.selectbox("temperature", temps, key="plots_temp", format_func=F.temp_label) if temps else None
    pick = c2.multiselect("suites", suites, default=suites, key="plots_suites") if suites else None
    st.caption("Every chart shows one temperature and one panel per suite (never a sum over them); colour = arm "
               "(the same colour on every page).")
    for d in defs:
        ch = DP.chart_for_def(root, d, temp, pick)
        if isinstance(ch, L.Missing):
            if ch.kind == "corrupt":
                missing(ch)
            else:
                st.caption(f"`{d['path']}`: {ch.message}")
            continue
        st.altair_chart(ch, width="stretch")
    st.subheader("Render `dvc plots show --json` output")
    path = st.text_input("path to the JSON (e.g. from `dvc plots show --json > plots.json`)", "", key="plots_json")
    if path:
        p = Path(path) if Path(path).is_absolute() else root / path
        if not p.exists():
            st.info(f"`{p}` does not exist: run `dvc plots show --json > {path}` in {root}.")
        else:
            try:
                specs = DP.specs_from_dvc_json(p)
            except ValueError as e:
                specs = {}
                st.info(f"`{p}` is not `dvc plots show --json` output ({e}).")
            for name, ss in specs.items():
                for s in ss:
                    st.caption(name)
                    st.vega_lite_chart(s)


def plot_dimensions(root: Path, defs: list[dict]) -> tuple[list, list]:
    """The temperatures and suites found in the declared plot CSVs (for the page's filters)."""
    temps, suites = set(), set()
    for d in defs:
        f = root / d["path"]
        if f.suffix != ".csv" or not f.exists():
            continue
        try:
            cols = pd.read_csv(f, usecols=lambda c: c in ("temperature", "suite"))
        except (OSError, ValueError, pd.errors.EmptyDataError):
            continue
        temps |= set(cols["temperature"].dropna()) if "temperature" in cols else set()
        suites |= set(cols["suite"].dropna()) if "suite" in cols else set()
        if d["path"] in paths.CURVES.values():  # a training curve names its suites in its columns
            suites |= set(DP.curve_suites(pd.read_csv(f, nrows=0), d.get("x") or "train_minutes"))
    return sorted(temps, key=str), sorted(s for s in suites if s != "mixed")


PAGES = {
    "Candidate grid": grid_page.candidate_grid,
    "Acceptance": bench_pages.acceptance,
    "Speed": bench_pages.speed,
    "Runs": runs,
    "Pipeline plots": pipeline_plots,
    "Compare": compare.compare,
    "Trees": verdict_pages.trees,
    "LiLiCorr": verdict_pages.lilicorr,
}
