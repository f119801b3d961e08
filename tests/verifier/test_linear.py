"""The decode-time CPU linear layers (`draftlab.kernels.linear`): each path within float32's error bound of
`F.linear`, `F.linear` itself above MAX_ROWS, a plan measured
per row count (F.linear kept unless another path is clearly faster), installed on a target without untying its
head, and greedy speculative = AR under every mode."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from conftest import tiny_target
from draftlab.decoding import SpeculativeEngine, generate_ar
from draftlab.errors import ConfigError
from draftlab.kernels import linear as kl
from draftlab.kernels.linear import (MAX_ROWS, MODES, PAD_MIN_WEIGHT, DecodeLinear, Plan, choose, decode_linear,
                                     describe, few_row_linear, install, measure_plan, onednn_available, plan_of,
                                     uninstall)
from draftlab.params import load_params
from stubs import OracleDrafter

EPS32 = torch.finfo(torch.float32).eps
needs_onednn = pytest.mark.skipif(not onednn_available(), reason="torch built without oneDNN")


def _bound(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The classic forward-error bound of a float32 dot product of length K: K·u·Σ|x_i w_i| (u = eps/2)."""
    return x.shape[-1] * (EPS32 / 2) * (x.double().abs() @ w.double().abs().T)


def _owner(path: str) -> torch.nn.Module:
    m = torch.nn.Module()
    m.decode_plan = Plan.fixed(path)
    return m


@pytest.mark.parametrize("path", ["few-row", pytest.param("onednn", marks=needs_onednn)])
@pytest.mark.parametrize("rows", [1, 2, 5, 8, 17, MAX_ROWS])
def test_each_path_within_the_fp32_bound(rows, path):
    g = torch.Generator().manual_seed(rows)
    x, w, b = torch.randn(1, rows, 96, generator=g), torch.randn(300, 96, generator=g), torch.randn(300, generator=g)
    exact = F.linear(x.double(), w.double(), b.double())  # [1, rows, 300]
    got, ref = decode_linear(x, w, b, _owner(path)), F.linear(x, w, b)
    assert got.shape == ref.shape == (1, rows, 300) and got.dtype == torch.float32
    bound = _bound(x, w) + (EPS32 / 2) * exact.abs()  # + the bias add's rounding
    assert ((ref.double() - exact).abs() <= bound).all()  # the bound holds for the reference ...
    assert ((got.double() - exact).abs() <= bound).all()  # ... and for the path


@pytest.mark.parametrize("path", ["few-row", pytest.param("onednn", marks=needs_onednn)])
def test_above_max_rows_every_path_is_f_linear_bit_for_bit(path):
    x, w = torch.randn(MAX_ROWS + 1, 32), torch.randn(40, 32)
    assert torch.equal(decode_linear(x, w, None, _owner(path)), F.linear(x, w))
    assert decode_linear(torch.randn(0, 32), w, None, _owner(path)).shape == (0, 40)
    assert torch.equal(few_row_linear(x[:1], w), F.linear(x[:1], w))  # few-row, one row of a small weight: GEMV


def test_few_row_pads_one_row_of_a_large_weight():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(PAD_MIN_WEIGHT // 256, 256, generator=g)  # exactly PAD_MIN_WEIGHT elements: padded
    x = torch.randn(1, 1, 256, generator=g)
    got, exact = few_row_linear(x, w), F.linear(x.double(), w.double())
    assert got.shape == (1, 1, w.shape[0])
    assert torch.equal(got[0], (w @ torch.cat([x[0], x[0]]).T)[:, :1].T)  # the 2-column product's first column
    assert ((got.double() - exact).abs() <= _bound(x, w)).all()


@needs_onednn
def test_the_packed_weight_follows_the_weight():
    lin = torch.nn.Linear(16, 24, bias=False)
    assert install(lin, "onednn") == 1 and type(lin) is DecodeLinear
    x = torch.randn(3, 16)
    before = lin(x)
    with torch.no_grad():
        lin.weight.mul_(2)  # its version counter moves: the packed copy is made again
    assert torch.allclose(lin(x), 2 * before, rtol=1e-6, atol=1e-6)
    assert uninstall(lin) == 1 and "_onednn_packed" not in lin.__dict__ and type(lin) is torch.nn.Linear


def test_a_plan_reads_row_counts_and_keeps_f_linear_unless_clearly_faster():
    rows = (1, 2, 8, 17)
    ms = {"torch": [10.0, 10.0, 20.0, 30.0], "few-row": [9.8, 12.0, 15.0, 30.0], "onednn": [11.0, 9.0, 16.0, 20.0]}
    plan = choose(ms, rows)
    assert plan.paths == ("torch", "onednn", "few-row", "onednn")  # 9.8 vs 10: within the margin, F.linear stays
    assert [plan.path(r) for r in (1, 2, 7, 8, 16, 17, 64)] == ["torch", "onednn", "onednn", "few-row", "few-row",
                                                                 "onednn", "onednn"]
    assert plan.summary() == "torch for 1 row, onednn for 2-7 rows, few-row for 8-16 rows, onednn for 17-64 rows"
    assert Plan.fixed("onednn").summary() == "onednn" and plan.as_dict()["pass_ms"] == ms


def test_auto_measures_a_plan_on_the_models_own_weights():
    t = tiny_target("llama", seed=5)
    plan = measure_plan(t.model, rows=(1, 4), reps=1)
    assert plan.rows == (1, 4) and set(plan.paths) <= set(MODES[1:]) and plan.mode == "auto"
    assert set(plan.ms) == {p for p in MODES[1:] if p != "onednn" or onednn_available()}
    assert all(len(v) == 2 and min(v) > 0 for v in plan.ms.values())


@pytest.mark.parametrize("mode", ["few-row", pytest.param("onednn", marks=needs_onednn), "auto"])
def test_install_keeps_the_tied_head_and_reverts(mode):
    t = tiny_target("llama", seed=5)
    n_linear = sum(type(m) is torch.nn.Linear for m in t.model.modules())
    ids = torch.randint(1, t.vocab_size, (1, 6))
    before = t(ids).logits
    assert install(t.model, "torch") == 0 and describe(t.model) == "torch" and plan_of(t.model) is None
    assert install(t.model, mode) == n_linear > 0
    assert type(t.lm_head) is DecodeLinear and f"on {n_linear} layers" in describe(t.model)
    assert plan_of(t.model).mode == mode and describe(t.model).startswith("auto: " if mode == "auto" else mode)
    if t.config.tie_word_embeddings:
        assert t.lm_head.weight is t.embed_tokens.weight  # the same Parameter: still tied
    after = t(ids).logits
    assert torch.allclose(after, before, rtol=1e-4, atol=1e-5) and torch.equal(after.argmax(-1), before.argmax(-1))
    assert uninstall(t.model) == n_linear and describe(t.model) == "torch" and plan_of(t.model) is None
    assert torch.equal(t(ids).logits, before)


@pytest.mark.parametrize("arch,mode", [("llama", "few-row"), ("qwen3", "few-row"), ("llama", "auto"),
                                       pytest.param("qwen3", "onednn", marks=needs_onednn)])
def test_greedy_speculative_equals_ar_under_each_mode(arch, mode):
    t = tiny_target(arch, seed=7)
    install(t.model, mode)
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(1, t.vocab_size, (n,), generator=g).tolist() for n in (7, 12, 5)]
    ref = [generate_ar(t, [p], 14, eos_ids=[]).tokens[0] for p in prompts]  # 1 row per step
    assert generate_ar(t, prompts, 14, eos_ids=[]).tokens == ref  # 3 rows per step
    drafter = OracleDrafter(t, block_size=5, mode="mixed", p_right=0.7, seed=2)
    drafter.prompts = prompts
    assert SpeculativeEngine(t, drafter).generate(prompts, 14, eos_ids=[]).tokens == ref


def test_bad_mode_is_one_line(root, monkeypatch):
    with pytest.raises(ConfigError, match=r"target.linear='fast' is not valid; choose one of: auto, torch, few-row, "
                                          r"onednn"):
        load_params(root / "params.yaml", ["target.linear=fast"])
    with pytest.raises(ValueError, match=r"target.linear='fast' is not valid; choose one of: auto, torch, few-row, "
                                         r"onednn"):
        install(tiny_target("llama").model, "fast")
    monkeypatch.setattr(kl, "onednn_available", lambda: False)
    with pytest.raises(ValueError, match=r"target.linear='onednn' needs a torch build with oneDNN"):
        install(tiny_target("llama").model, "onednn")


def test_install_on_a_drafter_switches_its_head_and_keeps_greedy_exact():
    """The benchmark installs the target's plan on its drafters too: the drafter's nn.Linear modules and its head
    (a product on a buffer, which declares `decode_plan`) switch, its logits stay within float32 rounding of
    F.linear's, uninstall restores them bit for bit, and greedy speculative output still equals AR's."""
    from draftlab.kernels.linear import installed
    from stubs import sharp_drafter

    t = tiny_target("llama", seed=11)
    vocab = torch.arange(0, t.vocab_size, 2)
    d = sharp_drafter(t, 4, [0, 1], mask_id=1, vocab=vocab, seed=3, arch_kw={"seed": "lookup", "seed_logit": True})
    h = torch.randn(3, 4, t.config.hidden_size, generator=torch.Generator().manual_seed(0))  # [B, S, H]: 12 rows
    before = d.logits(h)
    n_linear = sum(type(m) is torch.nn.Linear for m in d.modules())
    assert install(t.model, "few-row") > 0
    plan = plan_of(t.model)
    assert not installed(d) and install(d, plan) == n_linear + 1 and installed(d) and d.decode_plan is plan
    after = d.logits(h)
    bound = _bound(h.reshape(-1, h.shape[-1]), d.head_weight).view_as(after)
    assert ((after - before).abs() <= 2 * bound).all()  # each within the bound of the exact product
    assert uninstall(d) == n_linear + 1 and not installed(d) and d.decode_plan is None
    assert torch.equal(d.logits(h), before)
    install(d, plan)
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(2, t.vocab_size, (n,), generator=g).tolist() for n in (9, 6)]
    ref = [generate_ar(t, [p], 12, eos_ids=[]).tokens[0] for p in prompts]
    assert SpeculativeEngine(t, d).generate(prompts, 12, eos_ids=[]).tokens == ref
