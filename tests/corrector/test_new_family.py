"""A corrector family from another package is three files: its module (the corrector with its contract and, at its
end, its record), its package and its preset (docs/architecture.md "Adding a corrector family"). The proof that no
family leaked into draftlab: LiLiCorr — the family that reads the most (the anchor, the teacher) and offers the most
(pair rows for trees, a sampled walk) — re-registered as an outside family `lili2` in three files this test writes
(its module's text with its names changed, its package, its preset), named when composing the params
(`corrector.family_modules`: compose fills in its preset, no hand merge), then `draftlab check` (and a bad setting of
it in one line), `draftlab plan`, the corrector stage (its co-training recipe) and the benchmark's arms — its chain and
its pair-ranked tree — through `draftlab decode`, each in its own process on the tiny-random target, with nothing of
draftlab patched. (The example family of examples/families/lastrank runs the toy world's recipe in the smoke.)"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

pytestmark = pytest.mark.usefixtures("one_thread")

LILICORR = Path(__file__).resolve().parents[2] / "src/draftlab/corrector/lilicorr.py"
PRESET = """\
# the outside copy's preset: its settings (small) and its variant's step budget
corrector:
  families:
    lili2: {width: 32, factor_dim: 16, heads: 4}
  variant_steps:
    lili2: 2
"""


def outside_copy(pkg: Path) -> None:
    """LiLiCorr as an outside family `lili2`: its module's text with its names changed, its package, its preset."""
    text = LILICORR.read_text().replace('"draftlab-lilicorr-v1"', '"outside-lili2-v1"').replace('"lilicorr', '"lili2')
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "lili2.py").write_text(text)
    (pkg / "lili2.yaml").write_text(PRESET)


def run(args: list[str], cwd, env) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True)
    assert r.returncode == 0, (args, r.stdout[-2000:], r.stderr[-3000:])
    return r


def test_a_family_from_another_package_runs_through_the_pipeline(root, tmp_path, monkeypatch):
    from draftlab.decoding import generate_ar
    from draftlab.drafter import DFlashDrafter, DrafterDesign, arch_from_target, save_drafter
    from draftlab.params import compose_text, load_params
    from draftlab.verifier.load import load_target, save_random

    outside_copy(tmp_path / "pkg" / "outside")  # the three files
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "pkg"), os.environ.get("PYTHONPATH", "")])}
    monkeypatch.syspath_prepend(str(tmp_path / "pkg"))  # compose (in this process) finds the module's preset beside it

    # the params: a small composition of conf/ (tiny-random, smoke sizes, the plain drafter) naming the family's module;
    # compose fills in its preset (no hand merge): its settings and its variant's step budget
    wd = tmp_path / "run"
    wd.mkdir()
    composed = compose_text(["target=tiny-random", "profile=smoke", "method=plain", "benchmark/arms=two",
                             "drafter.draft_vocab_size=0", "tracking.enabled=false", "corrector.max_steps=2",
                             "corrector.max_minutes=0", "corrector.batch_size=2", "corrector.anchors_per_seq=4",
                             "corrector.kernels=torch", "corrector.control=false",
                             "corrector.family_modules=[outside.lili2]", "corrector.variants=[lili2]",
                             "benchmark.arms=[ar,dflash,lili2,lili2-tree8]"], root / "conf")
    params = yaml.safe_load(composed)
    assert params["corrector"]["families"]["lili2"] == {"width": 32, "factor_dim": 16, "heads": 4}  # its preset
    assert params["corrector"]["variant_steps"]["lili2"] == 2
    (wd / "params.yaml").write_text(composed)

    # draftlab check and draftlab plan read the family from the params
    run(["-m", "draftlab.cli", "check", "--params", str(wd / "params.yaml")], root, env)
    bad = subprocess.run([sys.executable, "-m", "draftlab.cli", "check", "--params", str(wd / "params.yaml"),
                          "corrector.families.lili2.width=0"], cwd=root, env=env, capture_output=True, text=True)
    assert bad.returncode != 0 and "corrector.families.lili2.width=0 must be > 0" in bad.stderr
    plan = json.loads(run(["-m", "draftlab.cli", "plan", "--params", str(wd / "params.yaml"), "--device", "cpu",
                           "--disk", "100", "--json"], root, env).stdout)
    stage = next(s for s in plan["stages"] if s["stage"] == "corrector")
    assert any(n.startswith("lili2: ") for n in stage["notes"])

    # the corrector stage co-trains the family's variant from a base drafter on references
    save_random(load_params(wd / "params.yaml").target.random, wd / "models" / "target")  # what prepare_target writes
    t = load_target(wd / "models" / "target", "cpu", "float32")
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(100, t.vocab_size - 1, (8,), generator=g).tolist() for _ in range(5)]
    resps = generate_ar(t, prompts, 16, eos_ids=[]).tokens
    (wd / "data").mkdir()
    pd.DataFrame({"prompt_id": [str(i) for i in range(5)], "suite": ["sharegpt"] * 5,
                  "split": ["train"] * 3 + ["heldout"] * 2, "prompt_ids": prompts,
                  "response_ids": resps}).to_parquet(wd / "data" / "references.parquet")
    torch.manual_seed(0)
    mask = next(i for i in range(2, t.vocab_size) if all(i not in p + r for p, r in zip(prompts, resps)))
    save_drafter(DFlashDrafter.from_target(arch_from_target(t, DrafterDesign(8, 1, [0, 1], mask)), t),
                 wd / "models" / "drafter" / "pretrained")
    run(["-m", "draftlab.pipeline", "corrector"], wd, env)
    report = json.loads((wd / "results" / "corrector.json").read_text())["variants"]["lili2"]
    assert report["steps"] == 2 and report["budget"]["role"] == "main" and report["params_corrector"] > 1
    saved = json.loads((wd / "models" / "corrector" / "lili2" / "corrector" / "config.json").read_text())
    assert saved["format"] == "outside-lili2-v1" and saved["width"] == 32

    # the benchmark's arm: the grammar resolves it from the record, the registry loads its checkpoint (its format), the
    # speculative engine decodes with it
    for arm in ("lili2", "lili2-tree8"):  # its chain and its tree ranked by its pair rows
        out = run(["-m", "draftlab.cli", "decode", "--arm", arm, "--prompt", "hello", "--max-new-tokens", "8",
                   "--root", str(wd), "--color", "never"], root, env)
        assert f"arm {arm} · T=0 · 8 tokens in" in out.stdout and "rounds" in out.stdout  # speculative rounds
