"""Schemas of the training sections (pretrain, specopd, corrector) and the parts they share.

Settings that several training sections share are declared once, as parts the sections inherit —
`Budget` / `EpochBudget` (when a run stops), `Optim` / `Schedule` (optimiser and learning-rate
shape), `Batches`, `Validation` and `Run` (resumable Lightning run) — so params.yaml stays flat
(`pretrain.lr`, `specopd.lr`, ...) while each field, its meaning and its check are written once.
The training machinery (draftlab.training) reads one full set of run settings, a `PretrainConfig`;
`SpecOPDConfig.run_settings` and `CorrectorConfig.run_settings` assemble theirs from those parts.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from draftlab import paths
from draftlab.config.checks import KERNEL_BACKENDS, PRECISIONS, MethodNames, _choice, _positive, _unit, parts, section
from draftlab.errors import ConfigError, DraftlabError

LABELS = ("reference", "greedy")  # pretraining labels: the reference token, or the target's greedy token (see PretrainConfig)
ANCHOR_REGIONS = ("response", "all")  # where pretraining anchors may lie
TRAIN_ATTENTIONS = ("auto", "split", "dense", "flex")  # the drafter's training attention (DFlashDrafter.train_attention)


# ----------------------------------------------------------------------------------------------
# parts shared by the training sections (flat in params.yaml: each section inherits the fields)


@dataclass
class Budget:
    """When a run stops: the first budget reached (0 = no limit)."""

    max_steps: int = 0  # 0 = no step limit
    max_minutes: float = 0.0  # training minutes (validation excluded); 0 = no time limit

    def check_budget(self, p: str) -> None:
        for k in ("max_steps", "max_minutes"):
            _positive(f"{p}.{k}", getattr(self, k), allow_zero=True)


@dataclass
class EpochBudget(Budget):
    epochs: float = 0.0  # passes over the training sequences; 0 = no epoch limit

    def check_budget(self, p: str) -> None:
        super().check_budget(p)
        _positive(f"{p}.epochs", self.epochs, allow_zero=True)
        if not (self.max_steps or self.max_minutes or self.epochs):
            raise ConfigError(f"{p}: set at least one budget (max_steps, max_minutes or epochs) > 0")


@dataclass
class Optim:
    """AdamW and gradient clipping; warm-up is a fraction of the budget."""

    lr: float = 1e-3
    warmup: float = 0.04  # fraction of the budget
    weight_decay: float = 0.01
    grad_clip: float = 1.0  # 0 = off

    def check_optim(self, p: str) -> None:
        _positive(f"{p}.lr", self.lr)
        _unit(f"{p}.warmup", self.warmup)
        for k in ("weight_decay", "grad_clip"):
            _positive(f"{p}.{k}", getattr(self, k), allow_zero=True)


@dataclass
class Schedule(Optim):
    """Optim plus the learning-rate shape after warm-up."""

    min_lr_ratio: float = 0.0  # cosine floor as a fraction of lr
    schedule: str = "cosine"  # cosine | constant

    def check_optim(self, p: str) -> None:
        super().check_optim(p)
        _unit(f"{p}.min_lr_ratio", self.min_lr_ratio)
        _choice(f"{p}.schedule", self.schedule, ("cosine", "constant"))


@dataclass
class Batches:
    batch_size: int = 4  # sequences per step
    anchors_per_seq: int = 96  # random blocks per sequence per step (response positions only)

    def check_batches(self, p: str) -> None:
        for k in ("batch_size", "anchors_per_seq"):
            _positive(f"{p}.{k}", getattr(self, k))


@dataclass
class Validation:
    val_anchor_stride: int = 3  # validate every k-th anchor of held-out / eval sequences
    topk: int = 8  # K of the top-K coverage metric

    def check_validation(self, p: str) -> None:
        for k in ("val_anchor_stride", "topk"):
            _positive(f"{p}.{k}", getattr(self, k))


@dataclass
class Run:
    """A resumable Lightning run: validation cadence, checkpoints, precision, seed."""

    val_every: int = 100  # steps between validations (and budget-curve points); 0 = only at the end
    checkpoint_every: int = 50  # steps between resumable Lightning checkpoints
    checkpoint_seconds: float = 0.0  # also one every this many wall seconds (0 = off; the gpu profiles: 20)
    resume: bool = True  # continue an interrupted run with the same settings from its last checkpoint
    precision: str = "auto"  # auto = 32-true on CPU, bf16-mixed on CUDA
    seed: int = 0
    # the drafter's training forward (draftlab.drafter.flex): auto = block-sparse flex attention on CUDA, the split
    # path on CPU (flex attention has no backward there); split | dense (one SDPA call) | flex. Equal results
    train_attention: str = "auto"

    def check_run(self, p: str) -> None:
        for k in ("val_every", "checkpoint_every", "checkpoint_seconds"):
            _positive(f"{p}.{k}", getattr(self, k), allow_zero=True)
        _choice(f"{p}.precision", self.precision, PRECISIONS)
        _choice(f"{p}.train_attention", self.train_attention, TRAIN_ATTENTIONS)


# ----------------------------------------------------------------------------------------------
# training sections


@dataclass
class PretrainConfig(EpochBudget, Schedule, Batches, Validation, Run):
    """Off-policy drafter training on the references. The run stops at the first budget reached
    (max_steps, max_minutes of training time, epochs over the training sequences); warm-up and
    cosine decay follow the fraction of that budget already spent. This is also the full set of
    run settings that the training machinery (draftlab.training) reads for every training job."""

    max_minutes: float = 15.0
    gamma: float = 0.0  # loss decay exp(-(k-1)/gamma); 0 = auto: 7 / 5 / 4 for S = 16 / 10 / 8
    cache_features: bool = True  # cache target tap features (fp16) on disk; False = compute on the fly
    feature_batch_tokens: int = 2048  # padded tokens per target forward when computing features
    # distillation from the target's own distribution over the draft vocabulary, rebuilt from the
    # cached last-layer tap (final norm + head): loss += kd_weight * KL(p_target || q_drafter) per slot
    kd_weight: float = 0.0
    # labels: reference = the reference token at a+k; greedy = the target's greedy token at a+k given
    # the text before it, valid while the text agrees with the target's greedy tokens (exact for
    # human-written text too, so prompt positions can be anchors)
    labels: str = "reference"
    anchor_region: str = "response"  # response | all (prompt positions too; needs labels=greedy)
    max_slot: int = 0  # supervise (and run the head on) slots 1..max_slot only; 0 = every proposed slot
    chunk_rows: int = 0  # supervised slots per chunk of the head + CE (+ distillation) step; 0 = all at once
    # seeded drafters: the probability that a training block's seeds all become MASK (the block trains as an
    # unseeded one); never at validation or inference. 0 = off
    seed_dropout: float = 0.0
    # the learning rate of the seed bias (drafter.seed_bias), its own AdamW group under the same schedule; Adam
    # moves a scalar by about its lr per step, so at pretrain.lr a bias of tens of logits barely moves in a CPU
    # run. 0 = pretrain.lr
    seed_bias_lr: float = 0.0
    # seeded drafters: the CE weight of the slots that carry a seed (training batches only; validation's loss keeps
    # weight 1). 0 = train on the unseeded slots alone and leave the seeds to the seed bias. 1 = every slot alike
    seeded_slot_weight: float = 1.0
    # a drafter folder whose weights initialise this drafter before training (e.g. models/drafter/pretrained, the plain
    # drafter, for the seeded one: same shape but the seed settings; the seed's own tensors keep their initial
    # values). "" = the usual initialisation. Read when training starts; its contents are part of the run key
    init_from: str = ""

    def check(self, p: str) -> None:
        self.check_budget(p)
        self.check_optim(p)
        self.check_batches(p)
        self.check_validation(p)
        self.check_run(p)
        _positive(f"{p}.gamma", self.gamma, allow_zero=True)
        _positive(f"{p}.feature_batch_tokens", self.feature_batch_tokens)
        _positive(f"{p}.kd_weight", self.kd_weight, allow_zero=True)
        _positive(f"{p}.max_slot", self.max_slot, allow_zero=True)
        _positive(f"{p}.chunk_rows", self.chunk_rows, allow_zero=True)
        _unit(f"{p}.seed_dropout", self.seed_dropout)
        _positive(f"{p}.seed_bias_lr", self.seed_bias_lr, allow_zero=True)
        _unit(f"{p}.seeded_slot_weight", self.seeded_slot_weight)
        _choice(f"{p}.labels", self.labels, LABELS)
        _choice(f"{p}.anchor_region", self.anchor_region, ANCHOR_REGIONS)
        if self.anchor_region == "all" and self.labels != "greedy":
            raise ConfigError(f"{p}.anchor_region=all needs {p}.labels=greedy (prompt text is not the target's own output)")


@dataclass
class SpecOPDConfig(Budget, Schedule, Batches, Validation, Run):
    """SpecOPD (docs/algorithms.md "SpecOPD"): branch-parallel on-policy distillation from the pretrained drafter, plus
    the comparison objectives trained for the same number of updates on the same references."""

    base_drafter: str = paths.PLAIN_DRAFTER  # the drafter every objective starts from
    # the comparison objectives (draftlab.specopd.objectives.BASELINES, all of them by default); [] = SpecOPD only
    baselines: list[str] = field(default_factory=lambda: ["offpolicy_ce", "offpolicy_tv", "sequential", "first_rejection"])
    anchors_per_seq: int = 32  # A: branches per sequence per update (response positions)
    branch_width: int = 0  # W: tokens per branch; 0 = the drafter's proposals per block (S-1)
    temperature: float = 1.0  # T: branches are sampled from softmax(q_logits / T); α compares q and p at T
    seq_rounds: int = 8  # the sequential (Draft-OPD) objective: dependent draft->verify rounds per stream per update
    batch_size: int = 2  # sequences per update
    max_steps: int = 40  # updates of the SpecOPD objective
    baseline_max_steps: int = 0  # updates of every baseline; 0 = max_steps (equal steps)
    max_minutes: float = 0.0  # safety cap on each objective's training minutes; 0 = none
    lr: float = 3e-4
    min_lr_ratio: float = 0.1
    warmup: float = 0.05
    val_every: int = 0  # steps between validations (best state kept); 0 = before and after only
    val_anchor_stride: int = 4
    val_sets: list[str] = field(default_factory=list)  # heldout / eval suite names; [] = all
    kernels: str = "auto"  # tv-overlap backend: auto (Triton on CUDA) | torch | triton
    cost_anchors: int = 16  # branches timed in the packed vs independent scoring measurement; 0 = skip
    cost_sequences: int = 1
    tv_eval_seqs: int = 16  # held-out sequences of the T=1 acceptance evaluation (E2E-TV surrogate); 0 = skip
    checkpoint_every: int = 10
    # memory at scale (docs/gpu.md): False = the target's tap features are computed in the step (validation,
    # the off-policy CE arm); True = cached on disk (fp16) once, ~n_taps*hidden*2 bytes per reference token
    cache_features: bool = True
    chunk_rows: int = 0  # draft positions per chunk of the q and p logits, overlaps, sampling; 0 = all at once
    vocab_chunk: int = 0  # vocabulary columns per chunk of branch sampling; 0 = one float64 softmax + cumsum over V

    def check_names(self, p: str, names: MethodNames) -> None:
        for b in self.baselines if names.baselines else ():
            _choice(f"{p}.baselines[]", b, tuple(names.baselines))

    def check(self, p: str) -> None:
        self.check_budget(p)
        _positive(f"{p}.max_steps", self.max_steps)
        self.check_optim(p)
        self.check_batches(p)
        self.check_validation(p)
        self.check_run(p)
        _positive(f"{p}.seq_rounds", self.seq_rounds)
        for k in ("branch_width", "baseline_max_steps", "cost_anchors", "cost_sequences", "tv_eval_seqs", "chunk_rows",
                  "vocab_chunk"):
            _positive(f"{p}.{k}", getattr(self, k), allow_zero=True)
        if self.temperature <= 0:
            raise ConfigError(f"{p}.temperature={self.temperature!r} must be > 0: E2E-TV compares the drafter's and "
                              f"the target's distributions at the sampling temperature (greedy has none)")
        _choice(f"{p}.kernels", self.kernels, KERNEL_BACKENDS)

    def run_settings(self, max_steps: int, max_minutes: float) -> PretrainConfig:
        """The run settings one objective trains with (the training machinery reads a PretrainConfig)."""
        return PretrainConfig(**parts(self, Schedule, Batches, Validation, Run), max_steps=max_steps,
                              max_minutes=max_minutes, epochs=0.0, cache_features=self.cache_features,
                              chunk_rows=self.chunk_rows)


@dataclass
class CorrectorConfig(EpochBudget, Optim, Batches):
    """The corrector stage (docs/algorithms.md "DCOCO"): what every corrector family shares — the variants, the
    co-training budget and optimiser, the loss weighting, how the corrector loss reaches the drafter, the drafters it
    starts from — and, under `families`, each family's own settings (`corrector.families.dcoco.dim`, ...).

    `families` maps a family's name to its settings. This layer imports no method: the caller hands in the family
    records (`MethodNames.families`, draftlab.pipeline.names), and `check_names` turns each entry into its family's
    settings dataclass (defaults filled, unknown keys and bad values one line), one for every family, so the values
    a stage reads are typed. Loaded without the records (a tool reading params.yaml), an entry stays the mapping the
    file gave; the family's record builds its dataclass from it where it is read (`Family.section`).
    `family_modules` names extra family modules (docs/architecture.md "Adding a corrector family")."""

    k: int = 16  # candidates per slot (the paper does not state its K; 16 matches its top-16 coverage)
    rho: float = 4.0  # loss weights exp(-(p-1)/ρ)
    # the corrector loss's labels: greedy = the target's greedy token at each slot under teacher forcing (the paper's,
    # the default); reference = the reference's own token there (references sampled at T=1: a sampled label, so the
    # corrector's rows learn the target's conditional law, what a sampled walk needs; docs/algorithms.md)
    labels: str = "greedy"
    cumulative_mask: bool = False  # stop supervising a block after its first masked transition
    lambda_corr: float = 1.0  # L = L_drafter + λ_corr · L_corr
    frozen_backbone: bool = False  # train only the corrector on the fixed drafter
    # how L_corr's gradient reaches the drafter in co-training, for variants that do not set it themselves
    # (draftlab.corrector.variants): a weight per path, 1 = the paper's joint training, 0 = stop-gradient
    grad_hidden: float = 1.0  # through the hidden states the corrector reads
    grad_logits: float = 1.0  # through the candidates' draft logits
    frozen_warmup: float = 0.0  # fraction of the budget with the drafter frozen first (the corrector warms up)
    # the trained variants (draftlab.corrector.variants): dcoco, nopair, nocand, frozen (from base_drafter);
    # specopd-dcoco / specopd-dcoco-t1 (dcoco from SpecOPD's greedy / T=1 state); dspark, domino (the
    # sequential baselines, docs/algorithms.md "Baselines and controls"); the co-training options and loss ablations.
    # No default: this layer names no family; the method presets (conf/method/) list them, the main one first
    variants: list[str] = field(default_factory=list)
    base_drafter: str = paths.PLAIN_DRAFTER  # the drafter co-training starts from
    specopd_drafter: str = paths.SPECOPD_DRAFTER  # the specopd stage's folder: t0/ (greedy) and t1/ (T=1) states
    control: bool = True  # also train the dflash-long control: the drafter alone, as many steps as dcoco
    val_every: int = 200  # steps between validations of the full-budget dcoco run; 0 = only at the end (the
    # other variants validate at their end: their comparison point)
    kernels: str = "auto"  # auto (Triton on CUDA) | torch | triton
    max_minutes: float = 6.0  # training minutes of the main corrector; 0 = no time limit
    variant_max_minutes: float = 0.0  # training minutes of each ablation variant; 0 = max_minutes x variant_budget_fraction
    # the ablations' share of the main arms' budget (`variant_budget`): their max_steps and epochs (and their minutes
    # where variant_max_minutes is 0) are the section's times this fraction; in (0, 1], 1 = the full budget
    variant_budget_fraction: float = 1.0
    # step budgets by variant (updates): a variant named here trains exactly that many updates, its minutes and
    # epochs off, so a loaded machine changes its time, not its model (the toy world's replicates: docs/decisions.md
    # "Replicates in the toy world"); the dflash-long control follows the main variant's updates as before
    variant_steps: dict[str, int] = field(default_factory=dict)
    drafter_lr: float = 3e-4  # drafter learning rate in co-training (`lr` is the corrector's)
    seed: int = 42
    # each family's settings, by family name (dcoco: dim, hidden, path_rule, lam; dspark: rank, gate; domino: rank;
    # dflash2: rank; a family of another package: its own)
    families: dict[str, Any] = field(default_factory=dict)
    family_modules: list[str] = field(default_factory=list)  # extra family modules (importable, e.g. my_pkg.fixed_rule)
    # the family records handed in with the method tables (`check_names`; not a setting): None = not handed in
    records: ClassVar[dict[str, Any] | None] = None

    def check_names(self, p: str, names: MethodNames) -> None:
        records = names.families(self.family_modules) if names.families is not None else None
        variants = [v.name for f in records.values() for v in f.variants] if records is not None else names.variants
        for v in self.variants if variants else ():
            _choice(f"{p}.variants[]", v, tuple(variants))
        if records is None:
            return
        for name in self.families:
            if name not in records:
                raise ConfigError(f"{p}.families.{name}: no corrector family of that name; the families: "
                                  f"{', '.join(records)} (another package's: name its module in {p}.family_modules)")
        for name, rec in records.items():
            self.families[name] = section(f"{p}.families.{name}", rec.config, self.families.get(name))
        self.records = dict(records)  # what the plan reads of each family (its budget role, its cost model)
        for rec in records.values():  # a family's own rule on K, before any stage builds it
            if rec.k_rule is not None and {v.name for v in rec.variants} & set(self.variants):
                try:
                    rec.k_rule(self.k, f"{p}.k")
                except DraftlabError as e:
                    raise ConfigError(str(e)) from None

    @property
    def main_variant(self) -> str:
        """The stage's main variant: the first of `variants` (the control trains as many updates as it does; the plan
        sizes the co-training step at its corrector). Every profile lists DCOCO's first."""
        if not self.variants:
            raise ConfigError("corrector.variants is empty: name the variants to train, the main one first "
                              "(conf/method/*.yaml lists them per method preset)")
        return self.variants[0]

    def check(self, p: str) -> None:
        _positive(f"{p}.k", self.k)
        if self.k < 2:
            raise ConfigError(f"{p}.k={self.k} must be >= 2 (re-selection needs alternatives)")
        _choice(f"{p}.labels", self.labels, ("greedy", "reference"))
        _choice(f"{p}.kernels", self.kernels, KERNEL_BACKENDS)
        for name, v in self.families.items():
            if not isinstance(v, dict) and not dataclasses.is_dataclass(v):
                raise ConfigError(f"{p}.families.{name}={v!r} must be a mapping of that family's settings")
        _positive(f"{p}.rho", self.rho)
        _positive(f"{p}.lambda_corr", self.lambda_corr, allow_zero=True)
        for k in ("grad_hidden", "grad_logits"):
            _unit(f"{p}.{k}", getattr(self, k))
        if not 0.0 <= self.frozen_warmup < 1.0:
            raise ConfigError(f"{p}.frozen_warmup={self.frozen_warmup} must lie in [0, 1) (a fraction of the budget)")
        for k in ("variant_max_minutes", "val_every"):
            _positive(f"{p}.{k}", getattr(self, k), allow_zero=True)
        if not 0.0 < self.variant_budget_fraction <= 1.0:
            raise ConfigError(f"{p}.variant_budget_fraction={self.variant_budget_fraction!r} must lie in (0, 1]: the "
                              f"ablations' share of the main arms' budget (1 = the full budget)")
        self.check_budget(p)
        self.check_optim(p)
        self.check_batches(p)
        _positive(f"{p}.drafter_lr", self.drafter_lr, allow_zero=True)
        for v, n in self.variant_steps.items():
            if v not in self.variants:
                raise ConfigError(f"{p}.variant_steps.{v}: not a variant of {p}.variants ({', '.join(self.variants)}); "
                                  f"a step budget names a variant the stage trains")
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ConfigError(f"{p}.variant_steps.{v}={n!r} must be a whole number of updates >= 1")

    def variant_budget(self, main_arm: bool, variant: str | None = None) -> dict:
        """The budget of one variant: a main arm (the main variant, the sequential baselines) trains on this
        section's max_minutes / max_steps / epochs; an ablation on variant_max_minutes (0 = max_minutes x
        variant_budget_fraction) and max_steps / epochs x variant_budget_fraction (a step limit stays >= 1;
        0 = no limit stays 0); a variant in `variant_steps` on that many updates alone. Returns {max_minutes,
        max_steps, epochs}."""
        if variant in self.variant_steps:  # a step budget alone
            return {"max_minutes": 0.0, "max_steps": int(self.variant_steps[variant]), "epochs": 0.0}
        if main_arm:
            return {"max_minutes": self.max_minutes, "max_steps": self.max_steps, "epochs": self.epochs}
        f = self.variant_budget_fraction
        return {"max_minutes": self.variant_max_minutes or self.max_minutes * f,
                "max_steps": max(1, int(self.max_steps * f + 0.5)) if self.max_steps else 0, "epochs": self.epochs * f}

    def run_settings(self, pretrain: PretrainConfig, max_minutes: float, max_steps: int | None = None,
                     k: int | None = None) -> PretrainConfig:
        """The run settings of one co-training run: pretraining's (schedule shape, γ, feature cache,
        precision) with this section's budget, optimiser (the drafter's lr is `drafter_lr`), batches,
        seed and validation cadence; `max_steps` given = a step budget alone (the dflash-long control).
        Seed dropout, the seed bias's own lr, the seeded slots' weight and the warm start are pretraining's alone
        (off here)."""
        return replace(pretrain, **{**parts(self, Optim, Batches), "lr": self.drafter_lr}, seed=self.seed,
                       val_every=self.val_every, max_minutes=max_minutes, seed_dropout=0.0, seed_bias_lr=0.0,
                       seeded_slot_weight=1.0, init_from="",
                       max_steps=self.max_steps if max_steps is None else max_steps,
                       epochs=self.epochs if max_steps is None else 0.0, topk=k or self.k)
