"""Chat templating with left-truncation of over-long prompts (the user text loses its beginning,
the template's header and generation prompt stay intact). A chat prompt (a list of turns) loses its
oldest turns first (a system turn stays), then the beginning of its last user turn."""
from __future__ import annotations

from typing import Sequence

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


def encode_prompt(tokenizer, text: str, thinking: bool = False, max_tokens: int = 0,
                  messages: Turns | None = None) -> tuple[list[int], bool]:
    """Token ids of the templated prompt (`text` as one user turn, or the chat `messages`) and whether
    it was truncated to max_tokens."""
    turns = list(messages) if messages else [("user", text)]
    ids = _template(tokenizer, turns, thinking)
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
