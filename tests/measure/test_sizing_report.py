"""draftlab.measure.sizing_report: the sizing plans as text (what tools/size_benchmark.py prints), the configured
benchmark section as a BenchPlan, and the plain twins that stand in for seeded method arms a pilot lacks."""
from __future__ import annotations

import json

from draftlab.measure.sizing import paired_plan, sizing_plan
from draftlab.measure.sizing_report import bench_plan, paired_lines, per_arm_lines, twin_proxies
from draftlab.params import load_params


def test_the_committed_run_sized_as_text(root):
    detail = json.loads((root / "results" / "benchmark.json").read_text())
    plan = sizing_plan(detail, 0.03)
    lines = per_arm_lines(plan, detail, "pilot.json", 0.03)
    assert lines[0].startswith("pilot: pilot.json (") and "prompts per suite for ±0.03" in lines[1]
    assert all(any(ln.startswith(f"{arm:18s} ") for ln in lines) for arm in plan["per_arm"])
    assert lines[-1].startswith("recommendation: benchmark.prompts_per_suite=") or "pass --sd" in lines[-1]
    b = load_params(root / "params.yaml").benchmark
    bp = bench_plan(b)
    assert bp.arms == list(b.arms) and bp.pairs == [list(p) for p in b.pairs] and bp.max_new_tokens == b.max_new_tokens
    res = paired_plan(detail, bp, b.target_tau_diff_halfwidth, b.target_ratio_halfwidth)
    text = paired_lines(res, detail, "pilot.json", 0.95, 1.0, "constant", {}, False)
    assert "A PREDICTION" in text[0] and text[-1].startswith(("predicted minutes", "not in the pilot"))
    assert not any("sized by their plain twin" in ln for ln in text)


def test_twins_stand_in_only_for_seeded_methods(root):
    b = load_params(root / "params.yaml").benchmark
    seeded = [a for a in b.arms if a.endswith("-seeded")]
    detail = {"summary": {a[: -len("-seeded")]: {} for a in seeded}}  # only the plain twins ran
    proxies = twin_proxies(detail, b)
    assert proxies and all(k.endswith("-seeded") and v == k[: -len("-seeded")] for k, v in proxies.items())
    assert "dflash-seeded" not in proxies  # the seeded drafter's own arm is another drafter, not a method
    assert twin_proxies({"summary": {a: {} for a in b.arms}}, b) == {}  # nothing missing: no proxy
