"""The Acceptance page's oracle and headroom tables as frames (no Streamlit here, so tests build them directly).
What an oracle τ is, when it is a ceiling and what an arm's headroom is measured against are defined once, in
`draftlab.bench.oracles` (the benchmark's summary uses the same functions)."""
from __future__ import annotations

import pandas as pd

from draftlab.explore import formats as F
from draftlab.bench import oracles as O

NOT_REPORTED = "not reported"  # a τ cell of a row without acceptance figure (the Hugging Face generate rows)
NO_BOUND = "—"  # an oracle cell that is no ceiling for the arm


def oracle_label(col: str, k: int | None = None) -> str:
    """The column name of an oracle metric: the drafter's top-K oracle, its reachable variant, or the metric's
    own name for an oracle this page has no words for."""
    kk = f"top-{k}" if k else "top-K"
    return {"oracle_tau": f"drafter's {kk} oracle τ",
            "oracle_tau_reachable": f"drafter's {kk} reachable oracle τ"}.get(col, col)


def oracle_frame(sel: pd.DataFrame, oracles: list[str], k: int | None = None) -> pd.DataFrame:
    """Per (suite, arm) with the first oracle: τ, each oracle τ where it is a ceiling for the arm (NaN where it is
    not: a lookup arm, or an oracle below the arm's τ), the headroom left (oracle − τ) and a note saying why a
    cell is empty."""
    rows = []
    for r in sel.dropna(subset=oracles[:1]).to_dict("records"):
        lookup = O.is_lookup(r)
        row = {"suite": r["suite"], "arm": r["arm"], "tau": r["tau"]}
        notes, left = [], {}
        for c in oracles:
            value, lab = O._num(r.get(c)), oracle_label(c, k)
            bound = O.oracle_bounds(O._num(r.get("tau")), value, lookup)
            row[lab] = value if bound else None
            left[f"headroom left ({lab} − τ)"] = value - r["tau"] if bound else None
            if value is not None and not bound and not lookup:
                notes.append(f"{lab} {value:.3f} < τ: some accepted proposals were not among the drafter's top-K")
        if lookup:
            notes.insert(0, "proposals from the prompt lookup, not the drafter's top-K: the drafter's oracle bounds "
                            f"nothing here ({', '.join(f'{O._num(r.get(c)):.3f}' for c in oracles if O._num(r.get(c)) is not None)})")
        row.update(left)
        row["note"] = "; ".join(notes)
        rows.append(row)
    return pd.DataFrame(rows)


def headroom_frame(sel: pd.DataFrame, oracles: list[str], k: int | None = None) -> pd.DataFrame:
    """Per (suite, arm): the arm's own base, its τ and the base's, Δτ of the arm over its base, and per oracle the
    base's oracle τ, the base's headroom Δ = oracle τ − τ with its paired standard error over prompts, the share of
    it the arm closes (None where withheld) and why (`draftlab.bench.oracles.headroom_rows`); a `note` joining the
    reasons. Numbers here; `headroom_table` makes the text the page shows."""
    records = sel.to_dict("records")
    out = None
    for c in oracles:
        lab = oracle_label(c, k)
        hr = pd.DataFrame(O.headroom_rows(records, c))
        if hr.empty:
            return hr
        hr = hr.rename(columns={"base_tau": "base τ", "base_oracle_tau": f"base {lab}",
                                "headroom": f"base headroom Δ ({lab} − τ)", "headroom_se": f"SE of Δ ({lab})",
                                "headroom_closed": f"headroom closed ({lab})", "why": f"why ({lab})"})
        keys = ["suite", "temperature", "arm", "base", "tau", "base τ"]
        out = hr if out is None else out.merge(hr.drop(columns=["base", "tau", "base τ"]), on=keys[:3], how="left")
    why = [c for c in out.columns if c.startswith("why (")]
    out["note"] = out[why].apply(lambda r: "; ".join(dict.fromkeys(v for v in r if isinstance(v, str) and v)), axis=1)
    out["Δτ over base"] = [t - b if O._num(t) is not None and O._num(b) is not None else None
                           for t, b in zip(out["tau"], out["base τ"])]
    out["base"] = out["base"].map(lambda b: b if isinstance(b, str) else NO_BOUND)
    closed = [c for c in out.columns if c.startswith("headroom closed")]
    rest = [c for c in out.columns if c not in ("suite", "arm", "base", "tau", "base τ", "Δτ over base", *closed, *why,
                                                 "temperature", "note")]
    return out[["suite", "arm", "base", "tau", "base τ", "Δτ over base", *rest, *closed, *why, "note"]]


def short_why(why: str | None) -> str:
    """The reason a headroom cell is empty, in a few words for the cell itself (the `why` column has it in full)."""
    w = (why or "").lower()
    for key, text in (("below noise", "headroom below noise"), ("no noise estimate", "no noise estimate"),
                      ("lookup", "lookup arm: no re-selection"), ("no headroom", "base has no headroom"),
                      (" row at this", "no base row"), ("has no oracle", "base has no oracle τ"),
                      ("has no τ", "no τ")):
        if key in w:
            return f"n/a: {text}"
    return "n/a: " + why if why else "n/a"


def headroom_table(hc: pd.DataFrame) -> pd.DataFrame:
    """The headroom frame as the page shows it: τ figures with 3 decimals, the base's headroom as "Δ ± SE", the
    share closed as a percentage only where the ratio is given — never on a headroom below noise — and every empty
    cell saying why ("n/a: headroom below noise", "n/a: no base row", ...)."""
    out = pd.DataFrame({c: hc[c] for c in ("suite", "arm", "base")})
    whys = [c for c in hc.columns if c.startswith("why (")]
    first_why = hc[whys[0]] if whys else pd.Series([""] * len(hc), index=hc.index)
    for c in ("tau", "base τ", "Δτ over base"):
        out[c] = [F.number(v, "tau", short_why(w) if c != "tau" else "n/a: no τ") for v, w in zip(hc[c], first_why)]
    for c in hc.columns:
        if c.startswith("base ") and c not in ("base τ",) and "headroom" not in c and c != "base":  # base oracle τ
            out[c] = [F.number(v, "tau", short_why(w)) for v, w in zip(hc[c], first_why)]
    for c in hc.columns:
        if c.startswith("base headroom Δ ("):
            lab = c[len("base headroom Δ ("):-len(" − τ)")]
            se_col, why_col = f"SE of Δ ({lab})", f"why ({lab})"
            out[f"base headroom Δ ± SE ({lab} − τ)"] = [
                short_why(w) if O._num(d) is None else
                f"{F.number(d, 'tau')} ± {F.number(e, 'tau')}" if O._num(e) is not None else
                f"{F.number(d, 'tau')} (SE unknown)"
                for d, e, w in zip(hc[c], hc[se_col], hc[why_col])]
    for c in hc.columns:
        if c.startswith("headroom closed ("):
            why_col = "why (" + c[len("headroom closed ("):]
            out[c] = [F.number(v, "share") if O._num(v) is not None else short_why(w)
                      for v, w in zip(hc[c], hc[why_col])]
    out["why n/a"] = hc["note"].map(lambda v: v or "")
    # the ratio first, each with the absolute figures beside it: Δτ over the base, then per oracle the share closed
    # and the base's headroom Δ ± SE it divides by; the τ figures behind them after
    first = ["suite", "arm", "base", "Δτ over base"]
    for c in hc.columns:
        if c.startswith("headroom closed ("):
            lab = c[len("headroom closed ("):-1]
            first += [c, f"base headroom Δ ± SE ({lab} − τ)"]
    return out[first + [c for c in out.columns if c not in first and c != "why n/a"] + ["why n/a"]]
