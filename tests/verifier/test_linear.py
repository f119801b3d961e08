"""The few-row CPU linear (`draftlab.kernels.linear`): within float32's error bound of `F.linear`, `F.linear`
itself above MAX_ROWS, installed on a target without untying its head, and greedy speculative = AR with it."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from conftest import tiny_target
from draftlab.decoding import SpeculativeEngine, generate_ar
from draftlab.errors import ConfigError
from draftlab.kernels.linear import (MAX_ROWS, PAD_MIN_WEIGHT, FewRowLinear, describe, few_row_linear, install,
                                     uninstall)
from draftlab.params import load_params
from stubs import OracleDrafter

EPS32 = torch.finfo(torch.float32).eps


def _bound(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The classic forward-error bound of a float32 dot product of length K: K·u·Σ|x_i w_i| (u = eps/2)."""
    return x.shape[-1] * (EPS32 / 2) * (x.double().abs() @ w.double().abs().T)


@pytest.mark.parametrize("rows", [1, 2, 5, 8, MAX_ROWS])
def test_few_row_linear_within_the_fp32_bound(rows):
    g = torch.Generator().manual_seed(rows)
    x, w, b = torch.randn(1, rows, 96, generator=g), torch.randn(300, 96, generator=g), torch.randn(300, generator=g)
    exact = F.linear(x.double(), w.double(), b.double())  # [1, rows, 300]
    got, ref = few_row_linear(x, w, b), F.linear(x, w, b)
    assert got.shape == ref.shape == (1, rows, 300) and got.dtype == torch.float32
    bound = _bound(x, w) + (EPS32 / 2) * exact.abs()  # + the bias add's rounding
    assert ((ref.double() - exact).abs() <= bound).all()  # the bound holds for the reference ...
    assert ((got.double() - exact).abs() <= bound).all()  # ... and for the kernel


def test_above_max_rows_it_is_f_linear_bit_for_bit():
    x, w = torch.randn(MAX_ROWS + 1, 32), torch.randn(40, 32)
    assert torch.equal(few_row_linear(x, w), F.linear(x, w))
    assert few_row_linear(torch.randn(0, 32), w).shape == (0, 40)
    assert torch.equal(few_row_linear(x[:1], w), F.linear(x[:1], w))  # one row of a small weight: the GEMV


def test_one_row_of_a_large_weight_is_the_padded_product():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(PAD_MIN_WEIGHT // 256, 256, generator=g)  # exactly PAD_MIN_WEIGHT elements: padded
    x = torch.randn(1, 1, 256, generator=g)
    got, exact = few_row_linear(x, w), F.linear(x.double(), w.double())
    assert got.shape == (1, 1, w.shape[0])
    assert torch.equal(got[0], (w @ torch.cat([x[0], x[0]]).T)[:, :1].T)  # the 2-column product's first column
    assert ((got.double() - exact).abs() <= _bound(x, w)).all()


def test_install_keeps_the_tied_head_and_reverts():
    t = tiny_target("llama", seed=5)
    n_linear = sum(type(m) is torch.nn.Linear for m in t.model.modules())
    ids = torch.randint(1, t.vocab_size, (1, 6))
    before = t(ids).logits
    assert install(t.model, "torch") == 0 and describe(t.model) == "torch"
    assert install(t.model, "auto") == n_linear > 0
    assert type(t.lm_head) is FewRowLinear and str(n_linear) in describe(t.model)
    if t.config.tie_word_embeddings:
        assert t.lm_head.weight is t.embed_tokens.weight  # the same Parameter: still tied
    after = t(ids).logits
    assert torch.allclose(after, before, rtol=1e-4, atol=1e-5) and torch.equal(after.argmax(-1), before.argmax(-1))
    assert uninstall(t.model) == n_linear and describe(t.model) == "torch"
    assert torch.equal(t(ids).logits, before)


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_greedy_speculative_equals_ar_with_few_row_linears(arch):
    t = tiny_target(arch, seed=7)
    install(t.model, "auto")
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(1, t.vocab_size, (n,), generator=g).tolist() for n in (7, 12, 5)]
    ref = [generate_ar(t, [p], 14, eos_ids=[]).tokens[0] for p in prompts]  # 1 row per step
    assert generate_ar(t, prompts, 14, eos_ids=[]).tokens == ref  # 3 rows per step
    drafter = OracleDrafter(t, block_size=5, mode="mixed", p_right=0.7, seed=2)
    drafter.prompts = prompts
    assert SpeculativeEngine(t, drafter).generate(prompts, 14, eos_ids=[]).tokens == ref


def test_bad_mode_is_one_line(root):
    with pytest.raises(ConfigError, match=r"target.linear='fast' is not valid; choose one of: auto, torch"):
        load_params(root / "params.yaml", ["target.linear=fast"])
    with pytest.raises(ValueError, match=r"target.linear='fast' is not valid; choose auto or torch"):
        install(tiny_target("llama").model, "fast")


def test_install_on_a_drafter_switches_its_head_and_keeps_greedy_exact():
    """The benchmark installs the target's layers on its drafters too (`installed`): the drafter's nn.Linear
    modules and its head (a product on a buffer, flagged `few_row`) switch, its logits stay within float32
    rounding of F.linear's, uninstall restores them bit for bit, and greedy speculative output still equals AR's."""
    from draftlab.kernels.linear import installed
    from stubs import sharp_drafter

    t = tiny_target("llama", seed=11)
    vocab = torch.arange(0, t.vocab_size, 2)
    d = sharp_drafter(t, 4, [0, 1], mask_id=1, vocab=vocab, seed=3, arch_kw={"seed": "lookup", "seed_logit": True})
    h = torch.randn(3, 4, t.config.hidden_size, generator=torch.Generator().manual_seed(0))  # [B, S, H]: 12 rows
    before = d.logits(h)
    n_linear = sum(type(m) is torch.nn.Linear for m in d.modules())
    assert not installed(d) and install(d, "auto") == n_linear + 1 and installed(d) and d.few_row
    after = d.logits(h)
    bound = _bound(h.reshape(-1, h.shape[-1]), d.head_weight).view_as(after)
    assert ((after - before).abs() <= 2 * bound).all()  # each within the bound of the exact product
    assert uninstall(d) == n_linear + 1 and not installed(d) and not d.few_row and torch.equal(d.logits(h), before)
    install(t.model, "auto"), install(d, "auto")
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(2, t.vocab_size, (n,), generator=g).tolist() for n in (9, 6)]
    ref = [generate_ar(t, [p], 12, eos_ids=[]).tokens[0] for p in prompts]
    assert SpeculativeEngine(t, d).generate(prompts, 12, eos_ids=[]).tokens == ref
