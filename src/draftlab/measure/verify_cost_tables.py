"""The printed views of a verify-cost file (`draftlab.measure.verify_cost`, schema draftlab-verify-cost-v1):
`table`, what tools/verify_cost.py prints, and `width_table`, the Markdown of the verify pass by width under each
target.linear mode beside the machine's floor (docs/ quotes it)."""
from __future__ import annotations

from draftlab.markdown import markdown_table


def table(out: dict) -> str:
    lines = []
    if out.get("rates"):
        r = out["rates"]
        lines.append(f"machine: read {r['read_gb_s']:.1f} GB/s, products {r['matmul_gflop_s']:.0f} GFLOP/s; floor = the "
                     "linear weights read once (or their arithmetic) + the non-matmul time measured at width 1")
    for mode, p in out.get("plans", {}).items():
        lines.append(f"target.linear={mode}: {p['summary']}")
    for f in out["fits"]:
        B, C, L = f["batch"], f["context"], f["linear"]
        lines.append(f"batch {B}, context {C}, target.linear={L}: verify forward by width (ms, median [95% interval])")
        for r in out["verify"]:
            if (r["batch"], r["context"], r["linear"]) == (B, C, L):
                lo, hi = r["ci_ms"]
                fl = next((x for x in out.get("floor", []) if (x["batch"], x["width"]) == (B, r["width"])), None)
                lines.append(f"  w={r['width']:>2}  {r['median_ms']:8.2f}  [{lo:.2f}, {hi:.2f}]  ×{r['median_ms'] / f['ar_ms']:.2f}"
                             + (f"   floor {fl['floor_ms']:.1f}" if fl else ""))
        head = ", ".join(f"{k} {v:+.2f} ms" for k, v in f["full_head_extra_ms"].items())
        lines.append(f"  per position {f['per_position_ms']:.2f} ms; w=S/w=1 {f['full_over_ar']:.2f}; break-even "
                     f"min_prob {f['break_even_min_prob']:.3f}" + (f"; full-vocabulary head {head}" if head else ""))
        for r in out["draft"]:
            if (r["batch"], r["context"], r["linear"]) == (B, C, L):
                lo, hi = r["ci_ms"]
                lines.append(f"  draft {r['drafter']:<20} (head {r['head_vocab']:>6}) {r['median_ms']:8.2f}  [{lo:.2f}, {hi:.2f}]")
    return "\n".join(lines)


def width_table(out: dict, batch: int = 1) -> str:
    """Markdown: the verify pass by width under each mode side by side (median ms), each mode's passes in AR steps
    of the fastest AR step measured (the fastest mode's width 1), and the machine's floor beside them."""
    modes = list(out["setup"]["linear"])
    ctx = out["setup"]["contexts"][0]
    ms = {(r["linear"], r["width"]): r["median_ms"] for r in out["verify"] if (r["batch"], r["context"]) == (batch, ctx)}
    floor = {f["width"]: f["floor_ms"] for f in out.get("floor", []) if f["batch"] == batch}
    widths = sorted({w for _, w in ms})
    ar = min(ms[(m, 1)] for m in modes)
    head = ["width", *(f"`{m}` ms" for m in modes), *(f"`{m}` / AR" for m in modes), "floor ms"]
    rows = [[str(w), *(f"{ms[(m, w)]:.1f}" for m in modes), *(f"{ms[(m, w)] / ar:.2f}" for m in modes),
             f"{floor[w]:.1f}" if w in floor else "–"] for w in widths]
    lines = list(markdown_table(head, rows))
    r = out.get("rates") or {}
    plans = "; ".join(f"{m}: {p['summary']}" for m, p in (out.get("plans") or {}).items() if m == "auto")
    lines.append("")
    lines.append(f"Batch {batch}, context {ctx}, {out['setup']['reps']} interleaved repetitions (medians); AR = the fastest "
                 f"width-1 pass, {ar:.1f} ms. Floor = the linear weights read once at {r.get('read_gb_s', 0):.1f} GB/s "
                 f"(or their arithmetic at {r.get('matmul_gflop_s', 0):.0f} GFLOP/s) + the non-matmul time of a "
                 f"width-1 pass. Measured plan ({plans or 'none'}).")
    return "\n".join(lines)
