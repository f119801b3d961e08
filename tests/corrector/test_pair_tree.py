"""Trees ranked by DCOCO's pair scores (`draftlab.corrector.tree`): a corrector that adds nothing to the candidates'
logits gives exactly the marginal tree; a real one gives per-parent rows; greedy decoding with the pair-ranked tree
on a real DFlash drafter (draft vocabulary) and a random DCOCO corrector equals AR at budgets 8 and 64; a family
without pair scores is one line."""
from __future__ import annotations

import pytest
import torch

from draftlab.config import CorrectorConfig
from draftlab.corrector.families import build_corrector
from draftlab.corrector.tree import PairTreeProposal, pair_lattice
from draftlab.decoding import SpeculativeEngine, generate_ar
from draftlab.decoding.tree import TreeProposal, draft_lattice
from draftlab.errors import DraftlabError
from test_sequential import make_corrector, make_drafter

pytestmark = pytest.mark.usefixtures("one_thread")


def dcoco(drafter, k=4, seed=1, out_std=0.0):
    torch.manual_seed(seed)
    c = build_corrector(CorrectorConfig(k=k, families={"dcoco": {"dim": 8, "hidden": 12}}, seed=seed), drafter, "dcoco")
    if out_std:  # past init: a zero output layer adds nothing to the candidates' logits
        with torch.no_grad():
            c.mlp_out.weight.normal_(0.0, out_std)
    return c.eval()


def drafted(target, drafter, seed=0):
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(1, target.vocab_size, (n,), generator=g).tolist() for n in (6, 11)]
    from draftlab.verifier.streams import StreamCache
    from draftlab.decoding.round import block_input, valid_positions

    sc = StreamCache(target, 2)
    pre = sc.prefill(prompts, 0, taps=drafter.target_layer_ids, last_logits_only=True)
    state = drafter.new_state(2)
    drafter.extend_context(state, pre.taps, sc.prompt_valid, valid_positions(sc.prompt_valid))
    last = pre.logits[:, -1].argmax(-1)
    pos = sc.next_pos[:, None] + torch.arange(drafter.block_size)
    return drafter.draft(state, block_input(drafter, state, last), pos)


def test_a_corrector_that_adds_nothing_gives_the_marginal_tree(target):
    d = make_drafter(target, scale=3.0)
    c = dcoco(d)
    with torch.no_grad():
        c.mlp_out.weight.zero_()
        c.mlp_out.bias.zero_()
    draft = drafted(target, d)
    pair, marg = pair_lattice(c, draft), draft_lattice(draft, c.arch.k)
    assert torch.equal(pair.ids, marg.ids)
    assert torch.allclose(pair.lp, marg.lp, atol=1e-5)  # rows equal up to the softmax's rounding
    a = PairTreeProposal(c, 16).grow(draft)
    b = TreeProposal(16, k=c.arch.k).grow(draft)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.parent, b.parent)


def test_a_trained_corrector_ranks_children_per_parent(target):
    d = make_drafter(target, scale=3.0)
    lat = pair_lattice(dcoco(d, out_std=1.0), drafted(target, d))
    rows = lat.lp[:, 1:]  # slots 2..n: one row per parent candidate
    assert not torch.allclose(rows[:, :, :1], rows[:, :, 1:2])  # two parents rank their children differently
    assert torch.all(lat.lp[:, 0] == lat.lp[:, 0, :1])  # slot 1: the committed token is every row's parent


@pytest.mark.parametrize("nodes", [8, 64])
def test_greedy_pair_ranked_tree_equals_ar(target, nodes):
    d = make_drafter(target, scale=3.0)
    g = torch.Generator().manual_seed(2)
    prompts = [torch.randint(1, target.vocab_size, (n,), generator=g).tolist() for n in (6, 11, 4)]
    res = SpeculativeEngine(target, d, PairTreeProposal(dcoco(d, out_std=1.0), nodes)).generate(prompts, 14, eos_ids=[])
    assert res.tokens == generate_ar(target, prompts, 14, eos_ids=[]).tokens


def test_a_family_without_pair_scores_is_one_line(target):
    d = make_drafter(target)
    with pytest.raises(DraftlabError, match="a pair-ranked tree needs a DCOCO or LiLiCorr corrector") as e:
        PairTreeProposal(make_corrector("dspark", d), 32)
    assert "\n" not in str(e.value) and "dflash-tree32" in str(e.value)
