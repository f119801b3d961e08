"""The toy world's property verdicts (draftlab.pipeline.toy.properties): the entropy share is read in the world's mix,
and each verdict can fail."""
from __future__ import annotations

from types import SimpleNamespace

from draftlab.config.sections import ToyTargetConfig
from draftlab.pipeline.toy.properties import BARS, mix_share, verdicts

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
