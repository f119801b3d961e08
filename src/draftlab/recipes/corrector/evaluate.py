"""Validation of co-trained correctors (any family, through the `Corrector` interface): simulated τ of
the corrected block (per path rule) vs the uncorrected one (the drafter's argmax) vs two oracles — the
top-K oracle (the verifier's token whenever it is in the top-K) and the reachable oracle (the same with
slot 1 fixed to the drafter's top-1, the only blocks prefix-first greedy can propose) — all through
`greedy_accept_length`.

On a seeded drafter every block reads its seeds as the engine does (`draftlab.corrector.base.drafter_block`):
the candidates are the top-K over the draft vocabulary and the seed column with the seed bias in their
logits, and the sequential walks re-apply the same head.

`eval_batch` is one validation batch (the co-training module's validation and `evaluate_rules` both
use it); `evaluate_rules` scores a whole validation set for several path rules at once.
"""
from __future__ import annotations

import torch
from torch import Tensor

from draftlab.config import PretrainConfig
from draftlab.corrector.base import ANCHOR, Corrector, DraftBlock, anchor_taps, draft_candidates, drafter_block, slot_logits
from draftlab.corrector.paths import oracle_path
from draftlab.corrector.variants import RULES
from draftlab.drafter.model import DFlashDrafter
from draftlab.training.data import DrafterDataModule
from draftlab.training.features import FeatureStore, SequenceSet, batch_features
from draftlab.training.metrics import BlockStats
from draftlab.stats import mean_and_se, share_closed
from draftlab.training.ce import block_targets

ROW_CHUNK = 4096  # drafter rows per top-K call in validation
BLOCK_CHUNK = 256  # blocks per corrector call in validation (the torch scorer forms [N, n−1, K, K, m])


def candidates(drafter: DFlashDrafter, hidden: Tensor, k: int, seeds: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Top-K of the proposed slots, the head run in row chunks (no [rows, Vd] tensor for every block at
    once): hidden [B, A, S, H] (slot 0 included), seeds [B, A, n] (a seeded drafter's: its head reads them,
    `draftlab.corrector.base.slot_logits`) -> (cand_ids [B, A, n, K] target ids, cand_logits [B, A, n, K])."""
    B, A, S, H = hidden.shape
    rows = hidden[:, :, 1:].reshape(-1, H)  # [B*A*n, H]
    col = None if seeds is None else seeds.reshape(-1)  # [B*A*n] each row's seed
    slots = torch.arange(1, S, device=rows.device).repeat(B * A)  # [B*A*n] each row's slot
    part = lambda t, c: None if t is None else t[c:c + ROW_CHUNK]  # noqa: E731

    def top(c: int) -> tuple[Tensor, Tensor]:
        logits, extra = slot_logits(drafter, rows[c:c + ROW_CHUNK], part(col, c), part(slots, c))
        return draft_candidates(logits, k, drafter.draft_vocab, extra)

    ids, vals = zip(*(top(c) for c in range(0, rows.shape[0], ROW_CHUNK)))
    K = ids[0].shape[-1]
    return torch.cat(ids).view(B, A, S - 1, K), torch.cat(vals).view(B, A, S - 1, K)


def batch_seeds(drafter: DFlashDrafter, batch: dict) -> Tensor | None:
    """A seeded drafter's block seeds [B, A, n] of a batch (its own, or computed from its ids); None if plain."""
    if not drafter.arch.seeded:
        return None
    if "seeds" in batch:
        return batch["seeds"]
    return drafter.train_seeds(batch["ids"], batch["anchors"], batch.get("seq_len"))


def eval_block(drafter: DFlashDrafter, batch: dict, hidden: Tensor, seeds: Tensor | None,
               k: int, anchor: Tensor | None = None) -> DraftBlock:
    """The flat DraftBlock [B*A, n, ...] of a validation batch's drafter pass (hidden [B, A, S, H], seeds
    [B, A, n] | None, anchor [B, A, n_taps*H] | None), with its top-K candidates computed in row chunks."""
    n = hidden.shape[2] - 1
    flat = lambda x: None if x is None else x.reshape(-1, n, *x.shape[3:])  # noqa: E731  [B*A, n, ...]
    cand_ids, cand_logits = candidates(drafter, hidden, k, seeds)  # [B, A, n, K]
    slot0 = batch["ids"].gather(1, batch["anchors"]).reshape(-1)  # [B*A] the blocks' slot-0 tokens
    return drafter_block(drafter, flat(hidden[:, :, 1:]), slot0, flat(seeds), cand=(flat(cand_ids), flat(cand_logits)),
                         anchor=None if anchor is None else anchor.reshape(-1, anchor.shape[-1]))


@torch.no_grad()
def corrected_paths(corrector: Corrector, block: DraftBlock, rules: tuple[str, ...], lam: float,
                    backend: str | None = None) -> dict[str, Tensor]:
    """{rule: tokens [N, n]} of a flat DraftBlock [N, n, ...], BLOCK_CHUNK blocks per corrector call."""
    out: dict[str, list[Tensor]] = {r: [] for r in rules}
    for c in range(0, block.hidden.shape[0], BLOCK_CHUNK):
        for r, toks in corrector.propose_rules(block.rows(slice(c, c + BLOCK_CHUNK)), rules, lam, backend).items():
            out[r].append(toks)
    return {r: torch.cat(v) for r, v in out.items()}


ORACLES = {"oracle": False, "oracle_reachable": True}  # name -> reachable (`draftlab.corrector.paths.oracle_path`)


class SetStats:
    """Validation counters of one set: uncorrected (top-K coverage too), corrected per rule, and the two
    oracles: the top-K oracle (any candidate at every slot) and the reachable one (slot 1 fixed to the
    drafter's top-1, as prefix-first greedy keeps it)."""

    def __init__(self, n: int, k: int, rules: tuple[str, ...]):
        self.k = k
        self.unc = BlockStats(n, k)
        self.oracles = {name: BlockStats(n, 1) for name in ORACLES}
        self.corr = {r: BlockStats(n, 1) for r in rules}
        self.gaps = {name: [0.0, 0.0, 0] for name in ORACLES}  # Σ, Σ², n of (oracle − uncorrected) per block

    def update(self, cand_ids: Tensor, targets: Tensor, valid: Tensor, paths: dict[str, Tensor]) -> None:
        """cand_ids [N, n, K], targets / valid [N, n], paths {rule: [N, n]}."""
        unc = self.unc.update(cand_ids, targets, valid)
        for name, reachable in ORACLES.items():
            orc = self.oracles[name].update(oracle_path(cand_ids, targets, reachable)[..., None], targets, valid)
            if unc is not None:  # the headroom per block, paired (the same blocks): its standard error
                d = (orc - unc).double()
                g = self.gaps[name]
                g[0], g[1], g[2] = g[0] + float(d.sum()), g[1] + float((d * d).sum()), g[2] + d.numel()
        for r, toks in paths.items():
            self.corr[r].update(toks[..., None], targets, valid)

    @property
    def blocks(self) -> int:
        return self.unc.blocks

    def summary(self, main_rule: str) -> dict:
        """The uncorrected BlockStats summary (coverage, slot accuracy) with `sim_tau` = corrected τ,
        `sim_tau_<oracle>` and `headroom_closed` / `headroom_closed_reachable` against each oracle (None when the
        oracle's headroom is below NOISE_SE (5) of its paired standard error over blocks, `headroom_se_<oracle>`:
        `draftlab.stats.share_closed`)."""
        u = self.unc.summary()
        res = {**u, "sim_tau_uncorrected": u["sim_tau"], "sim_tau_per_slot_uncorrected": u["sim_tau_per_slot"],
               "sim_tau_se_uncorrected": u["sim_tau_se"]}
        for r, st in self.corr.items():
            c = st.summary()
            res[f"sim_tau_{r}"] = c["sim_tau"]
            res[f"sim_tau_per_slot_{r}"] = c["sim_tau_per_slot"]
            res[f"slot_acc_{r}"] = c["slot_acc"]
        main = self.corr[main_rule].summary()
        res["sim_tau"], res["sim_tau_per_slot"], res["slot_acc_corrected"], res["sim_tau_se"] = (
            main["sim_tau"], main["sim_tau_per_slot"], main["slot_acc"], main["sim_tau_se"])
        for name, st in self.oracles.items():
            o = st.summary()
            res[f"sim_tau_{name}"], res[f"sim_tau_per_slot_{name}"] = o["sim_tau"], o["sim_tau_per_slot"]
            gap = mean_and_se(*self.gaps[name])
            res["headroom_se" + name[len("oracle"):]] = gap[1] if gap else None
            res["headroom_closed" + name[len("oracle"):]] = share_closed(main["sim_tau"], u["sim_tau"], o["sim_tau"],
                                                                          gap[1] if gap else None)
        return res


def eval_batch(drafter: DFlashDrafter, corrector: Corrector, batch: dict, features: tuple[Tensor, Tensor | None],
               stats: SetStats, k: int, rules: tuple[str, ...], lam: float, backend: str | None = None) -> None:
    """One validation batch into `stats`: drafter pass, top-K, corrected paths, targets."""
    feats, greedy = features
    seeds = batch_seeds(drafter, batch)  # [B, A, n] | None
    hidden = drafter.forward_train(feats, batch["ctx_valid"], batch["ids"], batch["anchors"], seeds)  # [B, A, S, H]
    anchor = anchor_taps(feats, batch["anchors"], batch["ctx_valid"]) if ANCHOR in corrector.contract.reads \
        else None  # [B, A, n_taps*H] the anchors a contract may read
    block = eval_block(drafter, batch, hidden, seeds, k, anchor)  # [B*A, n, ...]
    tgt, valid = block_targets(batch, greedy, drafter.block_size)  # [B, A, n]
    n = hidden.shape[2] - 1
    stats.update(block.cand[0], tgt.reshape(-1, n), valid.reshape(-1, n),
                 corrected_paths(corrector, block, rules, lam, backend))


@torch.no_grad()
def evaluate_rules(drafter: DFlashDrafter, corrector: Corrector, seqs: SequenceSet, cfg: PretrainConfig,
                   k: int, lam: float, split: str = "heldout", store: FeatureStore | None = None, target=None,
                   rules: tuple[str, ...] = RULES, backend: str | None = None) -> dict:
    """Simulated τ of every path rule (and uncorrected / oracle) on one validation set -> summary."""
    dm = DrafterDataModule(seqs, cfg, drafter.block_size, store, train_sample=0, arch=drafter.arch)
    if split not in dm.val_sets:
        return {}
    loader = dm.val_dataloader()[dm.val_names.index(split)]
    st = SetStats(drafter.block_size - 1, k, rules)
    drafter.train_attention = getattr(cfg, "train_attention", "auto")  # the run's attention, as its training's
    was = drafter.training, corrector.training
    drafter.eval(), corrector.eval()
    dev = drafter.device
    for batch in loader:
        batch = {key: v.to(dev) for key, v in batch.items()}
        feats, greedy, _ = batch_features(batch, target, drafter.target_layer_ids, greedy=True)
        eval_batch(drafter, corrector, batch, (feats, greedy), st, k, rules, lam, backend)
    drafter.train(was[0]), corrector.train(was[1])
    return st.summary(rules[0]) if st.blocks else {}
