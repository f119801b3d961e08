"""The pipeline said once: one record per DVC stage, in run order. dvc.yaml and worlds/<world>/dvc.yaml are written
from it (`make dvc-yaml`: draftlab.pipeline.dvcgen), the offline runner takes its stage order and entries from it, and
the smoke run checks each stage process against it (draftlab.pipeline.trace).

A record says what cannot be read off the code: the params keys the stage reads (dvc.yaml `params:`), the upstream
outputs it reads (data deps, beside the check stamp every stage after check_params reads), the modules it loads by
name (`code`: none today), flags, and comments worth keeping. Its outputs come from the paths table
(`draftlab.paths.OUTPUTS`; a plot's axes from PLOT_AXES here) and its code dependencies are computed: the
draftlab modules its command reaches by static imports (draftlab.imports), the walk stopping at VALIDATION."""
from __future__ import annotations

from dataclasses import dataclass, field

from draftlab import paths

ENTRIES = "draftlab.pipeline.steps"  # <ENTRIES>.<stage>: the module whose `run(params)` is the stage's body
RUNNER = "draftlab.pipeline"  # every stage's command: `python -m draftlab.pipeline <stage>` (pipeline/__main__.py)
STAMP = f"{paths.CHECKS}/params.ok"  # check_params' stamp: every later stage reads it, so it runs first
# where a stage validates params.yaml: the name tables (the arm grammar, the methods' variants) meet the
# configuration there. A stage reads the module but does not depend on what it gathers: a name table decides whether
# params.yaml is accepted, not what an accepted run computes (the walk does not follow its imports).
VALIDATION = ("pipeline.names",)
# read by every stage process without being a dependency of what it computes: MLflow's settings, the labels a report
# carries, and what stage_main reads before the stage's body (the toy world's freeze gate, the processes of a
# training stage; threads and seed are declared by the stages whose numbers depend on them)
UNTRACKED = ("tracking", "profile.name", "target.name")
# modules a draftlab module loads by name (importlib), which no import statement reaches: a stage that reaches the
# loader reaches them. The corrector registry imports its built-in family modules statically (the import graph
# reaches them); `corrector.family_modules` (a user's own, outside draftlab) is not a draftlab module, not tracked.
LOADED_BY_NAME: dict[str, tuple[str, ...]] = {}  # none today: the corrector registry imports its families statically


@dataclass(frozen=True)
class Stage:
    name: str
    params: tuple[str, ...] = ()  # params.yaml sections / dotted keys the stage reads (dvc.yaml `params:`)
    data: tuple[str, ...] = ()  # the upstream outputs it reads, beside STAMP
    code: tuple[str, ...] = ()  # draftlab modules loaded by name (importlib, registries): no import reaches them
    # params keys (or sections) the stage reads that are not params deps, each with why it cannot change what the stage
    # computes (its effect arrives through a data dep, or the read only checks or keys resumable work): the smoke
    # run's check allows them
    reads: dict[str, str] = field(default_factory=dict)
    always_changed: bool = False
    distributed: bool = False  # a training stage: re-executed under torchrun when params.trainer asks for devices
    decoding: bool = False  # a decoding stage: its OpenMP wait policy is the engine's (draftlab.omp), set by the runner
    about: str = ""  # comment lines above the stage in dvc.yaml
    notes: dict[str, str] = field(default_factory=dict)  # inline comments: by dep, params key or output path;
    # "params" (after the `params:` header), "before outs" (a comment line above `outs:`)

    @property
    def cmd(self) -> str:
        return f"python -m {RUNNER} {self.name}"

    @property
    def entry(self) -> str:
        return f"{ENTRIES}.{self.name}"

    @property
    def outputs(self) -> tuple[paths.Output, ...]:
        return tuple(o for o in paths.OUTPUTS if o.stage == self.name)

    @property
    def inputs(self) -> tuple[str, ...]:
        return self.data if self.name == STAGES_FIRST else (STAMP, *self.data)


STAGES_FIRST = "check_params"
TARGET_KEYS = ("target.dtype", "target.device", "target.attn_implementation")
# a training stage's: its seed and threads, the target's precision and placement, and its processes (trainer: the
# smoke run's trace found the Lightning fit reading devices and num_nodes; the hand lists had left it out)
TRAINING_KEYS = ("profile.seed", "profile.threads", *TARGET_KEYS, "trainer")
REF_PROMPTS = f"{paths.CHECKS}/reference_prompts.json"  # the local prompt files the reference stage reads, hashed
BENCH_PROMPTS = f"{paths.CHECKS}/benchmark_prompts.json"  # and the benchmark's
LOCAL_SUITES = "which local prompt files it reads, with their hashes, arrive in {} (check_params)"
REPORT = "the stage's report (no headline metrics: it measures no method)"

STAGES: tuple[Stage, ...] = (
    Stage("check_params", always_changed=True,
          notes={"before outs": "(the local prompt files' hashes; which ones a stage reads is in these files, with their paths)"}),
    Stage("prepare_target", params=("target",),
          notes={"params": "all of target: freezing a toy world (target.toy.frozen_hash) is applied with `dvc commit` "
                           "(docs/decisions.md)", paths.results("prepare_target"): REPORT}),
    Stage("reference", data=(REF_PROMPTS, paths.TARGET), reads={"data.local_suites": LOCAL_SUITES.format(REF_PROMPTS)},
          params=("data.train_suite", "data.local_jsonl", "data.eval_suites", "data.heldout_fraction", "data.split_seed",
                  "data.max_prompt_tokens", "data.thinking", "reference", "engine", *TARGET_KEYS),
          notes={"target.attn_implementation": "the target is loaded with it (the smoke run's trace found it missing)",
                 "before outs": "work folder data/references.shards/ (plan.json + batch-NNNNN.parquet): each batch is "
                                "written there as it\nfinishes, so a killed run resumes (the plan must match; "
                                "docs/decisions.md). Deliberately NOT an output:\nDVC would delete it before the re-run "
                                "that should resume from it. The stage deletes it once\ndata/references.parquet is "
                                "written; /data/ is git-ignored.", paths.results("reference"): REPORT}),
    Stage("pretrain_drafter", data=(paths.TARGET, paths.REFERENCES), distributed=True,
          params=("drafter", "pretrain", *TRAINING_KEYS),
          notes={paths.results("pretrain_drafter"): "the full report; metrics/ holds the headline"}),
    Stage("pretrain_seeded", data=(paths.TARGET, paths.REFERENCES, paths.PLAIN_DRAFTER), distributed=True,
          params=("seeded.enabled", "seeded.drafter", "seeded.pretrain", "drafter", "pretrain", "pld", *TRAINING_KEYS),
          about="the seeded drafter beside the plain one: trained when seeded.enabled (cpu, cpu-long, smoke); disabled\n"
                "(gpu) it writes models/drafter/seeded/disabled.json and a \"disabled\" report, so its outputs always "
                "exist. It reads\nthe plain drafter for its comparison table (seeded vs prompt lookup, the dflash-pld "
                "hybrid and the plain drafter).",
          notes={"seeded.enabled": "not seeded.verify: the benchmark's verify-width rule",
                 paths.results("pretrain_seeded"): "the full report with its comparison table; metrics/ holds the headline"}),
    Stage("specopd", data=(paths.TARGET, paths.REFERENCES, paths.PLAIN_DRAFTER, paths.SEEDED_DRAFTER), distributed=True,
          params=("specopd", "seeded.methods", *TRAINING_KEYS),
          about="the method stages (specopd, corrector) train on the plain drafter, or on the seeded one when "
                "seeded.methods (cpu,\ncpu-long, smoke; their arms are then <method>-seeded); both folders are deps "
                "whatever the flag, so the\ngraph does not depend on it (on gpu the seeded folder holds disabled.json only)",
          notes={paths.PLAIN_DRAFTER: "the base when seeded.methods=false", paths.SEEDED_DRAFTER: "the base when seeded.methods=true",
                 paths.results("specopd"): "the full report; metrics/ holds the headline"}),
    Stage("corrector", distributed=True,
          data=(paths.TARGET, paths.REFERENCES, paths.PLAIN_DRAFTER, paths.SEEDED_DRAFTER, paths.SPECOPD_DRAFTER),
          params=("corrector", "pretrain", "seeded.methods", *TRAINING_KEYS),
          notes={paths.PLAIN_DRAFTER: "the base when seeded.methods=false (the dflash-long control continues the same base)",
                 paths.SEEDED_DRAFTER: "the base when seeded.methods=true",
                 paths.results("corrector"): "the full report; metrics/corrector/ holds one headline row per variant"}),
    Stage("benchmark", decoding=True,
          data=(BENCH_PROMPTS, paths.TARGET, paths.PLAIN_DRAFTER, paths.SEEDED_DRAFTER, paths.SPECOPD_DRAFTER,
                paths.LONG_DRAFTER, paths.CORRECTORS), reads={
              "data.local_suites": LOCAL_SUITES.format(BENCH_PROMPTS),
              **{k: "checks the drafters it loads against the sections that trained them (pipeline.benchmark."
                    "drafter_specs resolves the seeded drafter's); what a drafter is arrives through its folder"
                 for k in ("drafter", "pretrain", "seeded.enabled", "seeded.drafter", "seeded.pretrain")},
              "target": "the key of its finished batch groups (bench/resume.py: whether recorded work is reused); "
                        "the target keys that change a number are declared"},
          params=("benchmark", "engine", "pld", "seeded.verify", "drafter.block_size", "data.max_prompt_tokens",
                  "data.thinking", "data.train_suite", "data.local_jsonl", "data.eval_suites", "data.heldout_fraction",
                  "data.split_seed", "reference.seed", "reference.num_heldout_prompts", *TARGET_KEYS, "target.linear",
                  "profile.threads"),
          notes={paths.SEEDED_DRAFTER: "the dflash-seeded arm (stage pretrain_seeded)",
                 paths.SPECOPD_DRAFTER: "specopd and corrector: trained on the drafter seeded.methods picks (arms "
                                        "<method>[-seeded])",
                 "seeded.verify": "the dflash-seeded-cut arm's verify width",
                 "data.train_suite": "(above) the sharegpt-chat suite: the held-out pool's split and which of it "
                                     "validation takes",
                 paths.results("benchmark"): "the full report; metrics/benchmark/ holds one headline row per arm",
                 paths.BENCH_PLOTS["positions"]: "τ and tokens/s by where in the answer a round starts (32-token bins)"}),
)
BY_NAME = {s.name: s for s in STAGES}

# x / y of each declared plot (dvc plots show)
PLOT_AXES = {
    paths.CURVES["pretrain_drafter"]: ("train_minutes", "heldout"),
    paths.CURVES["pretrain_seeded"]: ("train_minutes", "heldout"),
    paths.CURVES["specopd"]: ("train_minutes", "heldout"),
    paths.BENCH_PLOTS["tau_per_slot"]: ("slot", "accept_rate"),
    paths.BENCH_PLOTS["coverage"]: ("k", "coverage"),
    paths.BENCH_PLOTS["speedup"]: ("suite", "speedup"),
    paths.BENCH_PLOTS["concurrency"]: ("streams", "tokens_per_s_ratio"),
    paths.BENCH_PLOTS["peers"]: ("arm", "speedup"),
    paths.BENCH_PLOTS["positions"]: ("start", "tau"),
}
# dvc.yaml's top-level plots (figures over several columns), with the comment above them
TOP_PLOTS_ABOUT = ("The concurrency claim (docs/algorithms.md \"What the DCOCO paper reports\"; the paper's Fig. 3): τ "
                   "and aggregate\ntokens/s as ratios to DFlash at\nthe same number of streams, per arm (rows also carry "
                   "`temperature`; the explorer's Speed page splits\nthem and shades the gap).")
TOP_PLOTS = [{"concurrency_claim": {"template": "linear", "x": "streams",
                                    "y": {paths.BENCH_PLOTS["concurrency"]: ["tau_ratio", "tokens_per_s_ratio"]},
                                    "title": "Ratio to DFlash at the same concurrency"}}]
