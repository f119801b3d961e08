"""Loading, validating and composing params.yaml (OmegaConf / Hydra live here and nowhere else).

`load_params(path, overrides)` merges params.yaml (and optional `a.b=c` overrides) onto the typed
schema of `draftlab.config`, so an unknown key, a wrong type or an impossible value fails with one
line (`ConfigError`) naming the key and what is allowed. `compose_params()` composes the presets in
conf/ with Hydra (groups: target/, profile/, benchmark/arms/); `python -m draftlab.config compose
target=X profile=Y` (or `python -m draftlab.params ...`) prints the composed params.yaml.
"""
from __future__ import annotations

import dataclasses
import difflib
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

from draftlab.config import Params
from draftlab.errors import ConfigError, DraftlabError

# ----------------------------------------------------------------------------------------------
# loading


def _schema_keys(node: Any) -> list[str]:
    return [f.name for f in dataclasses.fields(node)] if dataclasses.is_dataclass(node) else []


def _unknown_key_message(schema: Any, dotted: str) -> str:
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


def _walk_check(obj: Any, prefix: str) -> None:
    """Call each section's `check(prefix)`; sections without one are searched for sub-sections."""
    if hasattr(obj, "check"):
        obj.check(prefix)
        return
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if dataclasses.is_dataclass(v):
            _walk_check(v, f"{prefix}.{f.name}" if prefix else f.name)


def build_params(raw: dict | DictConfig, overrides: list[str] | None = None, schema: type = Params) -> Any:
    """Merge raw values (and `a.b=c` overrides) onto the schema; validate; return typed dataclasses."""
    base = OmegaConf.structured(schema)
    OmegaConf.set_struct(base, True)
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
        raise ConfigError(f"{key}: {msg}") from None
    except OmegaConfBaseException as e:
        raise ConfigError(str(e).splitlines()[0]) from None
    _walk_check(obj, "")
    if hasattr(obj, "check_across"):
        obj.check_across()
    return obj


def load_params(path: str | Path = "params.yaml", overrides: list[str] | None = None) -> Params:
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path} not found; run from the repository root or compose it: python -m draftlab.config compose")
    try:
        raw = OmegaConf.load(path)
    except Exception as e:  # yaml syntax error
        raise ConfigError(f"{path} is not valid YAML: {str(e).splitlines()[0]}") from None
    return build_params(raw, overrides)


def to_dict(params: Any) -> dict:
    return OmegaConf.to_container(OmegaConf.structured(params), resolve=True)  # type: ignore[return-value]


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


GROUPS = ("target", "profile", "benchmark/arms")  # the config groups under conf/


def compose_params(overrides: list[str] | None = None, conf_dir: str | Path = "conf") -> dict:
    """Compose conf/config.yaml with Hydra (`target=qwen3-4b profile=smoke key=value`), validated."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException

    conf_dir = Path(conf_dir).resolve()
    groups, keys = [], []
    for ov in overrides or []:
        name, _, value = ov.partition("=")
        if name in GROUPS:
            options = sorted(f.stem for f in (conf_dir / name).glob("*.yaml"))
            if value not in options:
                raise ConfigError(f"{name}={value!r} is not a preset; choose one of: {', '.join(options)}")
            groups.append(ov)
        else:
            keys.append(ov)
    try:
        with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
            cfg = compose(config_name="config", overrides=groups)
    except HydraException as e:
        raise ConfigError(str(e).splitlines()[0]) from None
    raw = OmegaConf.to_container(cfg, resolve=True)
    if keys:
        raw = OmegaConf.to_container(OmegaConf.merge(OmegaConf.create(raw), OmegaConf.from_dotlist(keys)))
    build_params(raw)  # validate
    return raw  # type: ignore[return-value]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("compose", "check"):
        print("usage: python -m draftlab.config compose [target=NAME profile=NAME key=value ...]\n"
              "       python -m draftlab.config check [params.yaml]", file=sys.stderr)
        return 2
    try:
        if argv[0] == "compose":
            raw = compose_params(argv[1:])
            print("# Generated by `python -m draftlab.config compose " + " ".join(argv[1:]) + "`; edit conf/, not this file.")
            print(OmegaConf.to_yaml(OmegaConf.create(raw)), end="")
        else:
            load_params(argv[1] if len(argv) > 1 else "params.yaml")
            print("ok")
    except DraftlabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
