"""No corrector family's name is quoted in draftlab outside its own module (issue "A method in one place"): every
string constant of src/draftlab that is a family's name or starts with one (`"dcoco"`, `"lilicorr-nopair"`) is found
with `ast`, outside the family modules themselves. The places that still name one are listed here, each with why, so
a new one fails this test until it reads the family records instead (or is listed with its reason)."""
from __future__ import annotations

import ast
from pathlib import Path

from draftlab.corrector.families import MODULES, records

SRC = Path(__file__).resolve().parents[2] / "src" / "draftlab"
# file -> why it still names a family: each is an instrument that measures named families at fixed sizes (the
# accelerator check's arms and models, the dispatch count of DCOCO's round), not a choice the records could make
STILL = {
    "checks/concurrency.py": "the accelerator check's fixed arms (dflash, dcoco, dspark, domino) at fixed sizes",
    "checks/models.py": "the accelerator check builds those families' correctors at fixed sizes",
    "measure/dispatch_count.py": "the instrument that counts DCOCO's round dispatches (the plan's dcoco_round)",
}


def quoted_family_names() -> dict[str, set[str]]:
    names = tuple(records())
    own = {str(SRC / (m[len("draftlab."):].replace(".", "/") + ".py")) for m in MODULES}
    found: dict[str, set[str]] = {}
    for f in sorted(SRC.rglob("*.py")):
        if str(f) in own:
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                v = node.value
                if any(v == n or v.startswith(n + "-") for n in names):
                    found.setdefault(str(f.relative_to(SRC)), set()).add(v)
    return found


def test_no_family_name_is_quoted_outside_its_module():
    found = quoted_family_names()
    new = {f: sorted(v) for f, v in found.items() if f not in STILL}
    assert not new, f"family names quoted outside their modules (read the family records instead): {new}"
    assert set(STILL) <= set(found), f"listed but no longer naming a family (drop them from STILL): " \
                                     f"{sorted(set(STILL) - set(found))}"
