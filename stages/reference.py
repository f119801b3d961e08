"""Stage reference: the target writes responses to the training / held-out / eval prompts
(data/references.parquet), the drafter's training and validation data."""
from __future__ import annotations

from pathlib import Path

from _common import stage_main, write_report

TARGET = Path("models/target")
OUT = Path("data/references.parquet")


def run(params) -> None:
    import pandas as pd

    from draftlab.params import to_dict
    from draftlab.data.references import select_prompts
    from draftlab.io import write_parquet
    from draftlab.pipeline.reference import generate_references
    from draftlab.verifier.load import load_target
    from draftlab.tracking import stage_run

    cfg, t = params.reference, params.target
    target = load_target(TARGET, t.device, t.dtype, t.attn_implementation)
    window = int(getattr(target.config, "max_position_embeddings", 4096))
    prompts, sel = select_prompts(params.data, cfg, target.tokenizer, window)
    p = to_dict(params)
    with stage_run("reference", {k: p[k] for k in ("target", "data", "reference", "profile")}, params.tracking,
                   {"target": t.name, "profile": params.profile.name}) as mlrun:
        rows, stats = generate_references(target, prompts, cfg.max_new_tokens, cfg.batch_size, cfg.temperature,
                                          cfg.top_p, cfg.top_k, cfg.seed, engine=cfg.engine)
        df = pd.DataFrame(rows)
        write_parquet(OUT, df)
        per_split = {s: {"sequences": int((df.split == s).sum()),
                         "tokens": int(df[df.split == s].response_ids.map(len).sum())} for s in ("train", "heldout", "eval")}
        metrics = {**stats, "per_split": per_split, "selection": sel, "target": t.name, "profile": params.profile.name}
        write_report("reference", metrics)
        mlrun.log_metrics(metrics)


if __name__ == "__main__":
    raise SystemExit(stage_main("reference", run))
