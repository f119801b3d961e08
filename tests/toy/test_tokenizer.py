"""draftlab.toy.tokenizer: one id per word, the ChatML template as draftlab.data.templates applies it, prompt text
round-trips through decode, the folder reloads with AutoTokenizer, and an outside word is `<unk>` (or one line)."""
from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from draftlab.data.templates import encode_prompt
from draftlab.errors import DraftlabError
from draftlab.toy.tasks import FAMILIES, TASK_WORDS, FamilySpec, WorldConfig, examples
from draftlab.toy.tokenizer import EOS, MASK, PAD, build_tokenizer, chat_ids, encode_words, vocabulary

WORLD = WorldConfig()


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer(WORLD)


def test_vocabulary_is_fixed_by_alphabet_and_keys(tok):
    v = vocabulary(WORLD)
    assert len(tok) == len(v) == len(set(v))
    assert tok.convert_tokens_to_ids(v) == list(range(len(v)))
    assert all(w in v for w in TASK_WORDS) and not any(w in v for w in set(FAMILIES) - set(TASK_WORDS))
    # the families picked do not change the ids; a family newer than the first world's appends its word
    assert vocabulary(WorldConfig(families=(FamilySpec("copy"),))) == v
    assert vocabulary(WorldConfig(families=(FamilySpec("copy"), FamilySpec("drift")))) == v + ["drift"]
    assert (tok.eos_token, tok.pad_token, tok.mask_token) == (EOS, PAD, MASK)


def test_one_token_per_word_and_round_trip(tok):
    for e in examples(WORLD, "eval", 10):
        for text in (e.prompt, e.answer):
            ids = tok(text)["input_ids"]
            assert ids == encode_words(tok, text)
            assert len(ids) == len(text.split())
            assert tok.decode(ids) == text


def test_chat_template_matches_encode_prompt(tok):
    e = examples(WORLD, "eval", 1)[0]
    ids, cut = encode_prompt(tok, e.prompt)
    assert not cut and ids == chat_ids(tok, e.prompt)
    assert tok.convert_ids_to_tokens(ids[:3]) == ["<|im_start|>", "user", "\n"]
    assert tok.convert_ids_to_tokens(ids[-3:]) == ["<|im_start|>", "assistant", "\n"]
    assert tok(tok.decode(ids))["input_ids"] == ids  # ids -> text -> ids
    assert tok.decode(ids, skip_special_tokens=True).split() == ["user", *e.prompt.split(), "assistant"]
    cut_ids, cut = encode_prompt(tok, e.prompt, max_tokens=20)
    assert cut and len(cut_ids) <= 20 and cut_ids[-3:] == ids[-3:]


def test_saved_folder_reloads(tok, tmp_path):
    tok.save_pretrained(tmp_path)
    back = AutoTokenizer.from_pretrained(tmp_path)
    e = examples(WORLD, "eval", 1)[0]
    assert encode_prompt(back, e.prompt)[0] == encode_prompt(tok, e.prompt)[0]
    assert back.decode(back(e.prompt)["input_ids"]) == e.prompt
    assert (back.eos_token_id, back.pad_token_id, back.mask_token_id) == (tok.eos_token_id, tok.pad_token_id,
                                                                          tok.mask_token_id)


def test_outside_word(tok):
    assert tok("copy : zz a")["input_ids"][2] == tok.unk_token_id
    with pytest.raises(DraftlabError, match="'zz' is outside"):
        encode_words(tok, "copy : zz a")
