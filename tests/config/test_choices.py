"""Config values as users type them (issue 49, item 2): YAML reads an unquoted on/off, yes/no, true/false as a
boolean, so `-S engine.compile=off` arrived as False and was refused ('False' is not valid). Every key with named
choices that include such a word takes the boolean and holds the choice set's own word; a bad value is still one
line naming the key and the choices."""
from __future__ import annotations

import importlib
import pkgutil

import pytest

from draftlab.errors import ConfigError
from draftlab.params import build_params, compose_params, load_params

OFF, ON = ("off", "OFF", "no", "false", "False", "'off'"), ("on", "On", "yes", "true", "'on'")


@pytest.mark.parametrize("typed,want", [*((t, "off") for t in OFF), *((t, "on") for t in ON), ("auto", "auto")])
def test_engine_compile_as_typed_in_a_dvc_style_override(root, typed, want):
    raw = compose_params([f"engine.compile={typed}"], root / "conf", strict=True)  # what `dvc exp run -S` composes
    assert build_params(raw).engine.compile == want
    assert load_params(root / "params.yaml", [f"engine.compile={typed}"]).engine.compile == want


def test_the_console_and_the_offline_runner_take_it(root, monkeypatch, capsys):
    from draftlab import cli
    from draftlab.offline.runner import compose

    monkeypatch.chdir(root)
    assert cli.main(["check", "-S", "engine.compile=off"]) == 0, capsys.readouterr().err
    assert "ok:" in capsys.readouterr().out
    assert compose("gpu-small", True, ["engine.compile=off"])[0].engine.compile == "off"  # tools/gpu_run.py -S


@pytest.mark.parametrize("override,needles", [
    ("engine.compile=maybe", ("engine.compile='maybe' is not valid", "auto, off, on")),
    ("target.linear=off", ("target.linear='False' is not valid", "boolean", "auto, torch")),
])
def test_a_bad_choice_is_one_line_naming_the_key_and_choices(root, override, needles):
    with pytest.raises(ConfigError) as e:
        load_params(root / "params.yaml", [override])
    msg = str(e.value)
    assert "\n" not in msg and all(n in msg for n in needles), msg


def test_every_key_whose_choices_hold_a_boolean_word_takes_the_boolean(root, monkeypatch):
    """Records every `_choice` call of the config sections while params.yaml validates, then sets each key whose
    choice set holds on/off, yes/no or true/false as YAML's True / False: the section must hold the set's word."""
    import draftlab.config as C
    from draftlab.config import checks

    seen: dict[str, tuple] = {}
    real = checks._choice

    def record(key, value, choices):
        seen.setdefault(key, tuple(choices))
        return real(key, value, choices)

    for m in pkgutil.iter_modules(C.__path__):
        mod = importlib.import_module(f"draftlab.config.{m.name}")
        if getattr(mod, "_choice", None) is real:
            monkeypatch.setattr(mod, "_choice", record)
    load_params(root / "params.yaml")
    words = {True: ("on", "true", "yes"), False: ("off", "false", "no")}
    boolean_keys = {k: c for k, c in seen.items() if any(w in c for ws in words.values() for w in ws)}
    assert "engine.compile" in boolean_keys and len(seen) > 20
    for key, choices in boolean_keys.items():
        assert not key.endswith("[]"), f"{key}: a list of choices with a boolean word; map its items too"
        for truth, ws in words.items():
            want = next((w for w in ws if w in choices), None)
            if want is None:
                continue
            obj = load_params(root / "params.yaml", [f"{key}={'true' if truth else 'false'}"])
            for part in key.split("."):
                obj = getattr(obj, part)
            assert obj == want, (key, truth, obj)
