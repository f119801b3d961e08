"""The Compare page: two benchmark results side by side.

A source is either a result folder (any folder with results/benchmark.json — another checkout, the smoke
outputs in .smoke/, a copy of an older run) or a git revision / DVC experiment of the root repository: DVC
commits an experiment as a git commit (refs/exps/...), and the benchmark detail is a `cache: false` output,
so `git show <rev>:results/benchmark.json` reads it without checking anything out; the list of experiments
comes from `dvc exp show --json`. Shown: each arm's τ (mean over suites) / speedup / tokens/s (total tokens / total seconds over the suites) with its 95%
interval in both, the difference, whether the two intervals are disjoint, the per-suite numbers, the same
chart for both (fixed arm colours) and the benchmark settings that differ.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

import cached as C
from draftlab.explore import loaders as L
import plots as P
from draftlab.explore import provenance as V
from draftlab.explore import formats as F
from cached import missing
from colours import arm_order
from draftlab import paths

KINDS = ("folder", "git revision / DVC experiment")
PICK = "(type a revision below)"


def pick_source(col, label: str, root: Path) -> tuple[str, dict | L.Missing]:
    """One side's widgets (in column `col`): -> (display name, benchmark detail or Missing)."""
    kind = col.radio(f"{label}: source", KINDS, key=f"cmp_{label}_kind", horizontal=True)
    if kind == KINDS[0]:
        text = col.text_input(f"{label}: result folder", str(root), key=f"cmp_{label}_folder")
        folder = Path(text).expanduser()
        if not folder.is_dir():
            return label, L.Missing(f"`{folder}` is not a folder: give a folder that holds {paths.BENCH_DETAIL}.")
        folder = folder.resolve()
        col.caption(V.provenance_text(C.provenance(folder, (L.benchmark_file(folder),))))
        return f"{label}: {folder.name or folder}", C.benchmark(folder)
    exps = C.experiments(root)
    rows = [] if isinstance(exps, L.Missing) else exps
    if isinstance(exps, L.Missing):
        col.caption(exps.message)
    names = [f"{e['name']} ({e['kind']} {str(e['rev'])[:7]})" for e in rows]
    choice = col.selectbox(f"{label}: commit or DVC experiment", [PICK, *names], key=f"cmp_{label}_exp")
    typed = col.text_input(f"{label}: or any git revision (HEAD~1, a branch, a sha)", "", key=f"cmp_{label}_rev").strip()
    if typed:
        rev, name = typed, typed
    elif choice != PICK:
        e = rows[names.index(choice)]
        rev, name = e["rev"], e["name"]
    else:
        return label, L.Missing(f"{label}: pick a commit or experiment, or type a revision.")
    col.caption(f"revision `{rev}` of {root} (read with `git show`, nothing checked out)")
    return f"{label}: {name}", C.benchmark_at(root, rev)


def comparison_table(sa: pd.DataFrame, sb: pd.DataFrame, temp: str, metric: str, names=("A", "B")) -> pd.DataFrame:
    """Per arm: the metric (the summary's: τ the mean over suites, speed over the mix in total time) and its interval in A and B, B − A, and whether the intervals are
    disjoint (None when a side has no interval). Arms present in only one side keep a row with n/a."""
    a_name, b_name = names

    def side(s: pd.DataFrame, name: str) -> pd.DataFrame:
        s = s[(s["temperature"] == temp) & (s["metric"] == metric)].set_index("arm")
        return s[["value", "lo", "hi"]].rename(columns={"value": name, "lo": f"{name} CI low", "hi": f"{name} CI high"})

    t = side(sa, a_name).join(side(sb, b_name), how="outer")
    t[f"{b_name} − {a_name}"] = t[b_name] - t[a_name]
    lo_a, hi_a, lo_b, hi_b = (t[f"{n} CI {e}"] for n in (a_name, b_name) for e in ("low", "high"))
    known = lo_a.notna() & lo_b.notna()
    t["intervals disjoint"] = ((lo_b > hi_a) | (hi_b < lo_a)).where(known, None)
    return t.reindex(arm_order(t.index)).rename_axis("arm")


def settings_diff(da: dict, db: dict, names=("A", "B")) -> pd.DataFrame:
    """The benchmark settings (config, setup) that differ between two results."""
    from draftlab.params import flatten

    fa, fb = (flatten({"config": d.get("config") or {}, "setup": {k: v for k, v in (d.get("setup") or {}).items()
                                                                  if k != "timing_s"}}) for d in (da, db))
    keys = sorted(set(fa) | set(fb))
    rows = [{"setting": k, names[0]: str(fa.get(k, "–")), names[1]: str(fb.get(k, "–"))} for k in keys
            if str(fa.get(k, "–")) != str(fb.get(k, "–"))]
    return pd.DataFrame(rows, columns=["setting", *names])


def compare(root: Path) -> None:
    st.header("Compare two benchmark results")
    st.caption("Each side: a result folder, or a git revision / DVC experiment of the root repository. The numbers "
               "are each arm's summary (τ: mean over suites; speed: total tokens / total seconds) with its 95% bootstrap interval.")
    cols = st.columns(2)
    picked = [pick_source(cols[0], "A", root), pick_source(cols[1], "B", root)]
    for col, (_, d) in zip(cols, picked):
        if isinstance(d, L.Missing):
            with col:
                missing(d)
    if any(isinstance(d, L.Missing) for _, d in picked):
        return
    (na, da), (nb, db) = picked
    if na == nb:
        nb = nb + " "  # two identical names would merge the panels
    sa, sb = L.summary_frame(da), L.summary_frame(db)
    temps = sorted(set(sa["temperature"]) & set(sb["temperature"]))
    if not temps:
        return st.info("The two results share no temperature.")
    c1, c2 = st.columns(2)
    temp = c1.selectbox("temperature", temps, key="cmp_temp", format_func=F.temp_label)
    metrics = [m for m in L.SUMMARY_METRICS if m in set(sa["metric"]) & set(sb["metric"])]
    metric = c2.selectbox("metric", metrics, key="cmp_metric")
    table = comparison_table(sa, sb, temp, metric, (na, nb))
    st.dataframe(F.table(table, {c: F.kind(metric) for c in table.columns}), width="stretch")
    st.caption("The two results come from separate runs, so they are not paired: disjoint 95% intervals are a "
               "conservative sign that a difference exceeds the noise (overlapping ones do not prove there is none).")
    long = pd.concat([sa.assign(source=na), sb.assign(source=nb)])
    long = long[(long["temperature"] == temp) & (long["metric"] == metric)]
    st.altair_chart(P.ci_chart(long, f"{metric} per arm at {F.temp_label(temp)} (the summary over suites, 95% interval)",
                               column="source", metric=metric))
    st.subheader("Per suite")
    ra, rb = L.benchmark_rows(da), L.benchmark_rows(db)
    if metric in ra.columns and metric in rb.columns:
        per = (ra[ra["temperature"] == temp].set_index(["suite", "arm"])[[metric]].rename(columns={metric: na})
               .join(rb[rb["temperature"] == temp].set_index(["suite", "arm"])[[metric]].rename(columns={metric: nb}),
                     how="outer"))
        per[f"{nb} − {na}"] = per[nb] - per[na]
        st.dataframe(F.table(per, {c: F.kind(metric) for c in per.columns}), width="stretch")
    st.subheader("Settings that differ")
    diff = settings_diff(da, db, (na, nb))
    if diff.empty:
        st.caption("Same benchmark settings.")
    else:
        st.dataframe(diff, hide_index=True, width="stretch")
