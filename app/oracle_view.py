"""The Acceptance page's oracle and headroom tables as frames (no Streamlit here, so tests build them directly).
What an oracle τ is, when it is a ceiling and what an arm's headroom is measured against are defined once, in
`draftlab.bench.oracles` (the benchmark's summary uses the same functions)."""
from __future__ import annotations

import pandas as pd

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
    """Per (suite, arm): the arm's own base, its τ and the base's, and per oracle the base's oracle τ and the
    share of its headroom the arm closes (`draftlab.bench.oracles.headroom_rows`); a `note` where undefined."""
    records = sel.to_dict("records")
    out = None
    for c in oracles:
        lab = oracle_label(c, k)
        hr = pd.DataFrame(O.headroom_rows(records, c))
        if hr.empty:
            return hr
        hr = hr.rename(columns={"base_tau": "base τ", "base_oracle_tau": f"base {lab}",
                                "headroom_closed": f"headroom closed ({lab})", "why": f"why ({lab})"})
        keys = ["suite", "temperature", "arm", "base", "tau", "base τ"]
        out = hr if out is None else out.merge(hr.drop(columns=["base", "tau", "base τ"]), on=keys[:3], how="left")
    why = [c for c in out.columns if c.startswith("why (")]
    out["note"] = out[why].apply(lambda r: "; ".join(dict.fromkeys(v for v in r if isinstance(v, str) and v)), axis=1)
    out["base"] = out["base"].map(lambda b: b if isinstance(b, str) else NO_BOUND)
    closed = [c for c in out.columns if c.startswith("headroom closed")]
    rest = [c for c in out.columns if c not in ("suite", "arm", "base", "tau", "base τ", *closed, *why, "temperature",
                                                 "note")]
    return out[["suite", "arm", "base", "tau", "base τ", *closed, *rest, "note"]]
