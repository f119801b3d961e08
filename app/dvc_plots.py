"""DVC plots that render offline: the pipeline's declared plots (dvc.yaml's `plots:`) as Altair charts from their CSVs
(with the arm / suite / temperature encodings DVC's default template lacks), and `dvc plots show --json` specs (the
default `dvc plots show` HTML loads vega from a CDN, so it is blank offline). The charts' shared pieces are app/plots.py.

    dvc plots show --json > /tmp/plots.json
    python app/dvc_plots.py /tmp/plots.json out_dir/     # one self-contained .vl.json per plot
    # or: the explorer's "Pipeline plots" page renders the CSVs, or a --json file, directly.

No Streamlit import here; the explorer and tests use these builders.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import altair as alt
import pandas as pd

from colours import arm_color, arm_order
from draftlab import paths
from draftlab.explore.formats import temp_label
from plots import (ARM_AXIS, PANEL_H, PANEL_W, concurrency_ratio_chart, fit_x, line_chart, spread, streams_axis, tip,
                   wrap)


# ---------------------------------------------------------------- dvc.yaml plot definitions
def dvc_plot_defs(dvc_yaml: str | Path) -> list[dict]:
    """[{path, x, y, stage}] for every CSV plot declared under the stages of dvc.yaml, then the top-level
    `plots:` definitions whose `y` maps one file to its columns (stage = the plot's id)."""
    import yaml

    p = Path(dvc_yaml)
    if not p.exists():
        return []
    d = yaml.safe_load(p.read_text()) or {}
    out = []
    for stage, s in (d.get("stages") or {}).items():
        for item in s.get("plots") or []:
            if isinstance(item, str):
                out.append({"path": item, "x": None, "y": None, "stage": stage})
            else:
                for path, opts in item.items():
                    opts = opts or {}
                    out.append({"path": path, "x": opts.get("x"), "y": opts.get("y"), "stage": stage})
    for item in d.get("plots") or []:
        for pid, opts in (item.items() if isinstance(item, dict) else []):
            ys = (opts or {}).get("y")
            for path, cols in (ys.items() if isinstance(ys, dict) else []):
                out.append({"path": path, "x": opts.get("x"), "y": cols, "stage": pid})
    return out


DIMENSIONS = ("suite", "temperature", "arm")  # kept apart in every chart, never summed
COUNTS = ("rounds", "tokens", "requests", "prompts", "answers")  # whole-number measures, not a dimension to average over


CURVE_SPLITS = ("heldout", "train_sample")  # a training curve's columns that are no suite (the rest after x are suites)


def curve_suites(df: pd.DataFrame, x: str) -> list[str]:
    """The suite columns of a training stage's budget curve (paths.CURVES): every numeric column but the step, the
    minutes and the non-suite splits."""
    return [c for c in df.columns if c not in (x, "step", "train_minutes", *CURVE_SPLITS)]


def y_title(rel: str, ys: list[str]) -> str:
    """What a pipeline plot's y-axis shows, in words: a training curve's simulated τ, else the column's name."""
    if rel in paths.CURVES.values():
        return "simulated τ (acceptance length)"
    return ys[0] if len(ys) == 1 else " / ".join(ys)


def chart_for_def(root: Path, d: dict, temperature: str | None = None, suites: list[str] | None = None):
    """Altair chart of one dvc.yaml plot, or a `Missing` (absent, corrupt or empty CSV, naming the stage that
    writes it). Rows are never summed across temperatures, suites or slots: the chart shows the rows at
    `temperature` (default: the file's first) and of `suites`, one panel per suite, one colour per arm, and
    averages any remaining whole-number dimension that is neither x nor y (e.g. the slot of the coverage file,
    said in the title). Files with only numeric columns (training curves) fold every numeric column in."""
    from draftlab.explore import loaders as L
    from draftlab.explore import provenance as V

    stage = V.producer(root, d["path"], d.get("stage") or "benchmark")
    if Path(d["path"]).suffix != ".csv":
        return L.Missing(f"`{d['path']}` is not a CSV plot; `dvc plots show --json` renders it (below).")
    df = L.read_csv(root, d["path"], stage)
    if isinstance(df, L.Missing):
        return df
    num = [c for c in df.columns if pd.api.types.is_numeric_dtype(df[c])]
    x = d.get("x") or df.columns[0]
    y = d.get("y") or next((c for c in num if c != x), None)
    if y is None or x not in df.columns:
        return L.corrupt(d["path"], ValueError(f"no column {x!r} / numeric y"), stage)
    ys = [y] if isinstance(y, str) else list(y)
    if missing_cols := [c for c in ys if c not in df.columns]:
        return L.corrupt(d["path"], ValueError(f"no column(s) {missing_cols}"), stage)
    title = d["path"]
    if "temperature" in df.columns:
        temps = sorted(pd.unique(df["temperature"]).tolist(), key=str)
        t = temperature if temperature in temps else temps[0]
        df, title = df[df["temperature"] == t], f"{title} ({temp_label(t)})"
    if suites is not None and "suite" in df.columns:
        df = df[df["suite"].isin(suites)]
    if df.empty:
        return L.Missing(f"`{d['path']}` has no rows for these suites / temperature.")
    if set(ys) == {"tau_ratio", "tokens_per_s_ratio"} and "arm" in df.columns:  # the concurrency claim
        return concurrency_ratio_chart(df).properties(title=f"{title}: ratio to dflash, one panel per arm (solid τ, "
                                                            f"dashed tokens/s)")
    if len(num) == len(df.columns) and x in num:
        extra = [c for c in num if c not in (x, *ys) and c != "step"]
        if suites is not None and d["path"] in paths.CURVES.values():  # a curve's suites are its columns
            extra = [c for c in extra if c not in curve_suites(df, x) or c in suites]
        return line_chart(df, x, [*ys, *extra], d["path"], y_title(d["path"], ys))
    if len(ys) > 1:
        return line_chart(df, x, ys, d["path"], y_title(d["path"], ys))
    y = ys[0]
    dims = [c for c in df.columns if c in DIMENSIONS and c != x]
    rest = [c for c in df.columns if c not in (x, y, *DIMENSIONS, *COUNTS) and pd.api.types.is_integer_dtype(df[c])]
    if rest:  # e.g. slot in the coverage file: mean over it, said in the title
        df = df.groupby([c for c in (*dims, x) if c in df.columns], as_index=False)[y].mean()
        title += f" (mean over {', '.join(rest)})"
    integer_x = x in num and pd.api.types.is_integer_dtype(df[x])
    if x == "streams":
        x_enc = streams_axis(df, "streams")
    elif integer_x:
        x_enc = alt.X(f"{x}:O", axis=alt.Axis(labelAngle=0))
    else:
        x_enc = alt.X(f"{x}:Q") if x in num else alt.X(f"{x}:N", axis=ARM_AXIS)
    line = x in num
    enc: dict = {"x": x_enc, "y": alt.Y(f"{y}:Q", scale=(spread(df[y]) if line else None) or alt.Undefined),
                 "tooltip": [tip(c) if pd.api.types.is_float_dtype(df[c]) else c for c in df.columns]}
    if "arm" in df.columns and x != "arm":
        enc["color"] = arm_color(df["arm"])
        if not line:
            enc["xOffset"] = alt.XOffset("arm:N", sort=arm_order(df["arm"]))
    elif x == "arm":  # one bar per arm: its colour, its name on the axis (no legend needed)
        enc["color"] = arm_color(df["arm"], legend=None)
        enc["x"] = alt.X("arm:N", sort=arm_order(df["arm"]), axis=ARM_AXIS)
    ch = alt.Chart(df, title=title)
    ch = (ch.mark_line(point=True) if line else ch.mark_bar()).encode(**enc).properties(width=PANEL_W, height=PANEL_H)
    if x == "suite" or "suite" not in df.columns:
        return fit_x(ch.properties(width=max(PANEL_W, 14 * len(df))))
    return wrap(ch, df)


# ---------------------------------------------------------------- `dvc plots show --json`
def specs_from_dvc_json(obj: dict | str | Path) -> dict[str, list[dict]]:
    """{plot path: [vega-lite spec, ...]} from `dvc plots show --json` output (a dict, JSON text or a file).
    DVC inlines the data (`data.values`) into each spec, so they render without any file or network."""
    if isinstance(obj, Path) or (isinstance(obj, str) and not obj.lstrip().startswith("{")):
        obj = json.loads(Path(obj).read_text())
    elif isinstance(obj, str):
        obj = json.loads(obj)
    data = obj.get("data", obj)
    out: dict[str, list[dict]] = {}
    for path, entries in data.items():
        for e in entries or []:
            if isinstance(e, dict) and e.get("type") == "vega" and isinstance(e.get("content"), dict):
                spec = dict(e["content"])
                spec.pop("$schema", None)  # no remote schema lookups
                out.setdefault(path, []).append(spec)
    return out


def altair_from_spec(spec: dict[str, Any]):
    """An Altair chart from a vega-lite dict (falls back to the dict when Altair's schema rejects it)."""
    for cls in (alt.LayerChart, alt.Chart):
        try:
            return cls.from_dict(spec)
        except Exception:  # noqa: BLE001 - the schema validator is strict about DVC's templates
            continue
    return spec


def write_specs(dvc_json: str | Path, out_dir: str | Path) -> list[Path]:
    """Write one self-contained vega-lite JSON per plot (open with any offline vega viewer or the explorer)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for path, specs in specs_from_dvc_json(dvc_json).items():
        for i, s in enumerate(specs):
            f = out_dir / (Path(path).stem + (f"_{i}" if i else "") + ".vl.json")
            f.write_text(json.dumps(s))
            written.append(f)
    return written


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: python app/dvc_plots.py <dvc plots show --json output> <out_dir>")
    for f in write_specs(sys.argv[1], sys.argv[2]):
        print(f)
