"""Corrector variant budgets (issue 21, item 4): the main arms (the main variant and the sequential baselines)
train on the section's budget, the ablations on `variant_max_minutes` and `variant_budget_fraction` of its steps
and epochs; the cpu profile's budgets are the ones of the rule before the fraction existed; bad values are one line."""
from __future__ import annotations

import pytest

from draftlab.corrector.families import family_of, variant_table
from draftlab.errors import ConfigError
from draftlab.params import build_params, compose_params
from draftlab.recipes.corrector.recipe import variant_view


def _views(params):
    c = params.corrector
    main = "dcoco" if "dcoco" in c.variants else c.variants[0]
    return main, {v: variant_view(c, params.pretrain, v, main, c.k) for v in variant_table()}


def test_gpu_profile_ablations_get_the_stated_fraction(root):
    gpu = build_params(compose_params(["profile=gpu"], root / "conf"))
    c = gpu.corrector
    assert 0 < c.variant_budget_fraction < 1 and c.epochs > 0  # the profile states an epoch budget and a fraction
    main, views = _views(gpu)
    for v, (role, view) in views.items():
        if v == main or family_of(v).budget == "main":
            assert role == "main" and view.epochs == c.epochs and view.max_minutes == c.max_minutes, v
        else:
            assert role == "ablation" and view.epochs == pytest.approx(c.epochs * c.variant_budget_fraction), v
            assert view.max_steps == 0 and view.max_minutes == 0.0, v  # no other limit appears
    assert {v for v, (r, _) in views.items() if r == "main"} == {"dcoco", "dspark", "domino", "dflash2", "lilicorr",
                                                                "lilicorr-nopair", "lilicorr-frozen"}
    assert {"nopair", "nocand", "frozen", "specopd-dcoco", "specopd-dcoco-t1"} <= {
        v for v, (r, _) in views.items() if r == "ablation"}


def test_cpu_profile_budgets_are_unchanged(root):
    """The rule before the fraction: main arms max_minutes, every other variant variant_max_minutes (0 = the full
    budget), the section's steps and epochs for all: the same run settings, field for field."""
    cpu = build_params(compose_params(["profile=cpu"], root / "conf"))
    c = cpu.corrector
    assert c.variant_budget_fraction == 1.0
    main, views = _views(cpu)
    for v, (role, view) in views.items():
        full = v == main or family_of(v).budget == "main" or not c.variant_max_minutes
        old = c.run_settings(cpu.pretrain, c.max_minutes if full else c.variant_max_minutes, k=c.k)
        assert view == old, v


def test_step_budgets_scale_and_stay_limited(root):
    p = build_params(compose_params(["profile=cpu", "corrector.max_steps=10", "corrector.variant_budget_fraction=0.25",
                                     "corrector.variant_max_minutes=0", "corrector.epochs=2"], root / "conf"))
    c = p.corrector
    assert c.variant_budget(True) == {"max_minutes": c.max_minutes, "max_steps": 10, "epochs": 2.0}
    assert c.variant_budget(False) == {"max_minutes": c.max_minutes * 0.25, "max_steps": 3, "epochs": 0.5}
    tiny = build_params(compose_params(["profile=cpu", "corrector.max_steps=1", "corrector.variant_budget_fraction=0.1"],
                                       root / "conf")).corrector
    assert tiny.variant_budget(False)["max_steps"] == 1  # a step limit never becomes 0 (= no limit)


@pytest.mark.parametrize("value", ["0", "1.5", "-0.25"])
def test_bad_fraction_is_one_line(root, value):
    with pytest.raises(ConfigError, match=r"^corrector.variant_budget_fraction=.* must lie in \(0, 1\]") as e:
        build_params(compose_params([f"corrector.variant_budget_fraction={value}"], root / "conf"))
    assert "\n" not in str(e.value)


def test_the_toy_profile_trains_every_variant_on_a_step_budget(root, monkeypatch):
    """A verdict reads the model, so the toy world's correctors train on the updates the frozen run made in its minutes
    (corrector.variant_steps): a loaded machine changes their time, not their models; the plan counts those steps."""
    from draftlab.plan import stages as plan_stages

    from draftlab.pipeline.names import method_names

    monkeypatch.chdir(root / "worlds" / "toy")  # the world's prompt files are relative to its folder
    toy = build_params(compose_params(["profile=toy"], root / "conf"), names=method_names())
    c = toy.corrector
    assert set(c.variant_steps) == set(c.variants) and c.variant_steps["dcoco"] == 592 and c.variant_steps["dspark"] == 2520
    main, views = _views(toy)
    for v in c.variants:
        _, view = views[v]
        assert view.max_steps == c.variant_steps[v] and view.max_minutes == 0.0 and view.epochs == 0.0, v
    assert toy.pretrain.max_steps == 2878 and toy.pretrain.max_minutes == 0.0
    assert toy.specopd.max_steps == 60 and toy.specopd.max_minutes == 0.0
    notes = " ".join(plan_stages.corrector(toy, *_shape_and_device(toy)).notes)
    assert "dspark: ~2520 steps" in notes and "dflash-long: ~592 steps" in notes


def _shape_and_device(params):
    from draftlab.plan.arch import target_shape
    from draftlab.plan.stages import PRESETS

    return target_shape(params.target), PRESETS["cpu"]


@pytest.mark.parametrize("steps, msg", [({"nope": 5}, "not a variant of corrector.variants"),
                                        ({"dcoco": 0}, "whole number of updates >= 1"),
                                        ({"dcoco": 2.5}, r"variant_steps.dcoco=2.5 is not valid: .*takes a whole number")])
def test_a_bad_step_budget_is_one_line(root, monkeypatch, steps, msg):
    import json

    monkeypatch.chdir(root / "worlds" / "toy")
    with pytest.raises(ConfigError, match=msg):
        build_params(compose_params(["profile=toy", f"+corrector.variant_steps={json.dumps(steps)}"
                                     .replace('"', "")], root / "conf"))
