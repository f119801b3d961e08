"""DrafterConfig -> architecture is one typed conversion (`DrafterConfig.design()` -> `draftlab.drafter.arch
.DrafterDesign` -> `arch_from_target(target, design)`), and it builds the archs the loose-argument call built:
tests/fixtures/drafter_archs.json holds them for the cpu, smoke and toy profiles (plain and seeded drafters, on a
stub target of each profile's target.arch, MASK = the last id, draft vocabulary = the section's when smaller than the
target's), as the pretraining recipe built them before the conversion existed (commit 1073f2f)."""
from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from types import SimpleNamespace

import pytest

from draftlab.config import DrafterConfig
from draftlab.drafter.arch import DrafterDesign, arch_from_target
from draftlab.errors import DraftlabError
from draftlab.params import build_params, compose_params
from draftlab.verifier.model import TargetModel

BEFORE = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "drafter_archs.json").read_text())


class Stub:
    """What arch_from_target reads of a target, from a preset's target.arch."""
    default_taps = TargetModel.default_taps

    def __init__(self, a, name):
        self.config = SimpleNamespace(num_attention_heads=a.num_heads, num_key_value_heads=a.num_kv_heads,
                                      head_dim=a.head_dim, intermediate_size=a.intermediate_size, rms_norm_eps=1e-5,
                                      rope_theta=10000.0, initializer_range=0.02)
        self.hidden_size, self.num_layers, self.vocab_size, self.name = a.hidden_size, a.num_layers, a.vocab_size, name


@pytest.mark.parametrize("profile", ["cpu", "smoke", "toy"])
def test_the_archs_are_those_built_before(root, profile, monkeypatch):
    if profile == "toy":  # the toy world composes in its folder (its files are checked)
        monkeypatch.chdir(root / "worlds" / "toy")
    p = build_params(compose_params([f"profile={profile}"], "../../conf" if profile == "toy" else root / "conf"))
    t = Stub(p.target.arch, p.target.name)
    V = t.vocab_size
    for kind, d in (("plain", p.drafter), ("seeded", p.seeded.resolve(p.drafter, p.pretrain)[0])):
        vocab = d.draft_vocab_size if d.draft_vocab_size and d.draft_vocab_size < V else 0
        assert arch_from_target(t, d.design(V - 1, vocab)).to_dict() == BEFORE[profile][kind], (profile, kind)


def test_design_carries_every_field_of_the_section():
    """Each DrafterDesign field is the DrafterConfig field of the same name (a field the conversion forgot fails)."""
    cfg = DrafterConfig(block_size=5, num_layers=3, target_layer_ids=[2, 7], mask_token_id=11, draft_vocab_size=99,
                        intermediate_size=64, num_heads=4, num_kv_heads=2, tap_norm=True, out_norm_init=0.5,
                        init_block_heads=1, seed="lookup", seed_max_ngram=4, seed_min_match=2, seed_logit=True,
                        seed_bias=3.0)
    d = cfg.design()
    for f in fields(DrafterDesign):
        assert getattr(d, f.name) == getattr(cfg, f.name), f.name
        assert getattr(d, f.name) != f.default or f.name == "target_layer_ids", f"{f.name}: not exercised"
    assert (cfg.design(3, 0).mask_token_id, cfg.design(3, 0).draft_vocab_size) == (3, 0)  # the run's values


def test_an_unresolved_mask_is_one_line(llama_target):
    with pytest.raises(DraftlabError, match=r"MASK id is -1: resolve drafter.mask_token_id=-1"):
        arch_from_target(llama_target, DrafterConfig().design())
