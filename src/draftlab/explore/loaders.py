"""Read-only access to the benchmark's outputs for the explorer (no Streamlit here, so tests and notebooks
can use it too). Nothing in this module writes: missing, partial or corrupt outputs come back as `Missing`
(a message naming the file and the stage that rebuilds it), never as an exception.

Files read (docs/contracts.md): results/benchmark.json (the benchmark's full detail; an older
metrics/benchmark.json with per-suite results is read too), plots/benchmark_*.csv and
data/benchmark_rounds.parquet. The other readers sit beside it: `tokens` (the target's tokenizer in
models/target/), `provenance` (the data's age and git revision, which stage writes a file, other
git revisions and DVC experiments) and `runs_data` (the MLflow store named by params.yaml `tracking.uri`).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from draftlab import paths
from draftlab.bench.oracles import unmeasured_arms

ROOT_ENV = "DRAFTLAB_ROOT"
BENCH_JSON = paths.BENCH_DETAIL
LEGACY_BENCH_JSON = paths.LEGACY_BENCH_DETAIL
ROUNDS = paths.BENCH_ROUNDS
PLOTS = paths.BENCH_PLOTS
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


def profile_of(root: Path) -> str | None:
    """The profile a run folder's params.yaml names (`profile.name`), None when it cannot be read."""
    import yaml

    try:
        return str(((yaml.safe_load((Path(root) / "params.yaml").read_text()) or {}).get("profile") or {})["name"])
    except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError):
        return None


def run_name(root: Path) -> str:
    """How a hint names the run being explored: its world's folder, else its profile."""
    profile = profile_of(root)
    world = Path(root).resolve().parent.name == "worlds"
    if world:
        return f"`{Path(root).name}` world's run" + (f", profile `{profile}`" if profile else "")
    return f"run of profile `{profile}`" if profile else "run in this folder"


def smoke_of(root: Path) -> str:
    """The smoke's copy of the explored run: `.smoke/worlds/<name>` for a world's folder, else `.smoke`."""
    root = Path(root).resolve()
    return f".smoke/worlds/{root.name}" if root.parent.name == "worlds" else ".smoke"


def rounds_absent(root: Path) -> Missing:
    """Why the recorded rounds are not there and which command writes them. git does not keep them (a DVC output
    under the ignored `data/`), so a fresh clone has the committed run's figures but not its rounds."""
    root = Path(root)
    fill = (f"In `{root}` (the {run_name(root)}), `dvc repro -s benchmark` runs the benchmark stage alone and writes "
            f"them (`benchmark.record_rounds: true`, the default); it needs the stages' models under `models/`, which "
            f"only a full `dvc repro` there builds (`draftlab plan` in that folder says how long each stage takes on "
            f"this machine). Quicker: `make smoke` at the repository's root, then `make explore ROOT={smoke_of(root)}` "
            f"(the same pipeline on tiny models in minutes, rounds included).")
    if (root / BENCH_JSON).exists() or (root / LEGACY_BENCH_JSON).exists():
        return Missing(f"No `{ROUNDS}` under {root}. This page replays the benchmark's recorded rounds (each slot's "
                       f"top-K candidates, the proposals, the verifier's tokens). git does not keep that file (a DVC "
                       f"output; `data/` is not committed), so a fresh clone has the run's figures — the Acceptance "
                       f"and Speed pages show them — but not its rounds. {fill}")
    return Missing(f"No benchmark outputs under {root} yet (neither `{BENCH_JSON}` nor `{ROUNDS}`). {fill}")


def load_rounds(root: Path) -> pd.DataFrame | Missing:
    p = Path(root) / ROUNDS
    if not p.exists():
        return rounds_absent(root)
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
    confidence intervals where the benchmark computed them. τ of an arm that ran no rounds of its own (the Hugging
    Face generate rows: `draftlab.bench.oracles.tau_measured`) is left out: it is no measurement."""
    rows = []
    unmeasured = unmeasured_arms(detail)
    for arm, e in (detail.get("summary") or {}).items():
        for key, v in e.items():
            for m in SUMMARY_METRICS:
                if m == "tau" and arm in unmeasured:
                    continue
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
        nl = p.get("no_loop") or {}  # the same pair without the prompts whose answer looped
        rows.append({"pair": p["pair"], "a": p["a"], "b": p["b"], "temperature": p["temperature"],
                     "ablation": bool(p.get("ablation")),
                     "prompts": sum((p.get("prompts") or {}).values()) or None,  # both arms decoded (all suites)
                     "Δτ (a − b)": p.get("tau_diff"), "Δτ lo": ci_t[0], "Δτ hi": ci_t[1],
                     "Δτ beyond noise": p.get("tau_exceeds_noise"),
                     "tokens/s ratio (a ÷ b)": p.get("tokens_per_s_ratio"), "ratio lo": ci_r[0], "ratio hi": ci_r[1],
                     "speed beyond noise": p.get("speed_exceeds_noise"),
                     "Δτ without loops": nl.get("tau_diff"), "Δτ beyond noise without loops": nl.get("tau_exceeds_noise"),
                     "ratio without loops": nl.get("tokens_per_s_ratio"),
                     "speed beyond noise without loops": nl.get("speed_exceeds_noise")})
    return pd.DataFrame(rows)
