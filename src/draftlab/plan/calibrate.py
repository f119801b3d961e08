"""The plan's predicted stage times against a committed run's measured ones, and the fit of the CPU constants.

`measured(results)` reads each stage's wall time where the stage records it in its report (results/<stage>.json):
- prepare_target, reference, pretrain_drafter, pretrain_seeded: `wall_s` (the stage's recipe, from reading its
  inputs to its report; Python start-up and imports, a few seconds, are outside it);
- specopd: the objectives' training time, Σ `train_minutes` of `specopd` and every `baselines.<name>` (the stage
  records no wall time of its own; its validations are outside this number, so it is compared with the plan's
  training terms only: `COMPARED`);
- corrector: Σ `wall_s` of every run (`variants.<name>` and the `dflash-long` control) + `feature_compute_s`;
- benchmark: `setup.timing_s.total` (prompt selection to the last interval; model loading and warm-up included).

`compare(params, device, results)` gives a row per stage: the plan's seconds (of the terms that stage's measurement
covers), the measured seconds and their ratio. `fit(runs)` finds the cpu preset's three constants (effective GFLOP/s,
GB/s, µs per dispatched op) minimising Σ log(predicted / measured)² over the stages of the given runs (a grid in log
space, refined; no scipy). `python tools/calibrate_plan.py` (it hands in the method tables the corrector stage's plan
reads) prints the table of docs/plan.md for the fitting run
(the cpu profile's, results/ at the repository root) and the held-out run (the toy world's, worlds/toy/results);
`--fit` also re-runs the fit.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
from dataclasses import replace
from pathlib import Path

from draftlab import paths
from draftlab.markdown import markdown_table
from draftlab.plan.arch import target_shape
from draftlab.plan import dispatch as D
from draftlab.plan.stages import BUDGET_TERM, PRESETS, Device, plan, round_seconds

REPO = Path(__file__).resolve().parents[3]
# the committed runs: name -> (folder holding params.yaml and results/, what it is)
RUNS = {"cpu": (REPO / "runs" / "cpu-2026-12-06", "the cpu profile's run of 2026-12-06 on a 2-core AVX2 host (the "
                                                  "fitting run; its small files frozen in runs/)"),
        "toy": (REPO / "worlds" / "toy", "the toy world's run of 2026-12-05 (held out)"),
        # a replicate of the toy world (its method stages on step budgets, LiLiCorr included; held out): the one of the
        # three whose stages ran on the least loaded machine (its record's load averages)
        "toy-seed-3": (REPO / "worlds" / "toy" / "replicates" / "ef7fef18a8d9" / "seed-3",
                       "a replicate of the toy world, 2026-12-06 (held out; LiLiCorr included)")}
# the plan's terms each stage's measurement covers (None: all of them)
COMPARED: dict[str, tuple[str, ...] | None] = {"specopd": ("steps", BUDGET_TERM)}


def _read(results: Path, stage: str) -> dict | None:
    try:
        return json.loads((results / f"{stage}.json").read_text())
    except FileNotFoundError:
        return None


def measured(results: str | Path) -> dict[str, float]:
    """stage -> measured seconds, for the stages whose report is in `results` (see the module docstring)."""
    results, out = Path(results), {}
    for stage in ("prepare_target", "reference", "pretrain_drafter", "pretrain_seeded"):
        r = _read(results, stage)
        if r is not None and "wall_s" in r:
            out[stage] = float(r["wall_s"])
    if (r := _read(results, "specopd")) is not None:
        out["specopd"] = 60 * (r["specopd"]["train_minutes"] + sum(b["train_minutes"] for b in r["baselines"].values()))
    if (r := _read(results, "corrector")) is not None:
        runs = [*r.get("variants", {}).values(), *([r["dflash-long"]] if "dflash-long" in r else [])]
        out["corrector"] = sum(float(v["wall_s"]) for v in runs) + float(r.get("feature_compute_s") or 0.0)
    if (r := _read(results, "benchmark")) is not None:
        out["benchmark"] = float(r["setup"]["timing_s"]["total"])
    return out


@contextlib.contextmanager
def _in(folder: Path):
    """Run with `folder` as the working directory (a run's local suite files are relative to it); a replicate's
    prompts/ is a link git does not keep, so a replicate runs in its world's folder (replicates/<tid>/seed-N ->
    the world), whose prompt files its params name."""
    here = os.getcwd()
    if not (folder / "prompts").exists() and folder.parent.parent.name == paths.REPLICATES:
        folder = folder.parents[2]
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(here)


def load_run(name: str, names=None):
    """(params, target shape, results folder, folder) of a committed run of `RUNS`; `names`: the method tables
    (draftlab.pipeline.names.method_names(), from the caller: this layer imports no method), which the plan's corrector
    stage needs (its families' budget roles and cost models)."""
    import yaml

    from draftlab.params import build_params

    folder = RUNS[name][0]
    raw = yaml.safe_load((folder / paths.PARAMS).read_text())
    for dotted, value in ran_with(folder).items():  # each stage's inputs as the run had them
        *path, key = dotted.split(".")
        node = raw
        for part in path:
            node = node.setdefault(part, {})
        if value is DEFAULT:
            node.pop(key, None)
        else:
            node[key] = value
    with _in(folder):
        p = build_params(raw, names=names)  # no arm names: the run is committed
        t = target_shape(p.target, None)
    return p, t, folder / paths.RESULTS, folder


def ran_with(folder: Path) -> dict:
    """The params each stage of the committed run ran with, as its dvc.lock records them (dotted key -> value, the
    later stages' last): a run is predicted from its own inputs, not today's params.yaml (the toy world's method stages
    ran on minute budgets, its replicates on step budgets: docs/decisions.md "Verdicts that survive a second look")."""
    import yaml

    lock = folder / "dvc.lock"
    if not lock.exists():
        return {}
    out: dict = {}

    def walk(prefix: str, value) -> None:  # only what sizes a run: its budgets and the arms it decoded
        if isinstance(value, dict):
            for k in RAN_WITH:  # a recorded section without a key today's has: the run had its default
                out.setdefault(f"{prefix}.{k}", DEFAULT)
            for k, v in value.items():
                walk(f"{prefix}.{k}", v)
        elif prefix.rsplit(".", 1)[-1] in RAN_WITH:
            out[prefix] = value

    for stage in (yaml.safe_load(lock.read_text()) or {}).get("stages", {}).values():
        for k, v in ((stage.get("params") or {}).get(paths.PARAMS) or {}).items():
            walk(k, v)
    return out


DEFAULT = object()  # `ran_with`: the run's section had no such key (the schema's default applies)
# the keys `ran_with` takes from a run's dvc.lock (older locks hold sections of an older schema: only these are read)
RAN_WITH = ("max_steps", "max_minutes", "epochs", "variant_max_minutes", "variant_steps", "variant_budget_fraction",
            "budget_s", "baseline_max_steps", "arms", "ablation_arms", "sampled_arms", "variants")


def predicted(p, t, dev: Device, folder: Path) -> dict[str, float]:
    """stage -> the plan's seconds of the terms its measurement covers (`COMPARED`)."""
    with _in(folder):
        stages = plan(p, t, dev)
    out = {}
    for s in stages:
        keep = COMPARED.get(s.name)
        out[s.name] = sum(v for k, v in s.times.items() if keep is None or k in keep)
    return out


def compare(name: str, dev: Device | None = None, inputs: bool = True,
            names=None) -> list[tuple[str, float, float, float]]:
    """(stage, predicted s, measured s, predicted / measured) of the committed run `name` under `dev` (default: the
    cpu preset) with, when `inputs`, the run's own fill and τ (`run_inputs`), for every stage both know."""
    p, t, results, folder = load_run(name, names)
    dev = replace(dev or PRESETS["cpu"], **(run_inputs(name) if inputs else {}))
    pred, meas = predicted(p, t, dev, folder), measured(results)
    return [(s, pred[s], meas[s], pred[s] / meas[s]) for s in pred if s in meas and meas[s] > 0]


def run_inputs(name: str) -> dict[str, float]:
    """The inputs the plan takes from its user, as the committed run `name` had them: `fill` and `prompt_fill`, the
    references' mean response and prompt lengths (results/reference.json) over reference.max_new_tokens and
    data.max_prompt_tokens, and `tau`, the tokens a stream commits per round of its batch over the benchmark's
    speculative arms (results/benchmark.json `suites`: tokens per stream / the batch's rounds; with a batch of
    several streams this is below the arms' τ, as a batch decodes until its slowest stream stops)."""
    p, _, results, folder = load_run(name)
    ref = results / "reference.json"
    if not ref.exists():  # a replicate reads its world's references (replicates/<tid>/seed-N -> the world's results)
        ref = folder.parents[2] / paths.RESULTS / "reference.json"
    r = json.loads(ref.read_text())
    fill = r["tokens"] / r["sequences"] / p.reference.max_new_tokens
    prompt_fill = r["prompt_tokens"] / r["sequences"] / p.data.max_prompt_tokens
    bench = json.loads((results / "benchmark.json").read_text())
    B = bench["config"]["batch_size"]
    tokens = rounds = 0.0
    for by_temp in bench["suites"].values():
        for arms in by_temp.values():
            for arm, m in arms.items():
                if D.round_step(arm) != "ar_step" and m.get("rounds"):
                    tokens += m["tokens"] / min(B, m["requests"])  # per stream of a batch
                    rounds += m["rounds"]  # the batch's rounds (a batch runs until its slowest stream stops)
    return {"fill": round(fill, 3), "prompt_fill": round(prompt_fill, 3), "tau": round(tokens / rounds, 2)}


def measured_rounds(results: str | Path) -> dict[str, tuple[float, int]]:
    """arm -> (its mean wall seconds per round at T=0 over the suites, the streams of its batches), from the
    benchmark's report (`suites.<suite>.t0.<arm>.round_wall_ms`, weighted by rounds); arms without timed rounds
    (Hugging Face's generate) are left out."""
    bench = json.loads((Path(results) / "benchmark.json").read_text())
    B, acc = bench["config"]["batch_size"], {}
    for by_temp in bench["suites"].values():
        for arm, m in by_temp.get("t0", {}).items():
            if m.get("round_wall_ms") and m.get("rounds"):
                s, n = acc.get(arm, (0.0, 0))
                acc[arm] = (s + m["round_wall_ms"] * 1e-3 * m["rounds"], n + m["rounds"])
    return {arm: (s / n, B) for arm, (s, n) in acc.items()}


def compare_rounds(name: str, dev: Device | None = None) -> list[tuple[str, float, float, float]]:
    """(arm, predicted s, measured s, ratio) per round of each benchmark arm of run `name` at its batch size."""
    p, t, results, _ = load_run(name)
    dev = dev or PRESETS["cpu"]
    out = []
    for arm, (sec, B) in measured_rounds(results).items():
        pred = round_seconds(p, t, dev, arm, B)
        out.append((arm, pred, sec, pred / sec))
    return out


def _kind(arm: str) -> str:
    step = D.round_step(arm)
    return step if step in ("ar_step", "pld_round") else "drafter round"


FITTED = ("reference", "pretrain_drafter", "pretrain_seeded", "specopd", "corrector", "benchmark")


def fit(runs: tuple[str, ...] = ("cpu",), stages: tuple[str, ...] = FITTED, names=None) -> tuple[Device, float]:
    """The cpu preset with (tflops, bandwidth, per_op_us) minimising Σ log(predicted / measured)² over `stages` of
    `runs` and over the benchmark's rounds (`measured_rounds`; per kind of round, AR step, lookup round and drafter
    round, the mean of its arms' terms counts as one term), and that sum: a log-spaced grid, then two finer grids
    around the best point."""
    loaded = [(load_run(r, names), measured(load_run(r)[2]), run_inputs(r), measured_rounds(load_run(r)[2])) for r in runs]

    def loss(gflops: float, gbps: float, us: float) -> float:
        dev = replace(PRESETS["cpu"], tflops=gflops / 1e3, bandwidth=gbps, per_op_us=us)
        total = 0.0
        for (p, t, _, folder), meas, given, rounds in loaded:
            pred = predicted(p, t, replace(dev, **given), folder)
            total += sum(math.log(pred[s] / meas[s]) ** 2 for s in stages if s in pred and s in meas)
            kinds: dict[str, list[float]] = {}
            for arm, (sec, B) in rounds.items():
                kinds.setdefault(_kind(arm), []).append(math.log(round_seconds(p, t, dev, arm, B) / sec) ** 2)
            total += sum(sum(v) / len(v) for v in kinds.values())
        return total

    centre, span = (math.log(50.0), math.log(10.0), math.log(10.0)), math.log(30.0)
    best = (math.inf, centre)
    for _ in range(3):
        grid = [centre[i] + span * (k / 4 - 1) for i in range(3) for k in range(9)]
        axes = [grid[i * 9:(i + 1) * 9] for i in range(3)]
        for a in axes[0]:
            for b in axes[1]:
                for c in axes[2]:
                    v = loss(math.exp(a), math.exp(b), math.exp(c))
                    if v < best[0]:
                        best = (v, (a, b, c))
        centre, span = best[1], span / 4
    g, b, c = (math.exp(x) for x in best[1])
    return replace(PRESETS["cpu"], tflops=g / 1e3, bandwidth=b, per_op_us=c), best[0]


def _s(x: float, ms: bool = False) -> str:
    if ms:
        return f"{x * 1e3:.1f} ms"
    return f"{x:,.0f} s" if x >= 10 else f"{x:.1f} s"


def table(rows: list[tuple[str, float, float, float]], defaults: list[tuple[str, float, float, float]] | None = None,
          what: str = "stage", ms: bool = False) -> str:
    """Markdown: predicted (the run's inputs), measured, ratio; and, given `defaults`, the plan at its default inputs
    (fill 1, tau 3: the upper bound a user gets without them) and its ratio."""
    extra = dict((s, p) for s, p, _, _ in defaults or [])
    head = [what, "predicted", "measured", "predicted / measured"] + (["default inputs", "ratio"] if defaults else [])
    return "\n".join(markdown_table(head, [[s, _s(p, ms), _s(m, ms), f"{r:.2f}"]
                                           + ([_s(extra[s]), f"{extra[s] / m:.2f}"] if defaults else [])
                                           for s, p, m, r in rows], "lrrr" + ("rr" if defaults else "")))


def main(argv: list[str] | None = None, names=None) -> int:
    """`names`: the method tables the plan's corrector stage needs (draftlab.pipeline.names.method_names())."""
    ap = argparse.ArgumentParser(prog="python tools/calibrate_plan.py",
                                 description="the plan's CPU stage times against the committed runs' measured ones")
    ap.add_argument("--fit", action="store_true", help="re-fit the cpu preset's constants on the cpu run first")
    a = ap.parse_args(argv)
    dev = PRESETS["cpu"]
    if a.fit:
        dev, loss = fit(names=names)
        print(f"fit on the cpu run ({', '.join(FITTED)}): {dev.tflops * 1e3:.3g} GFLOP/s, {dev.bandwidth:.3g} GB/s, "
              f"{dev.op_us:.3g} us per op; sum of squared log ratios {loss:.3f}\n")
    print(f"cpu preset used: {dev.tflops * 1e3:.3g} GFLOP/s, {dev.bandwidth:.3g} GB/s, {dev.op_us:.3g} us per op\n")
    for name, (_, what) in RUNS.items():
        given = ", ".join(f"{k} {v:g}" for k, v in run_inputs(name).items())
        print(f"{name}: {what}; the run's inputs: {given}\n"
              f"{table(compare(name, dev, names=names), compare(name, dev, inputs=False, names=names))}\n")
        rounds = [(f"`{a}`", p, m, r) for a, p, m, r in compare_rounds(name, dev)]
        print(f"{name}: one benchmark round per arm (T=0, mean over the suites)\n"
              f"{table(rounds, what='round of', ms=True)}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
