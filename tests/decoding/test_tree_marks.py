"""`draftlab decode`'s marks are true for trees, chains and correctors (draftlab.bench.marks): decoded at T=0 and T=1
through the engine with a tree of 16 nodes, with the chain and with a corrector (its point-mass and sampled walks), the marked text is the output (at T=0 the AR output), no rejected
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


def spy_walk(monkeypatch) -> list:
    """(the tree, the walk) of every tree round the engine verifies, appended as the rounds run."""
    seen, walk = [], round_mod.walk

    def spy(logits, tree, *a, **k):
        w = walk(logits, tree, *a, **k)
        seen.append((tree, w))
        return w
    monkeypatch.setattr(round_mod, "walk", spy)
    return seen


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("nodes", [0, 16])  # 0: the chain
def test_marks_say_what_the_round_did(target, temperature, nodes, monkeypatch):
    seen = spy_walk(monkeypatch) if nodes else []  # (the tree, the walk) of every tree round, from the round itself
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


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("walk", ["", "sampled"])
def test_a_correctors_marks_say_where_it_changed_the_drafters_token(target, temperature, walk):
    """A corrector arm (a random DCOCO corrector over the ranked oracle's blocks, its point-mass and its sampled walk):
    the text is the output (at T=0 the AR output), a rejected mark is never the token written in its place, and a token
    is marked `corrected` exactly where it differs from the drafter's argmax at its slot — the argmax captured from
    the drafter's own output as it drafted (a spy on `draft`), not from the round's records of the draft; a corrector
    that adds nothing corrects nothing."""
    from torch import nn

    from draftlab.corrector.dcoco import DCOCOArch, DCOCOCorrector
    from draftlab.corrector.proposal import CorrectorProposal

    V, H = target.vocab_size, target.hidden_size
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(1, V, (n,), generator=g).tolist() for n in (6, 11)]
    sp = SamplingParams(temperature=temperature)
    for scale in (0.0, 4.0):
        torch.manual_seed(5)
        corr = DCOCOCorrector(DCOCOArch(H, 8, V, k=2, dim=8, mlp_hidden=16), nn.Embedding(V, 8))
        with torch.no_grad():
            for prm in corr.mlp_out.parameters():
                prm.normal_(0.0, scale) if scale else prm.zero_()
        corrected = 0
        for prompt in prompts:  # one stream per decode: the drafter's calls are that stream's rounds, in order
            drafter, drafted = RankedOracle(target, block_size=5, ranks=(0.6, 0.35), seed=1), []  # the truth in the top 2
            draft = drafter.draft

            def spy(state, ids, positions, draft=draft, drafted=drafted):
                out = draft(state, ids, positions)
                drafted.append(out.logits[0, 1:].argmax(-1).tolist())  # the drafter's top-1 at slots 1..n
                return out
            drafter.draft = spy
            eng = SpeculativeEngine(target, drafter, CorrectorProposal(corr.eval(), walk=walk), record_topk=1)
            res = eng.generate([prompt], 16, sp, eos_ids=[], generator=torch.Generator().manual_seed(7))
            if temperature == 0:
                assert res.tokens == generate_ar(target, [prompt], 16, eos_ids=[]).tokens
            marks = mark_tokens(res, corrects=True, stream=0)
            assert [m.token for m in marks if m.kind != "rejected"] == res.tokens[0]
            for m, nxt in zip(marks, marks[1:]):
                if m.kind == "rejected":
                    assert nxt.kind != "rejected" and nxt.token != m.token
            assert len(drafted) == len(res.records)
            off = {}  # output position -> the drafter's top-1 at the slot that proposed it (accepted proposals)
            for top, rec in zip(drafted, res.records):
                for j in range(1, int(rec.accepted[0]) + 1):
                    off[int(rec.offset[0]) + j] = top[j - 1]
            for pos, m in enumerate(m for m in marks if m.kind != "rejected"):
                assert (m.kind == "corrected") == (pos in off and res.tokens[0][pos] != off[pos]), (scale, pos, m)
                corrected += m.kind == "corrected"
        # a corrector that adds nothing corrects nothing where its walk is a point mass (a sampled walk at T>0 draws off
        # the argmax on its own: marked where it differs, as above); a real one's corrections are seen at T=0 (at T=1
        # the random target accepts too little to count on one)
        if scale == 0 and not (walk and temperature > 0):
            assert corrected == 0
        if scale > 0 and temperature == 0:
            assert corrected > 0


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_show_tree_marks_every_node_the_walk_rejected(target, temperature, monkeypatch):
    """`draftlab decode --show-tree`: before each written token, the other nodes the walk rejected there — each a child
    of a node on the accepted path (the verified tree's own parent array), none the token written in its place, and
    together with the accepted and best-rejected nodes exactly the children of the path's nodes."""
    seen = spy_walk(monkeypatch)
    prompts, res = decode(target, TreeProposal(16, k=4), temperature)
    shown = 0
    for stream in range(len(prompts)):
        marks = mark_tokens(res, corrects=False, stream=stream, show_tree=True)
        assert [m.token for m in marks if m.kind not in ("rejected", "sibling")] == res.tokens[stream]
        plain = mark_tokens(res, corrects=False, stream=stream)
        assert [m for m in marks if m.kind != "sibling"] == plain  # --show-tree only adds
        for k, m in enumerate(marks):
            if m.kind == "sibling":
                shown += 1
                written = next(x for x in marks[k:] if x.kind not in ("rejected", "sibling"))
                assert m.token != written.token
    assert shown > 0
    # every child of an accepted path node is on the path, the best rejected, or a sibling mark: counted per round
    total = sum(len([n for n in range(tree.nodes) if int(tree.parent[b, n]) in w.path[b, : int(w.accepted[b]) + 1]
                     .tolist() and n not in w.path[b, 1: int(w.accepted[b]) + 1].tolist()])
                for tree, w in seen for b in range(tree.tokens.shape[0]) if int(tree.valid[b].sum()) > 1)
    marked = sum(m.kind in ("rejected", "sibling") for s in range(len(prompts))
                 for m in mark_tokens(res, corrects=False, stream=s, show_tree=True))
    assert 0 < marked <= total  # the last round of a stream can stop before its rejected nodes' positions
    assert "--show-tree" in legend(False, tree=True, show_tree=True) and "--show-tree" not in legend(False, tree=True)
