"""`draftlab decode`'s marks are true for trees as for chains (draftlab.bench.marks): decoded at T=0 and T=1 through the
engine with a tree of 16 nodes and with the chain, the marked text is the output (at T=0 the AR output), no rejected
mark is the token the target wrote in its place, a tree's accepted tokens are its walk's path (each node's parent on
the path before it, read from the tree's own parent array), and no arm without a corrector shows a correction."""
from __future__ import annotations

import pytest
import torch

from conftest import tiny_target
from draftlab.bench.marks import legend, mark_tokens
from draftlab.decoding import SamplingParams, SpeculativeEngine, generate_ar
from draftlab.decoding import round as round_mod
from draftlab.decoding.tree import TreeProposal
from stubs import RankedOracle

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def target():
    return tiny_target("llama")


def decode(target, proposal, temperature: float, trees: list | None = None):
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(1, target.vocab_size, (n,), generator=g).tolist() for n in (6, 11)]
    engine = SpeculativeEngine(target, RankedOracle(target, block_size=5, seed=1), proposal, record_topk=1)
    sp = SamplingParams(temperature=temperature)
    res = engine.generate(prompts, 16, sp, eos_ids=[], generator=torch.Generator().manual_seed(7))
    return prompts, res


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("nodes", [0, 16])  # 0: the chain
def test_marks_say_what_the_round_did(target, temperature, nodes, monkeypatch):
    seen = []  # (the tree, the walk's path) of every tree round, from the round itself
    if nodes:
        walk = round_mod.walk

        def spy(logits, tree, *a, **k):
            w = walk(logits, tree, *a, **k)
            seen.append((tree, w))
            return w
        monkeypatch.setattr(round_mod, "walk", spy)
    prompts, res = decode(target, TreeProposal(nodes, k=4) if nodes else None, temperature)
    if temperature == 0:
        assert res.tokens == [generate_ar(target, [p], 16, eos_ids=[]).tokens[0] for p in prompts]
    rejected = 0
    for stream in range(len(prompts)):
        marks = mark_tokens(res, corrects=False, stream=stream)
        assert [m.token for m in marks if m.kind != "rejected"] == res.tokens[stream]
        for m, nxt in zip(marks, marks[1:]):
            if m.kind == "rejected":
                rejected += 1
                assert nxt.kind != "rejected" and nxt.token != m.token  # never the token written in its place
        kinds = {m.kind for m in marks}
        assert "corrected" not in kinds and kinds <= {"target", "accepted", "rejected", "branch"}
        assert ("branch" in kinds) <= bool(nodes)
    assert rejected > 0  # the check above had something to check
    if nodes:
        assert seen and (temperature > 0 or any(int(w.accepted.max()) > 0 for _, w in seen))
        for tree, w in seen:  # the path the marks read is a chain of parents in the tree that was verified
            for b in range(tree.tokens.shape[0]):
                path = w.path[b, : int(w.accepted[b]) + 1].tolist()
                assert path[0] == 0 and all(int(tree.parent[b, c]) == p for p, c in zip(path, path[1:]))
                assert w.tokens[b, : len(path) - 1].tolist() == [int(tree.tokens[b, c]) for c in path[1:]]
        assert "another branch" in legend(False, tree=True) and "corrected" not in legend(False, tree=True)
