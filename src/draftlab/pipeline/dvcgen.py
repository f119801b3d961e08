"""dvc.yaml written from the stage table (draftlab.pipeline.table): `make dvc-yaml`, or
`python -m draftlab.pipeline.dvcgen [--check]`, writes the root dvc.yaml and every world's (worlds/<name>/dvc.yaml,
draftlab.pipeline.worlds); `--check` writes nothing and exits 1 when a committed file differs.

A stage's deps: its data deps, then its code: the files of the draftlab modules its command reaches — the runner
(draftlab.pipeline.__main__) and the stage's entry (draftlab.pipeline.steps.<stage>), followed by their imports
(`code_modules`; a by-name loader reaches what it loads: table.LOADED_BY_NAME), a package written as its folder
when every module of it is reached, and, beside a reached module
of a folder written file by file, that folder's data files (e.g. plan/dispatch_counts.json)."""
from __future__ import annotations

import sys
from functools import lru_cache
from pathlib import Path

from draftlab import imports
from draftlab.pipeline import table, worlds

ROOT = imports.SRC.parents[1]  # the repository (src/draftlab -> .)
HEADER = """\
# GENERATED from the stage table (src/draftlab/pipeline/table.py) by draftlab.pipeline.dvcgen: do not edit; change
# the table and regenerate with `make dvc-yaml` (tests/pipeline/test_dvc_yaml.py holds this file equal to it).
# Each stage runs `python -m draftlab.pipeline <stage>`: its entry in draftlab.pipeline.steps under stage_main; its
# code deps are computed: the draftlab modules the runner and the entry reach by static imports (a package as its
# folder when all of it is reached), so
# editing the library re-runs exactly what it affects.
# check_params runs first and every stage depends on its stamp, so a bad key, an unknown arm or a bad
# prompt file fails there, before DVC removes any output. The cache: false metrics and plots are
# `persist: true`: DVC leaves them in place while a stage runs (the stage replaces them atomically at
# its end), so a failed run keeps the last good ones (DVC cannot restore uncached files).
"""


@lru_cache(maxsize=1)
def graph() -> dict[str, set[str]]:
    """The static import graph, with an edge from each by-name loader to what it loads (table.LOADED_BY_NAME)."""
    g = imports.modules()
    for loader, loaded in table.LOADED_BY_NAME.items():
        g[loader] = g[loader] | set(loaded)
    return g


def code_modules(stage: table.Stage, follow_validation: bool = False) -> set[str]:
    """The draftlab modules stage `stage`'s command reaches: the runner, the stage's entry, what they import (with
    their parent packages) and `stage.code`; the walk reads table.VALIDATION's modules without following their
    imports unless `follow_validation`."""
    stop = () if follow_validation else table.VALIDATION
    runner, entry = (imports.resolve(m, graph()) for m in (f"{table.RUNNER}.__main__", stage.entry))
    return imports.reach(None, graph(), stop=stop, extra=(runner, entry, *stage.code))


def _rel(p: Path) -> str:
    return p.relative_to(ROOT).as_posix()


def code_files(mods: set[str]) -> list[str]:
    """The files of `mods`, a package folded into its folder when every module under it is in `mods`."""
    files = imports.files()
    out: list[str] = []

    def under(pkg: str) -> list[str]:
        return [m for m in files if pkg == "" or m == pkg or m.startswith(pkg + ".")]

    def visit(pkg: str) -> None:  # pkg: a package (has __init__)
        folder = files[pkg].parent
        if all(m in mods for m in under(pkg)) and pkg:
            out.append(_rel(folder))
            return
        direct = [m for m in files if m != pkg and files[m].parent == folder]
        reached = [m for m in [pkg, *direct] if m in mods]
        out.extend(_rel(files[m]) for m in reached)
        if reached:  # a folder's data files go with its modules (read by path beside them)
            out.extend(_rel(f) for f in sorted(folder.iterdir()) if f.is_file() and f.suffix != ".py"
                       and not f.name.startswith("."))
        for sub in sorted(m for m in files if files[m].name == "__init__.py" and files[m].parent.parent == folder
                          and m != pkg):
            if any(x in mods for x in under(sub)):
                visit(sub)

    visit("")
    return sorted(set(out))


def deps(stage: table.Stage) -> list[str]:
    return [*stage.inputs, *code_files(code_modules(stage))]


def _comment(text: str, indent: str) -> list[str]:
    return [f"{indent}# {line}" for line in text.splitlines()]


def _note(stage: table.Stage, key: str) -> str:
    n = stage.notes.get(key)
    return f"  # {n}" if n else ""


def _items(stage: table.Stage, items, indent: str) -> list[str]:
    lines = []
    for it in items:
        if f"before {it}" in stage.notes:
            lines += _comment(stage.notes[f"before {it}"], indent)
        lines.append(f"{indent}- {it}{_note(stage, it)}")
    return lines


def _outputs(stage: table.Stage, kind: str) -> list[str]:
    lines = []
    for o in stage.outputs:
        if o.kind != kind:
            continue
        if o.cached:
            lines.append(f"      - {o.path}{_note(stage, o.path)}")
            continue
        lines += [f"      - {o.path}:{_note(stage, o.path)}", "          cache: false", "          persist: true"]
        if kind == "plots":
            x, y = table.PLOT_AXES[o.path]
            lines += [f"          x: {x}", f"          y: {y}"]
    return lines


def render() -> str:
    """The root dvc.yaml's text."""
    lines = HEADER.splitlines() + ["stages:"]
    for i, s in enumerate(table.STAGES):
        if i:
            lines.append("")
        if s.about:
            lines += _comment(s.about, "  ")
        lines += [f"  {s.name}:", f"    cmd: {s.cmd}"]
        if s.always_changed:
            lines.append("    always_changed: true")
        lines += ["    deps:", *_items(s, deps(s), "      ")]
        if s.params:
            lines += [f"    params:{_note(s, 'params')}", *_items(s, s.params, "      ")]
        for kind in ("outs", "metrics", "plots"):
            body = _outputs(s, kind)
            if body:
                if f"before {kind}" in s.notes:
                    lines += _comment(s.notes[f"before {kind}"], "    ")
                lines += [f"    {kind}:", *body]
    lines += ["", *_comment(table.TOP_PLOTS_ABOUT, ""), "plots:"]
    import yaml

    top = yaml.safe_dump(table.TOP_PLOTS, sort_keys=False, allow_unicode=True, width=120)
    lines += ["  " + line for line in top.splitlines()]
    return "\n".join(lines) + "\n"


def document() -> dict:
    """The root dvc.yaml as loaded YAML."""
    import yaml

    return yaml.safe_load(render())


def world_folders() -> list[str]:
    base = ROOT / worlds.WORLDS
    return sorted(_rel(p.parent) for p in base.glob("*/params.yaml")) if base.is_dir() else []


def targets() -> dict[Path, str]:
    """{file: its generated text}: the root dvc.yaml and every world's."""
    root = document()
    return {ROOT / "dvc.yaml": render(), **{ROOT / f / "dvc.yaml": worlds.render(root, f) for f in world_folders()}}


def allowed(key: str, declared) -> bool:
    """A params key read (`section` wholesale or `section.field`) is covered by a declared key or section."""
    return any(key == d or key.startswith(d + ".") for d in (*declared, *table.UNTRACKED))


def check_traces(folder: Path) -> list[str]:
    """What the stage processes used (draftlab.pipeline.trace's <folder>/<stage>.json) beyond their table records, one
    line per stage and kind: modules outside what its script reaches (the name tables' imports followed too: the
    process runs them), params keys outside its `params` (not checked for an always_changed stage: DVC runs it
    whatever changed, and check_params reads every section to validate it). Stages that did not run have no file."""
    import json

    problems = []
    for f in sorted(Path(folder).glob("*.json")):
        got = json.loads(f.read_text(encoding="utf-8"))
        stage = table.BY_NAME.get(got["stage"])
        if stage is None:
            problems.append(f"{f.name}: no stage {got['stage']!r} in the stage table")
            continue
        reach = code_modules(stage, follow_validation=True)
        mods = [f"draftlab.{m}" for m in got["modules"] if m not in reach]
        if mods:
            problems.append(f"stage {stage.name} imported {', '.join(mods)}, which its script does not reach by static "
                            f"imports: declare them in its record's `code` (src/draftlab/pipeline/table.py)")
        keys = [k for k in got["params"] if not stage.always_changed and not allowed(k, (*stage.params, *stage.reads))]
        if keys:
            problems.append(f"stage {stage.name} read params {', '.join(keys)}, which its record does not declare "
                            f"(`params` in src/draftlab/pipeline/table.py)")
    return problems


def main(argv: list[str] | None = None) -> int:
    from draftlab.io import atomic_write

    args = sys.argv[1:] if argv is None else argv
    check = "--check" in args
    stale = []
    for path, text in targets().items():
        if path.is_file() and path.read_text(encoding="utf-8") == text:
            continue
        stale.append(_rel(path))
        if not check:
            atomic_write(path, lambda p, t=text: p.write_text(t, encoding="utf-8"))
    if check and stale:
        print(f"stale: {', '.join(stale)}; regenerate with `make dvc-yaml`", file=sys.stderr)
        return 1
    print(("wrote " + ", ".join(stale)) if stale else "dvc.yaml files up to date")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
