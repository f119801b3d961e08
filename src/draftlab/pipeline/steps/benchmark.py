"""Stage benchmark: AR vs speculative arms on the eval suites at T=0 / T=1 and a concurrency sweep
(the detail results/benchmark.json, the headline metrics/benchmark/<arm>.json, plots/benchmark_*.csv, the per-prompt
records results/benchmark_prompts.csv, data/benchmark_rounds.parquet).
The recipe is draftlab.pipeline.benchmark; this module passes the checkpoint folders the earlier
stages wrote, then writes the outputs and the MLflow run."""
from __future__ import annotations

from pathlib import Path

from draftlab import paths

DETAIL = Path(paths.BENCH_DETAIL)  # everything, with confidence intervals (an out, not a DVC metric)
HEADLINE = Path(paths.BENCH_HEADLINE)  # one small DVC metrics file per arm
ROUNDS = Path(paths.BENCH_ROUNDS)


def run(params) -> None:
    from tqdm import tqdm

    from dataclasses import fields

    from draftlab.bench.report import write_outputs
    from draftlab.bench.resume import discard, source_digest, tree_digest
    from draftlab.params import to_dict
    from draftlab.pipeline import layout
    from draftlab.pipeline.benchmark import BenchPaths, run as run_benchmark
    from draftlab import omp
    from draftlab.tracking import stage_run
    from draftlab.kernels.linear import describe, install
    from draftlab.verifier.load import load_target

    cfg, t = params.benchmark, params.target
    omp.configure(None, params.engine.threads)  # engine.threads (0: the profile's, set by the stage)
    target = load_target(paths.TARGET, t.device, t.dtype, t.attn_implementation)
    install(target.model, t.linear)  # every arm, AR and the HF peers included, runs the same linear layers
    print(f"[benchmark] linear layers: {describe(target.model)}; OpenMP: {omp.setup()}", flush=True)
    target.compile_steps(params.engine.resolved(target.device.type))  # engine.compile (auto: on CUDA only)
    checkpoints = layout.checkpoints(cfg.drafter)  # the folders the earlier stages wrote
    p = to_dict(params)
    bar = None

    def progress(total: int):
        nonlocal bar
        bar = tqdm(total=total, desc="benchmark", unit="gen")
        done = 0

        def tick(msg: str) -> None:
            nonlocal done
            done += 1
            bar.set_postfix_str(msg, refresh=False)
            bar.update(1)
            if bar.disable:  # no bar (TQDM_DISABLE=1: the offline runner's console file): one short line each
                print(f"[benchmark] {done}/{total} {msg}", flush=True)

        return tick

    logged = ("target", "data", "reference", "benchmark", "profile", "pld", "seeded")  # reference: the chat suite's carving
    with stage_run("benchmark", {k: p[k] for k in logged}, params.tracking,
                   {"target": t.name, "profile": params.profile.name}) as mlrun:
        # what else changes a measured number: the models the arms read and the code (bench/resume.py)
        key = {"models": tree_digest(paths.TARGET, *(getattr(checkpoints, f.name) for f in fields(checkpoints))),
               "source": source_digest(), "target": to_dict(t)} if cfg.resume else None
        detail, runs = run_benchmark(target, params, BenchPaths(checkpoints, paths.BENCH_RECORD), progress, key)
        if detail["setup"]["resumed"]["groups"]:
            print(f"[benchmark] resumed {detail['setup']['resumed']['groups']} finished batch groups from "
                  f"{paths.BENCH_RECORD}")
        if bar is not None:
            bar.close()
        detail["config"] = to_dict(params.benchmark)
        written = write_outputs(detail, runs.runs, DETAIL, HEADLINE, ROUNDS if cfg.record_rounds else None,
                                extra=runs.extra)
        discard(paths.BENCH_RECORD)  # the outputs hold it all now: a re-run measures again
        mlrun.log_metrics({"summary": detail["summary"], "suites": detail["suites"]})
        for path in written.values():  # the detail JSON, the headline folder, plot CSVs, per-round Parquet
            mlrun.log_artifact(path)
        for arm, e in detail["summary"].items():
            print(f"[benchmark] {arm}: " + ", ".join(f"{k}={v:.3g}" for k, v in e.items() if isinstance(v, float)))
        num = lambda v, f: "n/a" if v is None else format(v, f)  # noqa: E731  (no τ of its own: a reference row)
        for r in detail.get("pairs", []):
            nl = r.get("no_loop") or {}
            print(f"[benchmark] {r['pair']} ({r['a']} vs {r['b']}, {r['temperature']}"
                  f"{', ablation' if r.get('ablation') else ''}): Δτ {num(r['tau_diff'], '+.3f')} {r['tau_diff_ci']}, "
                  f"tokens/s ratio {num(r['tokens_per_s_ratio'], '.3f')} {r['tokens_per_s_ratio_ci']}; without looping "
                  f"prompts Δτ {num(nl.get('tau_diff'), '+.3f')}, ratio {num(nl.get('tokens_per_s_ratio'), '.3f')}")
        hw = detail["setup"].get("halfwidths") or {}
        print(f"[benchmark] took {detail['setup']['timing_s']['total'] / 60:.1f} min; headline pairs meet the T=0 "
              f"half-width targets {hw.get('targets')}: {hw.get('pairs_meet_targets_t0')}")
