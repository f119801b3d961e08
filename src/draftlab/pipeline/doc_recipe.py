"""A recipe the docs give, run as written: the fenced block after a `<!-- recipe: NAME -->` line of a markdown page,
its command lines joined into one bash script (`set -euo pipefail`: a step that fails stops it). The smoke runs the toy
world's "Trying a new corrector here" recipe this way in its scratch copy (tools/smoke.py), so a step the page leaves
unsaid, or a command that no longer works, fails the suite. `replace` swaps text the scratch copy must differ in (the
smoke's world has no finished replicate: its reading starts from the base's own drafter, `--seed 0`)."""
from __future__ import annotations

import subprocess
from pathlib import Path

from draftlab.errors import DraftlabError

MARK = "<!-- recipe: "


def recipe(doc: Path, name: str) -> list[str]:
    """The command lines of the recipe `name` in `doc` (comments and blank lines kept out; a trailing comment cut)."""
    lines = Path(doc).read_text().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(MARK + name)), None)
    if start is None:
        raise DraftlabError(f"{doc} has no recipe {name!r} (a line starting '{MARK}{name}')")
    try:
        first = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("```"))
        end = next(i for i in range(first + 1, len(lines)) if lines[i].startswith("```"))
    except StopIteration:
        raise DraftlabError(f"{doc}: the recipe {name!r} has no fenced block after its mark") from None
    out = []
    for line in lines[first + 1:end]:
        code = line.split(" # ", 1)[0].rstrip() if not line.lstrip().startswith("#") else ""
        if code:
            out.append(code)
    return out


def run_recipe(doc: Path, name: str, cwd: Path, env: dict, replace: dict[str, str] | None = None,
               timeout: float = 900) -> subprocess.CompletedProcess:
    """Run the recipe's lines in one bash process in `cwd` -> the finished process (output captured)."""
    script = "\n".join(recipe(doc, name))
    for old, new in (replace or {}).items():
        if old not in script:
            raise DraftlabError(f"{doc}: the recipe {name!r} no longer holds {old!r}; update the caller's replacements")
        script = script.replace(old, new)
    return subprocess.run(["bash", "-c", "set -euo pipefail\n" + script], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
