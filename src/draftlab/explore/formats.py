"""One number format per kind of figure, used by every table, sentence, tooltip and chart title of the explorer
(no Streamlit here, so tests build the same text):

    τ (accepted tokens per round, oracle τ, Δτ, break-even τ, headroom Δ)   3 decimals    2.485
    tokens/s                                                                1 decimal     17.8
    ratios (speedup, tokens/s ratio, τ ratio, ratio to AR)                   2 decimals    1.05
    shares (share of rounds, copy / loop share, headroom closed)             a percentage  57.7%
    milliseconds (round time, its phases, round overhead)                     1 decimal     13.8
    counts (rounds, tokens, prompts, streams)                                whole numbers 442

A column's kind comes from its name (`kind`); a value that is missing is "n/a", with the reason where one is known.
Temperatures read `T=0` wherever a user reads them (`temp_label`); the benchmark's keys (`t0`) stay internal.
"""
from __future__ import annotations

import math
import re

import pandas as pd

FORMATS = {"tau": "{:.3f}", "tokens_per_s": "{:.1f}", "ratio": "{:.2f}", "share": "{:.1%}", "ms": "{:.1f}",
           "count": "{:.0f}", "other": "{:.3f}"}
D3 = {"tau": ".3f", "tokens_per_s": ".1f", "ratio": ".2f", "share": ".1%", "ms": ".1f", "count": "d", "other": ".3f"}
NA = "n/a"

_CI = re.compile(r"(_lo|_hi| lo| hi| CI low| CI high)$")


def kind(column: str) -> str:
    """The kind of figure a column (or metric) name holds: tau, tokens_per_s, ratio, share, ms, count or other."""
    c = _CI.sub("", str(column)).strip().lower()
    c = re.sub(r" \((first|later)\)$", "", c)
    if "headroom closed" in c or "headroom_closed" in c or c.endswith("share") or c == "share" or "share_" in c:
        return "share"
    if "ratio" in c or "speedup" in c or c in ("ratio to ar", "ratio_to_ar"):
        return "ratio"
    if c.endswith("_ms") or c == "ms" or c.endswith(" ms") or "(ms)" in c:
        return "ms"
    if "tokens_per_s" in c or "tokens/s" in c:
        return "tokens_per_s"
    if c in ("rounds", "tokens", "prompts", "streams", "requests", "accepted_tokens", "answers", "slot", "k", "step",
             "sequences"):
        return "count"
    if "τ" in c or "tau" in c or "accepted_per_round" in c or "headroom" in c:
        return "tau"
    return "other"


def number(v, k: str = "other", na: str = NA) -> str:
    """One value as text in the format of kind `k` ("n/a" — or `na` — when missing)."""
    if v is None or isinstance(v, bool):
        return na if v is None else ("yes" if v else "no")
    try:
        f = float(v)
    except (TypeError, ValueError):
        return str(v)
    if math.isnan(f):
        return na
    return FORMATS.get(k, FORMATS["other"]).format(f)


def fmt(v, column: str, na: str = NA) -> str:
    """A value of `column` in its kind's format."""
    return number(v, kind(column), na)


def table(df: pd.DataFrame, kinds: dict[str, str] | None = None, na: str = NA) -> pd.DataFrame:
    """A copy for display: every numeric (or number-valued) column as text in its kind's format (`kinds` overrides a
    column's kind), booleans as yes / no, missing values as "n/a". What the user reads is this text, so a figure
    reads the same in every table and a test can read it back (the grid's accessible cells hold the same text)."""
    kinds = kinds or {}
    out = df.copy()
    for c in out.columns:
        col = out[c]
        known = col.dropna()
        if not len(known):
            if col.isna().all() and len(col):
                out[c] = na
            continue
        if known.map(lambda v: isinstance(v, bool) or type(v).__name__ == "bool_").all():
            out[c] = col.map(lambda v: na if v is None or (isinstance(v, float) and math.isnan(v))
                             else ("yes" if v else "no"))
        elif known.map(lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
                       or type(v).__module__ == "numpy").all():
            k = kinds.get(c) or kind(c)
            out[c] = col.map(lambda v, k=k: number(v, k, na))
    return out


def temp_label(t) -> str:
    """A temperature as the user reads it: `T=0` for the key `t0`, the float 0.0 or the text "0"; `T=1`, `T=0.7`."""
    if t is None:
        return ""
    s = str(t)
    if s.startswith("T="):
        return s
    if s.startswith("t") and len(s) > 1:
        s = s[1:]
    try:
        return f"T={float(s):g}"
    except ValueError:
        return str(t)


def temps_in(text: str) -> str:
    """Every temperature key (t0, t1, t0.7) inside a text as T=0, T=1, T=0.7."""
    return re.sub(r"\bt(\d+(?:\.\d+)?)\b", lambda m: f"T={float(m.group(1)):g}", text)


def temp_suffix(name: str) -> str:
    """A column or metric name ending in a temperature key as the user reads it: `engine_tau_t0` -> `engine_tau (T=0)`."""
    m = re.match(r"^(.*)_t(\d+(?:\.\d+)?)$", str(name))
    return f"{m.group(1)} ({temp_label('t' + m.group(2))})" if m else str(name)


def count(n, unit: str | None) -> str:
    """'6 batches', '1 prompt', '12 prompts': an interval's count with its unit (a unit not given: 'units')."""
    unit = unit or "unit"
    many = unit + ("es" if unit.endswith(("s", "x", "ch", "sh")) else "s")
    return f"{n} {unit if n == 1 else many}"
