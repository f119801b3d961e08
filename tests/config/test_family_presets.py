"""A corrector family's preset travels with its module (draftlab.params.with_family_presets): composing with
`corrector.family_modules` naming a module fills in the keys of `<module>.yaml` beside it that conf/ and the overrides
leave unset; a module that cannot be found, or a preset that is not a mapping, is one line."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from draftlab.errors import ConfigError
from draftlab.params import compose_params, with_family_presets

ROOT = Path(__file__).resolve().parents[2]
BASE = ["target=tiny-random", "profile=smoke", "method=plain", "benchmark/arms=two", "drafter.draft_vocab_size=0"]


@pytest.fixture()
def packages(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "examples" / "families"))


def test_compose_fills_in_the_preset_of_a_named_family(packages):
    named = [*BASE, "corrector.family_modules=[lastrank.lastrank]"]
    raw = compose_params([*named, "corrector.variants=[lastrank]"], ROOT / "conf")
    preset = yaml.safe_load((ROOT / "examples/families/lastrank/lastrank.yaml").read_text())["corrector"]
    assert raw["corrector"]["families"]["lastrank"] == preset["families"]["lastrank"]
    assert raw["corrector"]["variant_steps"]["lastrank"] == preset["variant_steps"]["lastrank"]
    raw = compose_params(named, ROOT / "conf")  # its variant not trained: its settings, but no step budget
    assert raw["corrector"]["families"]["lastrank"] and "lastrank" not in raw["corrector"]["variant_steps"]
    raw = compose_params([*named, "corrector.variants=[lastrank]", "corrector.variant_steps.lastrank=3"], ROOT / "conf")
    assert raw["corrector"]["variant_steps"]["lastrank"] == 3  # an override wins over the preset
    assert "lastrank" not in compose_params(BASE, ROOT / "conf")["corrector"]["families"]  # not named: not filled


def test_bad_family_modules_and_presets_are_one_line(packages, tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="'nowhere.fam', which cannot be found .*PYTHONPATH"):
        with_family_presets({"corrector": {"family_modules": ["nowhere.fam"]}})
    pkg = tmp_path / "badpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "fam.py").write_text("")
    (pkg / "fam.yaml").write_text("- a list\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match="fam.yaml: the preset of family module 'badpkg.fam' must be a mapping"):
        with_family_presets({"corrector": {"family_modules": ["badpkg.fam"]}})
    (pkg / "fam.yaml").write_text("corrector: {families: [\n")
    with pytest.raises(ConfigError, match="is not valid YAML"):
        with_family_presets({"corrector": {"family_modules": ["badpkg.fam"]}})
