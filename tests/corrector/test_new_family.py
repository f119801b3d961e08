"""Adding a corrector family is three files: its module (the corrector and, at its end, its record), its package and
its config preset (docs/architecture.md "Adding a corrector family"). This test writes a throw-away family — a fixed
rule: the drafter's top-1 at every slot but the last, where it takes the candidate of rank `last_rank` — into a
temporary package on PYTHONPATH, names it in the params (`corrector.family_modules`) and runs `draftlab check`,
`draftlab plan`, the corrector stage (its co-training recipe) and the benchmark's arm (`draftlab decode`) on the
tiny-random target, each in its own process (the family's modules are loaded there, where a real run loads them), with
nothing of draftlab patched; the composition of conf/ and the random target, which know no family, are made here."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest
import torch
import yaml

pytestmark = pytest.mark.usefixtures("one_thread")

MODULE = '''"""A throw-away corrector family: a fixed rule (the drafter's top-1, the last slot's candidate of rank last_rank)."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from draftlab.corrector.base import Correction, CorrectionLoss, Corrector
from draftlab.corrector.dcoco import ArchDict
from draftlab.corrector.family import ArmEntry, Cost, Family
from draftlab.corrector.variants import Variant
from draftlab.errors import ConfigError

FORMAT = "throwaway-lastrank-v1"


@dataclass
class LastRankArch(ArchDict):  # config.json of a checkpoint
    last_rank: int = 2
    variant: str = "lastrank"
    format: str = FORMAT


@dataclass
class LastRankConfig:  # corrector.families.lastrank
    last_rank: int = 2

    def check(self, p: str) -> None:
        if self.last_rank < 1:
            raise ConfigError(f"{p}.last_rank={self.last_rank} must be >= 1")


class LastRank(Corrector):
    FORMAT = FORMAT

    def __init__(self, arch: LastRankArch):
        super().__init__()
        self.arch = arch
        self.unused = nn.Parameter(torch.zeros(1))  # a rule learns nothing; the optimiser and the checkpoint want one

    def parameter_breakdown(self) -> dict[str, int]:
        return {"unused": 1, "total": 1}

    def propose(self, block, rule="greedy", lam=0.75, backend=None) -> Correction:
        ids, _ = block.candidates(self.arch.last_rank)  # [*, n, K] target ids, best first
        tokens = ids[..., 0].clone()
        tokens[..., -1] = ids[..., -1, self.arch.last_rank - 1]
        return Correction(tokens)

    def loss(self, block, labels, valid, draft_index, rho, cumulative_mask=False, kind="joint") -> CorrectionLoss:
        den = valid.sum().float()
        return CorrectionLoss((self.unused ** 2).sum() * den, den, valid, valid)


FAMILY = Family(
    name="lastrank", module=__name__, arch=LastRankArch, format=FORMAT, config=LastRankConfig, budget="main",
    build=lambda cfg, drafter, v, k: LastRank(LastRankArch(cfg.last_rank, v.name)),
    load=lambda arch, drafter: LastRank(arch),
    cost=lambda cfg, shape: Cost(1, 1),
    variants=(Variant("lastrank", "lastrank"),),
    arms={"lastrank": {"": ArmEntry("lastrank", colour="#000000")}},
)
'''

PRESET = """\
# the throw-away family's preset: its module, its variant, its settings and its arm
corrector:
  family_modules: [throwaway.lastrank]
  variants: [lastrank]
  families:
    lastrank: {last_rank: 2}
benchmark:
  arms: [ar, dflash, lastrank]
"""


def run(args: list[str], cwd, env) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True)
    assert r.returncode == 0, (args, r.stdout[-2000:], r.stderr[-3000:])
    return r


def test_a_family_from_another_package_runs_through_the_pipeline(root, tmp_path):
    from draftlab.decoding import generate_ar
    from draftlab.drafter import DFlashDrafter, DrafterDesign, arch_from_target, save_drafter
    from draftlab.params import compose_text, load_params
    from draftlab.verifier.load import load_target, save_random

    pkg = tmp_path / "pkg" / "throwaway"  # the three files
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "lastrank.py").write_text(MODULE)
    (pkg / "lastrank.yaml").write_text(PRESET)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "pkg"), os.environ.get("PYTHONPATH", "")])}

    # the params: a small composition of conf/ (tiny-random, smoke sizes, the plain drafter) with the preset on top
    wd = tmp_path / "run"
    wd.mkdir()
    composed = compose_text(["target=tiny-random", "profile=smoke", "method=plain", "benchmark/arms=two",
                             "drafter.draft_vocab_size=0", "tracking.enabled=false", "corrector.max_steps=2",
                             "corrector.max_minutes=0", "corrector.batch_size=2", "corrector.anchors_per_seq=4",
                             "corrector.kernels=torch", "corrector.control=false"], root / "conf")  # conf/ alone
    params = yaml.safe_load(composed)
    for section, values in yaml.safe_load(PRESET).items():
        params[section].update(values)
    (wd / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))

    # draftlab check and draftlab plan read the family from the params
    run(["-m", "draftlab.cli", "check", "--params", str(wd / "params.yaml")], root, env)
    bad = subprocess.run([sys.executable, "-m", "draftlab.cli", "check", "--params", str(wd / "params.yaml"),
                          "corrector.families.lastrank.last_rank=0"], cwd=root, env=env, capture_output=True, text=True)
    assert bad.returncode != 0 and "corrector.families.lastrank.last_rank=0 must be >= 1" in bad.stderr
    plan = json.loads(run(["-m", "draftlab.cli", "plan", "--params", str(wd / "params.yaml"), "--device", "cpu",
                           "--disk", "100", "--json"], root, env).stdout)
    stage = next(s for s in plan["stages"] if s["stage"] == "corrector")
    assert any(n.startswith("lastrank: ") for n in stage["notes"])

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
    run([str(root / "stages" / "corrector.py")], wd, env)
    report = json.loads((wd / "results" / "corrector.json").read_text())["variants"]["lastrank"]
    assert report["steps"] == 2 and report["budget"]["role"] == "main" and report["params_corrector"] == 1
    saved = json.loads((wd / "models" / "corrector" / "lastrank" / "corrector" / "config.json").read_text())
    assert saved["format"] == "throwaway-lastrank-v1" and saved["last_rank"] == 2

    # the benchmark's arm: the grammar resolves it from the record, the registry loads its checkpoint (its format), the
    # speculative engine decodes with it
    out = run(["-m", "draftlab.cli", "decode", "--arm", "lastrank", "--prompt", "hello", "--max-new-tokens", "8",
               "--root", str(wd), "--color", "never"], root, env)
    assert "arm lastrank · T=0 · 8 tokens in" in out.stdout and "rounds" in out.stdout  # speculative rounds
