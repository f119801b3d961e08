"""Replicates (draftlab.pipeline.replicate): write-once folders with the replicate's seeds, the base shared and
checked, every stage timed into the record, nothing overwritten, bad input in one line. The stages here are stub
scripts (the real ones run in the toy world's replicates; their code path is the command `dvc repro` runs)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import stub_launch, stub_world
from draftlab import paths
from draftlab.errors import DraftlabError
from draftlab.pipeline import replicate as R

STUB = """import sys, yaml, json, pathlib
p = yaml.safe_load(open("params.yaml"))
pathlib.Path("results").mkdir(exist_ok=True)
name = pathlib.Path(sys.argv[0]).stem
json.dump({"seed": p["profile"]["seed"], "corrector_seed": p["corrector"]["seed"]}, open(f"results/{name}.json", "w"))
assert pathlib.Path("models/target/model.safetensors").exists() and pathlib.Path("prompts/x.jsonl").exists()
sys.exit(3 if pathlib.Path("../../../../fail_" + name).exists() else 0)
"""


@pytest.fixture()
def world(tmp_path: Path) -> Path:
    return stub_world(tmp_path, {"profile": {"seed": 0, "threads": 2}, "tracking": {"enabled": True}},
                      {"a": STUB, "b": STUB}, "ab" * 32)


def run(world: Path, seed: int, **kw) -> dict:
    return R.run_replicate(world, seed, stages=("a", "b"), log=lambda m: None, launch=stub_launch(world), **kw)


def test_a_replicate_runs_its_stages_with_its_seeds_in_a_write_once_folder(world: Path):
    with pytest.raises(DraftlabError, match="freeze the world's prepared target first"):
        run(world, 1)
    base = R.freeze_base(world)
    assert base["target_md5"] == R.md5_file(world / paths.TARGET / "model.safetensors")
    assert base["world_hash"] == "ab" * 32 and R.freeze_base(world) == base  # write-once: the same record again
    rec = run(world, 1)
    folder = R.folder_for(world, base["target_md5"][:12], 1)
    assert rec["status"] == "complete" and rec["done"] == ["a", "b"] and set(rec["times"]) == {"a", "b"}
    assert all(t["cpu_s"] >= 0 and t["wall_s"] >= 0 for t in rec["times"].values()) and rec["total"]["wall_s"] >= 0
    assert json.loads((folder / "results" / "a.json").read_text()) == {"seed": 1, "corrector_seed": 1}
    params = yaml.safe_load((folder / paths.PARAMS).read_text())
    assert params["tracking"]["enabled"] is False and all(
        params[k.split(".")[0]][k.split(".")[1]] == 1 for k in R.SEED_KEYS)
    assert (folder / paths.TARGET).is_symlink() and json.loads((folder / R.RECORD).read_text()) == rec
    # the same seed again is refused in one line, finished or not; another seed is a new folder
    with pytest.raises(DraftlabError, match="is finished .*choose another --seed"):
        run(world, 1)
    with pytest.raises(DraftlabError, match="is finished"):
        run(world, 1, resume=True)
    assert run(world, 2)["seed"] == 2
    assert [p.name for p, _ in R.list_replicates(world)] == ["seed-1", "seed-2"]


def test_a_failed_stage_is_one_line_and_resume_continues_after_the_stages_done(world: Path):
    R.freeze_base(world)
    (world.parent / "fail_b").write_text("")
    with pytest.raises(DraftlabError, match="stage b failed .*--resume"):
        run(world, 3)
    with pytest.raises(DraftlabError, match="unfinished .*stages done: a.*--resume continues it"):
        run(world, 3)
    (world.parent / "fail_b").unlink()
    rec = run(world, 3, resume=True)
    assert rec["status"] == "complete" and rec["done"] == ["a", "b"]


def test_a_changed_world_params_is_refused_when_resuming(world: Path):
    R.freeze_base(world)
    (world.parent / "fail_a").write_text("")
    with pytest.raises(DraftlabError):
        run(world, 4)
    (world / paths.PARAMS).write_text(yaml.safe_dump({"profile": {"seed": 0, "threads": 1}}))
    with pytest.raises(DraftlabError, match="differs from the world's params.yaml"):
        run(world, 4, resume=True)
