"""Benchmark outputs: the full detail `results/benchmark.json` (per suite / temperature / arm metrics with
their confidence intervals and per-prompt values, the concurrency sweep, the per-arm `summary`, the paired
arm differences), the headline `metrics/benchmark/<arm>.json` (one small DVC metrics file per arm: τ and
speedup per temperature with the half-width of their interval, so `dvc metrics show` prints one row per
arm), plot CSVs (τ per slot, coverage, speedup per suite, throughput vs concurrency, and per arm the peers
table: τ, tokens/s, ratio to AR, the tokens-equal-AR flag and the proposal sources; τ and tokens/s by
position in the answer), the per-prompt records `results/benchmark_prompts.csv` (`prompt_frame`: small, committed, what
`draftlab verdicts` recomputes every figure from) and the per-round Parquet file for the explorer. Every row of every table carries
`ablation` (the arm is one of `benchmark.ablation_arms`: a smaller sample). Every figure is an in-engine one
(draftlab's own engine: eager PyTorch on the HF model code, not a serving engine's): `setup.engine` says so
and how the rounds were timed, and every table with tokens/s carries `engine: draftlab` (a serving engine's
rows, `tools/serve_bench.py`, carry `engine: vllm|sglang`). Every file is written atomically (draftlab.io)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import torch

from draftlab import paths
from draftlab.bench.metrics import round_hits
from draftlab.bench.runner import BatchRun
from draftlab.decoding.common import PhaseTimer
from draftlab.io import atomic_write, write_json, write_json_folder, write_parquet

DETAIL = paths.BENCH_DETAIL
HEADLINE = paths.BENCH_HEADLINE
HEADLINE_METRICS = ("tau", "speedup")  # per temperature, each with `_pm` (half the interval's width)
PLOTS = paths.BENCH_PLOTS
ENGINE = "draftlab"  # the engine behind every figure of this report
ENGINE_TABLES = ("speedup", "concurrency", "peers", "positions")  # the plot tables with tokens/s


def engine_label(device, engine=None, compiled: str = "off", graphs: dict | None = None) -> dict:
    """`setup.engine`: what the report's tokens/s are (in-engine), how the engine ran (`engine` section: compiled
    steps — `compiled`: what ran, `TargetModel.compiled` —, KV capacity; `graphs`: a compiled run's declared shapes,
    graph counts and compile seconds, `decoding.shapes.prepare_run`) and how it timed its rounds."""
    dev = torch.device(device)
    return {"name": ENGINE, "tokens_per_s": "in-engine",
            "what": "draftlab's own engine (its plain-torch forward over the Hugging Face weights, static per-stream "
                    "slot buffers): the method's speed in this engine, not a serving engine's (vLLM / SGLang: "
                    "tools/serve_bench.py)",
            "compile": compiled,
            **({"compile_unmeasured": True} if compiled != "off" and dev.type == "cuda" else {}),
            **({"compiled": graphs} if graphs else {}),
            "kv_capacity": engine.kv_capacity if engine is not None else 0,
            "phase_timing": PhaseTimer(dev).method}


CONC_COLS = ("tokens_per_s", "decode_tokens_per_s", "tokens_per_s_stream", "tau", "tau_ratio", "tokens_per_s_ratio",
             "round_total_ms", "propose_ms", "round_overhead_ms")


def mark_ablation(detail: dict, ablation) -> dict:
    """Mark every arm's entries `ablation` (True for the arms of `benchmark.ablation_arms`): summary, per-suite
    metrics, concurrency levels (pairs carry their own flag)."""
    ablation = set(ablation)
    for arm, e in detail.get("summary", {}).items():
        e["ablation"] = arm in ablation
    for temps in detail.get("suites", {}).values():
        for by_arm in temps.values():
            for arm, m in by_arm.items():
                m["ablation"] = arm in ablation
    for by_arm in detail.get("concurrency", {}).values():
        for arm, levels in by_arm.items():
            for m in levels.values():
                m["ablation"] = arm in ablation
    return detail


def plot_frames(detail: dict) -> dict[str, pd.DataFrame]:
    slot_rows, cov_rows, sp_rows, conc_rows, pos_rows = [], [], [], [], []
    for suite, temps in detail["suites"].items():
        for tk, by_arm in temps.items():
            for arm, m in by_arm.items():
                key = {"suite": suite, "temperature": tk, "arm": arm, "ablation": bool(m.get("ablation"))}
                cp = m.get("copying") or {}
                sp_rows.append({**key, "speedup": m.get("speedup"), "tau": m.get("tau"),
                                "tokens_per_s": m.get("tokens_per_s"), "break_even_tau": m.get("break_even_tau"),
                                "proposal_share": (m.get("round_share") or {}).get("propose"),
                                **{k: cp.get(k) for k in COPY_COLS}})
                for j, a in enumerate(m.get("accept_curve", []), 1):
                    slot_rows.append({**key, "slot": j, "accept_rate": a})
                for j, row in enumerate(m.get("coverage", []), 1):
                    for k, c in enumerate(row, 1):
                        cov_rows.append({**key, "slot": j, "k": k, "coverage": c})
                for b in (m.get("positions") or {}).get("bins", []):
                    pos_rows.append({**key, **{k: b.get(k) for k in POS_COLS}})
    for tk, by_arm in detail.get("concurrency", {}).items():
        for arm, levels in by_arm.items():
            for c, m in levels.items():
                conc_rows.append({"temperature": tk, "arm": arm, "ablation": bool(m.get("ablation")), "streams": int(c),
                                  **{k: m.get(k) for k in CONC_COLS}})
    key = ["suite", "temperature", "arm", "ablation"]
    cols = {
        "peers": list(PEER_COLS),
        "tau_per_slot": [*key, "slot", "accept_rate"],
        "coverage": [*key, "slot", "k", "coverage"],
        "speedup": [*key, "speedup", "tau", "tokens_per_s", "break_even_tau", "proposal_share", *COPY_COLS],
        "concurrency": ["temperature", "arm", "ablation", "streams", *CONC_COLS],
        "positions": [*key, *POS_COLS],
    }
    rows = {"peers": peer_rows(detail.get("summary", {})), "tau_per_slot": slot_rows, "coverage": cov_rows,
            "speedup": sp_rows, "concurrency": conc_rows, "positions": pos_rows}
    frames = {k: pd.DataFrame(rows[k], columns=cols[k]) for k in cols}
    engine = (detail.get("setup") or {}).get("engine", {}).get("name", ENGINE)
    for k in ENGINE_TABLES:
        frames[k]["engine"] = engine  # in-engine tokens/s, labelled as such
    return frames


COPY_COLS = ("copy_share", "repeat_share", "loop_share")
POS_COLS = ("start", "rounds", "tokens", "tau", "tokens_per_s", "speedup")  # one row per 32-token bin of round starts
PEER_COLS = ("arm", "ablation", "temperature", "tau", "tokens_per_s", "speedup", "tokens_equal_ar", "lookup_share",
             "lookup_accepted_per_round", "drafter_accepted_per_round", "lookup_accepted_tokens", "drafter_accepted_tokens")


def peer_rows(summary: dict) -> list[dict]:
    """One row per (arm, temperature) of the summary: the training-free peers beside the trained arms."""
    rows = []
    for arm, e in summary.items():
        for tk in sorted({k.split("_")[1] for k in e if k.startswith("tau_t")}):  # tau_t0, tau_t0_ci -> t0
            if e.get(f"tau_{tk}") is None:
                continue  # a greedy-only reference row at T>0
            src = e.get(f"sources_{tk}") or {}
            look, draft = src.get("lookup", {}), src.get("drafter", {})
            rows.append({"arm": arm, "ablation": bool(e.get("ablation")), "temperature": tk, "tau": e.get(f"tau_{tk}"),
                         "tokens_per_s": e.get(f"tokens_per_s_{tk}"), "speedup": e.get(f"speedup_{tk}"),
                         "tokens_equal_ar": e.get("tokens_equal_ar_t0") if tk == "t0" else None,
                         "lookup_share": look.get("share"), "lookup_accepted_per_round": look.get("accepted_per_round"),
                         "drafter_accepted_per_round": draft.get("accepted_per_round"),
                         "lookup_accepted_tokens": look.get("accepted_tokens"),
                         "drafter_accepted_tokens": draft.get("accepted_tokens")})
    return rows


def round_frame(runs: list[BatchRun]) -> pd.DataFrame:
    """One row per (stream, round) of every recorded speculative run."""
    rows = []
    for run in runs:
        per_stream_round: dict[int, int] = {}
        for rec in run.result.records:
            committed, _, _ = round_hits(run, rec) if rec.topk_ids is not None else (None, None, None)
            for i, s in enumerate(rec.stream.tolist()):
                r = per_stream_round.get(s, 0)
                per_stream_round[s] = r + 1
                rows.append({
                    "arm": run.arm, "suite": run.suite, "temperature": run.temperature,
                    "concurrency": run.concurrency, "prompt_id": run.prompt_ids[s], "round": r,
                    "offset": int(rec.offset[i]), "accepted": int(rec.accepted[i]),
                    "proposals": rec.proposals[i].tolist(),
                    "topk_ids": None if rec.topk_ids is None else rec.topk_ids[i].tolist(),
                    "topk_logits": None if rec.topk_logits is None else rec.topk_logits[i].tolist(),
                    "target_tokens": None if rec.target_tokens is None else rec.target_tokens[i].tolist(),
                    "committed": None if committed is None else committed[i].tolist(),
                    **{k: v[i].tolist() for k, v in rec.extras.items()},
                })
    cols = ["arm", "suite", "temperature", "concurrency", "prompt_id", "round", "offset", "accepted", "proposals",
            "topk_ids", "topk_logits", "target_tokens", "committed"]
    extra = sorted({k for r in rows for k in r} - set(cols))  # proposal-step records (None for other arms)
    return pd.DataFrame(rows, columns=cols + extra)


PROMPT_COLUMNS = ("arm", "temperature", "suite", "sample", "streams", "batch", "prompt_id", "tokens", "rounds",
                  "accepted", "tau", "loop", "copy_share", "finish", "t_done_s", "batch_tokens", "batch_wall_s",
                  "decode_s", "oracle_tau", "oracle_tau_reachable")


def prompt_frame(runs: list[BatchRun], extra: list[BatchRun] = ()) -> pd.DataFrame:
    """One row per (arm, temperature, prompt, sample) of every run: the benchmark's per-prompt records
    (`results/benchmark_prompts.csv`, committed with the run; `draftlab.verdicts` reads them). `sample`: headline
    (the suites' prompts every arm decodes), extra (a pair's extra prompts), sweep (the concurrency sweep); `batch`:
    the batch's index in its (arm, temperature, suite, sample, streams) group, in run order — the same index is the
    same prompts for every arm (lockstep); `tau` = Σ (accepted + 1) / rounds (the request's τ; empty for a run
    without rounds of its own: AR's τ is 1, a peer's is not measured); `decode_s` the stream's own seconds where
    they are separable (one stream per batch), else empty: a lockstep batch's seconds are shared, `batch_wall_s`;
    `t_done_s` the seconds to the stream's last token (descriptive); `oracle_*` the request's oracle τ where the
    run kept top-K records."""
    from draftlab.bench.copying import reading
    from draftlab.bench.metrics import oracle_taus

    rows, index = [], {}
    for run, sample in [*((r, "sweep" if r.sweep else "headline") for r in runs), *((r, "extra") for r in extra)]:
        key = (run.arm, run.temperature, run.suite, sample, run.concurrency)
        b = index[key] = index.get(key, -1) + 1
        res = run.result
        oracles = oracle_taus(run) if any(rec.topk_ids is not None for rec in res.records) else {}
        for s, pid in enumerate(run.prompt_ids):
            acc = res.accepted[s] if s < len(res.accepted) else []
            rd = reading(run.prompts[s], res.tokens[s])
            rows.append({
                "arm": run.arm, "temperature": float(run.temperature), "suite": run.suite, "sample": sample,
                "streams": run.concurrency, "batch": b, "prompt_id": pid, "tokens": len(res.tokens[s]),
                "rounds": len(acc), "accepted": sum(acc), "tau": round(sum(acc) / len(acc) + 1, 6) if acc else None,
                "loop": bool(rd["loop"]), "copy_share": None if rd["copy_share"] is None else round(rd["copy_share"], 4),
                "finish": res.finish_reason[s] if s < len(res.finish_reason) else None,
                "t_done_s": round(float(res.t_done[s]), 6) if s < len(res.t_done) else None,
                "batch_tokens": res.num_tokens, "batch_wall_s": round(float(res.wall_s), 6),
                "decode_s": round(float(res.wall_s), 6) if len(run.prompt_ids) == 1 else None,
                **{name: round(by[s], 6) if s in by else None for name, by in oracles.items()}})
    return pd.DataFrame(rows, columns=list(PROMPT_COLUMNS))


def headline(detail: dict) -> dict[str, dict]:
    """{arm: {tau_t0, tau_t0_pm, speedup_t0, speedup_t0_pm, tau_t1, ...}} from the detail's summary: the
    numbers `dvc metrics show` prints, one row per arm. `_pm` is half the width of the confidence interval
    (the exact [lo, hi] is in the detail's `summary.<arm>.<metric>_<t>_ci`)."""
    temps = sorted({tk for temps in detail.get("suites", {}).values() for tk in temps})
    out = {}
    for arm, e in detail.get("summary", {}).items():
        row = {"ablation": bool(e.get("ablation"))}
        for tk in temps:
            for m in HEADLINE_METRICS:
                if e.get(f"{m}_{tk}") is None:
                    continue
                row[f"{m}_{tk}"] = e[f"{m}_{tk}"]
                ci = e.get(f"{m}_{tk}_ci")
                if ci and None not in ci:
                    row[f"{m}_{tk}_pm"] = (ci[1] - ci[0]) / 2
        out[arm] = row
    return out


def write_outputs(detail: dict, runs: list[BatchRun], detail_path: str | Path = DETAIL,
                  headline_dir: str | Path = HEADLINE, rounds_path: str | Path | None = paths.BENCH_ROUNDS,
                  root: str | Path = ".", extra: list[BatchRun] = (),
                  prompts_path: str | Path | None = paths.BENCH_PROMPT_RECORDS) -> dict[str, Path]:
    root = Path(root)
    written = {"detail": write_json(root / detail_path, detail),
               "headline": write_json_folder(root / headline_dir, headline(detail))}
    if prompts_path is not None:  # the per-prompt records, committed with the run (draftlab.verdicts reads them)
        frame = prompt_frame(runs, extra)
        written["prompts"] = atomic_write(root / prompts_path, lambda p: frame.to_csv(p, index=False))
    for name, df in plot_frames(detail).items():
        written[name] = atomic_write(root / PLOTS[name], lambda p, df=df: df.to_csv(p, index=False))
    if rounds_path is not None:
        written["rounds"] = write_parquet(root / rounds_path, round_frame(runs))
    return written
