"""Loading, validating and composing params.yaml (OmegaConf / Hydra live here and nowhere else).

`load_params(path, overrides)` merges params.yaml (and optional `a.b=c` overrides) onto the typed
schema of `draftlab.config`, so an unknown key, a wrong type or an impossible value fails with one
line (`ConfigError`) naming the key and what is allowed; rules across sections follow
(`Params.check_across`), and arm names are checked against the arm table when the caller passes its
names (`arms=draftlab.arms.grammar.arm_names()`: the benchmark layer sits above this one), and the
method sections' names against the methods' tables when it passes them (`names=draftlab.pipeline.names
.method_names()`: the configuration imports no method).
`compose_params()` composes the presets in conf/ with Hydra (one group per concern: target/, profile/,
recipe/, method/, trainer/, benchmark/arms|ablations|size/) and fills in the presets of the corrector family modules it
names (`with_family_presets`: `<module>.yaml` beside an outside family's module), `compose_text()` renders it as
params.yaml. `draftlab compose
target=X profile=Y` prints that text (`make params`); the console script (`draftlab check`,
`draftlab compose`, ...) lives in `draftlab.cli`, which adds the arm names.
"""
from __future__ import annotations

import dataclasses
import difflib
from pathlib import Path
from typing import Any, Collection

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

from draftlab import paths
from draftlab.config import MethodNames, Params
from draftlab.errors import ConfigError


def path_resolver(name: str) -> str:
    """`${path:NAME}` in a conf/ preset: draftlab.paths.NAME, so a preset names a pipeline folder without spelling it
    (params.yaml holds the resolved path: the composition's text is what it was when the preset spelled it)."""
    value = getattr(paths, name, None)
    if not name.isupper() or not isinstance(value, str):
        known = ", ".join(k for k, v in vars(paths).items() if k.isupper() and isinstance(v, str))
        raise ConfigError(f"${{path:{name}}}: draftlab.paths names no path {name!r}; one of: {known}")
    return value


def register_resolvers() -> None:
    """Register `${path:NAME}` with OmegaConf, once per process: composing conf/ needs it, here and in DVC's own
    composition (`dvc exp run -S ...`, which loads hydra_plugins/draftlab_resolvers.py from the repository root)."""
    if not OmegaConf.has_resolver("path"):
        OmegaConf.register_new_resolver("path", path_resolver)


register_resolvers()

# ----------------------------------------------------------------------------------------------
# loading


def _schema_keys(node: Any) -> list[str]:
    return [f.name for f in dataclasses.fields(node)] if dataclasses.is_dataclass(node) else []


# keys that moved (the corrector families' own settings, 2026-12-06): an old spelling names its new place
MOVED = {
    "corrector.dim": "corrector.families.dcoco.dim",
    "corrector.hidden": "corrector.families.dcoco.hidden",
    "corrector.path_rule": "corrector.families.dcoco.path_rule",
    "corrector.lam": "corrector.families.dcoco.lam",
    "corrector.seq_rank": "corrector.families.dspark.rank, corrector.families.domino.rank and corrector.families.dflash2.rank",
    "corrector.seq_gate": "corrector.families.dspark.gate",
}


def _unknown_key_message(schema: Any, dotted: str) -> str:
    for old, new in MOVED.items():
        if dotted == old or dotted.endswith("." + old):
            return f"'{dotted}' has moved: it is now {new} (each corrector family has its own settings)"
    node, parts = schema, dotted.split(".")
    for i, part in enumerate(parts):
        keys = _schema_keys(node)
        if part not in keys:
            where = ".".join(parts[:i]) or "params"
            near = difflib.get_close_matches(part, keys, n=1)
            hint = f" (did you mean '{near[0]}'?)" if near else ""
            return f"unknown key '{'.'.join(parts[: i + 1])}'{hint}; valid keys in {where}: {', '.join(keys)}"
        node = getattr(node, part)
    return f"unknown key '{dotted}'"


def _open_dicts(node: DictConfig) -> None:
    """Let dict-valued fields (e.g. data.local_suites: name -> file) take new keys; sections stay closed."""
    for key in node.keys():
        child = node._get_node(key)
        if isinstance(child, DictConfig):
            if OmegaConf.get_type(child) is dict:
                OmegaConf.set_struct(child, False)
            else:
                _open_dicts(child)


def _in_schema(schema: Any, dotted: str) -> bool:
    """Whether the schema has the key `a.b.c` (any key below a dict-valued field counts)."""
    node = schema
    for part in dotted.split("."):
        if isinstance(node, dict):
            return True
        if part not in _schema_keys(node):
            return False
        node = getattr(node, part)
    return True


def _walk_check(obj: Any, prefix: str) -> None:
    """Call each section's `check(prefix)`; sections without one are searched for sub-sections."""
    if hasattr(obj, "check"):
        obj.check(prefix)
        return
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if dataclasses.is_dataclass(v):
            _walk_check(v, f"{prefix}.{f.name}" if prefix else f.name)


def build_params(raw: dict | DictConfig, overrides: list[str] | None = None, schema: type = Params,
                 arms: Collection[str] | None = None, names: MethodNames | None = None) -> Any:
    """Merge raw values (and `a.b=c` overrides) onto the schema; validate (each section, then the rules
    across sections, then the methods' names when `names` is given, then arm names when `arms` is given);
    return typed dataclasses."""
    base = OmegaConf.structured(schema)
    OmegaConf.set_struct(base, True)
    _open_dicts(base)
    try:
        merged = OmegaConf.merge(base, raw)
        if overrides:
            for ov in overrides:
                if "=" not in ov:
                    raise ConfigError(f"override {ov!r} must look like section.key=value")
            merged = OmegaConf.merge(merged, OmegaConf.from_dotlist(list(overrides)))
        obj = OmegaConf.to_object(merged)
    except ConfigKeyError as e:
        key = getattr(e, "full_key", None) or str(e)
        raise ConfigError(_unknown_key_message(schema(), key)) from None
    except ValidationError as e:
        key = getattr(e, "full_key", "?")
        msg = str(e).splitlines()[0]
        if "is not a ListConfig" in msg:  # `benchmark.arms=ar`: a scalar where the schema has a list
            given = next((ov.split("=", 1)[1] for ov in overrides or [] if ov.split("=", 1)[0] == key), None)
            if given is None:
                given = OmegaConf.select(OmegaConf.create(raw), key, default="...") if isinstance(raw, (dict, DictConfig)) else "..."
            raise ConfigError(f"{key} takes a list: write {key}=[{given}] (several: {key}=[a,b])") from None
        given = next((ov.split("=", 1)[1] for ov in overrides or [] if ov.split("=", 1)[0] == key), None)
        raise ConfigError(_value_message(key, msg, given)) from None
    except OmegaConfBaseException as e:
        raise ConfigError(str(e).splitlines()[0]) from None
    _walk_check(obj, "")
    if hasattr(obj, "check_across"):
        obj.check_across()
    if names is not None and hasattr(obj, "check_names"):
        obj.check_names(names)
    if arms is not None and hasattr(obj, "check_arms"):
        obj.check_arms(list(arms))
    return obj


# what a schema field takes, in the words of a line a user reads (OmegaConf's type names never reach them)
KINDS = {"str": "text (write '' for none)", "float": "a number", "Float": "a number", "int": "a whole number",
         "Integer": "a whole number", "bool": "true or false", "Boolean": "true or false"}


def _value_message(key: str, msg: str, given: str | None) -> str:
    """One line for a value the schema refuses (OmegaConf's ValidationError `msg`): the key, the value given, what the
    key takes."""
    import re

    m = re.search(r"Incompatible value '(.*)' for field of type '(\w+)'", msg) or \
        re.search(r"Value '(.*)' of type '\w+' could not be converted to (\w+)", msg)
    if m is None:
        return f"{key}: the value is not one this key takes ({msg.split(':')[0]})"
    value = given if given is not None else "null" if m.group(1) == "None" else m.group(1)
    return f"{key}={value} is not valid: {key} takes {KINDS.get(m.group(2), m.group(2))}"


def load_params(path: str | Path = "params.yaml", overrides: list[str] | None = None,
                arms: Collection[str] | None = None, names: MethodNames | None = None) -> Params:
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path.resolve()} not found; run where a run's params.yaml is (the repository root, a world's "
                          f"folder, or --root FOLDER) or compose it: draftlab compose > params.yaml")
    try:
        raw = OmegaConf.load(path)
    except Exception as e:  # yaml syntax error: name the line (PyYAML's mark is 0-based)
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        what = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{where}: not valid YAML ({what}); fix that line, or recompose the file: "
                          f"draftlab compose > params.yaml") from None
    return build_params(raw, overrides, arms=arms, names=names)


def to_dict(params: Any) -> dict:
    return OmegaConf.to_container(OmegaConf.structured(params), resolve=True)  # type: ignore[return-value]


def to_yaml(raw: dict) -> str:
    return OmegaConf.to_yaml(OmegaConf.create(raw))


def flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    """{'a': {'b': 1}} -> {'a.b': 1} (for MLflow params)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


# ----------------------------------------------------------------------------------------------
# Hydra composition of presets


# groups a preset of another group picks (Hydra then names them with their package: benchmark/ablations@benchmark)
NESTED = {"benchmark/ablations": "benchmark/arms"}


def groups(conf_dir: str | Path) -> tuple[str, ...]:
    """The config groups under conf/: every folder that holds presets (target, profile, recipe, method, trainer,
    benchmark/arms, benchmark/ablations, benchmark/size)."""
    conf_dir = Path(conf_dir)
    return tuple(sorted(str(d.relative_to(conf_dir)) for d in conf_dir.rglob("*")
                        if d.is_dir() and any(d.glob("*.yaml"))))


def _key_override(ov: str) -> tuple[str, str, str]:
    """'+a.b=c' -> ('+', 'a.b', 'c'); '~a.b' -> ('~', 'a.b', ''); Hydra's prefixes for adding / deleting."""
    prefix = "++" if ov.startswith("++") else ov[:1] if ov[:1] in "+~" else ""
    key, _, value = ov[len(prefix):].partition("=")
    return prefix, key, value


def compose_params(overrides: list[str] | None = None, conf_dir: str | Path = "conf",
                   arms: Collection[str] | None = None, strict: bool = False, names: MethodNames | None = None) -> dict:
    """Compose conf/config.yaml with Hydra (`target=qwen3-4b profile=smoke key=value`), validated.
    `strict`: apply Hydra's rules for keys as `dvc exp run -S` does (a key that the composed presets do
    not hold needs `+key=value`; one they hold must not have the `+`), each as one line."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException

    conf_dir = Path(conf_dir).resolve()
    if not (conf_dir / "config.yaml").is_file():
        raise ConfigError(f"no presets folder {conf_dir} (its config.yaml); run from the repository root, or in a "
                          f"world's folder give the root's: --conf ../../conf")
    known = groups(conf_dir)
    picked, keys = [], []
    for ov in overrides or []:
        ov = ov.split(":", 1)[1] if ov.startswith("params.yaml:") else ov  # DVC's `-S file:override`
        name, _, value = ov.partition("=")
        group = name.split("@")[0]  # `benchmark/ablations@benchmark`: a group picked inside another preset
        if group in NESTED and name == group:
            raise ConfigError(f"{name} is picked inside the {NESTED[group]} preset: write {group}@benchmark={value}")
        if group in known:
            options = sorted(f.stem for f in (conf_dir / group).glob("*.yaml"))
            if value not in options:
                raise ConfigError(f"{name}={value!r} is not a preset; choose one of: {', '.join(options)}")
            picked.append(ov)
        elif "=" not in ov and not ov.startswith("~"):
            raise ConfigError(f"override {ov!r} must look like section.key=value")
        else:
            keys.append(ov)
    try:
        with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
            cfg = compose(config_name="config", overrides=picked)
    except HydraException as e:
        raise ConfigError(str(e).splitlines()[0]) from None
    base = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    dotlist = []
    for ov in keys:
        prefix, key, value = _key_override(ov)
        present = OmegaConf.select(base, key, default=None, throw_on_missing=False) is not None
        if strict and prefix == "" and not present and _in_schema(Params(), key):
            raise ConfigError(f"{key} is not set by the presets in conf/ (the schema default applies); "
                              f"add it with +{key}={value}")
        if strict and prefix == "+" and present:
            raise ConfigError(f"{key} is already set by the presets in conf/; drop the '+' ({key}={value})")
        if prefix == "~":
            parent, _, leaf = key.rpartition(".")
            node = OmegaConf.select(base, parent) if parent else base
            if node is not None and leaf in node:
                node.pop(leaf)
            continue
        dotlist.append(f"{key}={value}")
    raw = OmegaConf.to_container(OmegaConf.merge(base, OmegaConf.from_dotlist(dotlist)) if dotlist else base)
    raw = with_family_presets(raw)  # type: ignore[arg-type]
    build_params(raw, arms=arms, names=names)  # validate
    return raw  # type: ignore[return-value]


def preset_file(module: str) -> Path:
    """The preset a corrector family module brings: `<module>.yaml` beside its file. One line when the module cannot
    be found (its package is not on PYTHONPATH) or has no preset."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError) as e:
        spec, why = None, str(e)
    else:
        why = "no such module"
    if spec is None or not spec.origin:
        raise ConfigError(f"corrector.family_modules names {module!r}, which cannot be found ({why}): put its package "
                          f"on PYTHONPATH (e.g. PYTHONPATH=path/to/packages draftlab compose ...) or drop it")
    f, missing = paths.family_preset(module, spec.origin)
    if missing:
        raise ConfigError(missing)
    return f


def with_family_presets(raw: dict) -> dict:
    """`raw` with the presets of the family modules it names (`corrector.family_modules`) filled in: each preset's keys
    that neither conf/ nor an override set (a family's own settings, `corrector.families.<name>`, and its variants' step
    budgets, `corrector.variant_steps.<variant>`, for the variants `corrector.variants` trains); a value already there
    wins. A preset is a params.yaml fragment."""
    import yaml

    def fill(into: dict, preset: dict) -> None:
        for key, value in preset.items():
            if isinstance(value, dict) and isinstance(into.get(key), dict):
                fill(into[key], value)
            elif key not in into or into[key] is None:
                into[key] = value

    for module in ((raw.get("corrector") or {}).get("family_modules") or []):
        f = preset_file(module)
        try:
            preset = yaml.safe_load(f.read_text()) or {}
        except (OSError, yaml.YAMLError) as e:
            raise ConfigError(f"{f}: the preset of family module {module!r} is not valid YAML "
                              f"({str(e).splitlines()[0]}); fix it") from None
        if not isinstance(preset, dict):
            raise ConfigError(f"{f}: the preset of family module {module!r} must be a mapping of params sections")
        c = preset.get("corrector")
        if isinstance(c, dict) and isinstance(c.get("variant_steps"), dict):  # a budget for when the variant trains:
            trained = set((raw.get("corrector") or {}).get("variants") or [])  # only for the variants these params train
            c = {**c, "variant_steps": {v: n for v, n in c["variant_steps"].items() if v in trained}}
            preset = {**preset, "corrector": c}
        fill(raw, preset)
    return raw


def compose_text(overrides: list[str] | None = None, conf_dir: str | Path = "conf",
                 arms: Collection[str] | None = None, names: MethodNames | None = None) -> str:
    """params.yaml's text: the composition of conf/ (`compose_params`) under a header naming the command."""
    overrides = list(overrides or [])
    raw = compose_params(overrides, conf_dir, arms=arms, names=names)
    return ("# Generated by `" + " ".join(["draftlab compose", *overrides]) + "`; edit conf/, not this file.\n"
            + to_yaml(raw))
