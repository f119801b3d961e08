"""DFlash-2's candidate selector as the `dflash2` corrector: the project's implementation against the
reference class (`dflash.model.CandidateSelector`) on the same weights, init = the drafter's argmax, the
training loss (supervision only where the label is a candidate; gradient into the draft logits), the
checkpoint round trip through the corrector families, and lossless greedy decoding in the engine."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from draftlab.config import CorrectorConfig
from draftlab.corrector.base import DraftBlock
from draftlab.corrector.families import build_corrector, load_corrector
from draftlab.corrector.proposal import CorrectorProposal
from draftlab.corrector.sequential import count_parameters
from draftlab.decoding import SpeculativeEngine, generate_ar
from test_sequential import make_drafter, random_block

pytestmark = pytest.mark.usefixtures("one_thread")


def selector(drafter, k=4, seed=1, trained=True):
    torch.manual_seed(seed)
    c = build_corrector(CorrectorConfig(k=k, families={"dflash2": {"rank": 8}}, seed=seed), drafter, "dflash2")
    if trained:  # past init: the zero-initialised successor codebook made non-zero
        with torch.no_grad():
            c.successor_codebook.weight.normal_(0.0, 3.0)
            c.predecessor_codebook.weight.normal_(0.0, 3.0)
    return c.eval()


def test_matches_the_reference_class_on_the_same_weights(target):
    ref_mod = pytest.importorskip("dflash.model", reason="dflash==0.1.0 is not installed")
    d = make_drafter(target, vocab_size=0)  # the reference scores the full vocabulary
    c = selector(d, k=5)
    cfg = SimpleNamespace(vocab_size=target.vocab_size, hidden_size=target.hidden_size,
                          dflash_config={"selector_rank": 8, "selector_top_k": 5})
    ref = ref_mod.CandidateSelector(cfg)
    ref.load_state_dict(c.state_dict(), strict=True)  # the same parameter names
    hidden, logits, slot0 = random_block(target, d, 32, 7, seed=3)
    with torch.no_grad():
        path, cand, q = ref.select(hidden, logits, slot0, temperature=0.0)
        ours = c.walk(hidden, logits, slot0)
    assert torch.equal(ours, path)
    assert not torch.equal(ours, logits.argmax(-1))  # the selector changed some choices
    assert count_parameters(c.arch)["total"] == c.num_parameters() == sum(p.numel() for p in ref.parameters())


def test_init_is_the_drafter_argmax_and_draft_vocab(target):
    d = make_drafter(target)  # a 50-token draft vocabulary
    c = selector(d, trained=False)
    hidden, logits, slot0 = random_block(target, d, 8, 6, seed=1)
    assert torch.equal(c.walk(hidden, logits, slot0, d.draft_vocab), d.draft_vocab[logits.argmax(-1)])
    trained = selector(d)
    toks = trained.walk(hidden, logits, slot0, d.draft_vocab)
    assert bool(torch.isin(toks, d.draft_vocab).all())
    top = d.draft_vocab[logits.topk(4, -1).indices]  # [8, 6, 4]
    assert bool((top == toks[..., None]).any(-1).all())  # always one of the top-K candidates


def test_loss_supervises_candidates_and_reaches_the_drafter(target):
    d = make_drafter(target, vocab_size=0)
    c = selector(d, trained=False).train()
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(2, 3, 5, target.hidden_size, generator=g)
    logits = d.logits(hidden).requires_grad_(True)
    top = logits.topk(4, -1).indices  # [2, 3, 5, 4]
    labels = top[..., 2].clone()
    labels[0, 0, 1] = logits[0, 0, 1].argmin()  # not a candidate: unsupervised
    out = c.loss(DraftBlock(hidden, torch.zeros(2, 3, dtype=torch.long), None, logits), labels,
                 torch.ones(2, 3, 5, dtype=torch.bool), torch.arange(target.vocab_size), rho=4.0)
    assert not bool(out.mask[0, 0, 1]) and int(out.mask.sum()) == 2 * 3 * 5 - 1
    (out.num / out.den).backward()
    assert logits.grad.abs().sum() > 0 and c.successor_codebook.weight.grad.abs().sum() > 0
    opt = torch.optim.Adam(c.parameters(), lr=0.05)
    first = float((out.num / out.den).detach())
    for _ in range(30):
        opt.zero_grad()
        o = c.loss(DraftBlock(hidden, torch.zeros(2, 3, dtype=torch.long), None, logits.detach()), labels,
                   torch.ones(2, 3, 5, dtype=torch.bool), torch.arange(target.vocab_size), rho=4.0)
        (o.num / o.den).backward()
        opt.step()
    assert float((o.num / o.den).detach()) < 0.5 * first  # it can learn to pick the third candidate


def test_checkpoint_round_trip_and_lossless_engine(target, tmp_path):
    d = make_drafter(target, scale=3.0)
    c = selector(d)
    c.save(tmp_path / "c", {"lam": 0.75})
    back = load_corrector(tmp_path / "c", d)
    assert type(back) is type(c) and back.arch == c.arch
    assert all(torch.equal(a, b) for a, b in zip(c.state_dict().values(), back.state_dict().values()))
    g = torch.Generator().manual_seed(2)
    prompts = [torch.randint(1, target.vocab_size, (n,), generator=g).tolist() for n in (6, 11, 4)]
    res = SpeculativeEngine(target, d, CorrectorProposal(back)).generate(prompts, 14, eos_ids=[])
    assert res.tokens == generate_ar(target, prompts, 14, eos_ids=[]).tokens


def test_loss_takes_the_corrector_interface_arguments(target):
    """Co-training passes (cumulative_mask, kind) positionally, as to every corrector family: the selector
    takes them and, with one loss, accepts only kind 'joint' (the smoke pipeline's corrector stage failed)."""
    from draftlab.errors import DraftlabError

    d = make_drafter(target, vocab_size=0)
    c = selector(d, trained=False)
    hidden = torch.randn(1, 2, 5, target.hidden_size, generator=torch.Generator().manual_seed(0))
    block = DraftBlock(hidden, torch.zeros(1, 2, dtype=torch.long), None, d.logits(hidden))
    labels, valid = block.logits.argmax(-1), torch.ones(1, 2, 5, dtype=torch.bool)
    out = c.loss(block, labels, valid, torch.arange(target.vocab_size), 4.0, False, "joint")
    assert out.den > 0
    with pytest.raises(DraftlabError, match="one loss; loss kind 'cond'"):
        c.loss(block, labels, valid, torch.arange(target.vocab_size), 4.0, False, "cond")
