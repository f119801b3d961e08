"""The regrouped conf/ (one group per concern: profile = sizes and budgets, recipe/, method/, trainer/,
benchmark/arms|ablations|size) gives every profile the effective values it had before (code defaults included):
tests/fixtures/effective_params.json holds them as composed by the conf/ of commit 696d3c4, for every profile with
the default target and for cpu and gpu with every target (docs/config-keys.md maps each old key to where it is set
now). A change of a value in conf/ that is meant shows up here: regenerate the fixture in the same commit, and say
why in its message."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from draftlab.params import build_params, compose_params, to_dict

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "effective_params.json"
BEFORE = json.loads(FIXTURE.read_text())
# keys renamed since the fixture, old -> new (each value kept): the corrector section's family settings moved under
# corrector.families.<family> (issue 52 item 2; the sequential correctors' shared seq_rank became each one's rank)
D = "corrector.families."
RENAMED = {"corrector.dim": (D + "dcoco.dim",), "corrector.hidden": (D + "dcoco.hidden",),
           "corrector.path_rule": (D + "dcoco.path_rule",), "corrector.lam": (D + "dcoco.lam",),
           "corrector.seq_rank": (D + "dspark.rank", D + "domino.rank", D + "dflash2.rank"),
           "corrector.seq_gate": (D + "dspark.gate",)}
# keys new since the fixture, with their values: a family added since (LiLiCorr, issue 54) brings its default settings
# (issue 64: corrector.labels, the corrector loss's labels, greedy as before; issue 65: the decoding processes'
# OpenMP wait policy and threads, engine.omp_wait_policy / engine.threads)
ADDED = {"corrector.family_modules": [], "corrector.variant_steps": {}, "corrector.labels": "greedy",
         "engine.omp_wait_policy": "active", "engine.threads": 0,
         D + "lilicorr": {"width": 128, "factor_dim": 128, "layers": 2, "heads": 4, "scale": 8.0, "preset": "nopen",
                          "w_ce": 0.125, "w_margin": 0.125, "w_pen": 0.0, "margin": 2.0}}

# values changed on purpose since the fixture, per profile/target: key -> new value (each with its reason)
CHANGED = {
    # issue 64: the smoke run decodes a corrector's sampled walk too (dcoco-sampled-seeded)
    "smoke/smollm2-135m": {"benchmark.arms": ["ar", "dflash", "dflash-seeded", "dflash-specopd-seeded", "dcoco-seeded",
                                              "dcoco-sampled-seeded", "dspark-seeded", "domino-seeded",
                                              "dflash2-seeded", "pld", "dflash-pld", "hf-generate", "hf-generate-pld"]},
    # issue 54's verdict: the toy world co-trains LiLiCorr and its -pair ablation beside the other correctors
    "toy/toy": {"corrector.variants": ["dcoco", "nopair", "nocand", "frozen", "specopd-dcoco", "specopd-dcoco-t1",
                                       "dspark", "domino", "dflash2", "lilicorr", "lilicorr-nopair"],
                # issue 61: step budgets where a verdict reads the model (the frozen run's update counts; the target's
                # 3,569 steps with no wall-clock cap), and LiLiCorr's arms in the benchmark (a labelled addition)
                "corrector.variant_steps": {"dcoco": 592, "nopair": 155, "nocand": 155, "frozen": 176,
                                            "specopd-dcoco": 153, "specopd-dcoco-t1": 151, "dspark": 2520,
                                            "domino": 2075, "dflash2": 2324, "lilicorr": 184, "lilicorr-nopair": 183},
                "pretrain.max_steps": 2878, "pretrain.max_minutes": 0.0,
                "seeded.pretrain.max_steps": 695, "seeded.pretrain.max_minutes": 0.0,
                "specopd.max_minutes": 0.0, "target.toy.train.max_steps": 3569, "target.toy.train.budget_s": 0,
                "benchmark.arms": ["ar", "pld", "dflash", "dflash-pld", "dcoco", "dspark", "domino", "dflash2",
                                   "dflash-specopd", "dflash-seeded", "dflash-seeded-cut", "lilicorr"],
                "benchmark.ablation_arms": ["dflash-long", "dcoco-globalsum", "dcoco-geometric", "dcoco-nopair",
                                            "dcoco-nocand", "dcoco-frozen", "specopd-dcoco", "lilicorr-nopair"],
                "benchmark.pairs": [["dflash", "ar"], ["dcoco", "dflash"], ["dspark", "dcoco"], ["domino", "dcoco"],
                                    ["dflash2", "dcoco"], ["dcoco-globalsum", "dcoco"], ["dcoco-geometric", "dcoco"],
                                    ["dcoco-nopair", "dcoco"], ["dcoco-nocand", "dcoco"], ["dcoco-frozen", "dcoco"],
                                    ["dflash-specopd", "dflash"], ["dflash-seeded", "dflash"],
                                    ["dflash-seeded-cut", "pld"], ["dflash-pld", "pld"], ["lilicorr", "dcoco"],
                                    ["lilicorr", "dflash"], ["lilicorr-nopair", "lilicorr"]]},
}


def renamed(want: dict, combo: str = "") -> dict:
    """The fixture's values under today's keys (and the values changed on purpose since, for `combo`)."""
    out = json.loads(json.dumps(want))
    for old, new in RENAMED.items():
        sec, key = old.split(".")
        value = out[sec].pop(key)
        for n in new:
            node = out
            for part in n.split(".")[:-1]:
                node = node.setdefault(part, {})
            node[n.split(".")[-1]] = value
    for k, v in [*ADDED.items(), *CHANGED.get(combo, {}).items()]:
        *path, key = k.split(".")
        node = out
        for part in path:
            node = node.setdefault(part, {})
        node[key] = v
    return out


def differences(want: dict, got: dict, prefix: str = "") -> list[str]:
    out = []
    for k in sorted(set(want) | set(got)):
        a, b = want.get(k, "<absent>"), got.get(k, "<absent>")
        if isinstance(a, dict) and isinstance(b, dict):
            out += differences(a, b, f"{prefix}{k}.")
        elif a != b:
            out.append(f"{prefix}{k}: {a!r} -> {b!r}")
    return out


@pytest.mark.parametrize("combo", sorted(BEFORE))
def test_every_profile_keeps_its_effective_values(root, combo, monkeypatch):
    profile, target = combo.split("/")
    if (root / "worlds" / profile).is_dir():  # a world's profile names its prompt files inside its own folder
        monkeypatch.chdir(root / "worlds" / profile)
    from draftlab.pipeline.names import method_names  # the family records type each family's settings

    got = to_dict(build_params(compose_params([f"target={target}", f"profile={profile}"], root / "conf"),
                               names=method_names()))
    want = renamed(BEFORE[combo], combo)
    assert not differences(want, got), differences(want, got)


# profiles new since the fixture (no earlier values to keep): name -> why
NEW_PROFILES = {"drift": "the second toy world (docs/drift-world.md), 2026-12-06"}


def test_every_profile_is_in_the_fixture(root):
    profiles = {p.stem for p in (root / "conf" / "profile").glob("*.yaml")}
    assert profiles - set(NEW_PROFILES) == {c.split("/")[0] for c in BEFORE}
    assert set(NEW_PROFILES) <= profiles


def test_the_comparison_can_fail():
    assert differences({"a": {"b": 1, "c": [1]}}, {"a": {"b": 2, "c": [1]}, "d": 0}) == ["a.b: 1 -> 2", "d: '<absent>' -> 0"]


def test_the_groups_are_one_per_concern_and_each_profile_picks_existing_presets(root):
    import yaml

    from draftlab.config.sections import WORLD_PROFILES
    from draftlab.params import groups

    conf = root / "conf"
    assert groups(conf) == ("benchmark/ablations", "benchmark/arms", "benchmark/size", "method", "profile", "recipe",
                            "target", "trainer")
    for path in (conf / "profile").glob("*.yaml"):
        picks = [next(iter(e.items())) for e in yaml.safe_load(path.read_text())["defaults"]]
        chosen = {g.removeprefix("override /") for g, _ in picks}
        # every profile picks these four; only a world's profile (toy, drift) also picks its own target
        assert chosen - {"target"} == {"recipe", "method", "benchmark/arms", "benchmark/size"}, path.name
        assert ("target" in chosen) == (path.stem in WORLD_PROFILES), path.name
        for g, option in picks:
            assert (conf / g.removeprefix("override /") / f"{option}.yaml").exists(), (path.name, g, option)


def test_a_group_picked_inside_a_preset_is_one_line(root):
    from draftlab.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^benchmark/ablations is picked inside the benchmark/arms preset: write "
                                          r"benchmark/ablations@benchmark=none$"):
        compose_params(["benchmark/ablations=none"], root / "conf")
    with pytest.raises(ConfigError, match=r"is not a preset; choose one of: none, paper, smoke$"):
        compose_params(["benchmark/ablations@benchmark=nosuch"], root / "conf")
    assert compose_params(["benchmark/arms=two", "benchmark/ablations@benchmark=smoke"],
                          root / "conf")["benchmark"]["ablation_arms"][0] == "dflash-long-seeded"
