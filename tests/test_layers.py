"""The layering rules of src/draftlab (docs/architecture.md), checked on the source so they cannot rot:
no import cycle between modules, no module importing a higher layer, and the plain-torch packages free
of configuration, Lightning and MLflow. Every import statement counts (the walker: draftlab.imports, whose walk the
generated dvc.yaml's code deps use too), also those inside functions;
`if TYPE_CHECKING:` blocks included (a lower layer that annotates with a higher layer's type depends on it: it
names the shape it reads with a Protocol, or takes plain values)."""
from __future__ import annotations

import ast
from pathlib import Path

from draftlab.imports import SRC, files as imports_files, imports, modules, reach
from draftlab.pipeline.table import VALIDATION


# lowest first; a module may import modules of its own layer or of a lower one. Each entry is a top-level
# module or package of src/draftlab, so a package lives in one layer, every module of it included: no
# module sits apart from its package (test_a_package_lives_in_one_layer).
LAYERS = [
    # imports: the static import graph (ast only); interrupts: Ctrl-C / SIGTERM in one line (signal, logging: nothing of ours)
    ["errors", "interrupts", "imports"],
    ["io", "destination", "paths", "stats", "compiling", "kernels", "ngram", "data", "omp", "markdown"],
    ["verifier", "toy"],  # toy: the toy world's generator, tokenizer and target (a source of targets, plain torch)
    ["drafter"],
    ["decoding"],
    ["corrector", "specopd"],
    ["config", "params", "plan"],
    ["arms"],  # the arm grammar: names -> drafters and proposal steps (composes the methods; read by check_params)
    ["checks"],  # the accelerator check: plain torch over the methods and the plan's memory model (no configuration)
    ["training", "tracking"],
    ["measure"],  # the instruments: verify cost, serving engines, benchmark sizing, dispatch counts, probes
    ["bench"],
    ["explore"],  # what the explorer reads and shows, without Streamlit (app/ holds the pages)
    ["recipes"],  # each stage's recipe: reference, pretraining, SpecOPD, corrector co-training (their Lightning modules)
    ["pipeline"],
    ["offline", "verdicts"],  # the offline regime runner: the stages in order without DVC / MLflow (tools/gpu_run.py);
    # verdicts: every current figure re-read from committed files (`draftlab verdicts`; reads the replicates' folders)
    ["cli"],  # the console script
]
# the plain-torch packages: no configuration, no Lightning, no MLflow, no DVC (they take tensors and small objects)
PLAIN = ("errors", "interrupts", "imports", "io", "destination", "paths", "stats", "compiling", "checks", "kernels", "ngram", "verifier", "drafter", "decoding", "corrector", "specopd", "data", "toy", "omp", "markdown")
NOT_IN_PLAIN = ("draftlab.config", "draftlab.params", "omegaconf", "hydra", "lightning", "mlflow", "dvc")
ONLY_IN = {"omegaconf": ("params",), "hydra": ("params",), "mlflow": ("tracking",),
           "lightning": ("training", "tracking", "recipes", "pipeline")}  # recipes: a method's recipe room holds its
# Lightning module; pipeline: the stages' bodies hand Lightning's devices to the fit


def layer(name: str) -> int:
    """The layer of a module: its top-level package's."""
    top = name.split(".")[0]
    for i, names in enumerate(LAYERS):
        if top in names:
            return i
    raise AssertionError(f"module draftlab.{name} is in no layer; add {top} to LAYERS in tests/test_layers.py "
                         "(and to docs/architecture.md)")


def test_a_package_lives_in_one_layer():
    """No exception: every entry of LAYERS is a top-level module or package (not a submodule placed on a
    layer of its own), named once, and exists."""
    names = [n for names in LAYERS for n in names]
    assert all("." not in n for n in names), [n for n in names if "." in n]
    assert len(names) == len(set(names))
    tops = {m.split(".")[0] for m in modules() if m}
    assert set(names) == tops, (set(names) ^ tops)


def test_every_module_has_a_layer():
    for name in modules():
        if name:
            layer(name)


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done

    def dfs(node, stack):
        state[node] = 1
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return stack[stack.index(dep):] + [dep]
            if state.get(dep) is None and (found := dfs(dep, stack + [dep])):
                return found
        state[node] = 2
        return None

    for name in sorted(graph):
        if state.get(name) is None and (found := dfs(name, [name])):
            return found
    return None


def upward(graph: dict[str, set[str]]) -> list[str]:
    return [f"draftlab.{m} (layer {layer(m)}) imports draftlab.{d} (layer {layer(d)})"
            for m, deps in graph.items() if m for d in sorted(deps) if d and layer(d) > layer(m)]


def test_no_import_cycle():
    cycle = find_cycle(modules())
    assert cycle is None, "import cycle: " + " -> ".join(f"draftlab.{m}" for m in cycle)


def test_no_lower_layer_imports_a_higher_one():
    bad = upward(modules())
    assert not bad, "\n".join(bad)


def test_plain_packages_stay_plain():
    files = imports_files()
    bad = []
    for name, path in files.items():
        top = name.split(".")[0]
        for imp in imports(path):
            root = imp.split(".")[0]
            if top in PLAIN and any(imp == n or imp.startswith(n + ".") for n in NOT_IN_PLAIN):
                bad.append(f"draftlab.{name} imports {imp} (plain-torch packages take small objects, not the config)")
            if root in ONLY_IN and top not in ONLY_IN[root]:
                bad.append(f"draftlab.{name} imports {imp} (only {', '.join(ONLY_IN[root])} may)")
    assert not bad, "\n".join(sorted(set(bad)))


METHODS = ("corrector", "specopd")  # the methods' model packages
CONFIGURATION = ("config", "params", "plan")


def method_imports(graph: dict[str, set[str]]) -> list[str]:
    return [f"draftlab.{m} imports draftlab.{d}" for m, deps in graph.items() if m.split(".")[0] in CONFIGURATION
            for d in sorted(deps) if d.split(".")[0] in METHODS]


def test_configuration_imports_no_method():
    """The configuration checks the names the caller hands it (MethodNames, the arm names): a method's tables
    stay in its package, and adding a variant edits no schema."""
    bad = method_imports(modules())
    assert not bad, "\n".join(bad)


# A method's two rooms: its model package and its recipe folder under recipes/; with the shared layers below
# them (the plain-torch floors, the configuration, the shared training code) they hold all of its code.
ROOMS = {"corrector": ("corrector", "recipes.corrector", "pipeline.steps.corrector")}  # + the stage's body
SHARED = ("errors", "interrupts", "io", "destination", "paths", "stats", "compiling", "kernels", "ngram", "data", "omp", "verifier",
          "drafter", "decoding", "config", "params", "plan", "training", "tracking",
          "pipeline.__main__", "pipeline.table", "pipeline.stage", "pipeline.trace", "pipeline.layout", "recipes.common", "pipeline.names",
          "toy.freeze", "toy.tasks", "toy.task_families", "toy.mark_families")  # the toy world's freeze: a gate every
# stage passes (draftlab.toy.freeze), and the world's generator it reads (toy.tasks and its families)
# where a stage validates params.yaml: every name table meets the configuration there (pipeline.names gathers
# the arm table's and the methods' names), so the walk reads that module but does not follow its imports
MEETING = VALIDATION  # the generated dvc.yaml's walk (draftlab.pipeline.dvcgen) stops there too


def _within(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def reached(script: Path, graph: dict[str, set[str]]) -> set[str]:
    """The draftlab modules a script imports, transitively (the walk stops at MEETING)."""
    return reach(script, graph, stop=MEETING, with_parents=False)


def test_the_corrector_recipe_stays_in_its_rooms():
    """Followed from its stage's command (the runner and its entry), the corrector's code lies in its two rooms
    (corrector/, recipes/corrector/) and the shared layers below them: no other method, no benchmark, nothing above."""
    seen = reach(None, modules(), stop=MEETING, with_parents=False,
                 extra=("pipeline.__main__", "pipeline.steps.corrector"))
    assert any(_within(m, ("recipes.corrector",)) for m in seen) and any(_within(m, ("corrector",)) for m in seen)
    bad = sorted(m for m in seen if not _within(m, ROOMS["corrector"] + SHARED))
    assert not bad, f"the corrector stage reaches {bad}"


def test_the_checks_can_fail(tmp_path):
    """A lazy import inside a function is seen, and so is a TYPE_CHECKING one; an upward edge and a cycle
    in a made-up graph are reported."""
    f = tmp_path / "m.py"
    f.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from draftlab.config import Params\n"
                 "def f():\n    from draftlab.pipeline.benchmark import run\n    from . import api\n")
    seen = imports(f, "decoding.m")
    assert "draftlab.pipeline.benchmark" in seen and "draftlab.decoding.api" in seen and "draftlab.config" in seen
    assert upward({"kernels.dispatch": {"pipeline.benchmark"}}) and not upward({"pipeline.benchmark": {"kernels"}})
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    g = {"recipes.corrector.recipe": {"bench.share", "training"}, "bench.share": set(), "training": set(),
         "pipeline.names": {"specopd.objectives"}, "specopd.objectives": set()}
    script = tmp_path / "stage.py"
    script.write_text("from draftlab.recipes.corrector.recipe import run\nimport draftlab.pipeline.names\n")
    assert reached(script, g) == {"recipes.corrector.recipe", "bench.share", "training", "pipeline.names"}
    assert method_imports({"config.training": {"corrector.variants"}}) and not method_imports({"pipeline.names": {"corrector.variants"}})


def test_the_architecture_page_names_every_package_in_its_layer():
    """docs/architecture.md's layout names every top-level module and package of src/draftlab, and its layer table
    lists exactly LAYERS, layer by layer (a new package or a moved layer fails here until the page says so)."""
    import re

    page = (SRC.parents[1] / "docs" / "architecture.md").read_text()
    layout = page.split("## Layout", 1)[1].split("```")[1]
    tops = sorted(p.stem if p.is_file() else p.name for p in SRC.iterdir()
                  if (p.suffix == ".py" and p.name != "__init__.py") or (p.is_dir() and (p / "__init__.py").exists()))
    named = set(re.findall(r"^  (\w+)(?:/|\.py)", layout, re.M))
    assert not set(tops) - named, f"docs/architecture.md's layout does not name {sorted(set(tops) - named)}"
    table = {}
    for n, cell in re.findall(r"^\| (\d+) \| ([^|]+) \|", page, re.M):
        table.setdefault(int(n), set()).update(re.findall(r"`(\w+)(?:/|\.py)?`", cell))
    want = {i: set(layer) for i, layer in enumerate(LAYERS)}
    assert table == want, f"docs/architecture.md's layer table {table} is not tests/test_layers.py's LAYERS {want}"


LIGHTNING_BASES = ("LightningModule", "LightningDataModule", "Callback")


def _base_names(node) -> list[str]:
    return [b.id if isinstance(b, ast.Name) else b.attr for b in node.bases if isinstance(b, (ast.Name, ast.Attribute))]


def lightning_subclasses(files: dict[str, Path]) -> list[str]:
    """'module.Class extends module.Base' for every class of ours that extends one of our Lightning classes."""
    classes = {m: [n for n in ast.walk(ast.parse(p.read_text(encoding="utf-8"))) if isinstance(n, ast.ClassDef)]
               for m, p in files.items()}
    ours = {n.name: m for m, nodes in classes.items() for n in nodes if set(_base_names(n)) & set(LIGHTNING_BASES)}
    return [f"{m}.{n.name} extends {ours[b]}.{b}" for m, nodes in classes.items() for n in nodes
            for b in _base_names(n) if b in ours]


def test_no_lightning_class_of_ours_is_extended():
    """One training path (issue "A method in one place"): a method supplies an objective or hands its pieces to the
    one module / data module; it does not subclass them and override their hooks from another floor."""
    found = lightning_subclasses(imports_files())
    assert not found, f"a Lightning class of ours is extended (hand its pieces in instead): {found}"


def test_the_lightning_check_can_fail(tmp_path):
    (tmp_path / "a.py").write_text("import lightning as L\nclass M(L.LightningDataModule):\n    pass\n")
    (tmp_path / "b.py").write_text("from a import M\nclass N(M):\n    train_items = None\n")
    assert lightning_subclasses({"a": tmp_path / "a.py", "b": tmp_path / "b.py"}) == ["b.N extends a.M"]
