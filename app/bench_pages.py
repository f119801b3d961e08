"""The explorer's benchmark pages, Acceptance and Speed, read from results/benchmark.json and the
benchmark's plot CSVs: τ per arm and suite with their intervals, the paired differences (`benchmark.pairs`),
per-slot acceptance, top-K coverage and the oracles' headroom; tokens/s and speedup, the peers, the round
time split and the concurrency sweep."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

import cached as C
import loaders as L
import peers as R
import plots as P
from cached import fmt_na, missing, options
from colours import arm_order
from positions import label, positions_section

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
    abl = {a: (detail.get("summary") or {}).get(a, {}).get("ablation") for a in out.index}
    for m in metrics:
        if ("value", m) in wide.columns:
            out[m] = wide[("value", m)]
            out[f"{m} CI low"] = wide.get(("lo", m))
            out[f"{m} CI high"] = wide.get(("hi", m))
    out.index = [label(a, abl[a]) for a in out.index]  # ablation arms marked (a smaller sample)
    return out.rename_axis("arm")


def pairs_table(detail: dict, temp: str, cols: list[str]) -> None:
    """The configured arm pairs at one temperature, with their paired intervals (or what to run)."""
    pf = L.pairs_frame(detail)
    pf = pf[pf["temperature"] == temp] if not pf.empty else pf
    if pf.empty:
        st.caption("No paired differences in this benchmark (`benchmark.pairs`, needs `benchmark.bootstrap` > 0 and "
                   "both arms of a pair in `benchmark.arms`).")
        return
    extra = (["Δτ without loops", "Δτ beyond noise without loops"] if cols[0].startswith("Δτ") else
             ["ratio without loops", "speed beyond noise without loops"])
    st.dataframe(fmt_na(pf[["pair", "a", "b", "ablation", "prompts", *cols, *extra]]), hide_index=True, width="stretch")
    st.caption("Paired over the same prompts (resampled together), so the prompt-to-prompt variation both arms share "
               "cancels; 'beyond noise' = the 95% interval excludes 0 (Δτ) or 1 (ratio). `best` is chosen on the same "
               "data, so its interval is optimistic. 'without loops': the same pair on the prompts where neither "
               "answer looped; `ablation`: the pair has an ablation arm (a smaller sample); `prompts`: those both arms decoded, "
               "over all suites (a pair in `benchmark.pair_prompts_per_suite` decodes more than the headline sample).")


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


def plot_rows(root: Path, name: str, temp: str, suites: list) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """A benchmark plot CSV (`name` of loaders.PLOTS) and its rows at `temp` of `suites`, or None after showing
    what is missing."""
    df = C.plot(root, name)
    if isinstance(df, L.Missing):
        missing(df)
        return None
    return df, df[(df["temperature"] == temp) & df["suite"].isin(suites)]


def acceptance(root: Path) -> None:
    loaded = benchmark_page(root, "Acceptance")
    if loaded is None:
        return
    detail, rows = loaded
    temps = options(rows["temperature"])
    c1, c2 = st.columns(2)
    temp = c1.selectbox("temperature", temps, key="acc_temp")
    suites = c2.multiselect("suites", options(rows["suite"]), default=options(rows["suite"]), key="acc_suites")
    sel = rows[(rows["temperature"] == temp) & rows["suite"].isin(suites)]
    spec = sel[sel["arm"].isin(sel.loc[sel.get("accept_curve", pd.Series(dtype=object)).notna(), "arm"])] \
        if "accept_curve" in sel.columns else sel.iloc[0:0]

    st.subheader("τ per arm and suite")
    tau = sel.pivot_table(index="arm", columns="suite", values="tau", aggfunc="first")
    tau["mean"] = tau.mean(axis=1)
    tau = tau.reindex(arm_order(tau.index))
    abl = sel.groupby("arm")["ablation"].first().to_dict() if "ablation" in sel.columns else {}
    tau.index = [label(a, abl.get(a)) for a in tau.index]  # ablation arms: a smaller sample, marked
    st.dataframe(tau.style.format("{:.3f}"), width="stretch")
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
    curve = plot_rows(root, "tau_per_slot", temp, suites)
    if curve is not None:
        if curve[1].empty:
            st.info("No speculative arm at this temperature / suites: run `dvc repro benchmark` with a speculative arm.")
        else:
            st.altair_chart(P.accept_curve_chart(curve[1]))

    st.subheader("Top-k coverage and oracle τ")
    cov = plot_rows(root, "coverage", temp, suites)
    if cov is not None:
        slots = st.multiselect("slots (empty = mean over slots)", options(cov[0]["slot"]), default=[], key="acc_slots")
        if cov[1].empty:
            st.info("No coverage at this temperature / suites: run `dvc repro benchmark` (coverage needs recorded top-K).")
        else:
            st.altair_chart(P.coverage_chart(cov[1], slots))
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
    temp = st.selectbox("temperature", options(rows["temperature"]), key="speed_temp")
    sel = rows[rows["temperature"] == temp]
    table_cols = [c for c in ("suite", "arm", "ablation", "tokens_per_s", "tokens_per_s_lo", "tokens_per_s_hi", "decode_tokens_per_s",
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
    positions_section(root, detail, temp, options(rows["suite"]))

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
            tk = st.selectbox("temperature", options(conc["temperature"]), key="speed_conc_t")
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
