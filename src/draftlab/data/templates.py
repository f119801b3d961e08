"""Chat templating with left-truncation of over-long prompts (the user text loses its beginning,
the template's header and generation prompt stay intact). A chat prompt (a list of turns) loses its
oldest turns first (a system turn stays), then the beginning of its last user turn."""
from __future__ import annotations

from typing import Sequence

from draftlab.errors import DraftlabError

Turns = Sequence[tuple[str, str]]  # (role, content), the last one a user turn


def _template(tokenizer, turns: Turns, thinking: bool) -> list[int]:
    msgs = [{"role": r, "content": c} for r, c in turns]
    kwargs = {"enable_thinking": thinking}
    if getattr(tokenizer, "chat_template", None):
        out = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, **kwargs)
        if hasattr(out, "keys") and "input_ids" in out:  # transformers 5 may return a BatchEncoding
            out = out["input_ids"]
        return list(out)
    text = "\n".join(c for _, c in turns)
    return tokenizer(text, add_special_tokens=True)["input_ids"]  # no template: plain text


def check_known(tokenizer, ids: list[int], text: str) -> None:
    """One line when the tokenizer turned some of the prompt into its unknown token (a word-level vocabulary, e.g.
    the toy world's, meeting a word it does not have): the target would read a different prompt."""
    unk = getattr(tokenizer, "unk_token_id", None)
    if unk is None or unk not in ids or (getattr(tokenizer, "unk_token", None) or "\0") in text:
        return
    words = [w for w in text.split() if tokenizer.convert_tokens_to_ids(w) == unk] if hasattr(
        tokenizer, "convert_tokens_to_ids") else []
    shown = ", ".join(repr(w) for w in dict.fromkeys(words)) or "some of its text"
    raise DraftlabError(f"the prompt {text[:40]!r}… has words outside the target's vocabulary ({shown[:120]}); a toy "
                        f"target knows only its world's words (draftlab.toy.tokenizer)")


def encode_prompt(tokenizer, text: str, thinking: bool = False, max_tokens: int = 0,
                  messages: Turns | None = None) -> tuple[list[int], bool]:
    """Token ids of the templated prompt (`text` as one user turn, or the chat `messages`) and whether
    it was truncated to max_tokens. A prompt the tokenizer cannot spell (its unknown token) is one line."""
    turns = list(messages) if messages else [("user", text)]
    ids = _template(tokenizer, turns, thinking)
    check_known(tokenizer, ids, "\n".join(c for _, c in turns))
    if not max_tokens or len(ids) <= max_tokens:
        return ids, False
    head = [t for t in turns[:1] if t[0] == "system"]
    history = turns[len(head):-1]
    while history:  # oldest turns first
        history = history[1:]
        ids = _template(tokenizer, [*head, *history, turns[-1]], thinking)
        if len(ids) <= max_tokens:
            return ids, True
    fixed = [*head]
    last = turns[-1][1]
    overhead = len(_template(tokenizer, [*fixed, ("user", "")], thinking))
    content = tokenizer(last, add_special_tokens=False)["input_ids"]
    keep = max(1, max_tokens - overhead)
    for _ in range(4):  # re-tokenisation at the cut can shift a token or two
        ids = _template(tokenizer, [*fixed, ("user", tokenizer.decode(content[-keep:]))], thinking)
        if len(ids) <= max_tokens:
            break
        keep -= len(ids) - max_tokens
    return ids[-max_tokens:] if len(ids) > max_tokens else ids, True
