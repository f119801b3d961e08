"""A new corrector's first reading (draftlab.pipeline.reading): it starts from a finished replicate's plain drafter
and the world's base, trains only the arm's variants and the control, benchmarks dflash, dflash-long and the arm at
T=0, is written once and timed, and bad input is one line. The stages are stub scripts (the real ones are the
pipeline's; `docs/toy-world.md` gives the measured time of a real reading)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import stub_launch, stub_world
from draftlab import paths
from draftlab.errors import DraftlabError
from draftlab.pipeline import reading as G
from draftlab.pipeline import replicate as R

STUB = """import sys, yaml, json, pathlib
p = yaml.safe_load(open("params.yaml"))
for f in ("models/target/model.safetensors", "models/drafter/pretrained/model.safetensors", "prompts/x.jsonl"):
    assert pathlib.Path(f).exists(), f
pathlib.Path("results").mkdir(exist_ok=True)
json.dump({"variants": p["corrector"]["variants"], "arms": p["benchmark"]["arms"]},
          open(f"results/{pathlib.Path(sys.argv[0]).stem}.json", "w"))
"""
PARAMS = {"profile": {"seed": 0}, "tracking": {"enabled": False},
          "corrector": {"variants": ["dcoco", "nopair", "lilicorr"], "control": True, "seed": 0,
                        "variant_steps": {"dcoco": 592, "lilicorr": 184}},
          "benchmark": {"arms": ["ar", "dflash", "dcoco", "lilicorr"], "ablation_arms": ["dcoco-nopair"],
                        "sampled_arms": ["ar", "dflash"], "concurrency": [1, 16], "concurrency_arms": ["ar"],
                        "temperatures": [0.0, 1.0], "pairs": [["dcoco", "dflash"]]}}


@pytest.fixture()
def world(tmp_path: Path) -> Path:
    return stub_world(tmp_path, PARAMS, {"b": "import sys\n"}, "cd" * 32)  # b: a replicate's stage (stub)


def replicate(world: Path, seed: int) -> Path:
    """A finished replicate with its plain drafter (stub stages)."""
    R.run_replicate(world, seed, stages=("b",), log=lambda m: None, launch=stub_launch(world))
    folder = R.folder_for(world, R.read_base(world)[1]["target_md5"][:12], seed)
    (folder / paths.PLAIN_DRAFTER).mkdir(parents=True)
    (folder / paths.PLAIN_DRAFTER / "model.safetensors").write_bytes(b"drafter")
    return folder


def read(world: Path, arm: str, seed: int = 1, **kw) -> dict:
    (world.parent / "scripts" / "c.py").write_text(STUB)
    return G.first_reading(world, arm, seed, log=lambda m: None, stages=("c",),
                           launch=stub_launch(world), **kw)


def test_a_reading_trains_the_arms_variants_and_benchmarks_it_beside_the_control(world: Path):
    R.freeze_base(world)
    with pytest.raises(DraftlabError, match="no finished replicate seed 1 .*replicate --seed 1"):
        read(world, "lilicorr")
    replicate(world, 1)
    rec = read(world, "lilicorr")
    out = G.reading_folder(world, rec["target_md5"][:12], "lilicorr", 1)
    assert rec["status"] == "complete" and rec["variants"] == ["lilicorr"] and rec["times"]["c"]["wall_s"] >= 0
    assert json.loads((out / "results" / "c.json").read_text()) == {"variants": ["lilicorr"],
                                                                    "arms": ["dflash", "dflash-long", "lilicorr"]}
    p = yaml.safe_load((out / paths.PARAMS).read_text())
    assert p["corrector"]["control"] is True and p["benchmark"]["temperatures"] == [0.0]
    assert p["corrector"]["variant_steps"] == {"lilicorr": 184}  # the arm's own budget; the others' are not trained
    assert p["benchmark"]["pairs"][0] == ["lilicorr", "dflash-long"] and not p["benchmark"]["sampled_arms"]
    assert (out / paths.PLAIN_DRAFTER).is_symlink() and (out / paths.PLAIN_DRAFTER / "model.safetensors").exists()
    assert json.loads((out / G.READING).read_text()) == rec  # its own record, beside the replicates' ones
    with pytest.raises(DraftlabError, match="is finished .*written once"):
        read(world, "lilicorr")
    assert read(world, "dcoco-nopair")["variants"] == ["nopair"]  # the variants an arm decodes, from the grammar


def test_seed_0_reads_from_the_worlds_own_plain_drafter_kept_in_its_base(world: Path, tmp_path: Path):
    """A world frozen without replicates (the drift world) keeps its plain drafter in its base: seed 0 starts there,
    with the world's own params; a base frozen before a drafter trained says so in one line."""
    bare = tmp_path / "bare"
    import shutil

    shutil.copytree(world, bare)
    R.freeze_base(bare)
    with pytest.raises(DraftlabError, match="holds no plain drafter .*--seed N"):
        read(bare, "lilicorr", seed=0)
    (world / paths.PLAIN_DRAFTER).mkdir(parents=True)
    (world / paths.PLAIN_DRAFTER / "model.safetensors").write_bytes(b"frozen drafter")
    base = R.freeze_base(world)
    assert base["drafter_md5"] == R.md5_file(world / paths.PLAIN_DRAFTER / "model.safetensors")
    rec = read(world, "dcoco", seed=0)
    out = G.reading_folder(world, base["target_md5"][:12], "dcoco", 0)
    assert rec["status"] == "complete" and (out / paths.PLAIN_DRAFTER / "model.safetensors").read_bytes() == b"frozen drafter"
    assert yaml.safe_load((out / paths.PARAMS).read_text())["corrector"]["variants"] == ["dcoco"]


@pytest.mark.parametrize("arm, msg", [("dflash-long", "is what every reading compares with"),
                                      ("ar", "decodes no trained corrector variant"),
                                      ("nosuch-arm", "reading: .*nosuch-arm")])
def test_bad_input_is_one_line(world: Path, arm: str, msg: str):
    R.freeze_base(world)
    replicate(world, 1)
    with pytest.raises(DraftlabError, match=msg) as e:
        read(world, arm)
    assert "\n" not in str(e.value)
