"""Validation of co-trained correctors (any family, through the `Corrector` interface): simulated τ of
the corrected block (per path rule) vs the uncorrected one (the drafter's argmax) vs the top-K oracle
(the verifier's token whenever it is in the top-K), all through `greedy_accept_length`.

`eval_batch` is one validation batch (the co-training module's validation and `evaluate_rules` both
use it); `evaluate_rules` scores a whole validation set for several path rules at once.
"""
from __future__ import annotations

import torch
from torch import Tensor

from draftlab.config import PretrainConfig
from draftlab.corrector.base import Corrector, DraftBlock, draft_candidates
from draftlab.corrector.variants import RULES
from draftlab.drafter.model import DFlashDrafter
from draftlab.training.data import DrafterDataModule
from draftlab.training.features import FeatureStore, SequenceSet
from draftlab.training.metrics import BlockStats
from draftlab.training.module import DrafterModule, block_targets

ROW_CHUNK = 4096  # drafter rows per top-K call in validation
BLOCK_CHUNK = 256  # blocks per corrector call in validation (the torch scorer forms [N, n−1, K, K, m])


def candidates(drafter: DFlashDrafter, hidden: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """Top-K of the proposed slots, the head run in row chunks (no [rows, Vd] tensor for every block at
    once): hidden [B, A, S, H] (slot 0 included) -> (cand_ids [B, A, n, K] target ids, cand_logits [B, A, n, K])."""
    B, A, S, H = hidden.shape
    rows = hidden[:, :, 1:].reshape(-1, H)  # [B*A*n, H]
    ids, vals = zip(*(draft_candidates(drafter.logits(rows[c:c + ROW_CHUNK]), k, drafter.draft_vocab)
                      for c in range(0, rows.shape[0], ROW_CHUNK)))
    K = ids[0].shape[-1]
    return torch.cat(ids).view(B, A, S - 1, K), torch.cat(vals).view(B, A, S - 1, K)


@torch.no_grad()
def corrected_paths(corrector: Corrector, block: DraftBlock, rules: tuple[str, ...], lam: float,
                    backend: str | None = None) -> dict[str, Tensor]:
    """{rule: tokens [N, n]} of a flat DraftBlock [N, n, ...], BLOCK_CHUNK blocks per corrector call."""
    out: dict[str, list[Tensor]] = {r: [] for r in rules}
    for c in range(0, block.hidden.shape[0], BLOCK_CHUNK):
        for r, toks in corrector.propose_rules(block.rows(slice(c, c + BLOCK_CHUNK)), rules, lam, backend).items():
            out[r].append(toks)
    return {r: torch.cat(v) for r, v in out.items()}


def oracle_block(cand_ids: Tensor, targets: Tensor) -> Tensor:
    """The ideal re-selector: the verifier's token wherever it is among the K candidates, else the
    drafter's top-1 (which is then wrong). cand_ids [..., n, K], targets [..., n] -> [..., n]."""
    hit = (cand_ids == targets[..., None]).any(-1)  # [..., n]
    return torch.where(hit, targets, cand_ids[..., 0])


class SetStats:
    """Validation counters of one set: uncorrected (top-K coverage too), corrected per rule, oracle."""

    def __init__(self, n: int, k: int, rules: tuple[str, ...]):
        self.k = k
        self.unc = BlockStats(n, k)
        self.oracle = BlockStats(n, 1)
        self.corr = {r: BlockStats(n, 1) for r in rules}

    def update(self, cand_ids: Tensor, targets: Tensor, valid: Tensor, paths: dict[str, Tensor]) -> None:
        """cand_ids [N, n, K], targets / valid [N, n], paths {rule: [N, n]}."""
        self.unc.update(cand_ids, targets, valid)
        self.oracle.update(oracle_block(cand_ids, targets)[..., None], targets, valid)
        for r, toks in paths.items():
            self.corr[r].update(toks[..., None], targets, valid)

    @property
    def blocks(self) -> int:
        return self.unc.blocks

    def summary(self, main_rule: str) -> dict:
        """The uncorrected BlockStats summary (coverage, slot accuracy) with `sim_tau` = corrected τ."""
        u, o = self.unc.summary(), self.oracle.summary()
        res = {**u, "sim_tau_uncorrected": u["sim_tau"], "sim_tau_per_slot_uncorrected": u["sim_tau_per_slot"],
               "sim_tau_oracle": o["sim_tau"], "sim_tau_per_slot_oracle": o["sim_tau_per_slot"]}
        for r, st in self.corr.items():
            c = st.summary()
            res[f"sim_tau_{r}"] = c["sim_tau"]
            res[f"sim_tau_per_slot_{r}"] = c["sim_tau_per_slot"]
            res[f"slot_acc_{r}"] = c["slot_acc"]
        main = self.corr[main_rule].summary()
        res["sim_tau"], res["sim_tau_per_slot"], res["slot_acc_corrected"] = (
            main["sim_tau"], main["sim_tau_per_slot"], main["slot_acc"])
        gap = o["sim_tau"] - u["sim_tau"]
        res["headroom_closed"] = (main["sim_tau"] - u["sim_tau"]) / gap if gap > 1e-9 else None
        return res


def eval_batch(drafter: DFlashDrafter, corrector: Corrector, batch: dict, features: tuple[Tensor, Tensor | None],
               stats: SetStats, k: int, rules: tuple[str, ...], lam: float, backend: str | None = None) -> None:
    """One validation batch into `stats`: drafter pass, top-K, corrected paths, targets."""
    feats, greedy = features
    hidden = drafter.forward_train(feats, batch["ctx_valid"], batch["ids"], batch["anchors"])  # [B, A, S, H]
    cand_ids, cand_logits = candidates(drafter, hidden, k)  # [B, A, n, K]
    tgt, valid = block_targets(batch, greedy, drafter.block_size)  # [B, A, n]
    n = hidden.shape[2] - 1
    flat = lambda x: x.reshape(-1, n, *x.shape[3:])  # noqa: E731  [B*A, n, ...]
    slot0 = batch["ids"].gather(1, batch["anchors"]).reshape(-1)  # [B*A] the blocks' slot-0 tokens
    block = DraftBlock(flat(hidden[:, :, 1:]), slot0, drafter.draft_vocab, head=drafter.logits,
                       cand=(flat(cand_ids), flat(cand_logits)))
    stats.update(flat(cand_ids), flat(tgt), flat(valid), corrected_paths(corrector, block, rules, lam, backend))


@torch.no_grad()
def evaluate_rules(drafter: DFlashDrafter, corrector: Corrector, seqs: SequenceSet, cfg: PretrainConfig,
                   k: int, lam: float, split: str = "heldout", store: FeatureStore | None = None, target=None,
                   rules: tuple[str, ...] = RULES, backend: str | None = None) -> dict:
    """Simulated τ of every path rule (and uncorrected / oracle) on one validation set -> summary."""
    dm = DrafterDataModule(seqs, cfg, drafter.block_size, store, train_sample=0)
    if split not in dm.val_sets:
        return {}
    loader = dm.val_dataloader()[dm.val_names.index(split)]
    probe = DrafterModule(drafter, cfg, target=target)  # for its feature path (cache or target)
    st = SetStats(drafter.block_size - 1, k, rules)
    was = drafter.training, corrector.training
    drafter.eval(), corrector.eval()
    dev = drafter.device
    for batch in loader:
        batch = {key: v.to(dev) for key, v in batch.items()}
        eval_batch(drafter, corrector, batch, probe._features(batch, greedy=True), st, k, rules, lam, backend)
    drafter.train(was[0]), corrector.train(was[1])
    return st.summary(rules[0]) if st.blocks else {}
