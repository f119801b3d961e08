"""The accelerator check's timing harness and sanity gates (draftlab.checks.timing / gates), on fakes.

A fake device charges a one-off delay the first time any arm meets a (batch, query, key) shape — what an attention
backend's plan build does on a GPU. With the harness (each arm warmed on its own shapes, then timed in rotated
order) every arm's figures are the same whichever order the arms come in; timed naively (no warm-up, one pass) they
are not, so the fake has teeth. Each gate fails on a planted violation and passes on clean figures."""
from __future__ import annotations

import pytest

from draftlab.checks.gates import LIMITS, RULES, floor_report, gate_values, gates
from draftlab.checks.timing import Rounds, rotations, summarize, time_arms
from draftlab.stats import quantile


class FakeDevice:
    """Round cost = the shape's own work + a one-off 60 ms the first time any caller meets that shape."""

    def __init__(self):
        self.seen: set = set()

    def run(self, shape: tuple, work_ms: float) -> float:
        extra = 0.0 if shape in self.seen else 60.0
        self.seen.add(shape)
        return work_ms + extra


def fake_arms(dev: FakeDevice) -> dict:
    """Three arms whose shape sequences overlap (as arms on the same prompts do): the key length grows each round,
    ar steps one position at a time, the speculative arms by a block, with their own query widths."""
    def arm(q: int, step: int, work: float, rounds: int = 8):
        def decode() -> Rounds:
            ms = [[dev.run((4, q, 100 + step * r), work), dev.run(("commit", 4), 0.5)] for r in range(rounds)]
            return Rounds(("verify", "commit"), ms)
        return decode

    return {"ar": arm(1, 1, 10.0), "dflash": arm(16, 4, 12.0), "dcoco": arm(16, 4, 12.5)}


def test_per_arm_figures_do_not_depend_on_the_arms_order():
    results = []
    for order in (["ar", "dflash", "dcoco"], ["dcoco", "dflash", "ar"]):
        dev = FakeDevice()
        arms = fake_arms(dev)
        out = time_arms({k: arms[k] for k in order}, reps=2)
        results.append({k: (v["round_median_ms"], v["round_p20_ms"], v["median_ms"]) for k, v in out["arms"].items()})
        assert out["warmed"] and out["orders"] == rotations(order, 2)
        assert out["retime"]["arm"] == order[0] and out["retime"]["ratio"] == pytest.approx(1.0)
    assert results[0] == results[1]
    assert results[0]["dflash"][0] == pytest.approx(12.5) and results[0]["ar"][0] == pytest.approx(10.5)
    # the control: timed once without warm-up, the first arm to meet the shapes carries the plan builds
    naive = []
    for order in (["ar", "dflash", "dcoco"], ["dcoco", "dflash", "ar"]):
        arms = fake_arms(FakeDevice())
        out = time_arms({k: arms[k] for k in order}, reps=1, warm=False, retime=False)
        naive.append(out["arms"]["dcoco"]["round_median_ms"])
    assert naive[0] != naive[1]


def test_rotation_and_statistics():
    assert rotations(["a", "b", "c"], 4) == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]
    xs = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert quantile(xs, 0.5) == 3.0 and quantile(xs, 0.2) == pytest.approx(1.8) and quantile([], 0.5) is None
    s = summarize([Rounds(("a", "b"), [[1.0, 2.0], [3.0, 4.0]]), Rounds(("a", "b"), [[5.0, 6.0]])])
    assert s["rounds"] == 3 and s["median_ms"] == {"a": 3.0, "b": 4.0} and s["round_median_ms"] == 7.0
    assert s["round_p20_ms"] == pytest.approx(3.0 + 0.4 * 4.0)


CLEAN = {"1": {"ar_step_ms": 10.0, "verify_ms": {"1": 9.5, "8": 10.0, "16": 11.0}, "arms": {"dflash": 14.0}},
         "8": {"ar_step_ms": 12.0, "verify_ms": {"1": 11.5, "8": 13.0, "16": 15.0}, "arms": {"dflash": 17.0}}}
FLOOR_OK = floor_report(5.0, 16_000_000_000, 100_000_000, 4300.0, "NVIDIA H200")


def test_every_gate_passes_on_clean_figures_and_fails_on_a_planted_violation():
    import copy

    ok = gates(CLEAN, {"ratio": 1.02}, FLOOR_OK)
    assert ok == {"break_even_tau_ge_1": True, "verify16_ge_verify1": True, "ar_step_matches_verify1": True,
                  "first_arm_retimed": True, "copy_bandwidth": True}
    planted = {
        "break_even_tau_ge_1": lambda lv: lv["8"]["arms"].update(dflash=11.0),  # a round cheaper than an AR step
        "verify16_ge_verify1": lambda lv: lv["1"]["verify_ms"].update({"16": 8.0}),  # 16 tokens cheaper than 1
        "ar_step_matches_verify1": lambda lv: lv["8"].update(ar_step_ms=9.0),  # AR step 22% under verify(1)
    }
    for gate, plant in planted.items():
        lv = copy.deepcopy(CLEAN)
        plant(lv)
        g = gates(lv, {"ratio": 1.0}, FLOOR_OK)
        assert g[gate] is False and all(v for k, v in g.items() if k != gate), (gate, g)
    assert gates(CLEAN, {"ratio": 1.07}, FLOOR_OK)["first_arm_retimed"] is False
    slow_copy = floor_report(5.0, 16_000_000_000, 100_000_000, 3000.0, "NVIDIA H200")  # 62% of 4800
    assert gates(CLEAN, {"ratio": 1.0}, slow_copy)["copy_bandwidth"] is False and not slow_copy["valid"]


def test_each_gate_is_reported_with_the_worst_value_it_judged():
    """`gate_values`: per gate the worst figure over levels and arms, its limit and rule, and whether it holds —
    the verdicts `gates` gives."""
    v = gate_values(CLEAN, {"ratio": 1.02}, FLOOR_OK)
    worst = {"break_even_tau_ge_1": min(14.0 / 10.0, 17.0 / 12.0), "verify16_ge_verify1": min(11.0 / 9.5, 15.0 / 11.5),
             "ar_step_matches_verify1": max(0.5 / 9.5, 0.5 / 11.5), "first_arm_retimed": 0.02,
             "copy_bandwidth": 4300.0 / 4800.0}
    assert set(v) == set(worst) == set(LIMITS) == set(RULES)
    for name, g in v.items():
        assert g == {"value": pytest.approx(worst[name], rel=1e-12), "limit": LIMITS[name], "rule": RULES[name],
                     "holds": True}, name
    assert {k: g["holds"] for k, g in v.items()} == gates(CLEAN, {"ratio": 1.02}, FLOOR_OK)
    late = gate_values(CLEAN, {"ratio": 0.93}, FLOOR_OK)["first_arm_retimed"]
    assert late["value"] == pytest.approx(0.07) and late["holds"] is False  # |0.93 - 1| > 0.05
    assert set(gate_values({}, None, None)) == set()  # nothing to judge: no gate


def test_ar_step_over_floor():
    fl = floor_report(5.0, 16_000_000_000, 100_000_000, 4000.0, "NVIDIA H200")
    assert fl["floor_ms"] == pytest.approx(16.1e9 / 4000e9 * 1e3) and fl["value"] == pytest.approx(5.0 / fl["floor_ms"])
    assert fl["valid"]
    cpu = floor_report(5.0, 1_000_000, 0, 10.0, "x86_64")
    assert not cpu["valid"] and "no datasheet" in cpu["why"] and "copy_bandwidth" not in gates(CLEAN, None, cpu)
