"""Every output path is spelled once, in draftlab.paths (issue 52): no string literal outside src/draftlab/paths.py
names the pipeline's folders `results`, `metrics`, `plots`, `models` or `checkpoints` — whole (`Path("models")`,
`ROOT / "metrics"`) or as a leading path part (`"models/target"`, f"results/{name}.json", f"{root}/plots/x") — in
src/, app/, tools/ or conf/ (conf/: every loaded YAML value; a preset names a folder as
`${path:PLAIN_DRAFTER}`, resolved by draftlab.params and hydra_plugins/).

What is not a path (docs/decisions: /tmp/notes/decisions-paths.md):
- docstrings and comments;
- prose: a string (or an f-string's constant part) with whitespace in it is text for a person — a help line or an
  error message that mentions a folder — not a path the code opens;
- a key: the whole word as a dict key, a subscript, an operand of a comparison or of .get / .pop / .setdefault /
  .startswith / .endswith (`res["results"]`, `kind == "plots"`), or in a tuple of words one of which names no
  folder of ours (dvc.yaml's `("outs", "metrics", "plots")`).
"""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from draftlab import paths

ROOT = Path(__file__).resolve().parents[1]
NAMES = frozenset({"results", "metrics", "plots", "models", "checkpoints"})
PY_DIRS = ("src", "app", "tools")
YAML_DIRS = ("conf",)
TABLE = Path("src/draftlab/paths.py")
KEY_CALLS = frozenset({"get", "pop", "setdefault", "startswith", "endswith"})


def _names_a_folder(text: str, after_value: bool = False) -> bool:
    """`text` is a path whose first part is one of NAMES (after './'; after a formatted value, after its '/')."""
    if not text or re.search(r"\s", text):
        return False  # empty, or prose
    if after_value:
        if not text.startswith("/"):
            return False
        text = text[1:]
    while text.startswith("./"):
        text = text[2:]
    return text.split("/", 1)[0] in NAMES


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                out.add(id(first.value))
    return out


def _is_key(node: ast.Constant, parents: dict[int, ast.AST]) -> bool:
    """The whole word used as a key (module doc), not as a path."""
    parent = parents.get(id(node))
    if isinstance(parent, ast.Dict) and any(k is node for k in parent.keys):
        return True
    if isinstance(parent, ast.Subscript) and parent.slice is node:
        return True
    if isinstance(parent, ast.Compare):
        return True
    if isinstance(parent, ast.Call) and node in parent.args and isinstance(parent.func, ast.Attribute) \
            and parent.func.attr in KEY_CALLS:
        return True
    if isinstance(parent, (ast.Tuple, ast.List, ast.Set)):
        words = [e.value for e in parent.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        if any(w not in NAMES for w in words) or isinstance(parents.get(id(parent)), ast.Compare):
            return True
    return False


def python_literals(source: str, filename: str = "<string>") -> list[tuple[str, int, str]]:
    """(file, line, literal) for every string literal in `source` that names an output folder (module doc)."""
    tree = ast.parse(source, filename)
    docs = _docstrings(tree)
    parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            after_value = False
            for part in node.values:
                if isinstance(part, ast.Constant) and isinstance(part.value, str) \
                        and _names_a_folder(part.value, after_value):
                    found.append((filename, node.lineno, ast.unparse(node)))
                    break
                after_value = isinstance(part, ast.FormattedValue)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs \
                and not isinstance(parents.get(id(node)), ast.JoinedStr) and _names_a_folder(node.value):
            if node.value in NAMES and _is_key(node, parents):
                continue
            found.append((filename, node.lineno, repr(node.value)))
    return sorted(found, key=lambda f: f[1])


def yaml_literals(text: str, filename: str = "<string>") -> list[tuple[str, int, str]]:
    """(file, line, value) for every loaded YAML value (not key) that names an output folder."""
    found = []

    def walk(node: yaml.Node) -> None:
        if isinstance(node, yaml.MappingNode):
            for _, value in node.value:
                walk(value)
        elif isinstance(node, yaml.SequenceNode):
            for item in node.value:
                walk(item)
        elif isinstance(node, yaml.ScalarNode) and isinstance(node.value, str) and _names_a_folder(node.value):
            found.append((filename, node.start_mark.line + 1, repr(node.value)))

    for doc in yaml.compose_all(text):
        if doc is not None:
            walk(doc)
    return found


def literals(root: Path = ROOT) -> list[tuple[str, int, str]]:
    """Every path literal outside the table in the repository at `root`."""
    found = []
    for folder in PY_DIRS:
        for f in sorted((root / folder).rglob("*.py")):
            rel = f.relative_to(root)
            if rel != TABLE and "__pycache__" not in rel.parts:
                found += python_literals(f.read_text(encoding="utf-8"), str(rel))
    for folder in YAML_DIRS:
        for f in sorted((root / folder).rglob("*.yaml")):
            found += yaml_literals(f.read_text(encoding="utf-8"), str(f.relative_to(root)))
    return found


# Spelled in a file whose owner is changing it in parallel (issue 52): each entry goes when that file reads the table.
# An entry that no longer matches fails the test below, so this list cannot outlive its reason.
PENDING: set[tuple[str, str]] = set()


def test_no_output_path_is_spelled_outside_the_table():
    every = literals()
    stale = PENDING - {(f, lit) for f, _, lit in every}
    assert not stale, f"PENDING names literals that are gone: drop them from the list: {sorted(stale)}"
    found = [(f, n, lit) for f, n, lit in every if (f, lit) not in PENDING]
    assert not found, ("output paths spelled outside src/draftlab/paths.py (name them there and import them; "
                       "a conf/ preset writes ${path:NAME}):\n" + "\n".join(f"  {f}:{n}: {lit}" for f, n, lit in found))


PLANTED = '''
"""A docstring may say results/benchmark.json."""
from pathlib import Path
ROOT = Path(".")
a = Path("models") / "drafter"
b = "results/benchmark.json"
c = ROOT / "metrics" / "gpu_check.json"
d = f"plots/{a}.csv"
e = f"{ROOT}/checkpoints/x"
g = "./models/target"
ok1 = {"results": [], "metrics": 1}["results"]
ok2 = ok1.get("plots") if "models" == ok1 else None
ok3 = [k for k in ("outs", "metrics", "plots")]
ok4 = "write the report into results/ (default)"
ok5 = f"{ROOT}/v1/models"
ok6 = "my_results/x", "results.json.gz"
'''


def test_the_checker_finds_planted_literals():
    found = python_literals(PLANTED, "planted.py")
    assert [(n, lit) for _, n, lit in found] == [
        (5, "'models'"), (6, "'results/benchmark.json'"), (7, "'metrics'"), (8, "f'plots/{a}.csv'"),
        (9, "f'{ROOT}/checkpoints/x'"), (10, "'./models/target'")]
    yml = "seeded:\n  pretrain: {init_from: models/drafter/pretrained}\n  ok: ${path:PLAIN_DRAFTER}\n  note: see results/ here\n"
    assert yaml_literals(yml, "planted.yaml") == [("planted.yaml", 2, "'models/drafter/pretrained'")]


def test_tool_outputs_are_a_table_of_their_own():
    """What the tools write: each row names a tool that exists, no row twice, none inside a stage's output (OUTPUTS
    stays exactly dvc.yaml's)."""
    rows = [o.path for o in paths.TOOL_OUTPUTS]
    assert len(rows) == len(set(rows))
    for o in paths.TOOL_OUTPUTS:
        assert (ROOT / o.tool).is_file(), o
        assert o.about and paths.producer(o.path) is None, o
    assert not {o.path for o in paths.OUTPUTS} & set(rows)


def test_a_preset_names_a_path_through_the_resolver():
    from draftlab.errors import ConfigError
    from draftlab.params import path_resolver

    assert path_resolver("PLAIN_DRAFTER") == paths.PLAIN_DRAFTER
    for bad in ("NOPE", "results", "OUTPUTS"):
        with pytest.raises(ConfigError, match="names no path"):
            path_resolver(bad)


def test_dvc_composes_the_presets_as_draftlab_does(tmp_path, monkeypatch):
    """`dvc exp run -S` composes conf/ with its own Hydra call after loading hydra_plugins/ from the repository root:
    the resolver is registered there too, and its params.yaml is draftlab's (the header aside)."""
    from draftlab.params import compose_text

    code = ("import sys; from dvc.utils.hydra import compose_and_dump; "
            "compose_and_dump(sys.argv[1], sys.argv[2], None, 'config', sys.argv[3], ['profile=cpu'])")
    out = tmp_path / "params.yaml"
    subprocess.run([sys.executable, "-c", code, str(out), str(ROOT / "conf"), str(ROOT)], cwd=ROOT, check=True,
                   capture_output=True, text=True)
    dvc = out.read_text()
    monkeypatch.chdir(ROOT)
    ours = compose_text(["profile=cpu"], ROOT / "conf")
    assert f"init_from: {paths.PLAIN_DRAFTER}" in dvc
    assert dvc == ours.split("\n", 1)[1]
