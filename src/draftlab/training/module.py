"""The one training LightningModule (`TrainModule`), driven by a method's `Objective` (`draftlab.training.objective`).

It holds what every training job shares, read top to bottom as a step runs: the budget clock (steps, training minutes
or epochs, whichever comes first), AdamW over the objective's parameter groups with warm-up + cosine decay over the
fraction of the budget spent (per group, as the objective says), the objective's step and its logs, the counters
(`Counts`), the gradient norm of every step, then validation (the objective's stats per set; simulated τ, per-slot
accuracy and top-K coverage logged; a budget-curve row per validation; the best state by held-out simulated τ kept)
and the resumable state (counters, history, best state, curves and the objective's own). Under DDP
(`trainer.devices` > 1) every step's clock is the ranks' mean and its counters and loss (`loss_curve`: the global
training loss per step) are summed over ranks, so the schedule, the budget stop and the reports are the same on
every rank; validation runs every set on every rank (same figures).
"""
from __future__ import annotations

import math
import time

import lightning as L
import torch
from torch import Tensor

from draftlab.training.objective import Counts, Objective, StepContext


class TrainModule(L.LightningModule):
    """One training job: `objective` (what it trains), `total_steps` (0 = no step budget), `val_names` (the
    validation sets, in the data module's order; `heldout` selects the best state when present)."""

    def __init__(self, objective: Objective, total_steps: int = 0, val_names: list[str] | None = None):
        super().__init__()
        self.objective, self.total_steps = objective, total_steps
        for name, module in objective.modules().items():  # state dict keys: drafter.*, corrector.*
            self.add_module(name, module)
        self.val_names = list(val_names or [])
        self.primary = "heldout" if "heldout" in self.val_names else (self.val_names[0] if self.val_names else "")
        self.train_seconds = 0.0
        self.counts = Counts()
        self.history: list[dict] = []
        self.best: dict | None = None
        self.last_val: dict = {}
        self.start_step = 0
        self.loss_curve: list[float] = []  # the global training loss of every optimiser step
        self.grad_norm_curve: list[float] = []  # the global gradient's L2 norm of every step (after DDP's all-reduce,
        # before clipping): equal on 1 process and N ranks at step 1 to fp32 rounding (tests/training/test_ddp.py)
        self._t_last: float | None = None
        self._marks = (0, 0, 0)  # the counters at the last step's sync
        self._stats: dict = {}

    @property
    def cfg(self):
        return self.objective.cfg

    # ---- budget and optimiser ------------------------------------------------------------------------------------
    def progress(self) -> float:
        p = 0.0
        if self.total_steps:
            p = max(p, self.global_step / self.total_steps)
        if self.cfg.max_minutes:
            p = max(p, self.train_seconds / (60.0 * self.cfg.max_minutes))
        return p

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.objective.param_groups(), lr=self.cfg.lr, betas=(0.9, 0.95))
        factor = self.objective.lr_factor
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, [lambda _step, g=g: factor(g, self.progress()) for g in opt.param_groups])
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    # ---- a step --------------------------------------------------------------------------------------------------
    def on_train_start(self) -> None:
        self.start_step = int(self.global_step)
        self._t_last = time.time()
        self._marks = tuple(self.counts.as_list())
        if self.progress() >= 1.0:
            self.trainer.should_stop = True

    def training_step(self, batch: dict, batch_idx: int) -> Tensor:
        ctx = StepContext(int(self.global_step), self.progress(), self.train_seconds,
                          self.trainer.optimizers[0].param_groups[0]["lr"], self.counts,
                          lambda x: self.trainer.strategy.reduce(x, reduce_op="sum"), self.trainer.world_size)
        out = self.objective.step(batch, ctx)
        bs = batch["ids"].shape[0]
        ddp = self.trainer.world_size > 1
        for name, value in out.logs.items():
            self.log(name, value, batch_size=bs, sync_dist=ddp and name in out.synced)
        return out.loss

    def on_before_optimizer_step(self, optimizer) -> None:
        grads = [p.grad for p in self.parameters() if p.grad is not None]
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in grads])) if grads else None
        self.grad_norm_curve.append(float(norm) if norm is not None else 0.0)

    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
        now = time.time()
        dt = now - self._t_last if self._t_last is not None else 0.0
        self._t_last = now
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        dt, loss = self._sync_step(dt, float(loss.detach()) if isinstance(loss, Tensor) else float("nan"))
        self.train_seconds += dt
        self.loss_curve.append(loss)
        if self.progress() >= 1.0:
            self.trainer.should_stop = True

    def _sync_step(self, dt: float, loss: float) -> tuple[float, float]:
        """One all-reduce per step under DDP: (the ranks' mean step time, the global loss); the counters
        become the sums over ranks. One process: (dt, loss) unchanged."""
        world = self.trainer.world_size
        if world <= 1:
            return dt, loss
        m, c = self._marks, self.counts
        own = [now - before for now, before in zip(c.as_list(), m)]
        v = torch.tensor([dt, loss, *own], dtype=torch.float64, device=self.device)
        v = self.trainer.strategy.reduce(v, reduce_op="sum").tolist()
        c.slot_predictions, c.labels_seen, c.uncovered = (m[i] + int(round(v[2 + i])) for i in range(3))
        self._marks = tuple(c.as_list())
        return v[0] / world, v[1] / world

    # ---- validation ----------------------------------------------------------------------------------------------
    def on_validation_epoch_start(self) -> None:
        self._stats = {name: self.objective.new_val_stats() for name in self.val_names}

    @torch.no_grad()
    def validation_step(self, batch: dict, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.objective.validate_batch(batch, self._stats[self.val_names[dataloader_idx]])

    def on_validation_epoch_end(self) -> None:
        if self.trainer.sanity_checking or not self._stats:
            return
        res = {name: self.objective.val_summary(st) for name, st in self._stats.items() if st.blocks}
        self.last_val = res
        self.log_validation(res)
        step = int(self.global_step)
        row = {"step": step, "train_minutes": self.train_seconds / 60.0, **{n: r["sim_tau"] for n, r in res.items()}}
        new = not self.history or self.history[-1]["step"] != step
        if new:
            self.history.append(row)
            if self.logger is not None and hasattr(self.logger, "log_metrics"):  # budget curve: at the optimiser
                curve = {f"budget/{k}_sim_tau": v for k, v in row.items() if k not in ("step", "train_minutes")}
                curve["budget/train_minutes"] = row["train_minutes"]  # step, like val/* and the CSV's `step`
                self.logger.log_metrics(curve, step=step)
        tau = res.get(self.primary, {}).get("sim_tau", float("nan"))
        if not math.isnan(tau) and (self.best is None or tau > self.best["sim_tau"]):
            self.best = {"step": step, "sim_tau": float(tau), "train_minutes": self.train_seconds / 60.0,
                         "metrics": res, "state": self.objective.snapshot()}
        if res:
            self.objective.after_validation(step, res, self.history[-1] if self.history[-1]["step"] == step else None,
                                            self.primary)

    def log_validation(self, res: dict) -> None:
        """val/<set>/sim_tau, top1, top<K> per set; the primary set's per-slot figures (a seeded drafter's too)."""
        K = self.cfg.topk
        for name, r in res.items():
            self.log(f"val/{name}/sim_tau", r["sim_tau"])
            self.log(f"val/{name}/top1", r["top1_mean"])
            self.log(f"val/{name}/top{K}", r[f"top{K}_mean"])
        if self.primary in res:
            r = res[self.primary]
            self.log("val/sim_tau", r["sim_tau"], prog_bar=True)
            for k, (a, c) in enumerate(zip(r["slot_acc"], r[f"top{K}_cov"]), start=1):
                self.log(f"val/slot{k}/top1", a)
                self.log(f"val/slot{k}/top{K}", c)
            for key in ("seed_hit", "slot_acc_seeded", "slot_acc_unseeded", "seed_override", "seed_override_right"):
                for k, v in enumerate(r.get(key, []), start=1):  # a seeded drafter's per-slot seed report
                    if not math.isnan(v):
                        self.log(f"val/slot{k}/{key}", v)
        self.log("step", float(self.global_step))  # Lightning's step for val/*: the optimiser step, as budget/* and the CSV

    def on_validation_end(self) -> None:
        self._t_last = time.time()  # validation time is not training time

    def restore_best(self) -> None:
        """Load the best validation state into the trained model(s)."""
        self.objective.restore(self.best["state"])

    # ---- resumable state -----------------------------------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        c = self.counts
        checkpoint["draftlab"] = {"train_seconds": self.train_seconds, "slot_predictions": c.slot_predictions,
                                  "uncovered": c.uncovered, "labels_seen": c.labels_seen,
                                  "history": self.history, "best": self.best, "last_val": self.last_val,
                                  "loss_curve": self.loss_curve, "grad_norm_curve": self.grad_norm_curve,
                                  **self.objective.state()}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        st = checkpoint.get("draftlab", {})
        self.train_seconds = float(st.get("train_seconds", 0.0))
        self.counts = Counts(int(st.get("slot_predictions", 0)), int(st.get("labels_seen", 0)),
                             int(st.get("uncovered", 0)))
        self.history = list(st.get("history", []))
        self.best = st.get("best")
        self.last_val = st.get("last_val", {})
        self.loss_curve = list(st.get("loss_curve", []))
        self.grad_norm_curve = list(st.get("grad_norm_curve", []))
        self.objective.load_state(st)
