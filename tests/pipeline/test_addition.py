"""An addition to a world's replicated reading (draftlab.pipeline.addition): its plan comes first and fixes the arms and
temperatures; a run decodes a finished replicate's own models (or, with a labelled recipe, makes its references and
trains the recipe's variants again), is written once and laid out as a replicate, so `draftlab verdicts` reads it; bad
input is one line. Stub stage scripts (the real ones are the pipeline's). And the calibration of an addition's rounds
(draftlab.pipeline.calibration) on a small rounds file: marks counted where the arm proposed and where the target wrote
them, slot acceptance as shares of rounds, runs summed."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import stub_launch, stub_world
from draftlab import paths
from draftlab.errors import DraftlabError
from draftlab.pipeline import addition as A
from draftlab.pipeline import calibration as C
from draftlab.pipeline import replicate as R
from test_first_reading import PARAMS, replicate

STUB = """import sys, yaml, json, pathlib
p = yaml.safe_load(open("params.yaml"))
pathlib.Path("results").mkdir(exist_ok=True)
seen = {f: pathlib.Path(f).exists() for f in ("models/target/model.safetensors", "data/references.parquet",
                                             "models/drafter/pretrained/model.safetensors", "models/corrector")}
json.dump({"arms": p["benchmark"]["arms"], "temps": p["benchmark"]["temperatures"], "seen": seen,
           "variants": p["corrector"]["variants"], "ref_t": p.get("reference", {}).get("temperature")},
          open(f"results/{pathlib.Path(sys.argv[0]).stem}.json", "w"))
"""
HASH = "ab" * 32
PLAN = f"""world_hash: {HASH}
replicates: 1
primary:
  - [dcoco-sampled, dcoco, 1]
  - [dcoco-sampled, dflash, 1]
"""


@pytest.fixture()
def world(tmp_path: Path) -> Path:
    params = {**PARAMS, "reference": {"temperature": 0.0}}
    w = stub_world(tmp_path, params, {"b": "import sys\n", **{s: STUB for s in ("check_params", "reference", "corrector",
                                                                               "benchmark")}}, HASH)
    R.freeze_base(w)
    return w


def run(world: Path, name: str = "t1", seed: int = 1, **kw) -> dict:
    from draftlab.verdicts.plan import PLAN, read_plan

    plan = read_plan(A.addition_folder(world, name) / PLAN)  # as tools/toy_world.py reads it, first
    return A.run_addition(world, name, seed, plan, log=lambda m: None,
                          launch=stub_launch(world), **kw)


def test_an_addition_decodes_the_replicates_models_under_its_own_plan(world: Path):
    with pytest.raises(DraftlabError, match="no analysis plan .*analysis_plan.yaml"):
        run(world)
    home = A.addition_folder(world, "t1")
    home.mkdir(parents=True)
    (home / "analysis_plan.yaml").write_text(PLAN)
    with pytest.raises(DraftlabError, match="no finished replicate seed 1 .*replicate --seed 1"):
        run(world)
    src = replicate(world, 1)
    (src / paths.CORRECTORS).mkdir(parents=True)
    (src / "models" / "drafter" / "seeded").mkdir(parents=True)  # another drafter the replicate trained
    rec = run(world)
    out = R.folder_for(home, rec["target_md5"][:12], 1)
    assert rec["status"] == "complete" and rec["stages"] == ["check_params", "benchmark"]
    got = json.loads((out / "results" / "benchmark.json").read_text())
    assert got["arms"] == ["dcoco-sampled", "dcoco", "dflash"] and got["temps"] == [1.0]
    assert all(got["seen"].values())  # the base's target and references, the replicate's drafter and correctors
    assert (out / paths.CORRECTORS).is_symlink() and (out / paths.REFERENCES).is_symlink()
    assert (out / "models" / "drafter" / "seeded").is_symlink()  # every drafter: a seeded or SpecOPD arm reads its own
    assert R.list_replicates(home)[0][1]["status"] == "complete"  # what `draftlab verdicts --world` reads
    with pytest.raises(DraftlabError, match="is finished .*written once"):
        run(world)


def test_a_labelled_recipe_makes_its_references_and_trains_its_variants(world: Path):
    home = A.addition_folder(world, "refs")
    home.mkdir(parents=True)
    (home / "analysis_plan.yaml").write_text(PLAN)
    (home / A.RECIPE).write_text("about: t1 references\noverrides: {reference.temperature: 1.0}\ntrain: [dcoco]\n")
    replicate(world, 1)
    rec = run(world, "refs")
    out = R.folder_for(home, rec["target_md5"][:12], 1)
    assert rec["stages"] == ["check_params", "reference", "corrector", "benchmark"]
    got = json.loads((out / "results" / "corrector.json").read_text())
    assert got["variants"] == ["dcoco"] and got["ref_t"] == 1.0
    assert not got["seen"]["data/references.parquet"] and not got["seen"]["models/corrector"]  # made here, not linked
    p = yaml.safe_load((out / paths.PARAMS).read_text())
    assert p["corrector"]["control"] is False and p["corrector"]["variant_steps"] == {"dcoco": 592}
    replicate(world, 2)
    (home / A.RECIPE).write_text("overrides: {reference.nope: 1}\n")
    with pytest.raises(DraftlabError, match="reference.nope is not a params key") as e:
        run(world, "refs", seed=2)
    (home / A.RECIPE).write_text("train: dcoco\nsteps: 3\n")
    with pytest.raises(DraftlabError, match="unknown: steps") as e:
        run(world, "refs", seed=2)
    assert "\n" not in str(e.value)


def test_calibration_counts_marks_and_slots(tmp_path: Path, monkeypatch):
    import pandas as pd

    monkeypatch.setattr(C, "mark_ids", lambda folder: {"+": 7, "-": 8})
    rows = [  # arm, suite, T, accepted, proposals, committed
        ("dcoco", "fill", 1.0, 2, [7, 5, 7], [7, 5, 8, 0]),  # emits 7 5 8: marks + and -
        ("dcoco", "fill", 1.0, 0, [7, 5, 7], [8, 0, 0, 0]),  # emits 8
        ("dcoco", "copy", 0.0, 3, [7, 7, 7], [7, 7, 7, 7]),  # T=0: not read
        ("dflash", "fill", 1.0, 1, [8, 5, 5], [8, 7, 0, 0]),
    ]
    df = pd.DataFrame(rows, columns=["arm", "suite", "temperature", "accepted", "proposals", "committed"])
    (tmp_path / "data").mkdir()
    df.to_parquet(tmp_path / paths.BENCH_ROUNDS)
    got = C.run_calibration(tmp_path)
    d = got["dcoco"]["1"]
    assert d["rounds"] == 2 and d["accepted"] == [1, 1, 0] and d["accept_share"] == [0.5, 0.5, 0.0]
    assert d["marks"] == {"proposed": 4, "proposed_plus": 4, "emitted": 3, "emitted_plus": 1}
    total = C.summed({"a": got, "b": got})
    assert total["dcoco"]["1"]["proposed_plus_share"] == 1.0 and total["dcoco"]["1"]["emitted_plus_share"] == 0.3333
    assert total["dflash"]["1"]["marks"]["proposed"] == 2 and total["dflash"]["1"]["rounds"] == 2
