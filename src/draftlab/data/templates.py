"""Chat templating with left-truncation of over-long prompts (the user text loses its beginning,
the template's header and generation prompt stay intact)."""
from __future__ import annotations


def _template(tokenizer, text: str, thinking: bool) -> list[int]:
    msgs = [{"role": "user", "content": text}]
    kwargs = {"enable_thinking": thinking}
    if getattr(tokenizer, "chat_template", None):
        out = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, **kwargs)
        if hasattr(out, "keys") and "input_ids" in out:  # transformers 5 may return a BatchEncoding
            out = out["input_ids"]
        return list(out)
    return tokenizer(text, add_special_tokens=True)["input_ids"]  # no template: plain text


def encode_prompt(tokenizer, text: str, thinking: bool = False, max_tokens: int = 0) -> tuple[list[int], bool]:
    """Token ids of the templated prompt and whether it was left-truncated to max_tokens."""
    ids = _template(tokenizer, text, thinking)
    if not max_tokens or len(ids) <= max_tokens:
        return ids, False
    overhead = len(_template(tokenizer, "", thinking))
    content = tokenizer(text, add_special_tokens=False)["input_ids"]
    keep = max(1, max_tokens - overhead)
    for _ in range(4):  # re-tokenisation at the cut can shift a token or two
        ids = _template(tokenizer, tokenizer.decode(content[-keep:]), thinking)
        if len(ids) <= max_tokens:
            break
        keep -= len(ids) - max_tokens
    return ids[-max_tokens:] if len(ids) > max_tokens else ids, True
