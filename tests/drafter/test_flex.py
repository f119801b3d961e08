"""The drafter's block-sparse training attention (issue 21, item 4; `draftlab.drafter.flex`): the BlockMask's
tiles give exactly the dense block mask; the flex path's outputs and gradients are as close to a float64 run of
the dense SDPA path as the split path is (4 x the split path's own fp32 error, plus a few ulps), for the plain
and the seeded drafter. On CPU torch runs flex attention's forward only (eager, no gradients): the outputs are
the real flex kernel's, the CPU gradients run the flex path with the kernel replaced by SDPA over the
BlockMask's tiles (`flex.tile_mask`); the real kernel's gradients are checked by the CUDA test (skipped without
CUDA) and by the accelerator check's `flex` section (`draftlab.checks.flex`). A training forward builds its
BlockMask once, for every layer."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from draftlab.config import CorrectorConfig, PretrainConfig, SpecOPDConfig
from draftlab.drafter import DFlashDrafter, DrafterDesign, arch_from_target
from draftlab.drafter import flex as dflex
from draftlab.drafter import model as dmodel
from draftlab.drafter.masks import context_mask, dense_block_mask, sample_anchors
from draftlab.errors import ConfigError, DraftlabError

S = 4
MASK = 1
TAPS = [0, 2, 3]

pytestmark = [pytest.mark.usefixtures("one_thread"),
              pytest.mark.skipif(not dflex.flex_available(), reason="this torch has no flex attention")]


def make_drafter(target, seed_mode="none", device="cpu"):
    arch = arch_from_target(target, DrafterDesign(S, 2, TAPS, MASK, seed=seed_mode))
    torch.manual_seed(0)
    d = DFlashDrafter.from_target(arch, target)
    with torch.no_grad():  # larger weights than the 0.02 init, so a wrong mask shows in the outputs
        for m in d.modules():
            if isinstance(m, torch.nn.Linear):
                m.weight.normal_(0, 0.2)
    return d.to(device)


def inputs(target, B=2, L=40, A=7, seed=0, device="cpu"):
    """Looping ids (so a seeded drafter finds seeds), tap features, padding on the second row, sorted anchors."""
    g = torch.Generator().manual_seed(seed)
    motif = torch.randint(3, target.vocab_size, (B, 9), generator=g)
    ids = motif.repeat(1, L // 9 + 1)[:, :L]
    with torch.no_grad():
        feats = target(ids, taps=TAPS).taps  # [B, L, 3H]
    valid = torch.ones(B, L, dtype=torch.bool)
    valid[1, L - 9:] = False
    anchors = torch.stack([sample_anchors(L - 9 * b, 3, S, A, g) for b in range(B)])  # [B, A]
    return [t.to(device) for t in (feats, valid, ids, anchors)]


def test_block_mask_tiles_are_the_dense_mask(target):
    """Every tile size (partial tiles, full tiles, skipped tiles, a ragged last tile): the mask the flex kernel
    applies equals the dense block mask, and tiles are skipped (block-sparse)."""
    feats, valid, ids, anchors = inputs(target, A=9)
    L = valid.shape[1]
    want = dense_block_mask(anchors, valid, S)  # [B, A*S, L + A*S]
    for tile in (4, 8, 16, 128):
        bm = dflex.build_block_mask(context_mask(anchors, valid), S, tile)
        assert bm.seq_lengths == (9 * S, L + 9 * S)
        assert torch.equal(dflex.tile_mask(bm), want), tile
        if tile < 16:
            assert bm.sparsity() > 20.0  # percent of tiles never computed
            assert bm.full_kv_num_blocks.sum() > 0  # and some computed without the mask_mod


def _hidden(d, attention, feats, valid, ids, anchors, dtype=torch.float32):
    d = d.to(dtype)
    d.train_attention = attention
    return d.forward_train(feats.to(dtype), valid, ids, anchors)  # [B, A, S, H]


def _tol(ref32, ref64):
    """4 x the fp32 reference's own error against float64, plus 8 fp32 ulps of the largest magnitude."""
    return 4 * (ref32.double() - ref64).abs().max().item() + 8 * torch.finfo(torch.float32).eps * ref64.abs().max().item()


@pytest.mark.parametrize("seed_mode", ["none", "lookup"])
def test_flex_forward_equals_split_on_cpu(target, seed_mode, monkeypatch):
    """The real flex attention (eager; CPU has its forward only) with small tiles, so tiles are skipped."""
    monkeypatch.setattr(dflex, "TILE", 8)
    d = make_drafter(target, seed_mode)
    x = inputs(target)
    with torch.no_grad():
        ref64 = _hidden(d, "dense", *x, dtype=torch.float64)  # SDPA in float64 (split rounds its scores to fp32)
        ref32 = _hidden(d, "split", *x)
        out = _hidden(d, "flex", *x)
    assert d.train_attention_impl(grad=False) == "flex"
    assert (out.double() - ref64).abs().max().item() <= _tol(ref32, ref64)


def _grads(d, attention, x, dtype, w):
    d.zero_grad(set_to_none=True)
    feats = x[0].to(dtype).clone().requires_grad_(True)
    h = _hidden(d, attention, feats, *x[1:], dtype=dtype)
    (h * w.to(dtype)).sum().backward()
    return h.detach(), {"feats": feats.grad, **{n: p.grad.clone() for n, p in d.named_parameters()}}


def _check_grads(d, x, attention="flex"):
    w = torch.randn(_hidden(d, "split", *x).shape, generator=torch.Generator().manual_seed(1))
    h64, g64 = _grads(d, "dense", x, torch.float64, w)  # SDPA in float64 (split rounds its scores to fp32)
    h32, g32 = _grads(d, "split", x, torch.float32, w)
    hf, gf = _grads(d, attention, x, torch.float32, w)
    assert (hf.double() - h64).abs().max().item() <= _tol(h32, h64)
    for n in g64:
        assert (gf[n].double() - g64[n]).abs().max().item() <= _tol(g32[n], g64[n]), n


@pytest.mark.parametrize("seed_mode", ["none", "lookup"])
def test_flex_path_gradients_equal_split_on_cpu(target, seed_mode, monkeypatch):
    """The flex path (BlockMask, layout, GQA, output) with the kernel replaced by SDPA over the mask its tiles
    give: outputs and gradients of every parameter and of the features equal the split path's."""
    monkeypatch.setattr(dflex, "TILE", 8)

    def kernel(q, k, v, block_mask, scale, enable_gqa):  # flex attention's contract, computed densely
        return F.scaled_dot_product_attention(q, k, v, attn_mask=dflex.tile_mask(block_mask)[:, None], scale=scale,
                                              enable_gqa=enable_gqa)

    monkeypatch.setattr(dflex, "_kernel", lambda device: kernel)
    monkeypatch.setattr(dmodel, "flex_supported", lambda device, grad: True)  # the replaced kernel has a backward
    d = make_drafter(target, seed_mode)
    _check_grads(d, inputs(target))


@pytest.mark.parametrize("layers", [2, 3])
def test_the_block_mask_is_built_once_per_forward(target, layers, monkeypatch):
    """A BlockMask's build evaluates the mask rule over every (query, key) tile (eager: the whole [A*S, L+A*S] grid):
    a training forward builds it once and hands it to every layer, whatever the layer count."""
    from torch.nn.attention import flex_attention as fa

    calls = []
    real = fa.create_block_mask

    def counting(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(fa, "create_block_mask", counting)
    monkeypatch.setattr(dflex, "TILE", 8)
    torch.manual_seed(0)
    d = DFlashDrafter.from_target(arch_from_target(target, DrafterDesign(S, layers, TAPS, MASK)), target)
    x = inputs(target)
    with torch.no_grad():  # CPU: flex attention's forward only
        for n in (1, 2):
            _hidden(d, "flex", *x)
            assert len(calls) == n  # one build per forward, none per layer


def test_choice_and_capability_check(target):
    d = make_drafter(target)
    assert d.train_attention == "auto" and d.train_attention_impl(grad=True) == "split"  # today's path on CPU
    d.train_attention = "dense"
    assert d.train_attention_impl(grad=True) == "dense"
    d.train_attention = "flex"
    with pytest.raises(DraftlabError, match="train_attention=flex cannot train on cpu") as e:
        d.train_attention_impl(grad=True)
    assert "\n" not in str(e.value)
    x = inputs(target)
    with pytest.raises(DraftlabError):  # a training forward on CPU asks for gradients
        d.forward_train(*x)
    with pytest.raises(ConfigError, match=r"pretrain.train_attention='sparse' is not valid"):
        PretrainConfig(train_attention="sparse").check("pretrain")
    # SpecOPD's run settings carry its own choice; co-training's are pretraining's (CorrectorConfig.run_settings)
    assert SpecOPDConfig(train_attention="dense").run_settings(1, 0.0).train_attention == "dense"
    assert CorrectorConfig().run_settings(PretrainConfig(train_attention="flex"), 1.0).train_attention == "flex"


def test_training_objective_sets_the_drafter_attention(target):
    pytest.importorskip("lightning")
    from draftlab.training.ce import DrafterCE

    d = make_drafter(target)
    DrafterCE(d, PretrainConfig(train_attention="dense"))
    assert d.train_attention == "dense"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="flex attention's backward runs on CUDA only")
@pytest.mark.parametrize("seed_mode", ["none", "lookup"])
def test_flex_kernel_outputs_and_gradients_equal_split_on_cuda(seed_mode):
    from conftest import tiny_target

    target = tiny_target("llama").to("cuda")
    d = make_drafter(target, seed_mode, "cuda")
    assert d.train_attention_impl(grad=True) == "flex"  # auto on CUDA
    _check_grads(d, inputs(target, L=300, A=24, device="cuda"))  # several 128-tiles
