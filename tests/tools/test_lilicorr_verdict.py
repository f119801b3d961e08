"""tools/lilicorr_verdict.py and the verdict runner it shares with tools/tree_verdict.py (draftlab.pipeline.verdict):
its arms resolve in the arm grammar with and without the seeded suffix, its pairs name its arms, the overrides it
composes load on both committed runs' params (the cpu run's at the root, the toy world's) with the sized pairs'
prompts in force, and bad input is one line. The decoding itself is the benchmark's (tested there); the verdicts
are its committed outputs (results/lilicorr.json, worlds/toy/results/lilicorr.json)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from draftlab.arms.grammar import arm_names, resolve
from draftlab.params import load_params
from draftlab.pipeline import verdict

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def tool():
    return _load("lilicorr_verdict")


@pytest.mark.parametrize("suffix,trees,ablations", [("", [16, 32], ["lilicorr-nopair"]), ("-seeded", [16], []),
                                                    ("", [0], ["lilicorr-nopair", "lilicorr-frozen"])])
def test_arms_resolve_and_pairs_name_them(tool, suffix, trees, ablations):
    arms, chain_pairs, tree_pairs = tool.arms_and_pairs(suffix, trees, ablations)
    assert len(set(arms)) == len(arms) and arms[0] == "ar"
    for a in arms:
        resolve(a)  # raises on an unknown name
    assert {a for p in chain_pairs + tree_pairs for a in p} <= set(arms)
    lili = "lilicorr" + suffix
    assert [p[1] for p in chain_pairs if p[0] == lili] == [o + suffix for o in tool.OTHERS] + ["dflash" + suffix]
    assert [p for p in chain_pairs if p[1] == lili] == [[a + suffix, lili] for a in ablations]
    budgets = [n for n in trees if n]
    assert [p[0] for p in tree_pairs] == [f"lilicorr-tree{n}{suffix}" for n in budgets for _ in range(3)]
    assert [p[1] for p in tree_pairs] == [x for n in budgets for x in (lili, f"dcoco-tree{n}{suffix}",
                                                                         f"dflash-tree{n}{suffix}")]


@pytest.mark.parametrize("folder,suffix", [(ROOT, "-seeded"), (ROOT / "worlds" / "toy", "")])
def test_overrides_load_on_the_committed_runs(tool, folder, suffix, monkeypatch):
    monkeypatch.chdir(folder)  # a run's params name its files relative to its folder
    arms, chain_pairs, tree_pairs = tool.arms_and_pairs(suffix, [16], [])
    base = load_params(folder / "params.yaml", arms=arm_names())
    n = base.benchmark.prompts_per_suite + 3
    sized = {f"{a} vs {b}": n for a, b in chain_pairs}
    p = load_params(folder / "params.yaml", verdict.overrides(arms, chain_pairs + tree_pairs, [], sized) +
                    ["benchmark.temperatures=[0.0]"], arms=arm_names())
    b = p.benchmark
    assert b.arms == arms and b.sampled_arms == [] and b.ablation_arms == [] and b.concurrency == []
    assert b.pairs == chain_pairs + tree_pairs and b.temperatures == [0.0]
    assert b.pair_extra() == sized  # every chain pair sized, the tree pairs at the headline sample
    assert b.suites == base.benchmark.suites and b.max_new_tokens == base.benchmark.max_new_tokens


def test_record_and_table_keep_the_pairs():
    detail = {"summary": {"ar": {"tau_t0": 1.0, "round_ms": {}}},
              "pairs": [{"a": "lilicorr", "b": "dcoco", "temperature": "t0", "tau_diff": 0.25,
                         "tau_diff_ci": [0.1, 0.4], "tokens_per_s_ratio": 1.02,
                         "tokens_per_s_ratio_ci": [0.98, 1.06], "n": 48}],
              "setup": {"threads": 2, "other": 1}}

    from dataclasses import fields
    from types import SimpleNamespace

    from draftlab.config.benchmark import BenchmarkConfig

    P = SimpleNamespace(benchmark=BenchmarkConfig())  # the one section the record reads
    out = verdict.record("about", "note", ["ar"], detail, P)
    assert out["summary"] == {"ar": {"tau_t0": 1.0}} and out["pairs"][0].keys() == set(verdict.PAIR_KEYS)
    assert set(out["benchmark"]) == {f.name for f in fields(BenchmarkConfig)} & set(verdict.BENCH_KEYS)
    json.dumps(out)
    table = verdict.pairs_table(out["pairs"])
    assert "+0.250 [+0.100, +0.400]" in table and "1.020 [0.980, 1.060]" in table


def test_bad_input_is_one_line(tool, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert tool.main([]) == 2  # no params.yaml here
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "params.yaml not found" in err
    (tmp_path / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    assert tool.main(["--greedy"]) == 2  # the stage's correctors are not here
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "has no lilicorr, dcoco, dspark, domino, dflash2" in err
    assert tool.main(["--train"]) == 2  # nothing to take the number of updates from
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "results/corrector.json not found" in err
