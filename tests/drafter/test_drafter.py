"""DFlash drafter: block mask (no leakage), labels and weights, inference path == training path,
draft vocabulary, MASK resolution, export/import round trip and clear errors on a mismatched target."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import tiny_target
from draftlab.config import RandomModelConfig
from draftlab.errors import DraftlabError
from draftlab.drafter import DFlashDrafter, load_drafter, save_drafter, DrafterDesign, arch_from_target
from draftlab.drafter import layers as dlayers
from draftlab.drafter.masks import (block_input_ids, block_labels, context_mask, default_gamma, dense_block_mask,
                                    sample_anchors, slot_weights)
from draftlab.drafter.vocab import build_draft_vocab, coverage, resolve_mask_token, target_to_draft, token_counts

S = 4
MASK = 1
TAPS = [0, 2, 3]


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py (which also gives the tiny llama `target`)


def make_drafter(target, vocab=None, layers=2, seed=0, std=0.2, tap_norm=False):
    spec = arch_from_target(target, DrafterDesign(S, layers, TAPS, MASK, 0 if vocab is None else len(vocab), tap_norm=tap_norm))
    torch.manual_seed(seed)
    d = DFlashDrafter.from_target(spec, target, vocab)
    with torch.no_grad():  # larger weights than the 0.02 init, so any leak shows in the logits
        for m in d.modules():
            if isinstance(m, torch.nn.Linear):
                m.weight.normal_(0, std)
    return d.eval()


def batch(target, B=2, L=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, target.vocab_size, (B, L), generator=g)
    feats = target(ids, taps=TAPS).taps  # [B, L, 3H]
    return ids, feats


# ---- masks, labels, weights ---------------------------------------------------------------------------


def test_labels_line_up_and_weights_match_formula():
    ids = torch.arange(100, 120)[None]  # token at position p is 100 + p
    anchors = torch.tensor([[3, 10, 15]])
    labels, in_range = block_labels(ids, anchors, S, torch.tensor([18]))
    for i, a in enumerate(anchors[0].tolist()):
        for k in range(S):
            assert labels[0, i, k] == 100 + a + k  # same-position: slot k <-> token anchor+k
    assert not in_range[..., 0].any()  # slot 0 carries no loss
    assert in_range[0, 2].tolist() == [False, True, True, False]  # 15+3 = 18 is past the end
    blk = block_input_ids(ids, anchors, S, MASK)
    assert blk[0, :, 0].tolist() == [103, 110, 115] and (blk[..., 1:] == MASK).all()
    for gamma in (4.0, 7.0):
        w = slot_weights(16, gamma)
        assert w[0] == 0
        assert torch.allclose(w[1:], torch.tensor([math.exp(-(k - 1) / gamma) for k in range(1, 16)]))
    assert (default_gamma(16), default_gamma(10), default_gamma(8)) == (7.0, 5.0, 4.0)


def test_anchors_stay_in_response_with_room_for_a_block():
    for _ in range(20):
        a = sample_anchors(30, 12, S, 5)
        assert len(a) == 5 and (a >= 12).all() and (a <= 30 - S).all() and len(set(a.tolist())) == 5
    assert sample_anchors(14, 12, S, 5).numel() == 0


def test_dense_mask_shape_and_rules():
    anchors = torch.tensor([[2, 5]])
    m = dense_block_mask(anchors, torch.ones(1, 8, dtype=torch.bool), S)  # [1, 2S, 8 + 2S]
    assert m.shape == (1, 2 * S, 8 + 2 * S)
    assert m[0, :S, :2].all() and not m[0, :S, 2:8].any()  # block 0 sees positions < 2 only
    assert m[0, S:, :5].all() and not m[0, S:, 5:8].any()
    assert m[0, :S, 8:8 + S].all() and not m[0, :S, 8 + S:].any()  # own block only, bidirectional
    assert context_mask(anchors, torch.tensor([[True, False] + [True] * 6]))[0, 1].tolist() == [True, False, True, True, True] + [False] * 3


# ---- the block mask inside the model ----------------------------------------------------------------------


def test_block_mask_no_leakage(target):
    d = make_drafter(target)
    ids, feats = batch(target, B=1, L=24)
    anchors = torch.tensor([[8, 12, 17]])
    valid = torch.ones(1, 24, dtype=torch.bool)

    def logits(f, x):
        with torch.no_grad():
            return d.logits(d.forward_train(f, valid, x, anchors))[0]  # [A, S, V]

    base = logits(feats, ids)
    # context at or after the anchor of block 0 (position 8 and 10): block 0 unchanged, later blocks change
    for pos in (8, 10):
        f2 = feats.clone()
        f2[0, pos] += 3.0 * torch.randn_like(f2[0, pos])
        out = logits(f2, ids)
        assert torch.equal(out[0], base[0])
        assert (out[1] - base[1]).abs().max() > 1e-4
    # context strictly before the anchor changes the block
    f2 = feats.clone()
    f2[0, 7] += 3.0 * torch.randn_like(f2[0, 7])
    assert (logits(f2, ids)[0] - base[0]).abs().max() > 1e-4
    # another block's token (slot 0 of block 1 at position 12) never reaches blocks 0 and 2
    ids2 = ids.clone()
    ids2[0, 12] = (ids[0, 12] + 1) % target.vocab_size
    out = logits(feats, ids2)
    assert torch.equal(out[0], base[0]) and torch.equal(out[2], base[2])
    assert (out[1] - base[1]).abs().max() > 1e-4
    # tokens after a block's anchor (its labels) never leak into it
    ids3 = ids.clone()
    ids3[0, 9:12] = MASK + 1
    assert torch.equal(logits(feats, ids3)[0], base[0])


def test_split_attention_equals_dense_masked_attention(target, monkeypatch):
    """The model attends to [context; own block] per block; that must equal plain attention over
    [context; all blocks] with the dense block mask (the SPEC's formulation)."""
    d = make_drafter(target)
    ids, feats = batch(target, B=2, L=20, seed=1)
    anchors = torch.tensor([[5, 9, 13], [6, 7, 15]])
    valid = torch.ones(2, 20, dtype=torch.bool)
    valid[1, 16:] = False  # padding never matters

    def dense(q, k_ctx, v_ctx, ctx_mask, k_blk, v_blk, scale):
        B, A, S_, h, dd = q.shape
        hk = k_ctx.shape[1]
        qq = q.reshape(B, A * S_, h, dd).transpose(1, 2)  # [B, h, AS, d]
        kb = k_blk.reshape(B, A * S_, hk, dd).transpose(1, 2)
        vb = v_blk.reshape(B, A * S_, hk, dd).transpose(1, 2)
        k = torch.cat([k_ctx, kb], 2).repeat_interleave(h // hk, 1)
        v = torch.cat([v_ctx, vb], 2).repeat_interleave(h // hk, 1)
        L = k_ctx.shape[2]
        m = dense_block_mask(anchors, valid[:, :L], S_)  # [B, AS, L+AS]
        o = F.scaled_dot_product_attention(qq, k, v, attn_mask=m[:, None], scale=scale)
        return o.transpose(1, 2).reshape(B, A, S_, h * dd)

    with torch.no_grad():
        ref = d.forward_train(feats, valid, ids, anchors)
        d.attention = "dense"  # the model's own SDPA path (the CUDA default)
        assert (d.forward_train(feats, valid, ids, anchors) - ref).abs().max() < 1e-5
        d.attention = "split"
        monkeypatch.setattr(dlayers, "block_attention", dense)  # an independent reference
        out = d.forward_train(feats, valid, ids, anchors)
    assert (out - ref).abs().max() < 1e-5


# ---- inference path == training path --------------------------------------------------------------------


@pytest.mark.parametrize("tap_norm", [False, True])
def test_incremental_api_matches_training_forward(target, tap_norm):
    d = make_drafter(target, tap_norm=tap_norm)
    ids, feats = batch(target, B=2, L=24, seed=2)
    valid = torch.ones(2, 24, dtype=torch.bool)
    anchors = torch.tensor([[15], [11]])  # ragged: stream 0 has 15 context positions, stream 1 has 11
    with torch.no_grad():
        ref = d.logits(d.forward_train(feats, valid, ids, anchors))[:, 0]  # [B, S, V]
        st = d.new_state(2)
        # prefill-like chunk: stream 1 is left-padded (2 invalid slots), positions are logical
        f0 = torch.zeros(2, 9, feats.shape[-1])
        f0[0], f0[1, 2:] = feats[0, :9], feats[1, :7]
        v0 = torch.ones(2, 9, dtype=torch.bool)
        v0[1, :2] = False
        p0 = torch.stack([torch.arange(9), torch.arange(-2, 7).clamp(min=0)])
        d.extend_context(st, f0, v0, p0)
        # a verify-like chunk of 6 slots: stream 0 accepts all, stream 1 keeps 4 (2 rejected holes with junk)
        f1 = torch.stack([feats[0, 9:15], torch.cat([feats[1, 7:11], torch.randn(2, feats.shape[-1])])])
        v1 = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
        p1 = torch.stack([torch.arange(9, 15), torch.tensor([7, 8, 9, 10, 11, 12])])
        d.extend_context(st, f1, v1, p1)
        blk = d.block_ids(ids.gather(1, anchors)[:, 0])  # [B, S]
        pos = anchors + torch.arange(S)
        out = d.draft(st, blk, pos)
        assert out.logits.dtype == torch.float32 and out.logits.shape == ref.shape
        assert out.hidden.shape == (2, S, target.hidden_size)
        assert (out.logits - ref).abs().max() < 1e-4
        # the invalid positions took no context slot (stream 1: 7 + 4 of them); dropping a stream keeps the rest exact
        assert st.lengths.tolist() == [15, 11]
        assert (d.draft(st, blk, pos).logits - ref).abs().max() < 1e-4
        st.drop_streams(torch.tensor([False, True]))
        assert (d.draft(st, blk[1:], pos[1:]).logits - ref[1:]).abs().max() < 1e-4


def test_topk_maps_draft_indices_to_target_ids(target):
    vocab = torch.tensor([50, 7, 3, 90, 11, 60])
    d = make_drafter(target, vocab=vocab)
    ids, feats = batch(target, B=1, L=12)
    st = d.new_state(1)
    d.extend_context(st, feats[:, :6], torch.ones(1, 6, dtype=torch.bool), torch.arange(6)[None])
    with torch.no_grad():
        out = d.draft(st, d.block_ids(ids[:, 6]), torch.arange(6, 6 + S)[None])
    assert out.logits.shape == (1, S, 6)
    tid, tl = out.topk(3)
    assert tid.shape == (1, S, 3) and set(tid.flatten().tolist()) <= set(vocab.tolist())
    assert torch.equal(vocab[out.logits.argmax(-1)], out.argmax()) and torch.equal(tl[..., 0], out.logits.max(-1).values)
    # the head rows are the target's LM-head rows for those ids (shared, frozen)
    h = out.hidden[0, 1]
    assert torch.allclose(out.logits[0, 1], target.lm_head.weight[vocab] @ h, atol=1e-5)


# ---- draft vocabulary and MASK -------------------------------------------------------------------------


def test_draft_vocabulary_frequency_order_and_coverage():
    counts = token_counts([[5, 5, 5, 2, 2, 9], [9, 9, 9, 4]], 12)
    vocab = build_draft_vocab(counts, 3, always=[11])
    assert vocab.tolist() == [9, 5, 11]  # top-2 by frequency, then the forced EOS
    assert coverage(vocab, counts) == pytest.approx(7 / 10)
    assert build_draft_vocab(counts, 10).tolist() == [9, 5, 2, 4]  # only seen ids
    m = target_to_draft(vocab, 12)
    assert m[9] == 0 and m[11] == 2 and m[2] == -1


class FakeTok:
    def __init__(self, table, mask=None, n=None):
        self.table, self.mask_token_id, self.n = table, mask, n or len(table)

    def get_vocab(self):
        return self.table

    def __len__(self):
        return self.n


def test_mask_token_resolution():
    assert resolve_mask_token(16, None, 100) == 16
    assert resolve_mask_token(-1, FakeTok({"a": 0, "<empty_output>": 16}), 100) == 16  # SmolLM2
    assert resolve_mask_token(-1, FakeTok({"a": 0}, mask=5), 100) == 5
    assert resolve_mask_token(-1, FakeTok({"a": 0}, n=90), 100) == 90  # first unused row (Qwen3 style)
    with pytest.raises(DraftlabError):
        resolve_mask_token(-1, FakeTok({"a": 0}, n=100), 100)
    with pytest.raises(DraftlabError):
        resolve_mask_token(100, None, 100)


# ---- checkpoints -------------------------------------------------------------------------------------------


def test_export_import_roundtrip(target, tmp_path):
    vocab = torch.tensor([4, 8, 15, 16, 23, 42, 7])
    d = make_drafter(target, vocab=vocab, seed=3)
    path = save_drafter(d, tmp_path / "drafter", info={"note": "test"})
    cfg = json.loads((path / "config.json").read_text())
    for k in ("block_size", "target_layer_ids", "mask_token_id", "convention", "hidden_size", "draft_vocab_size",
              "target_vocab_size", "num_layers"):
        assert k in cfg
    assert cfg["convention"] == "same-position" and cfg["target_layer_ids"] == TAPS and cfg["draft_vocab_size"] == 7
    from safetensors.torch import load_file

    names = set(load_file(str(path / "model.safetensors")))
    assert "draft_vocab" in names and not any("embed" in n or "lm_head" in n or "head_weight" in n for n in names)
    d2 = load_drafter(path, target)
    ids, feats = batch(target, B=2, L=16, seed=4)
    anchors = torch.tensor([[5, 9], [6, 10]])
    valid = torch.ones(2, 16, dtype=torch.bool)
    with torch.no_grad():
        a = d.logits(d.forward_train(feats, valid, ids, anchors))
        b = d2.logits(d2.forward_train(feats, valid, ids, anchors))
    assert torch.equal(a, b)
    assert torch.equal(d2.draft_vocab, vocab)


def test_load_against_mismatched_target_fails_clearly(target, tmp_path):
    from draftlab.verifier.load import build_random_model
    from draftlab.verifier.model import TargetModel

    path = save_drafter(make_drafter(target), tmp_path / "drafter")
    other_vocab = tiny_target("llama", vocab=101)
    with pytest.raises(DraftlabError, match="vocabulary of 97") as e:
        load_drafter(path, other_vocab)
    assert "\n" not in str(e.value)
    narrow = TargetModel(build_random_model(RandomModelConfig(hidden_size=32, num_heads=4, num_kv_heads=2, num_layers=4),
                                            97, None, None))
    with pytest.raises(DraftlabError, match="hidden size 64") as e:
        load_drafter(path, narrow)
    assert "\n" not in str(e.value)
    with pytest.raises(DraftlabError, match="no config.json"):
        load_drafter(tmp_path / "nothing", target)


def test_trainable_vs_frozen_parameters(target):
    d = make_drafter(target)
    assert d.num_frozen_parameters() == target.embed_tokens.weight.numel()  # tied embedding / head, counted once
    assert all(p.requires_grad for p in d.parameters())
    assert not any(p is target.embed_tokens.weight for p in d.parameters())
    assert np.isclose(d.num_trainable_parameters(), sum(p.numel() for p in d.state_dict().values() if p.is_floating_point()))


def test_tap_norm_and_output_norm_init(target, tmp_path):
    """Per-tap RMSNorm makes the context blind to each tap's scale; out_norm_init sets the final
    norm; both survive a save/load round trip (they are part of the architecture)."""
    arch = arch_from_target(target, DrafterDesign(S, 1, TAPS, MASK, tap_norm=True, out_norm_init=0.25))
    d = DFlashDrafter.from_target(arch, target).eval()
    assert torch.allclose(d.norm.weight, torch.full_like(d.norm.weight, 0.25)) and len(d.tap_norms) == len(TAPS)
    ids, feats = batch(target, B=1, L=10)
    H = target.hidden_size
    scaled = feats.clone()
    scaled[..., :H] *= 1000.0  # one tap 1000x louder: no effect after its own RMSNorm
    pos = torch.arange(10)[None]
    with torch.no_grad():
        k1, _ = d.project_context(feats, pos)
        k2, _ = d.project_context(scaled, pos)
    assert (k1[0] - k2[0]).abs().max() < 5e-3  # only the RMSNorm eps differs
    save_drafter(d, tmp_path / "d")
    d2 = load_drafter(tmp_path / "d", target)
    assert d2.arch.tap_norm and d2.arch.out_norm_init == 0.25
    with torch.no_grad():
        assert torch.equal(d2.project_context(feats, pos)[0][0], k1[0])


def test_greedy_block_labels_match_brute_force():
    """Slot k's label is the target's greedy token at a+k, valid only while the text agrees with the
    target's greedy tokens at a+1..a+k-1 (checked against a direct loop)."""
    from draftlab.drafter.masks import greedy_block_labels

    g = torch.Generator().manual_seed(0)
    B, T, S5 = 3, 30, 5
    ids = torch.randint(0, 4, (B, T), generator=g)
    greedy = torch.where(torch.rand(B, T, generator=g) < 0.7, ids, torch.randint(0, 4, (B, T), generator=g))
    greedy[:, 0] = -1
    anchors = torch.tensor([[1, 7, 20], [3, 24, 25], [0, 12, 26]])
    seq_len = torch.tensor([30, 27, 29])
    lab, valid = greedy_block_labels(ids, greedy, anchors, S5, seq_len)
    for b in range(B):
        for i, a in enumerate(anchors[b].tolist()):
            for k in range(S5):
                p = a + k
                ok = k >= 1 and p < seq_len[b] and greedy[b, p] >= 0 and all(
                    ids[b, a + j] == greedy[b, a + j] for j in range(1, k))
                assert bool(valid[b, i, k]) == ok, (b, a, k)
                if ok:
                    assert lab[b, i, k] == greedy[b, p]
    # on the target's own greedy text the labels are the reference labels
    same, ok_same = greedy_block_labels(ids, torch.cat([torch.full((B, 1), -1), ids[:, 1:]], 1), anchors, S5, seq_len)
    ref, in_range = block_labels(ids, anchors, S5, seq_len)
    assert torch.equal(ok_same, in_range) and torch.equal(same[ok_same], ref[in_range])


def test_block_heads_init_points_first_layer_heads_at_the_block(target):
    """init_block_heads: the projected context is orthogonal to the embeddings' mean direction m,
    so the chosen kv head's context keys are zero (score 0), while token keys and MASK queries lie
    on the lowest-frequency rotary pair (score ±sqrt(d), position-independent); other heads keep
    their random init."""
    torch.manual_seed(0)
    d0 = DFlashDrafter.from_target(arch_from_target(target, DrafterDesign(S, 1, TAPS, MASK)), target)
    torch.manual_seed(0)
    d = DFlashDrafter.from_target(arch_from_target(target, DrafterDesign(S, 1, TAPS, MASK, init_block_heads=1)), target)
    a, layer = d.arch, d.layers[0]
    hd, lo = a.head_dim, a.head_dim // 2 - 1
    E = target.embed_tokens.weight.detach()
    m = (E / E.pow(2).mean(-1, keepdim=True).add(a.rms_norm_eps).sqrt()).mean(0)
    m = m / m.norm()
    assert (m @ d.fc.weight).abs().max() < 1e-5  # ctx ⊥ m
    ids, feats = batch(target, B=1, L=12)
    with torch.no_grad():
        ctx = d.hidden_norm(d.fc(feats))
        k_ctx = layer.k_proj(ctx)[..., :hd]  # kv head 0, before its norm
        assert k_ctx.abs().max() < 1e-5
        k_tok = layer.k_proj(layer.input_layernorm(d.embed_tokens(ids)))[..., :hd]
        assert (k_tok[..., :lo].abs().max() < 1e-6) and (k_tok[..., lo + 1:].abs().max() < 1e-6)
    G = a.num_heads // a.num_kv_heads
    q_rows = layer.q_proj.weight[: G * hd].view(G, hd, -1)
    assert torch.equal(q_rows[:, lo], m.expand(G, -1)) and q_rows[:, :lo].abs().max() == 0
    assert torch.equal(layer.k_proj.weight[hd:], d0.layers[0].k_proj.weight[hd:])  # the other kv heads: untouched
