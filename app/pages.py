"""The explorer's pages, one function each: `page(root)` renders into the current Streamlit container.
Every loader returns a `Missing` (shown with st.info, naming the stage to run) instead of raising."""
from __future__ import annotations

from pathlib import Path

import altair as alt
import pandas as pd
import streamlit as st

import grid as G
import loaders as L
import peers as R
import plots as P

# the oracles every headroom figure is read against (benchmark metric -> label), one entry each
ORACLES = {"oracle_tau": "top-K oracle", "oracle_tau_reachable": "reachable oracle"}


# ---------------------------------------------------------------- cached loaders (keyed by file mtime)
@st.cache_data(show_spinner=False, max_entries=8)
def _benchmark(root: str, _m: float):
    return L.load_benchmark(Path(root))


@st.cache_data(show_spinner=False, max_entries=16)
def _plot(root: str, name: str, _m: float):
    return L.load_plot(Path(root), name)


@st.cache_data(show_spinner=False, max_entries=4)
def _rounds(root: str, _m: float):
    return L.load_rounds(Path(root))


@st.cache_resource(show_spinner=False, max_entries=4)
def _tokenizer(root: str, _m: float):
    return L.load_tokenizer(Path(root))


@st.cache_data(show_spinner=False, max_entries=4, ttl=30)
def _runs(uri: str, _m: float):
    return L.load_runs(uri)


@st.cache_data(show_spinner=False, max_entries=32, ttl=30)
def _history(uri: str, run_ids: tuple, key: str, _m: float):
    return L.metric_history(uri, list(run_ids), key)


def benchmark(root: Path):
    return _benchmark(str(root), L.mtime(root / L.BENCH_JSON))


def plot(root: Path, name: str):
    return _plot(str(root), name, L.mtime(root / L.PLOTS[name]))


def rounds(root: Path):
    return _rounds(str(root), L.mtime(root / L.ROUNDS))


def tokenizer(root: Path):
    f = L.tokenizer_file(root)
    return _tokenizer(str(root), L.mtime(f) if f else 0.0)


def missing(m: L.Missing) -> None:
    st.info(m.message, icon="ℹ️")


def benchmark_page(root: Path, title: str):
    """Header + benchmark detail and its per-arm rows, or None after showing what to run."""
    st.header(title)
    detail = benchmark(root)
    if isinstance(detail, L.Missing):
        missing(detail)
        return None
    return detail, L.benchmark_rows(detail)


# ---------------------------------------------------------------- Candidate grid
def _options(values) -> list:
    return sorted(pd.unique(pd.Series(list(values))).tolist(), key=lambda v: (str(type(v)), v))


def candidate_grid(root: Path) -> None:
    st.header("Candidate grid")
    df = rounds(root)
    if isinstance(df, L.Missing):
        return missing(df)
    tok = tokenizer(root)
    if not tok.available:
        st.caption(tok.source)
    c1, c2, c3 = st.columns(3)
    arm = c1.selectbox("arm", _options(df["arm"]), key="grid_arm")
    d = df[df["arm"] == arm]
    suite = c2.selectbox("suite", _options(d["suite"]), key="grid_suite")
    d = d[d["suite"] == suite]
    temp = c3.selectbox("temperature", _options(d["temperature"]), key="grid_temp", format_func=lambda t: f"T={t:g}")
    d = d[d["temperature"] == temp]
    if "concurrency" in d.columns and d["concurrency"].nunique() > 1:
        conc = st.selectbox("concurrency", _options(d["concurrency"]), key="grid_conc")
        d = d[d["concurrency"] == conc]
    prompt = st.selectbox("prompt", _options(d["prompt_id"]), key="grid_prompt")
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
    for msg in g.missing:
        st.caption(f"Not shown: {msg}.")
    for p in g.paths:
        if p.note:
            st.caption(f"{p.name}: {p.note}")

    left, right = st.columns([3, 2])
    with left:
        fig = d[["round", "accepted"]].copy()
        fig["current"] = fig["round"] == rnd
        chart = alt.Chart(fig, title="Accepted length per round").mark_bar().encode(
            x=alt.X("round:O"), y=alt.Y("accepted:Q", title="accepted length"),
            color=alt.condition("datum.current", alt.value("#e8590c"), alt.value("#4c6ef5")),
            tooltip=["round", "accepted"])
        st.altair_chart(chart, width="stretch")
    with right:
        if g.scores is not None:
            st.subheader("Transition scores")
            rule_paths = [p for p in g.paths if p.name.startswith("corrected")]
            pname = st.selectbox("predecessor from path", [p.name for p in rule_paths], key="grid_pred_path")
            slot = st.selectbox("from slot p → p+1", list(range(1, g.n)), key="grid_pred_slot")
            path = next(p for p in rule_paths if p.name == pname)
            a = g.cand_ids[slot - 1].index(path.tokens[slot - 1])
            st.caption(f"S_p(a, b) for a = {tok(path.tokens[slot - 1])} (rank {a + 1} at slot {slot}) "
                       f"into slot {slot + 1}")
            st.dataframe(G.transition_table(g, slot - 1, a, tok), hide_index=True, width="stretch")
        else:
            st.caption("Per-slot transition scores: none recorded for this arm (a DCOCO arm that records "
                       "`transition_scores` adds them here).")
    with st.expander("Output so far (committed tokens of the earlier rounds, then this round's block)"):
        before = [t for _, r in d[d["round"] < rnd].iterrows() for t in (G.as_list(r["committed"]) or [])[: int(r["accepted"]) + 1]]
        this = (g.committed or [])[: g.accepted + 1]
        st.code(tok.text(before) + " ⟦" + tok.text(this) + "⟧", language=None)


# ---------------------------------------------------------------- Acceptance
def _temp_filter(df: pd.DataFrame, key: str) -> pd.DataFrame:
    temps = _options(df["temperature"])
    t = st.selectbox("temperature", temps, key=key)
    return df[df["temperature"] == t]


def acceptance(root: Path) -> None:
    loaded = benchmark_page(root, "Acceptance")
    if loaded is None:
        return
    detail, rows = loaded
    temps = _options(rows["temperature"])
    c1, c2 = st.columns(2)
    temp = c1.selectbox("temperature", temps, key="acc_temp")
    suites = c2.multiselect("suites", _options(rows["suite"]), default=_options(rows["suite"]), key="acc_suites")
    sel = rows[(rows["temperature"] == temp) & rows["suite"].isin(suites)]
    spec = sel[sel["arm"].isin(sel.loc[sel.get("accept_curve", pd.Series(dtype=object)).notna(), "arm"])] \
        if "accept_curve" in sel.columns else sel.iloc[0:0]

    st.subheader("τ per arm and suite")
    cols = [c for c in ("tau", "oracle_tau", "speedup", "break_even_tau") if c in sel.columns]
    tau = sel.pivot_table(index="arm", columns="suite", values="tau", aggfunc="first")
    tau["mean"] = tau.mean(axis=1)
    st.dataframe(tau.style.format("{:.3f}"), width="stretch")
    sim = detail.get("simulated") or {}
    if sim:
        s_rows = [{"arm": a, "suite": s, **{k: v for k, v in m.items() if isinstance(v, (int, float))}}
                  for a, by in sim.items() for s, m in by.items() if s in suites]
        if s_rows:
            st.caption("Teacher-forced (simulated) τ beside engine τ at T=0")
            st.dataframe(pd.DataFrame(s_rows), hide_index=True, width="stretch")

    st.subheader("Per-slot acceptance curves")
    curve = plot(root, "tau_per_slot")
    if isinstance(curve, L.Missing):
        missing(curve)
    else:
        cv = curve[(curve["temperature"] == temp) & curve["suite"].isin(suites)]
        if cv.empty:
            st.info("No speculative arm at this temperature / suites: run `dvc repro benchmark` with a speculative arm.")
        else:
            st.altair_chart(P.accept_curve_chart(cv).properties(height=260).facet(column=alt.Column("suite:N", title=None)))

    st.subheader("Top-k coverage and oracle τ")
    cov = plot(root, "coverage")
    if isinstance(cov, L.Missing):
        missing(cov)
    else:
        cv = cov[(cov["temperature"] == temp) & cov["suite"].isin(suites)]
        slots = st.multiselect("slots (empty = mean over slots)", _options(cov["slot"]), default=[], key="acc_slots")
        if cv.empty:
            st.info("No coverage at this temperature / suites: run `dvc repro benchmark` (coverage needs recorded top-K).")
        else:
            st.altair_chart(P.coverage_chart(cv, slots).properties(height=260).facet(column=alt.Column("suite:N", title=None)))
    oracles = [c for c in ORACLES if c in sel.columns and sel[c].notna().any()]
    if oracles:
        o = sel.dropna(subset=oracles[:1])[["suite", "arm", "tau", *oracles]].copy()
        for c in oracles:
            o[f"headroom ({ORACLES[c]} − τ)"] = o[c] - o["tau"]
        st.dataframe(o, hide_index=True, width="stretch")
        st.subheader("Headroom closed")
        arms = _options(o["arm"])
        base = st.selectbox("baseline arm (uncorrected drafter)", arms,
                            index=arms.index("dflash") if "dflash" in arms else 0, key="acc_base")
        b = o[o["arm"] == base].set_index("suite")
        others = sel[(sel["arm"] != base) & sel["arm"].isin(spec["arm"]) & sel["suite"].isin(b.index)]
        if others.empty:
            st.info(f"Only `{base}` has acceptance numbers: the share of headroom an arm closes needs a second "
                    f"speculative arm (e.g. a DCOCO arm in `benchmark.arms`, then `dvc repro benchmark`).")
        else:
            hc = others[["suite", "arm", "tau"]].copy()
            hc["baseline τ"] = hc["suite"].map(b["tau"])
            fmt = {"tau": "{:.3f}", "baseline τ": "{:.3f}"}
            for c in oracles:  # one pair of columns per oracle
                hc[f"baseline {ORACLES[c]} τ"] = hc["suite"].map(b[c])
                gap = hc[f"baseline {ORACLES[c]} τ"] - hc["baseline τ"]
                hc[f"headroom closed ({ORACLES[c]})"] = ((hc["tau"] - hc["baseline τ"]) / gap).where(gap > 0)
                fmt.update({f"baseline {ORACLES[c]} τ": "{:.3f}", f"headroom closed ({ORACLES[c]})": "{:.1%}"})
            st.caption("(τ_arm − τ_base) / (oracle τ_base − τ_base) against each oracle: 1 = as good as an ideal "
                       "re-selector among the baseline's top-K (the top-K oracle), or the best a prefix-first greedy "
                       "corrector can do, slot 1 being the drafter's top-1 (the reachable oracle).")
            st.dataframe(hc.style.format(fmt), hide_index=True, width="stretch")
    else:
        st.info("No oracle τ yet (needs recorded top-K candidates): run `dvc repro benchmark`.")
    R.sources_section(detail, temp)
    del cols


# ---------------------------------------------------------------- Speed
def speed(root: Path) -> None:
    loaded = benchmark_page(root, "Speed")
    if loaded is None:
        return
    detail, rows = loaded
    temp = st.selectbox("temperature", _options(rows["temperature"]), key="speed_temp")
    sel = rows[rows["temperature"] == temp]
    table_cols = [c for c in ("suite", "arm", "tokens_per_s", "decode_tokens_per_s", "tokens_per_s_stream", "speedup",
                              "tau", "break_even_tau", "round_total_ms", "rounds", "tokens") if c in sel.columns]
    st.dataframe(sel[table_cols], hide_index=True, width="stretch")
    c1, c2 = st.columns(2)
    if "speedup" in sel.columns and sel["speedup"].notna().any():
        c1.altair_chart(P.bar_chart(sel.dropna(subset=["speedup"]), "speedup", "Speedup over AR (same run)"))
    else:
        c1.info("No speedup: the AR arm is missing; run `dvc repro benchmark` with `ar` in `benchmark.arms`.")
    if "tokens_per_s" in sel.columns:
        c2.altair_chart(P.bar_chart(sel.dropna(subset=["tokens_per_s"]), "tokens_per_s", "Tokens/s (aggregate)"))

    R.peers_section(detail, temp)

    st.subheader("Round time split")
    split = [{"suite": r["suite"], "temperature": r["temperature"], "arm": r["arm"], "phase": ph, "ms": ms,
              "share": (r.get("round_share") or {}).get(ph)}
             for _, r in sel.iterrows() if isinstance(r.get("round_ms"), dict) for ph, ms in r["round_ms"].items()]
    if split:
        st.altair_chart(P.round_split_chart(pd.DataFrame(split)))
    else:
        st.info("No round timings in `metrics/benchmark.json`: run `dvc repro benchmark`.")

    st.subheader("Concurrency")
    conc = plot(root, "concurrency")
    if isinstance(conc, L.Missing):
        missing(L.Missing(conc.message + " (the sweep runs when `benchmark.concurrency` is not empty)"))
    else:
        cfg = detail.get("config") or {}
        if "temperature" in conc.columns and conc["temperature"].nunique() > 0:
            tk = st.selectbox("temperature", _options(conc["temperature"]), key="speed_conc_t")
            conc = conc[conc["temperature"] == tk]
        base = cfg.get("concurrency_base", "dflash")
        if {"tau_ratio", "tokens_per_s_ratio"} <= set(conc.columns) and conc["tau_ratio"].notna().any():
            st.altair_chart(P.concurrency_ratio_chart(conc, base), width="stretch")
            cols = ["arm", "streams", "tau", "tau_ratio", "tokens_per_s", "tokens_per_s_ratio", "propose_ms",
                    "round_overhead_ms"]
            st.dataframe(conc[[c for c in cols if c in conc.columns]], hide_index=True)
        y = st.selectbox("throughput", [c for c in ("tokens_per_s", "decode_tokens_per_s", "tokens_per_s_stream")
                                         if c in conc.columns], key="speed_conc_y")
        st.altair_chart(P.concurrency_chart(conc, y), width="stretch")
        st.caption(f"Sweep at T in {cfg.get('concurrency_temperatures', '?')}, "
                   f"{cfg.get('concurrency_max_new_tokens', '?')} new tokens per stream; ratios relative to {base} "
                   f"at the same number of streams.")
    setup = detail.get("setup")
    if setup:
        with st.expander("Setup"):
            st.json(setup)


# ---------------------------------------------------------------- Runs
def runs(root: Path) -> None:
    st.header("Runs (MLflow)")
    uri = L.tracking_uri(root)
    st.caption(f"store: `{uri}`")
    db = L.sqlite_path(uri)
    df = _runs(uri, L.mtime(db) if db else 0.0)
    if isinstance(df, L.Missing):
        return missing(df)
    exps = _options(df["dvc_exp"].replace("", "(workspace)"))
    c1, c2 = st.columns(2)
    pick_exp = c1.multiselect("DVC experiment (tag `dvc_exp`)", exps, default=exps, key="runs_exp")
    stages = _options(df["stage"])
    pick_stage = c2.multiselect("stage", stages, default=stages, key="runs_stage")
    f = df[df["dvc_exp"].replace("", "(workspace)").isin(pick_exp) & df["stage"].isin(pick_stage)]
    if f.empty:
        return st.info("No run matches these filters.")
    f = f.assign(label=[L.run_label(r) for _, r in f.iterrows()])
    latest = f.sort_values("start", ascending=False).drop_duplicates("stage")["label"].tolist()[:4]
    chosen = st.multiselect("runs to compare", f["label"].tolist(), default=latest, key="runs_pick")
    st.dataframe(f[["label", "stage", "dvc_exp", "status", "start", "run_id"]], hide_index=True, width="stretch")
    sel = f[f["label"].isin(chosen)]
    if sel.empty:
        return st.info("Pick at least one run to compare.")
    st.subheader("Params")
    only = st.checkbox("only params that differ", value=True, key="runs_only_diff")
    pdiff = L.params_diff(sel, only_diff=only)
    if pdiff.empty:
        st.caption("The selected runs have identical params." if only else "No params logged.")
    else:
        st.dataframe(pdiff, width="stretch")
    st.subheader("Metrics")
    mt = pd.DataFrame({L.run_label(r): pd.Series(r["metrics"], dtype=float) for _, r in sel.iterrows()}).sort_index()
    filt = st.text_input("filter metric names", "", key="runs_metric_filter")
    if filt:
        mt = mt[mt.index.str.contains(filt, case=False, regex=False)]
    st.dataframe(mt, width="stretch")
    keys = sorted(set().union(*[set(m) for m in sel["metrics"]]))
    if keys:
        key = st.selectbox("metric curve", keys, key="runs_curve_key",
                           index=next((i for i, k in enumerate(keys) if "loss" in k), 0))
        h = _history(uri, tuple(sel["run_id"]), key, L.mtime(db) if db else 0.0)
        if h.empty:
            st.caption("No history for this metric.")
        else:
            h = h.merge(sel[["run_id", "label"]], on="run_id")
            st.altair_chart(alt.Chart(h, title=key).mark_line(point=True).encode(
                x="step:Q", y=alt.Y("value:Q", scale=alt.Scale(zero=False)), color="label:N",
                tooltip=["label", "step", "value"]), width="stretch")


# ---------------------------------------------------------------- Pipeline plots (DVC)
def pipeline_plots(root: Path) -> None:
    st.header("Pipeline plots (DVC, offline)")
    defs = P.dvc_plot_defs(root / "dvc.yaml")
    if not defs:
        st.info(f"No plots declared in `{root / 'dvc.yaml'}`.")
    shown = 0
    for d in defs:
        ch = P.chart_for_def(root, d)
        if ch is None:
            st.caption(f"`{d['path']}`: not written yet (run `dvc repro {d['stage']}`).")
            continue
        st.altair_chart(ch, width="stretch")
        shown += 1
    st.subheader("Render `dvc plots show --json` output")
    path = st.text_input("path to the JSON (e.g. from `dvc plots show --json > plots.json`)", "", key="plots_json")
    if path:
        p = Path(path) if Path(path).is_absolute() else root / path
        if not p.exists():
            st.info(f"`{p}` does not exist: run `dvc plots show --json > {path}` in {root}.")
        else:
            try:
                specs = P.specs_from_dvc_json(p)
            except ValueError as e:
                specs = {}
                st.info(f"`{p}` is not `dvc plots show --json` output ({e}).")
            for name, ss in specs.items():
                for s in ss:
                    st.caption(name)
                    st.vega_lite_chart(s)


PAGES = {
    "Candidate grid": candidate_grid,
    "Acceptance": acceptance,
    "Speed": speed,
    "Runs": runs,
    "Pipeline plots": pipeline_plots,
}
