"""Markdown tables of the verdicts (the generated blocks of README.md, docs/results.md and docs/toy-world.md). Every
interval is printed with its unit and count; a figure without an interval says why."""
from __future__ import annotations

import math


def num(x, fmt: str = ".3f", sign: bool = False) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    return format(x, ("+" if sign else "") + fmt)


def ci(c, fmt: str = ".3f", sign: bool = False) -> str:
    return "" if not c or None in c else f" [{num(c[0], fmt, sign)}, {num(c[1], fmt, sign)}]"


def units(u) -> str:
    if not u:
        return ""
    extra = f" x {u['runs']} runs" if u.get("runs") else ""
    return f"{u['n']} {u['unit'].replace(' x run', '')}s{extra}"


def pval(p) -> str:
    return "–" if p is None else ("< 0.0001" if p < 1e-4 else f"{p:.4f}")


def arm_table(rows: list[dict]) -> str:
    out = ["| arm | τ [95%] | tokens/s | ratio to AR, total time [95%] | geometric mean of suites | unit |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        tau = num(r.get("tau"), ".2f") + ci(r.get("tau_ci"), ".2f") if r.get("tau") is not None else "not measured"
        sp = "1" if r["arm"] == "ar" else num(r.get("speedup"), ".2f") + "×" + ci(r.get("speedup_ci"), ".2f")
        geo = "1" if r["arm"] == "ar" else num(r.get("speedup_geomean"), ".2f") + "×"
        u = units(r.get("speedup_units") or r.get("tau_units")) or f"{r['prompts']} prompts"
        out.append(f"| `{r['arm']}` | {tau} | {num(r.get('tokens_per_s'), '.1f')} | {sp} | {geo} | {u} |")
    return "\n".join(out)


def suite_table(rows: list[dict]) -> str:
    suites = sorted({s for r in rows for s in (r.get("speedup_per_suite") or {})})
    out = ["| arm | " + " | ".join(suites) + " | total time | geometric mean |", "|---|" + "---|" * (len(suites) + 2)]
    for r in rows:
        if r["arm"] == "ar":
            continue
        per = r.get("speedup_per_suite") or {}
        out.append(f"| `{r['arm']}` | " + " | ".join(num(per.get(s), ".3f") + "×" for s in suites)
                   + f" | {num(r.get('speedup'), '.3f')}× | {num(r.get('speedup_geomean'), '.3f')}× |")
    return "\n".join(out)


def compact_table(rows: list[dict]) -> str:
    """The replicated pairs in four columns (the README's): pair and temperature, Δτ with its interval, the verdict."""
    u = next((r["tau_units"] for r in rows if r.get("tau_units")), None)
    over = f", {u['n']} prompts x {u['runs']} runs" if u and u.get("runs") else ""
    out = [f"| pair | T | Δτ [95%{over}] | verdict |", "|---|---|---|---|"]
    for r in rows:
        d = (num(r["tau_diff"], ".2f", True) + ci(r.get("tau_diff_ci"), ".2f", True)) if r.get("tau_diff") is not None \
            else "not run"
        out.append(f"| {r['pair']} | {r['temperature']:g} | {d} | {r.get('verdict_holm') or r.get('verdict')} |")
    return "\n".join(out)


def pair_table(rows: list[dict], replicated: bool = False) -> str:
    head = ("| pair | T | Δτ [95%] | unit | p (test) | verdict | tokens/s ratio, total time | geometric mean | "
            "speed unit |")
    if replicated:
        head = ("| pair | T | Δτ [95%] | per run | p | Holm p | verdict | resolvable Δτ | tokens/s ratio (pooled) | "
                "geometric mean |")
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        if r.get("tau_diff") is None:
            sp = (f"{num(r.get('speed'), '.3f')}×{ci(r.get('speed_ci'), '.3f')} | {num(r.get('speed_geomean'), '.3f')}× | "
                  f"{units(r.get('speed_units'))} ({r.get('speed_verdict', '')})") if r.get("speed") is not None else " | |"
            out.append(f"| {r['pair']} | {r['temperature']:g} | {r.get('verdict')} | | | | " + sp + " |"
                       if not replicated else f"| {r['pair']} | {r['temperature']:g} | {r.get('verdict')} | | | | | | | |")
            continue
        d = num(r["tau_diff"], ".3f", True) + ci(r.get("tau_diff_ci"), ".3f", True)
        verdict = r.get("verdict_holm") or r.get("verdict")
        if replicated:
            runs = ", ".join(num(x, ".2f", True) for x in r.get("per_run") or [])
            out.append(f"| {r['pair']} | {r['temperature']:g} | {d} | {runs} | {pval(r.get('p'))} | "
                       f"{pval(r.get('p_holm'))} | {verdict} | {num(r.get('resolvable'), '.3f')} | "
                       f"{num(r.get('speed'), '.3f')}× | {num(r.get('speed_geomean'), '.3f')}× |")
        else:
            test = "sign-flip" if (r.get("test") or "").startswith("stratified sign-flip") else (r.get("test") or "")
            out.append(f"| {r['pair']} | {r['temperature']:g} | {d} | {units(r.get('tau_units'))} | "
                       f"{pval(r.get('p'))} ({test}) | {verdict} | {num(r.get('speed'), '.3f')}×"
                       f"{ci(r.get('speed_ci'), '.3f')} | {num(r.get('speed_geomean'), '.3f')}× | "
                       f"{units(r.get('speed_units'))} ({r.get('speed_verdict', '')}) |")
    return "\n".join(out)
