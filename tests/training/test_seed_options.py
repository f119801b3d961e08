"""The seeded drafter's options for issue 20 item 3 (keep a right seed, fix a wrong one, extend a short one):
the learned seed bias (`drafter.seed_bias`: at initialisation the drafter proposes its seeds, so its simulated τ
is teacher-forced prompt lookup's; training moves the bias), seed dropout (`pretrain.seed_dropout`: training
batches only), the per-slot seed report of the validation, and the bad-input lines."""
from __future__ import annotations

import pytest
import torch

from draftlab.bench.simulate import _anchors, _infer_path, _train_path, simulated_tau
from draftlab.config import PretrainConfig
from draftlab.decoding.verify import greedy_accept_length
from draftlab.drafter import DFlashDrafter, DrafterDesign, arch_from_target, load_drafter, save_drafter
from draftlab.errors import DraftlabError
from draftlab.ngram import sequence_seeds
from draftlab.training.data import DrafterDataModule
from draftlab.training.features import SequenceSet
from draftlab.training.metrics import BlockStats
from draftlab.training.ce import DrafterCE
from test_seeded import TAPS, motif_text

pytestmark = pytest.mark.usefixtures("one_thread")

S, MASK = 4, 1


def drafter(target, seed_bias=0.0, vocab=None, seed_logit=False, seed="lookup", std=0.2, seed_=0):
    arch = arch_from_target(target, DrafterDesign(S, 1, TAPS, MASK, 0 if vocab is None else len(vocab), seed=seed,
                            seed_logit=seed_logit, seed_bias=seed_bias))
    torch.manual_seed(seed_)
    d = DFlashDrafter.from_target(arch, target, vocab)
    with torch.no_grad():  # weights with opinions: without the bias the drafter does not simply copy
        for m in d.modules():
            if isinstance(m, torch.nn.Linear):
                m.weight.normal_(0, std)
    return d.eval()


def texts(k=4, L=40):
    return [motif_text(L, 30, s) for s in range(k)]


def lookup_tau(seqs, n):
    """Teacher-forced prompt lookup alone on simulated τ's anchors, averaged the same way (per sequence)."""
    taus = []
    for prompt, resp in seqs:
        ids = torch.tensor([prompt + resp])
        anchors = _anchors(ids.shape[1], len(prompt), n + 1, 1)
        seeds = sequence_seeds(ids, anchors[None], n, MASK, 3, 1)[0]  # [A, n]
        labels = ids[0, anchors[:, None] + torch.arange(1, n + 1)]  # [A, n]
        taus.append(float((greedy_accept_length(seeds, labels) + 1).float().mean()))
    return sum(taus) / len(taus)


def test_seed_bias_at_init_proposes_the_seeds_and_tau_equals_lookup(target):
    seqs = [(x[:6], x[6:]) for x in texts()]
    # full vocabulary: wherever a seed exists both paths propose it; without the bias they do not
    copied = {}
    for bias in (0.0, 10.0):
        d = drafter(target, bias)
        same = total = 0
        for prompt, resp in seqs:
            ids = torch.tensor([prompt + resp])
            anchors = _anchors(ids.shape[1], len(prompt), S, 1)
            seeds = d.train_seeds(ids, anchors[None])[0]  # [A, n]
            feats = target(ids, taps=TAPS).taps
            has = seeds != MASK
            for path in (_train_path, _infer_path):
                with torch.no_grad():
                    pred = path(d, feats, ids, anchors)  # [A, n]
                same += int((pred == seeds)[has].sum())
                total += int(has.sum())
        assert total > 100
        copied[bias] = same / total
    assert copied[10.0] == 1.0 and copied[0.0] < 0.5, copied
    # a draft vocabulary that holds no text token: the drafter's own guesses are never right, its seeds (on the
    # seed column, with the bias) always proposed, so its simulated τ is exactly the lookup's on the same anchors
    vocab = torch.arange(40, 48)
    want = lookup_tau(seqs, S - 1)
    assert want > 1.5
    sim = simulated_tau(target, drafter(target, 10.0, vocab, seed_logit=True), seqs, stride=1)
    assert sim["train"] == pytest.approx(want, abs=1e-12) and sim["infer"] == pytest.approx(want, abs=1e-12)
    assert simulated_tau(target, drafter(target, 0.0, vocab, seed_logit=True), seqs, stride=1)["train"] < want


def test_seed_bias_is_learned_saved_and_absent_when_off(target, tmp_path):
    """The bias is one parameter per proposed slot, starts at drafter.seed_bias, gets a gradient from the CE and
    moves under an optimiser step; it is saved with the drafter; off (0) the drafter has no such parameter."""
    seqs = texts(4, 36)
    ss = SequenceSet.from_lists([x[:6] for x in seqs], [x[6:] for x in seqs], ["train"] * 4)
    c = PretrainConfig(max_steps=1, max_minutes=0, batch_size=4, anchors_per_seq=8, val_every=0, checkpoint_every=0)
    d = drafter(target, 3.0).train()
    assert d.seed_bias.shape == (S - 1,) and torch.equal(d.seed_bias.detach(), torch.full((S - 1,), 3.0))
    assert "seed_bias" not in dict(drafter(target).named_parameters())  # seed_bias=0: no parameter, as before
    dm = DrafterDataModule(ss, c, S, None, train_sample=0, arch=d.arch)
    module = DrafterCE(d, c, target, "reference")
    batch = next(iter(dm.train_dataloader()))
    for dense in (True, False):
        d.zero_grad()
        module.loss_parts(batch, dense=dense)["loss"].backward()
        g = d.seed_bias.grad
        assert g is not None and (g != 0).all(), g
    opt = torch.optim.AdamW(d.parameters(), lr=1e-2)
    opt.step()
    assert not torch.equal(d.seed_bias.detach(), torch.full((S - 1,), 3.0))
    # pretrain.seed_bias_lr: the bias in its own AdamW group at that lr (one step moves it by about the lr)
    assert sum(len(g["params"]) for g in module.param_groups()) == len(list(d.parameters()))
    assert len(module.param_groups()) == 2  # seed_bias_lr=0: the bias sits with the other vectors, at pretrain.lr
    fast = DrafterCE(d, PretrainConfig(lr=1e-3, seed_bias_lr=0.5), target, "reference")
    groups = fast.param_groups()
    assert len(groups) == 3 and groups[2]["params"] == [d.seed_bias] and groups[2]["lr"] == 0.5
    assert sum(len(g["params"]) for g in groups) == len(list(d.parameters()))
    before = d.seed_bias.detach().clone()
    d.zero_grad()
    fast.loss_parts(batch)["loss"].backward()
    torch.optim.AdamW(groups, lr=1e-3).step()
    assert ((d.seed_bias.detach() - before).abs() > 0.4).all()
    loaded = load_drafter(save_drafter(d, tmp_path / "d"), target)
    assert loaded.arch.seed_bias == 3.0 and torch.equal(loaded.seed_bias.detach(), d.seed_bias.detach())


def test_seed_bias_lands_on_the_seed_logit_only(target):
    """+bias[k-1] on slot k's seed: its draft index, the seed column outside the vocabulary, nothing for MASK."""
    vocab = torch.arange(2, 12)
    d = drafter(target, 5.0, vocab, seed_logit=True)
    base = drafter(target, 0.0, vocab, seed_logit=True)
    with torch.no_grad():
        d.seed_bias.copy_(torch.tensor([1.0, 2.0, 3.0]))
    h = torch.randn(3, target.hidden_size)
    seeds = torch.tensor([5, 50, MASK])  # inside the vocabulary (index 3), outside (the column), none
    slots = torch.tensor([1, 2, 3])
    diff = d.logits(h, seeds, slots) - base.logits(h, seeds)  # [3, Vd+1]
    want = torch.zeros_like(diff)
    want[0, 3], want[1, 10] = 1.0, 2.0
    assert torch.allclose(diff.nan_to_num(0.0, 0.0, 0.0), want)
    full = drafter(target, 5.0)  # full vocabulary: the seed's own column
    out = full.logits(h, torch.tensor([7, MASK, 9]), slots)  # [3, V]
    ref = drafter(target, 0.0).logits(h)
    assert torch.allclose((out - ref)[0, 7], torch.tensor(5.0)) and torch.allclose((out - ref)[2, 9], torch.tensor(5.0))
    assert torch.allclose((out - ref)[1], torch.zeros(target.vocab_size))


def test_seed_dropout_training_batches_only(target):
    seqs = texts(6, 36)
    ss = SequenceSet.from_lists([x[:6] for x in seqs], [x[6:] for x in seqs], ["train"] * 4 + ["heldout"] * 2)
    d = drafter(target)

    def batches(p):
        c = PretrainConfig(max_steps=1, max_minutes=0, batch_size=2, anchors_per_seq=16, val_every=0,
                           checkpoint_every=0, seed_dropout=p)
        torch.manual_seed(0)
        dm = DrafterDataModule(ss, c, S, None, train_sample=0, arch=d.arch)
        return list(dm.train_dataloader()), list(dm.val_dataloader()[0])

    (t0, v0), (th, vh), (t1, v1) = batches(0.0), batches(0.5), batches(1.0)
    for a, b, c in zip(t0, th, t1):
        assert torch.equal(a["anchors"], c["anchors"]) and (a["seeds"] != MASK).any()
        assert torch.equal(a["seeds"], d.train_seeds(a["ids"], a["anchors"], a["seq_len"]))  # p=0: as today
        assert (c["seeds"] == MASK).all()  # p=1: every block unseeded
        dropped = (b["seeds"] == MASK).all(-1) & (a["seeds"] != MASK).any(-1)  # whole blocks, never single slots
        kept = (b["seeds"] == a["seeds"]).all(-1)
        assert (dropped | kept).all()
    n_drop = sum(int(((b["seeds"] == MASK).all(-1) & (a["seeds"] != MASK).any(-1)).sum()) for a, b in zip(t0, th))
    n_seeded = sum(int((a["seeds"] != MASK).any(-1).sum()) for a in t0)
    assert 0.25 < n_drop / n_seeded < 0.75
    for a, b in zip(v0, v1):  # validation never drops a seed
        assert torch.equal(a["seeds"], b["seeds"]) and (a["seeds"] != MASK).any()
    with pytest.raises(DraftlabError, match="pretrain.seed_dropout=0.5 needs a seeded drafter") as e:
        DrafterDataModule(ss, PretrainConfig(seed_dropout=0.5), S, None, arch=drafter(target, seed="none").arch)
    assert "\n" not in str(e.value)


def test_seeded_slot_weight_scales_only_the_seeded_slots(target):
    """pretrain.seeded_slot_weight w: the CE of slots that carry a seed is weighted w in training batches. The seed
    bias moves only seeded slots' logits, so at w = 0 it gets no gradient; the loss is linear in w between the
    seeded and unseeded parts; validation (eval mode) keeps weight 1."""
    seqs = texts(6, 36)
    ss = SequenceSet.from_lists([x[:6] for x in seqs], [x[6:] for x in seqs], ["train"] * 4 + ["heldout"] * 2)
    d = drafter(target, seed_bias=10.0)
    c = dict(max_steps=1, max_minutes=0, batch_size=4, anchors_per_seq=16, val_every=0, checkpoint_every=0)
    torch.manual_seed(0)
    batch = next(iter(DrafterDataModule(ss, PretrainConfig(**c), S, None, train_sample=0, arch=d.arch)
                      .train_dataloader()))
    assert (batch["seeds"] != MASK).any() and (batch["seeds"] == MASK).any()
    out = {}
    for w in (1.0, 0.5, 0.0):
        m = DrafterCE(d.train(), PretrainConfig(**c, seeded_slot_weight=w), target)
        d.zero_grad()
        r = m.loss_parts(batch)
        r["loss"].backward()
        out[w] = (float(r["num"].detach()), float(r["den"]), d.seed_bias.grad.clone())
        d.eval()
        with torch.no_grad():
            out[w] += (float(m.loss_parts(batch)["loss"]),)
    (n1, d1, g1, v1), (nh, dh, _, vh), (n0, d0, g0, v0) = out[1.0], out[0.5], out[0.0]
    assert d0 > 0 and d1 - d0 > 0  # both kinds of slot are supervised
    assert nh == pytest.approx(n0 + 0.5 * (n1 - n0), rel=1e-5) and dh == pytest.approx(d0 + 0.5 * (d1 - d0), rel=1e-6)
    assert g1.abs().sum() > 0 and torch.equal(g0, torch.zeros_like(g0))
    assert v0 == pytest.approx(v1, rel=1e-6) and vh == pytest.approx(v1, rel=1e-6)  # validation: weight 1


def test_warm_start_from_the_plain_drafter(target, tmp_path):
    """pretrain.init_from: a seeded drafter starts from a plain drafter's weights (every stored tensor; the seed bias
    keeps its initial value); another shape, another draft vocabulary or no folder: one line naming the key."""
    from draftlab.drafter.checkpoint import warm_start

    vocab = torch.arange(2, 40)
    plain = drafter(target, seed="none", vocab=vocab, seed_=1)
    save_drafter(plain, tmp_path / "plain")
    seeded = drafter(target, seed_bias=10.0, vocab=vocab, seed_=2)
    before = {k: v.clone() for k, v in seeded.state_dict().items()}
    assert warm_start(seeded, tmp_path / "plain", target) == ["seed_bias"]
    got, ref = seeded.state_dict(), plain.state_dict()
    assert torch.equal(got["seed_bias"], before["seed_bias"])
    changed = [k for k in ref if not torch.equal(before[k], ref[k])]
    assert changed and all(torch.equal(got[k], ref[k]) for k in ref)
    cases = ((drafter(target, seed_bias=10.0, vocab=torch.arange(3, 41)), "draft vocabulary differs"),
             (DFlashDrafter.from_target(arch_from_target(target, DrafterDesign(S + 1, 1, TAPS, MASK, len(vocab), seed="lookup")),
                                        target, vocab), "that drafter has block_size=4, this one 5"))
    for other, msg in cases:
        with pytest.raises(DraftlabError, match=msg) as e:
            warm_start(other, tmp_path / "plain", target)
        assert str(e.value).startswith(f"pretrain.init_from={tmp_path / 'plain'}: ") and "\n" not in str(e.value)
    with pytest.raises(DraftlabError, match="no drafter folder there") as e:
        warm_start(seeded, tmp_path / "none", target)
    assert "\n" not in str(e.value)


def test_seed_report_counts():
    """The per-slot seed report on hand-made blocks (2 slots): seeded / unseeded accuracy, seed hits, overrides."""
    st = BlockStats(2, 2)
    top = torch.tensor([[[5, 0], [6, 0]], [[7, 0], [8, 0]], [[4, 0], [3, 0]]])  # [N=3, n=2, K]
    tgt = torch.tensor([[5, 6], [9, 8], [4, 2]])
    seeds = torch.tensor([[5, 1], [7, 9], [3, 1]])  # MASK = 1: slot 2 unseeded in blocks 0 and 2
    st.update(top, tgt, None, seeds, MASK)
    r = st.summary()
    # slot 1: seeds 5 (right, kept), 7 (wrong, kept), 3 (wrong, overridden by 4: right)
    assert r["seed_rate"] == [1.0, 1 / 3] and r["seed_hit"] == [1 / 3, 0.0]
    assert r["slot_acc_seeded"] == [2 / 3, 1.0] and r["seed_override"] == [1 / 3, 1.0]
    assert r["seed_override_right"] == [1.0, 1.0]  # slot 2: seed 9 wrong, overridden by 8: right
    assert r["slot_acc_unseeded"][0] != r["slot_acc_unseeded"][0] and r["slot_acc_unseeded"][1] == 0.5  # NaN, 1/2
    assert "seed_hit" not in BlockStats(2, 2).summary()  # a plain drafter's report is as before


def test_validation_reports_the_seed_stats(target, tmp_path):
    """The pretraining validation of a seeded drafter carries the seed report; with a large bias at init the
    drafter never overrides a seed and its seeded accuracy is the seeds' hit rate; a plain one carries none."""
    from draftlab.training.pretrain import train_drafter

    seqs = texts(6, 36)
    ss = SequenceSet.from_lists([x[:6] for x in seqs], [x[6:] for x in seqs], ["train"] * 4 + ["heldout"] * 2)
    c = PretrainConfig(max_steps=1, max_minutes=0, lr=1e-9, warmup=0.0, val_every=0, batch_size=2,
                       anchors_per_seq=8, val_anchor_stride=1, checkpoint_every=0, topk=4)
    res = {}
    for name, kw in (("bias", dict(seed_bias=10.0)), ("plain", dict(seed="none"))):
        r = train_drafter(drafter(target, **kw), ss, c, tmp_path / name, target=target, val_labels="reference",
                          log=lambda m: None)
        res[name] = r.best_metrics["heldout"]
    h = res["bias"]
    assert all(x == 0.0 for x in h["seed_override"]) and h["slot_acc_seeded"] == h["seed_hit"]
    assert min(h["seed_rate"]) > 0.5 and max(h["seed_hit"]) > 0.5
    assert "seed_hit" not in res["plain"] and "slot_acc_seeded" not in res["plain"]


def test_bad_input_lines(target, root):
    from draftlab.params import load_params

    for ov, key in ((["drafter.seed_bias=-1"], "drafter.seed_bias=-1.0 must be a finite number >= 0"),
                    (["drafter.seed_bias=5"], "drafter.seed_bias=5.0 needs seeds"),
                    (["pretrain.seed_dropout=1.5", "drafter.seed=lookup"], "pretrain.seed_dropout=1.5 must lie in"),
                    (["pretrain.seed_dropout=0.3"], "pretrain.seed_dropout=0.3 needs seeds to drop"),
                    (["drafter.seed=lookup", "pretrain.seed_bias_lr=0.1"],
                     "pretrain.seed_bias_lr=0.1 needs a seed bias"),
                    (["pretrain.seed_bias_lr=-1"], "pretrain.seed_bias_lr=-1.0 must be >= 0"),
                    (["pretrain.seeded_slot_weight=1.5", "drafter.seed=lookup"],
                     "pretrain.seeded_slot_weight=1.5 must lie in"),
                    (["pretrain.seeded_slot_weight=0"], "pretrain.seeded_slot_weight=0.0 needs seeded slots")):
        with pytest.raises(DraftlabError, match=key) as e:
            load_params(root / "params.yaml", ov)
        assert "\n" not in str(e.value)
    p = load_params(root / "params.yaml", ["drafter.seed=lookup", "drafter.seed_bias=8", "pretrain.seed_dropout=0.2"])
    assert (p.drafter.seed_bias, p.pretrain.seed_dropout) == (8.0, 0.2)
    for kw, key in ((dict(seed_bias=2.0), "drafter.seed_bias=2.0 needs seeds"),
                    (dict(seed="lookup", seed_bias=float("nan")), "drafter.seed_bias=nan must be")):
        with pytest.raises(DraftlabError, match=key) as e:
            arch_from_target(target, DrafterDesign(S, 1, TAPS, MASK, **kw))
        assert "\n" not in str(e.value)


def test_pretrain_probe_passes_the_options_through(root, tmp_path, capsys):
    """draftlab.measure.probes and its command line tools/pretrain_probe.py: `run NAME --dry` resolves the seeded
    options (one-line error when bad), and the ablation table carries a seeded probe's seed report."""
    import importlib.util
    import json

    from draftlab.measure import probes

    spec = importlib.util.spec_from_file_location("pretrain_probe", root / "tools" / "pretrain_probe.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    ov = ["drafter.seed=lookup", "drafter.seed_bias=10", "pretrain.seed_dropout=0.25", "drafter.seed_logit=true"]
    p = probes.probe_params(120, ov, root / "params.yaml")
    assert (p.drafter.seed, p.drafter.seed_bias, p.drafter.seed_logit) == ("lookup", 10.0, True)
    assert (p.pretrain.seed_dropout, p.pretrain.max_steps) == (0.25, 120)
    assert tool.main(["run", "bias10", "--dry", *ov]) == 0
    assert "seed_bias=10.0" in capsys.readouterr().out
    assert tool.main(["run", "bad", "--dry", "pretrain.seed_dropout=0.3"]) == 2
    err = capsys.readouterr().err.strip()
    assert "pretrain.seed_dropout=0.3 needs seeds" in err and "\n" not in err
    (tmp_path / "abl").mkdir()
    row = {"overrides": [], "steps": 3, "sim_tau": 1.5, "per_set": {}, "slot_acc": [0.2], "train_minutes": 0.1}
    report = {k: [0.5] for k in probes.SEED_REPORT}
    for name, extra in (("base", {}), ("bias10", {"seed_report": report})):
        (tmp_path / "abl" / f"{name}.json").write_text(json.dumps({**row, "name": name, **extra}))
    rows = {r["name"]: r for r in probes.ablation_table(tmp_path / "abl", tmp_path / "abl.json")["rows"]}
    assert rows["bias10"]["seed_report"] == report and "seed_report" not in rows["base"]
    assert json.loads((tmp_path / "abl.json").read_text())["base"] == 1.5
    lines = probes.table_lines(probes.ablation_table(tmp_path / "abl", tmp_path / "abl.json"))
    assert [ln.split()[0] for ln in lines] == ["base", "bias10"] and "Δ +0.0000" in lines[1]
    with pytest.raises(DraftlabError, match="no probe named 'base'") as e:
        probes.ablation_table(tmp_path / "none", tmp_path / "t.json")
    assert "\n" not in str(e.value) and not (tmp_path / "t.json").exists()
    assert probes.plain_drafter([tmp_path / "none", tmp_path]) is None


def test_validation_and_training_heads_add_each_slots_own_bias(target):
    """validate_batch's flattened rows and loss_parts' dense logits apply slot k's bias to slot k (unequal
    biases, so a slot mix-up would change the validation's top-1 or the training logits)."""
    seqs = texts(4, 36)
    ss = SequenceSet.from_lists([x[:6] for x in seqs], [x[6:] for x in seqs], ["train"] * 2 + ["heldout"] * 2)
    c = PretrainConfig(max_steps=1, max_minutes=0, batch_size=2, anchors_per_seq=8, val_anchor_stride=1, topk=1)
    d = drafter(target, 1.0)
    with torch.no_grad():
        d.seed_bias.copy_(torch.tensor([0.0, 0.8, -0.8]))
    module = DrafterCE(d, c, target, "reference")
    batch = next(iter(DrafterDataModule(ss, c, S, None, train_sample=0, arch=d.arch).val_dataloader()[0]))

    class Capture:
        def update(self, top, tgt, valid, seeds, mask):
            self.top = top

    cap = Capture()
    with torch.no_grad():
        module.validate_batch(batch, cap)
        hidden = d.forward_train(module.features(batch, False)[0], batch["ctx_valid"], batch["ids"],
                                 batch["anchors"], batch["seeds"])
        per_slot = torch.stack([d.logits(hidden[:, :, k], batch["seeds"][:, :, k - 1],
                                         torch.tensor(k)).argmax(-1) for k in range(1, S)], -1)  # [B, A, n]
        dense = d.logits(hidden[:, :, 1:], batch["seeds"])  # [B, A, n, V]: default slots 1..n
    assert torch.equal(cap.top[..., 0], per_slot.reshape(-1, S - 1))
    assert torch.equal(dense.argmax(-1), per_slot)
    unbiased = drafter(target, 0.0).logits(hidden[:, :, 1:])
    assert not torch.equal(unbiased.argmax(-1), per_slot)  # the biases change some proposals
