"""draftlab.toy.ideal: a world's ideal slot-wise drafter from its generator alone. The first world's families leave
it no room (its argmax is its oracle: every answer token sits at a known distance), the drift world's `drift` does
(and setting 3's `capslock`) — top-1 falls with depth while top-8 keeps the answer, so the reachable oracle is far above
the argmax —, `pairfill`'s first marks are the T=1 room; and the first world's vocabulary (its trained target's token ids) is unchanged by the
families added after it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from draftlab.toy.ideal import ideal_properties
from draftlab.toy.tasks import FamilySpec, WorldConfig
from draftlab.toy.tokenizer import vocabulary

ROOT = Path(__file__).resolve().parents[2]


def preset_world(name: str) -> WorldConfig:
    return WorldConfig.from_dict(yaml.safe_load((ROOT / "conf" / "target" / f"{name}.yaml").read_text())["toy"]["world"])


def test_the_first_world_leaves_the_ideal_drafter_no_room():
    ideal = ideal_properties(preset_world("toy"), n=24)
    for fam, d in ideal["families"].items():
        assert d["tau_argmax"] == pytest.approx(d["tau_oracle"]), fam
        assert min(d["top1"].values()) == 1.0, fam


def holds_below_first_place(d: dict) -> None:
    top1, top8 = d["top1"], d["top8"]
    assert top1[1] - top1[8] >= 0.2  # the bar's drop from slot 1 to slot 8
    assert top8[4] - top1[4] >= 0.2 and top8[8] - top1[8] >= top8[4] - top1[4] + 0.05  # a gap from slot 4, widening
    assert d["tau_oracle"] / d["tau_argmax"] >= 1.3 and d["tau_oracle"] - d["tau_argmax"] >= 1.0


def test_capslock_holds_the_answer_second_when_a_toggle_lies_between():
    """Setting 3's family: the letter is always in the top two (its two cases), first at slot 1 (the anchor's case and
    the slot's own toggle decide it) and ever more rarely with depth (the parity of the toggles in between)."""
    d = ideal_properties(WorldConfig(families=(FamilySpec("capslock", 1.0, (56, 64), (6, 18)),)),
                         n=48)["families"]["capslock"]
    holds_below_first_place(d)
    assert d["top1"][1] == 1.0 and min(d["top8"].values()) == 1.0
    assert 0.5 <= min(d["top1"].values()) < 0.55  # deep slots: a coin between the two cases


def test_drift_holds_the_answer_below_first_place_increasingly_with_depth():
    ideal = ideal_properties(preset_world("drift"), n=48)
    holds_below_first_place(ideal["families"]["drift"])
    p = ideal["families"]["pairfill"]
    assert p["tau_argmax"] == pytest.approx(p["tau_oracle"])  # at T=0 its marks are all `+`: no room there
    assert ideal["high_entropy_share"] >= 0.2 and ideal["pair_break_t1"] == pytest.approx(0.42)


@pytest.mark.parametrize("family", ["drift", "capslock"])
def test_no_drift_no_room(family):
    """The same family with no marks (no toggles) is a plain copy: the ideal drafter is then always right."""
    flat = WorldConfig(families=(FamilySpec(family, 1.0, (48, 50), (0, 0)),))
    d = ideal_properties(flat, n=8)["families"][family]
    assert d["tau_argmax"] == pytest.approx(d["tau_oracle"]) and min(d["top1"].values()) == 1.0


def test_the_first_worlds_vocabulary_is_its_trained_targets():
    """A family added after the first world appends its word in the worlds that use it only: the committed target's
    tokenizer (trained before drift, capslock and pairfill existed) still has exactly the first world's vocabulary."""
    committed = next((ROOT / "worlds" / "toy" / "replicates").glob("*/base/target/tokenizer.json"))
    ids = json.loads(committed.read_text())["model"]["vocab"]
    assert vocabulary(preset_world("toy")) == sorted(ids, key=ids.get)
    drift = vocabulary(preset_world("drift"))
    assert drift[:len(ids)] == vocabulary(preset_world("toy"))[:len(ids)] and drift[-2:] == ["drift", "pairfill"]
