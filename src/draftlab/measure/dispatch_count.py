"""Counting the aten ops of each eager step for the plan's host-dispatch term (`draftlab.plan.dispatch`): each step of
the project's own code — the target's prefill and AR step, one speculative round of every arm kind, a validation
batch and the training steps — run under a `TorchDispatchMode` that counts every op, on random models of the SmolLM2
widths at three layer counts, and fitted per layer (see `draftlab.plan.dispatch`). It runs the methods' code (the
engine, the correctors, SpecOPD's terms, the trainer), so it sits in the benchmark's layer; the plan reads only the
fit it writes. The corrector round is one family's (`--family`, by default the first registered), named beside its
counts: every family's arms cost it in the plan. `python -m draftlab.measure.dispatch_count [--write] [--family F]`."""
from __future__ import annotations

import json
from pathlib import Path

from draftlab.plan.dispatch import CHUNKS, CORRECTOR_ROUND, COUNTS, LAYERS, STEPS, WIDTHS, ops


def _counter():
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.n += 1
            return func(*args, **(kwargs or {}))

    return Count


def _target(layers: int, dtype):
    from draftlab.config import RandomModelConfig
    from draftlab.verifier.load import build_random_model
    from draftlab.verifier.model import TargetModel

    cfg = RandomModelConfig(arch="llama", num_layers=layers, seed=0, **WIDTHS)
    return TargetModel(build_random_model(cfg, 2048, None, 2).to(dtype))


def _drafter(target, layers: int, seeded: bool = False, dtype=None):
    import torch

    from draftlab.drafter import DFlashDrafter, DrafterDesign, arch_from_target

    torch.manual_seed(0)
    taps = [target.num_layers - 1]  # the deepest: a training step's target pass runs every layer counted
    arch = arch_from_target(target, DrafterDesign(16, layers, taps, 1, 0, seed="lookup" if seeded else "none"))
    d = DFlashDrafter.from_target(arch, target)
    return d.to(dtype) if dtype is not None else d


def _prompts(B: int = 8):
    import torch

    g = torch.Generator().manual_seed(0)
    # repeated spans, so that prompt lookup finds matches as in real text
    return [(torch.randint(3, 2000, (12,), generator=g).tolist() * 4)[: 40 + i] for i in range(B)]


def _per_round(run, Count) -> tuple[float, float]:
    """(ops of the prefill, ops per round) of a generation function run(n) -> rounds, by differencing n=3 and n=24
    new tokens (a round that accepts a whole block commits up to 16)."""
    got = []
    for n in (3, 24):
        with Count() as c:
            rounds = run(n)
        got.append((c.n, rounds))
    (a, ra), (b, rb) = got
    if rb <= ra:
        raise RuntimeError(f"no more rounds at 24 new tokens than at 3 ({ra}): cannot difference")
    step = (b - a) / (rb - ra)
    return a - ra * step, step


def corrector_family(name: str | None = None):
    """The corrector family whose round the instrument counts (`corrector_round`): `name`, or the first registered
    family (`draftlab.corrector.families.records()`)."""
    from draftlab.corrector.families import records
    from draftlab.errors import DraftlabError

    fams = records()
    if name is None:
        return next(iter(fams.values()))
    if name not in fams:
        raise DraftlabError(f"corrector family {name!r} is not registered; choose one of: {', '.join(fams)}")
    return fams[name]


def _inference(Lt: int, Ld: int, family: str | None = None) -> dict[str, float]:
    """The inference steps' ops; the corrector round is that of `family`'s first variant at its default settings,
    K=16, proposing with its default path rule (`corrector_family`)."""
    import torch

    from draftlab.config import CorrectorConfig
    from draftlab.corrector.families import fresh_proposal
    from draftlab.decoding import SpeculativeEngine, generate_ar
    from draftlab.decoding.lookup import LookupHybrid, PromptLookup
    from draftlab.decoding.width import SpanProposal

    Count, dt = _counter(), torch.bfloat16
    tgt, prompts = _target(Lt, dt), _prompts()
    out = {}
    with torch.no_grad():
        pre, out["ar_step"] = _per_round(lambda n: len(generate_ar(tgt, prompts, n, eos_ids=[]).round_times), Count)
        out["prefill"] = pre
        plain, seeded = _drafter(tgt, Ld, dtype=dt), _drafter(tgt, Ld, True, dtype=dt)
        corr = fresh_proposal(CorrectorConfig(k=16), plain, corrector_family(family).name)[0]
        corr.corrector.to(dt)
        engines = {
            "dflash_round": lambda: SpeculativeEngine(tgt, plain),
            "pld_round": lambda: SpeculativeEngine(tgt, None, PromptLookup(16, 3, 7)),
            "hybrid_round": lambda: SpeculativeEngine(tgt, plain, LookupHybrid(PromptLookup(16, 3, 7), tgt.vocab_size)),
            "seeded_cut_round": lambda: SpeculativeEngine(tgt, seeded, SpanProposal(seeded.mask_token_id)),
            CORRECTOR_ROUND: lambda: SpeculativeEngine(tgt, plain, corr),
        }
        for name, make in engines.items():
            out[name] = _per_round(lambda n: len(make().generate(prompts, n, eos_ids=[]).round_times), Count)[1]
    return out


def _batch(V: int, B: int, L: int, A: int, S: int):
    import torch

    g = torch.Generator().manual_seed(0)
    anc = torch.stack([torch.randperm(L - S - 4, generator=g)[:A].sort().values + 2 for _ in range(B)])
    return {"ids": torch.randint(3, V, (B, L), generator=g), "ctx_valid": torch.ones(B, L, dtype=torch.bool),
            "anchors": anc, "anchor_valid": torch.ones(B, A, dtype=torch.bool), "seq_len": torch.full((B,), L),
            "seq": torch.arange(B)}


def _training(Lt: int, Ld: int, chunks: int) -> dict[str, float]:
    """A validation batch, a pretraining step and a SpecOPD update (B=4, A=8; `chunks` head chunks)."""
    import torch

    from draftlab.config import PretrainConfig
    from draftlab.specopd.terms import specopd_terms
    from draftlab.training.ce import DrafterCE
    from draftlab.training.module import TrainModule

    Count = _counter()
    tgt = _target(Lt, torch.bfloat16)
    d = _drafter(tgt, Ld)
    B, L, A, S = 4, 64, 8, 16
    rows = B * A * (S - 1)
    chunk = -(-rows // chunks) if chunks > 1 else 0
    ce = DrafterCE(d, PretrainConfig(chunk_rows=chunk, batch_size=B, anchors_per_seq=A, cache_features=False, topk=16),
                   tgt)
    m = TrainModule(ce, 10)
    opt = m.configure_optimizers()["optimizer"]
    batch = _batch(tgt.vocab_size, B, L, A, S)
    out = {}
    amp = torch.autocast("cpu", dtype=torch.bfloat16)

    def pretrain():
        opt.zero_grad(set_to_none=True)
        with amp:
            loss = ce.loss_parts(batch, dense=False)["loss"]
        loss.backward()
        opt.step()

    def specopd():
        opt.zero_grad(set_to_none=True)
        with amp:
            t = specopd_terms(tgt, d, batch, S - 1, 1.0, chunk_rows=chunk, vocab_chunk=0)
        (t.numerator / t.count).backward()
        opt.step()

    def validate():
        with torch.no_grad(), amp:
            ce.validate_batch(batch, ce.new_val_stats())

    for name, fn in (("pretrain_step", pretrain), ("specopd_step", specopd), ("val_batch", validate)):
        fn()  # the first call creates the AdamW moments: count a steady-state one
        with Count() as c:
            fn()
        out[name] = c.n
    return out


def count(family: str | None = None) -> dict:
    """Count every step at LAYERS (and CHUNKS) and fit; the document dispatch_counts.json holds (the corrector round
    of `family`, by default the first registered one, named beside its counts)."""
    import platform

    import torch
    import transformers

    from draftlab.checks.common import git_sha
    from draftlab.omp import configure

    torch.manual_seed(0)
    raw: dict[str, dict[str, float]] = {}
    threads = torch.get_num_threads()
    configure(None, 1)  # tiny ops: one thread is fastest, and the counts do not depend on it
    try:
        for Lt, Ld in LAYERS:
            for k, v in _inference(Lt, Ld, family).items():
                raw.setdefault(k, {})[f"{Lt},{Ld},1"] = v
            for ch in (CHUNKS if (Lt, Ld) == LAYERS[0] else CHUNKS[:1]):
                for k, v in _training(Lt, Ld, ch).items():
                    raw.setdefault(k, {})[f"{Lt},{Ld},{ch}"] = v
    finally:
        configure(None, threads)
    steps = {}
    (t0, d0), (t1, _), (_, d2) = LAYERS
    c0, c1 = CHUNKS
    for name, r in raw.items():
        a = r[f"{t0},{d0},1"]
        pt = (r[f"{t1},{d0},1"] - a) / (t1 - t0)
        pd = (r[f"{t0},{d2},1"] - a) / (d2 - d0)
        fit = {"base": a - pt * t0 - pd * d0, "per_target_layer": pt, "per_drafter_layer": pd}
        if f"{t0},{d0},{c1}" in r:
            fit["per_chunk"] = (r[f"{t0},{d0},{c1}"] - a) / (c1 - c0)
        steps[name] = {"what": STEPS[name], "fit": {k: round(v, 2) for k, v in fit.items()},
                       "counted": {k: round(v, 2) for k, v in r.items()}}
    steps[CORRECTOR_ROUND]["family"] = corrector_family(family).name
    root = Path(__file__).resolve().parents[3]  # src/draftlab/measure/dispatch_count.py -> the repository
    return {"schema": "draftlab-dispatch-counts-v1", "commit": git_sha(root) or "unknown",
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                         "python": platform.python_version()},
            "counted_on": "cpu (bf16 target; training under bf16 autocast)", "widths": WIDTHS,
            "layers": [list(x) for x in LAYERS], "chunks": list(CHUNKS), "steps": steps}


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m draftlab.measure.dispatch_count",
                                 description="count the aten ops of each eager step (the plan's dispatch term)")
    ap.add_argument("--write", action="store_true", help=f"write the counts to {COUNTS.name}")
    ap.add_argument("--family", default=None, help="the corrector family whose round is counted (default: the first "
                                                   "registered one)")
    a = ap.parse_args(argv)
    doc = count(a.family)
    for name, s in doc["steps"].items():
        f = s["fit"]
        print(f"{name:<17} {f['base']:>8.0f} + {f['per_target_layer']:>6.1f}/target layer + "
              f"{f['per_drafter_layer']:>6.1f}/drafter layer" + (f" + {f['per_chunk']:.1f}/chunk" if "per_chunk" in f else "")
              + f"  (SmolLM2, 30 layers, 2-layer drafter: {ops(name, 30, 2, counts=doc):,.0f})")
    if a.write:
        COUNTS.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {COUNTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
