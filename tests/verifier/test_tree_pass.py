"""The packed tree pass (`StreamCache.append_tree`, `forward.tree_step`) equals a per-path recompute: for every node of
a tree of 32 nodes over ragged streams, the logits and the taps at that node equal the Hugging Face model's on the
stream's text + the node's path, fp32, within the reference's own error (`test_forward.tol`); and after `keep_path`
the cache holds exactly the accepted path: the next pass equals a recompute of the text + that path."""
from __future__ import annotations

import pytest
import torch

from draftlab.decoding.tree import grow, marginal_lattice
from draftlab.verifier.model import TargetModel
from draftlab.verifier.streams import StreamCache
from test_forward import hf_reference, make, tol

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("kind", ["llama3", "qwen3"])
def test_packed_tree_pass_equals_per_path_recompute(kind):
    model = make(kind)
    t = TargetModel(model)
    taps = [0, 2]
    g = torch.Generator().manual_seed(7)
    texts = [torch.randint(0, t.vocab_size, (n,), generator=g).tolist() for n in (9, 23, 4)]
    sc = StreamCache(t, 3, capacity=0)
    sc.prefill(texts, pad_id=0)
    root = torch.randint(0, t.vocab_size, (3,), generator=g)
    logp = torch.randn(3, 4, t.vocab_size, generator=g).log_softmax(-1).topk(3)
    tree = grow(marginal_lattice(logp.indices, logp.values), root, 32)
    out = sc.append_tree(tree.feed(), tree.ancestors(), tree.depth, taps=taps)
    anc = tree.ancestors()
    for b in range(3):
        for i in range(32):
            path = [int(tree.tokens[b, j]) for j in range(32) if anc[b, i, j]]  # root first (parents come earlier)
            (l32, t32), (l64, t64) = hf_reference(model, texts[b] + path, taps)
            assert float((out.logits[b, i].double() - l64[-1]).abs().max()) <= tol(l32[-1], l64[-1])
            assert float((out.taps[b, i].double() - t64[-1]).abs().max()) <= tol(t32[-1], t64[-1])
    # keep a path per stream (root, then its deepest-first branch), then one more token: equals the recompute
    leaf = tree.depth.argmax(-1)
    on = anc[torch.arange(3), leaf]
    path = torch.stack([torch.nonzero(on[b]).squeeze(-1) for b in range(3)])  # [3, depth + 1] increasing = root first
    keep = torch.tensor([1, path.shape[1], 2])
    sc.keep_path(path, keep)
    nxt = torch.randint(0, t.vocab_size, (3, 1), generator=g)
    after = sc.append(nxt, taps=taps)
    for b in range(3):
        kept = [int(tree.tokens[b, j]) for j in path[b, :int(keep[b])].tolist()]
        (l32, t32), (l64, t64) = hf_reference(model, texts[b] + kept + [int(nxt[b])], taps)
        assert float((after.logits[b, 0].double() - l64[-1]).abs().max()) <= tol(l32[-1], l64[-1])
        assert float((after.taps[b, 0].double() - t64[-1]).abs().max()) <= tol(t32[-1], t64[-1])
