"""The pipeline's file layout in one table: every file and folder a stage of dvc.yaml writes (relative to the
repository root), the stage that writes it and whether DVC caches it. The stages, the benchmark's report, the
`draftlab` CLI and the explorer all read their paths here; dvc.yaml's outs, metrics and plots are generated from
`OUTPUTS` (draftlab.pipeline.dvcgen; tests/pipeline/test_dvc_yaml.py), `TOOL_OUTPUTS` holds what the tools write,
and tests/test_path_literals.py fails on a pipeline path spelled anywhere else. Plain strings: nothing here reads or
writes a file."""
from __future__ import annotations

import os
from pathlib import Path
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
BENCH_PROMPT_RECORDS = "results/benchmark_prompts.csv"  # one row per (arm, T, prompt): committed, the verdicts' input
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
    Output(BENCH_ROUNDS, "benchmark", cached=True), Output(BENCH_PROMPT_RECORDS, "benchmark"),
    *_reports("benchmark", BENCH_HEADLINE),
    *(Output(p, "benchmark", "plots") for p in BENCH_PLOTS.values()),
)


# What the tools write (tools/*.py, tools/probes/*.py, through draftlab.measure / checks / offline): files no
# dvc.yaml stage declares and `dvc repro` never runs, so a table of their own beside OUTPUTS (which stays exactly
# dvc.yaml's). The tools take their default paths from these names.
GPU_CHECK = f"{METRICS}/gpu_check.json"
VERIFY_COST = f"{METRICS}/verify_cost.json"
VERIFY_COST_LINEAR = f"{METRICS}/verify_cost_linear.json"
VERIFY_COST_WIDTH = f"{METRICS}/verify_cost_width.json"
DECODE_POLICY = f"{METRICS}/decode_policy.json"
ENGINE_SPEED = f"{METRICS}/engine_speed.json"
SEEDS_ONLY = f"{METRICS}/seeds_only.json"
SEEDS_ONLY_CONTEXT = f"{METRICS}/seeds_only_context.json"
SERVE_BENCH = f"{METRICS}/serve_bench"
PAIRS_POOLED = f"{RESULTS}/benchmark_pairs_pooled.json"
PROBES = f"{RESULTS}/pretrain_ablation"
PROBE_TABLE = f"{RESULTS}/pretrain_ablation.json"
PROBE_WORK = f"{WORK}/probes"
WORLD_PROPERTIES = f"{RESULTS}/world.json"
TOY_REPORT = f"{RESULTS}/toy_report.json"
WORLD_IDEAL = f"{RESULTS}/ideal.json"  # a world's properties from its generator alone (tools/toy_world.py ideal)
TREES = f"{RESULTS}/trees.json"
LILICORR = f"{RESULTS}/lilicorr.json"
LILICORR_WORK = f"{WORK}/lilicorr_verdict"
def family_preset(module: str, module_file: str) -> tuple[Path, str]:
    """Where corrector family module `module` (at `module_file`) keeps its preset — `<module>.yaml` beside it — and
    the one line its absence is ("" when it is there): read by compose (draftlab.params) and the registry's check."""
    f = Path(module_file).with_suffix(".yaml")
    return f, "" if f.is_file() else (f"corrector family module {module!r} has no preset beside it ({f}): write its "
                                      f"settings there (as examples/families/lastrank/lastrank.yaml does)")


REPLICATES = "replicates"  # in a world's folder: <target md5[:12]>/base/ and seed-N/ (draftlab.pipeline.replicate)


@dataclass(frozen=True)
class ToolOutput:
    """One file or folder a tool writes: its path, the tool (a script under tools/) and what it holds."""

    path: str
    tool: str
    about: str


TOOL_OUTPUTS: tuple[ToolOutput, ...] = (
    ToolOutput(GPU_CHECK, "tools/gpu_check.py", "the accelerator check's result (draftlab.checks.run; --render copies "
               "a fetched one here)"),
    ToolOutput(VERIFY_COST, "tools/verify_cost.py", "verify cost against width on this machine (draftlab.measure"
               ".verify_cost)"),
    ToolOutput(VERIFY_COST_LINEAR, "tools/verify_cost.py", "the few-row linears against F.linear side by side "
               "(--linear auto,torch --out this)"),
    ToolOutput(VERIFY_COST_WIDTH, "tools/verify_cost.py", "the verify pass by width 1-17 under each target.linear "
               "path and the measured plan, beside this machine's floor (--batches 1 --widths 1-17 --linear "
               "torch,few-row,onednn,auto --out this)"),
    ToolOutput(DECODE_POLICY, "tools/probes/decode_policy.py", "the verify pass under each OpenMP wait policy and "
               "thread count, one process per setting: what engine.omp_wait_policy / engine.threads should say"),
    ToolOutput(ENGINE_SPEED, "tools/probes/engine_speed.py", "the engine before and after the static-slot rebuild"),
    ToolOutput(SEEDS_ONLY, "tools/probes/seeds_only_probe.py", "what seeds-only rounds buy the dflash-seeded-cut arm"),
    ToolOutput(SEEDS_ONLY_CONTEXT, "tools/probes/seeds_only_probe.py", "the same in the benchmark's company "
               "(--context benchmark --out this)"),
    ToolOutput(SERVE_BENCH, "tools/serve_bench.py", "the drafter's vLLM / SGLang exports and serve_bench.json "
               "(draftlab.measure.serving_engines)"),
    ToolOutput(PAIRS_POOLED, "tools/pairs_from_detail.py", "the benchmark's pairs re-computed from its detail, "
               "pooled over suites (--out this)"),
    ToolOutput(PROBES, "tools/pretrain_probe.py", "one record per drafter recipe probe (run NAME: NAME.json)"),
    ToolOutput(PROBE_TABLE, "tools/pretrain_probe.py", "the probes' ablation table (table)"),
    ToolOutput(PROBE_WORK, "tools/pretrain_probe.py", "the probes' training folders and shared feature cache "
               "(git-ignored)"),
    ToolOutput(WORLD_PROPERTIES, "tools/toy_world.py", "the toy world's measured properties (properties; in the "
               "world's folder)"),
    ToolOutput(TOY_REPORT, "tools/toy_world.py", "the toy run's verdicts (report; in the world's folder)"),
    ToolOutput(WORLD_IDEAL, "tools/toy_world.py", "a world's ideal slot-wise drafter, from its generator before anything "
               "trains (ideal; in the world's folder)"),
    ToolOutput(TREES, "tools/tree_verdict.py", "trees against chains on a run's models, paired (in the run's folder)"),
    ToolOutput(LILICORR, "tools/lilicorr_verdict.py", "LiLiCorr against the other correctors on a run's base drafter, "
               "paired (in the run's folder)"),
    ToolOutput(LILICORR_WORK, "tools/lilicorr_verdict.py", "--train's LiLiCorr co-trained beside the corrector stage's "
               "variants (correctors/: links to the stage's and its own; git-ignored)"),
    ToolOutput(f"{REPLICATES}/<tid>/seed-<N>", "tools/toy_world.py", "a replicate of a world's method stages (replicate "
               "--seed N; in the world's folder): its record, params, results, per-prompt records and plain drafter; "
               "<tid>/base/ the target and references every replicate reads"),
    ToolOutput(f"{RESULTS}/<profile>", "tools/gpu_run.py", "a fetched results bundle rendered (rendered_results: "
               "its reports, bundle.json and plots/)"),
    ToolOutput(f"{METRICS}/<profile>", "tools/gpu_run.py", "a fetched results bundle's headline metrics "
               "(rendered_metrics)"),
)


def rendered_results(name: str) -> str:
    """results/<name>: where the offline runner's render puts a bundle's reports (`name`: its profile[-dry])."""
    return f"{RESULTS}/{name}"


def rendered_metrics(name: str) -> str:
    """metrics/<name>: where the offline runner's render puts a bundle's headline metrics."""
    return f"{METRICS}/{name}"


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
