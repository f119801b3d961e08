"""The explorer's charts (Altair) from the benchmark's results and plot CSVs: the shared pieces (axes, panels that fit
the page, one colour per arm), the benchmark's charts, and the K×K transition / pair scores heatmap. The pipeline's
declared plots and `dvc plots show --json` specs are app/dvc_plots.py. No Streamlit import here; the explorer and
tests use these builders.
"""
from __future__ import annotations


import altair as alt
import pandas as pd

from colours import arm_color, arm_legend, arm_order
from draftlab import paths
from draftlab.explore.formats import D3, kind, temp_label

alt.data_transformers.disable_max_rows()


# ---------------------------------------------------------------- shared pieces
PANEL_W, PANEL_H = 260, 220  # one small multiple
# the width a chart may take on a page: the explorer's main column in a 1,500 px window (wide layout, sidebar
# open) is ~1,040 px; faceted charts wrap to as many panels per row as fit in it (Streamlit cannot stretch a facet)
PAGE_W = 1000
PANEL_PAD = 70  # a panel's y axis, its title and the gap to the next panel
ARM_AXIS = alt.Axis(labelAngle=-45, labelLimit=0, labelOverlap=False)  # every arm's name, in full
# a line-style legend draws line samples (solid, dashed), not the point symbol of the marks; without a transparent
# fill the "stroke" symbols came out blank in Chromium (labels with no sample beside them)
DASH_LEGEND = alt.Legend(symbolType="stroke", symbolStrokeColor="black", symbolFillColor="transparent",
                         symbolStrokeWidth=2, symbolSize=300, labelLimit=0)


def int_axis(title: str | None = None, values: list[int] | None = None) -> alt.Axis:
    """An axis of whole numbers (streams, slots, k): no fractional ticks."""
    kw = {"values": values} if values is not None else {"tickMinStep": 1}
    return alt.Axis(title=title, format="d", **kw)


def tip(field: str, title: str | None = None) -> alt.Tooltip:
    """A tooltip of a numeric field in its kind's format (formats.py: τ 3 decimals, tokens/s 1, ratios 2, shares %)."""
    return alt.Tooltip(f"{field}:Q", format=D3[kind(title or field)], **({"title": title} if title else {}))


def spread(values, pad: float = 0.5, integer: bool = False) -> alt.Scale | None:
    """A scale domain for an axis whose values are all one number (a history of one step, one position bin): that
    number ± `pad` (or [v, v + 1] for whole numbers), so the axis shows at least two ticks instead of one "0.000000".
    None (Vega's own domain) when the values differ."""
    v = pd.to_numeric(pd.Series(list(values)), errors="coerce").dropna().unique()
    if len(v) != 1:
        return None
    x = float(v[0])
    if integer:
        return alt.Scale(domain=[x, x + 1])
    d = max(abs(x) * 0.1, pad) if x else pad
    return alt.Scale(domain=[x - d, x + d], zero=False)


def fit_x(chart):
    """A single-view chart (no facet) fits the page's width while its height stays the plot's own: Streamlit's
    default for such a chart is `autosize: fit`, which squeezes axis labels and titles into the given height — the
    13 rotated arm names left a bar chart's plot ~5 px tall with one "0" tick. Facets are left to Streamlit (pad)."""
    if isinstance(chart, alt.FacetChart):
        return chart
    return chart.properties(autosize=alt.AutoSizeParams(type="fit-x", contains="padding"))


def fit_columns(columns: int, panel_w: int, reserve: int = 0) -> int:
    """At most `columns` panels of `panel_w` px per row, fewer when they would overflow PAGE_W (less `reserve`, e.g.
    a legend beside them); at least one."""
    return max(1, min(columns, (PAGE_W - reserve) // (panel_w + PANEL_PAD)))


def wrap(chart, df: pd.DataFrame, field: str = "suite", columns: int = 3, panel_w: int = PANEL_W, reserve: int = 0):
    """Small multiples of `chart` per value of `field`, wrapped after `columns` panels, or fewer when panels of
    `panel_w` px would not fit the page (`fit_columns`); one panel: the chart itself."""
    if field not in df.columns or df[field].nunique() <= 1:
        return fit_x(chart)
    title = chart.title  # a facet drops its panels' title: it goes on the faceted chart
    inner = chart.copy()
    inner.title = alt.Undefined
    out = inner.facet(facet=alt.Facet(f"{field}:N", title=None, header=alt.Header(labelFontWeight="bold")),
                      columns=min(fit_columns(columns, panel_w, reserve), int(df[field].nunique())))
    return out if title is alt.Undefined else out.properties(title=title)


def readable(df: pd.DataFrame) -> pd.DataFrame:
    """A copy whose `temperature` column reads T=0 / T=1 (tooltips, legends) instead of the keys t0 / t1."""
    if "temperature" not in df.columns:
        return df
    return df.assign(temperature=df["temperature"].map(temp_label))


def temperature_dash(df: pd.DataFrame) -> dict:
    """strokeDash by temperature, with its legend, only when a frame still mixes temperatures."""
    if "temperature" not in df.columns or df["temperature"].nunique() <= 1:
        return {}
    return {"strokeDash": alt.StrokeDash("temperature:N", title="temperature (line style)", legend=DASH_LEGEND)}


def error_bars(y: str, lo: str, hi: str, x: str = "arm", **enc) -> alt.Chart:
    """Whiskers from `lo` to `hi` (the confidence interval) for each x (a layer; data comes from the layer)."""
    return alt.Chart().mark_rule(color="black", strokeWidth=1.5).encode(x=f"{x}:N", y=alt.Y(f"{lo}:Q"), y2=f"{hi}:Q", **enc)


# ---------------------------------------------------------------- benchmark CSVs -> Altair
def accept_curve_chart(df: pd.DataFrame, columns: int = 3):
    """plots/benchmark_tau_per_slot.csv: share of rounds with acc >= slot, per arm; one panel per suite."""
    df = readable(df)
    ch = alt.Chart(df, title="Per-slot acceptance (share of rounds with acc ≥ slot)").mark_line(point=True).encode(
        x=alt.X("slot:O", title="slot j", axis=alt.Axis(labelAngle=0)),
        y=alt.Y("accept_rate:Q", title="P(acc ≥ j)", scale=alt.Scale(domain=[0, 1])),
        color=arm_color(df["arm"]), detail="temperature:N", **temperature_dash(df),
        tooltip=["suite", "temperature", "arm", "slot", tip("accept_rate", "P(acc ≥ slot)")],
    ).properties(width=PANEL_W, height=PANEL_H)
    return wrap(ch, df, columns=columns)


def coverage_chart(df: pd.DataFrame, slots: list[int] | None = None, columns: int = 3):
    """plots/benchmark_coverage.csv: top-k coverage vs k per arm (colour); the chosen slots as line styles, or
    the mean over slots."""
    df = readable(df)
    if slots:
        d = df[df["slot"].isin(slots)].copy()
        dash = {"strokeDash": alt.StrokeDash("slot:O", title="slot (line style)", legend=DASH_LEGEND)}
        what = "slots " + ", ".join(str(s) for s in slots)
    else:
        d = df.groupby(["suite", "temperature", "arm", "k"], as_index=False)["coverage"].mean()
        dash, what = temperature_dash(d), "mean over slots"
    ch = alt.Chart(d, title=f"Top-k coverage (committed token among the drafter's top-k; {what})").mark_line(point=True).encode(
        x=alt.X("k:O", title="k", axis=alt.Axis(labelAngle=0)), y=alt.Y("coverage:Q", scale=alt.Scale(domain=[0, 1])),
        color=arm_color(d["arm"]), detail=alt.Detail(["temperature:N", *(["slot:O"] if slots else [])]), **dash,
        tooltip=["suite", "temperature", "arm", *(["slot"] if slots else []), "k", tip("coverage", "coverage share")],
    ).properties(width=PANEL_W, height=PANEL_H)
    return wrap(ch, d, columns=columns)


def bar_chart(df: pd.DataFrame, y: str, title: str, columns: int = 3, rule: float | None = None,
              y_title: str | None = None):
    """Any suite × arm frame at one temperature: y per arm (fixed arm colours), one panel per suite; whiskers
    from `<y>_lo` to `<y>_hi` (the confidence interval over prompts) when the frame has them; a grey dashed
    line at y = `rule` when given (e.g. 1.0 on a ratio to AR)."""
    df = readable(df)
    arms = arm_order(df["arm"])
    x = alt.X("arm:N", title=None, sort=arms, axis=ARM_AXIS)
    f = D3[kind(y)]
    tips = ["suite", "temperature", "arm", alt.Tooltip(f"{y}:Q", format=f)]
    has_ci = {f"{y}_lo", f"{y}_hi"} <= set(df.columns) and df[f"{y}_lo"].notna().any()
    if has_ci:
        tips += [alt.Tooltip(f"{y}_lo:Q", format=f, title="CI low"), alt.Tooltip(f"{y}_hi:Q", format=f, title="CI high")]
    bars = alt.Chart().mark_bar().encode(x=x, y=alt.Y(f"{y}:Q", title=y_title or y), color=arm_color(arms, legend=None),
                                         tooltip=tips)
    layers = [bars] + ([error_bars(y, f"{y}_lo", f"{y}_hi").encode(x=x)] if has_ci else [])
    if rule is not None:
        layers.append(alt.Chart().mark_rule(color="gray", strokeDash=[4, 3]).encode(y=alt.datum(rule)))
    w = max(PANEL_W, 30 * len(arms))
    ch = alt.layer(*layers, data=df).properties(width=w, height=PANEL_H)
    ch = wrap(ch, df, columns=columns, panel_w=w)
    return ch.properties(title=title + (" — whiskers: 95% CI over prompts" if has_ci else ""))


def ci_chart(df: pd.DataFrame, title: str, column: str | None = None, metric: str | None = None):
    """Long frame (arm, value, lo, hi[, column]): the estimate per arm with its confidence interval, fixed arm
    colours; one panel per value of `column` (e.g. the compared result folders)."""
    arms = arm_order(df["arm"])
    x = alt.X("arm:N", title=None, sort=arms, axis=ARM_AXIS)
    f = D3[kind(metric)] if metric else ".3f"
    tips = ["arm", alt.Tooltip("value:Q", format=f), alt.Tooltip("lo:Q", format=f, title="CI low"),
            alt.Tooltip("hi:Q", format=f, title="CI high"), *([column] if column else [])]
    pts = alt.Chart().mark_point(filled=True, size=70).encode(x=x, y=alt.Y("value:Q", title=None,
                                                                         scale=alt.Scale(zero=False)),
                                                               color=arm_color(arms, legend=None), tooltip=tips)
    ch = alt.layer(pts, error_bars("value", "lo", "hi").encode(x=x, color=arm_color(arms, legend=None)), data=df)
    ch = ch.properties(width=max(PANEL_W, 30 * len(arms)), height=PANEL_H)
    if column:
        ch = ch.facet(column=alt.Column(f"{column}:N", title=None, header=alt.Header(labelFontWeight="bold")))
    return fit_x(ch.properties(title=title))


def streams_axis(df: pd.DataFrame, title: str = "concurrent streams") -> alt.X:
    levels = sorted(int(v) for v in pd.unique(df["streams"]))
    return alt.X("streams:Q", scale=alt.Scale(type="log", base=2), axis=int_axis(title, levels))


def concurrency_chart(df: pd.DataFrame, y: str = "tokens_per_s") -> alt.Chart:
    """plots/benchmark_concurrency.csv at one temperature: throughput vs concurrent streams per arm."""
    return fit_x(alt.Chart(df, title=f"{y} vs concurrent streams").mark_line(point=True).encode(
        x=streams_axis(df), y=alt.Y(f"{y}:Q"), color=arm_color(df["arm"]), detail="temperature:N", **temperature_dash(df),
        tooltip=["arm", "streams", tip(y), tip("tau", "τ")]))


RATIO_STYLE = {"τ ratio": [1, 0], "tokens/s ratio": [5, 4]}  # solid, dashed


def speculative_rows(df: pd.DataFrame) -> pd.Series:
    """The sweep rows of arms that ran speculative rounds: a proposal step was timed (`propose_ms`; AR has none),
    else (an older file without the column) every arm but `ar`."""
    if "propose_ms" in df.columns:
        return df["propose_ms"].notna()
    return df["arm"] != "ar"


def concurrency_ratio_chart(df: pd.DataFrame, base: str = "dflash", columns: int = 3):
    """The concurrency claim (docs/algorithms.md "What the DCOCO paper reports"; the paper's Fig. 3) at one temperature:
    one panel per arm (its colour), τ and aggregate tokens/s as ratios to the base arm at the same number of
    streams — τ solid, tokens/s dashed (the legend says so), the gap between them shaded for the speculative arms
    (τ gained but not turned into speed, or the reverse). One panel per arm: the arms' shaded gaps, drawn over each
    other in one panel, piled into one grey block. AR gets its two lines but no shading: it runs no speculative
    round, its "τ ratio" is only 1 / τ_base."""
    d = df[df["arm"] != base].dropna(subset=["tau_ratio", "tokens_per_s_ratio"]).copy()
    d["speculative"] = speculative_rows(d).to_numpy()
    keep = ["arm", "streams", "tau_ratio", "tokens_per_s_ratio", "speculative",
            *(["temperature"] if "temperature" in d.columns else []),
            *(["round_overhead_ms"] if "round_overhead_ms" in d.columns else [])]
    d = readable(d[keep])
    x = streams_axis(d)
    arms = arm_order(d["arm"])
    colour = arm_color(arms, legend=None)  # the panel's header names the arm
    y = alt.Y("ratio:Q", title=f"ratio to {base}", scale=alt.Scale(zero=False))
    gap = alt.Chart().mark_area(opacity=0.15).encode(
        x=x, y=alt.Y("tau_ratio:Q", title=f"ratio to {base}", scale=alt.Scale(zero=False)), y2="tokens_per_s_ratio:Q",
        color=colour).transform_filter("datum.speculative")
    tips = ["arm:N", "streams:Q", "measure:N", tip("ratio", "ratio")] + \
        ([tip("round_overhead_ms", f"round overhead beyond {base} (ms)")] if "round_overhead_ms" in d.columns else [])
    lines = alt.Chart().transform_fold(["tau_ratio", "tokens_per_s_ratio"], as_=["series", "ratio"]).transform_calculate(
        measure="datum.series == 'tau_ratio' ? 'τ ratio' : 'tokens/s ratio'").mark_line(point=True).encode(
        x=x, y=y, color=colour, detail="measure:N",
        strokeDash=alt.StrokeDash("measure:N", title="line style", legend=DASH_LEGEND,
                                  scale=alt.Scale(domain=list(RATIO_STYLE), range=list(RATIO_STYLE.values()))),
        tooltip=tips)
    one = alt.Chart().mark_rule(color="gray").encode(y=alt.datum(1.0))
    ch = alt.layer(gap, lines, one, data=d).properties(width=PANEL_W, height=PANEL_H)
    title = f"Ratio to {base} at the same concurrency, one panel per arm (solid: τ, dashed: tokens/s)"
    if d["arm"].nunique() <= 1:
        return fit_x(ch.properties(title=title))
    return ch.facet(facet=alt.Facet("arm:N", title=None, sort=arms, header=alt.Header(labelFontWeight="bold")),
                    columns=min(fit_columns(columns, PANEL_W, reserve=120), d["arm"].nunique())).properties(title=title)


def round_split_chart(df: pd.DataFrame, columns: int = 3):
    """Long frame (suite, temperature, arm, phase, ms) at one temperature: stacked mean round time per phase."""
    df = readable(df)
    arms = arm_order(df["arm"])
    ch = alt.Chart(df, title="Mean round time split (ms)").mark_bar().encode(
        x=alt.X("arm:N", title=None, sort=arms, axis=ARM_AXIS),
        y=alt.Y("ms:Q", stack="zero", title="ms per round"), color=alt.Color("phase:N", legend=alt.Legend(labelLimit=0)),
        tooltip=["suite", "temperature", "arm", "phase", tip("ms"), tip("share")],
    ).properties(width=max(PANEL_W, 30 * len(arms)), height=PANEL_H)
    return wrap(ch, df, columns=columns, panel_w=max(PANEL_W, 30 * len(arms)), reserve=80)  # the phase legend


def line_chart(df: pd.DataFrame, x: str, y: str | list[str], title: str = "", y_label: str | None = None) -> alt.Chart:
    """A generic DVC-style x/y plot; several y columns are folded into one coloured line each, the y-axis titled
    `y_label` (default: the column, or the columns joined)."""
    ys = [y] if isinstance(y, str) else list(y)
    d = df.melt(id_vars=[x], value_vars=ys, var_name="series", value_name="value")
    integer = pd.api.types.is_integer_dtype(df[x])
    if pd.api.types.is_numeric_dtype(df[x]):
        xs = spread(df[x], integer=integer)
        x_enc = alt.X(f"{x}:Q", axis=int_axis(x) if integer else alt.Axis(title=x), **({"scale": xs} if xs else {}))
    else:
        x_enc = alt.X(f"{x}:N")
    return fit_x(alt.Chart(d, title=title).mark_line(point=True).encode(
        x=x_enc, y=alt.Y("value:Q", title=y_label or " / ".join(ys),
                         scale=spread(d["value"]) or alt.Scale(zero=False)),
        color=alt.Color("series:N", legend=alt.Legend(labelLimit=0), title="series"),
        tooltip=[x, "series", alt.Tooltip("value:Q", format=".4g")]))


# ---------------------------------------------------------------- the K×K transition scores (DCOCO)
PATH_SHAPES = {"greedy": "square", "globalsum": "triangle-up", "geometric": "diamond"}


def heatmap_chart(frame: pd.DataFrame, value: str = "S", columns: int = 4, title: str | None = None):
    """frame (draftlab grid.heatmap_frame): one panel per slot pair p → p+1, rows = predecessor candidates a at
    slot p, columns = candidates b at slot p+1, colour = `value` (S = S_p(a, b); dtheta = Δθ; logit = ℓ_{p+1}(b));
    the cells each path rule walked through are marked (shape per rule), the drafter's argmax cell outlined."""
    title = title or {"S": "S_p(a, b) = ℓ_{p+1}(b) + Δθ", "dtheta": "Δθ(z_{p,a}, z_{p+1,b}, s_p)",
                      "logit": "ℓ_{p+1}(b)"}[value]
    lim = float(frame[value].abs().max() or 1.0)
    scale = (alt.Scale(scheme="redblue", domain=[-lim, lim], reverse=True) if value == "dtheta"
             else alt.Scale(scheme="viridis"))
    x = alt.X("b_label:O", title="candidate b at slot p+1", sort=alt.EncodingSortField("b", order="ascending"),
              axis=alt.Axis(labelAngle=-60, labelLimit=90, labelOverlap=False))
    y = alt.Y("a_label:O", title="predecessor a at slot p", sort=alt.EncodingSortField("a", order="ascending"),
              axis=alt.Axis(labelLimit=90))
    tip = ["pair", "a_label", "b_label", alt.Tooltip("S:Q", format=".3f", title="S_p(a,b)"),
           alt.Tooltip("logit:Q", format=".3f", title="ℓ_{p+1}(b)"), alt.Tooltip("dtheta:Q", format=".3f", title="Δθ"),
           "on_paths"]
    rect = alt.Chart().mark_rect().encode(x=x, y=y, color=alt.Color(f"{value}:Q", title=title, scale=scale),
                                          tooltip=tip).transform_filter("datum.rule == ''")
    argmax = alt.Chart().mark_rect(fill=None, stroke="white", strokeWidth=2, strokeDash=[3, 2]).encode(
        x=x, y=y).transform_filter("datum.rule == '' && datum.argmax_cell")
    marks = alt.Chart().mark_point(filled=False, size=90, strokeWidth=2, color="black").encode(
        x=x, y=y, shape=alt.Shape("rule:N", title="path rule (marker)",
                                   scale=alt.Scale(domain=list(PATH_SHAPES), range=list(PATH_SHAPES.values())),
                                   legend=alt.Legend(labelLimit=0)),
        tooltip=["rule", "pair", "a_label", "b_label"]).transform_filter("datum.rule != ''")
    k = int(frame["b"].nunique())
    ch = alt.layer(rect, argmax, marks, data=frame).properties(width=max(120, 30 * k), height=max(90, 24 * k))
    n = frame["pair"].nunique()
    return ch.facet(facet=alt.Facet("pair:N", title=None, sort=alt.EncodingSortField("p", order="ascending"),
                                    header=alt.Header(labelFontWeight="bold")),
                    columns=min(columns, n)).resolve_scale(x="independent", y="independent")
