"""The static-shape steps compile as one graph each, and a decode over ragged prompts compiles each once.

`forward.stream_step` (the streams' target pass: slot plan, every layer, the logits rows) traced by
`torch._dynamo.explain` as the engine calls it has no graph break, for decode (T=1) and verify (T=S) shapes of tiny
Llama and Qwen3 targets; and the AR and speculative engines, decoding prompts of different lengths one after the
other with the steps compiled (a counting backend: no inductor on 2 cores), compile exactly one graph per step
shape — the KV buffer's capacity is bucketed, so a prompt's length does not make a new shape. Greedy output is the
eager engine's, token for token. An unknown engine.compile is one line."""
from __future__ import annotations

import pytest
import torch

from conftest import qwen3_target, tiny_target  # noqa: F401
from draftlab.decoding import SpeculativeEngine, generate_ar
from draftlab.verifier.forward import stream_step
from draftlab.verifier.streams import StreamCache

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
@pytest.mark.parametrize("T", [1, 5])
def test_the_stream_step_has_no_graph_break(arch, T):
    t = tiny_target(arch)
    sc = StreamCache(t, 2, capacity=40)
    sc.prefill([[3, 4, 5, 6], [7, 8]], pad_id=0)
    ids = torch.randint(1, t.vocab_size, (2, T))
    valid = torch.ones(2, T, dtype=torch.bool)
    ex = torch._dynamo.explain(stream_step)(t.model, sc.kv, sc.lengths, ids, valid, sc.capacity, (1,), 0)
    assert ex.graph_break_count == 0 and ex.graph_count == 1, ex.break_reasons


def test_ragged_prompts_compile_each_step_once():
    from torch._dynamo.testing import CompileCounter

    from stubs import OracleDrafter

    t = tiny_target("llama")
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(1, t.vocab_size, (n,), generator=g).tolist() for n in (5, 13, 9, 21)]
    eager_ar = [generate_ar(t, [p], 12, eos_ids=[]).tokens for p in prompts]
    d = OracleDrafter(t, block_size=4, mode="mixed", p_right=0.6, seed=5)
    eager_spec = []
    for p in prompts:
        d.prompts = [p]
        eager_spec.append(SpeculativeEngine(t, d).generate([p], 12, eos_ids=[]).tokens)
    counter = CompileCounter()
    torch._dynamo.reset()
    t.step = torch.compile(stream_step, backend=counter, fullgraph=True, dynamic=False)
    t.compiled = "counting"
    try:
        for p, want in zip(prompts, eager_ar):
            assert generate_ar(t, [p], 12, eos_ids=[]).tokens == want
        assert counter.frame_count == 1  # decode: one stream, one token, one bucketed capacity
        for p, want in zip(prompts, eager_spec):
            d.prompts = [p]
            assert SpeculativeEngine(t, d).generate([p], 12, eos_ids=[]).tokens == want
        assert counter.frame_count == 2  # + verify: one stream, slot 0 + 3 proposals
    finally:
        t.compile_steps("off")
        torch._dynamo.reset()


def test_bad_engine_settings_are_one_line():
    from draftlab.config import EngineConfig
    from draftlab.errors import ConfigError

    with pytest.raises(ConfigError, match="engine.compile") as e:
        EngineConfig(compile="fast").check("engine")
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="engine.kv_capacity=-1"):
        EngineConfig(kv_capacity=-1).check("engine")
    with pytest.raises(ConfigError, match=r"engine.kv_capacity=100 is smaller than the longest request needs \(657"):
        EngineConfig(kv_capacity=100).check_room("engine", 512, 128, 8)


def counted_target(t, counter, seen: list) -> None:
    """Compile t's stream pass with `counter` (a counting backend: no inductor); each call's ids shape (batch, new
    tokens) goes into `seen`."""
    torch._dynamo.reset()
    t.compile_steps("on", backend=counter)
    compiled = t.step

    def step(*a, **kw):
        seen.append(tuple(a[3].shape))
        return compiled(*a, **kw)

    t.step = step


def test_finished_streams_leave_in_halvings_when_compiled():
    """With compiled steps a finished stream stays as a retired row until the live ones are at most half the batch:
    every pass sees a batch of 6, 3 or 1 (never 5, 4, 2), the same tokens come out as eager (ragged streams finishing
    at different rounds), and each (step, batch) pair compiles once."""
    from torch._dynamo.testing import CompileCounter

    from stubs import OracleDrafter

    t = tiny_target("llama")
    g = torch.Generator().manual_seed(4)
    prompts = [torch.randint(1, t.vocab_size, (n,), generator=g).tolist() for n in (5, 13, 9, 21, 7, 11)]
    d = OracleDrafter(t, block_size=4, mode="mixed", p_right=0.6, seed=5)
    d.prompts = prompts
    want_spec = SpeculativeEngine(t, d).generate(prompts, 14, eos_ids=[]).tokens
    eos = [want_spec[0][5]]  # a token that ends some streams early (AR with EOS)
    want_ar = generate_ar(t, prompts, 14, eos_ids=eos).tokens
    counter, seen = CompileCounter(), []
    counted_target(t, counter, seen)
    try:
        assert SpeculativeEngine(t, d).generate(prompts, 14, eos_ids=[]).tokens == want_spec
        batches = {b for b, _ in seen}
        assert batches <= {6, 3, 1} and 6 in batches
        spec_graphs = counter.frame_count
        assert spec_graphs == len(batches)
        seen.clear()
        assert generate_ar(t, prompts, 14, eos_ids=eos).tokens == want_ar
        batches = {b for b, _ in seen}
        assert batches <= {6, 3, 1}
        assert counter.frame_count == spec_graphs + len(batches)
    finally:
        t.compile_steps("off")
        torch._dynamo.reset()


def test_varying_verify_widths_meet_a_few_shapes_when_compiled():
    """Compiled, a verify pass is 1, 2, 4 or 8 tokens wide: prompt lookup proposing 2 tokens (3 to verify) is
    verified 4 wide, the extra slot never kept, and the tokens are AR's. The target is a cycler (checks.seeded:
    its greedy text repeats the prompt's span), so the lookup matches every round."""
    from torch._dynamo.testing import CompileCounter

    from draftlab.checks.models import build_target
    from draftlab.checks.seeded import cycling_prompts, make_cycler
    from draftlab.decoding.lookup import PromptLookup

    t = build_target(torch.device("cpu"), torch.float32, "llama", 97, 64, 2, 4, 2, 96, tie=False, seed=7)
    prompts, spans = cycling_prompts(2, 20, 6, t.vocab_size, seed=3)
    make_cycler(t, spans)
    want = generate_ar(t, prompts, 16, eos_ids=[]).tokens
    assert want[0][:6] == (spans[0] * 5)[20:26]  # the target continues the span: the lookup is right
    counter, seen = CompileCounter(), []
    counted_target(t, counter, seen)
    try:
        res = SpeculativeEngine(t, None, PromptLookup(8, 3, 2)).generate(prompts, 16, eos_ids=[])
        assert res.tokens == want
        assert {w for _, w in seen} == {4}, seen  # W+1 = 3 tokens, verified 4 wide
        assert counter.frame_count == 1
    finally:
        t.compile_steps("off")
        torch._dynamo.reset()


# ---- the drafter's passes and the correctors' proposal steps ------------------------------------------------


def _seeded_setup():
    from test_corrector_seeded import seeded

    t = tiny_target("llama")
    return t, seeded(t)  # a seeded drafter with a 10-token draft vocabulary, the seed column and a seed bias


@pytest.mark.parametrize("kind", ["plain", "seeded"])
def test_the_drafter_steps_have_no_graph_break(kind):
    """The drafter's context pass and block pass (`drafter.steps`), traced as `extend_context` / `draft` call them."""
    from draftlab.drafter.steps import block_step, context_step, pad_context
    from test_seeded import TAPS, make_seeded

    t, d = _seeded_setup() if kind == "seeded" else (tiny_target("llama"), make_seeded(tiny_target("llama"), 5,
                                                                                        seed_mode="none"))
    if kind == "plain":
        t = tiny_target("llama")
    st = d.new_state(2, capacity=64)
    feats = torch.randn(2, 3, len(TAPS) * t.hidden_size)
    valid = torch.tensor([[True, True, False], [True, False, False]])
    pos = torch.tensor([[0, 1, 0], [0, 0, 0]])
    f, v, p = pad_context(feats, valid, pos, d.block_size)
    ex = torch._dynamo.explain(context_step)(d, st.kv, st.lengths, f, v, p)
    assert ex.graph_break_count == 0 and ex.graph_count == 1, ex.break_reasons
    ids = torch.randint(0, t.vocab_size - 1, (2, d.block_size))
    ex = torch._dynamo.explain(block_step)(d, st.kv, st.lengths + 2, ids, torch.arange(d.block_size).expand(2, -1))
    assert ex.graph_break_count == 0 and ex.graph_count == 1, ex.break_reasons


@pytest.mark.parametrize("variant,rule", [("dcoco", "greedy"), ("dcoco", "globalsum"), ("dcoco", "geometric"),
                                          ("dspark", "greedy"), ("domino", "greedy"), ("dflash2", "greedy"),
                                          ("lilicorr", "greedy")])
def test_every_corrector_proposal_step_has_no_graph_break(variant, rule):
    """`corrector.proposal.propose_step` of every family (Domino's GRU as plain ops: `sequential.gru_cell`), on a
    seeded drafter's draft (its seed column included), traced as `CorrectorProposal` calls it when compiled."""
    from draftlab.corrector.families import build_corrector
    from draftlab.corrector.proposal import propose_step
    from test_corrector_seeded import ccfg

    t, d = _seeded_setup()
    corr = build_corrector(ccfg(), d, variant).eval()
    B, S = 3, d.block_size
    draft = d.draft(d.new_state(B, capacity=32), torch.randint(0, t.vocab_size - 1, (B, S)),
                    torch.arange(S).expand(B, -1))
    anchor = torch.randn(B, d.arch.n_taps * t.hidden_size) if variant == "lilicorr" else None  # the taps before
    args = (corr, draft.hidden[:, 1:], draft.logits[:, 1:], draft.block_ids[:, 0], draft.vocab,
            draft.extra_ids[:, 1:], rule, 0.75, "torch", anchor)
    with torch.no_grad():
        ex = torch._dynamo.explain(propose_step)(*args)
        assert ex.graph_break_count == 0 and ex.graph_count == 1, ex.break_reasons
        eager = propose_step(*args)[0]
        assert torch.equal(torch.compile(propose_step, backend="eager", fullgraph=True)(*args)[0], eager)


class HostOps:
    """A TorchDispatchMode counting the aten ops dispatched outside the compiled steps (each step runs with the
    mode popped: `inside`), and the host reads of a tensor's value (`aten._local_scalar_dense`: `int(t)`,
    `bool(t)`, `t.item()`; on CUDA each is a synchronisation)."""

    def __init__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        counter = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                counter.ops += 1
                counter.reads += func is torch.ops.aten._local_scalar_dense.default
                return func(*args, **(kwargs or {}))

        self.ops, self.reads, self.mode = 0, 0, Mode()

    def inside(self, fn):
        from torch.utils._python_dispatch import _pop_mode_temporarily

        def run(*a, **kw):
            if torch._C._len_torch_dispatch_stack() == 0:
                return fn(*a, **kw)
            with _pop_mode_temporarily():  # the compiled graph's own work is not host work
                return fn(*a, **kw)
        return run


def _compiled_arm(arm: str, backend):
    """A tiny target and the arm's drafter and proposal step, every step compiled with `backend`."""
    from draftlab.corrector.families import build_corrector
    from draftlab.corrector.proposal import CorrectorProposal
    from draftlab.decoding.api import DrafterProposal
    from draftlab.decoding.width import SpanProposal
    from test_corrector_seeded import ccfg, perturbed

    t, d = _seeded_setup()
    if arm == "dflash-seeded":
        step = DrafterProposal()
    elif arm == "dflash-seeded-cut":
        step = SpanProposal(d.mask_token_id, "span", 2, 0.15)
    else:
        step = CorrectorProposal(perturbed(build_corrector(ccfg(), d, arm), std=0.1 if arm == "dspark" else 3.0))
    return t, d, step


def _compile_all(t, d, step, backend, wrap=lambda f: f):
    t.compile_steps("on", backend=backend)
    d.compile_steps("on", backend=backend)
    t.step = wrap(t.step)
    d._steps = tuple(wrap(s) for s in d._steps)
    if hasattr(step, "compile_steps"):
        step.compile_steps("on", backend=backend)
        if hasattr(step, "step"):
            step.step = wrap(step.step)
        if hasattr(step, "_cut"):
            step._cut = wrap(step._cut)


def _uncompile(t, d, step):
    for x in (t, d, step):
        if hasattr(x, "compile_steps"):
            x.compile_steps("off")
    torch._dynamo.reset()


ARMS = ["dflash-seeded", "dflash-seeded-cut", "dcoco", "dspark", "domino"]


@pytest.mark.parametrize("arm", ARMS)
def test_every_arm_compiled_decodes_as_eager_and_compiles_each_shape_once(arm):
    """Target, drafter and proposal step compiled (a counting backend): greedy output equals AR's on two sets of ragged
    prompts (fp32), and the graphs compiled are exactly one per (step, shape) met — batches 4, 2, 1 as streams
    finish, the verify widths, the context widths S and 2S —, however long the prompts."""
    from torch._dynamo.testing import CompileCounter
    from test_seeded import _loop_prompts

    t, d, step = _compiled_arm(arm, None)
    first = _loop_prompts()
    g = torch.Generator().manual_seed(8)
    second = [torch.randint(1, t.vocab_size - 1, (n,), generator=g).tolist() + p for n, p in zip((3, 9, 14, 6), first)]
    counter, met = CompileCounter(), set()

    def shapes(fn):
        def run(*a, **kw):
            met.add((fn.__name__, tuple(tuple(x.shape) for x in a if torch.is_tensor(x))))
            return fn(*a, **kw)
        return run

    torch._dynamo.reset()
    _compile_all(t, d, step, counter, shapes)
    try:
        for prompts in (first, second):
            got = SpeculativeEngine(t, d, step).generate(prompts, 16, eos_ids=[])
            assert got.tokens == generate_ar(t, prompts, 16, eos_ids=[]).tokens
        assert counter.frame_count == len(met), sorted(met)
        assert {s[1][0][0] for s in met} <= {4, 2, 1}  # the batch: 4 streams, then halvings
    finally:
        _uncompile(t, d, step)


HOST_OPS_PER_ROUND = 80  # the bound stated in docs/decisions.md "A static-shape engine" (measured: 55-66)


@pytest.mark.parametrize("arm", ARMS)
def test_host_work_per_round_is_bounded(arm):
    """With every step compiled, a round dispatches at most HOST_OPS_PER_ROUND aten ops outside the compiled
    graphs (the eager path: thousands per target pass) and reads no tensor value on the host (no `int(t)`,
    `bool(t)`, `.item()`: on CUDA each would be a synchronisation; the one copy per round is `common.to_host`,
    counted in tests/decoding/test_engine.py). Per round = the difference between decodes of 16 and 32 new tokens."""
    from test_seeded import _loop_prompts

    t, d, step = _compiled_arm(arm, None)
    prompts = _loop_prompts()
    counter = HostOps()
    torch._dynamo.reset()
    _compile_all(t, d, step, "eager", counter.inside)
    try:
        SpeculativeEngine(t, d, step).generate(prompts, 8, eos_ids=[])  # compile outside the count
        seen = {}
        for n in (16, 32):
            counter.ops = counter.reads = 0
            with counter.mode:
                res = SpeculativeEngine(t, d, step).generate(prompts, n, eos_ids=[])
            seen[n] = (counter.ops, counter.reads, len(res.round_times))
        (o1, r1, n1), (o2, r2, n2) = seen[16], seen[32]
        assert n2 > n1
        per_round = (o2 - o1) / (n2 - n1)
        assert per_round <= HOST_OPS_PER_ROUND, (arm, per_round)
        assert r2 - r1 == 0, (arm, r1, r2)
    finally:
        _uncompile(t, d, step)
