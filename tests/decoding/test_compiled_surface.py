"""The compiled engine through the library's own surface (issue 62, item 3; docs/decisions.md "A bounded compiled
engine"): `TargetModel.compile_steps("on")`, then `generate_ar` and `SpeculativeEngine.generate` for several arms in
one process, with no declaration (`decoding.shapes.prepare_run` is never called) and no dynamo reset.

Before, such a script died at the 9th graph of the target's step (torch's recompile limit of 8 per function under
`fullgraph=True`), and a second target compiled in the same process died sooner (its graphs add to the same
function's count). Now every decode plans its request's graphs before its first compiled call
(`shapes.run_shapes`): the recompile limit is raised to what the process planned, and only a plan over
`engine.max_graphs` is refused, in one line, before anything compiles.

The world: random targets made cyclers (`checks.seeded.make_cycler`: the greedy next token follows one cycle over
the vocabulary), ragged prompts cut from that cycle (prompt lookup finds its continuations) and an EOS on the cycle,
so the streams stop at different rounds and every batch shrinks through its halvings: each arm meets a new graph at
each (batch, width). The steps compile with the `eager` backend (`DRAFTLAB_COMPILE_BACKEND`: dynamo's graphs and
limits without inductor's minutes on 2 cores)."""
from __future__ import annotations

import pytest
import torch

from draftlab.compiling import BACKEND_ENV
from draftlab.errors import ConfigError, DraftlabError

pytestmark = pytest.mark.usefixtures("one_thread")

V, STREAMS, NEW, S = 64, 12, 48, 4  # 12 streams: batches 12, 6, 3, 1; widths 1, 2, 4 (S = 4)
OLD_LIMIT = 8  # torch's default recompile limit: the graphs one function met before it failed


def cycler(arch: str, seed: int):
    """A small random `arch` target (a shape no other test builds: its graphs are this file's) made a cycler."""
    from draftlab.checks.models import build_target
    from draftlab.checks.seeded import make_cycler

    t = build_target(torch.device("cpu"), torch.float32, arch, V, 40, 2, 4, 2, 72, tie=False, seed=seed)
    order = (torch.randperm(V - 2, generator=torch.Generator().manual_seed(seed)) + 1).tolist()  # never 0, V-1
    make_cycler(t, [order])
    return t, order


def world(order: list[int], seed: int):
    """STREAMS prompts of ragged lengths cut from the cycle, and an EOS on it: each stream stops after its own
    number of tokens."""
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, V - 2, (STREAMS,), generator=g).tolist()
    prompts = [[order[(a + j) % (V - 2)] for j in range(6 + 5 * i)] for i, a in enumerate(starts)]
    return prompts, [order[0]]


def arms(target, drafter, prompts, eos):
    """The script of the issue: AR, then prompt lookup, then a DFlash drafter, as a researcher calls the engine."""
    from draftlab.decoding import SpeculativeEngine, generate_ar
    from draftlab.decoding.lookup import PromptLookup

    pld = PromptLookup(S, 2, S - 1)
    return {"ar": lambda: generate_ar(target, prompts, NEW, eos_ids=eos).tokens,
            "pld": lambda: SpeculativeEngine(target, None, pld).generate(prompts, NEW, eos_ids=eos).tokens,
            "dflash": lambda: SpeculativeEngine(target, drafter).generate(prompts, NEW, eos_ids=eos).tokens}


def graphs_compiled() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def test_the_library_surface_runs_every_arm_to_completion_on_two_targets(monkeypatch):
    """Per target: eager outputs first, then `compile_steps("on")` and the same three arms: each runs to completion
    with the eager tokens, and the target meets more graphs than the old limit. The second target (another
    architecture, its drafter's passes compiled too) runs in the same process after the first."""
    from stubs import sharp_drafter

    monkeypatch.setenv(BACKEND_ENV, "eager")
    for arch, seed, drafter_compiled in (("llama", 3, False), ("qwen3", 4, True)):
        target, order = cycler(arch, seed)
        prompts, eos = world(order, seed)
        drafter = sharp_drafter(target, S, [0, 1], V - 1, seed=seed)
        want = {name: run() for name, run in arms(target, drafter, prompts, eos).items()}
        assert len({len(t) for t in want["ar"]}) > 4  # ragged: the streams stop at different lengths
        before = graphs_compiled()
        target.compile_steps("on")
        if drafter_compiled:
            drafter.compile_steps("on")
        try:
            for name, run in arms(target, drafter, prompts, eos).items():
                assert run() == want[name], (arch, name)
        finally:
            target.compile_steps("off")
            drafter.compile_steps("off")
        met = graphs_compiled() - before
        assert met > OLD_LIMIT, (arch, met)  # the script crossed the limit it used to die at
        assert torch._dynamo.config.recompile_limit > OLD_LIMIT  # raised to what the decodes planned


def test_a_plan_over_the_cap_is_one_line_before_anything_compiles(monkeypatch):
    """The same surface with `compile_steps("on", max_graphs=3)`: prompt lookup over 12 streams plans 4 batches x 3
    widths = 12 graphs, more than 3: one line naming the count and the cap, and no graph compiled. A request whose
    plan fits runs."""
    from draftlab.decoding import SpeculativeEngine, generate_ar
    from draftlab.decoding.lookup import PromptLookup

    monkeypatch.setenv(BACKEND_ENV, "eager")
    target, order = cycler("llama", 5)
    prompts, eos = world(order, 5)
    want = generate_ar(target, prompts[:2], 8, eos_ids=[]).tokens
    target.compile_steps("on", max_graphs=3)
    try:
        before = graphs_compiled()
        with pytest.raises(DraftlabError, match=r"declares 12 compiled graphs \(stream_step 12\), more than "
                                                r"engine.max_graphs=3; .*raise engine.max_graphs") as e:
            SpeculativeEngine(target, None, PromptLookup(S, 2, S - 1)).generate(prompts, NEW, eos_ids=eos)
        assert "\n" not in str(e.value) and graphs_compiled() == before
        assert generate_ar(target, prompts[:2], 8, eos_ids=[]).tokens == want  # AR at batches 2, 1: 2 graphs fit
    finally:
        target.compile_steps("off")


def test_the_process_counts_each_planned_graph_once_per_backend():
    """What the recompile limit is raised to: a request planned again adds no graph; the same request under another
    backend object (torch guards on it: two graphs of one shape) adds its graphs again; nothing compiles to plan."""
    from torch._dynamo.testing import CompileCounter

    from draftlab.compiling import planned_graphs
    from draftlab.decoding.shapes import run_shapes

    target, order = cycler("llama", 6)
    prompts, _ = world(order, 6)
    first = CompileCounter()
    target.compile_steps("on", backend=first)
    try:
        before = planned_graphs().get("stream_step", 0)
        run_shapes(target, prompts, NEW, 1)  # AR over 12 streams: batches 12, 6, 3, 1
        assert planned_graphs()["stream_step"] == before + 4
        run_shapes(target, prompts, NEW, 1)
        assert planned_graphs()["stream_step"] == before + 4
        target.compile_steps("on", backend=CompileCounter())
        run_shapes(target, prompts, NEW, 1)
        assert planned_graphs()["stream_step"] == before + 8
        assert torch._dynamo.config.recompile_limit >= before + 8 and first.frame_count == 0
    finally:
        target.compile_steps("off")


@pytest.mark.parametrize("bad", [0, -1, True, "8"])
def test_a_bad_max_graphs_is_one_line(bad):
    """engine.max_graphs (the config) and `compile_steps(max_graphs=...)` (the library): below 1 or not an integer,
    one line naming the value; an unknown compile mode likewise."""
    from conftest import tiny_target
    from draftlab.config import EngineConfig

    with pytest.raises(ConfigError, match=rf"engine.max_graphs={bad!r} must be an integer >= 1") as e:
        EngineConfig(max_graphs=bad).check("engine")
    assert "\n" not in str(e.value)
    t = tiny_target("llama", layers=1)
    with pytest.raises(DraftlabError, match=rf"max_graphs={bad!r} must be an integer >= 1") as e:
        t.compile_steps("on", max_graphs=bad)
    assert "\n" not in str(e.value) and t.compiled == "off"
    with pytest.raises(DraftlabError, match="compile_steps mode 'auto' is not on or off") as e:
        t.compile_steps("auto")
    assert "\n" not in str(e.value) and t.compiled == "off"
