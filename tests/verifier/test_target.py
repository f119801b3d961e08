"""Target adapter: cached extension, cropping, ragged streams over the static slot buffer, taps and packed tree
scoring are exact."""
from __future__ import annotations

import pytest
import torch

from draftlab.verifier import StreamCache, causal_mask, crop_cache

TOL = 1e-4


def full_logits(target, ids):
    return target(torch.tensor([ids])).logits[0]


@pytest.mark.parametrize("name", ["llama_target", "qwen3_target"])
def test_step_by_step_equals_full_forward(name, request):
    target = request.getfixturevalue(name)
    torch.manual_seed(0)
    ids = torch.randint(0, target.vocab_size, (1, 20))
    full = target(ids).logits
    cache = target.new_cache()
    parts = [target(ids[:, :7], cache=cache).logits]
    for t in range(7, 20, 3):
        parts.append(target(ids[:, t:t + 3], cache=cache).logits)
    step = torch.cat(parts, dim=1)
    assert (step - full).abs().max() < TOL


def test_crop_then_reextend(llama_target):
    t = llama_target
    ids = torch.randint(0, t.vocab_size, (1, 16), generator=torch.Generator().manual_seed(1))
    other = torch.randint(0, t.vocab_size, (1, 6), generator=torch.Generator().manual_seed(2))
    full = t(ids).logits
    cache = t.new_cache()
    t(ids[:, :10], cache=cache)
    t(other, cache=cache)  # a wrong continuation...
    crop_cache(cache, 10)  # ...cropped away
    assert cache.get_seq_length() == 10
    again = t(ids[:, 10:], cache=cache).logits
    assert (again - full[:, 10:]).abs().max() < TOL


def test_ragged_streams_match_single_stream(llama_target):
    t = llama_target
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(0, t.vocab_size, (n,), generator=g).tolist() for n in (5, 11, 8)]
    conts = [torch.randint(0, t.vocab_size, (6,), generator=g).tolist() for _ in prompts]
    sc = StreamCache(t, 3)
    out = sc.prefill(prompts, pad_id=0)
    # last prompt token logits per stream
    for b, p in enumerate(prompts):
        ref = full_logits(t, p)[-1]
        assert (out.logits[b, -1] - ref).abs().max() < TOL
    # verify-like append of 4 tokens, keep different prefixes, then continue
    block = torch.tensor([c[:4] for c in conts])
    out = sc.append(block)
    for b, p in enumerate(prompts):
        ref = full_logits(t, p + conts[b][:4])[-4:]
        assert (out.logits[b] - ref).abs().max() < TOL
    keep = torch.tensor([1, 0, 4])
    sc.commit(keep, 4)
    assert sc.next_pos.tolist() == [len(p) + int(k) for p, k in zip(prompts, keep)]
    nxt = torch.tensor([[conts[b][int(keep[b])]] for b in range(3)])
    out = sc.append(nxt)
    for b, p in enumerate(prompts):
        seq = p + conts[b][: int(keep[b]) + 1]
        assert (out.logits[b, -1] - full_logits(t, seq)[-1]).abs().max() < TOL
    # the rejected tails were written over by the next append: one more round stays exact
    assert sc.lengths.tolist() == [len(p) + int(k) + 1 for p, k in zip(prompts, keep)]
    out2 = sc.append(torch.tensor([[7], [8], [9]]))
    for b, p in enumerate(prompts):
        seq = p + conts[b][: int(keep[b]) + 1] + [7 + b]
        assert (out2.logits[b, -1] - full_logits(t, seq)[-1]).abs().max() < TOL


def test_the_buffer_is_static_through_dropped_streams_and_rejections(llama_target):
    """A fixed capacity: every pass writes into the same buffers (no re-allocation when a stream is dropped or a
    token rejected), the survivors' logits stay exact, and a request past the capacity is one line naming
    engine.kv_capacity."""
    from draftlab.errors import DraftlabError

    t = llama_target
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(0, t.vocab_size, (n,), generator=g).tolist() for n in (70, 9, 30)]
    sc = StreamCache(t, 3, capacity=80)
    sc.prefill(prompts, pad_id=0)
    ptrs = [k.data_ptr() for k in sc.cache.k]
    sc.append(torch.tensor([[1], [2], [3]]))
    prompts = [p + [i + 1] for i, p in enumerate(prompts)]
    sc.drop_streams(torch.tensor([True, False, True]))
    assert sc.batch == 2 and sc.capacity == 80
    ptrs = [k.data_ptr() for k in sc.cache.k]
    out = sc.append(torch.tensor([[3], [4]]))
    assert sc.capacity == 80 and [k.data_ptr() for k in sc.cache.k] == ptrs  # written in place
    for b, (p, tok) in enumerate(zip((prompts[0], prompts[2]), (3, 4))):
        assert (out.logits[b, -1] - full_logits(t, p + [tok])[-1]).abs().max() < TOL
    sc.commit(torch.tensor([1, 0]), 1)  # stream 1 rejects its token: its fill does not move
    out = sc.append(torch.tensor([[5], [6]]))
    assert [k.data_ptr() for k in sc.cache.k] == ptrs
    for b, seq in enumerate((prompts[0] + [3, 5], prompts[2] + [6])):
        assert (out.logits[b, -1] - full_logits(t, seq)[-1]).abs().max() < TOL
    with pytest.raises(DraftlabError, match="raise engine.kv_capacity") as e:
        sc.append(torch.zeros(2, 8, dtype=torch.long))  # 73 + 8 + the scratch slot > 80
    assert "\n" not in str(e.value)
    with pytest.raises(DraftlabError, match="engine.kv_capacity"):
        StreamCache(t, 1, capacity=8).prefill([[1] * 10], pad_id=0)


def test_single_stream_commit_moves_the_fill(llama_target):
    t = llama_target
    sc = StreamCache(t, 1)
    sc.prefill([[1, 2, 3, 4]], pad_id=0)
    sc.append(torch.tensor([[5, 6, 7, 8]]))
    sc.commit(torch.tensor([2]), 4)
    assert sc.lengths.tolist() == [6] and bool(sc.valid[0, :6].all()) and not bool(sc.valid[0, 6:].any())


def test_tap_convention_layer_i_is_hidden_states_i_plus_1(llama_target):
    t = llama_target
    ids = torch.randint(0, t.vocab_size, (2, 9), generator=torch.Generator().manual_seed(4))
    taps = [0, 2]
    out = t(ids, taps=taps)
    hs = t.model(input_ids=ids, output_hidden_states=True).hidden_states
    ref = torch.cat([hs[i + 1] for i in taps], dim=-1)
    assert out.taps.shape == (2, 9, 2 * t.hidden_size)
    assert torch.equal(out.taps, ref)


def test_default_taps_evenly_spaced(llama_target):
    from draftlab.verifier.model import TargetModel

    class Fake:
        num_layers = 30

    assert TargetModel.default_taps(Fake(), 3) == [1, 14, 27]
    assert TargetModel.default_taps(Fake(), 1) == [14]


def test_packed_tree_scoring_equals_full_recompute(llama_target, qwen3_target):
    from draftlab.specopd.tree import trunk_pass
    from draftlab.verifier.tree import score_tree

    for t in (llama_target, qwen3_target):
        g = torch.Generator().manual_seed(5)
        trunks = [torch.randint(0, t.vocab_size, (n,), generator=g).tolist() for n in (14, 10)]
        L = max(map(len, trunks))
        ids = torch.tensor([tr + [0] * (L - len(tr)) for tr in trunks])
        trunk = trunk_pass(t, ids, torch.tensor([len(tr) for tr in trunks]))
        # anchors include the first and last trunk positions; branches of W=4 (3 rows)
        anchors = torch.tensor([[0, 6, 13], [2, 9, 5]])
        branch = torch.randint(0, t.vocab_size, (2, 3, 3), generator=g)
        out = score_tree(t, trunk.cache, trunk.valid, anchors, branch)
        assert trunk.cache.get_seq_length() == L  # trunk cache restored
        worst = 0.0
        for b in range(2):
            for a in range(3):
                anc = int(anchors[b, a])
                for i in range(3):
                    seq = trunks[b][: anc + 1] + branch[b, a, : i + 1].tolist()
                    worst = max(worst, float((out.logits[b, a, i] - full_logits(t, seq)[-1]).abs().max()))
        assert worst <= 1e-4
        # the read rule: the trunk row at the anchor scores branch token 1
        ref = full_logits(t, trunks[0][:7])[-1]
        assert (trunk.logits[0, 6] - ref).abs().max() <= 1e-4


def test_tree_rows_do_not_leak(llama_target):
    from draftlab.specopd.tree import trunk_pass
    from draftlab.verifier.tree import score_tree

    t = llama_target
    g = torch.Generator().manual_seed(6)
    trunk = torch.randint(0, t.vocab_size, (12,), generator=g).tolist()
    anchors = torch.tensor([[4, 7]])
    branch = torch.randint(0, t.vocab_size, (1, 2, 3), generator=g)

    def run(trunk_ids, br):
        trunk = trunk_pass(t, torch.tensor([trunk_ids]), torch.tensor([len(trunk_ids)]))
        return score_tree(t, trunk.cache, trunk.valid, anchors, br).logits

    base = run(trunk, branch)
    sib = branch.clone(); sib[0, 1] = (sib[0, 1] + 1) % t.vocab_size  # change the sibling branch
    assert torch.equal(run(trunk, sib)[0, 0], base[0, 0])
    later = list(trunk); later[6] = (later[6] + 1) % t.vocab_size  # a reference token after anchor 4
    assert (run(later, branch)[0, 0] - base[0, 0]).abs().max() < 1e-6
    assert (run(later, branch)[0, 1] - base[0, 1]).abs().max() > 1e-4  # ...is seen by anchor 7


def test_qwen3_with_real_tokenizer_and_thinking_switch():
    from draftlab.config import RandomModelConfig
    from draftlab.data.templates import encode_prompt
    from draftlab.verifier.load import build_random_model, random_tokenizer
    from draftlab.verifier.model import TargetModel

    tok = random_tokenizer("qwen3")
    assert len(tok) > 151_000
    on, _ = encode_prompt(tok, "What is 2+2?", thinking=True)
    off, _ = encode_prompt(tok, "What is 2+2?", thinking=False)
    assert on != off  # the template's enable_thinking switch is honoured
    assert "<think>" in tok.decode(off)  # thinking off pre-fills an empty think block
    model = build_random_model(RandomModelConfig(arch="qwen3", tokenizer="qwen3", num_layers=2), len(tok), None, tok.eos_token_id)
    t = TargetModel(model, tok)
    ids = torch.tensor([off])
    full = t(ids, taps=[0]).logits
    sc = StreamCache(t, 1)
    a = sc.prefill([off[:-3]], pad_id=0)
    b = sc.append(ids[:, -3:])
    assert (b.logits - full[:, -3:]).abs().max() < TOL


def test_the_gguf_tokenizer_is_converted_once_and_read_back_the_same(tmp_path, monkeypatch):
    """DRAFTLAB_TOKENIZER_CACHE: the first random target converts the packaged GGUF's tokenizer and keeps it; the
    next reads the kept one, which encodes, decodes and names its special tokens as the GGUF's own."""
    from transformers import AutoTokenizer

    from draftlab.verifier import load

    monkeypatch.setenv(load.TOKENIZER_CACHE_ENV, str(tmp_path / "cache"))
    gguf = load.packaged_gguf()
    calls = []
    real = AutoTokenizer.from_pretrained
    monkeypatch.setattr(AutoTokenizer, "from_pretrained", lambda *a, **k: calls.append(k.get("gguf_file")) or real(*a, **k))
    first, second = load.random_tokenizer("smollm2"), load.random_tokenizer("smollm2")
    assert calls == [gguf.name, None]  # converted once, then read from the cache folder
    assert len(list((tmp_path / "cache").iterdir())) == 1
    text = "Hello <|im_start|>world\n  x=1"
    assert second(text).input_ids == first(text).input_ids and second.decode(first(text).input_ids) == first.decode(
        first(text).input_ids)
    assert (len(second), second.bos_token_id, second.eos_token_id, second.pad_token_id) == (
        len(first), first.bos_token_id, first.eos_token_id, first.pad_token_id)


def test_a_prepared_target_is_readable_by_others(tmp_path):
    """transformers' save_pretrained writes model.safetensors 0600; the prepared folder gets the umask's modes like
    every other output (0644 files, 0755 folders under umask 022)."""
    import os
    import stat

    from draftlab.config.sections import RandomModelConfig
    from draftlab.verifier.load import save_random

    old = os.umask(0o022)  # a user's usual umask (what the smoke run checks on every file it writes)
    try:
        out = tmp_path / "target"
        save_random(RandomModelConfig(hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=32,
                                      max_position_embeddings=64), out)
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in [out, *out.rglob("*")]}
    assert "model.safetensors" in modes and modes["model.safetensors"] == 0o644, modes
    assert all(m == (0o755 if p.is_dir() else 0o644) for p in [out, *out.rglob("*")]
               for m in [stat.S_IMODE(p.stat().st_mode)]), modes
