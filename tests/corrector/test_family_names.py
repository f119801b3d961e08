"""No corrector family's name is quoted in draftlab outside its own module (issue "A method in one place"): every
string constant of src/draftlab that is a family's name or starts with one (`"dcoco"`, `"lilicorr-nopair"`) is found
with `ast`, outside the family modules themselves. There is no exception: a place that needs a family reads the family
records (`draftlab.corrector.families.records()`, `build_corrector`, a record's settings, rules and contract)."""
from __future__ import annotations

import ast
from pathlib import Path

from draftlab.corrector.families import MODULES, records

SRC = Path(__file__).resolve().parents[2] / "src" / "draftlab"


def quoted_family_names(src: Path = SRC) -> dict[str, set[str]]:
    names = tuple(records())
    own = {src / (m[len("draftlab."):].replace(".", "/") + ".py") for m in MODULES}
    found: dict[str, set[str]] = {}
    for f in sorted(src.rglob("*.py")):
        if f in own:
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                v = node.value
                if any(v == n or v.startswith(n + "-") for n in names):
                    found.setdefault(str(f.relative_to(src)), set()).add(v)
    return found


def test_no_family_name_is_quoted_outside_its_module():
    found = {f: sorted(v) for f, v in quoted_family_names().items()}
    assert not found, f"family names quoted outside their modules (read the family records instead): {found}"


def test_a_quoted_family_name_is_found(tmp_path):
    """The scan has power: a module outside the families that quotes one (a name, a variant of it) is named."""
    name = next(iter(records()))
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "arms.py").write_text(f"ARMS = ({name!r}, {name + '-nopair'!r}, 'dflash')\n")
    (tmp_path / "pkg" / "clean.py").write_text(f"NOTE = 'not {name}'\n")
    assert quoted_family_names(tmp_path) == {"pkg/arms.py": {name, f"{name}-nopair"}}
