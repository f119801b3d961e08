"""The explorer's pages, one function each: `page(root)` renders into the current Streamlit container.
Every loader returns a `Missing` (shown with st.info, or st.warning for a corrupt file, naming the stage
to run) instead of raising. Readers are cached by file stamp (app/cached.py); charts come from app/plots.py
with one fixed colour per arm (app/colours.py); the comparison page lives in app/compare.py."""
from __future__ import annotations

from pathlib import Path

import altair as alt
import pandas as pd
import streamlit as st

import cached as C
import compare
import grid as G
import loaders as L
import runs_data as M
import peers as R
import plots as P
from cached import fmt_na, missing
from colours import arm_order

# the oracles every headroom figure is read against (benchmark metric -> label); any other oracle τ the
# benchmark reports is shown too, under its metric name
ORACLES = {"oracle_tau": "top-K oracle", "oracle_tau_reachable": "reachable oracle"}


def benchmark_page(root: Path, title: str):
    """Header + benchmark detail and its per-arm rows, or None after showing what to run."""
    C.header(root, title, (L.benchmark_file(root), *L.PLOTS.values()))
    detail = C.benchmark(root)
    if isinstance(detail, L.Missing):
        missing(detail)
        return None
    return detail, L.benchmark_rows(detail)


# ---------------------------------------------------------------- Candidate grid
def _options(values) -> list:
    return sorted(pd.unique(pd.Series(list(values))).tolist(), key=lambda v: (str(type(v)), v))


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
        st.altair_chart(accepted_chart(d, rnd, g.n), width="stretch")
        if (d["accepted"] == 0).all():
            st.caption("Every round of this prompt accepted 0 proposals (each round commits only the target's bonus "
                       "token: τ = 1); the dots mark the zeros.")
    with right:
        if g.scores is not None:
            st.subheader("Transition scores of one predecessor")
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
    if g.scores is not None:
        transition_heatmap(g, tok)
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
    "transitions at once: **S_p(a, b) = ℓ_{p+1}(b) + Δθ(z_{p,a}, z_{p+1,b}, s_p)** (SPEC §2.1). "
    "ℓ_{p+1}(b) is the drafter's own logit of candidate b — the same down a whole column, so without a "
    "corrector every row prefers the drafter's argmax. **Δθ** is what the corrector learned: a small two-layer MLP "
    "over the representations of the two candidates (z: token embedding and slot state) and of the slot pair "
    "(s_p), whose output layer starts at zero, so an untrained corrector changes nothing. A positive Δθ means "
    "'b reads well after a'. The greedy rule keeps the drafter's top candidate at slot 1 and then, in the row of "
    "the token it chose at slot p, takes the column with the highest S_p (markers: the cells each path rule "
    "walked through; dashed white outline: the drafter's argmax transition, rank 1 → rank 1)."
)


def transition_heatmap(g: G.RoundGrid, tok) -> None:
    """Every slot pair's K×K transition scores of the round, with the paths drawn on them."""
    st.subheader("K×K transition scores, every slot pair")
    st.markdown(HEATMAP_HELP)
    value = st.radio("colour by", ["S", "dtheta", "logit"], horizontal=True, key="grid_heat_value",
                     format_func={"S": "S_p(a, b)", "dtheta": "Δθ (the correction)", "logit": "ℓ_{p+1}(b) (drafter)"}.get)
    frame = G.heatmap_frame(g, tok)
    st.altair_chart(P.heatmap_chart(frame, value))
    cells = frame[frame["rule"] == ""]
    st.caption(f"Δθ over this round: mean {cells['dtheta'].mean():+.3f}, range {cells['dtheta'].min():+.3f} … "
               f"{cells['dtheta'].max():+.3f} (0 everywhere would reproduce the drafter's argmax).")


# ---------------------------------------------------------------- Acceptance
def oracle_columns(df: pd.DataFrame) -> list[str]:
    """Every oracle τ the benchmark reports: `oracle_tau` today; any further column naming an oracle's τ
    (e.g. a reachable oracle beside the top-K one) is listed too, the top-K oracle first."""
    cols = [c for c in df.columns if "oracle" in c and "tau" in c and not c.endswith(("_lo", "_hi", "_ci"))
            and pd.api.types.is_numeric_dtype(df[c]) and df[c].notna().any()]
    return sorted(cols, key=lambda c: (c != "oracle_tau", c))


def summary_table(detail: dict, temp: str, metrics: tuple[str, ...]) -> pd.DataFrame:
    """Per arm at one temperature: each metric (mean over all suites) with its 95% interval."""
    sf = L.summary_frame(detail)
    sf = sf[(sf["temperature"] == temp) & sf["metric"].isin(metrics)]
    if sf.empty:
        return sf
    wide = sf.pivot_table(index="arm", columns="metric", values=["value", "lo", "hi"], aggfunc="first")
    out = pd.DataFrame(index=arm_order(wide.index))
    for m in metrics:
        if ("value", m) in wide.columns:
            out[m] = wide[("value", m)]
            out[f"{m} CI low"] = wide.get(("lo", m))
            out[f"{m} CI high"] = wide.get(("hi", m))
    return out.rename_axis("arm")


def pairs_table(detail: dict, temp: str, cols: list[str]) -> None:
    """The configured arm pairs at one temperature, with their paired intervals (or what to run)."""
    pf = L.pairs_frame(detail)
    pf = pf[pf["temperature"] == temp] if not pf.empty else pf
    if pf.empty:
        st.caption("No paired differences in this benchmark (`benchmark.pairs`, needs `benchmark.bootstrap` > 0 and "
                   "both arms of a pair in `benchmark.arms`).")
        return
    st.dataframe(fmt_na(pf[["pair", "a", "b", *cols]]), hide_index=True, width="stretch")
    st.caption("Paired over the same prompts (resampled together), so the prompt-to-prompt variation both arms share "
               "cancels; 'beyond noise' = the 95% interval excludes 0 (Δτ) or 1 (ratio). `best` is chosen on the same "
               "data, so its interval is optimistic.")


def best_line(detail: dict, temp: str) -> str:
    """One sentence: the speculative arm with the highest mean τ (over all suites) at `temp`, with its interval."""
    spec = {a for temps in (detail.get("suites") or {}).values() for by in temps.values() for a, m in by.items()
            if "accept_curve" in m}  # speculative arms (AR's τ is 1 by definition)
    sf = L.summary_frame(detail)
    sf = sf[(sf["temperature"] == temp) & (sf["metric"] == "tau") & sf["arm"].isin(spec)]
    sf = sf.sort_values("value", ascending=False, kind="stable")
    if sf.empty:
        return ""
    r = sf.iloc[0]
    ci = f" (95% interval {r['lo']:.3f}–{r['hi']:.3f})" if pd.notna(r["lo"]) else ""
    return f"Highest mean τ over all suites at {temp}: **{r['arm']}** {r['value']:.3f}{ci}."


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
    tau = sel.pivot_table(index="arm", columns="suite", values="tau", aggfunc="first")
    tau["mean"] = tau.mean(axis=1)
    st.dataframe(tau.reindex(arm_order(tau.index)).style.format("{:.3f}"), width="stretch")
    st.markdown(best_line(detail, temp))
    if "tau_lo" in sel.columns and sel["tau_lo"].notna().any():
        st.altair_chart(P.bar_chart(sel.dropna(subset=["tau"]), "tau", "τ per suite"))
        st.caption("Whiskers: 95% bootstrap interval over the suite's prompts. Mean over all suites with its interval "
                   "(the suites resampled together):")
        st.dataframe(fmt_na(summary_table(detail, temp, ("tau",))), width="stretch")
        st.markdown("**Differences between arms (Δτ)**")
        pairs_table(detail, temp, ["Δτ (a − b)", "Δτ lo", "Δτ hi", "Δτ beyond noise"])
    else:
        st.caption("No confidence intervals in this benchmark (written before they existed, or `benchmark.bootstrap: 0`).")
    sim = detail.get("simulated") or {}
    if sim:
        s_rows = [{"arm": a, "suite": s, **{k: v for k, v in m.items() if isinstance(v, (int, float))}}
                  for a, by in sim.items() for s, m in by.items() if s in suites]
        if s_rows:
            st.caption("Teacher-forced (simulated) τ beside engine τ at T=0")
            st.dataframe(pd.DataFrame(s_rows), hide_index=True, width="stretch")

    st.subheader("Per-slot acceptance curves")
    curve = C.plot(root, "tau_per_slot")
    if isinstance(curve, L.Missing):
        missing(curve)
    else:
        cv = curve[(curve["temperature"] == temp) & curve["suite"].isin(suites)]
        if cv.empty:
            st.info("No speculative arm at this temperature / suites: run `dvc repro benchmark` with a speculative arm.")
        else:
            st.altair_chart(P.accept_curve_chart(cv))

    st.subheader("Top-k coverage and oracle τ")
    cov = C.plot(root, "coverage")
    if isinstance(cov, L.Missing):
        missing(cov)
    else:
        cv = cov[(cov["temperature"] == temp) & cov["suite"].isin(suites)]
        slots = st.multiselect("slots (empty = mean over slots)", _options(cov["slot"]), default=[], key="acc_slots")
        if cv.empty:
            st.info("No coverage at this temperature / suites: run `dvc repro benchmark` (coverage needs recorded top-K).")
        else:
            st.altair_chart(P.coverage_chart(cv, slots))
    oracles = oracle_columns(sel)
    if oracles:
        headroom(sel, spec, oracles)
    else:
        st.info("No oracle τ yet (needs recorded top-K candidates): run `dvc repro benchmark`.")
    R.sources_section(detail, temp)


def headroom(sel: pd.DataFrame, spec: pd.DataFrame, oracles: list[str]) -> None:
    """Each oracle's τ beside the arms' τ, and the share of each oracle's headroom an arm closes over a baseline."""
    label = {c: ORACLES.get(c, c) for c in oracles}
    o = sel.dropna(subset=oracles[:1])[["suite", "arm", "tau", *oracles]].copy()
    for c in oracles:
        o[f"headroom ({label[c]} − τ)"] = o[c] - o["tau"]
    st.dataframe(fmt_na(o), hide_index=True, width="stretch")
    st.subheader("Headroom closed")
    arms = arm_order(o["arm"].unique())
    base = st.selectbox("baseline arm (uncorrected drafter)", arms,
                        index=arms.index("dflash") if "dflash" in arms else 0, key="acc_base")
    b = o[o["arm"] == base].set_index("suite")
    others = sel[(sel["arm"] != base) & sel["arm"].isin(spec["arm"]) & sel["suite"].isin(b.index)]
    if others.empty:
        st.info(f"Only `{base}` has acceptance numbers: the share of headroom an arm closes needs a second "
                f"speculative arm (e.g. a DCOCO arm in `benchmark.arms`, then `dvc repro benchmark`).")
        return
    hc = others[["suite", "arm", "tau"]].copy()
    hc["baseline τ"] = hc["suite"].map(b["tau"])
    fmt = {"tau": "{:.3f}", "baseline τ": "{:.3f}"}
    for c in oracles:  # one pair of columns per oracle
        hc[f"baseline {label[c]} τ"] = hc["suite"].map(b[c])
        gap = hc[f"baseline {label[c]} τ"] - hc["baseline τ"]
        hc[f"headroom closed ({label[c]})"] = ((hc["tau"] - hc["baseline τ"]) / gap).where(gap > 0)
        fmt.update({f"baseline {label[c]} τ": "{:.3f}", f"headroom closed ({label[c]})": "{:.1%}"})
    st.caption("(τ_arm − τ_base) / (oracle τ_base − τ_base) against each oracle: 1 = as good as an ideal "
               "re-selector among the baseline's top-K (the top-K oracle), or the best a prefix-first greedy "
               "corrector can do, slot 1 being the drafter's top-1 (the reachable oracle).")
    pct = tuple(c for c in hc.columns if c.startswith("headroom closed"))
    shown = fmt_na(hc, percent=pct)
    st.dataframe(shown.style.format({k: v for k, v in fmt.items() if shown[k].dtype.kind == "f"}), hide_index=True,
                 width="stretch")


# ---------------------------------------------------------------- Speed
def speed(root: Path) -> None:
    loaded = benchmark_page(root, "Speed")
    if loaded is None:
        return
    detail, rows = loaded
    temp = st.selectbox("temperature", _options(rows["temperature"]), key="speed_temp")
    sel = rows[rows["temperature"] == temp]
    table_cols = [c for c in ("suite", "arm", "tokens_per_s", "tokens_per_s_lo", "tokens_per_s_hi", "decode_tokens_per_s",
                              "tokens_per_s_stream", "speedup", "speedup_lo", "speedup_hi", "tau", "break_even_tau",
                              "round_total_ms", "rounds", "tokens") if c in sel.columns]
    st.dataframe(fmt_na(sel[table_cols]), hide_index=True, width="stretch")
    if "speedup" in sel.columns and sel["speedup"].notna().any():
        st.altair_chart(P.bar_chart(sel.dropna(subset=["speedup"]), "speedup", "Speedup over AR (same run)"))
    else:
        st.info("No speedup: the AR arm is missing; run `dvc repro benchmark` with `ar` in `benchmark.arms`.")
    if "tokens_per_s" in sel.columns:
        st.altair_chart(P.bar_chart(sel.dropna(subset=["tokens_per_s"]), "tokens_per_s", "Tokens/s (aggregate)"))
    summ = summary_table(detail, temp, ("speedup", "tokens_per_s"))
    if not summ.empty and summ.filter(like="CI").notna().any().any():
        st.markdown("**Mean over suites, with 95% intervals over prompts** (speedup paired with AR on the same prompts)")
        st.dataframe(fmt_na(summ), width="stretch")
        st.markdown("**Differences between arms (tokens/s ratio)**")
        pairs_table(detail, temp, ["tokens/s ratio (a ÷ b)", "ratio lo", "ratio hi", "speed beyond noise"])

    R.peers_section(detail, temp)

    st.subheader("Round time split")
    split = [{"suite": r["suite"], "temperature": r["temperature"], "arm": r["arm"], "phase": ph, "ms": ms,
              "share": (r.get("round_share") or {}).get(ph)}
             for _, r in sel.iterrows() if isinstance(r.get("round_ms"), dict) for ph, ms in r["round_ms"].items()]
    if split:
        st.altair_chart(P.round_split_chart(pd.DataFrame(split)))
    else:
        st.info("No round timings in the benchmark detail: run `dvc repro benchmark`.")

    st.subheader("Concurrency")
    conc = C.plot(root, "concurrency")
    if isinstance(conc, L.Missing):
        missing(L.Missing(conc.message + " (the sweep runs when `benchmark.concurrency` is not empty)", conc.kind))
    else:
        cfg = detail.get("config") or {}
        if "temperature" in conc.columns and conc["temperature"].nunique() > 0:
            tk = st.selectbox("temperature", _options(conc["temperature"]), key="speed_conc_t")
            conc = conc[conc["temperature"] == tk]
        if "round_overhead_ms" in conc.columns and "propose_ms" in conc.columns:  # AR has no round to compare: n/a
            conc = conc.assign(round_overhead_ms=conc["round_overhead_ms"].where(conc["propose_ms"].notna()))
        base = cfg.get("concurrency_base", "dflash")
        if {"tau_ratio", "tokens_per_s_ratio"} <= set(conc.columns) and conc["tau_ratio"].notna().any():
            st.altair_chart(P.concurrency_ratio_chart(conc, base), width="stretch")
            cols = ["arm", "streams", "tau", "tau_ratio", "tokens_per_s", "tokens_per_s_ratio", "propose_ms",
                    "round_overhead_ms"]
            st.dataframe(fmt_na(conc[[c for c in cols if c in conc.columns]]), hide_index=True)
            st.caption(f"round_overhead_ms: ms of round time beyond {base}'s at the same number of streams (n/a for AR, "
                       f"which has no speculative round).")
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
    uri = M.tracking_uri(root)
    db = M.sqlite_path(uri)
    C.header(root, "Runs (MLflow)", (str(db.relative_to(root)) if db and db.is_relative_to(root) else str(db),)
             if db else ())
    st.caption(f"store: `{uri}`")
    df = C.runs(uri)
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
    st.dataframe(mt, width="stretch")
    keys = sorted(set().union(*[set(m) for m in sel["metrics"]]))
    if keys:
        key = st.selectbox("metric curve", keys, key="runs_curve_key",
                           index=next((i for i, k in enumerate(keys) if "loss" in k), 0))
        h = C.history(uri, tuple(sel["run_id"]), key)
        if h.empty:
            st.caption("No history for this metric.")
        else:
            h = h.merge(sel[["run_id", "label"]], on="run_id")
            st.altair_chart(alt.Chart(h, title=key).mark_line(point=True).encode(
                x="step:Q", y=alt.Y("value:Q", scale=alt.Scale(zero=False)), color="label:N",
                tooltip=["label", "step", "value"]), width="stretch")


# ---------------------------------------------------------------- Pipeline plots (DVC)
def pipeline_plots(root: Path) -> None:
    defs = P.dvc_plot_defs(root / "dvc.yaml")
    C.header(root, "Pipeline plots (DVC, offline)", sorted({d["path"] for d in defs}))
    if not defs:
        st.info(f"No plots declared in `{root / 'dvc.yaml'}`.")
    temps, suites = plot_dimensions(root, defs)
    c1, c2 = st.columns(2)
    temp = c1.selectbox("temperature", temps, key="plots_temp") if temps else None
    pick = c2.multiselect("suites", suites, default=suites, key="plots_suites") if suites else None
    st.caption("Every chart shows one temperature and one panel per suite (never a sum over them); colour = arm "
               "(the same colour on every page).")
    for d in defs:
        ch = P.chart_for_def(root, d, temp, pick)
        if isinstance(ch, L.Missing):
            if ch.kind == "corrupt":
                missing(ch)
            else:
                st.caption(f"`{d['path']}`: {ch.message}")
            continue
        st.altair_chart(ch)
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
    return sorted(temps, key=str), sorted(s for s in suites if s != "mixed")


PAGES = {
    "Candidate grid": candidate_grid,
    "Acceptance": acceptance,
    "Speed": speed,
    "Runs": runs,
    "Pipeline plots": pipeline_plots,
    "Compare": compare.compare,
}
