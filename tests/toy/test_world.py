"""The toy world inside the pipeline (draftlab.toy.world, draftlab.pipeline.worlds): its config read from
`target.toy` with one-line errors, its prompt files written deterministically from disjoint seed ranges, the freeze
that the method stages check, and the world's DVC project written from the root dvc.yaml."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import ROOT
from draftlab.config.sections import ToyTargetConfig
from draftlab.errors import ConfigError, DraftlabError
from draftlab.toy.freeze import METHOD_STAGES, WORLD_STAGES, check_frozen
from draftlab.toy.world import train_config, world_config, write_prompts


def small_world() -> dict:
    return {"families": [{"name": "copy", "lengths": [48, 50]}, {"name": "reverse", "lengths": [48, 50]}],
            "alphabet": 60}


def test_the_world_and_recipe_come_from_target_toy_with_one_line_errors():
    toy = ToyTargetConfig(world=small_world(), train={"layers": 2, "hidden": 32, "betas": [0.9, 0.95]})
    w = world_config(toy)
    assert [f.name for f in w.families] == ["copy", "reverse"] and w.alphabet == 60
    assert train_config(toy).betas == (0.9, 0.95)
    for bad, msg in ((ToyTargetConfig(world={"colour": 1}), "target.toy.world: .*unknown keys"),
                     (ToyTargetConfig(world={"families": [{"name": "juggle"}]}), "target.toy.world: .*juggle"),
                     (ToyTargetConfig(train={"depth": 3}), r"target.toy.train has unknown keys \['depth'\]"),
                     (ToyTargetConfig(world=small_world(), train={"mix": [["drift", 3], ["copy", 1]]}),
                      r"target.toy.train.mix names 'drift', a family this world lacks \(its families: copy, reverse\)")):
        with pytest.raises(ConfigError, match=msg) as e:
            world_config(bad) if msg.startswith("target.toy.world") else train_config(bad)
        assert "\n" not in str(e.value)


def test_prompt_files_are_deterministic_and_from_disjoint_splits(tmp_path):
    w = world_config(ToyTargetConfig(world=small_world()))
    a = write_prompts(w, tmp_path / "a", 12, 5)
    b = write_prompts(w, tmp_path / "b", 12, 5)
    assert a == b and a["files"] == {"train.jsonl": 12, "copy.jsonl": 5, "reverse.jsonl": 5}
    for name in a["files"]:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    rows = {n: [json.loads(x) for x in (tmp_path / "a" / n).read_text().splitlines()] for n in a["files"]}
    train_ids = {r["id"] for r in rows["train.jsonl"]}
    eval_ids = {r["id"] for n in ("copy.jsonl", "reverse.jsonl") for r in rows[n]}
    assert all(i.startswith("train-") for i in train_ids) and all(i.startswith("eval-") for i in eval_ids)
    assert all(r["prompt"].startswith("copy : ") for r in rows["copy.jsonl"])
    from draftlab.data.suites import load_local_file  # the pipeline's own reader takes them as they are

    assert len(load_local_file(tmp_path / "a" / "copy.jsonl", "copy")) == 5
    assert json.loads((tmp_path / "a" / "world.json").read_text())["world_hash"] == w.config_hash()


def test_the_method_stages_refuse_a_world_that_is_not_the_frozen_one(tmp_path):
    toy = ToyTargetConfig(world=small_world())
    h = world_config(toy).config_hash()
    for stage in WORLD_STAGES:  # the world's own stages run before the freeze
        check_frozen(stage, toy, tmp_path)
    (tmp_path / "toy_world.json").write_text(json.dumps({"world_hash": h}))
    cases = [(toy, "is not frozen"),
             (ToyTargetConfig(world={**small_world(), "alphabet": 61}, frozen_hash=h), "not the frozen"),
             (ToyTargetConfig(world=small_world(), frozen_hash=h), None)]
    for cfg, msg in cases:
        for stage in METHOD_STAGES:
            if msg is None:
                check_frozen(stage, cfg, tmp_path)
                continue
            with pytest.raises(DraftlabError, match=msg) as e:
                check_frozen(stage, cfg, tmp_path)
            assert "\n" not in str(e.value) and stage in str(e.value)
    (tmp_path / "toy_world.json").write_text(json.dumps({"world_hash": "0" * 64}))
    with pytest.raises(DraftlabError, match="was trained on world 000000000000"):
        check_frozen("benchmark", ToyTargetConfig(world=small_world(), frozen_hash=h), tmp_path)
    with pytest.raises(ConfigError, match="frozen_hash"):
        ToyTargetConfig(frozen_hash="abc").check("target.toy")


def test_a_world_folder_runs_the_root_pipeline_from_its_own_dvc_project():
    """worlds/toy/dvc.yaml is the root's stages with every command and code dependency reached from the folder and
    every data path left in it (that the committed file is the generated one: tests/pipeline/test_dvc_yaml.py)."""
    from draftlab.pipeline.worlds import world_dvc

    root = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    world = world_dvc(root, "worlds/toy")
    assert list(world["stages"]) == list(root["stages"])
    for name, st in world["stages"].items():
        assert st["cmd"] == root["stages"][name]["cmd"]  # a module, not a path: the same command
        for dep in st.get("deps", []):
            d = dep if isinstance(dep, str) else next(iter(dep))
            assert d.startswith("../../") == d[6:].startswith(("src/", "conf/", "tools/"))
        assert st.get("outs") == root["stages"][name].get("outs")  # outputs stay in the world's folder


def test_bad_input_in_the_toy_world_is_one_line(tmp_path):
    """A toy profile with an LLM target (and the toy target with another profile), a prompt with a word outside the
    toy target's vocabulary, a suite for a family the world does not have: one line each."""
    from draftlab.data.templates import encode_prompt
    from draftlab.params import compose_params, build_params
    from draftlab.toy.tasks import WorldConfig, example
    from draftlab.toy.tokenizer import build_tokenizer

    conf = ROOT / "conf"
    for ovs in (["target=toy"], ["target=toy", "profile=smoke"]):
        with pytest.raises(ConfigError, match=r"a world's profile \(toy, drift\) runs that world's toy target") as e:
            build_params(compose_params(ovs, conf))
        assert "\n" not in str(e.value)
    world = WorldConfig.from_dict(small_world())
    tok = build_tokenizer(world)
    ids, _ = encode_prompt(tok, example(world, "eval", 0, family="copy").prompt)
    assert tok.unk_token_id not in ids
    with pytest.raises(DraftlabError, match=r"outside the target's vocabulary \('zebra'\)") as e:
        encode_prompt(tok, "copy : a b zebra")
    assert "\n" not in str(e.value)
    with pytest.raises(DraftlabError, match="'sort' is not in this toy world") as e:
        example(world, "eval", 0, family="sort")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("name", ["toy", "drift"])
def test_the_committed_prompts_are_the_preset_worlds(tmp_path, name):
    """worlds/<name>/prompts/ is what `toy_world.py prompts` writes from conf/target/<name>.yaml's world: a change of
    the world without new prompt files (or the reverse) fails here."""
    committed = ROOT / "worlds" / name / "prompts"
    preset = yaml.safe_load((ROOT / "conf" / "target" / f"{name}.yaml").read_text())
    world = world_config(ToyTargetConfig(world=preset["toy"]["world"]))
    sizes = {name: sum(1 for _ in (committed / name).open()) for name in (p.name for p in committed.glob("*.jsonl"))}
    fams = [f.name for f in world.families]
    assert set(sizes) == {"train.jsonl", *(f"{f}.jsonl" for f in fams)}
    write_prompts(world, tmp_path, sizes["train.jsonl"], sizes[f"{fams[0]}.jsonl"])
    for name in sorted(p.name for p in committed.iterdir()):
        assert (tmp_path / name).read_bytes() == (committed / name).read_bytes(), name



def test_the_drift_worlds_ideal_properties_are_what_the_command_writes(tmp_path):
    """worlds/drift/results/ideal.json (docs/drift-world.md's table) is what `toy_world.py ideal` computes from the
    committed preset; bad input is one line."""
    import subprocess
    import sys

    world = ROOT / "worlds" / "drift"
    tool = [sys.executable, str(ROOT / "tools" / "toy_world.py"), "ideal"]
    r = subprocess.run([*tool, "--out", str(tmp_path / "ideal.json")], cwd=world, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "ideal.json").read_text()) == json.loads((world / "results" / "ideal.json").read_text())
    for args, msg in ((["--examples", "0"], "ideal: --examples 0"), (["--preset", "nosuch.yaml"], "--preset nosuch.yaml")):
        r = subprocess.run([*tool, *args, "--out", str(tmp_path / "bad.json")], cwd=world, capture_output=True,
                           text=True)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and msg in r.stderr, r.stderr
    assert not (tmp_path / "bad.json").exists()


def test_the_drift_worlds_ledger_keeps_its_rules():
    """worlds/drift/settings.yaml (the issue's ledger): valid YAML, settings numbered 1, 2, ... with no gap, at most
    four, each naming its world's hash (64 hex digits), its date and a verdict; the last one's world is the preset's
    (what the world's stages run now)."""
    ledger = yaml.safe_load((ROOT / "worlds" / "drift" / "settings.yaml").read_text())["settings"]
    assert [s["setting"] for s in ledger] == list(range(1, len(ledger) + 1)) and len(ledger) <= 4
    for s in ledger:
        assert len(s["world_hash"]) == 64 and set(s["world_hash"]) <= set("0123456789abcdef"), s["setting"]
        assert str(s["date"]) and s["verdict"].strip(), s["setting"]
    preset = yaml.safe_load((ROOT / "conf" / "target" / "drift.yaml").read_text())["toy"]
    assert ledger[-1]["world_hash"] == world_config(ToyTargetConfig(world=preset["world"])).config_hash()


def test_decode_asks_the_toy_target_only_for_its_worlds_families():
    """`draftlab decode` in the toy world's folder with a prompt of a family the world (and so its target) was not
    trained on, or with no task word at all: one line, before any model is loaded."""
    import os
    import subprocess
    import sys

    draftlab = Path(sys.executable).parent / "draftlab"
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_WAIT_POLICY="PASSIVE")
    world = ROOT / "worlds" / "toy"
    trained = [f["name"] for f in yaml.safe_load((world / "params.yaml").read_text())["target"]["toy"]["world"]["families"]]
    for prompt, msg in (("sort : a b c", f"error: task family 'sort' is not in this toy world (it has {trained})"),
                        ("hello there", "error: not a toy-world prompt (expected '<task> : ...'")):
        r = subprocess.run([str(draftlab), "decode", "--root", str(world), "--arm", "ar", "--prompt", prompt],
                           cwd=world, capture_output=True, text=True, timeout=120, env=env)
        lines = [x for x in (r.stdout + r.stderr).splitlines() if x.strip()]
        assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith(msg), r.stdout + r.stderr
