"""Token ids as visible text for the explorer: the target's tokenizer (models/target/tokenizer.json, or the
folder draftlab_target.json points at) read with the light `tokenizers` library, whitespace and special
tokens made visible. Read-only; without a tokenizer ids are shown as #id and `source` says which stage
writes one."""
from __future__ import annotations

import json
from pathlib import Path

from draftlab import paths

TARGET = paths.TARGET


class TokenText:
    """Token id -> visible text: whitespace shown as ␣ ↵ ⇥, special tokens as ⟨name⟩, unknown ids as #id."""

    def __init__(self, tokenizer=None, special: set[int] | None = None, source: str = ""):
        self.tok, self.special, self.source = tokenizer, special or set(), source
        self._cache: dict[int, str] = {}

    @property
    def available(self) -> bool:
        return self.tok is not None

    def raw(self, tid: int) -> str:
        tid = int(tid)
        if self.tok is None or tid < 0:
            return ""
        try:
            s = self.tok.decode([tid], skip_special_tokens=False)
        except Exception:  # noqa: BLE001
            s = ""
        if not s or "\ufffd" in s:  # a partial UTF-8 byte: show the vocabulary entry instead
            s = self.tok.id_to_token(tid) or ""
        return s

    def __call__(self, tid: int | None) -> str:
        if tid is None:
            return "·"
        tid = int(tid)
        if tid < 0:
            return "∅"  # beyond the end of the output
        if tid in self._cache:
            return self._cache[tid]
        if self.tok is None:
            out = f"#{tid}"
        else:
            s = self.raw(tid)
            if tid in self.special:
                out = f"⟨{s}⟩"
            elif s == "":
                out = f"#{tid}"
            else:
                out = visible(s)
        self._cache[tid] = out
        return out

    def text(self, ids) -> str:
        """A whole sequence decoded together, whitespace made visible."""
        ids = [int(i) for i in ids if i is not None and int(i) >= 0]
        if self.tok is None:
            return " ".join(f"#{i}" for i in ids)
        return visible(self.tok.decode(ids, skip_special_tokens=False), keep_newlines=True)


def visible(s: str, keep_newlines: bool = False) -> str:
    s = s.replace(" ", "␣").replace("\t", "⇥").replace("\r", "␍")
    return s.replace("\n", "↵\n" if keep_newlines else "↵")


def tokenizer_file(root: Path) -> Path | None:
    """models/target/tokenizer.json, or the one in the folder draftlab_target.json points at."""
    tdir = Path(root) / TARGET
    if (tdir / "tokenizer.json").exists():
        return tdir / "tokenizer.json"
    meta = tdir / "draftlab_target.json"
    if meta.exists():
        try:
            path = json.loads(meta.read_text()).get("path")
        except (OSError, ValueError):
            path = None
        if path and (Path(path) / "tokenizer.json").exists():
            return Path(path) / "tokenizer.json"
    return None


def load_tokenizer(root: Path) -> TokenText:
    """The target's tokenizer via the light `tokenizers` library (no model, no transformers import).
    Without one, ids are shown as #id and `source` says which stage writes it."""
    f = tokenizer_file(root)
    if f is None:
        return TokenText(None, source=f"no tokenizer in `{TARGET}/`: run `dvc repro prepare_target` (ids shown as #id)")
    try:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(f))
        special = set()
        try:
            cfg = json.loads(f.read_text())
            special = {int(a["id"]) for a in cfg.get("added_tokens", []) if a.get("special")}
        except (OSError, ValueError, KeyError):
            pass
        return TokenText(tok, special, str(f))
    except Exception as e:  # noqa: BLE001
        return TokenText(None, source=f"tokenizer `{f}` could not be loaded ({e}); ids shown as #id")
