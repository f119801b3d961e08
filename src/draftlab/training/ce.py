"""Pretraining's objective (`DrafterCE`): the drafter's decay-weighted CE, and its simulated-τ validation.

One multi-anchor forward per batch (all blocks of a sequence at once with the block mask), CE against the reference
tokens (or the target's greedy ones, `pretrain.labels`) weighted by exp(-(k-1)/gamma) and normalised by the weight sum
(summed over ranks), slot 0 unsupervised, labels outside the draft vocabulary masked and counted; with a teacher
(`pretrain.kd_weight`) a KL term beside it. Features come from the batch (the cache) or from the target on the fly.
Validation: the drafter's top-K at every proposed slot against the target's greedy tokens (BlockStats: simulated τ,
per-slot accuracy, top-K coverage). SpecOPD's off-policy CE arm is this objective; co-training reads its loss pieces
(`loss_parts`) for the drafter's half.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from draftlab.config import PretrainConfig
from draftlab.drafter.masks import block_labels, default_gamma, greedy_block_labels, slot_weights
from draftlab.drafter.model import DFlashDrafter
from draftlab.drafter.vocab import target_to_draft
from draftlab.errors import DraftlabError
from draftlab.kernels.chunked import map_rows
from draftlab.training.features import batch_features
from draftlab.training.metrics import BlockStats
from draftlab.training.objective import Counts, StepContext, StepOut, cpu_state, global_ratio, lr_factor


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


class DrafterCE:
    """The drafter's decay-weighted CE (+ distillation) and its validation, as an `Objective`.
    target: the frozen target for features on the fly (None: the batches carry cached features); val_labels: greedy
    (the target's greedy token, the real acceptance rule) or reference; teacher: a `training.distill.TapTeacher`."""

    def __init__(self, drafter: DFlashDrafter, cfg: PretrainConfig, target=None, val_labels: str = "greedy",
                 teacher=None):
        self.drafter, self.cfg, self.target, self.val_labels, self.teacher = drafter, cfg, target, val_labels, teacher
        drafter.train_attention = getattr(cfg, "train_attention", "auto")  # auto: flex on CUDA, split on CPU
        if teacher is not None and drafter.seed_column:
            raise DraftlabError("pretrain.kd_weight > 0 with drafter.seed_logit=true is not implemented (the teacher "
                                "has no seed column); set one of them off")
        # the last on-the-fly target pass's logits [B, T, V], kept only when asked (a corrector's teacher reads them)
        self.keep_target_logits, self.target_logits = False, None
        S, dev = drafter.block_size, drafter.device
        self.gamma = cfg.gamma or default_gamma(S)
        self.slot_w = slot_weights(S, self.gamma).to(dev)  # [S]
        self.t2d = target_to_draft(drafter.draft_vocab, drafter.arch.target_vocab_size).to(dev)  # [V] -> draft / -1

    # ---- the objective ------------------------------------------------------------------------------------------
    def modules(self) -> dict[str, nn.Module]:
        return {"drafter": self.drafter}

    def param_groups(self) -> list[dict]:
        """Weight decay on matrices only; with `pretrain.seed_bias_lr` the seed bias (drafter.seed_bias) is a third
        group at that learning rate."""
        own = getattr(self.cfg, "seed_bias_lr", 0.0) and self.drafter.seed_bias is not None
        named = [(n, p) for n, p in self.drafter.named_parameters() if not (own and n == "seed_bias")]
        decay = [p for n, p in named if p.ndim >= 2]
        no_decay = [p for n, p in named if p.ndim < 2]
        groups = [{"params": decay, "weight_decay": self.cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        if own:
            groups.append({"params": [self.drafter.seed_bias], "weight_decay": 0.0, "lr": self.cfg.seed_bias_lr})
        return groups

    def lr_factor(self, group: dict, progress: float) -> float:
        c = self.cfg
        return lr_factor(progress, c.warmup, c.schedule, c.min_lr_ratio)

    def step(self, batch: dict, ctx: StepContext) -> StepOut:
        loss = self.loss_parts(batch, ctx.counts, dense=False)["loss"]
        return StepOut(loss, self.train_logs(loss, ctx), synced=("train/loss",))

    def train_logs(self, loss: Tensor, ctx: StepContext) -> dict:
        """The drafter's training figures: its loss (each rank's share of the global ratio), lr and the counters."""
        c = ctx.counts
        return {"train/loss": loss.detach(), "train/lr": ctx.lr,
                "train/slot_preds_per_s": c.slot_predictions / max(ctx.train_seconds, 1e-9),
                "train/uncovered_label_frac": c.uncovered / max(c.labels_seen, 1),
                "train/minutes": ctx.train_seconds / 60.0}

    def new_val_stats(self) -> BlockStats:
        return BlockStats(self.drafter.block_size - 1, self.cfg.topk)

    def val_summary(self, stats: BlockStats) -> dict:
        return stats.summary()

    def after_validation(self, step: int, results: dict, row: dict | None, primary: str) -> None:
        return None

    def snapshot(self) -> dict:
        return cpu_state(self.drafter)

    def restore(self, state: dict) -> None:
        self.drafter.load_state_dict(state)

    def extras(self) -> dict:
        return {}

    def state(self) -> dict:
        return {}

    def load_state(self, state: dict) -> None:
        return None

    # ---- the pieces ---------------------------------------------------------------------------------------------
    def features(self, batch: dict, greedy: bool) -> tuple[Tensor, Tensor | None]:
        """The batch's tap features [B, Lc, F] and the target's greedy tokens [B, T] (cached, or a target pass)."""
        feats, g, z = batch_features(batch, self.target, self.drafter.arch.target_layer_ids, greedy)
        if "feats" not in batch:  # a target pass: its logits kept when asked
            self.target_logits = z if self.keep_target_logits else None
        return feats, g

    def seeds(self, batch: dict) -> Tensor | None:
        """A seeded drafter's block seeds [B, A, n]: the batch's (training data) or computed from its ids."""
        if not self.drafter.arch.seeded:
            return None
        if "seeds" in batch:
            return batch["seeds"]
        return self.drafter.train_seeds(batch["ids"], batch["anchors"], batch["seq_len"])

    def loss_parts(self, batch: dict, counts: Counts | None = None, greedy: bool = False, dense: bool = True) -> dict:
        """The drafter's forward and its decay-weighted CE (+ distillation) on one batch (`counts` updated).
        Returns loss (num/den, den summed over ranks), num, den, hidden [B, A, S, H], logits
        [B, A, m, Vd] of slots 1..m (m = n unless cfg.max_slot; None with dense=False: the head then
        runs only on the supervised slots, not on padding anchors or slots past the end), greedy
        [B, T] (the target's greedy tokens, when asked) and feats."""
        labels_greedy = getattr(self.cfg, "labels", "reference") == "greedy"
        feats, g = self.features(batch, greedy=greedy or labels_greedy)
        seeds = self.seeds(batch)  # [B, A, n] | None
        d = self.drafter
        hidden = d.forward_train(feats, batch["ctx_valid"], batch["ids"], batch["anchors"], seeds)  # [B, A, S, H]
        S = d.block_size
        if labels_greedy:  # the target's greedy tokens, valid while the text agrees with them
            labels, in_range = greedy_block_labels(batch["ids"], g, batch["anchors"], S, batch["seq_len"])  # [B, A, S]
        else:
            labels, in_range = block_labels(batch["ids"], batch["anchors"], S, batch["seq_len"])  # [B, A, S]
        m = min(getattr(self.cfg, "max_slot", 0) or S - 1, S - 1)  # supervised slots 1..m
        w = self.slot_w[None, None, :m + 1] * (batch["anchor_valid"][..., None] & in_range[..., :m + 1])  # [B, A, m+1]
        didx = self.t2d[labels[..., :m + 1]]  # [B, A, m+1], -1 outside the draft vocabulary
        col = seeds[..., :m] if d.reads_seeds else None  # [B, A, m] the slots' seeds (column / bias)
        if d.seed_column:  # a label outside the draft vocabulary equal to its slot's seed: the column (Vd)
            hit = (didx[..., 1:] < 0) & (d.seed_ids(col) == labels[..., 1:m + 1])
            didx[..., 1:] = torch.where(hit, torch.full_like(didx[..., 1:], d.arch.draft_vocab_size), didx[..., 1:])
        supervised = w > 0
        wk = w[:, :, 1:]  # [B, A, m]: slot 0 never reaches the head
        wv = wk * (didx[:, :, 1:] >= 0)  # [B, A, m]: and labels outside the draft vocabulary carry no CE
        sw = getattr(self.cfg, "seeded_slot_weight", 1.0)
        if seeds is not None and sw != 1.0 and d.training:  # the seeded slots' CE weight (training batches only)
            wv = wv * torch.where(seeds[..., :m] != d.mask_token_id, sw, 1.0)  # [B, A, m]
        rows = wk > 0  # [B, A, m]
        kd = self.teacher is not None and getattr(self.cfg, "kd_weight", 0.0) > 0
        y = didx[:, :, 1:][rows].clamp(min=0)  # [N]
        # row chunks ([N, Vd] never whole; kernels.chunked); the seed column's per-row extra logit takes the dense head
        chunk = 0 if dense or col is not None else getattr(self.cfg, "chunk_rows", 0)
        if chunk > 0:  # the head, CE and KL `chunk` rows at a time
            logits = None
            th = self.teacher.hidden(d, feats, batch["anchors"], m, rows) if kd else None  # [N, H]
            ce, kl = self._chunked_ce(hidden[:, :, 1:m + 1][rows], y, th, chunk)
        else:
            if dense:
                logits = d.logits(hidden[:, :, 1:m + 1], col)  # [B, A, m, Vd (+1 with the seed column)]
                lg = logits[rows]  # [N, Vd]
            else:
                slots = torch.arange(1, m + 1, device=rows.device).expand(rows.shape)[rows]  # [N]
                logits, lg = None, d.logits(hidden[:, :, 1:m + 1][rows], None if col is None else col[rows], slots)
            ce = F.cross_entropy(lg, y, reduction="none")  # [N]
            kl = self.teacher.kl(d, feats, batch["anchors"], lg, rows) if kd else None  # [N]
        num, den = (ce * wv[rows]).sum(), wv.sum()
        loss = global_ratio(num, den)
        if kd:
            loss = loss + self.cfg.kd_weight * global_ratio((kl * wk[rows]).sum(), wk.sum())
        if counts is not None:
            counts.slot_predictions += int((wv > 0).sum())
            counts.labels_seen += int(supervised.sum())
            counts.uncovered += int((supervised & (didx < 0)).sum())
        return {"loss": loss, "num": num, "den": den, "hidden": hidden, "logits": logits, "greedy": g, "feats": feats}

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

    @torch.no_grad()
    def validate_batch(self, batch: dict, stats: BlockStats) -> None:
        """One validation batch into `stats`: the drafter's top-K at every proposed slot vs the targets."""
        feats, greedy = self.features(batch, greedy=True)
        seeds = self.seeds(batch)  # [B, A, n] | None
        d = self.drafter
        hidden = d.forward_train(feats, batch["ctx_valid"], batch["ids"], batch["anchors"], seeds)  # [B, A, S, H]
        S = d.block_size
        tgt, valid = block_targets(batch, greedy, S, self.val_labels == "greedy")  # [B, A, n]
        H = hidden.shape[-1]
        rows = hidden[:, :, 1:].reshape(-1, H)  # [B*A*n, H]
        n = S - 1
        col = seeds.reshape(-1) if d.reads_seeds else None  # [B*A*n] the slots' seeds (column / bias)
        slots = torch.arange(1, S, device=rows.device).repeat(rows.shape[0] // n)  # [B*A*n]
        part = lambda c: None if col is None else col[c:c + 4096]  # noqa: E731
        K = min(self.cfg.topk, d.arch.draft_vocab_size or d.arch.target_vocab_size)
        top = torch.cat([d.to_target(d.logits(rows[c:c + 4096], part(c), slots[c:c + 4096]).topk(K, -1).indices,
                                     None if col is None else part(c)[:, None])
                         for c in range(0, rows.shape[0], 4096)])  # [rows, K] target ids
        stats.update(top.view(-1, n, top.shape[-1]), tgt.reshape(-1, n), valid.reshape(-1, n),
                     None if seeds is None else seeds.reshape(-1, n), d.mask_token_id)
