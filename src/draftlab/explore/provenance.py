"""Where the explorer's data comes from, read-only: the data's age and the repository's git revision
(`git rev-parse / log / status`), which stage writes a file (the table `draftlab.paths`, for the messages naming the stage
to run), and other revisions — a git commit or DVC experiment's benchmark detail (`git show`) and the list of
experiments (`dvc exp show --json`, else git's refs/exps). Nothing here writes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from draftlab import paths
from draftlab.explore.loaders import BENCH_JSON, LEGACY_BENCH_JSON, Missing, load_benchmark, parse_benchmark


# ---------------------------------------------------------------- provenance: the data's age and git revision
def git(root: Path, *args: str, timeout: float = 10.0) -> str | None:
    """stdout of a read-only git command in root (None when git or the repository is missing)."""
    try:
        r = subprocess.run(["git", "-C", str(root), *args], capture_output=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.decode("utf-8", "replace") if r.returncode == 0 else None


def age_text(seconds: float) -> str:
    for unit, n in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= n:
            return f"{seconds / n:.1f} {unit}" if unit != "min" else f"{seconds / n:.0f} {unit}"
    return f"{seconds:.0f} s"


RECORDED_KEYS = ("created", "finished", "written", "started")  # a time the benchmark records (top level or setup)


def recorded_time(root: Path, rels) -> tuple[float, str] | None:
    """When the results were made, as the results themselves record it: a `created` / `finished` / `written` /
    `started` field (ISO text or seconds since the epoch) at the top of a JSON file among `rels` or in its `setup`.
    (epoch seconds, "field `setup.created` of results/benchmark.json"), or None when no file records one (the
    committed `cpu` run does not)."""
    from datetime import datetime

    for rel in rels:
        if not str(rel).endswith(".json"):
            continue
        try:
            d = json.loads((Path(root) / rel).read_text())
        except (OSError, ValueError, UnicodeDecodeError):
            continue
        if not isinstance(d, dict):
            continue
        for where, block in (("", d), ("setup.", d.get("setup") if isinstance(d.get("setup"), dict) else {})):
            for k in RECORDED_KEYS:
                v = block.get(k)
                try:
                    t = float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else \
                        datetime.fromisoformat(str(v).replace("Z", "+00:00")).timestamp() if isinstance(v, str) else None
                except ValueError:
                    t = None
                if t:
                    return t, f"`{where}{k}` recorded in `{rel}`"
    return None


def provenance(root: Path, rels: tuple[str, ...] | list[str], now: float | None = None) -> dict:
    """Where the shown data comes from: the newest of `rels` under root (its path, modification time, age),
    when the results were made (`made`: a time the results record, else — for files git has unchanged — the
    commit that last touched them, else the file time of a local run), the repository's HEAD (short sha, branch),
    the last commit that touched those files and whether they differ from it (written by a run since, or edited)."""
    root = Path(root)
    now = now or time.time()
    present = [(r, (root / r).stat().st_mtime) for r in rels if (root / r).exists()]
    out: dict[str, Any] = {"files": [r for r, _ in present]}
    if present:
        newest, mt = max(present, key=lambda x: x[1])
        out.update(newest=newest, mtime=mt, age_s=max(0.0, now - mt))
    rec = recorded_time(root, [r for r, _ in present])
    if rec:
        out["made"] = {"time": rec[0], "age_s": max(0.0, now - rec[0]), "source": rec[1]}
    head = git(root, "rev-parse", "--short", "HEAD")
    if head is None:
        out["git"] = None
        if present and not rec:
            out["made"] = {"time": out["mtime"], "age_s": out["age_s"], "source": "file time",
                           "file_time": True}
        return out
    paths = [r for r, _ in present] or list(rels)
    branch = (git(root, "rev-parse", "--abbrev-ref", "HEAD") or "").strip()
    last = (git(root, "log", "-1", "--format=%h %cs", "--", *paths) or "").strip()
    status = (git(root, "status", "--porcelain", "--", *paths) or "").strip()
    out["git"] = {"head": head.strip(), "branch": branch, "last_commit": last or None,
                  "modified": bool(status), "untracked": status.startswith("??") if status else False}
    if present and not rec:
        ct = (git(root, "log", "-1", "--format=%ct %h", "--", *paths) or "").split()
        if ct and not status:  # the files are as committed: their times are when git wrote them (a checkout)
            t = float(ct[0])
            out["made"] = {"time": t, "age_s": max(0.0, now - t), "source": f"commit {ct[1]}", "committed": True}
        else:  # written (or edited) here since the last commit: the file time is the run's
            out["made"] = {"time": out["mtime"], "age_s": out["age_s"], "source": "file time", "file_time": True}
    return out


def provenance_text(p: dict) -> str:
    """One line: 'results made 2.1 h ago (2026-12-04 10:20, `setup.created` recorded in results/benchmark.json) ·
    git abc1234 (main) · …'. Without a recorded time: the commit that last touched the files (their file times are
    only when this checkout wrote them), or — for files a run rewrote here — the file time, said to be one."""
    parts = []
    made = p.get("made")
    if p.get("newest") and made:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(made["time"]))
        if made.get("committed"):
            parts.append(f"results committed {age_text(made['age_s'])} ago ({when}, {made['source']}; no time recorded "
                         f"in the results, and the file times are when this checkout was written)")
        elif made.get("file_time"):
            parts.append(f"data written {age_text(made['age_s'])} ago ({when}, file modification time of "
                         f"`{p['newest']}`: no time recorded in the results)")
        else:
            parts.append(f"results made {age_text(made['age_s'])} ago ({when}, {made['source']})")
    elif p.get("newest"):
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(p["mtime"]))
        parts.append(f"data written {age_text(p['age_s'])} ago ({when}, file time of `{p['newest']}`)")
    else:
        parts.append("no data files yet")
    g = p.get("git")
    if g is None:
        parts.append("not a git repository (no revision)")
    else:
        parts.append(f"git HEAD {g['head']}" + (f" ({g['branch']})" if g["branch"] and g["branch"] != "HEAD" else ""))
        if g["last_commit"]:
            parts.append(f"files last committed in {g['last_commit']}")
        if g["modified"]:
            parts.append("the files differ from that commit (a newer run, not committed)"
                         if not g["untracked"] else "the files are not committed")
    return " · ".join(parts)


# ---------------------------------------------------------------- which stage writes a file (dvc.yaml)
def producer(root: Path, rel: str, default: str = "benchmark") -> str:
    """The stage that writes `rel` (a declared output or a file inside one; the table `draftlab.paths`), else
    `default`."""
    out = paths.producer(rel)
    return out.stage if out is not None else default


# ---------------------------------------------------------------- other revisions: git revisions and DVC experiments
def read_at(root: Path, rel: str, rev: str | None = None) -> str | None:
    """The text of `rel` in the working tree (rev None) or at a git revision / DVC experiment commit."""
    if rev is None:
        try:
            return (Path(root) / rel).read_text()
        except (OSError, UnicodeDecodeError):
            return None
    return git(root, "show", f"{rev}:{rel}", timeout=30)


def load_benchmark_at(root: Path, rev: str | None) -> dict | Missing:
    """The benchmark detail of the working tree (rev None) or of a revision: results/benchmark.json there,
    else the older metrics/benchmark.json (which held the detail before the split)."""
    if rev is None:
        return load_benchmark(root)
    for rel in (BENCH_JSON, LEGACY_BENCH_JSON):
        text = read_at(root, rel, rev)
        if text is not None:
            return parse_benchmark(text, rel, f"revision {rev}")
    return Missing(f"Revision `{rev}` has no `{BENCH_JSON}` (nor `{LEGACY_BENCH_JSON}`) in {root}: is it a commit or "
                   f"DVC experiment of this repository that ran the benchmark?")


def dvc_bin() -> str:
    b = Path(sys.executable).parent / "dvc"
    return str(b) if b.exists() else "dvc"


def experiments(root: Path, run: Callable[..., Any] = subprocess.run) -> list[dict] | Missing:
    """[{name, rev, baseline, kind}] of the repository's commits and DVC experiments, from `dvc exp show --json`
    (baselines: the branch / commit rows; experiments: their `revs`), else from git's refs/exps."""
    rows: list[dict] = []
    try:
        r = run([dvc_bin(), "exp", "show", "--json"], cwd=str(root), capture_output=True, timeout=120,
                env={**os.environ, "DVC_NO_ANALYTICS": "1"})
        data = json.loads(r.stdout or b"null") if r.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError):
        data = None
    if isinstance(data, list):
        for base in data:
            if base.get("rev") == "workspace":
                continue
            brev = base.get("rev")
            rows.append({"name": base.get("name") or str(brev)[:7], "rev": brev, "baseline": brev, "kind": "commit"})
            for exp in base.get("experiments") or []:
                for e in exp.get("revs") or []:
                    rows.append({"name": e.get("name") or exp.get("name") or str(e.get("rev"))[:7], "rev": e.get("rev"),
                                 "baseline": brev, "kind": "experiment"})
        return rows
    refs = git(root, "for-each-ref", "--format=%(objectname) %(refname)", "refs/exps")
    if refs is None:
        return Missing(f"{root} is not a git repository with DVC experiments (`dvc exp show` and `git for-each-ref` "
                       f"found nothing); compare two folders instead.")
    for line in refs.splitlines():
        sha, ref = line.split(" ", 1)
        if "/exec/" in ref:
            continue
        parts = ref.split("/")  # refs/exps/<2 chars>/<rest of the baseline sha>/<name>
        rows.append({"name": parts[-1], "rev": sha, "baseline": "".join(parts[2:-1]), "kind": "experiment"})
    return rows
