"""The toy world's commands (tools/toy_world.py is their console, run in a world's folder): each takes its options and
returns what the command prints, one line in a DraftlabError for bad input. `prompts` and `ideal` read the world from
a target preset; `report` and `properties` the world folder's params and outputs; `replicate`, `reading` and
`addition` are draftlab.pipeline.replicate / reading / addition."""
from __future__ import annotations

import json
from pathlib import Path

from draftlab import paths
from draftlab.errors import DraftlabError


def preset_world(preset: str | None):
    """The WorldConfig of a target preset's `toy.world` (default: ../../conf/target/<this folder>.yaml; one line when
    the file cannot be read)."""
    import yaml

    from draftlab.config.sections import ToyTargetConfig
    from draftlab.toy.world import world_config

    preset = preset or f"../../conf/target/{Path.cwd().name}.yaml"
    try:
        doc = yaml.safe_load(Path(preset).read_text())
    except OSError as e:
        raise DraftlabError(f"--preset {preset}: cannot read it ({e.strerror}); run from the world's folder "
                            f"(worlds/<name>) or pass --preset PATH") from None
    return world_config(ToyTargetConfig(world=((doc or {}).get("toy") or {}).get("world") or {}))


def prompts(preset: str | None, out: str, train: int, evaluation: int) -> dict:
    from draftlab.toy.world import write_prompts

    return write_prompts(preset_world(preset), out, train, evaluation)


def ideal(preset: str | None, out: str, examples: int, block: int, k: int) -> dict:
    from draftlab.pipeline.toy.properties import write
    from draftlab.toy.ideal import ideal_properties

    if min(examples, block - 1, k) < 1:
        raise DraftlabError(f"ideal: --examples {examples}, --block {block} and --k {k} must be >= 1, 2 and 1")
    found = ideal_properties(preset_world(preset), examples, block, k)
    write(out, found)
    return {f: {k: round(v, 3) for k, v in d.items() if k.startswith("tau")}
            for f, d in found["families"].items()} | {"high_entropy_share": found["high_entropy_share"]}


def world_params():
    """This folder's params, refused in one line when it is not a toy world's."""
    from draftlab.params import load_params
    from draftlab.pipeline.names import arm_names, method_names

    params = load_params(paths.PARAMS, [], arms=arm_names(), names=method_names())
    if params.target.source != "toy":
        raise DraftlabError(f"target.source={params.target.source!r}: these commands are for a toy world's folder "
                            f"(target.source=toy; cd worlds/toy)")
    return params


def read(stage: str) -> dict:
    return json.loads(Path(paths.results(stage)).read_text())


def report(out: str) -> dict:
    import pandas as pd

    from draftlab.pipeline.toy.properties import write
    from draftlab.pipeline.toy.report import prompt_taus, report as make_report

    params = world_params()
    missing = [f for f in (paths.results("benchmark"), paths.results("pretrain_drafter"), paths.BENCH_ROUNDS)
               if not Path(f).exists()]
    if missing:  # the rounds are a DVC output (not in git): a fresh clone's world has its results but not them
        raise DraftlabError(f"no {', '.join(missing)} here yet: run the world's pipeline first (dvc repro dvc.yaml; "
                            f"`dvc repro -s benchmark dvc.yaml` writes the rounds when its models are there)")
    opt = lambda s: read(s) if Path(paths.results(s)).exists() else None  # noqa: E731
    taus = prompt_taus(pd.read_parquet(paths.BENCH_ROUNDS), params.benchmark.batch_size)
    rep = make_report(read("benchmark"), read("pretrain_drafter"), opt("corrector"), opt("specopd"),
                      params.drafter.block_size, taus)
    write(out, rep)
    return {"overall_pairs": rep["overall_pairs"], "ceilings": rep["ceilings"],
            "consistency": {k: v for k, v in rep["consistency"].items() if k != "per_slot"}}


def properties(out: str, prompts_per_family: int) -> dict:
    from draftlab.pipeline.layout import checkpoints
    from draftlab.pipeline.toy.properties import measure, write
    from draftlab.verifier.load import load_target

    params = world_params()
    target = load_target(paths.TARGET, device="cpu", dtype="float32")
    props = measure(params, target, paths.TARGET, read("prepare_target"), paths.REFERENCES, read("pretrain_drafter"),
                    checkpoints(params.benchmark.drafter), prompts_per_family)
    write(out, props)
    return {"verdicts": props["verdicts"], "holds": props["holds"]}
