"""The docs hold their current figures in generated blocks: every block equals what `draftlab verdicts` prints from
the committed files, and no bracketed interval sits outside a block above a doc's history line."""
from __future__ import annotations

from pathlib import Path

import pytest

from draftlab.errors import DraftlabError
from draftlab.verdicts import blocks as B
from draftlab.verdicts.command import main

ROOT = Path(__file__).resolve().parents[2]


def test_every_docs_block_equals_what_the_command_prints_from_committed_files():
    problems = B.check(ROOT)
    assert problems == [], "\n".join(problems)
    assert sum(len(B.blocks((ROOT / d).read_text())) for d in B.DOCS) >= 8


def test_a_changed_figure_or_a_stray_interval_is_caught(tmp_path: Path, capsys):
    (tmp_path / "results").mkdir()
    for f in ("results/benchmark.json",):  # a frozen run's detail (the root's changes with every cpu run)
        (tmp_path / f).write_text((ROOT / "runs" / "cpu-2026-12-06" / f).read_text())
    block = "<!-- verdicts: arms run=. t=0 arms=ar,dflash -->\n<!-- /verdicts -->\n"
    doc = tmp_path / "README.md"
    doc.write_text("# x\n\n" + block + "\nprose 1.13 [1.12, 1.14] here\n\n<!-- history -->\n\nold 0.5 [0.1, 0.9]\n")
    assert main(["--root", str(tmp_path), "--write-docs"]) == 0
    text = doc.read_text()
    assert "| `dflash` | 1.13 [1.12, 1.14]" in text
    problems = B.check(tmp_path)
    assert len(problems) == 1 and "README.md:" in problems[0] and "[1.12, 1.14] outside a generated block" in problems[0]
    doc.write_text(text.replace("prose 1.13 [1.12, 1.14] here", "prose").replace("| 1.13 [1.12, 1.14]", "| 1.23 [1.12, 1.14]"))
    problems = B.check(tmp_path)
    assert len(problems) == 1 and "differs from what `draftlab verdicts` prints" in problems[0]
    assert main(["--root", str(tmp_path), "--check"]) == 1
    assert "differs" in capsys.readouterr().err
    doc.write_text("<!-- verdicts: arms run=. -->\nno end\n")
    with pytest.raises(DraftlabError, match="not closed"):
        B.check(tmp_path)
    assert main(["--root", str(tmp_path), "--check"]) == 2 and "not closed" in capsys.readouterr().err


def test_printing_writes_nothing(tmp_path: Path, capsys):
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "benchmark.json").write_text((ROOT / "results" / "benchmark.json").read_text())
    doc = tmp_path / "README.md"
    doc.write_text("<!-- verdicts: suites run=. t=0 arms=ar,pld -->\n<!-- /verdicts -->\n")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    assert main(["--root", str(tmp_path)]) == 0
    assert "| `pld` |" in capsys.readouterr().out and doc.read_text().count("\n") == 2
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
