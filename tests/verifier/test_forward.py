"""The project's own target forward (draftlab.verifier.forward) against the Hugging Face model it reads the weights
of: logits and tap states equal in fp32, for tiny random Llama with Llama-3.1's `llama3` rope scaling, Qwen3 (q/k
norms, untied head), a SmolLM2-shaped Llama (tied embeddings, 3 KV heads for 9 query heads) and Qwen2 (q/k/v
biases); over ragged streams and many rounds of commits. The tolerance is the reference's own error: 4 x the gap
between the Hugging Face model in fp32 and in float64, plus 8 fp32 ulps of the largest logit — so it holds on any
CPU kernel level, and a real error (a wrong rotation, a missing norm, a skipped tap) is orders of magnitude above."""
from __future__ import annotations

import copy

import pytest
import torch

from draftlab.verifier.model import TargetModel
from draftlab.verifier.streams import StreamCache

pytestmark = pytest.mark.usefixtures("one_thread")


def make(kind: str):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed({"llama3": 0, "qwen3": 1, "smollm2": 2, "qwen2": 3}[kind])
    if kind == "llama3":  # Llama-3.1's rope scaling, at a context the scaling reaches
        cfg = LlamaConfig(vocab_size=101, hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                          num_key_value_heads=2, intermediate_size=96, max_position_embeddings=512,
                          rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                           "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                           "original_max_position_embeddings": 64},
                          tie_word_embeddings=False)
        model = LlamaForCausalLM(cfg)
    elif kind == "qwen3":
        model = Qwen3ForCausalLM(Qwen3Config(vocab_size=97, hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                                             num_key_value_heads=2, head_dim=24, intermediate_size=96,
                                             max_position_embeddings=512, tie_word_embeddings=False))
    elif kind == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(vocab_size=97, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                             num_key_value_heads=2, intermediate_size=96, max_position_embeddings=512))
    else:  # SmolLM2-135M's layout, small: 9 query / 3 KV heads, tied embeddings
        model = LlamaForCausalLM(LlamaConfig(vocab_size=103, hidden_size=72, num_hidden_layers=3, num_attention_heads=9,
                                             num_key_value_heads=3, intermediate_size=128, max_position_embeddings=512,
                                             tie_word_embeddings=True))
    with torch.no_grad():  # non-trivial norm weights and biases, so a missing norm or bias shows
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.3)
    return model.float().eval()


def hf_reference(model, ids: list[int], taps: list[int]):
    """(logits [T, V], taps [T, n*H]) of the Hugging Face forward in fp32 and in float64 (one sequence, no cache)."""
    out = {}
    for dt in (torch.float32, torch.float64):
        m = copy.deepcopy(model).to(dt)
        seen = {}  # each tap layer's output, read by a hook (hidden_states[-1] is the final-normed state)
        hooks = [m.model.layers[i].register_forward_hook(
            lambda mod, inp, o, i=i: seen.__setitem__(i, o[0] if isinstance(o, tuple) else o)) for i in taps]
        with torch.no_grad():
            r = m(torch.tensor([ids]))
        for h in hooks:
            h.remove()
        out[dt] = (r.logits[0].double(), torch.cat([seen[i][0] for i in taps], -1).double())
    return out[torch.float32], out[torch.float64]


def tol(ref32, ref64):
    return 4 * float((ref32 - ref64).abs().max()) + 8 * torch.finfo(torch.float32).eps * float(ref64.abs().max())


@pytest.mark.parametrize("kind", ["llama3", "qwen3", "smollm2", "qwen2"])
def test_full_pass_equals_hugging_face(kind):
    model = make(kind)
    t = TargetModel(model)
    g = torch.Generator().manual_seed(4)
    ids = torch.randint(0, t.vocab_size, (150,), generator=g).tolist()  # past llama3's original 64 positions
    taps = [0, t.num_layers - 1]
    (l32, t32), (l64, t64) = hf_reference(model, ids, taps)
    out = t(torch.tensor([ids]), taps=taps)
    assert float((out.logits[0].double() - l64).abs().max()) <= tol(l32, l64)
    assert float((out.taps[0].double() - t64).abs().max()) <= tol(t32, t64)
    stop = t(torch.tensor([ids]), taps=[1], need_logits=False)  # the pass stops at the deepest tap: same tap
    assert stop.logits is None and torch.equal(stop.taps, t(torch.tensor([ids]), taps=[1]).taps)


@pytest.mark.parametrize("kind", ["llama3", "qwen3", "smollm2"])
def test_ragged_streams_over_many_commits_equal_hugging_face(kind):
    """Three ragged streams decode 12 rounds of 1-4 tokens each, each round keeping a different prefix (rejected
    tokens are written over by the next round): every kept token's logits and taps equal the Hugging Face model's
    over that stream's committed text."""
    model = make(kind)
    t = TargetModel(model)
    g = torch.Generator().manual_seed(7)
    prompts = [torch.randint(0, t.vocab_size, (n,), generator=g).tolist() for n in (9, 23, 4)]
    taps = [1]
    sc = StreamCache(t, 3)
    texts = [list(p) for p in prompts]
    sc.prefill(prompts, pad_id=0, taps=taps)
    checked = 0
    for r in range(12):
        T = 1 + r % 4
        ids = torch.randint(0, t.vocab_size, (3, T), generator=g)
        out = sc.append(ids, taps=taps)
        keep = torch.randint(0, T + 1, (3,), generator=g)
        for b in range(3):
            k = int(keep[b])
            if k == 0:
                continue
            full = texts[b] + ids[b, :k].tolist()
            (l32, t32), (l64, t64) = hf_reference(model, full, taps)
            n = len(texts[b])
            assert float((out.logits[b, :k].double() - l64[n:n + k]).abs().max()) <= tol(l32[n:], l64[n:])
            assert float((out.taps[b, :k].double() - t64[n:n + k]).abs().max()) <= tol(t32[n:], t64[n:])
            checked += 1
        sc.commit(keep, T)
        for b in range(3):
            texts[b] += ids[b, :int(keep[b])].tolist()
    assert checked >= 20
