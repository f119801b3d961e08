"""The explorer's benchmark pages, Acceptance and Speed, read from results/benchmark.json and the
benchmark's plot CSVs: τ per arm and suite with their intervals, the paired differences (`benchmark.pairs`),
per-slot acceptance, top-K coverage and the oracles' headroom; tokens/s and speedup, the peers, the round
time split and the concurrency sweep."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

import cached as C
from draftlab.explore import formats as F
from draftlab.explore import loaders as L
from draftlab.explore import oracle_view as OV
import peers as R
import plots as P
from cached import missing, options
from colours import arm_order
from draftlab.bench.oracles import unmeasured_arms
from positions import label, positions_section

NO_TAU_NOTE = ("**{arms}**: no acceptance figure. Hugging Face `generate` reports no rounds, so these rows' τ is not "
               "measured (the benchmark detail stores 1.0 there as a placeholder; with prompt lookup, "
               "`hf-generate-pld` does speculate, but its acceptance is not reported); their tokens/s are measured.")


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
    st.dataframe(F.table(pf[["pair", "a", "b", "ablation", "prompts", *cols, *extra]],
                         {"Δτ without loops": "tau", "ratio without loops": "ratio"}), hide_index=True, width="stretch")
    st.caption("Paired over the same prompts (resampled together), so the prompt-to-prompt variation both arms share "
               "cancels; 'beyond noise' = the 95% interval excludes 0 (Δτ) or 1 (ratio). `best` is chosen on the same "
               "data, so its interval is optimistic. 'without loops': the same pair on the prompts where neither "
               "answer looped; `ablation`: the pair has an ablation arm (a smaller sample); `prompts`: those both arms decoded, "
               "over all suites (a pair in `benchmark.pair_prompts_per_suite` decodes more than the headline sample).")


def tied(a: pd.Series, b: pd.Series) -> bool:
    """Whether two arms' mean τ (summary rows: value, lo, hi) cannot be told apart: each mean lies inside the other's
    95% interval. Without intervals: equal at the displayed precision (3 decimals)."""
    if pd.isna(a["lo"]) or pd.isna(b["lo"]):
        return F.fmt(a["value"], "tau") == F.fmt(b["value"], "tau")
    return a["lo"] <= b["value"] <= a["hi"] and b["lo"] <= a["value"] <= b["hi"]


def best_line(detail: dict, temp: str) -> str:
    """The speculative arms with the highest mean τ (over all suites) at `temp`: every arm equal to the highest at the
    displayed precision (3 decimals) is named, together, with the interval; then the arms that cannot be told apart
    from it (`tied`: each mean inside the other's 95% interval). The paired Δτ table says which pairs differ."""
    spec = {a for temps in (detail.get("suites") or {}).values() for by in temps.values() for a, m in by.items()
            if "accept_curve" in m}  # speculative arms (AR's τ is 1 by definition)
    sf = L.summary_frame(detail)
    sf = sf[(sf["temperature"] == temp) & (sf["metric"] == "tau") & sf["arm"].isin(spec)]
    if sf.empty:
        return ""
    sf = sf.assign(order=[arm_order(sf["arm"]).index(a) for a in sf["arm"]])
    sf = sf.sort_values(["value", "order"], ascending=[False, True], kind="stable")
    top = sf.iloc[0]
    shown = F.fmt(top["value"], "tau")
    lead = sf[[F.fmt(v, "tau") == shown for v in sf["value"]]].sort_values("order")  # in the arms' order
    names = [f"**{a}**" for a in lead["arm"]]
    who = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    cis = {(F.fmt(r["lo"], "tau"), F.fmt(r["hi"], "tau")) for _, r in lead.iterrows() if pd.notna(r["lo"])}
    ci = ""
    if len(cis) == 1:
        lo, hi = next(iter(cis))
        ci = f"95% interval {lo}–{hi}"
    elif cis:
        ci = "95% intervals " + "; ".join(f"{r['arm']} {F.fmt(r['lo'], 'tau')}–{F.fmt(r['hi'], 'tau')}"
                                          for _, r in lead.iterrows() if pd.notna(r["lo"]))
    how = (f"{len(lead)} arms tied: equal at 3 decimals" + (f"; {ci}" if ci else "")) if len(lead) > 1 else ci
    line = (f"Highest mean τ over all suites at {F.temp_label(temp)}: {who} {shown}" + (f" ({how})" if how else "") + ".")
    close = [r for _, r in sf.iloc[len(lead):].iterrows() if tied(top, r)]
    if close:
        line += (" Not distinguishable from it (each mean inside the other's 95% interval): "
                 + ", ".join(f"{r['arm']} {F.fmt(r['value'], 'tau')}" for r in close) + ".")
    return line


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
    temp = c1.selectbox("temperature", temps, key="acc_temp", format_func=F.temp_label)
    suites = c2.multiselect("suites", options(rows["suite"]), default=options(rows["suite"]), key="acc_suites")
    sel = rows[(rows["temperature"] == temp) & rows["suite"].isin(suites)]

    st.subheader("τ per arm and suite")
    unmeasured = unmeasured_arms(detail)
    st.dataframe(tau_table(sel, unmeasured), width="stretch")
    shown_unmeasured = [a for a in arm_order(sel["arm"].unique()) if a in unmeasured]
    if shown_unmeasured:
        st.caption(NO_TAU_NOTE.format(arms="`, `".join(shown_unmeasured).join("``")))
    st.markdown(best_line(detail, temp))
    measured = sel[~sel["arm"].isin(unmeasured)]
    if "tau_lo" in sel.columns and sel["tau_lo"].notna().any():
        st.altair_chart(P.bar_chart(measured.dropna(subset=["tau"]), "tau", "τ per suite"))
        st.caption("Whiskers: 95% bootstrap interval over the suite's prompts. Mean over all suites with its interval "
                   "(the suites resampled together):")
        st.dataframe(F.table(summary_table(detail, temp, ("tau",))), width="stretch")
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
            sim_t = F.table(pd.DataFrame(s_rows))
            st.dataframe(sim_t.rename(columns=F.temp_suffix), hide_index=True, width="stretch")

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
        headroom(sel, oracles, (detail.get("config") or {}).get("topk"))
    else:
        st.info("No oracle τ yet (needs recorded top-K candidates): run `dvc repro benchmark`.")
    R.sources_section(detail, temp)


def tau_table(sel: pd.DataFrame, unmeasured: set[str]) -> pd.DataFrame:
    """τ per arm (rows) and suite (columns) with the mean over the suites, as text: three decimals, "not reported"
    for an arm whose τ is no measurement (the Hugging Face generate rows), "n/a" where the arm did not run."""
    tau = sel.pivot_table(index="arm", columns="suite", values="tau", aggfunc="first")
    tau["mean"] = tau.mean(axis=1)
    tau = tau.reindex(arm_order(tau.index))
    out = tau.map(lambda v: "n/a" if pd.isna(v) else f"{v:.3f}").astype(object)
    out.loc[[a for a in out.index if a in unmeasured]] = OV.NOT_REPORTED
    abl = sel.groupby("arm")["ablation"].first().to_dict() if "ablation" in sel.columns else {}
    out.index = [label(a, abl.get(a)) for a in out.index]  # ablation arms: a smaller sample, marked
    return out


ORACLE_NOTE = (
    "**Oracle τ** is the τ a perfect re-selection among **the drafter's top-{k} candidates** would reach: per "
    "round, the slots accepted while the target's token is among the drafter's top-{k} there, + 1 (the reachable "
    "oracle keeps slot 1 = the drafter's top-1, the best a prefix-first greedy corrector can do). It is a ceiling "
    "only for an arm that proposes among those candidates. The lookup arms (`dflash-pld`, ...) propose the prompt "
    "lookup's tokens, which are not the drafter's candidates, so the drafter's oracle bounds nothing there: shown "
    "as —, with the value in the note; so is an oracle that came out below the arm's τ.")
HEADROOM_NOTE = (
    "**Headroom closed** = (τ_arm − τ_base) / (oracle τ_base − τ_base), per suite at this temperature, where the "
    "base is the arm's own uncorrected drafter decoding alone: `dflash-seeded` for an arm on the seeded drafter "
    "(`dflash-seeded-cut` and every `<method>-seeded` arm), `dflash` for an arm on the plain drafter; oracle "
    "τ_base is the base's oracle τ on the same prompts. 0% = no better than the base drafter alone, 100% = as good "
    "as a perfect re-selection among the base drafter's top-{k}; below 0% = worse than the base; above 100% is "
    "possible when the method retrained the drafter (SpecOPD, DCOCO's co-training). The bases themselves are not "
    "listed; lookup arms have no headroom here (their proposals are not re-selections).")


def headroom(sel: pd.DataFrame, oracles: list[str], k: int | None = None) -> None:
    """Each oracle τ beside the arms' τ (only where it is a ceiling), and the share of its own base's headroom
    each arm closes (definitions: draftlab.bench.oracles), with the absolute figures beside it."""
    kk = k or "K"
    o = OV.oracle_frame(sel, oracles, k)
    st.markdown(ORACLE_NOTE.format(k=kk))
    st.dataframe(F.table(o).replace({"n/a": OV.NO_BOUND}), hide_index=True, width="stretch")
    st.subheader("Headroom closed")
    hc = OV.headroom_frame(sel, oracles, k)
    if hc.empty:
        st.info("No arm besides the bases (`dflash`, `dflash-seeded`) has an oracle τ to measure: the share of "
                "headroom an arm closes needs a corrector or method arm beside its base (e.g. `dcoco` next to "
                "`dflash` in `benchmark.arms`, then `dvc repro benchmark`).")
        return
    hc = hc.set_index(["suite", "arm"]).reindex(
        [(s, a) for s in hc["suite"].unique() for a in arm_order(hc.loc[hc["suite"] == s, "arm"])]).reset_index()
    st.caption(HEADROOM_NOTE.format(k=kk))
    st.dataframe(OV.headroom_table(hc), hide_index=True, width="stretch")
    st.caption(NOISE_NOTE)


NOISE_NOTE = (
    "**Absolute figures beside the ratio.** *Δτ over base* = τ_arm − τ_base; *base headroom Δ ± SE* = the base's "
    "oracle τ − its τ, with its paired standard error over prompts. The share is given only when Δ is at least 2 "
    "standard errors: a smaller Δ is noise, and a share of noise (the `cpu` run once showed −1430% on a Δ of 0.027 τ) "
    "says nothing — the cell then reads *n/a: headroom below noise*. A run written before the benchmark recorded "
    "per-prompt oracle τ has no standard error: *n/a: no noise estimate* (read the absolute figures instead). Every "
    "*n/a* cell says why; the last column has the reason in full.")


OVERHEAD_NOTE = (
    "**round_overhead_ms** = the arm's mean round time − {base}'s mean round time at the same number of streams "
    "(`round_total_ms` of the two rows): a difference of two measured round times, not a time measured on its own. "
    "Negative means the arm's rounds took *less* time than {base}'s — e.g. `pld` runs no drafter forward pass (its "
    "proposal is a lookup in the prompt) and a round that finds no match verifies fewer tokens; it is not a negative "
    "cost. n/a for AR, which runs no speculative round.")


# ---------------------------------------------------------------- Speed
def speed(root: Path) -> None:
    loaded = benchmark_page(root, "Speed")
    if loaded is None:
        return
    detail, rows = loaded
    temp = st.selectbox("temperature", options(rows["temperature"]), key="speed_temp", format_func=F.temp_label)
    sel = rows[rows["temperature"] == temp]
    table_cols = [c for c in ("suite", "arm", "ablation", "tokens_per_s", "tokens_per_s_lo", "tokens_per_s_hi", "decode_tokens_per_s",
                              "tokens_per_s_stream", "speedup", "speedup_lo", "speedup_hi", "tau", "break_even_tau",
                              "round_total_ms", "rounds", "tokens") if c in sel.columns]
    unmeasured = unmeasured_arms(detail)
    shown = F.table(sel[table_cols])
    if "tau" in shown.columns and sel["arm"].isin(unmeasured).any():  # τ of the Hugging Face rows: no measurement
        shown["tau"] = [OV.NOT_REPORTED if a in unmeasured else v for a, v in zip(sel["arm"], shown["tau"])]
    st.dataframe(shown, hide_index=True, width="stretch")
    if sel["arm"].isin(unmeasured).any():
        st.caption(NO_TAU_NOTE.format(arms="`, `".join(a for a in arm_order(sel["arm"].unique())
                                                         if a in unmeasured).join("``")))
    if "speedup" in sel.columns and sel["speedup"].notna().any():
        st.altair_chart(P.bar_chart(sel.dropna(subset=["speedup"]), "speedup", "Speedup over AR (same run)"))
    else:
        st.info("No speedup: the AR arm is missing; run `dvc repro benchmark` with `ar` in `benchmark.arms`.")
    if "tokens_per_s" in sel.columns:
        st.altair_chart(P.bar_chart(sel.dropna(subset=["tokens_per_s"]), "tokens_per_s", "Tokens/s (aggregate)"))
    summ = summary_table(detail, temp, ("speedup", "tokens_per_s"))
    if not summ.empty and summ.filter(like="CI").notna().any().any():
        st.markdown("**Mean over suites, with 95% intervals over prompts** (speedup paired with AR on the same prompts)")
        st.dataframe(F.table(summ), width="stretch")
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
            tk = st.selectbox("temperature", options(conc["temperature"]), key="speed_conc_t", format_func=F.temp_label)
            conc = conc[conc["temperature"] == tk]
        if "round_overhead_ms" in conc.columns and "propose_ms" in conc.columns:  # AR has no round to compare: n/a
            conc = conc.assign(round_overhead_ms=conc["round_overhead_ms"].where(conc["propose_ms"].notna()))
        base = cfg.get("concurrency_base", "dflash")
        if {"tau_ratio", "tokens_per_s_ratio"} <= set(conc.columns) and conc["tau_ratio"].notna().any():
            st.altair_chart(P.concurrency_ratio_chart(conc, base))
            cols = ["arm", "streams", "tau", "tau_ratio", "tokens_per_s", "tokens_per_s_ratio", "round_total_ms",
                    "propose_ms", "round_overhead_ms"]
            st.dataframe(F.table(conc[[c for c in cols if c in conc.columns]]), hide_index=True)
            st.caption(OVERHEAD_NOTE.format(base=base))
        y = st.selectbox("throughput", [c for c in ("tokens_per_s", "decode_tokens_per_s", "tokens_per_s_stream")
                                         if c in conc.columns], key="speed_conc_y")
        st.altair_chart(P.concurrency_chart(conc, y), width="stretch")
        st.caption(f"Sweep at {', '.join(F.temp_label(t) for t in cfg.get('concurrency_temperatures') or []) or 'T=?'}, "
                   f"{cfg.get('concurrency_max_new_tokens', '?')} new tokens per stream; ratios relative to {base} "
                   f"at the same number of streams.")
    setup = detail.get("setup")
    if setup:
        with st.expander("Setup"):
            st.json(setup)
