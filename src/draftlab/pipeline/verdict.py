"""A verdict run: the benchmark's recipe over a chosen set of arms and pairs on one run's trained models, side by
side in one process, with the benchmark's paired 95% intervals (the tools tree_verdict.py and lilicorr_verdict.py).
The run's benchmark settings are kept (suites, prompts per suite, batch, interleave, temperatures); the concurrency
sweep, the ablation sample, resume and the round records are off; `sampled` names the arms decoded at T>0 and
`pair_prompts` sizes chosen pairs as benchmark.pair_prompts_per_suite does. What it keeps of the benchmark's detail
(`record`) is the same for every verdict tool: the arms' summaries and the pairs with their units and the one
verdict rule, and every prompt's record (`bench.report.prompt_frame`), so the file recomputes its own figures."""
from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path

from draftlab import paths

SUMMARY_KEYS = ("tau_t0", "tau_t1", "tokens_per_s_t0", "tokens_per_s_t1", "speedup_t0", "speedup_t1",
                "speedup_geomean_t0", "speedup_geomean_t1", "tau_t0_ci", "tau_t1_ci", "tokens_per_s_t0_ci",
                "tokens_per_s_t1_ci", "units_t0", "units_t1", "tokens_equal_ar_t0")
PAIR_KEYS = ("a", "b", "temperature", "prompts", "units", "tau_diff", "tau_diff_ci", "tau_verdict", "tokens_per_s_ratio",
             "tokens_per_s_ratio_ci", "tokens_per_s_ratio_geomean", "speed_verdict")
SETUP_KEYS = ("target", "device", "dtype", "engine", "threads", "interleave", "prompts", "timing_s")
BENCH_KEYS = ("suites", "prompts_per_suite", "pair_prompts_per_suite", "max_new_tokens", "temperatures",
              "batch_size", "interleave")


def options(argv: list[str], spec: dict[str, object], doc: str) -> tuple[dict, list[str]] | int:
    """A verdict tool's own options: `spec` maps each option to the callable that parses its value, or to None for a
    flag (True when given); every other argument is a params override. -> (the options given, the overrides), or the
    exit code when the tool is done: 0 after printing `doc` for -h / --help, 2 after one line for a missing or bad
    value."""
    import sys

    got, rest, it = {}, [], iter(argv)
    for a in it:
        if a in ("-h", "--help"):
            print(doc.strip())
            return 0
        if a not in spec:
            rest.append(a)
        elif spec[a] is None:
            got[a] = True
        else:
            value = next(it, None)
            try:
                if value is None:
                    raise ValueError
                got[a] = spec[a](value)
            except ValueError:
                print(f"error: {a}{' ' + value if value else ''}: the value is missing or not one {a} takes (--help shows the options)",
                      file=sys.stderr)
                return 2
    return got, rest


def ints(text: str) -> list[int]:
    """A comma-separated list of whole numbers (`--budgets 8,16`)."""
    return [int(x) for x in text.split(",")]


def _lst(xs) -> str:
    return "[" + ",".join(xs) + "]"


def overrides(arms: list[str], pairs: list[list[str]], sampled: list[str],
              pair_prompts: dict[str, int] | None = None) -> list[str]:
    """The params overrides that turn a run's benchmark section into this verdict's (key=value, as -S takes them)."""
    out = [f"benchmark.arms={_lst(arms)}", f"benchmark.sampled_arms={_lst(sampled)}", "benchmark.ablation_arms=[]",
           "benchmark.concurrency=[]", "benchmark.resume=false", "benchmark.record_rounds=false",
           "benchmark.pairs=[" + ",".join(_lst(p) for p in pairs) + "]"]
    if pair_prompts:
        out.append("benchmark.pair_prompts_per_suite={" + ",".join(f"{k}: {n}" for k, n in pair_prompts.items()) + "}")
    return out


def load(extra: list[str], arms: list[str], pairs: list[list[str]], sampled: list[str],
         pair_prompts: dict[str, int] | None = None):
    """The run's params.yaml with this verdict's benchmark section (and `extra` key=value overrides after it)."""
    from draftlab.arms.grammar import arm_names
    from draftlab.params import load_params

    return load_params(paths.PARAMS, overrides(arms, pairs, sampled, pair_prompts) + list(extra), arms=arm_names())


def run_arms(params, correctors: str | None = None) -> dict:
    """Decode the verdict's arms on the run's models (the target as the benchmark stage loads it); `correctors`
    replaces the corrector stage's folder (a tool's own, holding links to the stage's variants beside its own)."""
    from draftlab.kernels.linear import install
    from draftlab.pipeline import layout
    from draftlab.pipeline.benchmark import BenchPaths, run
    from draftlab.verifier.load import load_target

    t = params.target
    target = load_target(paths.TARGET, t.device, t.dtype, t.attn_implementation)
    install(target.model, t.linear)
    target.compile_steps(params.engine.resolved(target.device.type))
    checkpoints = layout.checkpoints(params.benchmark.drafter)
    if correctors is not None:
        checkpoints = replace(checkpoints, correctors=correctors)
    from draftlab.bench.report import prompt_frame

    detail, runs = run(target, params, BenchPaths(checkpoints, None))
    frame = prompt_frame(runs.runs, runs.extra)  # the per-prompt records, kept in the verdict's file
    detail["per_prompt"] = {c: frame[c].where(frame[c].notna(), None).tolist() for c in frame.columns}
    return detail


def record(about: str, note: str, arms: list[str], detail: dict, params) -> dict:
    """What a verdict file keeps: its arms' summaries, the pairs, the setup and the benchmark settings it ran."""
    return {"about": about, "note": note, "arms": arms,
            "summary": {a: {k: v for k, v in e.items() if k in SUMMARY_KEYS} for a, e in detail["summary"].items()},
            "pairs": [{k: r.get(k) for k in PAIR_KEYS} for r in detail.get("pairs", [])],
            "setup": {k: detail.get("setup", {}).get(k) for k in SETUP_KEYS},
            # the per-prompt records (bench.report.prompt_frame, by column): every pair recomputes from the file
            "per_prompt": detail.get("per_prompt"),
            "benchmark": {f.name: getattr(params.benchmark, f.name) for f in fields(params.benchmark)
                          if f.name in BENCH_KEYS}}


def pairs_table(pairs: list[dict], extra: dict[str, float] | None = None, extra_head: str = "") -> str:
    """The pairs as a markdown table (Δτ and the tokens/s ratio with their intervals); `extra` adds a column keyed
    by 'a vs b T'."""
    from draftlab.markdown import markdown_table

    def fmt(v, ci, f: str) -> str:
        return "n/a" if v is None else format(v, f) + (f" [{format(ci[0], f)}, {format(ci[1], f)}]" if ci else "")

    head = ["a", "b", "T", "Δτ (a − b) [95%]", "tokens/s a ÷ b [95%]"]
    head += [extra_head] if extra is not None else []
    rows = []
    for r in pairs:
        row = [r["a"], r["b"], r["temperature"], fmt(r["tau_diff"], r["tau_diff_ci"], "+.3f"),
               fmt(r["tokens_per_s_ratio"], r["tokens_per_s_ratio_ci"], ".3f")]
        if extra is not None:
            key = f"{r['a']} vs {r['b']} {r['temperature']}"
            row.append(format(extra[key], ".3f") if key in extra else "")
        rows.append(row)
    return "\n".join(markdown_table(head, rows))


def stage_steps(variant: str) -> int:
    """The updates the corrector stage's `variant` made (its report)."""
    from draftlab.errors import DraftlabError
    from draftlab.io import read_json

    report = paths.results("corrector")
    if not Path(report).exists():
        raise DraftlabError(f"{report} not found: run the corrector stage first (dvc repro corrector)")
    steps = read_json(report).get("variants", {}).get(variant, {}).get("steps")
    if not steps:
        raise DraftlabError(f"{report} has no `{variant}` run to take the number of updates from; add {variant} to "
                            "corrector.variants and re-run the corrector stage")
    return int(steps)


def stage_report(variants: list[str], keep: tuple[str, ...]) -> dict:
    """What the corrector stage's report says of each variant (the `keep` keys: updates, minutes, held-out simulated τ,
    ...): the budgets a verdict compares."""
    from draftlab.io import read_json

    report = paths.results("corrector")
    rows = read_json(report).get("variants", {}) if Path(report).exists() else {}
    return {v: {k: rows[v][k] for k in keep if k in rows[v]} for v in variants if v in rows}


def cotrain_beside(params, variant: str, like: str, work: Path, keep: tuple[str, ...], by: str, log=print) -> dict:
    """Co-train `variant` for a run whose corrector stage did not: from the stage's base drafter, through the stage's
    own recipe and settings, for as many updates as the stage's `like` made (equal updates: minutes on a shared
    machine are no equal budget), into work/correctors/<variant>/ beside links to the stage's variants (the stage's
    folder and dvc.lock are left as they are) -> its training report's `keep` keys."""
    from draftlab.pipeline.layout import method_base
    from draftlab.pipeline.stage import load_inputs
    from draftlab.pipeline.steps.corrector import save_variants
    from draftlab.recipes.corrector.recipe import CotrainPaths, cotrain_from_references

    steps = stage_steps(like)
    c = replace(params.corrector, variants=[variant], control=False, max_steps=steps, max_minutes=0.0)
    base = method_base(params.seeded.methods, c.base_drafter)
    base.check()
    target, df = load_inputs(params)
    log(f"{variant}: {steps} updates (the stage's {like}'s) from the {base.kind} drafter {base.folder}")
    out = cotrain_from_references(target, df, c, params.pretrain, CotrainPaths(
        {"pretrained": base.folder}, work / "work", (Path(paths.PRETRAIN_FEATURES),)), log=log)
    root = work / "correctors"
    root.mkdir(parents=True, exist_ok=True)
    info = {"stage": "corrector", "profile": params.profile.name, "target": params.target.name, **base.record(),
            "trained_by": by}
    save_variants(out.variants, root, info, c.kernels)
    for v in sorted(Path(paths.CORRECTORS).iterdir()):
        link = root / v.name
        if v.is_dir() and v.name != variant and not link.exists():
            link.symlink_to(v.resolve(), target_is_directory=True)
    rep = out.report["variants"][variant]
    return {k: rep[k] for k in keep if k in rep}
