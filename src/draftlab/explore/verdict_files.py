"""The verdict tools' files as the explorer's Trees and LiLiCorr pages show them: `results/trees.json`
(tools/tree_verdict.py: trees against chains on a run's models) and `results/lilicorr.json` (tools/lilicorr_verdict.py:
LiLiCorr against the other correctors on one base drafter). Both are a benchmark detail (`summary`, `pairs`, `setup`)
with the tool's own sections; every interval carries its unit and count (`units_<T>` per arm, `units` per pair).

The frames keep the files' numbers as they are (the page formats them; a test holds the frames to the files): per arm
and temperature τ, tokens/s and the ratio to AR by total time, with 95% intervals; per pair Δτ (a − b) and the tokens/s
ratio (a ÷ b) with theirs; then what only one tool writes (the trees' flat-verify model, LiLiCorr's training rows).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from draftlab import paths
from draftlab.explore.loaders import Missing


@dataclass(frozen=True)
class VerdictFile:
    rel: str  # under the run's root
    tool: str  # what writes it
    command: str  # how, in a run's folder
    what: str


FILES = {
    "Trees": VerdictFile(paths.TREES, "tools/tree_verdict.py",
                         "python tools/tree_verdict.py (in a world's folder: python ../../tools/tree_verdict.py)",
                         "trees against chains on one run's models"),
    "LiLiCorr": VerdictFile(paths.LILICORR, "tools/lilicorr_verdict.py",
                            "python tools/lilicorr_verdict.py (in a world's folder: python ../../tools/lilicorr_verdict.py)",
                            "LiLiCorr against DCOCO, DSpark, Domino, DFlash-2 and the base drafter, chains and trees"),
}
ARM_COLUMNS = ["arm", "T", "τ", "τ lo", "τ hi", "tokens/s", "tokens/s lo", "tokens/s hi", "× AR (total time)",
               "unit", "n"]
PAIR_COLUMNS = ["a", "b", "T", "Δτ (a − b)", "Δτ lo", "Δτ hi", "tokens/s a ÷ b", "ratio lo", "ratio hi", "unit", "n"]


def load(root: Path, name: str) -> dict | Missing:
    """The verdict file `name` (a key of FILES) under root, or why not and which command writes it."""
    f = FILES[name]
    p = Path(root) / f.rel
    if not p.exists():
        return Missing(f"No `{f.rel}` under {root}: it is {f.what}, written by `{f.tool}` after the run's corrector "
                       f"stage — run `{f.command}` there. The toy world has one: set the root to `worlds/toy`.")
    try:
        d = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        return Missing(f"`{f.rel}` under {root} is corrupt or unreadable ({type(e).__name__}): rerun `{f.tool}` "
                       f"(it rewrites the file).", "corrupt")
    if not isinstance(d, dict) or not d.get("summary"):
        return Missing(f"`{f.rel}` under {root} has no `summary`: rerun `{f.tool}`.", "corrupt")
    return d


def temperatures(d: dict) -> list[str]:
    """The temperature keys (t0, t1, ...) the file's summary holds."""
    return sorted({k.split("_")[1] for e in d["summary"].values() for k in e if k.startswith("tau_t") and
                   not k.endswith("_ci")})


def arms_frame(d: dict) -> pd.DataFrame:
    """One row per (arm, temperature) of the summary, in the file's arm order."""
    rows = []
    for arm, e in d["summary"].items():
        for tk in temperatures(d):
            if e.get(f"tau_{tk}") is None:
                continue
            ci_t = e.get(f"tau_{tk}_ci") or [None, None]
            ci_s = e.get(f"tokens_per_s_{tk}_ci") or [None, None]
            u = e.get(f"units_{tk}") or {}
            rows.append([arm, tk, e[f"tau_{tk}"], *ci_t, e.get(f"tokens_per_s_{tk}"), *ci_s, e.get(f"speedup_{tk}"),
                         u.get("unit"), u.get("n")])
    return pd.DataFrame(rows, columns=ARM_COLUMNS)


def pairs_frame(d: dict) -> pd.DataFrame:
    """One row per pair of the file."""
    rows = []
    for p in d.get("pairs") or []:
        u = p.get("units") or {}
        rows.append([p["a"], p["b"], p["temperature"], p.get("tau_diff"), *(p.get("tau_diff_ci") or [None, None]),
                     p.get("tokens_per_s_ratio"), *(p.get("tokens_per_s_ratio_ci") or [None, None]), u.get("unit"),
                     u.get("n")])
    return pd.DataFrame(rows, columns=PAIR_COLUMNS)


def flat_verify_frame(d: dict) -> pd.DataFrame:
    """The trees' flat-verify model (`tools/tree_verdict.py flat_verify`): a modelled ratio, not a measurement."""
    rows = [[k.rsplit(" ", 1)[0], k.rsplit(" ", 1)[1], v] for k, v in (d.get("flat_verify_model") or {}).items()]
    return pd.DataFrame(rows, columns=["pair", "T", "tokens per round-ms, tree ÷ chain (model)"])


TRAINING = ("steps", "train_minutes", "params_corrector", "k", "drafter_tau_before", "drafter_tau_after", "sim_tau",
            "sim_tau_se", "sim_tau_uncorrected", "sim_tau_oracle_reachable", "headroom_closed_reachable")


def training_frame(d: dict) -> pd.DataFrame:
    """LiLiCorr's co-training (`trained`) beside the corrector stage's variants (`stage`): one row each."""
    rows = [{"corrector": "lilicorr (this tool)", **{k: (d.get("trained") or {}).get(k) for k in TRAINING}}] \
        if d.get("trained") else []
    rows += [{"corrector": f"{name} (corrector stage)", **{k: e.get(k) for k in TRAINING}}
             for name, e in (d.get("stage") or {}).items()]
    return pd.DataFrame(rows, columns=["corrector", *TRAINING])
