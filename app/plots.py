"""DVC plots that render offline: Altair charts from the pipeline's plot CSVs (with the arm / suite /
temperature encodings DVC's default template lacks) and from `dvc plots show --json` specs (the default
`dvc plots show` HTML loads vega from a CDN, so it is blank offline).

    dvc plots show --json > /tmp/plots.json
    python app/plots.py /tmp/plots.json out_dir/     # one self-contained .vl.json per plot
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

alt.data_transformers.disable_max_rows()


# ---------------------------------------------------------------- benchmark CSVs -> Altair
def accept_curve_chart(df: pd.DataFrame) -> alt.Chart:
    """plots/benchmark_tau_per_slot.csv: share of rounds with acc >= slot, per arm."""
    return alt.Chart(df, title="Per-slot acceptance (share of rounds with acc ≥ slot)").mark_line(point=True).encode(
        x=alt.X("slot:O", title="slot j"), y=alt.Y("accept_rate:Q", title="P(acc ≥ j)", scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("arm:N"), strokeDash=alt.StrokeDash("temperature:N"),
        tooltip=["suite", "temperature", "arm", "slot", alt.Tooltip("accept_rate:Q", format=".3f")])


def coverage_chart(df: pd.DataFrame, slots: list[int] | None = None) -> alt.Chart:
    """plots/benchmark_coverage.csv: top-k coverage vs k; one line per (arm, slot), or the mean over slots."""
    if slots:
        d = df[df["slot"].isin(slots)].copy()
        d["series"] = d["arm"] + " · slot " + d["slot"].astype(str)
    else:
        d = df.groupby(["suite", "temperature", "arm", "k"], as_index=False)["coverage"].mean()
        d["series"] = d["arm"] + " · mean over slots"
    return alt.Chart(d, title="Top-k coverage (committed token among the drafter's top-k)").mark_line(point=True).encode(
        x=alt.X("k:O", title="k"), y=alt.Y("coverage:Q", scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("series:N", title="arm · slot"), strokeDash=alt.StrokeDash("temperature:N"),
        tooltip=["suite", "temperature", "series", "k", alt.Tooltip("coverage:Q", format=".3f")])


def bar_chart(df: pd.DataFrame, y: str, title: str, rule: float | None = None) -> alt.Chart | alt.LayerChart:
    """plots/benchmark_speedup.csv (or any suite × arm frame): y per arm, grouped by suite."""
    base = alt.Chart(df, title=title).mark_bar().encode(
        x=alt.X("arm:N", title=None), y=alt.Y(f"{y}:Q"), color=alt.Color("arm:N"),
        column=alt.Column("suite:N", title=None),
        tooltip=["suite", "temperature", "arm", alt.Tooltip(f"{y}:Q", format=".3f")])
    return base


def concurrency_chart(df: pd.DataFrame, y: str = "tokens_per_s") -> alt.Chart:
    """plots/benchmark_concurrency.csv: throughput vs concurrent streams per arm."""
    return alt.Chart(df, title=f"{y} vs concurrent streams").mark_line(point=True).encode(
        x=alt.X("streams:Q", scale=alt.Scale(type="log", base=2), title="streams"), y=alt.Y(f"{y}:Q"),
        color="arm:N", tooltip=["arm", "streams", alt.Tooltip(f"{y}:Q", format=".3f"), alt.Tooltip("tau:Q", format=".3f")])


def concurrency_ratio_chart(df: pd.DataFrame, base: str = "dflash") -> alt.LayerChart:
    """The concurrency claim (SPEC §2.4, the paper's Fig. 3): per arm, τ and aggregate tokens/s as ratios
    to the base arm at the same number of streams — τ solid, throughput dashed, the gap between them
    shaded (τ gained but not turned into speed, or the reverse)."""
    d = df[df["arm"] != base].dropna(subset=["tau_ratio", "tokens_per_s_ratio"])
    x = alt.X("streams:Q", scale=alt.Scale(type="log", base=2), title="concurrent streams")
    base_chart = alt.Chart(d, title=f"Ratio to {base} at the same concurrency")
    gap = base_chart.mark_area(opacity=0.15).encode(x=x, y=alt.Y("tau_ratio:Q", title=f"ratio to {base}",
                                                                 scale=alt.Scale(zero=False)),
                                                    y2="tokens_per_s_ratio:Q", color="arm:N")
    tip = ["arm", "streams", alt.Tooltip("tau_ratio:Q", format=".3f"), alt.Tooltip("tokens_per_s_ratio:Q", format=".3f"),
           alt.Tooltip("round_overhead_ms:Q", format=".2f")]
    tau = base_chart.mark_line(point=True).encode(x=x, y="tau_ratio:Q", color="arm:N", tooltip=tip)
    tps = base_chart.mark_line(point=True, strokeDash=[5, 4]).encode(x=x, y="tokens_per_s_ratio:Q", color="arm:N",
                                                                     tooltip=tip)
    one = alt.Chart(pd.DataFrame({"y": [1.0]})).mark_rule(color="gray").encode(y="y:Q")
    return alt.layer(gap, tau, tps, one)


def round_split_chart(df: pd.DataFrame) -> alt.Chart:
    """Long frame (suite, temperature, arm, phase, ms): stacked mean round time per phase."""
    return alt.Chart(df, title="Mean round time split (ms)").mark_bar().encode(
        x=alt.X("arm:N", title=None), y=alt.Y("ms:Q", stack="zero", title="ms per round"), color="phase:N",
        column=alt.Column("suite:N", title=None),
        tooltip=["suite", "temperature", "arm", "phase", alt.Tooltip("ms:Q", format=".2f"), alt.Tooltip("share:Q", format=".1%")])


def line_chart(df: pd.DataFrame, x: str, y: str | list[str], title: str = "") -> alt.Chart:
    """A generic DVC-style x/y plot; several y columns are folded into one coloured line each."""
    ys = [y] if isinstance(y, str) else list(y)
    d = df.melt(id_vars=[x], value_vars=ys, var_name="series", value_name="value")
    return alt.Chart(d, title=title).mark_line(point=True).encode(
        x=alt.X(f"{x}:Q" if pd.api.types.is_numeric_dtype(df[x]) else f"{x}:N"), y=alt.Y("value:Q", scale=alt.Scale(zero=False)),
        color="series:N", tooltip=[x, "series", alt.Tooltip("value:Q", format=".4g")])


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


def chart_for_def(root: Path, d: dict) -> alt.Chart | None:
    """Altair chart of one dvc.yaml plot (None when its CSV is missing or empty). Curves whose file has
    only numeric columns fold every numeric column in (e.g. each suite's τ over training time); files with
    an `arm` column are coloured by arm, with suite / temperature in the tooltip."""
    f = Path(root) / d["path"]
    if not f.exists() or f.suffix != ".csv":
        return None
    try:
        df = pd.read_csv(f)
    except (OSError, ValueError, pd.errors.EmptyDataError):
        return None
    if df.empty:
        return None
    num = [c for c in df.columns if pd.api.types.is_numeric_dtype(df[c])]
    x = d.get("x") or df.columns[0]
    y = d.get("y") or next((c for c in num if c != x), None)
    if y is None or x not in df.columns:
        return None
    ys = [y] if isinstance(y, str) else list(y)
    if set(ys) == {"tau_ratio", "tokens_per_s_ratio"} and "arm" in df.columns:  # the concurrency claim
        first = df["temperature"].iloc[0] if "temperature" in df.columns else None
        return concurrency_ratio_chart(df if first is None else df[df["temperature"] == first]).properties(
            title=f"{d['path']}: ratio to dflash" + ("" if first is None else f" ({first})"))
    if len(num) == len(df.columns) and x in num:
        extra = [c for c in num if c not in (x, *ys) and c != "step"]
        return line_chart(df, x, [*ys, *extra], d["path"])
    if len(ys) > 1:
        return line_chart(df, x, ys, d["path"])
    x_enc = alt.X(f"{x}:Q") if x in num else alt.X(f"{x}:N")
    ch = alt.Chart(df, title=d["path"])
    ch = ch.mark_line(point=True) if x in num else ch.mark_bar()
    enc = {"x": x_enc, "y": alt.Y(f"{ys[0]}:Q"), "tooltip": list(df.columns)}
    if "arm" in df.columns and x != "arm":
        enc["color"] = "arm:N"
        if x not in num:
            enc["xOffset"] = "arm:N"
    return ch.encode(**enc)


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
        raise SystemExit("usage: python app/plots.py <dvc plots show --json output> <out_dir>")
    for f in write_specs(sys.argv[1], sys.argv[2]):
        print(f)
