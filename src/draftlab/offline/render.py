"""Folding a fetched results bundle into this repository: results/<name>/ (the reports, bundle.json, plots/*.csv) and
metrics/<name>/ (the headline metrics files), where <name> is the bundle's profile (+ "-dry" for a rehearsal). The
`cpu` run's results/*.json and metrics/*.json are never written. Refused in one line: a bundle over the limits or
not matching its own file list (`draftlab.offline.bundle.read`), a bundle of another profile than the one asked
for, or of another commit than HEAD unless `any_commit`.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from draftlab.errors import DraftlabError
from draftlab.io import atomic_write
from draftlab.offline import bundle
from draftlab import paths
from draftlab.checks.common import git_sha

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def destination(rel: str, name: str) -> str:
    """Where a bundle's file lands: results/X -> results/<name>/X, metrics/X -> metrics/<name>/X,
    plots/X -> results/<name>/plots/X."""
    top, _, rest = rel.partition("/")
    if ".." in Path(rel).parts or not rest or top not in (paths.RESULTS, paths.METRICS, paths.PLOTS_DIR):
        raise DraftlabError(f"bundle entry {rel!r} is not a report path (results/, metrics/ or plots/); not rendered")
    return f"{paths.RESULTS}/{name}/plots/{rest}" if top == paths.PLOTS_DIR else f"{top}/{name}/{rest}"


def render(folder: Path, root: Path, profile: str = "gpu-small", any_commit: bool = False, head: str | None = None) -> str:
    """Write the bundle's files under `root`; one summary line. `head`: the commit to match (default: git HEAD)."""
    doc, results, plots = bundle.read(folder)
    got = doc.get("profile")
    if got != profile:
        raise DraftlabError(f"the bundle is of profile {got!r}, not {profile!r}; pass --profile {got} to render it")
    if not _NAME.match(str(got)):
        raise DraftlabError(f"the bundle's profile name {got!r} is not a plain name; not rendered")
    if head is None:
        head = git_sha(root) or ""
    commit = str(doc.get("commit") or "")
    same = bool(commit) and bool(head) and (head.startswith(commit) or commit.startswith(head))
    if not same and not any_commit:
        raise DraftlabError(f"the bundle is of commit {commit[:12] or '?'}, not HEAD {head[:12] or '?'}; check out that "
                            f"commit, or pass --any-commit to render it here anyway")
    name = got + ("-dry" if doc.get("mode") == "dry" else "")
    files: dict[str, str] = {}
    for rel, rep in results.items():
        files[destination(rel, name)] = json.dumps(rep, indent=2, sort_keys=True) + "\n"
    for rel, rep in (doc.get("headlines") or {}).items():
        files[destination(rel, name)] = json.dumps(rep, indent=2, sort_keys=True) + "\n"
    for rel, text in plots.items():
        files[destination(rel, name)] = text
    meta = {k: v for k, v in doc.items() if k not in ("headlines", "files")}
    files[f"results/{name}/bundle.json"] = json.dumps(meta, indent=2) + "\n"
    for rel, text in files.items():
        atomic_write(root / rel, lambda p, t=text: p.write_text(t))
    heads = doc.get("headlines") or {}
    tau = (heads.get(bundle.HEADLINE_FIRST) or {}).get("sim_tau")
    return (f"rendered {len(files)} files into results/{name}/ and metrics/{name}/: {len(doc.get('finished') or [])} "
            f"stages finished ({', '.join(doc.get('finished') or []) or 'none'})"
            + (f", failed {doc['failed']}" if doc.get("failed") else "")
            + (f"; plain drafter sim τ {tau:.3f}" if isinstance(tau, (int, float)) else ""))
