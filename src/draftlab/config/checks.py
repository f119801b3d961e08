"""The small validators every config section uses: each raises a one-line `ConfigError` naming the key."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Collection, Mapping, Sequence

from draftlab.errors import ConfigError


@dataclass(frozen=True)
class MethodNames:
    """The method packages' name tables, which the configuration checks but does not own: the caller hands them in
    (draftlab.pipeline.names.method_names(): the corrector's families, SpecOPD's baselines), as it hands in the arm
    names, so this layer imports no method. Empty = not checked.

    `families(family_modules)` -> {name: record}: the corrector family records (draftlab.corrector.family.Family:
    `.variants`, `.config` = its settings' dataclass), the built-in ones and those of the extra modules the params
    name; the corrector section checks its variants and each family's settings against them. `variants`: the variant
    names where no records are handed in."""
    variants: Collection[str] = ()
    baselines: Collection[str] = ()
    families: Callable[[Sequence[str]], Mapping[str, Any]] | None = None


# YAML 1.1 (OmegaConf, `-S key=value`, an unquoted params.yaml value) reads on/off, yes/no, true/false (any case) as a
# boolean, and a str field then holds 'True' / 'False': which spelling the user typed is gone, so each boolean maps to
# the spelling a choice set has for it
_BOOLEAN_SPELLINGS = {True: ("on", "true", "yes"), False: ("off", "false", "no")}


def _choice(key: str, value: Any, choices: tuple) -> Any:
    """`value` as one of `choices`, canonical: a YAML boolean (True / False, or 'True' / 'False' once OmegaConf has put
    it in a str field) becomes the choice set's own word for it (on/off, true/false or yes/no), so `-S
    engine.compile=off` means 'off'. Callers assign the result (`self.x = _choice(...)`). Anything else not among the
    choices is one line naming the key and the choices."""
    if value not in choices and (isinstance(value, bool) or value in ("True", "False")):
        truth = value is True or value == "True"
        value = next((w for w in _BOOLEAN_SPELLINGS[truth] if w in choices), value)
        if value not in choices:
            raise ConfigError(f"{key}={value!r} is not valid (YAML reads an unquoted on/off/yes/no/true/false as a "
                              f"boolean); choose one of: {', '.join(map(str, choices))}")
    if value not in choices:
        raise ConfigError(f"{key}={value!r} is not valid; choose one of: {', '.join(map(str, choices))}")
    return value


def _positive(key: str, value: float, allow_zero: bool = False) -> None:
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(f"{key}={value!r} must be {'>= 0' if allow_zero else '> 0'}")


def _unit(key: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"{key}={value!r} must lie in [0, 1]")


def parts(obj: Any, *kinds: type) -> dict[str, Any]:
    """The values of `obj` for the fields that the part classes `kinds` declare (e.g. parts(cfg, Optim))."""
    return {f.name: getattr(obj, f.name) for k in kinds for f in dataclasses.fields(k)}


def section(key: str, cls: type, given: Any) -> Any:
    """A settings dataclass `cls` from the mapping the params gave under `key` (None: its defaults; an instance
    stays): an unknown key, or a value of another type than its default's, is one line naming the key; then
    `cls.check(key)` where it has one."""
    if isinstance(given, cls):
        out = given
    else:
        given = dict(given or {})
        known = {f.name: f for f in dataclasses.fields(cls)}
        for k, v in given.items():
            if k not in known:
                raise ConfigError(f"unknown key '{key}.{k}'; valid keys in {key}: {', '.join(known)}")
            f = known[k]
            default = f.default if f.default is not dataclasses.MISSING else None
            if isinstance(default, bool) and isinstance(v, str) and v in ("True", "False"):
                given[k] = v = v == "True"
            if isinstance(default, float) and isinstance(v, int) and not isinstance(v, bool):
                given[k] = v = float(v)
            if default is not None and type(v) is not type(default):
                raise ConfigError(f"{key}.{k}={v!r} must be a {type(default).__name__}")
        out = cls(**given)
    if hasattr(out, "check"):
        out.check(key)
    return out


KERNEL_BACKENDS = ("auto", "torch", "triton")  # auto = Triton on CUDA, the torch reference elsewhere
PRECISIONS = ("auto", "32-true", "bf16-mixed", "16-mixed")


def check_suite(key: str, name: str, packaged: Collection[str], local: dict[str, str]) -> None:
    """`name` is a packaged suite of `packaged` or a local suite of data.local_suites."""
    if name in packaged or name in local:
        return
    mine = ", ".join(local) or "none"
    raise ConfigError(f"{key} names unknown suite '{name}'; packaged: {', '.join(packaged)}; local (data.local_suites): "
                      f"{mine}; add your own file with data.local_suites.{name}=path/to/prompts.jsonl")
