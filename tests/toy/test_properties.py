"""The toy world's property verdicts (draftlab.pipeline.toy.properties): the entropy share is read in the world's mix,
and each verdict can fail."""
from __future__ import annotations

from types import SimpleNamespace

from draftlab.config.sections import ToyTargetConfig
from draftlab.pipeline.toy.properties import BARS, DRIFT_BARS, mix_share, verdicts

WORLD = {"families": [{"name": "copy", "lengths": [48, 50]}, {"name": "mark", "weight": 3.0, "lengths": [24, 25]}]}


def params(world=WORLD):
    return SimpleNamespace(target=SimpleNamespace(toy=ToyTargetConfig(world=world)))


def test_the_entropy_share_weighs_families_by_the_worlds_mix_and_answer_length():
    fam = {"copy": {"mean_answer_tokens": 49.0, "high_entropy_share": 0.0},
           "mark": {"mean_answer_tokens": 49.0, "high_entropy_share": 0.5}}
    assert mix_share(params(), fam) == 0.375  # 3 parts mark at 0.5, 1 part copy at 0
    fam["copy"]["mean_answer_tokens"] = 147.0  # a family three times as long weighs three times as much
    assert mix_share(params(), fam) == 0.25
    assert mix_share(params(), {}) is None


def good() -> dict:
    return {"target": {"exact_match": {"copy": 1.0, "mark": 0.97}, "entropy_share": 0.3},
            "answers": {"copy": {"tokens_min": 48, "loop_share": 0.0}, "mark": {"tokens_min": 48, "loop_share": 0.05}},
            "flops_ratio": 9.1,
            "drafter": {"sim_tau": 5.0, "slot_acc": [0.9, 0.8, 0.7, 0.6, 0.5], "top8_cov": [1.0, 1.0, 1.0, 0.9, 0.8]},
            "engine": {"tau": 4.5, "oracle_tau_reachable": 5.5}}


def test_every_verdict_holds_on_a_good_world_and_each_can_fail():
    assert all(verdicts(good()).values())
    breaks = {
        "target_exact_match": lambda p: p["target"]["exact_match"].update(mark=0.94),
        "answer_tokens": lambda p: p["answers"]["copy"].update(tokens_min=47),
        "loops": lambda p: p["answers"]["mark"].update(loop_share=0.11),
        "entropy": lambda p: p["target"].update(entropy_share=BARS["entropy_share_min"] - 0.01),
        "flops_ratio": lambda p: p.update(flops_ratio=7.9),
        "tau_simulated": lambda p: p["drafter"].update(sim_tau=3.9),
        "tau_engine": lambda p: p["engine"].update(tau=3.9, oracle_tau_reachable=4.9),
        "top1_falls": lambda p: p["drafter"].update(slot_acc=[0.9, 0.8, 0.85, 0.6, 0.5]),
        "top8_above_top1": lambda p: p["drafter"].update(top8_cov=[1.0, 1.0, 1.0, 0.7, 0.8]),
        "oracle_headroom": lambda p: p["engine"].update(oracle_tau_reachable=4.9),
    }
    for name, spoil in breaks.items():
        p = good()
        spoil(p)
        v = verdicts(p)
        assert not v[name] and sum(not x for x in v.values()) == 1, (name, v)


def good_drift() -> dict:
    """A drift world (read on its corrector family's suite: `capslock` since setting 3) that meets its bars: top-1 0.9 -> 0.4 by slot 8, top-8 − top-1 0.25 at slot 4 widening to 0.4,
    τ 4 against a reachable oracle of 6."""
    top1 = [0.9, 0.8, 0.7, 0.6, 0.55, 0.5, 0.45, 0.4, 0.4, 0.4]
    top8 = [1.0, 1.0, 0.95, 0.85, 0.85, 0.85, 0.8, 0.8, 0.8, 0.8]
    p = good()
    detail = {"tau": 4.0, "oracle_tau_reachable": 6.0, "top1": top1, "top8": top8}
    p["engine"] = {"per_suite_detail": {DRIFT_BARS["family"]: detail}}
    return p


def test_the_drift_worlds_bars_hold_on_a_good_world_and_each_can_fail():
    from draftlab.pipeline.toy.properties import drift_verdicts

    assert all(drift_verdicts(good_drift()).values())
    d = lambda p: p["engine"]["per_suite_detail"][DRIFT_BARS["family"]]  # noqa: E731
    breaks = {
        "target_exact_match": lambda p: p["target"]["exact_match"].update(mark=0.94),
        "entropy": lambda p: p["target"].update(entropy_share=DRIFT_BARS["entropy_share_min"] - 0.01),
        "top1_drop": lambda p: d(p)["top1"].__setitem__(0, 0.55),  # falls by 0.15 from slot 1 to 8
        "gap_from_slot_4": lambda p: d(p)["top8"].__setitem__(9, 0.55),  # slot 10's gap 0.15
        "gap_widens": lambda p: d(p)["top8"].__setitem__(7, 0.62),  # slot 8's gap 0.22 < slot 4's 0.25 + 0.05
        "oracle_ratio": lambda p: d(p).update(tau=4.8, oracle_tau_reachable=5.9),  # gain 1.1, ratio 1.23
        "oracle_gain": lambda p: d(p).update(tau=3.0, oracle_tau_reachable=3.9),  # ratio 1.3, gain 0.9
        "tau_engine_range": lambda p: d(p).update(tau=6.5, oracle_tau_reachable=9.0),
    }
    for name, spoil in breaks.items():
        p = good_drift()
        spoil(p)
        v = drift_verdicts(p)
        assert not v[name] and sum(not x for x in v.values()) == 1, (name, v)
