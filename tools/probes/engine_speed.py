"""The engine before and after the static-slot rebuild, side by side: `ar` and `dflash-seeded-cut` of the previous
engine (the Hugging Face forward over a growing cache with masked holes) and of today's, in one lockstep run.

    .venv/bin/python tools/probes/engine_speed.py --old-rev 066929d [--target DIR --drafter DIR] [--prompts 4]

The previous engine is the library as it was at `--old-rev`, extracted from git into a temporary folder as the
package `draftlab_old` (its clock is today's, so one lockstep schedules both). Both engines run the same Hugging
Face weights (one model object), the same seeded drafter folder, the benchmark's prompts (`select`, the first N of
each suite) at T=0, four arms in lockstep with their order rotated per prompt. Greedy tokens must be equal across
all four arms' pairs (checked). Per pair: the tokens/s ratio new / old as the geometric mean of per-prompt ratios
with a 95% bootstrap interval over prompts. Writes metrics/engine_speed.json. Heavy: run with the machine idle.
"""
from __future__ import annotations

import argparse
import importlib
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from draftlab import paths

ROOT = Path(__file__).resolve().parents[2]
ARMS = ("ar-old", "ar-new", "cut-old", "cut-new")


def extract_old(rev: str, into: Path) -> None:
    """src/draftlab at `rev` -> into/draftlab_old, every `draftlab` import renamed, its clock today's."""
    tar = subprocess.run(["git", "archive", rev, "src/draftlab"], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=tar, check=True)
    pkg = into / "draftlab_old"
    (into / "src" / "draftlab").rename(pkg)
    for f in pkg.rglob("*.py"):
        f.write_text(re.sub(r"\bdraftlab\b(?=[. ])", "draftlab_old", f.read_text()))
    (pkg / "decoding" / "clock.py").write_text("from draftlab.decoding.clock import *  # noqa: F401,F403\n"
                                               "from draftlab.decoding.clock import _local  # noqa: F401\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--old-rev", default="066929d", help="the commit of the previous engine")
    ap.add_argument("--target", default=paths.TARGET)
    ap.add_argument("--drafter", default=paths.SEEDED_DRAFTER, help="a seeded drafter folder")
    ap.add_argument("--prompts", type=int, default=4, help="prompts per suite")
    ap.add_argument("--new", type=int, default=128, help="new tokens per prompt")
    ap.add_argument("--out", default=str(ROOT / paths.ENGINE_SPEED))
    a = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT / "src"))
    tmp = Path(tempfile.mkdtemp(prefix="draftlab-old-"))
    extract_old(a.old_rev, tmp)
    sys.path.insert(0, str(tmp))
    import dataclasses

    import torch

    from draftlab.arms.grammar import ARArm, SpeculativeArm
    from draftlab.bench.lockstep import Lockstep
    from draftlab.decoding import SamplingParams
    from draftlab.decoding.width import SpanProposal
    from draftlab.drafter.checkpoint import load_drafter
    from draftlab.io import write_json
    from draftlab.kernels.linear import install
    from draftlab.params import load_params
    from draftlab.pipeline.benchmark import select
    from draftlab.stats import bootstrap_interval
    from draftlab.verifier.load import load_target

    old = {m: importlib.import_module(f"draftlab_old.{m}") for m in
           ("bench.arms", "decoding.width", "drafter.checkpoint", "verifier.model")}
    p = load_params(ROOT / "params.yaml")
    t = p.target
    target = load_target(a.target, t.device, t.dtype, t.attn_implementation)
    install(target.model, t.linear)
    old_target = old["verifier.model"].TargetModel(target.model, target.tokenizer, target.name)
    tok = target.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else (target.eos_token_ids or [0])[0]
    cfg = dataclasses.replace(p.benchmark, prompts_per_suite=a.prompts, pair_prompts_per_suite={})
    suites, _ = select(cfg, p.data, tok, int(getattr(target.config, "max_position_embeddings", 4096)), p.reference)
    v = p.seeded.verify
    new_d = load_drafter(a.drafter, target)
    old_d = old["drafter.checkpoint"].load_drafter(a.drafter, old_target)
    arms = {"ar-new": ARArm(target, pad), "ar-old": old["bench.arms"].ARArm(old_target, pad),
            "cut-new": SpeculativeArm("cut-new", target, new_d, SpanProposal(
                new_d.mask_token_id, v.rule, v.extra, v.min_prob, full_span=v.full_span), pad),
            "cut-old": old["bench.arms"].SpeculativeArm("cut-old", old_target, old_d, old["decoding.width"].SpanProposal(
                old_d.mask_token_id, v.rule, v.extra, v.min_prob, full_span=v.full_span), pad)}
    rows, sp = [], SamplingParams()
    with torch.no_grad():
        for suite, items in suites.items():
            for item in items[:a.prompts]:
                k = len(rows) % len(ARMS)
                order = ARMS[k:] + ARMS[:k]
                jobs = [lambda arm=arms[n]: arm.generate([item.ids], a.new, sp, target.eos_token_ids, None, 0)
                        for n in order]
                res = dict(zip(order, Lockstep().run(jobs)))
                if any(r.tokens != res["ar-old"].tokens for r in res.values()):
                    print(f"engine_speed: the arms' greedy tokens differ on {item.id}", file=sys.stderr)
                    return 1
                rows.append({"prompt": item.id, "suite": suite,
                             **{n: {"tokens": r.num_tokens, "wall_s": r.wall_s, "tokens_per_s": r.num_tokens / r.wall_s,
                                    "rounds": len(r.round_times)} for n, r in res.items()}})
                print(item.id, {n: round(rows[-1][n]["tokens_per_s"], 2) for n in ARMS}, flush=True)
    pairs = {}
    for x, y in (("ar-new", "ar-old"), ("cut-new", "cut-old"), ("cut-new", "ar-new"), ("cut-old", "ar-old")):
        ratios = [r[x]["tokens_per_s"] / r[y]["tokens_per_s"] for r in rows]
        lo, mid, hi = bootstrap_interval(ratios)
        pairs[f"{x} / {y}"] = {"ratio": mid, "ci95": [lo, hi], "prompts": len(ratios)}
        print(f"{x} / {y}: {mid:.3f} [{lo:.3f}, {hi:.3f}]")
    write_json(a.out, {"schema": "draftlab-engine-speed-v1", "setup": {
        "old_rev": a.old_rev, "target": a.target, "drafter": a.drafter, "prompts_per_suite": a.prompts,
        "new_tokens": a.new, "temperature": 0.0, "interleave": "rounds, order rotated per prompt",
        "threads": torch.get_num_threads(), "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "statistic": "geometric mean of per-prompt tokens/s ratios, 95% percentile bootstrap over prompts"},
        "pairs": pairs, "prompts": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
