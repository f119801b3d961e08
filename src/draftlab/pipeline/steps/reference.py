"""Stage reference: the target writes responses to the training / held-out / eval prompts
(data/references.parquet), the drafter's training and validation data.

Finished batches go to the work folder data/references.shards/ (plan.json + batch-NNNNN.parquet) as they
finish, so a killed run resumes from them; the folder is deleted once the final file and report are written.
With reference.engine=openai the servers in reference.servers generate (docs/references.md) and only the
target's tokenizer, config and EOS ids are read here."""
from __future__ import annotations

from pathlib import Path

from draftlab import paths
from draftlab.pipeline.stage import write_report

TARGET = Path(paths.TARGET)
OUT = Path(paths.REFERENCES)
SHARDS = Path(paths.REFERENCE_SHARDS)


def run(params) -> None:
    import shutil

    import pandas as pd

    from draftlab.params import to_dict
    from draftlab.data.references import select_prompts
    from draftlab.io import write_parquet
    from draftlab.recipes.reference.recipe import generate_references
    from draftlab.recipes.reference.openai_engine import OpenAIEngine
    from draftlab.verifier.load import load_target, load_target_info
    from draftlab.tracking import stage_run

    cfg, t = params.reference, params.target
    client = None
    if cfg.engine == "openai":
        target = load_target_info(TARGET)
        client = OpenAIEngine(cfg.servers, target.eos_token_ids, cfg.server_model, cfg.concurrency, cfg.timeout_s,
                              cfg.retries, cfg.temperature, cfg.top_p, cfg.top_k)
    else:
        target = load_target(TARGET, t.device, t.dtype, t.attn_implementation)
        target.compile_steps(params.engine.resolved(target.device.type))  # engine.compile (auto: on CUDA only)
    window = int(getattr(target.config, "max_position_embeddings", 4096))
    prompts, sel = select_prompts(params.data, cfg, target.tokenizer, window)
    compiled = None
    if cfg.engine == "ar" and getattr(target, "compiled", "off") != "off":  # shapes declared, graphs compiled first
        from draftlab.recipes.reference.recipe import compile_run

        compiled = compile_run(target, prompts, cfg.max_new_tokens, cfg.batch_size, cfg.temperature, params.engine)
    p = to_dict(params)
    with stage_run("reference", {k: p[k] for k in ("target", "data", "reference", "profile")}, params.tracking,
                   {"target": t.name, "profile": params.profile.name}) as mlrun:
        rows, stats = generate_references(target, prompts, cfg.max_new_tokens, cfg.batch_size, cfg.temperature,
                                          cfg.top_p, cfg.top_k, cfg.seed, engine=cfg.engine,
                                          shards=SHARDS, identity={"target": p["target"], **(
                                              {"server_model": sorted(set(client.models.values()))} if client else {})},
                                          client=client, agreement_sample=cfg.agreement_sample,
                                          agreement_threshold=cfg.agreement_threshold)
        df = pd.DataFrame(rows)
        write_parquet(OUT, df)
        per_split = {s: {"sequences": int((df.split == s).sum()),
                         "tokens": int(df[df.split == s].response_ids.map(len).sum())} for s in ("train", "heldout", "eval")}
        metrics = {**stats, "per_split": per_split, "selection": sel, "target": t.name, "profile": params.profile.name,
                   **({"compiled": compiled} if compiled else {})}
        write_report("reference", metrics)
        mlrun.log_metrics(metrics)
    shutil.rmtree(SHARDS)  # the final file holds every row now; a later run starts afresh
