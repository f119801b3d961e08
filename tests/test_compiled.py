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

    from conftest import load_tool  # noqa: F401
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
    with pytest.raises(ConfigError, match=r"engine.kv_capacity=100 is smaller than the longest request needs \(649"):
        EngineConfig(kv_capacity=100).check_room("engine", 512, 128, 8)
