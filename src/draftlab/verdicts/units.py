"""Every interval in a results file names its unit and count. New runs write them (`bench.uncertainty`: `units` on
each pair, `units_<t>` per summary arm, `ci.units` per suite row; `draftlab verdicts`: `tau_units` / `speed_units`).
`annotate` adds them to a results file written before (a benchmark detail, a tool's file built on it, the toy report,
the world's properties, the seeded comparison), from what the file itself records: its prompts per suite and the
benchmark's batch size (a lockstep batch is one unit). It changes no figure; `missing` lists the intervals of a
file that still lack them (tests/verdicts/test_units.py holds every committed results file to it)."""
from __future__ import annotations

import math
from typing import Any

INTERVAL_KEYS = ("ci", "tau_ci")


def _is_interval_key(k: str) -> bool:
    return k == "ci" or k.endswith("_ci")


def _count(prompts, batch: int) -> int:
    """Units of a row that names its prompts per suite ({suite: n}) or in all (n)."""
    if isinstance(prompts, dict):
        return sum(math.ceil(int(n) / batch) for n in prompts.values())
    return math.ceil(int(prompts) / batch)


def _unit(batch: int) -> str:
    return "batch" if batch > 1 else "prompt"


def annotate(d: dict, batch: int, kind: str = "benchmark") -> dict:
    """Add {unit, n} beside every interval of a results dict, in place (module doc); returns it.
    kind: benchmark (a benchmark detail or a tool's rows over one), toy_report, world, comparison."""
    if kind == "comparison":  # the seeded comparison: paired bootstrap over held-out sequences
        _walk_comparison(d)
        return d
    if kind == "world":
        eng = d.get("engine") or {}
        if "tau_ci" in eng:
            n = len(eng.get("per_suite") or {}) * math.ceil(int(eng.get("prompts_per_suite") or 0) / batch)
            eng["units"] = {"unit": _unit(batch), "n": n}
        return d
    for suite, by_t in (d.get("suites") or {}).items():
        for tk, by_arm in by_t.items():
            for arm, m in by_arm.items():
                ci = m.get("ci")
                if isinstance(ci, dict) and "units" not in ci:
                    ids = (m.get("per_prompt") or {}).get("prompt_id") or []
                    ci["units"] = {"unit": "batch" if any("," in str(i) for i in ids) else "prompt", "n": len(ids)}
    per_arm: dict = {}
    for suite, by_t in (d.get("suites") or {}).items():
        for tk, by_arm in by_t.items():
            for arm, m in by_arm.items():
                u = (m.get("ci") or {}).get("units") if isinstance(m.get("ci"), dict) else None
                if u:
                    e = per_arm.setdefault((arm, tk), {"unit": u["unit"], "n": 0})
                    e["n"] += u["n"]
    for arm, e in (d.get("summary") or {}).items():
        for tk in ("t0", "t1"):
            if any(k.endswith(f"_{tk}_ci") for k in e) and f"units_{tk}" not in e:
                e[f"units_{tk}"] = per_arm.get((arm, tk)) or _from_setup(d, batch)
    for key in ("pairs", "overall_pairs"):
        for row in d.get(key) or []:
            _pair(row, batch, counted=key == "overall_pairs", tool=d)
    for row in d.get("family_pairs") or []:
        if "units" not in row and "prompts" in row:
            row["units"] = {"unit": "prompt", "n": int(row["prompts"])}
    cons = d.get("consistency")
    if isinstance(cons, dict) and "engine_tau_t0_ci" in cons and "engine_units" not in cons:
        cons["engine_units"] = _from_setup(d, batch)
    return d


def _pair(row: dict, batch: int, counted: bool = False, tool: dict | None = None) -> None:
    if "units" in row or not any(_is_interval_key(k) for k in row):
        if isinstance(row.get("no_loop"), dict):
            _pair(row["no_loop"], batch)
        return
    if "prompts" in row:  # a benchmark pair row of before 2026-12-06: its `prompts` counted its units per suite
        pr = row["prompts"]
        n = sum(int(v) for v in pr.values()) if isinstance(pr, dict) else int(pr) if counted else _count(pr, batch)
        row["units"] = {"unit": _unit(batch), "n": n}
    elif tool is not None and isinstance(tool.get("benchmark"), dict):  # a tool's row: its pair's prompts per suite
        cfg = tool["benchmark"]
        name = f"{row.get('a')} vs {row.get('b')}"
        k = (cfg.get("pair_prompts_per_suite") or {}).get(name) or cfg.get("prompts_per_suite")
        if k:
            row["units"] = {"unit": _unit(batch), "n": len(cfg.get("suites") or []) * math.ceil(int(k) / batch)}
    if isinstance(row.get("no_loop"), dict):
        _pair(row["no_loop"], batch)


def _from_setup(d: dict, batch: int) -> dict | None:
    """The units of an arm that ran every prompt of the setup's suites (a tool's summary rows)."""
    cfg = d.get("config") or (d.get("benchmark") if isinstance(d.get("benchmark"), dict) else None) or {}
    prompts = (d.get("setup") or {}).get("prompts") or cfg.get("prompts_per_suite")
    suites = cfg.get("suites") or []
    if isinstance(prompts, dict):
        return {"unit": _unit(batch), "n": _count(prompts, batch)}
    if isinstance(prompts, int) and suites:
        return {"unit": _unit(batch), "n": len(suites) * math.ceil(prompts / batch)}
    return None


def _walk_comparison(x: Any, sequences: int | None = None) -> None:
    """The seeded comparison's pairs: a paired bootstrap over held-out sequences (`ci` pools each sequence's blocks,
    `ci_per_sequence` weighs sequences equally); the count is the enclosing set's `sequences`."""
    if isinstance(x, dict):
        sequences = x.get("sequences", sequences)
        if "ci" in x and "units" not in x and isinstance(x.get("ci"), list):
            x["units"] = {"unit": "sequence", "n": sequences}
        for v in x.values():
            _walk_comparison(v, sequences)
    elif isinstance(x, list):
        for v in x:
            _walk_comparison(v, sequences)


def missing(d: Any, path: str = "") -> list[str]:
    """The paths of intervals without their units: a dict holding an interval key must hold `units` (or, for a
    summary's `<metric>_<t>_ci`, `units_<t>`; a suite row's `ci` dict its own `units`)."""
    out = []
    if isinstance(d, dict):
        keys = [k for k, v in d.items() if _is_interval_key(k) and isinstance(v, list)]
        for k in keys:
            tk = k.rsplit("_", 2)[-2] if k.count("_") >= 2 else None
            ok = "units" in d or (tk and f"units_{tk}" in d) or (k == "tau_diff_ci" and "tau_units" in d) \
                or (k.startswith("speed") and "speed_units" in d) or (k == "engine_tau_t0_ci" and "engine_units" in d)
            if not ok:
                out.append(f"{path}.{k}")
        if isinstance(d.get("ci"), dict) and "units" not in d["ci"]:
            out.append(f"{path}.ci")
        for k, v in d.items():
            out += missing(v, f"{path}.{k}")
    elif isinstance(d, list):
        for i, v in enumerate(d):
            out += missing(v, f"{path}[{i}]")
    return out


def annotate_file(path) -> int:
    """Annotate one committed results file in place (atomically), its kind and batch size read from the file or its
    run's benchmark detail beside it; returns how many intervals were missing their units before."""
    import json
    from pathlib import Path

    path = Path(path)
    d = json.loads(path.read_text())
    before = len(missing(d))
    if not before:
        return 0
    sibling = path.parent / "benchmark.json"
    run_batch = (json.loads(sibling.read_text()).get("config") or {}).get("batch_size", 1) if sibling.exists() else 1
    if path.name == "pretrain_seeded.json" or path.parent.name == "pretrain_ablation" or path.name == "pretrain_ablation.json":
        annotate(d, 1, "comparison")
    elif path.name == "world.json":
        annotate(d, int(run_batch), "world")
    else:
        cfg = d.get("config") or (d.get("benchmark") if isinstance(d.get("benchmark"), dict) else {}) or {}
        annotate(d, int(cfg.get("batch_size") or run_batch), "benchmark")
    rewrite_json(path, d)
    return before


def rewrite_json(path, d: dict) -> None:
    """Write `d` over the committed JSON file `path` in the file's own layout (its indent, full float precision), so
    that only what changed shows in a diff."""
    import json
    from pathlib import Path

    from draftlab.io import atomic_write

    path = Path(path)
    text = path.read_text()
    second = text.splitlines()[1] if "\n" in text else ""
    indent = len(second) - len(second.lstrip(" ")) or None
    out = json.dumps(d, indent=indent, ensure_ascii=False) + ("\n" if text.endswith("\n") else "")
    atomic_write(path, lambda p: p.write_text(out))
