"""The one table of output paths (draftlab.paths): dvc.yaml's outputs are written from it (tests/pipeline/test_dvc_yaml.py
checks the generated file against it); the stages, the report and the explorer read it."""
from __future__ import annotations

from pathlib import Path

from draftlab import paths

ROOT = Path(__file__).resolve().parents[1]


def test_producer_finds_files_inside_declared_folders(monkeypatch):
    monkeypatch.chdir(ROOT)
    assert paths.producer("models/corrector/dcoco/corrector/config.json").stage == "corrector"
    assert paths.producer("metrics/benchmark/ar.json").stage == "benchmark"
    assert paths.producer(str(ROOT / "data/references.parquet")).stage == "reference"
    assert paths.producer("models/corrector2") is None and paths.producer("README.md") is None
    assert paths.rebuild_hint("models/drafter/pretrained/model.safetensors") == (
        "; stage 'pretrain_drafter' writes it: rebuild with `dvc repro -f -s pretrain_drafter` "
        "(or restore the last version: dvc checkout models/drafter/pretrained)")
    assert paths.rebuild_hint("results/specopd.json") == \
        "; stage 'specopd' writes it: rebuild with `dvc repro -f -s specopd`"
    assert paths.rebuild_hint("nowhere.txt") == ""


def test_readers_take_their_paths_from_the_table():
    import sys

    from draftlab.bench import report

    sys.path.insert(0, str(ROOT / "app"))
    from draftlab.explore import loaders
    from draftlab.explore import provenance

    assert report.PLOTS is paths.BENCH_PLOTS and loaders.PLOTS is paths.BENCH_PLOTS
    assert report.DETAIL == loaders.BENCH_JSON == paths.BENCH_DETAIL and loaders.ROUNDS == paths.BENCH_ROUNDS
    assert provenance.producer(ROOT, "plots/specopd_budget.csv") == "specopd"
    assert provenance.producer(ROOT, "elsewhere.csv", "benchmark") == "benchmark"

