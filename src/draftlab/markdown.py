"""Markdown tables: the one routine that writes them (the accelerator check's docs/gpu.md block, the plan's
calibration table). Plain Python, nothing imported."""
from __future__ import annotations

from typing import Iterable, Sequence

RULES = {"": "---", "l": "---", "r": "---:", "c": ":---:"}  # a column's separator cell by alignment


def markdown_table(header: Sequence[object], rows: Iterable[Sequence[object]], align: str | Sequence[str] | None = None
                   ) -> list[str]:
    """The table's lines: the header, the separator (`---` a column; `align` one letter per column, l / r / c, gives
    `---` / `---:` / `:---:`) and one line per row. Each cell is written as an f-string writes it (`None` -> "None":
    format it first) between `| ` and ` |`; an empty cell is `| |`."""
    header = list(header)
    align = list(align or "l" * len(header))
    if len(align) != len(header):
        raise ValueError(f"align {''.join(align)!r} has {len(align)} columns, the header {len(header)}")
    return [_line(header), "|" + "|".join(RULES[a] for a in align) + "|", *(_line(r) for r in rows)]


def _line(cells: Sequence[object]) -> str:
    texts = [f"{c}" for c in cells]
    return "|" + "|".join(f" {t} " if t else " " for t in texts) + "|"
