"""The pipeline's file layout in one table: every file and folder a stage of dvc.yaml writes (relative to the
repository root), the stage that writes it and whether DVC caches it. The stages, the benchmark's report, the
`draftlab` CLI and the explorer all read their paths here; tests/test_paths.py holds the table equal to
dvc.yaml's outs, metrics and plots. Plain strings: nothing here reads or writes a file."""
from __future__ import annotations

import os
from dataclasses import dataclass

DVC_YAML = "dvc.yaml"
PARAMS = "params.yaml"
RESULTS = "results"  # results/<stage>.json: the full detail of every stage (DVC outs, not metrics)
METRICS = "metrics"  # metrics/<stage>.json or metrics/<stage>/<row>.json: the headline numbers (DVC metrics)
PLOTS_DIR = "plots"
WORK = "checkpoints"  # checkpoints/<stage>/: resumable runs, feature caches (git-ignored, not DVC outputs)

CHECKS = "data/checks"  # check_params: params.ok, reference_prompts.json, benchmark_prompts.json
TARGET = "models/target"  # prepare_target
REFERENCES = "data/references.parquet"  # reference
REFERENCE_SHARDS = "data/references.shards"  # reference: finished shards of an interrupted run (not an out)
PLAIN_DRAFTER = "models/drafter/pretrained"  # pretrain_drafter: the plain drafter (the dflash arm)
SEEDED_DRAFTER = "models/drafter/seeded"  # pretrain_seeded: the seeded drafter (the dflash-seeded arm)
SPECOPD_DRAFTER = "models/drafter/specopd"  # specopd: t0/ (greedy τ) and t1/ (T=1) states
LONG_DRAFTER = "models/drafter/long"  # corrector: the dflash-long control
CORRECTORS = "models/corrector"  # corrector: <variant>/drafter, <variant>/corrector
PRETRAIN_FEATURES = "checkpoints/pretrain_drafter/features"  # the plain run's tap-feature cache, reused downstream
BENCH_DETAIL = "results/benchmark.json"
BENCH_HEADLINE = "metrics/benchmark"  # one small DVC metrics file per arm
BENCH_ROUNDS = "data/benchmark_rounds.parquet"  # per-round rows for the explorer
BENCH_RECORD = "checkpoints/benchmark"  # finished batch groups of an interrupted run (benchmark.resume)
LEGACY_BENCH_DETAIL = "metrics/benchmark.json"  # before the headline/detail split: the detail was a DVC metric
BENCH_PLOTS = {
    "tau_per_slot": "plots/benchmark_tau_per_slot.csv",
    "coverage": "plots/benchmark_coverage.csv",
    "speedup": "plots/benchmark_speedup.csv",
    "concurrency": "plots/benchmark_concurrency.csv",
    "peers": "plots/benchmark_peers.csv",
    "positions": "plots/benchmark_positions.csv",
}
CURVES = {  # each training stage's budget curve (simulated τ vs training minutes)
    "pretrain_drafter": "plots/pretrain_budget.csv",
    "pretrain_seeded": "plots/pretrain_seeded_budget.csv",
    "specopd": "plots/specopd_budget.csv",
}


@dataclass(frozen=True)
class Checkpoints:
    """The trained models' folders one benchmark reads (a paths record: draftlab.pipeline.layout.checkpoints
    fills it from this table, with the plain drafter the benchmark section names)."""

    drafter: str  # the pretrained drafter (the dflash arm)
    specopd_drafter: str  # the specopd stage's folder: t0/ (greedy-τ state) and t1/ (T=1 state)
    long_drafter: str  # the dflash-long control
    correctors: str  # the corrector stage's root: <variant>/drafter and <variant>/corrector
    seeded_drafter: str = ""  # the seeded drafter (drafter.seed=lookup, docs/algorithms.md "Seeded block drafting"): the dflash-seeded arm


def results(stage: str) -> str:
    return f"{RESULTS}/{stage}.json"


def metrics(stage: str) -> str:
    return f"{METRICS}/{stage}.json"


def work(stage: str) -> str:
    return f"{WORK}/{stage}"


@dataclass(frozen=True)
class Output:
    """One declared output of a stage: its path, the stage, the dvc.yaml list it sits in and whether DVC caches it."""

    path: str
    stage: str
    kind: str = "outs"  # outs | metrics | plots
    cached: bool = False


def _reports(stage: str, headline: str | None = None, curve: str | None = None) -> tuple[Output, ...]:
    out = [Output(results(stage), stage)]
    if headline:
        out.append(Output(headline, stage, "metrics"))
    if curve:
        out.append(Output(curve, stage, "plots"))
    return tuple(out)


OUTPUTS: tuple[Output, ...] = (
    *(Output(f"{CHECKS}/{f}", "check_params") for f in ("params.ok", "reference_prompts.json", "benchmark_prompts.json")),
    Output(TARGET, "prepare_target", cached=True), *_reports("prepare_target"),
    Output(REFERENCES, "reference", cached=True), *_reports("reference"),
    Output(PLAIN_DRAFTER, "pretrain_drafter", cached=True),
    *_reports("pretrain_drafter", metrics("pretrain_drafter"), CURVES["pretrain_drafter"]),
    Output(SEEDED_DRAFTER, "pretrain_seeded", cached=True),
    *_reports("pretrain_seeded", metrics("pretrain_seeded"), CURVES["pretrain_seeded"]),
    Output(SPECOPD_DRAFTER, "specopd", cached=True), *_reports("specopd", metrics("specopd"), CURVES["specopd"]),
    Output(CORRECTORS, "corrector", cached=True), Output(LONG_DRAFTER, "corrector", cached=True),
    *_reports("corrector", f"{METRICS}/corrector"),
    Output(BENCH_ROUNDS, "benchmark", cached=True), *_reports("benchmark", BENCH_HEADLINE),
    *(Output(p, "benchmark", "plots") for p in BENCH_PLOTS.values()),
)


def producer(path: str) -> Output | None:
    """The declared output that holds `path` (the output itself or a file inside a declared folder), or None."""
    target = os.path.normpath(os.path.relpath(path))
    for out in OUTPUTS:
        if target == out.path or target.startswith(out.path + os.sep):
            return out
    return None


def rebuild_hint(path: str) -> str:
    """"; stage 'X' writes it: rebuild with ..." for the stage whose output holds `path` (empty when none does)."""
    out = producer(path)
    if out is None:
        return ""
    restore = f" (or restore the last version: dvc checkout {out.path})" if out.cached else ""
    return f"; stage '{out.stage}' writes it: rebuild with `dvc repro -f -s {out.stage}`{restore}"
