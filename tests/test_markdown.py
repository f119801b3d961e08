"""draftlab.markdown: the one routine that writes Markdown tables; no table is built by hand elsewhere."""
from __future__ import annotations

import re

import pytest

from draftlab.markdown import markdown_table


def test_a_table_is_its_header_separator_and_rows():
    assert markdown_table(["arm", "τ"], [["dflash", 3.5], ["ar", None]]) == [
        "| arm | τ |", "|---|---|", "| dflash | 3.5 |", "| ar | None |"]
    assert markdown_table(["a", "b", "c"], [[1, "", 2]], "lrc") == ["| a | b | c |", "|---|---:|:---:|", "| 1 | | 2 |"]
    assert markdown_table(["a"], []) == ["| a |", "|---|"]
    with pytest.raises(ValueError, match="align 'lr' has 2 columns, the header 1"):
        markdown_table(["a"], [], "lr")


def test_no_table_is_built_by_hand(root):
    """A separator line written out (`|---|`) anywhere in src/, tools/ or app/ code but draftlab/markdown.py is a
    hand-built table (docstrings may show one)."""
    sep = re.compile(r"""["']\|-{3}""")
    files = [f for d in ("src", "tools", "app") for f in (root / d).rglob("*.py") if f.name != "markdown.py"]
    hits = [f"{f.relative_to(root)}:{i}" for f in files for i, line in enumerate(f.read_text().splitlines(), 1)
            if sep.search(line)]
    assert not hits, hits
