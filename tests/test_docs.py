"""The text a user reads stands alone: README.md, docs/ (but the dated history in docs/decisions.md and
docs/results.md), the `draftlab` CLI's help and the explorer's pages (app/*.py) name no file a user does not
have (the project's internal specification and environment notes), no numbered issue and no work session (the
dated history cites too, but only by a section's heading and date: no issue number, no specification);
the README links the two pages that replace them (docs/algorithms.md, docs/install.md) and indexes every page
of docs/; every repository path that README.md and docs/*.md name in backticks exists (the rules are above
path_hits). Each failure lists every hit as file:line."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
HISTORY = {"decisions.md", "results.md"}  # dated history: may say which issue or session a change came from
PATTERNS = {
    "an issue number": re.compile(r"\b[Ii]ssues?\s*#?\d+"),
    "the internal spec / environment notes": re.compile(r"\bSPEC\b|ENVIRONMENT"),
    "a numbered work session": re.compile(r"\b(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|"
                                          r"eleventh|twelfth|thirteenth|fourteenth|fifteenth|\d+(st|nd|rd|th))\s+"
                                          r"sessions?\b", re.I),
}


def user_files() -> list[Path]:
    docs = sorted(p for p in (ROOT / "docs").glob("*.md") if p.name not in HISTORY)
    explorer = [*(ROOT / "app").glob("*.py"), *(ROOT / "src" / "draftlab" / "explore").glob("*.py")]  # what it shows
    return [README, *docs, *sorted(explorer)]


def hits(name: str, text: str) -> list[str]:
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        for what, rx in PATTERNS.items():
            m = rx.search(line)
            if m:
                out.append(f"{name}:{i}: {what} ({m.group(0)!r}): {line.strip()[:160]}")
    return out


@pytest.mark.parametrize("path", user_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_internal_references(path: Path):
    found = hits(str(path.relative_to(ROOT)), path.read_text(encoding="utf-8"))
    assert not found, "text a user reads refers to what they cannot see:\n" + "\n".join(found)


CITATIONS = {  # how the markdown pages, the dated history included, may not cite a decision or a result
    "an issue number": PATTERNS["an issue number"],
    "a bare issue reference": re.compile(r"(?<![\w&/#])#\d+\b"),
    "the internal spec / environment notes": PATTERNS["the internal spec / environment notes"],
}


@pytest.mark.parametrize("path", [README, *sorted((ROOT / "docs").glob("*.md"))], ids=lambda p: str(p.relative_to(ROOT)))
def test_pages_cite_decisions_by_heading_and_date(path: Path):
    """docs/decisions.md and docs/results.md too: a citation names the section by its heading and date,
    (decisions: "The toy world's settings", 2026-12-05), never an issue number or the internal specification."""
    found = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        for what, rx in CITATIONS.items():
            m = rx.search(line)
            if m:
                found.append(f"{path.relative_to(ROOT)}:{i}: {what} ({m.group(0)!r}): {line.strip()[:160]}")
    assert not found, "cite the decision by its heading and date instead:\n" + "\n".join(found)


def cli_helps() -> dict[str, str]:
    """The help of `draftlab` and of every subcommand, rendered without line wrapping."""
    import argparse

    from draftlab import cli

    ap = cli.parser()
    helps = {"draftlab --help": ap}
    for action in ap._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps.update({f"draftlab {name} --help": sub for name, sub in action.choices.items()})
    return helps


def test_cli_help_has_no_internal_references(monkeypatch):
    monkeypatch.setenv("COLUMNS", "2000")  # one line per option: a reference is never split by the wrapping
    helps = cli_helps()
    assert len(helps) > 1, "the CLI parser has no subcommands?"
    found = [h for name, p in helps.items() for h in hits(name, p.format_help())]
    assert not found, "the CLI's help refers to what a user cannot see:\n" + "\n".join(found)


def test_readme_links_the_standalone_pages():
    text = README.read_text(encoding="utf-8")
    missing = [p for p in ("docs/algorithms.md", "docs/install.md") if f"]({p})" not in text]
    assert not missing, f"README.md does not link {', '.join(missing)}"
    for p in ("algorithms.md", "install.md"):
        assert (ROOT / "docs" / p).is_file(), f"docs/{p} is missing"


def test_readme_indexes_every_docs_page():
    text = README.read_text(encoding="utf-8")
    missing = [p.name for p in sorted((ROOT / "docs").glob("*.md")) if f"](docs/{p.name})" not in text]
    assert not missing, ("README.md's index of docs/ lacks " + ", ".join(missing) +
                         ": add one line per page (| [name.md](docs/name.md) | what it holds |)")


def test_the_patterns_catch_what_they_should():
    bad = ["see SPEC §2.1", "ENVIRONMENT.md says", "issue 20 item 4", "(issue #42)", "Issue 17's comparison",
           "the twelfth session", "the 13th session"]
    good = ["SPEC_VENV", "a browser session", "a session's first load", "specification", "issues of the loader"]
    assert all(hits("x", t) for t in bad)
    assert not any(hits("x", t) for t in good)
    bare = CITATIONS["a bare issue reference"]
    assert all(bare.search(t) for t in ["see #12", "(#7)", "fixed in #120."])
    assert not any(bare.search(t) for t in ["&#8203;", "#/experiments/1/runs", "a ## heading", "C#5", "url/#3"])


# ---- Every repository path the docs name exists ----------------------------------------------------------------------
# What counts as a repository path, in README.md and docs/*.md:
# - only inline code spans (`...`) outside fenced blocks; each whitespace-separated token of a span that holds a "/" is
#   a candidate, with surrounding quotes and punctuation, a leading "./" and a trailing ":<line>" stripped;
# - a candidate is a repository path when its first component is a top-level entry of the repository or an output
#   root of the paths table (src/draftlab/paths.py: data/, models/, checkpoints/, ...), or, for a `.py` file, a
#   sub-package of src/draftlab (`decoding/verify.py` names src/draftlab/decoding/verify.py). Everything else with a
#   slash is not: ratios and lists (`1/14/27/29`, `draft/verify`), `owner/name` repositories and model ids
#   (`Qwen/Qwen3-8B`), conf group names (`benchmark/arms`), URLs (`://`), absolute, home, parent or variable paths
#   (`/usr/bin/chromium`, `~/...`, `../..`, `$OUT/...`), options, and spans that quote a message (`error ...`);
# - a repository path must exist, or lie inside an output a stage declares (`draftlab.paths.producer`), or under a
#   folder a run creates and git ignores (the anchored entries of .gitignore: `.smoke/`, `gpu-pack/`,
#   `worlds/*/data/`, ...); under worlds/<name>/ the rest of the path is judged the same way (a world is its own
#   pipeline). Under src/, tools/, tests/, app/, conf/, docs/, worlds/ and examples/ only existing files
#   count (or a world's outputs);
# - a placeholder (`<stage>`, `{t0,t1}`, `...`) needs the folder before it to exist; a glob under those strict roots
#   must match a file;
# - a path followed by "(then" names what existed when a dated entry was written, and is exempt.
import fnmatch  # noqa: E402
import glob  # noqa: E402

STRICT_ROOTS = {"src", "tools", "tests", "app", "conf", "docs", "worlds", "examples"}
FENCE = re.compile(r"^\s*(```|~~~)")
SPAN = re.compile(r"`([^`\n]+)`")
PLACEHOLDER = re.compile(r"[<>{}*?\[\]|…]|\.\.\.")
MESSAGE = re.compile(r"^(error|ok:|warning)\b")


def _ignored_roots() -> list[str]:
    lines = (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    return [line.strip().strip("/") for line in lines if line.startswith("/")]


def _is_output(path: str) -> bool:
    from draftlab import paths

    path = path.rstrip("/")
    if not path:
        return False
    if paths.producer(path) is not None:
        return True
    return any(fnmatch.fnmatch(path, g) or fnmatch.fnmatch(path, g + "/*") for g in _ignored_roots())


def _exists(path: str, strict: bool) -> bool:
    if (ROOT / path).exists():
        return True
    parts = path.split("/")
    if parts[0] == "worlds" and len(parts) > 2 and _is_output("/".join(parts[2:])):
        return True
    return not strict and _is_output(path)


def path_hits(name: str, text: str) -> list[str]:
    from draftlab import paths

    top = {p.name for p in ROOT.iterdir()} | {o.path.split("/")[0] for o in paths.OUTPUTS}
    packages = {p.name for p in (ROOT / "src" / "draftlab").iterdir() if (p / "__init__.py").is_file()}
    out, fenced = [], False
    for i, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        for m in SPAN.finditer(line):
            span = m.group(1).strip()
            if MESSAGE.match(span):
                continue
            tokens = span.split()
            for j, raw in enumerate(tokens):
                tok = re.sub(r":\d+:?$", "", raw.strip("'\",;()"))
                if "/" not in tok or "://" in tok or tok.startswith(("/", "~", "$", "..", "-")):
                    continue
                tok = tok[2:] if tok.startswith("./") else tok
                first = tok.split("/")[0]
                module = first in packages and tok.endswith(".py") and first not in STRICT_ROOTS
                if first not in top and not module:
                    continue
                if j == len(tokens) - 1 and line[m.end():].lstrip().startswith("(then"):
                    continue
                strict = first in STRICT_ROOTS
                if module and not (ROOT / tok).exists():
                    tok = f"src/draftlab/{tok}"
                    strict = True
                if PLACEHOLDER.search(tok):
                    if strict and "*" in tok and not re.search(r"[<>{}]", tok):
                        ok = bool(glob.glob(str(ROOT / tok)))
                    else:
                        head = PLACEHOLDER.split(tok)[0]
                        head = head[: head.rfind("/") + 1]
                        ok = not head or (ROOT / head).is_dir() or _is_output(head)
                else:
                    ok = _exists(tok, strict)
                if not ok:
                    out.append(f"{name}:{i}: `{tok}` does not exist (in `{span[:100]}`)")
    return out


@pytest.mark.parametrize("path", [README, *sorted((ROOT / "docs").glob("*.md"))], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_repository_path_the_docs_name_exists(path: Path):
    found = path_hits(str(path.relative_to(ROOT)), path.read_text(encoding="utf-8"))
    assert not found, ("a page names a path that is not in the repository (fix it, or mark a path of a dated entry "
                       "'(then)'):\n" + "\n".join(found))


def test_the_path_check_catches_what_it_should():
    bad = ["`tools/no_such_tool.py`", "`src/draftlab/nowhere.py`", "`docs/missing.md`", "`conf/profile/nope.yaml`",
           "`decoding/no_such_module.py`", "`metrics/no_such_metric.json`", "`python tools/gone.py --dry`",
           "`tests/*.nothing`", "`examples/<name>/x.jsonl` is `src/nowhere/<x>.py`", "`tools/gone.py` (later)"]
    good = ["`tools/gpu_check.py`", "`python3 tools/gpu_check.py --out-dir OUT`", "`decoding/verify.py`",
            "`tests/<name>.py`", "`metrics/benchmark/<arm>.json`", "`data/references.parquet`",
            "`models/drafter/pretrained`", "`models/corrector/dcoco/corrector`", "`.smoke/mlruns.db`",
            "`worlds/toy/data/benchmark_rounds.parquet`", "`tools/gone.py` (then)", "`tools/gone.py` (then; now x)",
            "`Qwen/Qwen3-8B`", "`1/14/27/29`", "`http://127.0.0.1:5000/x`", "`vllm-project/speculators`",
            "`benchmark/arms`", "`$OUT/gpu.md`", "`../../tools/toy_world.py`", "`/usr/bin/chromium`",
            "`error [check_params]: examples/mine.jsonl:7: bad`", "`tests/*.py`", "`docs/gpu.md:12`",
            "```\npython tools/not_in_a_span.py\n```"]
    assert all(path_hits("x", t) for t in bad), [t for t in bad if not path_hits("x", t)]
    assert not any(path_hits("x", t) for t in good), [h for t in good for h in path_hits("x", t)]
