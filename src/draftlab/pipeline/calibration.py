"""Calibration of the proposals at T > 0, from an addition's recorded rounds (docs/toy-world.md "Additions"): for each
arm and temperature > 0 of every finished run of a world's additions, the share of rounds whose slot j was accepted
(j = 1..n, over all suites and per suite), and at the world's uncertain positions — the marks `+` / `-`, which `fill`
lets the target write either way (trained 70/30) — the share of `+` among the marks the arm *proposed* beside the share
among the marks the target *emitted*. A point-mass proposal writes its argmax mark at every mark (the share near 1);
a calibrated sampled walk proposes each mark about as often as the target writes it.

`write_calibration(world)` writes `<world>/additions/<name>/calibration.json` for each addition: the counts per run
and their sums over runs (the unit is a mark or a round, pooled over the runs: descriptive, beside the plan's
per-prompt verdicts). Read from data/benchmark_rounds.parquet, which stays out of git; the JSON is committed.
"""
from __future__ import annotations

import json
from pathlib import Path

from draftlab import paths
from draftlab.io import write_json

CALIBRATION = "calibration.json"


def mark_ids(folder: Path) -> dict[str, int]:
    """{mark: token id} of the world's marks under the run's target tokenizer."""
    from draftlab.toy.tasks import MARKS
    from draftlab.toy.tokenizer import encode_words
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder / paths.TARGET))
    return {m: encode_words(tok, m)[0] for m in MARKS}


def run_calibration(folder: Path) -> dict:
    """{arm: {temperature: figures}} of one run's rounds at T > 0 (module doc)."""
    import numpy as np
    import pandas as pd

    rounds = pd.read_parquet(folder / paths.BENCH_ROUNDS, columns=["arm", "suite", "temperature", "accepted",
                                                                   "proposals", "committed"])
    rounds = rounds[rounds["temperature"] > 0]
    marks = mark_ids(folder)
    plus, mark_set = marks["+"], set(marks.values())
    out: dict = {}
    for (arm, t), d in rounds.groupby(["arm", "temperature"], sort=True):
        n = max(len(p) for p in d["proposals"])
        acc = d["accepted"].to_numpy()
        slots = {"rounds": int(len(d)), "accepted": [int((acc >= j).sum()) for j in range(1, n + 1)]}
        per_suite = {s: [round(float((g["accepted"].to_numpy() >= j).mean()), 4) for j in range(1, n + 1)]
                     for s, g in d.groupby("suite")}
        proposed = np.concatenate([np.asarray(p) for p in d["proposals"]])
        emitted = np.concatenate([np.asarray(c)[: a + 1] for c, a in zip(d["committed"], acc) if c is not None])
        pm, em = proposed[np.isin(proposed, list(mark_set))], emitted[np.isin(emitted, list(mark_set))]
        out.setdefault(arm, {})[f"{t:g}"] = {
            **slots, "accept_share": [round(x / max(1, len(d)), 4) for x in slots["accepted"]],
            "accept_share_per_suite": per_suite,
            "marks": {"proposed": int(len(pm)), "proposed_plus": int((pm == plus).sum()),
                      "emitted": int(len(em)), "emitted_plus": int((em == plus).sum())}}
    return out


def summed(runs: dict[str, dict]) -> dict:
    """The runs' counts summed per arm and temperature, with the shares they give."""
    total: dict = {}
    for fig in runs.values():
        for arm, temps in fig.items():
            for t, f in temps.items():
                s = total.setdefault(arm, {}).setdefault(t, {"rounds": 0, "accepted": [0] * len(f["accepted"]),
                                                            "marks": dict.fromkeys(f["marks"], 0)})
                s["rounds"] += f["rounds"]
                s["accepted"] = [a + b for a, b in zip(s["accepted"], f["accepted"])]
                for k, v in f["marks"].items():
                    s["marks"][k] += v
    for temps in total.values():
        for s in temps.values():
            s["accept_share"] = [round(x / max(1, s["rounds"]), 4) for x in s["accepted"]]
            m = s["marks"]
            s["proposed_plus_share"] = round(m["proposed_plus"] / m["proposed"], 4) if m["proposed"] else None
            s["emitted_plus_share"] = round(m["emitted_plus"] / m["emitted"], 4) if m["emitted"] else None
    return total


def write_calibration(world: str | Path) -> dict:
    """calibration.json of every addition of the world with finished runs -> {addition: path written}."""
    from draftlab.pipeline.addition import ADDITIONS
    from draftlab.pipeline.replicate import RECORD

    written = {}
    for home in sorted((Path(world) / ADDITIONS).glob("*/")):
        runs = {}
        for rec in sorted(home.glob(f"{paths.REPLICATES}/*/seed-*/{RECORD}")):
            if json.loads(rec.read_text()).get("status") == "complete" and (rec.parent / paths.BENCH_ROUNDS).exists():
                runs[str(rec.parent.relative_to(home))] = run_calibration(rec.parent)
        if runs:
            write_json(home / CALIBRATION, {"about": __doc__.split("\n\n")[0], "unit": "a round (slots) or a mark, "
                                            "pooled over the runs: descriptive", "runs": runs, "total": summed(runs)})
            written[home.name] = str(home / CALIBRATION)
    return written
