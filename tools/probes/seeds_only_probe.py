"""What seeds-only rounds buy the `dflash-seeded-cut` arm (seeded.verify.full_span), measured side by side.

    .venv/bin/python tools/probes/seeds_only_probe.py          # 4 prompts per suite, 128 new tokens, T=0
    .venv/bin/python tools/probes/seeds_only_probe.py --prompts 2 --new 64 --out /tmp/so.json
    .venv/bin/python tools/probes/seeds_only_probe.py --prompts 2 --context benchmark --out metrics/seeds_only_context.json

On the pipeline's target and seeded drafter (models/target, models/drafter/seeded; run `dvc repro` first) and the
benchmark's own prompts (the first N of each suite, as `benchmark.prompts_per_suite` selects them), each prompt
is decoded at T=0 by four arms in lockstep (bench/lockstep.py, as the `cpu` benchmark does; their order rotated from
one prompt to the next): `ar`, `pld`, the
cut arm with `full_span=seeds` (a fully seeded round runs no draft pass) and with `full_span=draft` (every round
drafts: the arm of the 2026-12-04 run). Per arm: τ (mean accepted + 1 over rounds, per prompt then averaged),
tokens/s (generated tokens / wall time, prefill included), the share of rounds without a draft pass and the
mean round time split; per pair, the tokens/s ratio as the geometric mean of per-prompt ratios with a 95%
bootstrap interval over prompts (2000 resamples, draftlab.stats), and Δτ with its interval. Greedy output must equal AR's on
every prompt (checked). `--context benchmark` adds every other arm the benchmark runs (`benchmark.arms`) to the
lockstep, decoded and discarded, so the four are timed in the benchmark's company (14 arms) instead of alone (4).
OpenMP's wait policy is the caller's (recorded as `setup.omp_wait_policy`; the pipeline's stages set
OMP_WAIT_POLICY=PASSIVE, so prefix the command with it to time as the benchmark does). Writes
metrics/seeds_only.json atomically (`--out`). Heavy: run with the machine idle.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from statistics import fmean as mean

from draftlab import paths
from draftlab.stats import bootstrap_interval, geometric_mean as geo

ROOT = Path(__file__).resolve().parents[2]
ARMS = ("ar", "pld", "cut-seeds", "cut-draft")
PAIRS = (("cut-seeds", "cut-draft"), ("cut-seeds", "pld"), ("cut-draft", "pld"), ("pld", "ar"), ("cut-seeds", "ar"))


def interval(values: list[float], stat) -> list[float]:
    """95% percentile bootstrap interval of stat(values) over prompts (draftlab.stats, 2000 resamples)."""
    lo, _, hi = bootstrap_interval(values, stat)
    return [lo, hi]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=4, help="prompts per suite (default 4)")
    ap.add_argument("--new", type=int, default=128, help="new tokens per prompt (default 128)")
    ap.add_argument("--context", choices=("probe", "benchmark"), default="probe",
                    help="probe: the four arms alone in the lockstep; benchmark: with the benchmark's other arms")
    ap.add_argument("--out", default=str(ROOT / paths.SEEDS_ONLY))
    a = ap.parse_args(argv)
    if a.prompts < 1 or a.new < 1:
        print("seeds_only_probe: --prompts and --new must be >= 1", file=sys.stderr)
        return 2
    import dataclasses

    import torch

    from draftlab.arms.grammar import SpeculativeArm
    from draftlab.bench.lockstep import Lockstep
    from draftlab.decoding import SamplingParams
    from draftlab.decoding.width import SpanProposal
    from draftlab.errors import DraftlabError
    from draftlab.io import write_json
    from draftlab.kernels.linear import install
    from draftlab.params import load_params
    from draftlab.pipeline import layout
    from draftlab.pipeline.benchmark import build_arms, select
    from draftlab.verifier.load import load_target

    try:
        p = load_params(ROOT / "params.yaml")
        folder = Path(layout.checkpoints(p.benchmark.drafter).seeded_drafter)
        if not (folder / "config.json").exists() or not (Path(paths.TARGET)).exists():
            raise DraftlabError(f"no trained seeded drafter at {folder} (or no {paths.TARGET}); run `dvc repro` first")
        t = p.target
        target = load_target(paths.TARGET, t.device, t.dtype, t.attn_implementation)
        install(target.model, t.linear)
        cfg = dataclasses.replace(p.benchmark, prompts_per_suite=a.prompts, pair_prompts_per_suite={})
        tok = target.tokenizer
        pad = tok.pad_token_id if tok.pad_token_id is not None else (target.eos_token_ids or [0])[0]
        window = int(getattr(target.config, "max_position_embeddings", 4096))
        suites, _ = select(cfg, p.data, tok, window, p.reference)
        fillers = [n for n in cfg.running_arms() if n not in ("ar", "pld", "dflash-seeded-cut")] \
            if a.context == "benchmark" else []
        built = build_arms(target, cfg, layout.checkpoints(cfg.drafter), pad, p.pld, p.drafter.block_size,
                           names=["ar", "pld", "dflash-seeded-cut", *fillers], seeded_verify=p.seeded.verify)
    except DraftlabError as e:
        print(f"seeds_only_probe: {e}", file=sys.stderr)
        return 2
    cut, v = built["dflash-seeded-cut"], p.seeded.verify
    arms = {"ar": built["ar"], "pld": built["pld"]}
    for mode in ("seeds", "draft"):
        step = SpanProposal(cut.drafter.mask_token_id, v.rule, v.extra, v.min_prob, full_span=mode)
        arms[f"cut-{mode}"] = SpeculativeArm(f"cut-{mode}", target, cut.drafter, step, pad)
    rows = []
    sp = SamplingParams()
    with torch.no_grad():
        for suite, items in suites.items():
            for item in items[:a.prompts]:
                names = [*ARMS, *fillers]
                k = len(rows) % len(names)  # the arms' order rotates from prompt to prompt, as the benchmark's
                order = names[k:] + names[:k]
                every = {**arms, **{n: built[n] for n in fillers}}
                jobs = [lambda arm=every[n]: arm.generate([item.ids], a.new, sp, target.eos_token_ids, None, 1)
                        for n in order]
                res = {n: r for n, r in zip(order, Lockstep().run(jobs)) if n in ARMS}
                row = {"prompt": item.id, "suite": suite}
                for n, r in res.items():
                    if r.tokens != res["ar"].tokens:
                        print(f"seeds_only_probe: {n} differs from AR on {item.id}", file=sys.stderr)
                        return 1
                    acc = r.accepted[0] if r.accepted and r.accepted[0] else []
                    drafted = [int(x.extras["drafted"][0]) for x in r.records if "drafted" in x.extras]
                    rt = r.round_times.mean(0).tolist() if len(r.round_times) else []
                    row[n] = {"tokens": r.num_tokens, "wall_s": r.wall_s, "tokens_per_s": r.num_tokens / r.wall_s,
                              "tau": mean([x + 1 for x in acc]) if acc else 1.0, "rounds": len(r.round_times),
                              "seeds_only_share": (1 - mean(drafted)) if drafted else None,
                              "round_ms": dict(zip(r.phases, [1e3 * x for x in rt]))}
                rows.append(row)
                print(item.id, {n: round(row[n]["tokens_per_s"], 2) for n in ARMS}, flush=True)
    summary = {n: {"tau": mean([r[n]["tau"] for r in rows]),
                   "tokens_per_s": mean([r[n]["tokens_per_s"] for r in rows]),
                   "seeds_only_share": (mean([r[n]["seeds_only_share"] for r in rows])
                                        if rows[0][n]["seeds_only_share"] is not None else None),
                   "round_ms": {k: mean([r[n]["round_ms"].get(k, 0.0) for r in rows]) for k in rows[0][n]["round_ms"]}}
               for n in ARMS}
    pairs = []
    for x, y in PAIRS:
        ratios = [r[x]["tokens_per_s"] / r[y]["tokens_per_s"] for r in rows]
        dtau = [r[x]["tau"] - r[y]["tau"] for r in rows]
        pairs.append({"pair": f"{x} vs {y}", "tokens_per_s_ratio": geo(ratios), "ratio_ci": interval(ratios, geo),
                      "tau_diff": mean(dtau), "tau_diff_ci": interval(dtau, mean)})
    out = {"schema": "draftlab-seeds-only-v1", "setup": {"prompts_per_suite": a.prompts, "new_tokens": a.new,
           "suites": list(suites), "temperature": 0.0, "interleave": "rounds", "order": "rotated per prompt",
           "context": a.context, "fillers": fillers,
           "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),  # the stages set it (draftlab.omp)
           "verify": dataclasses.asdict(v),
           "threads": torch.get_num_threads()}, "summary": summary, "pairs": pairs, "prompts": rows}
    write_json(a.out, out)
    for q in pairs:
        print(f"{q['pair']}: tokens/s ratio {q['tokens_per_s_ratio']:.3f} [{q['ratio_ci'][0]:.3f}, "
              f"{q['ratio_ci'][1]:.3f}], Δτ {q['tau_diff']:+.3f} [{q['tau_diff_ci'][0]:+.3f}, {q['tau_diff_ci'][1]:+.3f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
