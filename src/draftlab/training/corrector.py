"""DCOCO co-training (SPEC §2.3): drafter + corrector trained jointly from a base drafter.

Reuses the pretraining machinery (draftlab.training.pretrain): the same data module (random anchors,
length buckets, held-out / eval / train-sample validation sets), the same feature cache, the same
decay-weighted drafter CE (`PretrainModule.drafter_step`), the same budget / schedule / clock,
resumable checkpoints (`fit_module`) and best-state selection. What this module adds:

- `CoTrainModule(PretrainModule)`: L = L_drafter + λ·L_corr. The corrector scores the top-K
  candidates of every proposed slot of every anchor's block (hidden states and draft logits from the
  same multi-anchor drafter pass); L_corr is the masked joint-K² softmax CE of
  `draftlab.corrector.loss`, labels = the target's greedy tokens under teacher forcing (the
  feature store's `greedy`, or the target on the fly). Both losses divide a numerator by a
  denominator summed over ranks (distributed-safe). `frozen=True` (the frozen-backbone ablation)
  runs the drafter without gradients (its parameters frozen, hidden / logits detached) and trains
  only the corrector.
- Validation: per validation set, simulated τ of the corrected block (the variant's path rule) vs
  the uncorrected one (the drafter's argmax) vs the top-K oracle (the verifier's token whenever it
  is in the top-K), all through `greedy_accept_length`; the best state (drafter + corrector) is the
  one with the highest corrected held-out τ.
- `train_corrector(...)`: one variant's run (resumable, like `train_drafter`); `evaluate_rules`:
  sim τ of every path rule on the held-out set; `engine_share`: the corrector's share of a real
  speculative round (the engine's `propose` phase) on a few prompts.
- `cotrain_from_references(...)`: what the stage runs — every variant, then the `dflash-long`
  control (the base drafter alone, as many steps as the main co-training run, same data).

The sequential baselines `dspark` / `domino` (SPEC §2.4, `draftlab.corrector.sequential`) run through
the same pieces: `build_corrector` builds them, `train_corrector` trains them with
`draftlab.training.sequential.SeqCoTrainModule`, validation walks their blocks slot by slot
(`block_paths`; their only path rule is "greedy").
"""
from __future__ import annotations

import hashlib
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

import lightning as L
import torch
from torch import Tensor

from draftlab.config import CorrectorConfig, PretrainConfig
from draftlab.corrector.variants import SEQUENTIAL as SEQUENTIAL_CORRECTORS
from draftlab.errors import DraftlabError
from draftlab.corrector.loss import corrector_loss
from draftlab.corrector.model import DCOCOCorrector, draft_candidates
from draftlab.corrector.paths import path_tokens, select_path
from draftlab.corrector.model import count_parameters, spec_from_config
from draftlab.corrector import sequential as seq
from draftlab.drafter.model import DFlashDrafter
from draftlab.training.features import FeatureStore, SequenceSet, target_fingerprint
from draftlab.training.metrics import BlockStats
from draftlab.training.pretrain import (
    DrafterDataModule, PretrainModule, TrainResult, block_targets, budget_steps, fit_module, global_ratio, run_key,
    train_drafter,
)

from draftlab.corrector.variants import RULES  # noqa: E402
ROW_CHUNK = 4096  # drafter rows per top-K call in validation
BLOCK_CHUNK = 256  # blocks per corrector call in validation (the torch scorer forms [N, n−1, K, K, m])
AnyCorrector = DCOCOCorrector | seq.SequentialCorrector


def pretrain_view(pcfg: PretrainConfig, ccfg: CorrectorConfig, max_minutes: float, max_steps: int | None = None,
                  k: int | None = None) -> PretrainConfig:
    return ccfg.run_settings(pcfg, max_minutes, max_steps, k)


def arch_variant(variant: str) -> str:
    """Corrector architecture of a trained variant (specopd-dcoco is dcoco on another base drafter)."""
    return "dcoco" if variant == "specopd-dcoco" else variant


def build_corrector(ccfg: CorrectorConfig, drafter: DFlashDrafter, variant: str,
                    seed: int | None = None) -> AnyCorrector:
    torch.manual_seed(ccfg.seed if seed is None else seed)
    if variant in SEQUENTIAL_CORRECTORS:
        spec = seq.sequential_spec(variant, drafter, ccfg.seq_rank, ccfg.seq_gate)
        return seq.build_sequential(spec, drafter).to(drafter.device)
    spec = replace(spec_from_config(ccfg, drafter.spec.hidden_size, drafter.embed_tokens, arch_variant(variant)),
                   variant=variant)
    return DCOCOCorrector(spec, drafter.embed_tokens).to(drafter.device)


def proposal_for(corrector: AnyCorrector, rule: str = "greedy", lam: float = 0.75, backend: str | None = None):
    """The engine's proposal step of a trained corrector (DCOCO's path rule, or the slot-by-slot walk)."""
    from draftlab.corrector.proposal import CorrectorProposal, SequentialProposal

    if isinstance(corrector, seq.SequentialCorrector):
        return SequentialProposal(corrector)
    return CorrectorProposal(corrector, rule, lam, None, backend)


def parameter_breakdown(corrector: AnyCorrector) -> dict[str, int]:
    count = seq.count_parameters if isinstance(corrector, seq.SequentialCorrector) else count_parameters
    return count(corrector.spec)


# ---- per-batch pieces shared by training, validation and the final evaluation ---------------------------


def candidates(drafter: DFlashDrafter, hidden: Tensor, k: int, logits: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Top-K of the proposed slots: hidden [B, A, S, H] (slot 0 included) or logits [B, A, n, Vd]
    -> (cand_ids [B, A, n, K] target ids, cand_logits [B, A, n, K]). Without `logits` the head runs
    in row chunks (validation: no [rows, Vd] tensor for every block at once)."""
    if logits is not None:
        return draft_candidates(logits, k, drafter.draft_vocab)
    B, A, S, H = hidden.shape
    rows = hidden[:, :, 1:].reshape(-1, H)  # [B*A*n, H]
    ids, vals = zip(*(draft_candidates(drafter.logits(rows[c:c + ROW_CHUNK]), k, drafter.draft_vocab)
                      for c in range(0, rows.shape[0], ROW_CHUNK)))
    K = ids[0].shape[-1]
    return torch.cat(ids).view(B, A, S - 1, K), torch.cat(vals).view(B, A, S - 1, K)


@torch.no_grad()
def corrected_blocks(corrector: DCOCOCorrector, hidden: Tensor, cand_ids: Tensor, cand_logits: Tensor,
                     rules: tuple[str, ...], lam: float, backend: str | None = None) -> dict[str, Tensor]:
    """hidden [N, n, H] (proposed slots), cand_ids / cand_logits [N, n, K] -> {rule: tokens [N, n]},
    scoring at most BLOCK_CHUNK blocks per call."""
    out: dict[str, list[Tensor]] = {r: [] for r in rules}
    for c in range(0, hidden.shape[0], BLOCK_CHUNK):
        h, ids, lg = hidden[c:c + BLOCK_CHUNK], cand_ids[c:c + BLOCK_CHUNK], cand_logits[c:c + BLOCK_CHUNK]
        scores = corrector(h, ids, lg, backend)  # [N', n−1, K, K]
        for r in rules:
            out[r].append(path_tokens(select_path(scores, lg, r, lam, backend), ids))  # [N', n]
    return {r: torch.cat(v) for r, v in out.items()}


@torch.no_grad()
def block_paths(drafter: DFlashDrafter, corrector: AnyCorrector, hidden: Tensor, cand_ids: Tensor, cand_logits: Tensor,
                slot0: Tensor, rules: tuple[str, ...], lam: float, backend: str | None = None) -> dict[str, Tensor]:
    """hidden [N, n, H] (proposed slots), cand_ids / cand_logits [N, n, K], slot0 [N] -> {rule: tokens [N, n]}:
    DCOCO's path rules, or a sequential corrector's slot-by-slot walk (BLOCK_CHUNK blocks per call)."""
    if not isinstance(corrector, seq.SequentialCorrector):
        return corrected_blocks(corrector, hidden, cand_ids, cand_logits, rules, lam, backend)
    toks = torch.cat([corrector.propose(h, drafter.logits(h), s0, drafter.draft_vocab)
                      for h, s0 in zip(hidden.split(BLOCK_CHUNK), slot0.split(BLOCK_CHUNK))])  # [N, n]
    return {r: toks for r in rules}


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


# ---- the LightningModule ------------------------------------------------------------------------------------


class CoTrainModule(PretrainModule):
    """Drafter + DCOCO corrector, L = L_drafter + λ·L_corr (or λ·L_corr alone with a frozen drafter)."""

    def __init__(self, drafter: DFlashDrafter, corrector: AnyCorrector, cfg: PretrainConfig, ccfg: CorrectorConfig,
                 frozen: bool = False, total_steps: int = 0, val_names: list[str] | None = None, target=None,
                 rule: str = "greedy", val_rules: tuple[str, ...] | None = None):
        super().__init__(drafter, cfg, total_steps, val_names, target, "greedy")
        self.corrector, self.ccfg, self.frozen, self.rule = corrector, ccfg, frozen, rule
        self.val_rules = tuple(val_rules or (rule,))
        self.k = min(ccfg.k, drafter.spec.draft_vocab_size or drafter.spec.target_vocab_size)
        if self.cfg.topk != self.k:  # coverage is reported at the corrector's K
            self.cfg = replace(self.cfg, topk=self.k)
        self.backend = None if ccfg.kernels == "auto" else ccfg.kernels
        if frozen:
            drafter.requires_grad_(False)
        self.transitions_supervised = 0.0  # Σ m_p (counted over batches)
        self.transitions_total = 0

    # ---- optimisation --------------------------------------------------------------------------------------
    def configure_optimizers(self):
        def split(mod, lr, wd):
            ps = [p for p in mod.parameters() if p.requires_grad]
            return [{"params": [p for p in ps if p.ndim >= 2], "weight_decay": wd, "lr": lr},
                    {"params": [p for p in ps if p.ndim < 2], "weight_decay": 0.0, "lr": lr}]

        groups = split(self.corrector, self.ccfg.lr, self.ccfg.weight_decay)
        if not self.frozen:
            groups += split(self.drafter, self.cfg.lr, self.cfg.weight_decay)
        opt = torch.optim.AdamW([g for g in groups if g["params"]], betas=(0.9, 0.95))
        c = self.cfg
        from draftlab.training.pretrain import lr_factor

        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda _step: lr_factor(self.progress(), c.warmup, c.schedule, c.min_lr_ratio))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    # ---- losses ----------------------------------------------------------------------------------------------
    def compute_losses(self, batch: dict) -> dict:
        """Both losses on one batch: {'loss', 'drafter', 'corrector', 'den_corr', 'mask'}."""
        with torch.no_grad() if self.frozen else nullcontext():
            d = self.drafter_step(batch, greedy=True)
        hidden, logits = d["hidden"][:, :, 1:], d["logits"]  # [B, A, n, H], [B, A, n, Vd]
        if self.frozen:  # no gradient into the drafter (already so under no_grad; explicit)
            hidden, logits = hidden.detach(), logits.detach()
        cand_ids, cand_logits = candidates(self.drafter, hidden, self.k, logits)  # [B, A, n, K] each
        scores = self.corrector(hidden, cand_ids, cand_logits)  # [B, A, n−1, K, K]
        labels, valid = block_targets(batch, d["greedy"], self.drafter.block_size)  # [B, A, n]
        cl = corrector_loss(scores, cand_ids, labels, valid, self.ccfg.rho, self.ccfg.cumulative_mask)
        l_corr = global_ratio(cl.num, cl.den)
        loss = self.ccfg.lambda_corr * l_corr if self.frozen else d["loss"] + self.ccfg.lambda_corr * l_corr
        return {"loss": loss, "drafter": d["loss"], "corrector": l_corr, "den_corr": cl.den, "mask": cl.mask,
                "pair_valid": valid[..., :-1] & valid[..., 1:]}

    def training_step(self, batch: dict, batch_idx: int) -> Tensor:
        out = self.compute_losses(batch)
        bs = batch["ids"].shape[0]
        self.transitions_supervised += float(out["mask"].sum())
        self.transitions_total += int(out["pair_valid"].sum())
        self.log_train(out["drafter"], bs)
        self.log("train/corrector_loss", out["corrector"].detach(), batch_size=bs, prog_bar=True)
        self.log("train/total_loss", out["loss"].detach(), batch_size=bs)
        self.log("train/supervised_transition_frac", self.transitions_supervised / max(self.transitions_total, 1),
                 batch_size=bs)
        return out["loss"]

    # ---- validation ----------------------------------------------------------------------------------------------
    def on_validation_epoch_start(self) -> None:
        n = self.drafter.block_size - 1
        self._stats = {name: SetStats(n, self.k, self.val_rules) for name in self.val_names}

    @torch.no_grad()
    def validation_step(self, batch: dict, batch_idx: int, dataloader_idx: int = 0) -> None:
        st = self._stats[self.val_names[dataloader_idx]]
        eval_batch(self.drafter, self.corrector, batch, self._features(batch, greedy=True), st, self.k,
                   self.val_rules, self.ccfg.lam, self.backend)

    def val_results(self) -> dict:
        return {name: st.summary(self.rule) for name, st in self._stats.items() if st.blocks}

    def snapshot(self) -> dict:
        cpu = lambda m: {k: v.detach().to("cpu", copy=True) for k, v in m.state_dict().items()}  # noqa: E731
        return {"drafter": cpu(self.drafter), "corrector": cpu(self.corrector)}

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        super().on_save_checkpoint(checkpoint)
        checkpoint["draftlab"].update(transitions_supervised=self.transitions_supervised,
                                      transitions_total=self.transitions_total)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        super().on_load_checkpoint(checkpoint)
        st = checkpoint.get("draftlab", {})
        self.transitions_supervised = float(st.get("transitions_supervised", 0.0))
        self.transitions_total = int(st.get("transitions_total", 0))


def eval_batch(drafter: DFlashDrafter, corrector: AnyCorrector, batch: dict, features: tuple[Tensor, Tensor | None],
               stats: SetStats, k: int, rules: tuple[str, ...], lam: float, backend: str | None = None) -> None:
    """One validation batch into `stats`: drafter pass, top-K, corrected paths, targets."""
    feats, greedy = features
    hidden = drafter.forward_train(feats, batch["ctx_valid"], batch["ids"], batch["anchors"])  # [B, A, S, H]
    cand_ids, cand_logits = candidates(drafter, hidden, k)  # [B, A, n, K]
    tgt, valid = block_targets(batch, greedy, drafter.block_size)  # [B, A, n]
    n, H = hidden.shape[2] - 1, hidden.shape[-1]
    flat = lambda x: x.reshape(-1, n, *x.shape[3:])  # noqa: E731  [B*A, n, ...]
    slot0 = batch["ids"].gather(1, batch["anchors"]).reshape(-1)  # [B*A] the blocks' slot-0 tokens
    paths = block_paths(drafter, corrector, flat(hidden[:, :, 1:]), flat(cand_ids), flat(cand_logits), slot0, rules,
                        lam, backend)
    stats.update(flat(cand_ids), flat(tgt), flat(valid), paths)


# ---- one variant's run ------------------------------------------------------------------------------------


@dataclass
class CoTrainResult(TrainResult):
    supervised_transition_frac: float = 0.0
    frozen: bool = False


def train_corrector(drafter: DFlashDrafter, corrector: AnyCorrector, seqs: SequenceSet, cfg: PretrainConfig,
                    ccfg: CorrectorConfig, workdir: str | Path, store: FeatureStore | None = None, target=None,
                    frozen: bool = False, rule: str | None = None, logger=None, callbacks: list | None = None,
                    log: Callable[[str], None] = print, train_sample: int = 16) -> CoTrainResult:
    """Co-train in place (drafter and corrector end holding the best validation state) and report.
    `cfg` is the pretraining view (`pretrain_view`): budget, batches, drafter lr, schedule."""
    t0 = time.time()
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    if store is None and target is None:
        raise DraftlabError("train_corrector needs a FeatureStore or the target (features on the fly)")
    L.seed_everything(cfg.seed, workers=False, verbose=False)
    dm = DrafterDataModule(seqs, cfg, drafter.block_size, store, train_sample=train_sample)
    module_cls = CoTrainModule
    if isinstance(corrector, seq.SequentialCorrector):
        from draftlab.training.sequential import SeqCoTrainModule as module_cls
    module = module_cls(drafter, corrector, cfg, ccfg, frozen, budget_steps(cfg, dm), dm.val_names, target,
                        rule or ccfg.path_rule)
    steps, resumed_from = fit_module(module, dm, cfg, workdir, logger, callbacks, log, "corrector")
    drafter.load_state_dict(module.best["state"]["drafter"])
    corrector.load_state_dict(module.best["state"]["corrector"])
    return CoTrainResult(
        steps=steps, train_seconds=module.train_seconds, wall_s=time.time() - t0,
        slot_predictions=module.slot_predictions,
        slot_predictions_per_s=module.slot_predictions / max(module.train_seconds, 1e-9),
        uncovered_label_frac=module.uncovered / max(module.labels_seen, 1),
        best_step=module.best["step"], best_sim_tau=module.best["sim_tau"],
        best_train_minutes=module.best["train_minutes"], best_metrics=module.best["metrics"],
        last_metrics=module.last_val, history=list(module.history), resumed_from_step=resumed_from,
        supervised_transition_frac=module.transitions_supervised / max(module.transitions_total, 1), frozen=frozen)


@torch.no_grad()
def evaluate_rules(drafter: DFlashDrafter, corrector: AnyCorrector, seqs: SequenceSet, cfg: PretrainConfig,
                   k: int, lam: float, split: str = "heldout", store: FeatureStore | None = None, target=None,
                   rules: tuple[str, ...] = RULES, backend: str | None = None) -> dict:
    """Simulated τ of every path rule (and uncorrected / oracle) on one validation set -> summary."""
    dm = DrafterDataModule(seqs, cfg, drafter.block_size, store, train_sample=0)
    if split not in dm.val_sets:
        return {}
    loader = dm.val_dataloader()[dm.val_names.index(split)]
    probe = PretrainModule(drafter, cfg, target=target)  # for its feature path (cache or target)
    st = SetStats(drafter.block_size - 1, k, rules)
    was = drafter.training, corrector.training
    drafter.eval(), corrector.eval()
    dev = drafter.device
    for batch in loader:
        batch = {key: v.to(dev) for key, v in batch.items()}
        eval_batch(drafter, corrector, batch, probe._features(batch, greedy=True), st, k, rules, lam, backend)
    drafter.train(was[0]), corrector.train(was[1])
    return st.summary(rules[0]) if st.blocks else {}


@torch.no_grad()
def engine_share(target, drafter, proposal, prompts: list[list[int]], max_new_tokens: int) -> dict:
    """Run the real engine with and without the corrector's proposal step (`proposal_for`) at T=0 on a few
    prompts: its share of round time (the `propose` phase), both engine τ, and whether the outputs agree."""
    from draftlab.decoding import SpeculativeEngine

    out = {}
    toks = {}
    for name, prop in (("uncorrected", None), ("corrected", proposal)):
        eng = SpeculativeEngine(target, drafter, prop)
        eng.generate(prompts[:1], 4, eos_ids=[])  # warm-up
        res = eng.generate(prompts, max_new_tokens, eos_ids=[])
        times = res.round_times.sum(0)  # [phases]
        total = float(times.sum())
        share = {p: float(t) / total if total > 0 else None for p, t in zip(res.phases, times)}
        acc = [a for s in res.accepted for a in s]
        out[name] = {"tau": sum(a + 1 for a in acc) / max(len(acc), 1), "round_share": share,
                     "round_ms": 1e3 * total / max(res.round_times.shape[0], 1), "rounds": res.round_times.shape[0]}
        toks[name] = res.tokens
    out["proposal_share_of_round"] = out["corrected"]["round_share"].get("propose")
    out["lossless"] = toks["uncorrected"] == toks["corrected"]
    return out


# ---- from references to trained variants (what the stage runs) ----------------------------------------------


@dataclass
class VariantOutcome:
    variant: str
    drafter: DFlashDrafter
    corrector: AnyCorrector
    result: CoTrainResult
    report: dict


@dataclass
class CoTrainOutcome:
    variants: dict[str, VariantOutcome] = field(default_factory=dict)
    control: DFlashDrafter | None = None
    control_result: TrainResult | None = None
    report: dict = field(default_factory=dict)


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(Path(path).glob("*")):
        if f.is_file():
            h.update(f.name.encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def open_features(roots: list[Path], target, seqs: SequenceSet, taps: list[int], batch_tokens: int,
                  log: Callable[[str], None] = print) -> tuple[FeatureStore, dict]:
    """Reuse a complete feature cache from any of `roots` (e.g. pretraining's), else build it in the last."""
    tkey = target_fingerprint(target)
    key = FeatureStore.key(tkey, seqs, taps, "float16")
    for r in roots:
        if (Path(r) / key / "meta.json").exists():
            store = FeatureStore(Path(r) / key)
            return store, {"feature_cache": str(store.path), "feature_cache_bytes": store.nbytes,
                           "feature_cache_reused": True, "feature_compute_s": 0.0}
    return FeatureStore.open_or_build(roots[-1], target, seqs, taps, batch_tokens, target_key=tkey, log=log)


def _history_at(history: list[dict], minutes: float, split: str = "heldout") -> float | None:
    """The last validated τ at or before `minutes` of training (None when nothing was validated)."""
    rows = [r for r in history if r["train_minutes"] <= minutes + 1e-9 and r.get(split) is not None]
    return rows[-1][split] if rows else None


def cotrain_from_references(target, df, ccfg: CorrectorConfig, pcfg: PretrainConfig, base_drafters: dict[str, str | Path],
                            work_root: str | Path, feature_roots: list[Path] | None = None,
                            logger_for: Callable[[str], object] | None = None, log: Callable[[str], None] = print,
                            share_prompts: int = 2, share_max_new_tokens: int = 32) -> CoTrainOutcome:
    """references -> every variant of `ccfg.variants` co-trained from its base drafter
    (`base_drafters`: 'pretrained' and, for specopd-dcoco, 'specopd' -> checkpoint folder), then the
    dflash-long control. `logger_for(name)` gives a Lightning logger per run (or None)."""
    from draftlab.drafter import load_drafter

    work_root = Path(work_root)
    if not ccfg.variants:
        raise DraftlabError("corrector.variants is empty; name at least one of dcoco, nopair, nocand, frozen, "
                            "dspark, domino")
    seqs = SequenceSet.from_dataframe(df)
    if not seqs.indices("train"):
        raise DraftlabError("the references have no split=='train' sequences to co-train on")
    base_of = lambda v: base_drafters["specopd" if v == "specopd-dcoco" else "pretrained"]  # noqa: E731
    for v in ccfg.variants:
        if not (Path(base_of(v)) / "config.json").exists():
            raise DraftlabError(f"base drafter {base_of(v)} of variant {v} not found; run the stage that writes it first")
    probe = load_drafter(base_of(ccfg.variants[0]), target)
    taps = probe.target_layer_ids
    store, fstats = None, {}
    if pcfg.cache_features:
        store, fstats = open_features(list(feature_roots or []) + [work_root / "features"], target, seqs, taps,
                                      pcfg.feature_batch_tokens, log)
    on_fly = None if store is not None else target
    held = seqs.indices("heldout") or seqs.indices("train")
    share_set = [seqs.seq(i)[: int(seqs.prompt_len[i])].tolist() for i in held[:share_prompts]]
    out = CoTrainOutcome()
    ckeys = {k: v for k, v in asdict(ccfg).items() if k not in ("variants", "control", "kernels", "base_drafter",
                                                                "specopd_drafter")}
    seq_keys = ("seq_rank", "seq_gate")  # only in the sequential variants' run keys (DCOCO's stay as they were)
    main = "dcoco" if "dcoco" in ccfg.variants else ccfg.variants[0]
    for v in ccfg.variants:
        # the sequential baselines get DCOCO's own budget (their comparison is the paper's, SPEC §2.4)
        full = v == main or v in SEQUENTIAL_CORRECTORS or not ccfg.variant_max_minutes
        minutes = ccfg.max_minutes if full else ccfg.variant_max_minutes
        drafter = load_drafter(base_of(v), target).train()
        k = min(ccfg.k, drafter.spec.draft_vocab_size or drafter.spec.target_vocab_size)
        view = pretrain_view(pcfg, ccfg, minutes, k=k)
        frozen = v == "frozen" or ccfg.frozen_backbone
        corrector = build_corrector(ccfg, drafter, v).train()
        backend = None if ccfg.kernels == "auto" else ccfg.kernels
        sequential = v in SEQUENTIAL_CORRECTORS
        rule = "greedy" if sequential else ccfg.path_rule  # a sequential walk has no other path rule
        rules = (rule,) if sequential else (rule, *[r for r in RULES if r != rule])
        if v == main:  # the base drafter before co-training (the fresh corrector reproduces its argmax)
            ev0 = evaluate_rules(drafter, corrector, seqs, view, k, ccfg.lam, "heldout", store, on_fly, ("greedy",), backend)
            out.report["sim_tau_base_drafter"] = ev0.get("sim_tau_uncorrected")
        vkeys = ckeys if sequential else {kk: vv for kk, vv in ckeys.items() if kk not in seq_keys}
        key = run_key(seqs.fingerprint(), file_digest(Path(base_of(v))), v, frozen, vkeys, minutes,
                      {kk: vv for kk, vv in asdict(view).items() if kk not in ("resume", "checkpoint_every")})
        log(f"corrector: {v} ({'frozen backbone' if frozen else 'co-training'}, {minutes:g} min / "
            f"{view.max_steps or '-'} steps, K={k}, corrector {corrector.num_parameters():,} parameters)")
        res = train_corrector(drafter, corrector, seqs, view, ccfg, work_root / "runs" / key, store, on_fly, frozen,
                              rule, logger_for(v) if logger_for else None, log=log)
        drafter.eval(), corrector.eval()
        ev = evaluate_rules(drafter, corrector, seqs, view, k, ccfg.lam, "heldout", store, on_fly, rules, backend)
        share = engine_share(target, drafter, proposal_for(corrector, rule, ccfg.lam, backend), share_set,
                             share_max_new_tokens) if share_set else {}
        best = res.best_metrics
        primary = "heldout" if "heldout" in best else next(iter(best))
        p = best[primary]
        rep = {
            "variant": v, "base_drafter": str(base_of(v)), "frozen_backbone": frozen, "path_rule": rule, "k": k,
            "sim_tau": p["sim_tau"], "sim_tau_uncorrected": p["sim_tau_uncorrected"], "sim_tau_oracle": p["sim_tau_oracle"],
            "sim_tau_gain": p["sim_tau"] - p["sim_tau_uncorrected"], "headroom_closed": p["headroom_closed"],
            "sim_tau_split": primary, "sim_tau_per_slot": p["sim_tau_per_slot"],
            "sim_tau_per_slot_uncorrected": p["sim_tau_per_slot_uncorrected"],
            "sim_tau_per_slot_oracle": p["sim_tau_per_slot_oracle"],
            "slot_acc_uncorrected": p["slot_acc"], "slot_acc_corrected": p["slot_acc_corrected"],
            f"top{k}_cov": p[f"top{k}_cov"],
            "rules": {r: ev.get(f"sim_tau_{r}") for r in rules} if ev else {},
            "per_set": {name: {"sim_tau": r["sim_tau"], "sim_tau_uncorrected": r["sim_tau_uncorrected"],
                               "sim_tau_oracle": r["sim_tau_oracle"], "blocks": r["blocks"]} for name, r in best.items()},
            "params_corrector": corrector.num_parameters(), "params_corrector_breakdown": parameter_breakdown(corrector),
            "params_drafter_trained": 0 if frozen else drafter.num_trainable_parameters(),
            "steps": res.steps, "best_step": res.best_step, "train_minutes": res.train_seconds / 60.0,
            "best_train_minutes": res.best_train_minutes, "wall_s": res.wall_s, "budget_minutes": minutes,
            "resumed_from_step": res.resumed_from_step,
            "supervised_transition_frac": res.supervised_transition_frac,
            "proposal_share_of_round": share.get("proposal_share_of_round"), "engine": share,
            "history": res.history,
        }
        out.variants[v] = VariantOutcome(v, drafter, corrector, res, rep)
        log(f"corrector: {v} held-out sim τ {p['sim_tau']:.3f} corrected vs {p['sim_tau_uncorrected']:.3f} uncorrected "
            f"(oracle {p['sim_tau_oracle']:.3f}), {res.steps} steps in {res.train_seconds / 60:.1f} min")
    # ablations trained on a shorter schedule are also compared with dcoco at the same training minutes
    if main in out.variants:
        hist = out.variants[main].result.history
        for v, o in out.variants.items():
            if v != main:
                o.report["main_sim_tau_at_same_minutes"] = _history_at(hist, o.report["train_minutes"])
    if ccfg.control and main in out.variants:
        steps = max(out.variants[main].result.steps, 1)
        drafter = load_drafter(base_drafters["pretrained"], target).train()
        view = pretrain_view(pcfg, ccfg, 0.0, max_steps=steps, k=pcfg.topk)
        key = run_key(seqs.fingerprint(), file_digest(Path(base_drafters["pretrained"])), "dflash-long",
                      {kk: vv for kk, vv in asdict(view).items() if kk not in ("resume", "checkpoint_every")})
        log(f"corrector: dflash-long control ({steps} steps of the drafter alone)")
        res = train_drafter(drafter, seqs, view, work_root / "runs" / key, store=store, target=on_fly,
                            logger=logger_for("dflash-long") if logger_for else None, log=log)
        drafter.eval()
        best = res.best_metrics
        primary = "heldout" if "heldout" in best else next(iter(best))
        out.control, out.control_result = drafter, res
        out.report["dflash-long"] = {"sim_tau": best[primary]["sim_tau"], "sim_tau_split": primary,
                                     "sim_tau_per_slot": best[primary]["sim_tau_per_slot"], "steps": res.steps,
                                     "best_step": res.best_step, "train_minutes": res.train_seconds / 60.0,
                                     "wall_s": res.wall_s}
    out.report.update({"variants": {v: o.report for v, o in out.variants.items()}, **fstats})
    base = out.variants[main].report if main in out.variants else None
    if base is not None:
        out.report["summary"] = {
            "main": main, "sim_tau_dcoco": base["sim_tau"], "sim_tau_base_drafter": out.report.get("sim_tau_base_drafter"),
            "sim_tau_uncorrected": base["sim_tau_uncorrected"], "sim_tau_oracle": base["sim_tau_oracle"],
            "sim_tau_ratio": base["sim_tau"] / base["sim_tau_uncorrected"] if base["sim_tau_uncorrected"] else None,
            "sim_tau_dflash_long": out.report.get("dflash-long", {}).get("sim_tau"),
        }
    return out
