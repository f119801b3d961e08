"""Triton kernels vs their torch references, under the Triton interpreter on CPU (own process:
`TRITON_INTERPRET=1 pytest tests/kernels -m interpret`). Tolerances come from the reference's own
error against an fp64 evaluation of the same formula; the greedy walk must match exactly."""
from _triton_interpret import EPS32  # first: sets TRITON_INTERPRET=1, skips without triton

import importlib

import pytest
import torch
from torch import nn

from draftlab.corrector.base import DraftBlock
from draftlab.corrector.dcoco import DCOCOArch, DCOCOCorrector, corrector_inputs
from draftlab.kernels import dispatch
from draftlab.kernels.greedy_walk import greedy_walk_torch, greedy_walk_triton
from draftlab.kernels.transition_scores import transition_scores_torch, transition_scores_triton

pytestmark = pytest.mark.interpret


def _parts(N, P, K, M, seed, dtype=torch.float32):
    """First-layer parts as the model makes them: a/b sides are slices of one per-slot tensor (strided)."""
    g = torch.Generator().manual_seed(seed)
    za = torch.randn(N, P + 1, K, M, generator=g)  # a-side of slots 1..n
    zb = torch.randn(N, P + 1, K, M, generator=g)  # b-side of slots 1..n
    pair = torch.randn(N, P, M, generator=g)
    w = torch.randn(M, generator=g) / M ** 0.5
    bo = torch.randn(1, generator=g)
    lg = torch.randn(N, P + 1, K, generator=g) * 3
    return [x.to(dtype) for x in (za[:, :-1], zb[:, 1:], pair, w, bo)] + [lg[:, 1:]]


def _tol(args) -> tuple[torch.Tensor, float]:
    ref32 = transition_scores_torch(*args)
    ref64 = transition_scores_torch(*[a.double() for a in args])
    err = float((ref32.double() - ref64).abs().max())
    return ref64, 4 * err + EPS32 * float(ref64.abs().max())  # + one fp32 ulp of the largest score


@pytest.mark.parametrize("N,P,K,M", [(2, 3, 4, 8), (1, 1, 3, 5), (2, 4, 16, 40), (3, 2, 5, 33)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_transition_scores_kernel_matches_reference(N, P, K, M, dtype):
    args = _parts(N, P, K, M, seed=N * 1000 + P * 100 + K * 10 + M, dtype=dtype)
    ref64, tol = _tol(args)
    out = transition_scores_triton(*args)
    assert out.shape == (N, P, K, K) and out.dtype == torch.float32
    err = float((out.double() - ref64).abs().max())
    assert err <= tol, f"kernel error {err:.3g} > tolerance {tol:.3g} (4 × the fp32 reference's error vs fp64)"


def test_transition_scores_kernel_zero_output_layer_is_exact():
    za, zb, pair, w, bo, lg = _parts(2, 3, 6, 12, seed=7)
    out = transition_scores_triton(za, zb, pair, torch.zeros_like(w), torch.zeros_like(bo), lg)
    assert torch.equal(out, lg[:, :, None, :].expand_as(out))  # S_p(a, b) = ℓ_{p+1}(b) bit for bit


@pytest.mark.parametrize("P,K", [(0, 3), (1, 2), (4, 3), (6, 16), (3, 5)])
def test_greedy_walk_kernel_matches_reference(P, K):
    g = torch.Generator().manual_seed(P * 10 + K)
    scores = torch.randn(5, P, K, K, generator=g)
    start = torch.randint(0, K, (5,), generator=g)
    ref = greedy_walk_torch(scores, start)
    out = greedy_walk_triton(scores, start)
    assert out.shape == (5, P + 1) and torch.equal(out, ref)
    assert torch.equal(greedy_walk_triton(scores[:, :, :, :], start), ref)


@pytest.mark.parametrize("pair", [True, False])
def test_model_end_to_end_on_both_backends(pair):
    torch.manual_seed(0)
    E = nn.Embedding(50, 12).requires_grad_(False)
    spec = DCOCOArch(hidden_size=10, embed_dim=12, vocab_size=50, k=4, dim=8, mlp_hidden=20, use_pair_state=pair)
    model = DCOCOCorrector(spec, E)  # without the pair state the pair part is the bias, expanded (stride 0)
    g = torch.Generator().manual_seed(1)
    logits, hidden = torch.randn(3, 6, 50, generator=g), torch.randn(3, 6, 10, generator=g) * 20
    h, ids, lg = corrector_inputs(hidden, logits, 4)
    with torch.no_grad():
        init = model(h, ids, lg, backend="triton")
        assert torch.equal(init, lg[:, 1:, None, :].expand_as(init))
        for rule in ("greedy", "globalsum", "geometric"):
            tokens = model.propose(DraftBlock(h, cand=(ids, lg)), rule, backend="triton").tokens
            assert torch.equal(tokens, logits[:, 1:].argmax(-1))
        nn.init.normal_(model.mlp_out.weight, std=1.0)
        parts = model.first_layer_parts(h, ids)
        args = (*parts, model.mlp_out.weight[0], model.mlp_out.bias, lg[:, 1:])
        ref64, tol = _tol(args)
        tri = model(h, ids, lg, backend="triton")
        assert float((tri.double() - ref64).abs().max()) <= tol
        i_tri = model.propose(DraftBlock(h, cand=(ids, lg)), "greedy", backend="triton").extras["path_greedy"]
        i_ref = model.propose(DraftBlock(h, cand=(ids, lg)), "greedy", backend="torch").extras["path_greedy"]
        assert torch.equal(i_tri, i_ref)


def test_dispatch_rules(monkeypatch):
    monkeypatch.delenv(dispatch.ENV, raising=False)
    assert dispatch.resolve_backend("cpu") == "torch"  # auto: the reference off CUDA
    assert dispatch.resolve_backend("cuda") == "triton"  # auto: Triton on CUDA (no device query)
    assert dispatch.resolve_backend("cuda", "torch") == "torch"
    assert dispatch.resolve_backend("cpu", "triton") == "triton"  # interpreter
    monkeypatch.setenv(dispatch.ENV, "triton")
    assert dispatch.resolve_backend("cpu") == "triton"
    assert dispatch.resolve_backend("cpu", "torch") == "torch"  # the argument wins over the env var
    monkeypatch.setenv(dispatch.ENV, "cuda-please")
    with pytest.raises(ValueError, match="auto, torch or triton"):
        dispatch.resolve_backend("cpu")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET"):
        dispatch.resolve_backend("cpu", "triton")


def test_autograd_always_takes_the_reference(monkeypatch):
    monkeypatch.setenv(dispatch.ENV, "triton")
    args = _parts(2, 2, 3, 6, seed=3)
    a = args[0].clone().requires_grad_(True)
    out = dispatch.transition_scores(a, *args[1:])
    assert out.grad_fn is not None  # differentiable: the torch reference ran
    out.sum().backward()
    assert a.grad.abs().sum() > 0
    with torch.no_grad():
        assert dispatch.transition_scores(a, *args[1:]).grad_fn is None


def test_import_queries_no_cuda(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("CUDA queried at import time")

    monkeypatch.setattr(torch.cuda, "is_available", boom)
    monkeypatch.setattr(torch.cuda, "device_count", boom)
    for mod in KERNEL_MODULES:
        importlib.reload(importlib.import_module(mod))


KERNEL_MODULES = ("draftlab.kernels.dispatch", "draftlab.kernels.transition_scores", "draftlab.kernels.greedy_walk",
                  "draftlab.kernels.tv_overlap")


@pytest.mark.parametrize("name", ["transition_scores", "greedy_walk", "tv_overlap"])
def test_every_kernel_has_a_reference_with_its_signature(name):
    """Each Triton kernel sits beside a pure-torch reference with the same signature, and the dispatch
    takes the same arguments plus `backend` (tv_overlap included)."""
    import inspect

    mod = importlib.import_module(f"draftlab.kernels.{name}")
    ref, tri = getattr(mod, f"{name}_torch"), getattr(mod, f"{name}_triton")
    assert inspect.signature(ref) == inspect.signature(tri)
    assert list(inspect.signature(getattr(dispatch, name)).parameters) == [*inspect.signature(ref).parameters, "backend"]
