"""Folding a fetched results bundle into this repository: results/<name>/ (the reports, bundle.json, plots/*.csv) and
metrics/<name>/ (the headline metrics files), where <name> is the bundle's profile (+ "-dry" for a rehearsal). The
`cpu` run's results/*.json and metrics/*.json are never written. Refused in one line: a bundle over the limits or
not matching its own file list (`draftlab.offline.bundle.read`), a bundle of another profile than the one asked
for, or of another commit than HEAD, unless that commit is the one named (`commit`: `--render OUT --commit SHA`, the
commit the pack was made at, for a bundle rendered after later commits) or `any_commit`.
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
    return f"{paths.rendered_results(name)}/{paths.PLOTS_DIR}/{rest}" if top == paths.PLOTS_DIR else f"{top}/{name}/{rest}"


def _same(a: str, b: str) -> bool:
    """Two commit names of the same commit (one may be abbreviated)."""
    return bool(a) and bool(b) and (a.startswith(b) or b.startswith(a))


def render(folder: Path, root: Path, profile: str = "gpu-small", any_commit: bool = False, head: str | None = None,
           commit: str | None = None) -> str:
    """Write the bundle's files under `root`; one summary line. The bundle's commit must be `commit` when given (the
    commit its pack was made at: `--commit SHA`, at least 7 hex digits), else `head` (default: git HEAD)."""
    doc, results, plots = bundle.read(folder)
    got = doc.get("profile")
    if got != profile:
        raise DraftlabError(f"the bundle is of profile {got!r}, not {profile!r}; pass --profile {got} to render it")
    if not _NAME.match(str(got)):
        raise DraftlabError(f"the bundle's profile name {got!r} is not a plain name; not rendered")
    got_commit = str(doc.get("commit") or "")
    if commit:
        if not re.fullmatch(r"[0-9a-fA-F]{7,40}", commit):
            raise DraftlabError(f"--commit {commit!r} is not a commit sha (7 to 40 hex digits): pass the one the pack "
                                "was made at (gpu-pack/manifest.json's commit)")
        if not _same(got_commit.lower(), commit.lower()) and not any_commit:
            raise DraftlabError(f"the bundle is of commit {got_commit[:12] or '?'}, not --commit {commit[:12]}: it comes "
                                "from another pack or tree; pass the commit its pack was made at, or --any-commit")
    else:
        if head is None:
            head = git_sha(root) or ""
        if not _same(got_commit, head) and not any_commit:
            raise DraftlabError(f"the bundle is of commit {got_commit[:12] or '?'}, not HEAD {head[:12] or '?'}; if its "
                                f"pack was made at that commit (gpu-pack/manifest.json's commit), pass --commit "
                                f"{got_commit[:12] or 'SHA'}; or check out that commit, or pass --any-commit")
    name = got + ("-dry" if doc.get("mode") == "dry" else "")
    files: dict[str, str] = {}
    for rel, rep in results.items():
        files[destination(rel, name)] = json.dumps(rep, indent=2, sort_keys=True) + "\n"
    for rel, rep in (doc.get("headlines") or {}).items():
        files[destination(rel, name)] = json.dumps(rep, indent=2, sort_keys=True) + "\n"
    for rel, text in plots.items():
        files[destination(rel, name)] = text
    meta = {k: v for k, v in doc.items() if k not in ("headlines", "files")}
    files[f"{paths.rendered_results(name)}/bundle.json"] = json.dumps(meta, indent=2) + "\n"
    for rel, text in files.items():
        atomic_write(root / rel, lambda p, t=text: p.write_text(t))
    heads = doc.get("headlines") or {}
    tau = (heads.get(bundle.HEADLINE_FIRST) or {}).get("sim_tau")
    return (f"rendered {len(files)} files into {paths.rendered_results(name)}/ and {paths.rendered_metrics(name)}/: "
            f"{len(doc.get('finished') or [])} stages finished ({', '.join(doc.get('finished') or []) or 'none'})"
            + (f", failed {doc['failed']}" if doc.get("failed") else "")
            + (f"; plain drafter sim τ {tau:.3f}" if isinstance(tau, (int, float)) else ""))
