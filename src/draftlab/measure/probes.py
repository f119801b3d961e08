"""Drafter recipe probes (tools/pretrain_probe.py is their command line): the pretrain_drafter recipe with
overrides at a fixed number of steps; each probe's record and the ablation table that lists every probe beside
the one named `base` (held-out simulated τ at equal steps).

- `probe_params`: params.yaml + the step budget + the overrides, checked (one-line errors); `describe`: the
  drafter's seed settings and the pretraining budget in one line;
- `probe_record`: a finished probe's record from the pretraining outcome (a seeded drafter's also carries the
  validation's per-slot seed report at the best step, `SEED_REPORT`);
- `plain_drafter`: the comparison's plain drafter, the first of the candidate folders that holds one;
- `ablation_table`: the records of a folder as one table, written atomically; `table_lines`: it as text.
"""
from __future__ import annotations

import time
from pathlib import Path

from draftlab import paths
from draftlab.errors import DraftlabError

SEED_REPORT = ("seed_rate", "seed_hit", "slot_acc_seeded", "slot_acc_unseeded", "seed_override", "seed_override_right")


def probe_params(steps: int, overrides: list[str], params_file: str | Path = paths.PARAMS):
    """The probe's settings: params.yaml + the step budget + the overrides, checked (one-line errors)."""
    from draftlab.params import load_params

    return load_params(params_file, [f"pretrain.max_steps={steps}", *overrides])


def describe(params) -> str:
    d, p = params.drafter, params.pretrain
    return (f"drafter.seed={d.seed} seed_logit={d.seed_logit} seed_bias={d.seed_bias} draft_vocab_size="
            f"{d.draft_vocab_size}; pretrain.max_steps={p.max_steps} seed_dropout={p.seed_dropout} lr={p.lr} "
            f"seed_bias_lr={p.seed_bias_lr} seeded_slot_weight={p.seeded_slot_weight} init_from={p.init_from or '-'}")


def probe_record(name: str, overrides: list[str], outcome, t0: float) -> dict:
    """A probe's record from `outcome` (pretrain_from_references' result; `t0`: time.time() at its start)."""
    rep = outcome.report
    res = {"name": name, "overrides": overrides, "steps": rep["steps"], "best_step": rep["best_step"],
           "sim_tau": rep["sim_tau"], "per_set": rep["per_set"], "slot_acc": rep["slot_acc"],
           "top8": rep.get("top8_cov"), "train_minutes": rep["train_minutes"],
           "slot_preds_per_s": rep["train_tokens_per_s"], "wall_s": time.time() - t0, "curve": outcome.curve}
    best = outcome.result.best_metrics.get(rep["sim_tau_split"], {})
    if "seed_hit" in best:  # a seeded drafter: the validation's per-slot seed report at the best step
        res["seed_report"] = {k: best[k] for k in SEED_REPORT}
    return res


def plain_drafter(candidates) -> Path | None:
    """The comparison's plain drafter: the first of `candidates` (the pipeline's, then the `base` probe's) that
    holds a saved drafter."""
    return next((Path(p) for p in candidates if (Path(p) / "config.json").exists()), None)


def comparison_row(r: dict) -> dict:
    """A probe's comparison as table columns: τ per method and seeded-minus-X intervals, per subset."""
    c = r.get("comparison")
    if not c:
        return {}
    return {"comparison": {s: {"sequences": c[s]["sequences"], "tau": c[s]["tau"],
                               "pairs": {k: {"diff": p["diff"], "ci": p["ci"]} for k, p in c[s]["pairs"].items()}}
                           for s in ("all", "looping", "non_looping")}}


def ablation_table(records: str | Path, table: str | Path) -> dict:
    """Every probe record `records`/*.json beside the `base` probe's (the difference in held-out τ), written to
    `table` atomically; DraftlabError when there is no `base` probe."""
    from draftlab.io import read_json, write_json

    records = Path(records)
    rows = {p.stem: read_json(p) for p in sorted(records.glob("*.json"))}
    if "base" not in rows:
        raise DraftlabError(f"no probe named 'base' in {records}; run `tools/pretrain_probe.py run base` first")
    base = rows["base"]["sim_tau"]
    out = {"unit": "held-out simulated τ at equal steps", "base": base, "rows": [
        {"name": n, "overrides": r["overrides"], "steps": r["steps"], "sim_tau": r["sim_tau"],
         "delta_vs_base": r["sim_tau"] - base,
         "train_sample_tau": r["per_set"].get("train_sample", {}).get("sim_tau"),
         "slot1_acc": r["slot_acc"][0] if r["slot_acc"] else None, "train_minutes": r["train_minutes"],
         **({"seed_report": r["seed_report"]} if "seed_report" in r else {}), **comparison_row(r)}
        for n, r in rows.items()]}
    write_json(table, out)
    return out


def table_lines(out: dict) -> list[str]:
    """The ablation table as text: τ and Δ per probe, and each probe's comparison per subset."""
    lines = []
    for row in out["rows"]:
        lines.append(f"{row['name']:>12}  τ {row['sim_tau']:.4f}  Δ {row['delta_vs_base']:+.4f}  {' '.join(row['overrides'])}")
        for s, c in row.get("comparison", {}).items():
            vs = "  ".join(f"{k} {v['diff']:+.3f} {v['ci']}" for k, v in c["pairs"].items())
            lines.append(f"{'':>14}{s:>12} ({c['sequences']} seq): " + " ".join(f"{m} {t:.3f}" for m, t in c["tau"].items()
                                                                             if t is not None) + f"  | {vs}")
    return lines
