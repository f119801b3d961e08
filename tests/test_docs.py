"""The text a user reads stands alone: README.md, docs/ (but the dated history in docs/decisions.md and
docs/results.md), the `draftlab` CLI's help and the explorer's pages (app/*.py) name no file a user does not
have (the project's internal specification and environment notes), no numbered issue and no work session;
the README links the two pages that replace them (docs/algorithms.md, docs/install.md) and indexes every page
of docs/. Each failure lists every hit as file:line."""
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
    return [README, *docs, *sorted((ROOT / "app").glob("*.py"))]


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
