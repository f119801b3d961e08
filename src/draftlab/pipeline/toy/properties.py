"""The toy world's properties (docs/toy-world.md): measured after the world's own stages, before any method, and the
only figures its knobs may be chosen from (the freeze).

From the stages' outputs — prepare_target's report (the target's greedy exact match and its T=1 entropy on held-out
examples), the references (answer lengths, loops), the plain drafter's report (held-out simulated τ, per-slot top-1
and top-8 coverage) — and one decode of `ar` and `dflash` (the plain drafter) on the world's suites through the
benchmark's own code (engine τ, the top-8 reachable oracle), each property with its bar:

| property | bar |
|---|---|
| the target's greedy exact match on held-out prompts, every family | ≥ 0.95 |
| answer tokens (held-out references), every family | ≥ 48 |
| held-out references that loop (`bench.copying.looped`) | ≤ 10% |
| answer positions with the target's entropy ≥ 0.5 nats at T=1, in the world's mix (`mix_share`) | ≥ 20% |
| the target's FLOPs per pass ÷ the drafter's (a block of S tokens each) | ≥ 8 |
| the plain drafter's held-out τ at block 16, simulated and in the engine | 4 ≤ τ (aim ≤ 8) |
| per-slot top-1 falls with depth; top-8 coverage − top-1 from slot 4 on | falls; ≥ 0.2 |
| the top-8 reachable oracle τ − the drafter's engine τ | ≥ 0.5 |

The drift world (docs/drift-world.md) is read against its own bars (`DRIFT_BARS`, chosen before it trained), on its
corrector family's suite (`drift`) from the engine's per-slot coverage: the target's exact match (≥ 0.95 every
family), answers and loops as above, entropy ≥ 20% of the mix, FLOPs ≥ 8×; on `drift`: per-slot top-1 falls by
≥ 0.2 from slot 1 to slot 8, top-8 − top-1 ≥ 0.2 at every slot from 4 on and widening (slot 8's gap ≥ slot 4's +
0.05), the reachable oracle ≥ 1.3 × the engine τ and ≥ 1.0 τ above it, the engine τ in 3–6.
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

BARS = {"target_exact_match_min": 0.95, "answer_tokens_min": 48, "loop_share_max": 0.10,
        "entropy_share_min": 0.20, "flops_ratio_min": 8.0, "tau_min": 4.0, "tau_aim_max": 8.0,
        "top8_over_top1_min": 0.20, "oracle_gain_min": 0.5}


DRIFT_BARS = {"target_exact_match_min": 0.95, "answer_tokens_min": 48, "loop_share_max": 0.10,
              "entropy_share_min": 0.20, "flops_ratio_min": 8.0, "family": "drift", "top1_drop_min": 0.20,
              "gap_min": 0.20, "gap_from_slot": 4, "gap_widening_min": 0.05, "oracle_ratio_min": 1.3,
              "oracle_gain_min": 1.0, "tau_range": (3.0, 6.0)}
WORLD_BARS = {"toy": BARS, "drift": DRIFT_BARS}  # a world's profile -> its bars


def _family(prompt_id: str) -> str:
    """The family of a world prompt from its id (`<suite>/<split>-<family>-<index>`, draftlab.toy.tasks.example)."""
    return prompt_id.rsplit("/", 1)[-1].split("-")[1]


def answers(references: str | Path, tokenizer) -> dict:
    """Per family of the held-out references: answer tokens (min, mean) and the share that loops."""
    import pandas as pd

    from draftlab.bench.copying import looped

    df = pd.read_parquet(references)
    held = df[df.split == "heldout"]
    out: dict[str, dict] = {}
    for _, row in held.iterrows():
        fam = _family(str(row.prompt_id))
        ids = [int(x) for x in row.response_ids]
        eos = set(tokenizer.all_special_ids)
        body = [x for x in ids if x not in eos]
        d = out.setdefault(fam, {"n": 0, "tokens": [], "looped": 0})
        d["n"] += 1
        d["tokens"].append(len(body))
        d["looped"] += bool(looped(body))
    return {f: {"n": d["n"], "tokens_min": min(d["tokens"]), "tokens_mean": sum(d["tokens"]) / d["n"],
                "loop_share": d["looped"] / d["n"]} for f, d in out.items()}


def flops_ratio(params, ctx: float) -> float:
    """The target's forward FLOPs over a block of S tokens ÷ the drafter's over its S block rows (+ its context
    projection of S positions), at `ctx` keys of context (plan's FLOPs model)."""
    from draftlab.plan.arch import drafter_shape, target_shape
    from draftlab.plan.stages import target_flops

    t = target_shape(params.target)
    d = drafter_shape(t, params.drafter)
    S, H = d.block_size, d.hidden
    layer = (d.params() - d.n_taps * H * H) / max(d.num_layers, 1)
    drafter = S * (d.num_layers * (2 * layer + 4 * d.heads * d.head_dim * (ctx + S)) + 2 * H * d.draft_vocab
                   + 2 * d.n_taps * H * H)
    return target_flops(t, S, ctx) / drafter


def engine_tau(params, target, checkpoints, suites_n: int) -> dict:
    """`ar` and `dflash` (the plain drafter) greedy on the world's suites through the benchmark's own code: per suite
    and overall engine τ with its interval, and the reachable top-8 oracle."""
    from draftlab.pipeline.benchmark import BenchPaths, run

    cfg = replace(params.benchmark, arms=["ar", "dflash"], ablation_arms=[], sampled_arms=[], pairs=[["dflash", "ar"]],
                  pair_prompts_per_suite={}, temperatures=[0.0], concurrency=[], concurrency_arms=[], topk=8,
                  prompts_per_suite=suites_n, resume=False, simulated=False, warmup=False)
    detail, _ = run(target, replace(params, benchmark=cfg), BenchPaths(checkpoints))
    s = detail["summary"]["dflash"]
    suites = {k: v.get("t0", {}).get("dflash", {}) for k, v in detail.get("suites", {}).items()}
    return {"tau": s.get("tau_t0"), "tau_ci": s.get("tau_t0_ci"), "units": s.get("units_t0"),  # the interval's unit
            "oracle_tau_reachable": s.get("oracle_tau_reachable_t0"),
            "oracle_tau": s.get("oracle_tau_t0"), "per_suite": {k: v.get("tau") for k, v in suites.items()},
            "per_suite_detail": {k: {"tau": v.get("tau"), "oracle_tau": v.get("oracle_tau"),
                                     "oracle_tau_reachable": v.get("oracle_tau_reachable"),
                                     "top1": [row[0] for row in v.get("coverage") or []],
                                     "top8": [row[-1] for row in v.get("coverage") or []]} for k, v in suites.items()},
            "prompts_per_suite": suites_n}


def mix_share(params, families: dict) -> float | None:
    """The share of answer positions at >= 0.5 nats in the world's mix: each family's held-out share weighted by its
    weight in the world (the prompt pool's mix, which the references and the drafter's held-out τ are drawn from)
    times its mean answer length. The benchmark's suites weigh the families equally: that figure is reported too."""
    from draftlab.toy.world import world_config

    weights = {f.name: f.weight for f in world_config(params.target.toy).families}
    rows = [(weights.get(f, 0.0) * v["mean_answer_tokens"], v["high_entropy_share"]) for f, v in families.items()
            if v.get("high_entropy_share") is not None]
    total = sum(w for w, _ in rows)
    return sum(w * x for w, x in rows) / total if total > 0 else None


def drift_verdicts(p: dict, b: dict = DRIFT_BARS) -> dict:
    """The drift world's properties against its bars (module docstring): True / False."""
    d = (p["engine"].get("per_suite_detail") or {}).get(b["family"]) or {}
    top1, top8 = d.get("top1") or [], d.get("top8") or []
    gaps = [c - a for a, c in zip(top1, top8)]
    at = b["gap_from_slot"]
    tau, orc = d.get("tau") or 0.0, d.get("oracle_tau_reachable") or 0.0
    return {
        "target_exact_match": all(v >= b["target_exact_match_min"] for v in p["target"]["exact_match"].values()),
        "answer_tokens": all(v["tokens_min"] >= b["answer_tokens_min"] for v in p["answers"].values()),
        "loops": all(v["loop_share"] <= b["loop_share_max"] for v in p["answers"].values()),
        "entropy": (p["target"]["entropy_share"] or 0) >= b["entropy_share_min"],
        "flops_ratio": p["flops_ratio"] >= b["flops_ratio_min"],
        "top1_drop": len(top1) >= 8 and top1[0] - top1[7] >= b["top1_drop_min"],
        "gap_from_slot_4": len(gaps) >= 8 and min(gaps[at - 1:]) >= b["gap_min"],
        "gap_widens": len(gaps) >= 8 and gaps[7] >= gaps[at - 1] + b["gap_widening_min"],
        "oracle_ratio": tau > 0 and orc / tau >= b["oracle_ratio_min"],
        "oracle_gain": orc - tau >= b["oracle_gain_min"],
        "tau_engine_range": b["tau_range"][0] <= tau <= b["tau_range"][1],
    }


def verdicts(p: dict) -> dict:
    """Each property against its bar (the first world's): True / False."""
    b = BARS
    tgt = p["target"]["exact_match"]
    slot1, top8 = p["drafter"]["slot_acc"], p["drafter"]["top8_cov"]
    gaps = [c - a for a, c in zip(slot1, top8)][3:]
    return {
        "target_exact_match": all(v >= b["target_exact_match_min"] for v in tgt.values()),
        "answer_tokens": all(v["tokens_min"] >= b["answer_tokens_min"] for v in p["answers"].values()),
        "loops": all(v["loop_share"] <= b["loop_share_max"] for v in p["answers"].values()),
        "entropy": (p["target"]["entropy_share"] or 0) >= b["entropy_share_min"],
        "flops_ratio": p["flops_ratio"] >= b["flops_ratio_min"],
        "tau_simulated": p["drafter"]["sim_tau"] >= b["tau_min"],
        "tau_engine": (p["engine"]["tau"] or 0) >= b["tau_min"],
        "top1_falls": all(x >= y for x, y in zip(slot1, slot1[1:])),
        "top8_above_top1": bool(gaps) and min(gaps) >= b["top8_over_top1_min"],
        "oracle_headroom": (p["engine"]["oracle_tau_reachable"] or 0) - (p["engine"]["tau"] or 0) >= b["oracle_gain_min"],
    }


def measure(params, target, target_folder: str | Path, target_report: dict, references: str | Path,
            drafter_report: dict, checkpoints, suites_n: int = 16) -> dict:
    """Every property of the world (module docstring), with the bars and the verdicts."""
    from draftlab.toy.freeze import target_world_hash

    toy = target_report.get("toy", {})
    ev = toy.get("eval", {})
    fam = ev.get("families") or {}
    out = {
        "world_hash": target_world_hash(target_folder),
        "target": {"exact_match": {f: v.get("exact_match") for f, v in fam.items()},
                   "entropy_share": mix_share(params, fam),
                   "entropy_share_per_family": {f: v.get("high_entropy_share") for f, v in fam.items()},
                   "entropy_share_equal_families": (ev.get("overall") or {}).get("high_entropy_share"),
                   "parameters": target_report.get("parameters"), "train_s": toy.get("train_seconds"),
                   "steps": toy.get("steps")},
        "answers": answers(references, target.tokenizer),
        "flops_ratio": flops_ratio(params, ctx=160.0),
        "drafter": {k: drafter_report.get(k) for k in ("sim_tau", "sim_tau_per_slot", "slot_acc", "top8_cov",
                                                        "top1_mean", "top8_mean", "train_minutes", "steps")},
        "engine": engine_tau(params, target, checkpoints, suites_n),
        "bars": WORLD_BARS.get(params.profile.name, BARS),
    }
    out["verdicts"] = drift_verdicts(out) if params.profile.name == "drift" else verdicts(out)
    out["holds"] = all(out["verdicts"].values())
    return out


def write(path: str | Path, props: dict) -> None:
    from draftlab.io import atomic_write

    atomic_write(Path(path), lambda p: p.write_text(json.dumps(props, indent=1) + "\n"))
