"""The drafter's LightningModule base (`DrafterModule`), extended by every training job.

One multi-anchor forward per batch (all blocks of a sequence at once with the block mask), CE
against the reference tokens weighted by exp(-(k-1)/gamma) and normalised by the weight sum, slot 0
unsupervised, labels outside the draft vocabulary masked and counted. AdamW, warm-up + cosine decay
over the fraction of the budget spent (steps, training minutes or epochs, whichever comes first),
gradient clipping. Validation: simulated τ, per-slot accuracy and top-K coverage against the
target's greedy tokens; the best state by held-out simulated τ is kept; every validation adds a row
to the budget curve (τ vs training minutes). Counters, history and the best state survive a resume.
Under DDP (`trainer.devices` > 1) every step's clock is the ranks' mean and its counters and loss
(`loss_curve`: the global training loss per step) are summed over ranks, so the schedule, the budget
stop and the reports are the same on every rank; validation runs every set on every rank (same figures).

Pretraining trains this module as it is (its step is the off-policy CE); co-training
(`draftlab.recipes.corrector.cotrain`) and SpecOPD (`draftlab.recipes.specopd.module`) extend it.
"""
from __future__ import annotations

import math
import time

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from draftlab.config import PretrainConfig
from draftlab.drafter.masks import block_labels, default_gamma, greedy_block_labels, slot_weights
from draftlab.drafter.model import DFlashDrafter
from draftlab.drafter.vocab import target_to_draft
from draftlab.errors import DraftlabError
from draftlab.kernels.chunked import map_rows
from draftlab.training.features import target_pass
from draftlab.training.metrics import BlockStats


def cpu_state(module: nn.Module) -> dict:
    """A CPU copy of a module's state dict."""
    return {k: v.detach().to("cpu", copy=True) for k, v in module.state_dict().items()}


def global_ratio(num: Tensor, den: Tensor) -> Tensor:
    """num / den with den summed over data-parallel ranks (docs/algorithms.md "The E2E-TV loss"): gradient averaging
    over W ranks then yields Σ_r num_r / Σ_r den_r, so a position's weight does not depend on its rank."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        d = den.detach().clone()
        dist.all_reduce(d)
        return num * dist.get_world_size() / d.clamp(min=1e-12)
    return num / den.clamp(min=1e-12)


def block_targets(batch: dict, greedy: Tensor | None, block_size: int, use_greedy: bool = True) -> tuple[Tensor, Tensor]:
    """The token greedy verification accepts at each proposed slot under teacher forcing:
    -> (targets [B, A, n] target ids, valid [B, A, n] bool). The target's greedy token at a+k when
    known (use_greedy), else the reference token."""
    ids = batch["ids"]
    T = ids.shape[1]
    pos = batch["anchors"][..., None] + torch.arange(1, block_size, device=ids.device)  # [B, A, n]
    tgt = ids.gather(1, pos.clamp(max=T - 1).flatten(1)).view_as(pos)
    if greedy is not None and use_greedy:
        g = greedy.gather(1, pos.clamp(max=T - 1).flatten(1)).view_as(pos)
        tgt = torch.where(g >= 0, g, tgt)
    valid = batch["anchor_valid"][..., None] & (pos < batch["seq_len"][:, None, None])  # [B, A, n]
    return tgt, valid


def lr_factor(progress: float, warmup: float, schedule: str, min_ratio: float) -> float:
    """Multiplier of the base lr at a fraction `progress` of the budget."""
    p = min(max(progress, 0.0), 1.0)
    if warmup > 0 and p < warmup:
        return max(p, 1e-3 * warmup) / warmup
    if schedule == "constant":
        return 1.0
    q = (p - warmup) / max(1.0 - warmup, 1e-9)
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * q))


class DrafterModule(L.LightningModule):
    """The drafter's LightningModule: budget clock, optimiser and schedule, the decay-weighted CE step,
    simulated-τ validation, best-state keeping and resumable counters. Its training step is the
    off-policy CE of pretraining; the co-training and SpecOPD modules extend it (override
    `training_step`, and the `param_groups`, validation, `snapshot` / `restore_best` and
    `result_extras` hooks where they train or validate more than the drafter)."""

    def __init__(self, drafter: DFlashDrafter, cfg: PretrainConfig, total_steps: int = 0,
                 val_names: list[str] | None = None, target=None, val_labels: str = "greedy", teacher=None):
        super().__init__()
        self.drafter, self.cfg, self.total_steps = drafter, cfg, total_steps
        drafter.train_attention = getattr(cfg, "train_attention", "auto")  # auto: flex on CUDA, split on CPU
        self.teacher = teacher  # training.distill.TapTeacher when cfg.kd_weight > 0
        if teacher is not None and drafter.seed_column:
            raise DraftlabError("pretrain.kd_weight > 0 with drafter.seed_logit=true is not implemented (the teacher "
                                "has no seed column); set one of them off")
        self.val_labels = val_labels  # greedy: the target's greedy token; reference: the reference token
        self.__dict__["_target"] = target  # frozen target for on-the-fly features (not a sub-module)
        # the last on-the-fly target pass's logits [B, T, V], kept only when asked (a corrector's penalty needs them)
        self.keep_target_logits, self.target_logits = False, None
        S = drafter.block_size
        self.gamma = cfg.gamma or default_gamma(S)
        self.register_buffer("slot_w", slot_weights(S, self.gamma), persistent=False)  # [S]
        self.register_buffer("t2d", target_to_draft(drafter.draft_vocab, drafter.arch.target_vocab_size).cpu(),
                             persistent=False)  # [V] target id -> draft index / -1
        self.val_names = list(val_names or [])
        self.primary = "heldout" if "heldout" in self.val_names else (self.val_names[0] if self.val_names else "")
        self.train_seconds = 0.0
        self.slot_predictions = 0
        self.uncovered = 0
        self.labels_seen = 0
        self.history: list[dict] = []
        self.best: dict | None = None
        self.last_val: dict = {}
        self.start_step = 0
        self.loss_curve: list[float] = []  # the global training loss of every optimiser step
        self.grad_norm_curve: list[float] = []  # the global gradient's L2 norm of every step (after DDP's all-reduce,
        # before clipping): equal on 1 process and N ranks at step 1 to fp32 rounding (tests/training/test_ddp.py)
        self._t_last: float | None = None
        self._marks = (0, 0, 0)  # the counters at the last step's sync (slot predictions, labels, uncovered)
        self._stats: dict[str, BlockStats] = {}

    # ---- budget -------------------------------------------------------------------------------------
    def progress(self) -> float:
        p = 0.0
        if self.total_steps:
            p = max(p, self.global_step / self.total_steps)
        if self.cfg.max_minutes:
            p = max(p, self.train_seconds / (60.0 * self.cfg.max_minutes))
        return p

    def param_groups(self) -> list[dict]:
        """AdamW parameter groups (weight decay on matrices only); groups without `lr` use cfg.lr. With
        `pretrain.seed_bias_lr` the seed bias (drafter.seed_bias) is a third group at that learning rate."""
        own = getattr(self.cfg, "seed_bias_lr", 0.0) and self.drafter.seed_bias is not None
        named = [(n, p) for n, p in self.drafter.named_parameters() if not (own and n == "seed_bias")]
        decay = [p for n, p in named if p.ndim >= 2]
        no_decay = [p for n, p in named if p.ndim < 2]
        groups = [{"params": decay, "weight_decay": self.cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        if own:
            groups.append({"params": [self.drafter.seed_bias], "weight_decay": 0.0, "lr": self.cfg.seed_bias_lr})
        return groups

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.param_groups(), lr=self.cfg.lr, betas=(0.9, 0.95))
        c = self.cfg
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda _step: lr_factor(self.progress(), c.warmup, c.schedule, c.min_lr_ratio))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    # ---- forward pieces -----------------------------------------------------------------------------------
    def _features(self, batch: dict, greedy: bool) -> tuple[Tensor, Tensor | None]:
        if "feats" in batch:
            return batch["feats"], batch.get("greedy")
        target = self._target
        if target is None:
            raise DraftlabError("no feature cache and no target to compute features with")
        Lc = batch["ctx_valid"].shape[1]
        ids = batch["ids"] if greedy else batch["ids"][:, :Lc]
        valid = torch.arange(ids.shape[1], device=ids.device)[None, :] < batch["seq_len"][:, None]
        feats, g, z = target_pass(target, ids, valid, self.drafter.arch.target_layer_ids, greedy=greedy)
        self.target_logits = z if self.keep_target_logits else None
        return feats[:, :Lc], g

    def drafter_step(self, batch: dict, greedy: bool = False, dense: bool = True) -> dict:
        """The drafter's forward and its decay-weighted CE (+ distillation) on one batch (counters updated).
        Returns loss (num/den, den summed over ranks), num, den, hidden [B, A, S, H], logits
        [B, A, m, Vd] of slots 1..m (m = n unless cfg.max_slot; None with dense=False: the head then
        runs only on the supervised slots, not on padding anchors or slots past the end) and greedy
        [B, T] (the target's greedy tokens, when asked)."""
        labels_greedy = getattr(self.cfg, "labels", "reference") == "greedy"
        feats, g = self._features(batch, greedy=greedy or labels_greedy)
        seeds = self._seeds(batch)  # [B, A, n] | None
        hidden = self.drafter.forward_train(feats, batch["ctx_valid"], batch["ids"], batch["anchors"],
                                            seeds)  # [B, A, S, H]
        S = self.drafter.block_size
        if labels_greedy:  # the target's greedy tokens, valid while the text agrees with them
            labels, in_range = greedy_block_labels(batch["ids"], g, batch["anchors"], S, batch["seq_len"])  # [B, A, S]
        else:
            labels, in_range = block_labels(batch["ids"], batch["anchors"], S, batch["seq_len"])  # [B, A, S]
        m = min(getattr(self.cfg, "max_slot", 0) or S - 1, S - 1)  # supervised slots 1..m
        w = self.slot_w[None, None, :m + 1] * (batch["anchor_valid"][..., None] & in_range[..., :m + 1])  # [B, A, m+1]
        didx = self.t2d[labels[..., :m + 1]]  # [B, A, m+1], -1 outside the draft vocabulary
        col = seeds[..., :m] if self.drafter.reads_seeds else None  # [B, A, m] the slots' seeds (column / bias)
        if self.drafter.seed_column:  # a label outside the draft vocabulary equal to its slot's seed: the column (Vd)
            hit = (didx[..., 1:] < 0) & (self.drafter.seed_ids(col) == labels[..., 1:m + 1])
            didx[..., 1:] = torch.where(hit, torch.full_like(didx[..., 1:], self.drafter.arch.draft_vocab_size),
                                        didx[..., 1:])
        supervised = w > 0
        wk = w[:, :, 1:]  # [B, A, m]: slot 0 never reaches the head
        wv = wk * (didx[:, :, 1:] >= 0)  # [B, A, m]: and labels outside the draft vocabulary carry no CE
        sw = getattr(self.cfg, "seeded_slot_weight", 1.0)
        if seeds is not None and sw != 1.0 and self.training:  # the seeded slots' CE weight (training batches only)
            wv = wv * torch.where(seeds[..., :m] != self.drafter.mask_token_id, sw, 1.0)  # [B, A, m]
        rows = wk > 0  # [B, A, m]
        kd = self.teacher is not None and getattr(self.cfg, "kd_weight", 0.0) > 0
        y = didx[:, :, 1:][rows].clamp(min=0)  # [N]
        # row chunks ([N, Vd] never whole; kernels.chunked); the seed column's per-row extra logit takes the dense head
        chunk = 0 if dense or col is not None else getattr(self.cfg, "chunk_rows", 0)
        if chunk > 0:  # the head, CE and KL `chunk` rows at a time
            logits = None
            th = self.teacher.hidden(self.drafter, feats, batch["anchors"], m, rows) if kd else None  # [N, H]
            ce, kl = self._chunked_ce(hidden[:, :, 1:m + 1][rows], y, th, chunk)
        else:
            if dense:
                logits = self.drafter.logits(hidden[:, :, 1:m + 1], col)  # [B, A, m, Vd (+1 with the seed column)]
                lg = logits[rows]  # [N, Vd]
            else:
                slots = torch.arange(1, m + 1, device=rows.device).expand(rows.shape)[rows]  # [N]
                logits, lg = None, self.drafter.logits(hidden[:, :, 1:m + 1][rows], None if col is None else col[rows],
                                                       slots)
            ce = F.cross_entropy(lg, y, reduction="none")  # [N]
            kl = self.teacher.kl(self.drafter, feats, batch["anchors"], lg, rows) if kd else None  # [N]
        num, den = (ce * wv[rows]).sum(), wv.sum()
        loss = global_ratio(num, den)
        if kd:
            loss = loss + self.cfg.kd_weight * global_ratio((kl * wk[rows]).sum(), wk.sum())
        self.slot_predictions += int((wv > 0).sum())
        self.labels_seen += int(supervised.sum())
        self.uncovered += int((supervised & (didx < 0)).sum())
        return {"loss": loss, "num": num, "den": den, "hidden": hidden, "logits": logits, "greedy": g, "feats": feats}

    def _seeds(self, batch: dict) -> Tensor | None:
        """A seeded drafter's block seeds [B, A, n]: the batch's (training data) or computed from its ids."""
        if not self.drafter.arch.seeded:
            return None
        if "seeds" in batch:
            return batch["seeds"]
        return self.drafter.train_seeds(batch["ids"], batch["anchors"], batch["seq_len"])

    def _chunked_ce(self, h: Tensor, y: Tensor, th: Tensor | None, chunk: int) -> tuple[Tensor, Tensor | None]:
        """CE (and KL from the teacher's rows th [N, H]) of hidden rows h [N, H] vs draft labels y [N]."""
        d = self.drafter
        if th is None:
            return map_rows(lambda hc, yc: F.cross_entropy(d.logits(hc), yc, reduction="none"), chunk, h, y), None

        def both(hc, yc, tc):  # [c, 2]: CE and KL of one chunk from the same logits
            lg = d.logits(hc)
            return torch.stack([F.cross_entropy(lg, yc, reduction="none"), self.teacher.kl_rows(d, tc, lg)], -1)

        out = map_rows(both, chunk, h, y, th)  # [N, 2]
        return out[:, 0], out[:, 1]

    def log_train(self, loss: Tensor, bs: int) -> None:
        # under DDP each rank's loss is W x its share of the global ratio: the mean over ranks is the global loss
        self.log("train/loss", loss.detach(), batch_size=bs, prog_bar=True, sync_dist=self.trainer.world_size > 1)
        self.log("train/lr", self.trainer.optimizers[0].param_groups[0]["lr"], batch_size=bs)
        self.log("train/slot_preds_per_s", self.slot_predictions / max(self.train_seconds, 1e-9), batch_size=bs)
        self.log("train/uncovered_label_frac", self.uncovered / max(self.labels_seen, 1), batch_size=bs)
        self.log("train/minutes", self.train_seconds / 60.0, batch_size=bs)

    def training_step(self, batch: dict, batch_idx: int) -> Tensor:
        out = self.drafter_step(batch, dense=False)
        self.log_train(out["loss"], batch["ids"].shape[0])
        return out["loss"]

    # ---- clock -----------------------------------------------------------------------------------------
    def on_train_start(self) -> None:
        self.start_step = int(self.global_step)
        self._t_last = time.time()
        self._marks = (self.slot_predictions, self.labels_seen, self.uncovered)
        if self.progress() >= 1.0:
            self.trainer.should_stop = True

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

    def on_before_optimizer_step(self, optimizer) -> None:
        grads = [p.grad for p in self.parameters() if p.grad is not None]
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in grads])) if grads else None
        self.grad_norm_curve.append(float(norm) if norm is not None else 0.0)

    def _sync_step(self, dt: float, loss: float) -> tuple[float, float]:
        """One all-reduce per step under DDP: (the ranks' mean step time, the global loss); the counters
        become the sums over ranks. One process: (dt, loss) unchanged."""
        world = self.trainer.world_size
        if world <= 1:
            return dt, loss
        m = self._marks
        own = [self.slot_predictions - m[0], self.labels_seen - m[1], self.uncovered - m[2]]
        v = torch.tensor([dt, loss, *own], dtype=torch.float64, device=self.device)
        v = self.trainer.strategy.reduce(v, reduce_op="sum").tolist()
        self.slot_predictions, self.labels_seen, self.uncovered = (m[i] + int(round(v[2 + i])) for i in range(3))
        self._marks = (self.slot_predictions, self.labels_seen, self.uncovered)
        return v[0] / world, v[1] / world

    # ---- validation ----------------------------------------------------------------------------------------
    def new_val_stats(self):
        """The counters of one validation set (BlockStats: simulated τ, slot accuracy, top-K coverage)."""
        return BlockStats(self.drafter.block_size - 1, self.cfg.topk)

    def on_validation_epoch_start(self) -> None:
        self._stats = {name: self.new_val_stats() for name in self.val_names}

    @torch.no_grad()
    def validation_step(self, batch: dict, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.validate_batch(batch, self._stats[self.val_names[dataloader_idx]])

    def validate_batch(self, batch: dict, stats) -> None:
        """One validation batch into `stats`: the drafter's top-K at every proposed slot vs the targets."""
        feats, greedy = self._features(batch, greedy=True)
        seeds = self._seeds(batch)  # [B, A, n] | None
        hidden = self.drafter.forward_train(feats, batch["ctx_valid"], batch["ids"], batch["anchors"],
                                            seeds)  # [B, A, S, H]
        S = self.drafter.block_size
        tgt, valid = block_targets(batch, greedy, S, self.val_labels == "greedy")  # [B, A, n]
        H = hidden.shape[-1]
        rows = hidden[:, :, 1:].reshape(-1, H)  # [B*A*n, H]
        n = S - 1
        col = seeds.reshape(-1) if self.drafter.reads_seeds else None  # [B*A*n] the slots' seeds (column / bias)
        slots = torch.arange(1, S, device=rows.device).repeat(rows.shape[0] // n)  # [B*A*n]
        part = lambda c: None if col is None else col[c:c + 4096]  # noqa: E731
        K = min(self.cfg.topk, self.drafter.arch.draft_vocab_size or self.drafter.arch.target_vocab_size)
        top = torch.cat([self.drafter.to_target(self.drafter.logits(rows[c:c + 4096], part(c), slots[c:c + 4096])
                                                .topk(K, -1).indices, None if col is None else part(c)[:, None])
                         for c in range(0, rows.shape[0], 4096)])  # [rows, K] target ids
        stats.update(top.view(-1, n, top.shape[-1]), tgt.reshape(-1, n), valid.reshape(-1, n),
                     None if seeds is None else seeds.reshape(-1, n), self.drafter.mask_token_id)

    def on_validation_epoch_end(self) -> None:
        if self.trainer.sanity_checking or not self._stats:
            return
        res = self.val_results()
        self.last_val = res
        for name, r in res.items():
            self.log(f"val/{name}/sim_tau", r["sim_tau"])
            self.log(f"val/{name}/top1", r["top1_mean"])
            self.log(f"val/{name}/top{self.cfg.topk}", r[f"top{self.cfg.topk}_mean"])
        if self.primary in res:
            r = res[self.primary]
            self.log("val/sim_tau", r["sim_tau"], prog_bar=True)
            for k, (a, c) in enumerate(zip(r["slot_acc"], r[f"top{self.cfg.topk}_cov"]), start=1):
                self.log(f"val/slot{k}/top1", a)
                self.log(f"val/slot{k}/top{self.cfg.topk}", c)
            for key in ("seed_hit", "slot_acc_seeded", "slot_acc_unseeded", "seed_override", "seed_override_right"):
                for k, v in enumerate(r.get(key, []), start=1):  # a seeded drafter's per-slot seed report
                    if not math.isnan(v):
                        self.log(f"val/slot{k}/{key}", v)
        self.log("step", float(self.global_step))  # Lightning's step for val/*: the optimiser step, as budget/* and the CSV
        row = {"step": int(self.global_step), "train_minutes": self.train_seconds / 60.0,
               **{name: r["sim_tau"] for name, r in res.items()}}
        if not self.history or self.history[-1]["step"] != row["step"]:
            self.history.append(row)
            if self.logger is not None and hasattr(self.logger, "log_metrics"):  # budget curve: at the optimiser
                curve = {f"budget/{k}_sim_tau": v for k, v in row.items() if k not in ("step", "train_minutes")}
                curve["budget/train_minutes"] = row["train_minutes"]  # step, like val/* and the CSV's `step`
                self.logger.log_metrics(curve, step=row["step"])
        tau = res.get(self.primary, {}).get("sim_tau", float("nan"))
        if not math.isnan(tau) and (self.best is None or tau > self.best["sim_tau"]):
            self.best = {"step": int(self.global_step), "sim_tau": float(tau), "train_minutes": self.train_seconds / 60.0,
                         "metrics": res,
                         "state": self.snapshot()}

    def val_results(self) -> dict:
        """Per validation set: the summary whose `sim_tau` selects the best state."""
        return {name: st.summary() for name, st in self._stats.items() if st.blocks}

    def snapshot(self) -> dict:
        """The trained state kept as the best one (a CPU copy)."""
        return cpu_state(self.drafter)

    def restore_best(self) -> None:
        """Load the best validation state into the trained model(s)."""
        self.drafter.load_state_dict(self.best["state"])

    def result_extras(self) -> dict:
        """What this module reports beyond the common `TrainResult` fields (`TrainResult.extras`)."""
        return {}

    def on_validation_end(self) -> None:
        self._t_last = time.time()  # validation time is not training time

    # ---- resumable extra state -------------------------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["draftlab"] = {"train_seconds": self.train_seconds, "slot_predictions": self.slot_predictions,
                                  "uncovered": self.uncovered, "labels_seen": self.labels_seen,
                                  "history": self.history, "best": self.best, "last_val": self.last_val,
                                  "loss_curve": self.loss_curve, "grad_norm_curve": self.grad_norm_curve}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        st = checkpoint.get("draftlab", {})
        self.train_seconds = float(st.get("train_seconds", 0.0))
        self.slot_predictions = int(st.get("slot_predictions", 0))
        self.uncovered = int(st.get("uncovered", 0))
        self.labels_seen = int(st.get("labels_seen", 0))
        self.history = list(st.get("history", []))
        self.best = st.get("best")
        self.last_val = st.get("last_val", {})
        self.loss_curve = list(st.get("loss_curve", []))
        self.grad_norm_curve = list(st.get("grad_norm_curve", []))
