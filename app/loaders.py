"""Read-only access to the pipeline's outputs for the explorer (no Streamlit here, so tests and notebooks
can use it too). Nothing in this module writes: missing, partial or corrupt outputs come back as `Missing`
(a message naming the file and the stage that rebuilds it), never as an exception.

Files read (docs/contracts.md): results/benchmark.json (the benchmark's full detail; an older
metrics/benchmark.json with per-suite results is read too), plots/benchmark_*.csv,
data/benchmark_rounds.parquet, models/target/ (tokenizer only), dvc.yaml (which stage writes which file),
and — for the data's age, its git revision and the comparison of two revisions or DVC experiments — `git`
(rev-parse, log, status, show, for-each-ref) and `dvc exp show --json`, both read-only. The MLflow store
(params.yaml `tracking.uri`) is read by `runs_data`.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pandas as pd

ROOT_ENV = "DRAFTLAB_ROOT"
BENCH_JSON = "results/benchmark.json"
LEGACY_BENCH_JSON = "metrics/benchmark.json"  # before the headline/detail split: the detail was a DVC metric
ROUNDS = "data/benchmark_rounds.parquet"
TARGET = "models/target"
PLOTS = {
    "tau_per_slot": "plots/benchmark_tau_per_slot.csv",
    "coverage": "plots/benchmark_coverage.csv",
    "speedup": "plots/benchmark_speedup.csv",
    "concurrency": "plots/benchmark_concurrency.csv",
    "peers": "plots/benchmark_peers.csv",
}
BENCH_FILES = (BENCH_JSON, ROUNDS, *PLOTS.values())
REPRO_BENCH = "run `dvc repro benchmark`"
ROUND_COLUMNS = ("arm", "suite", "temperature", "prompt_id", "round", "accepted", "proposals")


@dataclass(frozen=True)
class Missing:
    """Why something cannot be shown, and what to run. `kind`: absent (not written yet), corrupt (exists but
    unreadable) or empty."""

    message: str
    kind: str = "absent"

    def __bool__(self) -> bool:  # `if result:` is False for a Missing
        return False


def default_root() -> Path:
    return Path(os.environ.get(ROOT_ENV) or ".").expanduser().resolve()


def stamp(path: Path | None) -> tuple[int, int]:
    """Cache key part of a file: (modification time in ns, size); (0, -1) when absent. Both, because a
    rewrite within the file system's time resolution keeps the mtime but rarely the size."""
    try:
        st = Path(path).stat()  # type: ignore[arg-type]
        return st.st_mtime_ns, st.st_size
    except (OSError, TypeError):
        return 0, -1


def corrupt(rel: str, err: BaseException, stage: str) -> Missing:
    """The one-line message for a file that exists but cannot be read."""
    msg = str(err).strip().splitlines()[0][:160] if str(err).strip() else ""
    return Missing(f"`{rel}` is corrupt or unreadable ({type(err).__name__}{': ' + msg if msg else ''}); "
                   f"the `{stage}` stage rebuilds it: run `dvc repro {stage}` (add `-f` if DVC says it is up to date).",
                   "corrupt")


# ---------------------------------------------------------------- benchmark outputs
def benchmark_file(root: Path) -> str:
    """The detail file present under root: results/benchmark.json, else the older metrics/benchmark.json."""
    root = Path(root)
    if not (root / BENCH_JSON).exists() and (root / LEGACY_BENCH_JSON).is_file():
        return LEGACY_BENCH_JSON
    return BENCH_JSON


def parse_benchmark(text: str, rel: str, where: str) -> dict | Missing:
    """The benchmark detail from the text of `rel` (read from `where`, a folder or a revision)."""
    try:
        d = json.loads(text)
    except ValueError as e:
        return corrupt(rel, e, "benchmark")
    if not isinstance(d, dict) or not d.get("suites"):
        return Missing(f"`{rel}` in {where} has no per-suite results yet; {REPRO_BENCH}.")
    return d


def load_benchmark(root: Path) -> dict | Missing:
    rel = benchmark_file(root)
    p = Path(root) / rel
    if not p.exists():
        return Missing(f"No `{BENCH_JSON}` under {root}: {REPRO_BENCH}.")
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        return corrupt(rel, e, "benchmark")
    return parse_benchmark(text, rel, str(root))


def load_plot(root: Path, name: str) -> pd.DataFrame | Missing:
    return read_csv(root, PLOTS[name], "benchmark")


def read_csv(root: Path, rel: str, stage: str) -> pd.DataFrame | Missing:
    """A plot CSV: Missing when absent (which stage writes it), corrupt (which stage rebuilds it) or empty."""
    p = Path(root) / rel
    if not p.exists():
        return Missing(f"No `{rel}` under {root}: run `dvc repro {stage}`.")
    try:
        df = pd.read_csv(p)
    except pd.errors.EmptyDataError:
        return Missing(f"`{rel}` is empty; run `dvc repro {stage}` (add `-f` if DVC says it is up to date).", "corrupt")
    except (OSError, ValueError, UnicodeDecodeError) as e:
        return corrupt(rel, e, stage)
    if len(df.columns) < 2 or any(str(c).startswith("Unnamed:") for c in df.columns):
        return corrupt(rel, ValueError(f"no CSV header (columns {[str(c)[:20] for c in df.columns][:4]})"), stage)
    if df.empty:
        return Missing(f"`{rel}` has no rows (no arm produced these numbers); run `dvc repro {stage}` with a "
                       f"speculative arm.", "empty")
    return df


def load_rounds(root: Path) -> pd.DataFrame | Missing:
    p = Path(root) / ROUNDS
    if not p.exists():
        return Missing(f"No `{ROUNDS}` under {root}: {REPRO_BENCH} (with `benchmark.record_rounds: true`).")
    try:
        df = pd.read_parquet(p)
    except Exception as e:  # noqa: BLE001 - any unreadable file becomes a message
        return corrupt(ROUNDS, e, "benchmark")
    lacking = [c for c in ROUND_COLUMNS if c not in df.columns]
    if lacking:
        return Missing(f"`{ROUNDS}` lacks columns {lacking}; it was written by an older benchmark: {REPRO_BENCH}.")
    if df.empty:
        return Missing(f"`{ROUNDS}` has no rounds (only AR arms ran?); {REPRO_BENCH} with a speculative arm.")
    return df


def benchmark_rows(detail: dict) -> pd.DataFrame:
    """One row per (suite, temperature, arm) of the benchmark detail with the scalar metrics, the round split
    (round_ms / round_share dicts kept as dicts) and each confidence interval as `<metric>_lo` / `<metric>_hi`."""
    rows = []
    for suite, temps in (detail.get("suites") or {}).items():
        for tk, by_arm in temps.items():
            for arm, m in by_arm.items():
                row = {"suite": suite, "temperature": tk, "arm": arm, **{k: v for k, v in m.items() if k != "ci"}}
                for k, ci in (m.get("ci") or {}).items():
                    if ci:
                        row[f"{k}_lo"], row[f"{k}_hi"] = ci
                rows.append(row)
    return pd.DataFrame(rows)


SUMMARY_METRICS = ("tau", "speedup", "tokens_per_s")


def summary_frame(detail: dict) -> pd.DataFrame:
    """Long frame (arm, temperature, metric, value, lo, hi) of the per-arm summary (means over suites) with the
    confidence intervals where the benchmark computed them."""
    rows = []
    for arm, e in (detail.get("summary") or {}).items():
        for key, v in e.items():
            for m in SUMMARY_METRICS:
                if key.startswith(f"{m}_t") and not key.endswith("_ci") and isinstance(v, (int, float)):
                    tk = key[len(m) + 1:]
                    ci = e.get(f"{key}_ci") or [None, None]
                    rows.append({"arm": arm, "temperature": tk, "metric": m, "value": v, "lo": ci[0], "hi": ci[1]})
    return pd.DataFrame(rows, columns=["arm", "temperature", "metric", "value", "lo", "hi"])


def pairs_frame(detail: dict) -> pd.DataFrame:
    """The paired arm differences (detail["pairs"]) as a table."""
    rows = []
    for p in detail.get("pairs") or []:
        ci_t, ci_r = p.get("tau_diff_ci") or [None, None], p.get("tokens_per_s_ratio_ci") or [None, None]
        rows.append({"pair": p["pair"], "a": p["a"], "b": p["b"], "temperature": p["temperature"],
                     "Δτ (a − b)": p.get("tau_diff"), "Δτ lo": ci_t[0], "Δτ hi": ci_t[1],
                     "Δτ beyond noise": p.get("tau_exceeds_noise"),
                     "tokens/s ratio (a ÷ b)": p.get("tokens_per_s_ratio"), "ratio lo": ci_r[0], "ratio hi": ci_r[1],
                     "speed beyond noise": p.get("speed_exceeds_noise")})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- tokenizer
class TokenText:
    """Token id -> visible text: whitespace shown as ␣ ↵ ⇥, special tokens as ⟨name⟩, unknown ids as #id."""

    def __init__(self, tokenizer=None, special: set[int] | None = None, source: str = ""):
        self.tok, self.special, self.source = tokenizer, special or set(), source
        self._cache: dict[int, str] = {}

    @property
    def available(self) -> bool:
        return self.tok is not None

    def raw(self, tid: int) -> str:
        tid = int(tid)
        if self.tok is None or tid < 0:
            return ""
        try:
            s = self.tok.decode([tid], skip_special_tokens=False)
        except Exception:  # noqa: BLE001
            s = ""
        if not s or "\ufffd" in s:  # a partial UTF-8 byte: show the vocabulary entry instead
            s = self.tok.id_to_token(tid) or ""
        return s

    def __call__(self, tid: int | None) -> str:
        if tid is None:
            return "·"
        tid = int(tid)
        if tid < 0:
            return "∅"  # beyond the end of the output
        if tid in self._cache:
            return self._cache[tid]
        if self.tok is None:
            out = f"#{tid}"
        else:
            s = self.raw(tid)
            if tid in self.special:
                out = f"⟨{s}⟩"
            elif s == "":
                out = f"#{tid}"
            else:
                out = visible(s)
        self._cache[tid] = out
        return out

    def text(self, ids) -> str:
        """A whole sequence decoded together, whitespace made visible."""
        ids = [int(i) for i in ids if i is not None and int(i) >= 0]
        if self.tok is None:
            return " ".join(f"#{i}" for i in ids)
        return visible(self.tok.decode(ids, skip_special_tokens=False), keep_newlines=True)


def visible(s: str, keep_newlines: bool = False) -> str:
    s = s.replace(" ", "␣").replace("\t", "⇥").replace("\r", "␍")
    return s.replace("\n", "↵\n" if keep_newlines else "↵")


def tokenizer_file(root: Path) -> Path | None:
    """models/target/tokenizer.json, or the one in the folder draftlab_target.json points at."""
    tdir = Path(root) / TARGET
    if (tdir / "tokenizer.json").exists():
        return tdir / "tokenizer.json"
    meta = tdir / "draftlab_target.json"
    if meta.exists():
        try:
            path = json.loads(meta.read_text()).get("path")
        except (OSError, ValueError):
            path = None
        if path and (Path(path) / "tokenizer.json").exists():
            return Path(path) / "tokenizer.json"
    return None


def load_tokenizer(root: Path) -> TokenText:
    """The target's tokenizer via the light `tokenizers` library (no model, no transformers import).
    Without one, ids are shown as #id and `source` says which stage writes it."""
    f = tokenizer_file(root)
    if f is None:
        return TokenText(None, source=f"no tokenizer in `{TARGET}/`: run `dvc repro prepare_target` (ids shown as #id)")
    try:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(f))
        special = set()
        try:
            cfg = json.loads(f.read_text())
            special = {int(a["id"]) for a in cfg.get("added_tokens", []) if a.get("special")}
        except (OSError, ValueError, KeyError):
            pass
        return TokenText(tok, special, str(f))
    except Exception as e:  # noqa: BLE001
        return TokenText(None, source=f"tokenizer `{f}` could not be loaded ({e}); ids shown as #id")




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


def provenance(root: Path, rels: tuple[str, ...] | list[str], now: float | None = None) -> dict:
    """Where the shown data comes from: the newest of `rels` under root (its path, modification time, age),
    the repository's HEAD (short sha, branch), the last commit that touched those files and whether they
    differ from it (written by a run since, or edited)."""
    root = Path(root)
    present = [(r, (root / r).stat().st_mtime) for r in rels if (root / r).exists()]
    out: dict[str, Any] = {"files": [r for r, _ in present]}
    if present:
        newest, mt = max(present, key=lambda x: x[1])
        out.update(newest=newest, mtime=mt, age_s=max(0.0, (now or time.time()) - mt))
    head = git(root, "rev-parse", "--short", "HEAD")
    if head is None:
        out["git"] = None
        return out
    paths = [r for r, _ in present] or list(rels)
    branch = (git(root, "rev-parse", "--abbrev-ref", "HEAD") or "").strip()
    last = (git(root, "log", "-1", "--format=%h %cs", "--", *paths) or "").strip()
    status = (git(root, "status", "--porcelain", "--", *paths) or "").strip()
    out["git"] = {"head": head.strip(), "branch": branch, "last_commit": last or None,
                  "modified": bool(status), "untracked": status.startswith("??") if status else False}
    return out


def provenance_text(p: dict) -> str:
    """One line: 'data written 2.1 h ago (results/benchmark.json) · git abc1234 (main) · uncommitted …'."""
    parts = []
    if p.get("newest"):
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(p["mtime"]))
        parts.append(f"data written {age_text(p['age_s'])} ago ({when}, `{p['newest']}`)")
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
def producers(root: Path) -> dict[str, str]:
    """{path: stage} for every out / metric / plot declared under dvc.yaml's stages (folders included)."""
    p = Path(root) / "dvc.yaml"
    if not p.exists():
        return {}
    try:
        import yaml

        d = yaml.safe_load(p.read_text()) or {}
    except Exception:  # noqa: BLE001 - a broken dvc.yaml only loses the stage names in messages
        return {}
    out = {}
    for stage, s in (d.get("stages") or {}).items():
        for kind in ("outs", "metrics", "plots"):
            for item in (s or {}).get(kind) or []:
                for path in ([item] if isinstance(item, str) else list(item)):
                    out[str(path)] = stage
    return out


def producer(root: Path, rel: str, default: str = "benchmark") -> str:
    prod = producers(root)
    if rel in prod:
        return prod[rel]
    for path, stage in prod.items():  # a file inside a declared folder
        if rel.startswith(path.rstrip("/") + "/"):
            return stage
    return default


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
