"""The fused overlap kernel α = Σ min(q, p) vs its torch reference, under the Triton interpreter on CPU
(`TRITON_INTERPRET=1 pytest tests/kernels -m interpret`). The tolerance is derived from the fp32
reference's own error against fp64; the backward (torch recompute) is checked against autograd of
the reference and against finite differences."""
from _triton_interpret import EPS32  # first: sets TRITON_INTERPRET=1, skips without triton

import pytest
import torch

from draftlab.kernels import dispatch
from draftlab.kernels.tv_overlap import TVOverlap, tv_overlap_grad, tv_overlap_torch, tv_overlap_triton

pytestmark = pytest.mark.interpret


def _inputs(N, Vq, V, seed, with_vocab, dtype=torch.float32, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N, Vq, generator=g) * scale
    y = torch.randn(N, V, generator=g) * scale
    vocab = torch.randperm(V, generator=g)[:Vq] if with_vocab else None
    return x.to(dtype), y.to(dtype), vocab


def _tol(x, y, vocab) -> tuple[torch.Tensor, float]:
    ref32 = tv_overlap_torch(x, y, vocab)
    ref64 = tv_overlap_torch(x.double(), y.double(), vocab)
    err = float((ref32.double() - ref64).abs().max())
    return ref64, 4 * err + 4 * EPS32  # α ∈ [0, 1]: a few fp32 ulps on top of the reference's own error


@pytest.mark.parametrize("N,Vq,V,with_vocab", [(3, 7, 7, False), (2, 5, 13, True), (4, 100, 300, True),
                                              (2, 1500, 1500, False), (3, 1100, 2500, True)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernel_matches_reference(N, Vq, V, with_vocab, dtype):
    x, y, vocab = _inputs(N, Vq, V, seed=N * 7 + Vq + V, with_vocab=with_vocab, dtype=dtype)
    ref64, tol = _tol(x, y, vocab)
    out = tv_overlap_triton(x, y, vocab)
    assert out.shape == (N,) and out.dtype == torch.float32
    err = float((out.double() - ref64).abs().max())
    assert err <= tol, f"kernel error {err:.3g} > tolerance {tol:.3g}"


def test_hand_case_mass_outside_the_draft_vocabulary_is_lost():
    p = torch.tensor([[0.4, 0.4, 0.2]]).log()
    q_full = torch.tensor([[0.5, 0.5, 0.0]]).log()  # -inf logit for the third token
    q_draft = torch.tensor([[0.5, 0.5]]).log()  # draft vocabulary = target ids {0, 1}
    for fn in (tv_overlap_torch, tv_overlap_triton):
        assert float(fn(q_full, p)) == pytest.approx(0.8, abs=1e-6)
        assert float(fn(q_draft, p, torch.tensor([0, 1]))) == pytest.approx(0.8, abs=1e-6)  # not 1.0
    same = torch.randn(2, 9)
    assert torch.allclose(tv_overlap_triton(same, same), torch.ones(2), atol=1e-6)  # q == p -> α = 1


def test_rows_with_a_sparse_support_over_the_target_vocabulary():
    """A seeded drafter's q with the seed column, written over the target vocabulary (`specopd.slots`): -inf
    outside ~40 ids, whole kernel blocks of -inf (V > BLOCK). Forward and backward match the reference."""
    x, y, _ = _inputs(4, 2500, 2500, seed=5, with_vocab=False)
    support = torch.zeros(4, 2500, dtype=torch.bool)
    support[:, torch.randperm(2500, generator=torch.Generator().manual_seed(1))[:40]] = True
    support[1, 2400:] = True  # one row also has a dense tail
    x = x.masked_fill(~support, float("-inf"))
    ref64, tol = _tol(x, y, None)
    assert float((tv_overlap_triton(x, y).double() - ref64).abs().max()) <= tol
    x64 = x.double().requires_grad_(True)
    tv_overlap_torch(x64, y.double()).sum().backward()
    xk = x.clone().requires_grad_(True)
    TVOverlap.apply(xk, y, None).sum().backward()
    assert torch.isfinite(xk.grad).all() and torch.allclose(xk.grad.double(), x64.grad, atol=1e-6)


@pytest.mark.parametrize("with_vocab", [False, True])
def test_backward_matches_autograd_of_reference(with_vocab):
    x, y, vocab = _inputs(5, 40, 90 if with_vocab else 40, seed=11, with_vocab=with_vocab)
    x64 = x.double().requires_grad_(True)
    g = torch.randn(5, dtype=torch.float64)
    (tv_overlap_torch(x64, y.double(), vocab) * g).sum().backward()
    xk = x.clone().requires_grad_(True)
    yk = y.clone().requires_grad_(True)
    (TVOverlap.apply(xk, yk.detach(), vocab) * g.float()).sum().backward()
    assert torch.allclose(xk.grad.double(), x64.grad, atol=1e-6)
    assert yk.grad is None  # the target distribution is a fixed teacher
    manual = tv_overlap_grad(x.double(), y.double(), vocab, g, chunk=2)  # chunking changes nothing
    assert torch.allclose(manual, x64.grad, atol=1e-12)


def test_gradient_against_finite_differences():
    x, y, vocab = _inputs(1, 6, 10, seed=3, with_vocab=True, scale=1.0)
    x, y = x.double(), y.double()
    grad = tv_overlap_grad(x, y, vocab, torch.ones(1, dtype=torch.float64))
    h = 1e-6
    for j in range(6):
        e = torch.zeros_like(x)
        e[0, j] = h
        fd = (tv_overlap_torch(x + e, y, vocab) - tv_overlap_torch(x - e, y, vocab)) / (2 * h)
        assert float(grad[0, j]) == pytest.approx(float(fd), abs=1e-6)


def test_dispatch_detaches_the_target_on_both_backends(monkeypatch):
    x, y, vocab = _inputs(3, 8, 12, seed=5, with_vocab=True)
    for backend in ("torch", "triton"):
        xk, yk = x.clone().requires_grad_(True), y.clone().requires_grad_(True)
        a = dispatch.tv_overlap(xk, yk, vocab, backend=backend)
        a.sum().backward()
        assert xk.grad is not None and xk.grad.abs().sum() > 0 and yk.grad is None
    monkeypatch.delenv(dispatch.ENV, raising=False)
    assert dispatch.resolve_backend("cpu") == "torch"
