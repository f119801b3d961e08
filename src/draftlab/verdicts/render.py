"""Markdown tables of the verdicts (the generated blocks of README.md, docs/results.md and docs/toy-world.md), each
written by the one table routine (draftlab.markdown). Every interval is printed with its unit and count; a figure
without an interval says why."""
from __future__ import annotations

import json
import math
from pathlib import Path

from draftlab import paths
from draftlab.markdown import markdown_table
from draftlab.verdicts import reading as R


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
    unit = u["unit"].replace(" x run", "")
    return f"{u['n']} {unit}{'es' if unit.endswith(('ch', 'sh', 's', 'x')) else 's'}{extra}"


def pval(p) -> str:
    return "–" if p is None else ("< 0.0001" if p < 1e-4 else f"{p:.4f}")


def table(header: list[str], rows: list[list[str]]) -> str:
    return "\n".join(markdown_table(header, rows))


def arm_table(rows: list[dict]) -> str:
    out = []
    ar_ms = next((r.get("ms_per_round") for r in rows if r["arm"] == "ar"), None)
    for r in rows:
        ms = r.get("ms_per_round")
        steps = f" ({ms / ar_ms:.2f})" if ms and ar_ms and r["arm"] != "ar" else ""
        tau = num(r.get("tau"), ".2f") + ci(r.get("tau_ci"), ".2f") if r.get("tau") is not None else "not measured"
        sp = "1" if r["arm"] == "ar" else num(r.get("speedup"), ".2f") + "×" + ci(r.get("speedup_ci"), ".2f")
        geo = "1" if r["arm"] == "ar" else num(r.get("speedup_geomean"), ".2f") + "×"
        u = units(r.get("speedup_units") or r.get("tau_units")) or f"{r['prompts']} prompts"
        out.append([f"`{r['arm']}`", tau, num(r.get("tokens_per_s"), ".1f"), num(ms, ".1f") + steps, sp, geo, u])
    return table(["arm", "τ [95%]", "tokens/s", "ms per round (in AR steps; AR: per step)",
                  "ratio to AR, total time [95%]", "geometric mean of suites", "unit"], out)


def suite_table(rows: list[dict]) -> str:
    suites = sorted({s for r in rows for s in (r.get("speedup_per_suite") or {})})
    out = []
    for r in rows:
        if r["arm"] == "ar":
            continue
        per = r.get("speedup_per_suite") or {}
        out.append([f"`{r['arm']}`", *(num(per.get(s), ".3f") + "×" for s in suites), num(r.get("speedup"), ".3f") + "×",
                    num(r.get("speedup_geomean"), ".3f") + "×"])
    return table(["arm", *suites, "total time", "geometric mean"], out)


def compact_table(rows: list[dict]) -> str:
    """The replicated pairs in four columns (the README's): pair and temperature, Δτ with its interval, the verdict."""
    u = next((r["tau_units"] for r in rows if r.get("tau_units")), None)
    over = f", {u['n']} prompts x {u['runs']} runs" if u and u.get("runs") else ""
    out = []
    for r in rows:
        d = (num(r["tau_diff"], ".2f", True) + ci(r.get("tau_diff_ci"), ".2f", True)) if r.get("tau_diff") is not None \
            else "not run"
        out.append([r["pair"], f"{r['temperature']:g}", d, r.get("verdict_holm") or r.get("verdict")])
    return table(["pair", "T", f"Δτ [95%{over}]", "verdict"], out)


def pair_table(rows: list[dict], replicated: bool = False) -> str:
    head = ["pair", "T", "Δτ [95%]", "unit", "p (test)", "verdict", "tokens/s ratio, total time", "geometric mean",
            "speed unit"]
    if replicated:
        head = ["pair", "T", "Δτ [95%]", "per run (sd)", "p", "Holm p", "verdict", "resolvable Δτ",
                "tokens/s ratio (pooled)", "geometric mean"]
    out = []
    for r in rows:
        first = [r["pair"], f"{r['temperature']:g}"]
        if r.get("tau_diff") is None:  # a speed-only pair (no τ interval): its verdict says why
            rest = ["", "", ""] + (["", "", "", "", ""] if replicated else [])
            if r.get("speed") is not None and not replicated:
                rest = ["", "", "", f"{num(r.get('speed'), '.3f')}×{ci(r.get('speed_ci'), '.3f')}",
                        f"{num(r.get('speed_geomean'), '.3f')}×",
                        f"{units(r.get('speed_units'))} ({r.get('speed_verdict', '')})"]
            row = first + [r.get("verdict")] + rest
            out.append((row + [""] * len(head))[:len(head)])
            continue
        d = num(r["tau_diff"], ".3f", True) + ci(r.get("tau_diff_ci"), ".3f", True)
        verdict = r.get("verdict_holm") or r.get("verdict")
        if replicated:
            runs = ", ".join(num(x, ".2f", True) for x in r.get("per_run") or []) + f" ({num(r.get('run_sd'), '.2f')})"
            out.append(first + [d, runs, pval(r.get("p")), pval(r.get("p_holm")), verdict, num(r.get("resolvable"), ".3f"),
                                num(r.get("speed"), ".3f") + "×", num(r.get("speed_geomean"), ".3f") + "×"])
        else:
            test = "sign-flip" if (r.get("test") or "").startswith("stratified sign-flip") else (r.get("test") or "")
            out.append(first + [d, units(r.get("tau_units")), f"{pval(r.get('p'))} ({test})" if test else pval(r.get("p")),
                                verdict,
                                f"{num(r.get('speed'), '.3f')}×{ci(r.get('speed_ci'), '.3f')}",
                                num(r.get("speed_geomean"), ".3f") + "×",
                                f"{units(r.get('speed_units'))} ({r.get('speed_verdict', '')})"])
    return table(head, out)


def spread_table(rd: dict, recs: list[dict]) -> str:
    """Each replicate's base drafter τ and what its stages cost, then the base's spread and the design's resolution."""
    base, rows = rd["base"], []
    for r, tau in zip(recs, base["tau_per_run"]):
        tot = r.get("total") or {}
        load = max((t["load_after"][0] for t in (r.get("times") or {}).values()), default=None)
        rows.append([Path(r["folder"]).name, r["seed"], num(tau, ".2f"), f"{num(tot.get('cpu_s', 0) / 60, '.1f')} min",
                     f"{num(tot.get('wall_s', 0) / 60, '.1f')} min", num(load, ".2f")])
    res = rd["resolution"]
    lo, hi = (res.get("range") or [None, None])[:2]
    return "\n".join([
        table(["replicate", "seeds", f"base drafter τ (T={base.get('temperature', 0.0):g})", "stages' CPU time", "wall time",
               "load average (1 min, max)"], rows), "",
        f"Base drafter (`{base['arm']}`) τ over {base['units']['n']} runs: sd {num(base['sd'], '.3f')}, range "
        f"{num(base['range'][0], '.2f')}–{num(base['range'][1], '.2f')}. Smallest |Δτ| a primary pair's interval "
        f"excludes 0 at its observed spread: median {num(res['median_resolvable_tau_diff'], '.3f')} "
        f"(range {num(lo, '.3f')}–{num(hi, '.3f')})."])


def speed_table(frames: list, a: str, b: str) -> str:
    """a ÷ b speed at T=0 per suite, pooled over the replicates by total time, beside the geometric mean and each run."""
    out = []
    for label, samples, streams in (("the suites' lockstep batches", ("headline",), None),
                                    ("one stream (the sweep's 1-stream section)", ("sweep",), 1)):
        s = R.pooled_speed(frames, a, b, 0.0, samples, streams)
        if s.get("") is None:
            continue
        per = ", ".join(f"{k} {num(v, '.3f')}×" for k, v in (s.get("_per_suite") or {}).items())
        runs = ", ".join(f"{num(v, '.3f')}×" for v in s.get("_per_run") or [])
        out.append([label, units(s["_units"]), per, num(s[""], ".3f") + "×", num(s["_geomean"], ".3f") + "×", runs])
    return table([f"`{a}` ÷ `{b}`, T=0", "timing unit", "per suite", "total time (pooled)", "geometric mean",
                  "per run"], out)


def changes_table(rd: dict, world: Path) -> str:
    """Each primary pair: the committed single-run reading (the world's toy_report.json family rows over all
    families) beside the replicated one."""
    old = {}
    rep = world / paths.TOY_REPORT
    if rep.exists():
        for r in json.loads(rep.read_text()).get("family_pairs") or []:
            if r.get("family") == "all":
                old[(r["pair"], 0.0 if r["temperature"] == "t0" else 1.0)] = r
    out = []
    for r in rd["primary"]:
        o = old.get((r["pair"], r["temperature"]))
        then = (num(o["tau_diff"], ".3f", True) + ci(o.get("tau_diff_ci"), ".3f", True)) if o else "–"
        now = num(r.get("tau_diff"), ".3f", True) + ci(r.get("tau_diff_ci"), ".3f", True)
        out.append([r["pair"], f"{r['temperature']:g}", then, o.get("verdict") if o else "–", now,
                    r.get("verdict_holm") or r.get("verdict")])
    return table(["pair", "T", "single run (committed, 1 training run)", "verdict then", "replicated", "verdict now"], out)


def calibration_table(cal: dict, slots: int = 4) -> str:
    """An addition's calibration (pooled over its runs): per arm and temperature, the marks it proposed with their
    `+` share beside the target's `+` share among the marks emitted, and the share of rounds accepting slot j."""
    rows = []
    for arm, temps in cal["total"].items():
        for t, f in temps.items():
            m = f["marks"]
            share = lambda k: num(f.get(k), ".3f") if f.get(k) is not None else "–"  # noqa: E731
            rows.append([f"`{arm}`", t, f["rounds"], m["proposed"], share("proposed_plus_share"), m["emitted"],
                         share("emitted_plus_share"), *(num(x, ".3f") for x in f["accept_share"][:slots])])
    head = ["arm", "T", "rounds", "marks proposed", "`+` share proposed", "marks emitted", "`+` share emitted",
            *(f"slot {j} accepted" for j in range(1, slots + 1))]
    return table(head, rows) + f"\n\nUnit: {cal.get('unit', 'a round or a mark, pooled over the runs')}; " \
                                 f"{len(cal.get('runs', {}))} runs."
