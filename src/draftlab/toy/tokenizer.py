"""The toy world's tokenizer: one token per word of a fixed vocabulary, with a ChatML chat template.

A Hugging Face `tokenizers` WordLevel model behind a whitespace-split pre-tokenizer, wrapped as a
`transformers.PreTrainedTokenizerFast` (eos `<|im_end|>`, pad `<pad>`, unk `<unk>`, mask `<|MASK|>`, which no
text contains: the drafter's MASK), so `save_pretrained` writes it beside the model and `AutoTokenizer`
reloads it. The vocabulary depends only on the world's alphabet, key count and families: specials, the role words,
a newline token, the first world's task words (`tasks.TASK_WORDS`), the separators, the symbols, the keys, then the
words of the world's families added after those (`vocabulary`: an older world's ids never move).
The template is `<|im_start|>{role}\\n{content}<|im_end|>\\n` per turn, then `<|im_start|>assistant\\n`, as
SmolLM2's, so `draftlab.data.templates.encode_prompt` applies it unchanged. Decoding joins tokens with one
space: content text (words separated by single spaces) round-trips exactly; around the newline token the
spacing differs, and ids -> text -> ids round-trips.
"""
from __future__ import annotations

from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from draftlab.errors import DraftlabError
from draftlab.toy.tasks import ENTRY_END, LIST_SEP, MARKS, TASK_SEP, TASK_WORDS, WorldConfig

PAD, UNK, BOS, EOS, MASK = "<pad>", "<unk>", "<|im_start|>", "<|im_end|>", "<|MASK|>"
SPECIALS = (PAD, UNK, BOS, EOS, MASK)
NEWLINE = "\n"
ROLES = ("system", "user", "assistant")
CHAT_TEMPLATE = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
                 "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def vocabulary(cfg: WorldConfig) -> list[str]:
    """Every token of the world, in id order."""
    later = [f.name for f in cfg.families if f.name not in TASK_WORDS]  # families newer than the first world's
    words = [*SPECIALS, NEWLINE, *ROLES, *TASK_WORDS, TASK_SEP, LIST_SEP, ENTRY_END, *MARKS, *cfg.symbols(),
             *cfg.key_words(), *later]
    if len(set(words)) != len(words):
        raise DraftlabError("toy vocabulary has a duplicate word (a symbol equals a task or role word)")
    return words


def build_tokenizer(cfg: WorldConfig) -> PreTrainedTokenizerFast:
    """The world's tokenizer (ids follow `vocabulary(cfg)`)."""
    vocab = {w: i for i, w in enumerate(vocabulary(cfg))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    tok.add_tokens([AddedToken(NEWLINE, special=False, normalized=False, single_word=False)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=PAD, unk_token=UNK, eos_token=EOS,
                                   mask_token=MASK, clean_up_tokenization_spaces=False, model_max_length=4096)
    fast.chat_template = CHAT_TEMPLATE
    return fast


def encode_words(tokenizer, text: str) -> list[int]:
    """Ids of whitespace-separated content words, one line naming the first word outside the vocabulary."""
    vocab = tokenizer.get_vocab()
    ids = []
    for w in text.split():
        if w not in vocab:
            raise DraftlabError(f"word {w!r} is outside the toy world's vocabulary ({len(vocab)} tokens)")
        ids.append(vocab[w])
    return ids


def chat_ids(tokenizer, text: str) -> list[int]:
    """The templated prompt's ids (as `encode_prompt` gives them) without the template engine."""
    v = tokenizer.get_vocab()
    nl = v[NEWLINE]
    return [v[BOS], v["user"], nl, *encode_words(tokenizer, text), v[EOS], nl, v[BOS], v["assistant"], nl]
