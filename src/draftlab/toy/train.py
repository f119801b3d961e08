"""Train the toy world's target: a `LlamaForCausalLM` from scratch on the `target` split, fp32 on CPU.

Each sequence is the ChatML-templated prompt, the canonical answer and `<|im_end|>`; the loss is on the
answer tokens and the eos only. AdamW (no decay on norms and the tied embedding), linear warm-up, then a
cosine from `lr` to `lr * min_lr_ratio` over the run's progress = max(step / max_steps, seconds / budget_s),
so the schedule ends at whichever limit comes first (the step cap makes a run reproducible; the budget
bounds its wall time; `budget_s: 0` = the step cap alone, so a loaded machine changes the run's time, not its model). A curriculum (`curriculum_steps`) starts with short lists and grows them to the world's
sizes (a long list gives the copying heads little signal until they exist). Batches are drawn in chunks of `bucket` batches sorted by length (less padding);
right padding needs no attention mask. Step `s` reads target-split examples fixed by `s`, so a run that
resumes from its checkpoint (written every `checkpoint_s` seconds to `work_dir`: model and optimizer as
tensors, safetensors / `torch.load(weights_only=True)`) sees the same data as one that did not stop.
`run(world, cfg, out_dir)` trains, evaluates (`evaluate.evaluate` on the `heldout` split) and writes an HF
folder: model (safetensors), tokenizer, and `toy_world.json` (the world config, its hash, this config and
the training report).
"""
from __future__ import annotations

import json
import math
import os
import random
import shutil
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

from draftlab.errors import ConfigError
from draftlab.io import make_readable
from draftlab.omp import configure
from draftlab.toy import evaluate as E
from draftlab.toy.tasks import FAMILIES, WorldConfig, examples
from draftlab.toy.tokenizer import EOS, MASK, PAD, build_tokenizer, chat_ids, encode_words

WORLD_FILE = "toy_world.json"
EVAL_SPLIT = "heldout"


@dataclass(frozen=True)
class TrainConfig:
    """The target's size and recipe (see the module doc)."""
    layers: int = 8
    hidden: int = 128
    heads: int = 4
    kv_heads: int = 4
    intermediate: int = 512
    rope_theta: float = 10000.0
    max_positions: int = 512
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup: int = 100
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.98)
    grad_clip: float = 1.0
    batch: int = 48
    max_steps: int = 100_000
    budget_s: float = 1200.0    # wall-clock seconds; 0 = none (a step budget alone: the same model on any machine)
    bucket: int = 8             # batches per length-sorted chunk
    mix: tuple[tuple[str, float], ...] = ()  # training weights per family; empty = the world's weights
    curriculum_steps: int = 0   # list lengths grow from curriculum_start x the world's to the world's by this step
    curriculum_start: float = 0.125
    curriculum_hold: int = 0    # ... staying at curriculum_start for the first this many steps
    seed: int = 0               # initialisation and batch order
    threads: int = 0            # torch.set_num_threads when > 0
    checkpoint_s: float = 30.0
    curve_every_s: float = 60.0  # a teacher-forced reading of held-out examples this often (0 = never)
    curve_n: int = 24           # held-out examples per family in that reading
    eval_n: int = 128           # held-out examples per family in the final greedy evaluation
    compile: bool = False       # torch.compile the training step's model

    def to_dict(self) -> dict:
        return json.loads(json.dumps(asdict(self)))

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        unknown = sorted(set(d) - set(cls.__dataclass_fields__))
        if unknown:
            raise ConfigError(f"toy training config has unknown keys {unknown}")
        d = dict(d)
        for k in ("betas",):
            if k in d:
                d[k] = tuple(d[k])
        if "mix" in d:
            d["mix"] = tuple((str(n), float(w)) for n, w in (d["mix"].items() if isinstance(d["mix"], dict) else d["mix"]))
        return cls(**d)


def build_model(tokenizer, cfg: TrainConfig) -> LlamaForCausalLM:
    """A fresh Llama of the configured size over the tokenizer's vocabulary (tied embeddings, fp32)."""
    if cfg.hidden % cfg.heads or cfg.heads % cfg.kv_heads:
        raise ConfigError(f"toy target: hidden={cfg.hidden} must divide by heads={cfg.heads}, and heads by kv_heads")
    ids = tokenizer.convert_tokens_to_ids([PAD, EOS])
    conf = LlamaConfig(vocab_size=len(tokenizer), hidden_size=cfg.hidden, intermediate_size=cfg.intermediate,
                       num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads, num_key_value_heads=cfg.kv_heads,
                       max_position_embeddings=cfg.max_positions, rms_norm_eps=1e-5, tie_word_embeddings=True,
                       pad_token_id=ids[0], eos_token_id=ids[1], bos_token_id=None,
                       rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta})
    conf._attn_implementation = "sdpa"
    torch.manual_seed(cfg.seed)
    model = LlamaForCausalLM(conf)
    model.generation_config = GenerationConfig(eos_token_id=ids[1], pad_token_id=ids[0], do_sample=False)
    return model


class Batches:
    """Step s -> its (ids, loss mask) batch, a pure function of s (see the module doc)."""

    def __init__(self, world: WorldConfig, tokenizer, cfg: TrainConfig):
        self.world, self.tok, self.cfg = world, tokenizer, cfg
        self.pad, self.eos = tokenizer.convert_tokens_to_ids([PAD, EOS])
        self.weights = dict(cfg.mix) if cfg.mix else None
        self._chunk: tuple[int, list] | None = None

    def world_at(self, step: int) -> WorldConfig:
        """The world whose examples train step `step`: the world itself, or during the curriculum one whose
        size ranges are scaled by f (rounded up): curriculum_start until curriculum_hold, then linear to 1 at
        curriculum_steps."""
        n, hold = self.cfg.curriculum_steps, min(self.cfg.curriculum_hold, self.cfg.curriculum_steps)
        if n <= 0 or step >= n:
            return self.world
        f = self.cfg.curriculum_start + (1 - self.cfg.curriculum_start) * max(0, step - hold) / max(1, n - hold)

        fams = tuple(FAMILIES[s.name].scaled(s, f) for s in self.world.families)
        return replace(self.world, families=fams, min_answer_tokens=1)

    def rows(self, c: int) -> list[list[tuple[list[int], list[int]]]]:
        B, K = self.cfg.batch, self.cfg.bucket
        exs = examples(self.world_at(c * K), "target", B * K, start=c * B * K, weights=self.weights)
        seqs = [(chat_ids(self.tok, e.prompt), encode_words(self.tok, e.answer) + [self.eos]) for e in exs]
        seqs.sort(key=lambda s: len(s[0]) + len(s[1]))
        groups = [seqs[i * B:(i + 1) * B] for i in range(K)]
        random.Random(f"{self.cfg.seed}:{c}").shuffle(groups)
        return groups

    def __call__(self, step: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        c, k = divmod(step, self.cfg.bucket)
        if self._chunk is None or self._chunk[0] != c:
            self._chunk = (c, self.rows(c))
        group = self._chunk[1][k]
        T = max(len(p) + len(a) for p, a in group)
        ids = torch.full((len(group), T), self.pad, dtype=torch.long)
        loss_at = torch.zeros((len(group), T), dtype=torch.bool)  # positions whose NEXT token is scored
        for i, (p, a) in enumerate(group):
            ids[i, :len(p) + len(a)] = torch.tensor(p + a)
            loss_at[i, len(p) - 1:len(p) + len(a) - 1] = True
        return ids, loss_at, sum(len(p) + len(a) for p, a in group)


def lr_at(cfg: TrainConfig, step: int, seconds: float) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    by_time = seconds / cfg.budget_s if cfg.budget_s > 0 else 0.0  # budget_s 0: a step budget alone
    progress = min(1.0, max(step / max(cfg.max_steps, 1), by_time))
    lo = cfg.lr * cfg.min_lr_ratio
    return lo + (cfg.lr - lo) * 0.5 * (1 + math.cos(math.pi * progress))


def _optimizer(model, cfg: TrainConfig) -> torch.optim.AdamW:
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "embed" not in n]
    rest = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "embed" not in n)]
    return torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay}, {"params": rest, "weight_decay": 0.0}],
                             lr=cfg.lr, betas=cfg.betas)


# ---- checkpoints --------------------------------------------------------------------------------------------
def _key(world: WorldConfig, cfg: TrainConfig) -> str:
    d = cfg.to_dict()
    for k in ("threads", "checkpoint_s", "curve_every_s", "eval_n", "compile"):  # do not change the weights
        d.pop(k)
    return world.config_hash() + ":" + json.dumps(d, sort_keys=True)


def save_checkpoint(work: Path, model, opt, state: dict) -> None:
    """Model + optimizer + state in work/ckpt, replacing the previous one (never a half-written one)."""
    tmp, cur, old = work / "ckpt.tmp", work / "ckpt", work / "ckpt.old"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file({k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"},
              str(tmp / "model.safetensors"))
    torch.save(opt.state_dict(), tmp / "optim.pt")
    (tmp / "state.json").write_text(json.dumps(state))
    shutil.rmtree(old, ignore_errors=True)
    if cur.exists():
        os.replace(cur, old)
    os.replace(tmp, cur)
    shutil.rmtree(old, ignore_errors=True)


def load_checkpoint(work: Path, model, opt, key: str) -> dict | None:
    """The saved state when work holds a checkpoint of this very run (same world and recipe), else None."""
    for d in (work / "ckpt", work / "ckpt.old"):
        try:
            state = json.loads((d / "state.json").read_text())
        except (OSError, ValueError):
            continue
        if state.get("key") != key:
            return None
        model.load_state_dict(load_file(str(d / "model.safetensors")), strict=False)
        model.tie_weights()
        opt.load_state_dict(torch.load(d / "optim.pt", weights_only=True))
        return state
    return None


# ---- the run --------------------------------------------------------------------------------------------------
def train(world: WorldConfig, cfg: TrainConfig, work_dir: str | os.PathLike | None = None,
          log: Callable[[str], None] = print):
    """Train to the step cap or the budget; returns (model, tokenizer, report)."""
    configure(None, cfg.threads)  # the stage set the policy (draftlab.omp); 0 = leave the count
    tok = build_tokenizer(world)
    model = build_model(tok, cfg)
    opt = _optimizer(model, cfg)
    work = Path(work_dir) if work_dir else None
    key = _key(world, cfg)
    state = (load_checkpoint(work, model, opt, key) if work else None) or {
        "key": key, "step": 0, "seconds": 0.0, "tokens": 0, "padded": 0, "curve": [], "losses": [], "resumed": 0}
    if state["step"]:
        state["resumed"] += 1
        log(f"toy target: resumed at step {state['step']} ({state['seconds']:.0f} s done)")
    batches = Batches(world, tok, cfg)
    held = [e for f in world.families for e in examples(world, EVAL_SPLIT, cfg.curve_n, family=f.name)] \
        if cfg.curve_every_s > 0 else []
    step_fn = torch.compile(model) if cfg.compile else model
    t0, seconds0 = time.perf_counter(), state["seconds"]
    last_ckpt = last_curve = t0
    win_loss, win_n = 0.0, 0
    model.train()
    while True:
        seconds = seconds0 + time.perf_counter() - t0
        if state["step"] >= cfg.max_steps or 0 < cfg.budget_s <= seconds:
            break
        ids, loss_at, real = batches(state["step"])
        for g in opt.param_groups:
            g["lr"] = lr_at(cfg, state["step"], seconds)
        logits = step_fn(input_ids=ids).logits
        target = ids[:, 1:][loss_at[:, :-1]]
        loss = F.cross_entropy(logits[:, :-1][loss_at[:, :-1]].float(), target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        state["step"] += 1
        state["tokens"] += real
        state["padded"] += ids.numel()
        win_loss, win_n = win_loss + float(loss.detach()), win_n + 1
        now = time.perf_counter()
        if held and now - last_curve >= cfg.curve_every_s:
            tf = E.teacher_forced(model, tok, held)
            model.train()
            point = {"step": state["step"], "seconds": round(seconds0 + now - t0, 1), "loss": win_loss / win_n,
                     "lr": opt.param_groups[0]["lr"], "teacher_forced": tf}
            state["curve"].append(point)
            log(f"toy target: step {point['step']} {point['seconds']:.0f}s loss {point['loss']:.4f} "
                + " ".join(f"{k} {v:.2f}" for k, v in tf.items()))
            win_loss, win_n = 0.0, 0
            last_curve = time.perf_counter()
        if work and now - last_ckpt >= cfg.checkpoint_s:
            state["seconds"] = seconds0 + time.perf_counter() - t0
            save_checkpoint(work, model, opt, state)
            last_ckpt = time.perf_counter()
    state["seconds"] = seconds0 + time.perf_counter() - t0
    report = {"steps": state["step"], "train_seconds": round(state["seconds"], 1), "real_tokens": state["tokens"],
              "padded_tokens": state["padded"], "tokens_per_s": state["tokens"] / max(state["seconds"], 1e-9),
              "resumed": state["resumed"], "curve": state["curve"],
              "stopped_by": "max_steps" if state["step"] >= cfg.max_steps else "budget_s"}
    if work:
        save_checkpoint(work, model, opt, state)
    return model, tok, report


def describe(model, world: WorldConfig) -> dict:
    """Parameter count and FLOPs per token at the world's mean sequence length."""
    tok_lens = [len(e.prompt.split()) + len(e.answer.split()) + 10 for e in examples(world, EVAL_SPLIT, 200)]
    ctx = sum(tok_lens) / len(tok_lens) / 2
    return {"params": sum(p.numel() for p in model.parameters()),
            "flops_per_token": E.flops_per_token(model.config, ctx)}


def save(out_dir: str | os.PathLike, model, tok, world: WorldConfig, cfg: TrainConfig, report: dict) -> Path:
    """The HF folder: model, tokenizer, toy_world.json (world, its hash, the recipe, the report)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    doc = {"world": world.to_dict(), "world_hash": world.config_hash(), "train": cfg.to_dict(), "report": report,
           "mask_token": MASK}
    tmp = out / (WORLD_FILE + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, out / WORLD_FILE)
    make_readable(out)  # save_pretrained writes model.safetensors 0600
    return out


def run(world: WorldConfig, cfg: TrainConfig, out_dir: str | os.PathLike, work_dir: str | os.PathLike | None = None,
        log: Callable[[str], None] = print) -> dict:
    """Train (resuming from work_dir, default `<out_dir>.work`), evaluate on held-out examples, save; the report."""
    work = Path(work_dir) if work_dir else Path(str(out_dir).rstrip("/") + ".work")
    model, tok, report = train(world, cfg, work, log)
    t = time.perf_counter()
    held = [e for f in world.families for e in examples(world, EVAL_SPLIT, cfg.eval_n, family=f.name)]
    report["eval"] = E.evaluate(model, tok, held) if cfg.eval_n > 0 else {}
    report["eval_seconds"] = round(time.perf_counter() - t, 1)
    report.update(describe(model, world))
    save(out_dir, model, tok, world, cfg, report)
    shutil.rmtree(work, ignore_errors=True)
    return report


def load(folder: str | os.PathLike):
    """(model, tokenizer, toy_world.json) of a saved toy target."""
    from transformers import AutoTokenizer
    folder = Path(folder)
    model = LlamaForCausalLM.from_pretrained(folder)
    tok = AutoTokenizer.from_pretrained(folder)
    return model, tok, json.loads((folder / WORLD_FILE).read_text())


__all__ = ["TrainConfig", "build_model", "train", "run", "save", "load", "lr_at"]
