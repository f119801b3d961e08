"""Run a training stage with its batches logged and, optionally, a real SIGKILL at a chosen point
(tests/training/test_resume_training.py).

`python tests/kill_training.py <stage> ARGS...` runs `python -m draftlab.pipeline <stage> ARGS...` after wrapping:
- `TrainModule.training_step`: every optimiser step appends one JSON line to DRAFTLAB_TEST_BATCH_LOG — the
  step it trains (global step + 1), the batch's sequence ids and anchors (the data order, as the module saw it);
- DRAFTLAB_TEST_KILL=`step:N`: the process sends itself SIGKILL at the end of step N (after the step's callbacks,
  so after a checkpoint that step writes at its batch end, before that step's validation);
  `save:N`: SIGKILL right after last.ckpt of step N is in place (after that step's validation when it validates).
Nothing is cleaned up, flushed or saved on the way out: it is a kill -9, as a machine that loses a process sees it.
`sigint:N` / `sigterm:N`: at the end of step N the process sends itself SIGINT (Ctrl-C) / SIGTERM instead, which
the stage handles (draftlab.interrupts).
"""
from __future__ import annotations

import json
import os
import runpy
import signal


def install(log_path: str, kill: str) -> None:
    from draftlab.training import fit
    from draftlab.training.module import TrainModule

    kind, _, at = kill.partition(":")
    at = int(at) if at else -1
    if kill and kind not in ("step", "save", "sigint", "sigterm"):
        raise SystemExit(f"DRAFTLAB_TEST_KILL={kill!r}: step:N, save:N, sigint:N or sigterm:N")

    def die() -> None:
        os.kill(os.getpid(), {"sigint": signal.SIGINT, "sigterm": signal.SIGTERM}.get(kind, signal.SIGKILL))

    step = TrainModule.training_step

    def logged(self, batch, batch_idx):
        if log_path:
            row = {"step": int(self.global_step) + 1, "seq": batch["seq"].tolist(),
                   "anchors": batch["anchors"].tolist(), "anchor_valid": batch["anchor_valid"].tolist()}
            with open(log_path, "a") as f:
                f.write(json.dumps(row) + "\n")
        return step(self, batch, batch_idx)

    TrainModule.training_step = logged

    end = TrainModule.on_train_batch_end

    def end_then_kill(self, outputs, batch, batch_idx):
        end(self, outputs, batch, batch_idx)
        if kind in ("step", "sigint", "sigterm") and int(self.global_step) == at:
            die()

    TrainModule.on_train_batch_end = end_then_kill

    save = fit.LastCheckpoint._save

    def save_then_kill(self, trainer):
        save(self, trainer)
        if kind == "save" and int(trainer.global_step) == at:
            die()

    fit.LastCheckpoint._save = save_then_kill


if __name__ == "__main__":  # the stage's command, python -m draftlab.pipeline <stage> ARGS, in this process
    install(os.environ.get("DRAFTLAB_TEST_BATCH_LOG", ""), os.environ.get("DRAFTLAB_TEST_KILL", ""))
    runpy.run_module("draftlab.pipeline", run_name="__main__", alter_sys=True)  # sys.argv[1:]: <stage> ARGS
