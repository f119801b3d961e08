"""dvc.yaml is written from the stage table (draftlab.pipeline.table, draftlab.pipeline.dvcgen): the committed files
are the generated ones, the outputs are the paths table's, the data deps are earlier stages' outputs, and the computed
code deps follow the imports (a module only one stage imports is that stage's dependency and no other's)."""
from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from draftlab import imports, paths
from draftlab.pipeline import dvcgen, table

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_dvc_yamls_are_the_generated_ones():
    """Root and every world: byte for byte (`make dvc-yaml` rewrites them)."""
    found = dvcgen.targets()
    assert ROOT / "worlds" / "toy" / "dvc.yaml" in found
    stale = [str(p.relative_to(ROOT)) for p, text in found.items() if p.read_text(encoding="utf-8") != text]
    assert not stale, f"{stale} differ from the stage table: run `make dvc-yaml` and commit the result"


def declared(doc: dict) -> set[tuple[str, str, str, bool]]:
    out = set()
    for stage, spec in doc["stages"].items():
        for kind in ("outs", "metrics", "plots"):
            for entry in spec.get(kind) or []:
                path, opts = (entry, {}) if isinstance(entry, str) else next(iter(entry.items()))
                out.add((path, stage, kind, (opts or {}).get("cache", True)))
                assert (opts or {}).get("persist", False) == (not (opts or {}).get("cache", True)), path
    return out


def test_the_outputs_are_the_paths_tables():
    """Every declared out, metric and plot with its stage and cache flag is paths.OUTPUTS, no more, no less (the
    uncached ones persist); the stages and their order are the table's."""
    doc = dvcgen.document()
    assert list(doc["stages"]) == [s.name for s in table.STAGES]
    assert {(o.path, o.stage, o.kind, o.cached) for o in paths.OUTPUTS} == declared(doc)
    assert len(paths.OUTPUTS) == len({o.path for o in paths.OUTPUTS})  # no path twice
    assert {o.path for o in paths.OUTPUTS if o.kind == "plots"} == set(table.PLOT_AXES)
    assert doc["stages"]["check_params"]["always_changed"] is True
    assert all(s["cmd"] == f"python -m draftlab.pipeline {n}" for n, s in doc["stages"].items())


def test_a_stage_reads_only_what_earlier_stages_write(monkeypatch):
    """Each data dep is a declared output of a stage before it (or the check stamp); its entry exists and has a
    `run`, and the runner hands that `run` to stage_main with the table's distributed flag."""
    import importlib

    from draftlab.pipeline import __main__ as runner
    from draftlab.pipeline import stage as stage_module

    policies = []
    monkeypatch.setattr(runner.omp, "configure", lambda *a, **kw: policies.append(kw["decoding"]))
    order = [s.name for s in table.STAGES]
    for i, s in enumerate(table.STAGES):
        for dep in s.inputs:
            out = next((o for o in paths.OUTPUTS if o.path == dep), None)
            assert out is not None and order.index(out.stage) < i, (s.name, dep)
        assert all(s.reads.values()) and not set(s.reads) & set(s.params), s.name  # a read is a dep or says why not
        seen = []
        monkeypatch.setattr(stage_module, "stage_main", lambda *a, **kw: seen.append((a, kw)) or 0)
        assert runner.main([s.name, "a.b=1"]) == 0
        assert seen == [((s.name, importlib.import_module(s.entry).run, ["a.b=1"]), {"distributed": s.distributed})]
        assert policies.pop() == s.decoding and s.decoding == (s.name == "benchmark")  # the one decoding stage


def test_the_runner_names_a_bad_stage_in_one_line(capsys):
    from draftlab.pipeline import __main__ as runner

    for argv, code, want in ((["bench"], 2, "error: unknown stage 'bench'; usage: python -m draftlab.pipeline STAGE"),
                             ([], 2, "error: no stage named; usage:"), (["-h"], 0, "usage: python -m draftlab.pipeline")):
        assert runner.main(argv) == code
        out = capsys.readouterr()
        text = (out.err if code else out.out).strip()
        assert text.startswith(want) and "\n" not in text and "check_params, prepare_target" in text, text


def test_the_code_deps_follow_the_imports():
    """What holds now: only the corrector stage (of the method stages) reaches the corrector's model package and its
    recipe; the reference stage reaches neither a method nor the benchmark; the corrector stage does not reach the arm
    grammar (the hand-written list said it did); the name tables are read, not followed."""
    reach = {s.name: dvcgen.code_modules(s) for s in table.STAGES}
    assert {"recipes.corrector.recipe", "pipeline.steps.corrector"} <= reach["corrector"]
    assert any(m.startswith("corrector.") for m in reach["corrector"])
    assert "recipes.corrector.recipe" not in reach["specopd"] | reach["benchmark"] | reach["pretrain_drafter"]
    assert not any(m.split(".")[0] in ("corrector", "specopd", "bench", "arms") for m in reach["reference"])
    assert not any(m.startswith(("arms", "recipes.specopd")) for m in reach["corrector"])
    assert "bench.runner" in reach["benchmark"] and "specopd.objectives" not in reach["pretrain_drafter"]
    for name, mods in reach.items():
        assert {f"pipeline.steps.{name}", "pipeline.__main__", "pipeline.stage", "pipeline.names"} <= mods
        assert not any(m.startswith("pipeline.steps.") and m != f"pipeline.steps.{name}" for m in mods), name
    deps = {s.name: dvcgen.deps(s) for s in table.STAGES}
    assert any(d.startswith("src/draftlab/recipes/corrector") for d in deps["corrector"])
    assert any(d.startswith("src/draftlab/corrector") for d in deps["corrector"])
    assert not any(d.startswith("src/draftlab/corrector") for d in deps["reference"])


def test_what_is_loaded_by_name_is_declared_and_reached():
    """The table's by-name lists are the loaders' own (the corrector registry's built-in family modules), and a stage
    that reaches the registry depends on every family module."""
    from draftlab.corrector import families

    assert not table.LOADED_BY_NAME  # the corrector registry imports its built-in families statically: the import
    mods = dvcgen.code_modules(table.BY_NAME["corrector"])  # graph reaches each, no list written twice
    assert "corrector.families" in mods and {m[len("draftlab."):] for m in families.MODULES} <= mods


def test_a_package_is_one_folder_only_when_all_of_it_is_reached():
    files = imports.files()
    every = {m for m in files if m == "kernels" or m.startswith("kernels.")}
    one = {"verifier", "verifier.load", ""}
    got = dvcgen.code_files(every | one)
    assert "src/draftlab/kernels" in got and "src/draftlab/verifier/load.py" in got
    assert "src/draftlab/verifier" not in got and not any(g.startswith("src/draftlab/kernels/") for g in got)
    # a folder written file by file keeps its data files (read by path beside its modules)
    assert "src/draftlab/plan/dispatch_counts.json" in dvcgen.code_files({"", "plan", "plan.dispatch"})


def test_the_walk_sees_every_import_and_stops_at_validation(tmp_path):
    graph = {"": set(), "a": {"b"}, "b": set(), "a.x": {"c"}, "c": set(), "pipeline": set(), "pipeline.names": {"z"},
             "z": set()}
    script = tmp_path / "stage.py"
    script.write_text("def main():\n    from draftlab.a.x import f\n    import draftlab.pipeline.names\n")
    assert imports.reach(script, graph, stop=("pipeline.names",)) == {"", "a", "b", "a.x", "c", "pipeline",
                                                                       "pipeline.names"}
    assert "z" in imports.reach(script, graph)
    assert imports.reach(script, graph, extra=("z",), stop=("pipeline.names",)) >= {"z"}


def test_the_world_is_the_root_pipeline_run_from_its_folder():
    root = yaml.safe_load((ROOT / "dvc.yaml").read_text(encoding="utf-8"))
    world = yaml.safe_load((ROOT / "worlds" / "toy" / "dvc.yaml").read_text(encoding="utf-8"))
    for name, st in world["stages"].items():
        assert st["cmd"] == root["stages"][name]["cmd"]  # a module, not a path: the same command
        assert [d.replace("../../", "", 1) for d in st["deps"]] == root["stages"][name]["deps"]


def test_the_trace_records_the_bodys_reads_and_stays_transparent(tmp_path, monkeypatch):
    """With DRAFTLAB_STAGE_TRACE set: a section field read is recorded, to_dict of a section counts the section, of
    the whole params nothing; isinstance, dataclasses.replace, OmegaConf and pickling see the sections' own classes;
    finish writes the modules and keys, and check_traces names what the table does not declare."""
    import dataclasses
    import json
    import pickle

    import draftlab.params as P
    from draftlab.config import BenchmarkConfig, Params
    from draftlab.pipeline import trace

    monkeypatch.setenv(trace.ENV, str(tmp_path))
    monkeypatch.setattr(P, "to_dict", P.to_dict)  # restored after the test
    monkeypatch.setattr(trace, "_READ", set())
    params = trace.start(Params())
    plain = pickle.dumps(Params().benchmark)
    assert isinstance(params.benchmark, BenchmarkConfig) and dataclasses.is_dataclass(params.benchmark)
    assert pickle.dumps(params.benchmark) == plain and type(pickle.loads(plain)) is BenchmarkConfig
    whole = P.to_dict(params)
    assert trace._READ == set() and whole == P.to_dict(Params())
    _ = params.drafter.block_size
    P.to_dict(params.engine)
    first = dataclasses.fields(params.pld)[0].name
    replaced = dataclasses.replace(params.pld, **{first: getattr(Params().pld, first)})
    assert isinstance(replaced, type(Params().pld))
    assert {"drafter.block_size", "engine"} <= trace._READ and any(k.startswith("pld.") for k in trace._READ)
    trace.finish("benchmark")
    got = json.loads((tmp_path / "benchmark.json").read_text())
    assert "pipeline.trace" in got["modules"] and "drafter.block_size" in got["params"]
    got["modules"] = [m for m in got["modules"] if m in dvcgen.code_modules(table.BY_NAME["benchmark"])]  # not pytest's
    (tmp_path / "benchmark.json").write_text(json.dumps(got))
    assert "pipeline.trace" in got["modules"] and dvcgen.check_traces(tmp_path) == []
    (tmp_path / "benchmark.json").write_text(json.dumps({"stage": "reference", "modules": ["recipes.corrector.recipe"],
                                                         "params": ["drafter.block_size", "tracking.uri"]}))
    problems = dvcgen.check_traces(tmp_path)
    assert len(problems) == 2 and all(p.startswith("stage reference ") for p in problems), problems
    assert "draftlab.recipes.corrector.recipe" in problems[0] and "drafter.block_size" in problems[1]


def test_the_offline_runner_takes_the_tables_stages_and_its_dry_preset_from_conf():
    from draftlab.offline import runner

    assert runner.STAGES == tuple(s.name for s in table.STAGES)
    assert runner.load_stage("corrector").run.__module__ == "draftlab.pipeline.steps.corrector"
    dry = runner.dry_overrides()
    assert dry[0] == "target=tiny-random" and "benchmark.suites=[mt-bench,sharegpt-chat]" in dry
    assert all(isinstance(o, str) and "=" in o for o in dry) and dry[-1] == "engine.compile=on"


def test_arm_names_are_checked_once_in_check_params(root, tmp_path, monkeypatch, capsys):
    """check_params fails on an unknown arm in one line; any other stage, which depends on check_params' stamp, loads
    the same params without the arm grammar and runs its body (the grammar knows every method; no other stage needs
    it to run)."""
    import torch

    from draftlab.pipeline.stage import stage_main

    threads = torch.get_num_threads()  # a stage sets the profile's threads: this worker's other tests keep theirs
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)
    shutil.copy(root / "params.yaml", tmp_path / "params.yaml")
    monkeypatch.chdir(tmp_path)
    bad = ["benchmark.arms=[ar,nosuch]"]
    ran: list[str] = []
    assert stage_main("check_params", lambda p: ran.append("check_params"), bad) == 2
    assert "benchmark.arms names unknown arm 'nosuch'" in capsys.readouterr().err and not ran
    assert stage_main("reference", lambda p: ran.append(p.benchmark.arms[1]), bad) == 0
    assert ran == ["nosuch"] and torch.get_num_threads() == threads
