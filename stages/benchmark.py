"""Stage benchmark: AR vs speculative arms on the eval suites at T=0 / T=1 and a concurrency sweep
(metrics/benchmark.json with a per-arm `summary`, plots/benchmark_*.csv, data/benchmark_rounds.parquet).
The library lives in draftlab.bench; this script only loads, wires and writes."""
from __future__ import annotations

from pathlib import Path

from _common import stage_main

TARGET = Path("models/target")
METRICS = Path("metrics/benchmark.json")
ROUNDS = Path("data/benchmark_rounds.parquet")


def encode(tokenizer, text: str, thinking: bool, max_tokens: int) -> list[int]:
    from draftlab.data.templates import encode_prompt

    return encode_prompt(tokenizer, text, thinking, max_tokens)[0]


def select(params, tokenizer, window: int):
    """Fixed seeded subsample per suite, and a round-robin pool over the suites for the sweep."""
    from draftlab.bench import PromptItem
    from draftlab.data.suites import dedupe, load_suite, rank

    cfg = params.benchmark
    max_tokens = min(params.data.max_prompt_tokens, max(16, window - max(cfg.max_new_tokens, cfg.concurrency_max_new_tokens)))
    need_pool = max(cfg.concurrency or [0])
    ranked = {s: rank(dedupe(load_suite(s))[0], cfg.seed) for s in cfg.suites}
    enc = lambda p: PromptItem(p.id, p.suite, encode(tokenizer, p.text, params.data.thinking, max_tokens))  # noqa: E731
    suites = {s: [enc(p) for p in (r[: cfg.prompts_per_suite] if cfg.prompts_per_suite else r)] for s, r in ranked.items()}
    pool = []
    for i in range(max(len(r) for r in ranked.values())):
        pool += [r[i] for r in ranked.values() if i < len(r)]
        if len(pool) >= need_pool:
            break
    return suites, [enc(p) for p in pool[:need_pool]]


def run(params) -> None:
    import torch
    from tqdm import tqdm

    from draftlab.bench import ArmContext, build_arm, compute, run_benchmark, write_outputs
    from draftlab.bench.runner import plan_size
    from draftlab.bench.simulate import simulated_tau
    from draftlab.params import to_dict
    from draftlab.verifier.load import load_target
    from draftlab.tracking import stage_run

    cfg, t = params.benchmark, params.target
    target = load_target(TARGET, t.device, t.dtype, t.attn_implementation)
    tok = target.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else (target.eos_token_ids or [0])[0]
    eos = target.eos_token_ids
    window = int(getattr(target.config, "max_position_embeddings", 4096))
    suites, pool = select(params, tok, window)

    drafters: dict = {}

    def load(path: str):
        if path not in drafters:
            from draftlab.drafter import load_drafter

            drafters[path] = load_drafter(path, target)
        return drafters[path]

    ctx = ArmContext(target, cfg, pad, load)
    arms = {name: build_arm(name, ctx) for name in cfg.arms}
    p = to_dict(params)
    with stage_run("benchmark", {k: p[k] for k in ("target", "data", "benchmark", "profile")}, params.tracking,
                   {"target": t.name, "profile": params.profile.name}) as mlrun:
        bar = tqdm(total=plan_size(cfg, suites, len(arms)), desc="benchmark", unit="gen")

        def tick(msg: str) -> None:
            bar.set_postfix_str(msg, refresh=False)
            bar.update(1)

        with torch.no_grad():
            runs = run_benchmark(arms, suites, cfg, eos, target.device, tick, pool)
        bar.close()
        detail = compute(runs.runs, runs.arms, base_arm=cfg.concurrency_base)
        if cfg.simulated:
            detail["simulated"] = simulated(arms, runs.runs, suites, detail, cfg, target, simulated_tau)
        detail["setup"] = {"target": t.name, "profile": params.profile.name, "device": str(target.device),
                           "dtype": str(target.dtype).replace("torch.", ""), "threads": torch.get_num_threads(),
                           "prompts": {s: len(v) for s, v in suites.items()}, "sweep_pool": len(pool),
                           "drafters": {a.name: _drafter_info(a.drafter) for a in arms.values() if a.drafter is not None}}
        detail["config"] = to_dict(params.benchmark)
        write_outputs(detail, runs.runs, METRICS, ROUNDS if cfg.record_rounds else None)
        mlrun.log_metrics({"summary": detail["summary"], "suites": detail["suites"]})
        for arm, e in detail["summary"].items():
            print(f"[benchmark] {arm}: " + ", ".join(f"{k}={v:.3g}" for k, v in e.items() if isinstance(v, float)))


def simulated(arms, runs, suites, detail, cfg, target, simulated_tau) -> dict:
    """Teacher-forced τ of each speculative arm's drafter over that arm's own T=0 outputs, beside engine τ."""
    out: dict = {}
    for name, arm in arms.items():
        if not arm.speculative or arm.drafter is None:
            continue
        paths = ("train", "infer") if hasattr(arm.drafter, "forward_train") else ("infer",)
        per_suite = {}
        for suite in suites:
            seqs = [(pr, tk) for r in runs if r.arm == name and r.suite == suite and r.temperature == 0.0 and not r.sweep
                    for pr, tk in zip(r.prompts, r.result.tokens)]
            if not seqs:
                continue
            sim = simulated_tau(target, arm.drafter, seqs, cfg.simulated_anchor_stride, paths)
            sim["engine_tau_t0"] = detail["suites"].get(suite, {}).get("t0", {}).get(name, {}).get("tau")
            per_suite[suite] = sim
        out[name] = per_suite
        vals = [s.get(paths[0]) for s in per_suite.values() if s.get(paths[0]) is not None]
        if vals and name in detail["summary"]:
            detail["summary"][name]["simulated_tau_t0"] = sum(vals) / len(vals)
    return out


def _drafter_info(drafter) -> dict:
    spec = getattr(drafter, "spec", None)
    if spec is None:
        return {"block_size": drafter.block_size}
    return {"block_size": spec.block_size, "layers": spec.num_layers, "taps": list(spec.target_layer_ids),
            "draft_vocab_size": spec.draft_vocab_size}


if __name__ == "__main__":
    raise SystemExit(stage_main("benchmark", run))
