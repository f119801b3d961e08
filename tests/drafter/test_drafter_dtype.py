"""benchmark.drafter_dtype: drafters load in the target's dtype by default (`auto`), or a named one; a bad
value is one line."""
from __future__ import annotations

import pytest
import torch

from conftest import tiny_target
from draftlab.arms.grammar import Checkpoints
from draftlab.config import BenchmarkConfig
from draftlab.drafter.checkpoint import save_drafter
from draftlab.drafter.model import DFlashDrafter, DrafterDesign, arch_from_target
from draftlab.errors import ConfigError
from draftlab.pipeline.benchmark import build_arms, drafter_dtype


def test_bad_value_is_one_line():
    with pytest.raises(ConfigError, match=r"benchmark.drafter_dtype='int8' is not valid; choose one of: auto, "):
        BenchmarkConfig(drafter_dtype="int8").check("benchmark")
    BenchmarkConfig().check("benchmark")  # the default (auto) is valid


@pytest.mark.parametrize("name, want", [("auto", torch.bfloat16), ("float32", torch.float32), ("float16", torch.float16)])
def test_drafters_load_in_the_configured_dtype(tmp_path, name, want):
    t = tiny_target("qwen3")
    arch = arch_from_target(t, DrafterDesign(block_size=4, num_layers=1, target_layer_ids=[1], mask_token_id=3))
    save_drafter(DFlashDrafter.from_target(arch, t), tmp_path / "d")  # trained (and saved) in fp32
    t.model.to(torch.bfloat16)  # a bf16 target, as on a GPU
    assert drafter_dtype(name, t) == want
    cfg = BenchmarkConfig(arms=["dflash"], drafter_dtype=name)
    ck = Checkpoints(str(tmp_path / "d"), str(tmp_path / "s"), str(tmp_path / "l"), str(tmp_path / "c"))
    arm = build_arms(t, cfg, ck, pad_id=0)["dflash"]
    drafters = [v for v in vars(arm).values() if isinstance(v, DFlashDrafter)]
    assert drafters and {d.dtype for d in drafters} == {want}
