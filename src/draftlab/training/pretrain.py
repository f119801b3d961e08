"""Off-policy DFlash pretraining on the target's reference responses (SPEC §1, "Training").

- `DrafterDataModule`: training batches of whole sequences, each with up to `anchors_per_seq`
  random anchors among response positions that leave room for a full block (length-bucketed to
  limit padding); validation sets = held-out references (`split == "heldout"`), each eval suite
  (`split == "eval"`) and a small sample of training sequences (to see memorisation), with
  deterministic strided anchors. Tap features come from a `FeatureStore` (disk cache) or, when it
  is None, from the frozen target inside the step.
- `PretrainModule`: one multi-anchor forward per batch (all blocks of a sequence at once with the
  block mask), CE against the reference tokens weighted by exp(-(k-1)/gamma) and normalised by
  the weight sum, slot 0 unsupervised, labels outside the draft vocabulary masked and counted.
  AdamW, warm-up + cosine decay over the fraction of the budget spent (steps, training minutes or
  epochs, whichever comes first), gradient clipping. Validation: simulated τ, per-slot accuracy and
  top-K coverage against the target's greedy tokens; the best state by held-out simulated τ is
  kept; every validation adds a row to the budget curve (τ vs training minutes).
- `train_drafter(...)`: builds the Trainer, resumes from `workdir/last.ckpt` when present (the
  step count, optimiser, schedule, training clock, history and best state all continue), runs a
  final validation, loads the best state into the drafter and returns a `TrainResult`.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Sampler

from draftlab.config import PretrainConfig
from draftlab.errors import DraftlabError
from draftlab.drafter.masks import block_labels, default_gamma, sample_anchors, slot_weights, strided_anchors
from draftlab.drafter.model import DFlashDrafter
from draftlab.drafter.vocab import target_to_draft
from draftlab.training.features import FeatureStore, SequenceSet, target_features
from draftlab.training.metrics import BlockStats

# ---- data -------------------------------------------------------------------------------------------


class BucketBatchSampler(Sampler):
    """Shuffled batches of sequence indices; within windows of `window` batches, sequences are
    sorted by length so a batch pads little. A new shuffle every pass."""

    def __init__(self, indices: list[int], lengths: np.ndarray, batch_size: int, seed: int, window: int = 50):
        self.indices, self.lengths, self.batch_size, self.seed, self.window = list(indices), lengths, batch_size, seed, window
        self.epoch = 0

    def __len__(self) -> int:
        return math.ceil(len(self.indices) / self.batch_size)

    def __iter__(self):
        rng = np.random.default_rng(self.seed + self.epoch)
        self.epoch += 1
        perm = [self.indices[i] for i in rng.permutation(len(self.indices))]
        span = self.batch_size * self.window
        batches = []
        for w in range(0, len(perm), span):
            chunk = sorted(perm[w:w + span], key=lambda i: int(self.lengths[i]))
            batches += [chunk[j:j + self.batch_size] for j in range(0, len(chunk), self.batch_size)]
        for j in rng.permutation(len(batches)):
            yield batches[j]


class TrainBlocks(Dataset):
    """Item = (sequence index, random anchors [<=A]); indexed by sequence index."""

    def __init__(self, seqs: SequenceSet, block_size: int, anchors_per_seq: int):
        self.seqs, self.S, self.A = seqs, block_size, anchors_per_seq

    def __len__(self) -> int:
        return len(self.seqs)

    def __getitem__(self, i: int):
        n = int(self.seqs.lengths[i])
        return i, sample_anchors(n, int(self.seqs.prompt_len[i]), self.S, self.A)


class ValBlocks(Dataset):
    """Deterministic validation blocks: every stride-th anchor, chunked by `chunk` per item."""

    def __init__(self, seqs: SequenceSet, indices: list[int], block_size: int, stride: int, chunk: int):
        self.items = []
        for i in indices:
            a = strided_anchors(int(seqs.lengths[i]), int(seqs.prompt_len[i]), block_size, stride)
            self.items += [(i, a[j:j + chunk]) for j in range(0, len(a), chunk)]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, k: int):
        return self.items[k]


class Collate:
    """Pads a list of (sequence, anchors) into a batch dict:
    ids [B, T], seq_len [B], anchors [B, A] (+ anchor_valid), ctx_valid [B, Lc] (Lc = largest
    anchor: blocks never see position >= their anchor), and from the store feats [B, Lc, F] fp32
    and greedy [B, T] (target greedy token per position, -1 unknown)."""

    def __init__(self, seqs: SequenceSet, store: FeatureStore | None):
        self.seqs, self.store = seqs, store

    def __call__(self, items) -> dict:
        B = len(items)
        lens = [int(self.seqs.lengths[i]) for i, _ in items]
        T, A = max(lens), max(max(len(a) for _, a in items), 1)
        ids = torch.zeros(B, T, dtype=torch.long)
        anchors = torch.zeros(B, A, dtype=torch.long)
        anchor_valid = torch.zeros(B, A, dtype=torch.bool)
        for r, (i, a) in enumerate(items):
            ids[r, :lens[r]] = torch.from_numpy(self.seqs.seq(i).astype(np.int64))
            anchors[r, :len(a)] = a
            anchor_valid[r, :len(a)] = True
        Lc = max(int(anchors.max()), 1)
        seq_len = torch.tensor(lens)
        batch = {"seq": torch.tensor([i for i, _ in items]), "ids": ids, "seq_len": seq_len, "anchors": anchors,
                 "anchor_valid": anchor_valid, "ctx_valid": torch.arange(Lc)[None, :] < seq_len[:, None]}
        if self.store is not None:
            feats = np.zeros((B, Lc, self.store.feats.shape[1]), dtype=np.float32)
            greedy = torch.full((B, T), -1, dtype=torch.long)
            for r, (i, _) in enumerate(items):
                n = min(Lc, lens[r])
                feats[r, :n] = self.store.features(i, n)
                greedy[r, :lens[r]] = torch.from_numpy(self.store.greedy(i).astype(np.int64))
            batch["feats"], batch["greedy"] = torch.from_numpy(feats), greedy
        return batch


class DrafterDataModule(L.LightningDataModule):
    def __init__(self, seqs: SequenceSet, cfg: PretrainConfig, block_size: int, store: FeatureStore | None = None,
                 train_sample: int = 16):
        super().__init__()
        self.seqs, self.cfg, self.S, self.store = seqs, cfg, block_size, store
        self.train_idx = seqs.indices("train")
        if not self.train_idx:
            raise DraftlabError("the references have no split=='train' sequences to train the drafter on")
        self.val_sets: dict[str, list[int]] = {}
        if seqs.indices("heldout"):
            self.val_sets["heldout"] = seqs.indices("heldout")
        for suite in sorted(set(seqs.suite[seqs.split == "eval"].tolist())):
            self.val_sets[suite] = seqs.indices("eval", suite)
        if train_sample:
            step = max(len(self.train_idx) // train_sample, 1)
            self.val_sets["train_sample"] = self.train_idx[::step][:train_sample]
        self.collate = Collate(seqs, store)

    @property
    def val_names(self) -> list[str]:
        return list(self.val_sets)

    def steps_per_epoch(self) -> int:
        return math.ceil(len(self.train_idx) / self.cfg.batch_size)

    def train_dataloader(self) -> DataLoader:
        sampler = BucketBatchSampler(self.train_idx, self.seqs.lengths, self.cfg.batch_size, self.cfg.seed)
        return DataLoader(TrainBlocks(self.seqs, self.S, self.cfg.anchors_per_seq), batch_sampler=sampler,
                          collate_fn=self.collate, num_workers=0)

    def val_dataloader(self) -> list[DataLoader]:
        return [DataLoader(ValBlocks(self.seqs, idx, self.S, self.cfg.val_anchor_stride, self.cfg.anchors_per_seq),
                           batch_size=self.cfg.batch_size, shuffle=False, collate_fn=self.collate, num_workers=0)
                for idx in self.val_sets.values()]


# ---- model -----------------------------------------------------------------------------------------


def global_ratio(num: Tensor, den: Tensor) -> Tensor:
    """num / den with den summed over data-parallel ranks (SPEC §3.2): gradient averaging over W
    ranks then yields Σ_r num_r / Σ_r den_r, so a position's weight does not depend on its rank."""
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


class PretrainModule(L.LightningModule):
    def __init__(self, drafter: DFlashDrafter, cfg: PretrainConfig, total_steps: int = 0,
                 val_names: list[str] | None = None, target=None, val_labels: str = "greedy"):
        super().__init__()
        self.drafter, self.cfg, self.total_steps = drafter, cfg, total_steps
        self.val_labels = val_labels  # greedy: the target's greedy token; reference: the reference token
        self.__dict__["_target"] = target  # frozen target for on-the-fly features (not a sub-module)
        S = drafter.block_size
        self.gamma = cfg.gamma or default_gamma(S)
        self.register_buffer("slot_w", slot_weights(S, self.gamma), persistent=False)  # [S]
        self.register_buffer("t2d", target_to_draft(drafter.draft_vocab, drafter.spec.target_vocab_size).cpu(),
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
        self._t_last: float | None = None
        self._stats: dict[str, BlockStats] = {}

    # ---- budget -------------------------------------------------------------------------------------
    def progress(self) -> float:
        p = 0.0
        if self.total_steps:
            p = max(p, self.global_step / self.total_steps)
        if self.cfg.max_minutes:
            p = max(p, self.train_seconds / (60.0 * self.cfg.max_minutes))
        return p

    def configure_optimizers(self):
        decay = [p for n, p in self.drafter.named_parameters() if p.ndim >= 2]
        no_decay = [p for n, p in self.drafter.named_parameters() if p.ndim < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": self.cfg.weight_decay},
                                 {"params": no_decay, "weight_decay": 0.0}], lr=self.cfg.lr, betas=(0.9, 0.95))
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
        feats, g = target_features(target, ids, valid, self.drafter.spec.target_layer_ids, greedy=greedy)
        return feats[:, :Lc], g

    def drafter_step(self, batch: dict, greedy: bool = False) -> dict:
        """The drafter's forward and its decay-weighted CE on one batch (counters updated).
        Returns loss (num/den, den summed over ranks), num, den, hidden [B, A, S, H],
        logits [B, A, n, Vd] (slots 1..n) and greedy [B, T] (the target's greedy tokens, when asked)."""
        feats, g = self._features(batch, greedy=greedy)
        hidden = self.drafter.forward_train(feats, batch["ctx_valid"], batch["ids"], batch["anchors"])  # [B, A, S, H]
        S = self.drafter.block_size
        labels, in_range = block_labels(batch["ids"], batch["anchors"], S, batch["seq_len"])  # [B, A, S]
        w = self.slot_w[None, None, :] * (batch["anchor_valid"][..., None] & in_range)  # [B, A, S]
        didx = self.t2d[labels]  # [B, A, S], -1 outside the draft vocabulary
        supervised = w > 0
        wv = (w * (didx >= 0))[:, :, 1:]  # [B, A, n]: slot 0 never reaches the head
        logits = self.drafter.logits(hidden[:, :, 1:])  # [B, A, n, Vd]
        ce = F.cross_entropy(logits.flatten(0, 2), didx[:, :, 1:].clamp(min=0).flatten(), reduction="none")
        num, den = (ce.view_as(wv) * wv).sum(), wv.sum()
        loss = global_ratio(num, den)
        self.slot_predictions += int((wv > 0).sum())
        self.labels_seen += int(supervised.sum())
        self.uncovered += int((supervised & (didx < 0)).sum())
        return {"loss": loss, "num": num, "den": den, "hidden": hidden, "logits": logits, "greedy": g}

    def log_train(self, loss: Tensor, bs: int) -> None:
        self.log("train/loss", loss.detach(), batch_size=bs, prog_bar=True)
        self.log("train/lr", self.trainer.optimizers[0].param_groups[0]["lr"], batch_size=bs)
        self.log("train/slot_preds_per_s", self.slot_predictions / max(self.train_seconds, 1e-9), batch_size=bs)
        self.log("train/uncovered_label_frac", self.uncovered / max(self.labels_seen, 1), batch_size=bs)
        self.log("train/minutes", self.train_seconds / 60.0, batch_size=bs)

    def training_step(self, batch: dict, batch_idx: int) -> Tensor:
        out = self.drafter_step(batch)
        self.log_train(out["loss"], batch["ids"].shape[0])
        return out["loss"]

    # ---- clock -----------------------------------------------------------------------------------------
    def on_train_start(self) -> None:
        self.start_step = int(self.global_step)
        self._t_last = time.time()
        if self.progress() >= 1.0:
            self.trainer.should_stop = True

    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
        now = time.time()
        if self._t_last is not None:
            self.train_seconds += now - self._t_last
        self._t_last = now
        if self.progress() >= 1.0:
            self.trainer.should_stop = True

    # ---- validation ----------------------------------------------------------------------------------------
    def on_validation_epoch_start(self) -> None:
        n = self.drafter.block_size - 1
        self._stats = {name: BlockStats(n, self.cfg.topk) for name in self.val_names}

    @torch.no_grad()
    def validation_step(self, batch: dict, batch_idx: int, dataloader_idx: int = 0) -> None:
        feats, greedy = self._features(batch, greedy=True)
        hidden = self.drafter.forward_train(feats, batch["ctx_valid"], batch["ids"], batch["anchors"])  # [B, A, S, H]
        S = self.drafter.block_size
        tgt, valid = block_targets(batch, greedy, S, self.val_labels == "greedy")  # [B, A, n]
        H = hidden.shape[-1]
        rows = hidden[:, :, 1:].reshape(-1, H)  # [B*A*n, H]
        K = min(self.cfg.topk, self.drafter.spec.draft_vocab_size or self.drafter.spec.target_vocab_size)
        top = torch.cat([self.drafter.logits(rows[c:c + 4096]).topk(K, -1).indices  # [rows, K] draft indices
                         for c in range(0, rows.shape[0], 4096)])
        if self.drafter.draft_vocab is not None:
            top = self.drafter.draft_vocab[top]
        n = S - 1
        self._stats[self.val_names[dataloader_idx]].update(top.view(-1, n, top.shape[-1]), tgt.reshape(-1, n), valid.reshape(-1, n))

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
        row = {"step": int(self.global_step), "train_minutes": self.train_seconds / 60.0,
               **{name: r["sim_tau"] for name, r in res.items()}}
        if not self.history or self.history[-1]["step"] != row["step"]:
            self.history.append(row)
            if self.logger is not None and hasattr(self.logger, "log_metrics"):  # budget curve: step = training seconds
                self.logger.log_metrics({f"budget/{k}_sim_tau": v for k, v in row.items() if k not in ("step", "train_minutes")},
                                        step=int(round(self.train_seconds)))
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
        return {k: v.detach().to("cpu", copy=True) for k, v in self.drafter.state_dict().items()}

    def on_validation_end(self) -> None:
        self._t_last = time.time()  # validation time is not training time

    # ---- resumable extra state -------------------------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["draftlab"] = {"train_seconds": self.train_seconds, "slot_predictions": self.slot_predictions,
                                  "uncovered": self.uncovered, "labels_seen": self.labels_seen,
                                  "history": self.history, "best": self.best, "last_val": self.last_val}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        st = checkpoint.get("draftlab", {})
        self.train_seconds = float(st.get("train_seconds", 0.0))
        self.slot_predictions = int(st.get("slot_predictions", 0))
        self.uncovered = int(st.get("uncovered", 0))
        self.labels_seen = int(st.get("labels_seen", 0))
        self.history = list(st.get("history", []))
        self.best = st.get("best")
        self.last_val = st.get("last_val", {})


class LastCheckpoint(L.Callback):
    """Writes workdir/last.ckpt (atomically) every `every` steps, at the end of training and when
    training is interrupted, so a re-run resumes where it stopped."""

    def __init__(self, path: Path, every: int):
        self.path, self.every = Path(path), every

    def _save(self, trainer: L.Trainer) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        trainer.save_checkpoint(tmp, weights_only=False)  # full state (optimiser, loops) for resuming
        os.replace(tmp, self.path)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.every and trainer.global_step % self.every == 0:
            self._save(trainer)

    def on_train_end(self, trainer, pl_module) -> None:
        self._save(trainer)

    def on_exception(self, trainer, pl_module, exception) -> None:
        try:
            self._save(trainer)
        except Exception:  # best effort
            pass


# ---- driver --------------------------------------------------------------------------------------------


@dataclass
class TrainResult:
    steps: int
    train_seconds: float
    wall_s: float
    slot_predictions: int
    slot_predictions_per_s: float
    uncovered_label_frac: float
    best_step: int
    best_sim_tau: float
    best_train_minutes: float
    best_metrics: dict  # per validation set: the BlockStats summary at the best step
    last_metrics: dict
    history: list[dict] = field(default_factory=list)
    resumed_from_step: int | None = None


def _accelerator(device: torch.device) -> tuple[str, list[int] | int]:
    if device.type == "cuda":
        return "gpu", [device.index or 0]
    return "cpu", 1


def train_drafter(drafter: DFlashDrafter, seqs: SequenceSet, cfg: PretrainConfig, workdir: str | Path,
                  store: FeatureStore | None = None, target=None, logger=None, callbacks: list | None = None,
                  log: Callable[[str], None] = print, train_sample: int = 16, val_labels: str = "greedy") -> TrainResult:
    """Train `drafter` in place (it ends holding the best validation state) and report.
    val_labels: score validation blocks against the target's greedy tokens ("greedy", the real
    acceptance rule) or against the reference tokens ("reference"; the same for greedy references)."""
    t0 = time.time()
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    if store is None and target is None:
        raise DraftlabError("train_drafter needs a FeatureStore or the target (features on the fly)")
    L.seed_everything(cfg.seed, workers=False, verbose=False)
    dm = DrafterDataModule(seqs, cfg, drafter.block_size, store, train_sample=train_sample)
    module = PretrainModule(drafter, cfg, budget_steps(cfg, dm), dm.val_names, target, val_labels)
    steps, resumed_from = fit_module(module, dm, cfg, workdir, logger, callbacks, log, "pretrain")
    drafter.load_state_dict(module.best["state"])
    return TrainResult(
        steps=steps, train_seconds=module.train_seconds, wall_s=time.time() - t0,
        slot_predictions=module.slot_predictions,
        slot_predictions_per_s=module.slot_predictions / max(module.train_seconds, 1e-9),
        uncovered_label_frac=module.uncovered / max(module.labels_seen, 1),
        best_step=module.best["step"], best_sim_tau=module.best["sim_tau"],
        best_train_minutes=module.best["train_minutes"], best_metrics=module.best["metrics"],
        last_metrics=module.last_val, history=list(module.history), resumed_from_step=resumed_from)


def budget_steps(cfg: PretrainConfig, dm: DrafterDataModule) -> int:
    """The step budget from max_steps and epochs (0 = none; max_minutes is checked while training)."""
    total = cfg.max_steps
    if cfg.epochs:
        by_epochs = math.ceil(cfg.epochs * dm.steps_per_epoch())
        total = min(total, by_epochs) if total else by_epochs
    return total


def fit_module(module: PretrainModule, dm: DrafterDataModule, cfg: PretrainConfig, workdir: Path, logger=None,
               callbacks: list | None = None, log: Callable[[str], None] = print,
               what: str = "pretrain") -> tuple[int, int | None]:
    """Fit `module` (a PretrainModule or subclass) with resume from workdir/last.ckpt, then a final
    validation when the last step was not validated. Returns (steps, step resumed from or None)."""
    total = module.total_steps
    accel, devices = _accelerator(module.drafter.device)
    precision = cfg.precision if cfg.precision != "auto" else ("bf16-mixed" if accel == "gpu" else "32-true")
    ckpt = workdir / "last.ckpt"
    trainer = L.Trainer(
        accelerator=accel, devices=devices, precision=precision, max_steps=total or -1, max_epochs=-1,
        val_check_interval=cfg.val_every or 10**9, check_val_every_n_epoch=None, num_sanity_val_steps=0,
        logger=logger if logger is not None else False, enable_checkpointing=False,
        callbacks=[LastCheckpoint(ckpt, cfg.checkpoint_every), *(callbacks or [])],
        gradient_clip_val=cfg.grad_clip or None,
        log_every_n_steps=max(1, min(20, cfg.val_every or 20, dm.steps_per_epoch())),
        enable_progress_bar=False, enable_model_summary=False, use_distributed_sampler=False,
        default_root_dir=str(workdir))
    resume = ckpt if (cfg.resume and ckpt.exists()) else None
    resumed_from = None
    if resume is not None:
        log(f"{what}: resuming from {resume}")
    trainer.fit(module, datamodule=dm, ckpt_path=str(resume) if resume else None, weights_only=True)
    if resume is not None:
        resumed_from = module.start_step
    steps = int(trainer.global_step)
    if not module.history or module.history[-1]["step"] != steps:
        trainer.validate(module, datamodule=dm, verbose=False)
    if module.best is None:
        raise DraftlabError("no validation blocks: the references are too short for the block size")
    return steps, resumed_from


# ---- from references to a trained drafter (what the stage runs) ------------------------------------------


@dataclass
class PretrainOutcome:
    drafter: DFlashDrafter
    result: TrainResult
    report: dict  # the metrics JSON
    curve: list[dict]  # budget curve rows: step, train_minutes, sim τ per validation set


def run_key(*parts) -> str:
    import hashlib
    import json

    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def pretrain_from_references(target, df, dcfg, pcfg: PretrainConfig, work_root: str | Path, logger=None,
                             log: Callable[[str], None] = print, callbacks: list | None = None) -> PretrainOutcome:
    """references (DataFrame of data/references.parquet) -> trained drafter + report. Feature cache
    and resumable run folders live under work_root (`features/<key>`, `runs/<key>`; the run key
    covers the data, the drafter and every setting that changes training)."""
    from dataclasses import asdict

    from draftlab.drafter.masks import CONVENTION
    from draftlab.drafter.model import parameter_summary, spec_from_target
    from draftlab.drafter.vocab import build_draft_vocab, coverage, resolve_mask_token, token_counts

    work_root = Path(work_root)
    t0 = time.time()
    seqs = SequenceSet.from_dataframe(df)
    V = target.vocab_size
    if dcfg.convention != CONVENTION:
        raise DraftlabError(f"drafter.convention={dcfg.convention!r} is not implemented; use {CONVENTION!r}")
    mask_id = resolve_mask_token(dcfg.mask_token_id, getattr(target, "tokenizer", None), V)
    n_mask = int((seqs.tokens == mask_id).sum())
    if n_mask:
        raise DraftlabError(f"MASK token id {mask_id} occurs {n_mask} times in the references; choose a token that never "
                            f"appears in text with drafter.mask_token_id")
    if seqs.tokens.size and int(seqs.tokens.max()) >= V:
        raise DraftlabError(f"the references contain token id {int(seqs.tokens.max())} >= the target's vocabulary ({V}); "
                            "they were generated by a different target: re-run the reference stage")
    train_idx, held_idx = seqs.indices("train"), seqs.indices("heldout")
    counts_all = token_counts((seqs.seq(i) for i in train_idx), V)  # prompts + responses: as much text as possible
    resp = lambda idx: (seqs.seq(i)[int(seqs.prompt_len[i]):] for i in idx)  # noqa: E731
    counts_train_resp, counts_held_resp = token_counts(resp(train_idx), V), token_counts(resp(held_idx), V)
    vocab = None
    if dcfg.draft_vocab_size and dcfg.draft_vocab_size < V:
        vocab = build_draft_vocab(counts_all, dcfg.draft_vocab_size, always=target.eos_token_ids)
    spec = spec_from_target(target, dcfg.block_size, dcfg.num_layers, dcfg.target_layer_ids, mask_id,
                            0 if vocab is None else len(vocab), dcfg.intermediate_size, dcfg.num_heads, dcfg.num_kv_heads)
    torch.manual_seed(pcfg.seed)
    drafter = DFlashDrafter.from_target(spec, target, vocab)
    log(f"pretrain: drafter {parameter_summary(drafter)}, taps {spec.target_layer_ids}, MASK {mask_id}, "
        f"draft vocabulary {spec.draft_vocab_size or V} (coverage of held-out response tokens "
        f"{coverage(vocab, counts_held_resp):.3f})")
    store, fstats = None, {"feature_cache_bytes": 0, "feature_compute_s": 0.0}
    if pcfg.cache_features:
        store, fstats = FeatureStore.open_or_build(work_root / "features", target, seqs, spec.target_layer_ids,
                                                   pcfg.feature_batch_tokens, log=log)
        log(f"pretrain: feature cache {fstats['feature_cache_bytes'] / 2**20:.1f} MiB "
            f"({'reused' if fstats.get('feature_cache_reused') else 'computed'})")
    train_keys = {k: v for k, v in asdict(pcfg).items() if k not in ("resume", "cache_features", "feature_batch_tokens",
                                                                     "checkpoint_every")}
    key = run_key(seqs.fingerprint(), spec.to_dict(), train_keys, None if vocab is None else vocab.tolist()[:64])
    result = train_drafter(drafter, seqs, pcfg, work_root / "runs" / key, store=store,
                           target=None if store is not None else target, logger=logger, log=log, callbacks=callbacks)
    best = result.best_metrics
    primary = "heldout" if "heldout" in best else next(iter(best))
    p = best[primary]
    K = pcfg.topk
    agreement = None
    if store is not None:
        hits = tot = 0
        for i in train_idx + held_idx:
            P = int(seqs.prompt_len[i])
            s, g = seqs.seq(i)[P:], store.greedy(i)[P:]
            hits += int((s == g).sum())
            tot += len(s)
        agreement = hits / max(tot, 1)
    report = {
        "sim_tau": p["sim_tau"], "sim_tau_split": primary, "sim_tau_per_slot": p["sim_tau_per_slot"],
        "slot_acc": p["slot_acc"], f"top{K}_cov": p[f"top{K}_cov"], "top1_mean": p["top1_mean"],
        f"top{K}_mean": p[f"top{K}_mean"], "val_blocks": p["blocks"],
        "per_set": {name: {"sim_tau": r["sim_tau"], "top1_mean": r["top1_mean"], f"top{K}_mean": r[f"top{K}_mean"],
                           "blocks": r["blocks"]} for name, r in best.items()},
        "train_tokens_per_s": result.slot_predictions_per_s,  # supervised slot predictions per training second
        "train_slot_predictions": result.slot_predictions, "steps": result.steps, "best_step": result.best_step,
        "train_minutes": result.train_seconds / 60.0, "best_train_minutes": result.best_train_minutes,
        "wall_s": time.time() - t0, "resumed_from_step": result.resumed_from_step,
        "params_trained": drafter.num_trainable_parameters(), "params_frozen": drafter.num_frozen_parameters(),
        "block_size": spec.block_size, "num_layers": spec.num_layers, "target_layer_ids": spec.target_layer_ids,
        "mask_token_id": mask_id, "convention": spec.convention, "gamma": pcfg.gamma or default_gamma(spec.block_size),
        "draft_vocab_size": spec.draft_vocab_size or V,
        "draft_vocab_coverage_train": coverage(vocab, counts_train_resp),
        "draft_vocab_coverage_heldout": coverage(vocab, counts_held_resp),
        "uncovered_label_frac": result.uncovered_label_frac,
        "train_sequences": len(train_idx), "train_response_tokens": int(counts_train_resp.sum()),
        "ref_greedy_agreement": agreement,
        **{k: v for k, v in fstats.items() if k in ("feature_cache_bytes", "feature_compute_s", "feature_tokens_per_s")},
    }
    names = sorted({k for row in result.history for k in row} - {"step", "train_minutes"},
                   key=lambda n: (n != "heldout", n == "train_sample", n))
    curve = [{"step": r["step"], "train_minutes": r["train_minutes"], **{n: r.get(n) for n in names}} for r in result.history]
    return PretrainOutcome(drafter, result, report, curve)
