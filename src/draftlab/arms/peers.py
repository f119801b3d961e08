"""Peers run by other people's code, as benchmark arms beside the project's own (greedy, batch 1).

- `HFGenerateArm` (`hf-generate`, `hf-generate-pld`): Hugging Face `generate` on the target's own
  model, greedy, one prompt at a time; for the `-pld` row with `prompt_lookup_num_tokens` and
  `max_matching_ngram_size` set to `pld.num_tokens` / `pld.max_ngram`, so both lookups use the same n-gram
  and draft lengths (HF takes the first earlier match, ours the most recent). It anchors the project's AR
  engine (same weights, same dtype, same threads).
- `DFlashRefArm` (`dflash-ref`): the authors' `dflash.model.dflash_generate` with the pretrained drafter
  converted to their `DFlashDraftModel` (`draftlab.drafter.refformat`: the same renames as
  `draftlab export`). Two adapters, both outside their decoding logic:
  - their loop times itself with `torch.cuda.synchronize()`, which fails on a CPU-only torch; on CPU
    `dflash.model._cuda_time` is replaced by a plain `perf_counter` while the arm runs;
  - a drafter with a draft vocabulary (the reference has none) drafts through an output head that is
    the target's full head with every logit outside the draft vocabulary set to −inf — the same argmax
    as our draft head (the `cpu` profile's drafter has a 16k draft vocabulary). A full-vocabulary drafter
    uses the target's head as is.
Both report a `GenerationResult` like the engines (tokens, wall time, per-stream finishing times);
`dflash-ref` also reports its per-round acceptance (their `acceptance_lengths` = accepted + 1).
"""
from __future__ import annotations

import contextlib
import inspect

import torch
from torch import nn

from draftlab.decoding import clock
from draftlab.decoding.common import GenerationResult
from draftlab.errors import DraftlabError


def _result(tokens, finish, t_done, wall, round_times, accepted=None, block_size=1, phases=("generate",)):
    R = len(round_times)
    return GenerationResult(
        tokens=tokens, finish_reason=finish, t_done=t_done, prefill_s=0.0, wall_s=wall, phases=phases,
        round_times=torch.tensor(round_times, dtype=torch.float64).reshape(R, len(phases)),
        round_streams=torch.ones(R, dtype=torch.long), accepted=accepted or [], block_size=block_size)


def _cut(tokens: list[int], eos_ids, max_new: int) -> tuple[list[int], str]:
    """Tokens up to and including the first EOS, at most max_new; the finish reason."""
    tokens = tokens[:max_new]
    for i, t in enumerate(tokens):
        if t in eos_ids:
            return tokens[: i + 1], "eos"
    return tokens, "length"


class _Turns:
    """A `generate` streamer that only marks HF's steps as round boundaries of a lockstep run (decoding/clock.py)."""

    def put(self, value) -> None:
        clock.turn()

    def end(self) -> None:
        pass


class HFGenerateArm:
    """`transformers` `generate`, greedy, batch 1 (prompt_lookup = 0: plain; else prompt-lookup decoding)."""

    speculative = False
    greedy_only = True
    drafter = None

    def __init__(self, name: str, target, prompt_lookup: int = 0, pad_id: int = 0, max_ngram: int = 0):
        self.name, self.target, self.prompt_lookup, self.pad_id = name, target, prompt_lookup, pad_id
        self.max_ngram = max_ngram  # HF's max_matching_ngram_size (0: its default, 2)

    @torch.no_grad()
    def generate(self, prompts, max_new_tokens, sp, eos_ids, generator, record_topk=0) -> GenerationResult:
        from transformers import GenerationConfig

        if not sp.greedy:
            raise DraftlabError(f"arm {self.name} is a greedy reference row; run it at temperature 0")
        model, dev = self.target.model, self.target.device
        cfg = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=list(eos_ids) or None,
                               pad_token_id=self.pad_id, prompt_lookup_num_tokens=self.prompt_lookup or None,
                               max_matching_ngram_size=(self.max_ngram or None) if self.prompt_lookup else None)
        tokens, finish, t_done = [], [], []
        start = clock.now()
        for p in prompts:
            ids = torch.tensor([p], dtype=torch.long, device=dev)
            out = model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=cfg,
                                 streamer=_Turns() if clock.in_lockstep() else None)
            toks, why = _cut(out[0, len(p):].tolist(), set(eos_ids), max_new_tokens)
            tokens.append(toks), finish.append(why), t_done.append(clock.now() - start)
        return _result(tokens, finish, t_done, clock.now() - start, [])  # no rounds: one opaque call


class _RefTarget:
    """The target as `dflash_generate` sees it: the HF model, with `lm_head` replaced by `head`."""

    def __init__(self, model: nn.Module, head):
        self.model, self.lm_head, self.config, self.device = model, head, model.config, model.device
        # dflash passes `past_key_values`, which transformers >= 5.2x renames `cache` (a FutureWarning per call)
        self.rename = "cache" in inspect.signature(model.forward).parameters

    def __call__(self, *args, **kwargs):
        if self.rename and "past_key_values" in kwargs:
            kwargs["cache"] = kwargs.pop("past_key_values")
        return self.model(*args, **kwargs)

    def get_input_embeddings(self):
        return self.model.get_input_embeddings()


class _VocabHead(nn.Module):
    """The target's full LM head, −inf outside a draft vocabulary: argmax-equivalent to the draft head."""

    def __init__(self, head: nn.Module, vocab: torch.Tensor, V: int):
        super().__init__()
        self.head = head
        self.register_buffer("outside", torch.ones(V, dtype=torch.bool, device=vocab.device).index_fill_(0, vocab, False))

    def forward(self, hidden):
        return self.head(hidden).masked_fill(self.outside, float("-inf"))


def reference_model(drafter):
    """Our DFlash drafter as the authors' `DFlashDraftModel` (same weights, renamed; on its device/dtype)."""
    from dflash.model import DFlashDraftModel
    from transformers import Qwen3Config

    from draftlab.drafter.refformat import reference_config, reference_state

    cfg = Qwen3Config(**{k: v for k, v in reference_config(drafter.arch).items() if k not in ("architectures", "model_type")})
    model = DFlashDraftModel(cfg)
    missing, unexpected = model.load_state_dict(reference_state(drafter), strict=False)
    if unexpected or [m for m in missing if "rotary" not in m]:
        raise DraftlabError(f"the reference DFlashDraftModel does not take this drafter: missing {missing[:3]}, "
                            f"unexpected {unexpected[:3]}")
    return model.to(device=drafter.device, dtype=drafter.dtype).eval()


@contextlib.contextmanager
def cpu_clock(device: torch.device):
    """On CPU, the reference's CUDA-synchronising clock becomes a plain perf_counter while inside."""
    import dflash.model as ref

    if device.type == "cuda":
        yield
        return
    saved = ref._cuda_time
    ref._cuda_time = clock.now  # this thread's own time (decoding/clock.py)
    try:
        yield
    finally:
        ref._cuda_time = saved


def dflash_reference_generate(model, target, prompt: list[int], max_new_tokens: int, eos_ids, head=None):
    """One prompt through `dflash_generate` (greedy): (generated tokens, acceptance lengths per round)."""
    from dflash.model import dflash_generate

    dev = target.device
    ref_target = _RefTarget(target.model, head if head is not None else target.lm_head)
    with cpu_clock(dev):
        out = dflash_generate(model, ref_target, torch.tensor([prompt], dtype=torch.long, device=dev), max_new_tokens,
                              list(eos_ids) or None, temperature=0.0, return_stats=True)
    return out.output_ids[0, len(prompt):].tolist(), list(out.acceptance_lengths)


class DFlashRefArm:
    """The authors' decoding loop with our pretrained drafter (greedy, batch 1)."""

    speculative = True
    greedy_only = True

    def __init__(self, name: str, target, drafter):
        self.name, self.target, self.drafter = name, target, drafter
        self.model = reference_model(drafter)
        vocab = getattr(drafter, "draft_vocab", None)
        self.head = None if vocab is None else _VocabHead(target.lm_head, vocab, target.vocab_size)

    def generate(self, prompts, max_new_tokens, sp, eos_ids, generator, record_topk=0) -> GenerationResult:
        if not sp.greedy:
            raise DraftlabError(f"arm {self.name} runs the reference's greedy loop; run it at temperature 0")
        tokens, finish, t_done, times, accepted = [], [], [], [], []
        start = clock.now()
        for p in prompts:
            t0 = clock.now()
            toks, lengths = dflash_reference_generate(self.model, self.target, p, max_new_tokens, eos_ids, self.head)
            toks, why = _cut(toks, set(eos_ids), max_new_tokens)
            now = clock.now()
            tokens.append(toks), finish.append(why), t_done.append(now - start)
            accepted.append([a - 1 for a in lengths])
            times += [[(now - t0) / max(len(lengths), 1)]] * len(lengths)
        return _result(tokens, finish, t_done, clock.now() - start, times, accepted,
                       self.drafter.block_size, ("round",))
