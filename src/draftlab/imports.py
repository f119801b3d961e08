"""The static import graph of src/draftlab, read from the source (nothing is imported): one walker for the two
rules that follow imports — the layering test (tests/test_layers.py) and each stage's code dependencies in the
generated dvc.yaml (draftlab.pipeline.table). Every import statement counts, also those inside functions and
`if TYPE_CHECKING:` blocks; relative imports are resolved; `from pkg import name` counts `pkg.name` when it is a
module. A module's parent packages count as reached with it (importing `a.b.c` runs `a/__init__` and `a/b/__init__`).
Module names are written without the `draftlab.` prefix ("" is the package itself)."""
from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent  # src/draftlab


def module_name(path: Path, src: Path = SRC) -> str:
    """"pipeline.stage" for src/draftlab/pipeline/stage.py ("" for src/draftlab/__init__.py)."""
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports(path: Path, name: str | None = None, src: Path = SRC) -> set[str]:
    """Absolute names of every module this file imports (relative imports resolved; `name`: the file's module name
    without the prefix, default: its place under `src`)."""
    out: set[str] = set()
    pkg = (module_name(path, src) if name is None else name).split(".")
    if path.name != "__init__.py":
        pkg = pkg[:-1]

    def visit(node):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                out.update(a.name for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = ".".join(["draftlab", *pkg[: len(pkg) - child.level + 1]])
                    mod = f"{base}.{child.module}" if child.module else base
                else:
                    mod = child.module or ""
                out.add(mod)
                out.update(f"{mod}.{a.name}" for a in child.names)  # `from pkg import submodule`
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8"), str(path)))
    return out


def files(src: Path = SRC) -> dict[str, Path]:
    """draftlab module (without the prefix) -> its file."""
    return {module_name(p, src): p for p in sorted(src.rglob("*.py")) if "__pycache__" not in p.parts}


def resolve(imp: str, known) -> str | None:
    """The draftlab module an imported name lands in (`draftlab.x.func` -> "x"), or None for a name outside draftlab."""
    if imp == "draftlab":
        return ""
    if not imp.startswith("draftlab."):
        return None
    target = imp[len("draftlab."):]
    while target and target not in known:
        target = target.rpartition(".")[0]
    return target


def modules(src: Path = SRC) -> dict[str, set[str]]:
    """draftlab module -> the draftlab modules it imports (itself and the bare package `draftlab` left out)."""
    found = files(src)
    graph = {}
    for name, path in found.items():
        deps = set()
        for imp in imports(path, src=src):
            target = resolve(imp, found)
            if target and target != name:
                deps.add(target)
        graph[name] = deps
    return graph


def parents(name: str) -> list[str]:
    """The packages whose __init__ runs before `name`: "a.b.c" -> ["", "a", "a.b"]."""
    parts = name.split(".") if name else []
    return [".".join(parts[:i]) for i in range(len(parts))]


def reach(script: Path | None, graph: dict[str, set[str]], stop=(), extra=(), with_parents: bool = True) -> set[str]:
    """The draftlab modules `script` (a file outside the package, e.g. a tool; None: no file) imports, transitively,
    plus `extra` (modules given by name, reached with what they import). A module in `stop` is reached but its imports are not followed.
    `with_parents`: the parent packages of every reached module count as reached (and their imports followed)."""
    todo = [m for i in (imports(script, "script.main") if script else ()) if (m := resolve(i, graph)) is not None]
    todo += list(extra)
    seen: set[str] = set()
    while todo:
        m = todo.pop()
        if m in seen or m not in graph:
            continue
        seen.add(m)
        if with_parents:
            todo.extend(parents(m))
        if m not in stop:
            todo.extend(graph[m])
    if not with_parents:
        seen.discard("")
    return seen
