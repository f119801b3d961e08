"""The explorer's cached readers and the page header (Streamlit).

Every cached reader takes the files' `stamp` — (modification time in ns, size) — as an ordinary argument,
so it is part of Streamlit's cache key: a file rewritten by a new run, or a corrupt file that was fixed, is
read again on the next rerun in every browser session. (Streamlit leaves parameters whose name starts with
`_` out of the key; the stamps must not be named so.) The sidebar's "Reload data" button clears every
cache at once (including the MLflow runs and the list of DVC experiments, which expire after 30 / 60 s).
Each page's header says how old its data is and which git revision it belongs to (provenance.provenance).
Also the display helpers every page shares: `missing` (an absent vs a corrupt file), `fmt_na` and `options`.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import streamlit as st

from draftlab.explore import loaders as L
from draftlab.explore import provenance as V
import runs_data as R
from draftlab.explore import tokens as T


@st.cache_data(show_spinner=False, max_entries=8)
def _benchmark(root: str, stamp: tuple):
    return L.load_benchmark(Path(root))


@st.cache_data(show_spinner=False, max_entries=8)
def _benchmark_at(root: str, rev: str, head: str):
    return V.load_benchmark_at(Path(root), rev)


@st.cache_data(show_spinner=False, max_entries=16)
def _plot(root: str, name: str, stamp: tuple):
    return L.load_plot(Path(root), name)


@st.cache_data(show_spinner=False, max_entries=4)
def _rounds(root: str, stamp: tuple):
    return L.load_rounds(Path(root))


@st.cache_resource(show_spinner=False, max_entries=4)
def _tokenizer(root: str, stamp: tuple):
    return T.load_tokenizer(Path(root))


@st.cache_data(show_spinner=False, max_entries=4, ttl=30)
def _runs(uri: str, stamp: tuple):
    return R.load_runs(uri)


@st.cache_data(show_spinner=False, max_entries=32, ttl=30)
def _history(uri: str, run_ids: tuple, key: str, stamp: tuple):
    return R.metric_history(uri, list(run_ids), key)


@st.cache_data(show_spinner=False, max_entries=8, ttl=30)
def _provenance(root: str, rels: tuple, stamp: tuple):
    return V.provenance(Path(root), rels)


@st.cache_data(show_spinner=False, max_entries=4, ttl=60)
def _experiments(root: str, refs: tuple):
    return V.experiments(Path(root))


def stamps(root: Path, rels) -> tuple:
    return tuple(L.stamp(Path(root) / r) for r in rels)


def benchmark(root: Path):
    return _benchmark(str(root), stamps(root, (L.BENCH_JSON, L.LEGACY_BENCH_JSON)))


def benchmark_at(root: Path, rev: str):
    """A revision's benchmark detail; the key includes HEAD's sha so a moved branch name is read again."""
    head = V.git(root, "rev-parse", rev) or ""
    return _benchmark_at(str(root), rev, head.strip())


def plot(root: Path, name: str):
    return _plot(str(root), name, L.stamp(root / L.PLOTS[name]))


def rounds(root: Path):
    return _rounds(str(root), L.stamp(root / L.ROUNDS))


def tokenizer(root: Path):
    f = T.tokenizer_file(root)
    return _tokenizer(str(root), L.stamp(f))


def runs(uri: str):
    db = R.sqlite_path(uri)
    return _runs(uri, L.stamp(db))


def history(uri: str, run_ids: tuple, key: str):
    db = R.sqlite_path(uri)
    return _history(uri, run_ids, key, L.stamp(db))


def experiments(root: Path):
    """The commits and DVC experiments of root (`dvc exp show --json`), read again when git's refs change."""
    refs = V.git(root, "for-each-ref", "--format=%(objectname)", "refs/exps", "refs/heads") or ""
    return _experiments(str(root), (refs, L.stamp(Path(root) / ".git" / "HEAD")))


def provenance(root: Path, rels) -> dict:
    rels = tuple(rels)
    return _provenance(str(root), rels, stamps(root, rels))


def reload_button() -> None:
    """Sidebar button: forget every cached file, run list and experiment list, then draw the page again."""
    if st.button("Reload data", key="reload", help="Read every output file again (the caches also notice a changed "
                                                   "modification time or size on their own)."):
        st.cache_data.clear()
        st.cache_resource.clear()
        st.session_state["reloaded"] = st.session_state.get("reloaded", 0) + 1
    if st.session_state.get("reloaded"):
        st.caption(f"data reloaded ({st.session_state['reloaded']}×)")


def header(root: Path, title: str, rels) -> None:
    """The page title and one line on the data's age and git revision."""
    st.header(title)
    st.caption(V.provenance_text(provenance(root, rels)), help="When the results were made: a time the results "
               "record (a `created` field), else — for files git has unchanged — the commit that last touched them (a "
               "fresh clone's file times are when it was cloned), else the file time of the run that rewrote them here. "
               "Revision: the repository's HEAD and the last commit that touched those files; 'differ' means a run "
               "rewrote them since (or they were edited) and the result is not committed yet.")


def missing(m: L.Missing) -> None:
    """A Missing as an info box (not written yet) or a warning (written but corrupt: which stage rebuilds it)."""
    (st.warning if m.kind == "corrupt" else st.info)(m.message, icon="⚠️" if m.kind == "corrupt" else "ℹ️")


def fmt_na(df: pd.DataFrame, digits: int = 3, percent: tuple[str, ...] = ()) -> pd.DataFrame:
    """A copy for display in which every numeric column with a missing value is text: the number with `digits`
    decimals (or a percentage for the `percent` columns) and "n/a" where there is none (e.g. AR's round
    overhead, which has no meaning). Streamlit shows a missing number as "None" whatever a Styler says, so the
    text is made here; columns without a gap stay numbers (sortable)."""
    out = df.copy()
    for c in out.columns:
        col = out[c]
        if not col.isna().any():
            continue
        known = col.dropna()
        if len(known) and known.map(lambda v: isinstance(v, (bool, np.bool_))).all():  # yes / no / n/a
            out[c] = col.map(lambda v: "n/a" if v is None or pd.isna(v) else ("yes" if v else "no"))
        elif pd.api.types.is_numeric_dtype(col) or known.map(lambda v: isinstance(v, (int, float))).all():
            form = "{:.1%}" if c in percent else f"{{:.{digits}f}}"
            out[c] = col.map(lambda v: "n/a" if v is None or pd.isna(v) else form.format(v))
    return out


def options(values) -> list:
    """The distinct values of a column, sorted (numbers and text apart), for a page's select boxes."""
    return sorted(pd.unique(pd.Series(list(values))).tolist(), key=lambda v: (str(type(v)), v))


@st.cache_data(show_spinner=False, max_entries=8)
def _verdict_file(root: str, name: str, stamp: tuple):
    from draftlab.explore import verdict_files as VF

    return VF.load(Path(root), name)


def verdict_file(root: Path, name: str):
    """A verdict tool's file (draftlab.explore.verdict_files.FILES[name]), read again when it changes."""
    from draftlab.explore import verdict_files as VF

    return _verdict_file(str(root), name, L.stamp(Path(root) / VF.FILES[name].rel))
