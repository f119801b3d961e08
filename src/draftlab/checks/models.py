"""Random models for the accelerator check, built directly on the device (no hub, no files, nothing copied from
the host): targets of Llama / Qwen3 shapes behind the library's `TargetModel`, DFlash drafters of the target's
width, every corrector family's proposal step, a bigram proposal (a test double that gets rounds partly accepted), and
random prompts. The sizes: `PAPER` (Qwen3-8B's shape, the paper's drafter) on the accelerator, `DRY` (the same
layout, tiny) on CPU."""
from __future__ import annotations

from dataclasses import asdict

from draftlab.checks.common import Ctx, rnd, sync

# Qwen3-8B's config.json: 36 layers, hidden 4096, 32 query / 8 KV heads of 128, SwiGLU 12288, vocab 151,936,
# untied embeddings, rope base 1e6. DFlash for an 8B target (docs/algorithms.md "DFlash"; conf/profile/gpu.yaml):
# 5 layers at the target's width, block 16, full vocabulary. Every corrector family at its record's default settings
# (the papers' sizes), K=16.
PAPER_TARGET = dict(num_layers=36, hidden=4096, heads=32, kv_heads=8, head_dim=128, intermediate=12288, vocab=151936,
                    tie=False, rope_theta=1e6, max_pos=40960)
DRY_TARGET = dict(num_layers=2, hidden=64, heads=4, kv_heads=1, head_dim=16, intermediate=192, vocab=384,
                  tie=False, rope_theta=1e6, max_pos=4096)
TINY = dict(vocab=96, hidden=64, layers=3, heads=4, kv_heads=2, intermediate=128)  # the engine section's targets


def build_target(dev, dtype, arch: str, vocab: int, hidden: int, num_layers: int, heads: int, kv_heads: int,
                 intermediate: int, head_dim: int | None = None, tie: bool = True, rope_theta: float | None = None,
                 max_pos: int = 4096, seed: int = 0):
    """A randomly initialised Llama / Qwen3 causal LM built directly on `dev` in `dtype`, behind TargetModel."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config

    from draftlab.verifier.model import TargetModel

    common = dict(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=num_layers, num_attention_heads=heads,
                  num_key_value_heads=kv_heads, intermediate_size=intermediate, max_position_embeddings=max_pos,
                  tie_word_embeddings=tie, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    if rope_theta is not None:
        common["rope_parameters"] = {"rope_type": "default", "rope_theta": rope_theta}
    cfg = Qwen3Config(head_dim=head_dim or hidden // heads, **common) if arch == "qwen3" else LlamaConfig(**common)
    torch.manual_seed(seed)
    with torch.device(dev):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation="sdpa")
    return TargetModel(model.eval(), None, name=f"random-{arch}")


def paper_target(ctx: Ctx):
    """The random target of Qwen3-8B's shape in bf16 (tiny shapes of the same layout in --dry), built once."""
    import time

    import torch

    if ctx.cache.get("target") is None:
        s = ctx.size["target"]
        dtype = torch.bfloat16  # --dry too: the dry run rehearses the same dtypes
        t0 = time.perf_counter()
        t = build_target(ctx.dev, dtype, "qwen3", s["vocab"], s["hidden"], s["num_layers"], s["heads"], s["kv_heads"],
                         s["intermediate"], head_dim=s["head_dim"], tie=s["tie"], rope_theta=s["rope_theta"],
                         max_pos=s["max_pos"], seed=0)
        sync(ctx.dev)
        ctx.cache["target"] = t
        ctx.cache["target_info"] = {"arch": "qwen3", **s, "dtype": str(dtype).replace("torch.", ""),
                                    "parameters": sum(p.numel() for p in t.parameters()),
                                    "weight_bytes": sum(p.numel() * p.element_size() for p in t.parameters()),
                                    "build_s": rnd(time.perf_counter() - t0, 4)}
    return ctx.cache["target"]


def build_drafter(target, block_size: int, num_layers: int, dtype, init_seed: int = 1, **arch_kw):
    """A randomly initialised DFlash drafter of the target's width (MASK = the last embedding row); `arch_kw` go to
    `DrafterDesign` (e.g. seed="lookup", seed_bias=8.0 for a seeded drafter)."""
    import torch

    from draftlab.drafter.model import DFlashDrafter, DrafterDesign, arch_from_target

    spec = arch_from_target(target, DrafterDesign(block_size, num_layers, [], target.vocab_size - 1, **arch_kw))
    torch.manual_seed(init_seed)
    with torch.device(target.device):
        drafter = DFlashDrafter.from_target(spec, target)
    drafter.attention = "dense"  # what `auto` picks on CUDA (one SDPA call); --dry rehearses it on CPU
    return drafter.to(dtype).eval()


def build_proposers(target, drafter, k: int, perturb: bool, seed: int = 2) -> tuple[dict, dict]:
    """(name -> ProposalStep, what was built) for dflash (the plain drafter: identity) and every registered corrector
    family (`draftlab.corrector.families.records()`): its first variant, built by the registry
    (`corrector.families.fresh_proposal`) at the family's default settings with `k` candidates, proposing with the
    family's default path rule and λ (its record's `rules` / `lam`). A family whose record's k rule rejects `k` is
    skipped and named with why. With perturb, every parameter of every corrector is redrawn from N(0, 1), so the
    correctors really re-select tokens: a fresh corrector's zero-initialised output layers make it return the
    drafter's top-1 path, and redrawing only those leaves a correction made through small-scale weights (a δ through
    the drafter's head, from a state of the embedding's scale) below the drafter's logit gaps, where at unit scale
    every built-in family changes a share of the proposals (tiny random targets, fp32 and bf16)."""
    import torch

    from types import SimpleNamespace

    from draftlab.corrector.families import fresh_proposal, records
    from draftlab.decoding.api import DrafterProposal
    from draftlab.errors import DraftlabError

    dev, dt = drafter.device, drafter.dtype
    ccfg = SimpleNamespace(k=k, seed=seed, families={})  # what the registry reads of a corrector section: no
    # family settings given, so each family's defaults (a plain-torch room takes no configuration object)
    props, info = {"dflash": DrafterProposal()}, {"k": k, "families": {}, "skipped": {}}
    for name, fam in records().items():
        try:
            if fam.k_rule is not None:
                fam.k_rule(k, "k")
        except DraftlabError as e:  # a K the family cannot build: skipped, named with why
            info["skipped"][name] = str(e)
            continue
        with torch.device(dev):
            prop, section = fresh_proposal(ccfg, drafter, name)
        if perturb:
            with torch.no_grad():
                for p in prop.corrector.parameters():
                    p.normal_(0.0, 1.0)
        props[name] = prop
        prop.corrector.to(dev, dt)
        info["families"][name] = {"variant": fam.variants[0].name, **asdict(section)}
    return props, info


class BigramProposal:
    """Test double (a ProposalStep): walks a bigram table read off the AR reference from slot 0, so blocks are
    partly accepted and the ragged commit / hole paths of the engine run. Deterministic (point-mass at T>0)."""

    def __init__(self, table):
        self.table = table  # [V] long: next token after v in the reference (0 when unseen)

    def __call__(self, draft, sp=None, generator=None):
        import torch

        from draftlab.decoding.api import Proposal

        cur, out = draft.block_ids[:, 0], []  # [b] slot 0
        for _ in range(draft.logits.shape[1] - 1):
            cur = self.table[cur]
            out.append(cur)
        return Proposal(torch.stack(out, 1))  # [b, n]


def bigram_table(prompts, refs, vocab: int, dev):
    import torch

    table = torch.zeros(vocab, dtype=torch.long)
    for p, r in zip(prompts, refs):
        seq = list(p) + list(r)
        for a, b in zip(seq[:-1], seq[1:]):
            table[a] = b
    return table.to(dev)


def random_prompts(n: int, lengths, vocab: int, seed: int) -> list[list[int]]:
    import torch

    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, vocab - 1, (int(lengths[i % len(lengths)]),), generator=g).tolist() for i in range(n)]


def repeating_prompts(n: int, lengths, vocab: int, seed: int, span: int = 12) -> list[list[int]]:
    """Prompts built of one random span repeated (each stream its own span): the prompt lookup finds matches in
    every round, so a seeded drafter's blocks are seeded and the seeding path is exercised on random weights."""
    import torch

    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        L = int(lengths[i % len(lengths)])
        s = torch.randint(1, vocab - 1, (span,), generator=g).tolist()
        out.append((s * (L // span + 1))[:L])
    return out
