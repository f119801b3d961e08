"""Run the whole DVC pipeline on the `smoke` profile in a scratch copy (.smoke/) of the working tree (its corrector
runs shortened: SHORT_RUNS).

The copy gets params.yaml composed with profile=smoke, its own DVC cache and MLflow store, so the
committed metrics/ and dvc.lock are never touched. Re-running is incremental (DVC skips stages
whose inputs did not change). Extra arguments are Hydra overrides, e.g. `target=tiny-random`.
The run also benchmarks the example local suite (examples/my_prompts.jsonl as `my-prompts`) and
checks that it reached results/benchmark.json, and that the seeded drafter's outputs
(models/drafter/seeded, its comparison table and the `dflash-seeded` arm) are there, and, with `seeded.methods`
(the smoke default), that the method stages recorded the seeded drafter as their base and its `-seeded` arms ran;
MLflow runs are tagged with this repository's commit.
Then each toy world (config.sections.WORLD_PROFILES: worlds/toy, docs/toy-world.md; worlds/drift,
docs/drift-world.md) at tiny size in the same scratch copy: its world and prompt files as committed, a 2-layer target
of width 32 trained for 600 steps (a step count, not seconds: a slow machine must train the same target), every stage
at the smoke profile's sizes,
the world frozen at its own hash so the method stages run, all of them beside the main pipeline (each world's folder a
DVC repository of its own in the scratch copy; `--no-toy` skips them, `--toy-only` runs only them).
Open the result in the explorer with `draftlab explore --root .smoke` (`--root .smoke/worlds/toy`: the toy run).
"""
import sys

if __name__ == "__main__":
    if "-h" in sys.argv[1:] or "--help" in sys.argv[1:]:
        print(__doc__.strip())
        raise SystemExit(0)
    from draftlab.pipeline.smoke import main

    raise SystemExit(main(sys.argv[1:]))
