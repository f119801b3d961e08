"""Verify cost against width on this machine: what one more verified position costs.

    .venv/bin/python tools/verify_cost.py            # the pipeline's target (models/target), params.yaml's drafters
    .venv/bin/python tools/verify_cost.py --quick    # fewer repetitions, one context length, batch 1 and 4
    .venv/bin/python tools/verify_cost.py --tiny --quick --out /tmp/vc.json   # a tiny random model (the test)
    .venv/bin/python tools/verify_cost.py --quick --linear auto,torch   # the few-row linears vs F.linear, side by side

For each batch size B and context length C (random prompts of C tokens that loop, so a seeded drafter finds
seeds), it times
- the target's verify forward of w = 1..S tokens per stream after the context (`StreamCache.append` with
  the drafter's taps, as a round's verify phase; the cache is put back after each pass). w = 1 is an AR
  step's forward; S = drafter.block_size;
- one drafter draft pass (`block_input` + `draft`, the round's draft phase after the context is in) of the
  plain drafter (`drafter.*`) and the seeded one (`seeded.drafter` resolved), each with the draft vocabulary
  (`drafter.draft_vocab_size`) and with the full vocabulary head (what the head costs); under each
  `--linear` mode, installed on the drafter as the benchmark does (its layers and its head).
Drafters have random weights (the cost does not depend on them). The measurements are repeated `--reps` times,
interleaved (each repetition times every width and drafter once, in a rotated order, so machine drift hits
them alike) after `--warmup` untimed repetitions; each figure is the median with a distribution-free 95%
interval for the median (order statistics of the binomial; [min, max] for fewer than 6 repetitions).

Derived per (B, C): `per_position_ms` (least-squares slope of the medians over w), `full_over_ar` (w = S over
w = 1) and `break_even_min_prob` = per_position_ms / (w = 1 median): an added verified slot pays when the
chance that it is accepted exceeds it (what `seeded.verify.min_prob` should be). Writes `metrics/verify_cost.json`
(atomically; `--out`) and prints a table. The real target is heavy: run it when the CPU is otherwise idle.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = "draftlab-verify-cost-v1"
FULL = dict(batches=(1, 4, 16), contexts=(256, 512), reps=15, warmup=2)
QUICK = dict(batches=(1, 4), contexts=(256,), reps=5, warmup=1)
TINY = dict(vocab=256, taps=[0, 2], layers=4)  # --tiny: a random llama target of tests' size


class UsageError(Exception):
    """Bad command-line input: one line, exit code 2."""


def median_ci(xs: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """(median, lo, hi): the order-statistic interval for the median (normal approximation to the binomial);
    [min, max] when there are fewer than 6 values."""
    s = sorted(xs)
    n = len(s)
    med = statistics.median(s)
    if n < 6:
        return med, s[0], s[-1]
    z = statistics.NormalDist().inv_cdf(0.5 + level / 2)
    half = z * math.sqrt(n) / 2
    lo, hi = max(0, math.floor(n / 2 - half)), min(n - 1, math.ceil(n / 2 + half) - 1)
    return med, s[lo], s[hi]


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys over xs."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else 0.0


def looping_prompts(B: int, C: int, V: int, seed: int) -> list[list[int]]:
    """B prompts of C random ids (1..V-2) made of a 24-token motif repeated with a random id every 8th token."""
    import torch

    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(B):
        motif = torch.randint(1, V - 1, (24,), generator=g).tolist()
        seq = [(motif[i % 24] if i % 8 else int(torch.randint(1, V - 1, (1,), generator=g))) for i in range(C)]
        out.append(seq)
    return out


def load_setup(a):
    """(target, params, mask id, tap layers, draft vocabulary size): the pipeline's target, or a tiny one."""
    from draftlab.params import load_params

    params = load_params(a.params)
    if a.tiny:
        from draftlab.config import RandomModelConfig
        from draftlab.verifier.load import build_random_model
        from draftlab.verifier.model import TargetModel

        cfg = RandomModelConfig(num_layers=TINY["layers"])
        target = TargetModel(build_random_model(cfg, TINY["vocab"], None, None), None, name="tiny-random")
        V = target.vocab_size
        return target, params, V - 1, TINY["taps"], min(params.drafter.draft_vocab_size, V // 4)
    from draftlab.drafter.vocab import resolve_mask_token
    from draftlab.verifier.load import load_target

    t = params.target
    target = load_target(a.target, t.device, t.dtype, t.attn_implementation)  # one line when it is not prepared
    mask = resolve_mask_token(params.drafter.mask_token_id, target.tokenizer, target.vocab_size)
    return target, params, mask, list(params.drafter.target_layer_ids), params.drafter.draft_vocab_size


def build_drafters(target, params, mask: int, taps: list[int], vd: int) -> dict:
    """name -> random-weight DFlash drafter: plain / seeded (seeded.drafter resolved) x draft / full vocabulary."""
    import torch

    from draftlab.drafter import DFlashDrafter, arch_from_target

    V = target.vocab_size
    seeded, _ = params.seeded.resolve(params.drafter, params.pretrain)
    out = {}
    for kind, d in (("plain", params.drafter), ("seeded", seeded)):
        for head, size in (("draft", vd if 0 < vd < V else 0), ("full", 0)):
            name = f"{kind}/{head}-vocab"
            if head == "draft" and not size:
                continue  # the configured head is the full one already
            arch = arch_from_target(target, d.block_size, d.num_layers, taps, mask, size, d.intermediate_size,
                                    d.num_heads, d.num_kv_heads, d.tap_norm, d.out_norm_init, 0, d.seed,
                                    d.seed_max_ngram, d.seed_min_match, d.seed_logit and bool(size), d.seed_bias)
            torch.manual_seed(0)
            vocab = torch.arange(size) if size else None  # which ids does not change the cost
            out[name] = DFlashDrafter.from_target(arch, target, vocab).to(target.dtype).eval()
    return out


def measure(target, drafters: dict, S: int, batches, contexts, reps: int, warmup: int, log=print,
            linears: tuple[str, ...] = ("torch",)) -> dict:
    """Interleaved timings (ms) of the verify forward per width and target.linear mode, and of each drafter's
    draft pass per mode (the benchmark installs the target's mode on its drafters: their layers and head)."""
    import torch

    from draftlab.decoding.round import valid_positions
    from draftlab.kernels.linear import install, uninstall
    from draftlab.verifier.streams import StreamCache

    taps = next(iter(drafters.values())).target_layer_ids
    dev, V = target.device, target.vocab_size
    rows_v, rows_d = [], []
    sync = (lambda: torch.cuda.synchronize()) if dev.type == "cuda" else (lambda: None)  # noqa: E731
    for B in batches:
        for C in contexts:
            prompts = looping_prompts(B, C, V, seed=B * 1000 + C)
            with torch.no_grad():
                sc = StreamCache(target, B)
                pre = sc.prefill(prompts, 0, taps=taps, last_logits_only=True)
                last = pre.logits[:, -1].argmax(-1)  # [B]
                pos = sc.next_pos[:, None] + torch.arange(S, device=dev)  # [B, S]
                states = {}
                for name, d in drafters.items():
                    st = d.new_state(B)
                    d.extend_context(st, pre.taps, sc.prompt_valid, valid_positions(sc.prompt_valid))
                    st.start(prompts, last)
                    states[name] = st
            jobs = {("verify", (w, mode)): None for mode in linears for w in range(1, S + 1)}
            jobs.update({("draft", (n, mode)): None for mode in linears for n in drafters})
            order = list(jobs)
            times: dict = {k: [] for k in order}
            for r in range(warmup + reps):
                k0 = r % len(order)
                for job in order[k0:] + order[:k0]:
                    kind, arg = job
                    uninstall(target.model)
                    install(target.model, arg[1])
                    if kind == "draft":
                        uninstall(drafters[arg[0]])
                        install(drafters[arg[0]], arg[1])
                    with torch.no_grad():
                        if kind == "verify":
                            w = arg[0]
                            ids = torch.randint(1, V - 1, (B, w), device=dev)
                            sync()
                            t = time.perf_counter()
                            sc.append(ids, taps=taps)
                            sync()
                            dt = time.perf_counter() - t
                            sc.commit(torch.zeros(B, dtype=torch.long, device=dev), w)  # put the cache back
                        else:
                            d, st = drafters[arg[0]], states[arg[0]]
                            sync()
                            t = time.perf_counter()
                            d.draft(st, d.block_input(st, last), pos)
                            sync()
                            dt = time.perf_counter() - t
                    if r >= warmup:
                        times[job].append(1e3 * dt)
            uninstall(target.model)
            for d in drafters.values():
                uninstall(d)
            for mode in linears:
                for w in range(1, S + 1):
                    m, lo, hi = median_ci(times[("verify", (w, mode))])
                    rows_v.append({"batch": B, "context": C, "linear": mode, "width": w, "median_ms": m,
                                   "ci_ms": [lo, hi], "n": reps})
            for mode in linears:
                for n, d in drafters.items():
                    m, lo, hi = median_ci(times[("draft", (n, mode))])
                    vd = d.arch.draft_vocab_size or V
                    rows_d.append({"drafter": n, "seeded": d.arch.seeded, "head_vocab": vd, "batch": B, "context": C,
                                   "linear": mode, "median_ms": m, "ci_ms": [lo, hi], "n": reps})
            log(f"[verify_cost] B={B} C={C}: done")
    return {"verify": rows_v, "draft": rows_d}


def derive(res: dict, S: int) -> list[dict]:
    """Per (batch, context, linear mode): the AR forward, the slope per verified position, full block / AR,
    break-even min_prob."""
    out = []
    keys = sorted({(r["batch"], r["context"], r["linear"]) for r in res["verify"]})
    for B, C, L in keys:
        rows = sorted((r for r in res["verify"] if (r["batch"], r["context"], r["linear"]) == (B, C, L)),
                      key=lambda r: r["width"])
        ws, ms = [r["width"] for r in rows], [r["median_ms"] for r in rows]
        per = slope(ws, ms)
        ar = ms[0]
        drafts = {r["drafter"]: r["median_ms"] for r in res["draft"] if (r["batch"], r["context"], r["linear"]) == (B, C, L)}
        head = {k: drafts[f"{k}/full-vocab"] - drafts[f"{k}/draft-vocab"] for k in ("plain", "seeded")
                if f"{k}/draft-vocab" in drafts and f"{k}/full-vocab" in drafts}
        out.append({"batch": B, "context": C, "linear": L, "ar_ms": ar, "full_block_ms": ms[-1], "per_position_ms": per,
                    "full_over_ar": ms[-1] / ar if ar else None, "break_even_min_prob": per / ar if ar else None,
                    "full_head_extra_ms": head, "block_size": S})
    return out


def table(out: dict) -> str:
    lines = []
    for f in out["fits"]:
        B, C, L = f["batch"], f["context"], f["linear"]
        lines.append(f"batch {B}, context {C}, target.linear={L}: verify forward by width (ms, median [95% interval])")
        for r in out["verify"]:
            if (r["batch"], r["context"], r["linear"]) == (B, C, L):
                lo, hi = r["ci_ms"]
                lines.append(f"  w={r['width']:>2}  {r['median_ms']:8.2f}  [{lo:.2f}, {hi:.2f}]  ×{r['median_ms'] / f['ar_ms']:.2f}")
        head = ", ".join(f"{k} {v:+.2f} ms" for k, v in f["full_head_extra_ms"].items())
        lines.append(f"  per position {f['per_position_ms']:.2f} ms; w=S/w=1 {f['full_over_ar']:.2f}; break-even "
                     f"min_prob {f['break_even_min_prob']:.3f}" + (f"; full-vocabulary head {head}" if head else ""))
        for r in out["draft"]:
            if (r["batch"], r["context"], r["linear"]) == (B, C, L):
                lo, hi = r["ci_ms"]
                lines.append(f"  draft {r['drafter']:<20} (head {r['head_vocab']:>6}) {r['median_ms']:8.2f}  [{lo:.2f}, {hi:.2f}]")
    return "\n".join(lines)


def parse_ints(text: str, flag: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise UsageError(f"{flag} {text!r} must be a comma list of positive integers") from None
    if not vals or any(v < 1 for v in vals):
        raise UsageError(f"{flag} {text!r} must be a comma list of positive integers")
    return vals


def run(a) -> dict:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch

    from draftlab.io import write_json

    size = QUICK if a.quick else FULL
    batches = parse_ints(a.batches, "--batches") if a.batches else size["batches"]
    contexts = parse_ints(a.contexts, "--contexts") if a.contexts else size["contexts"]
    reps = a.reps or size["reps"]
    if reps < 1 or a.warmup is not None and a.warmup < 0:
        raise UsageError(f"--reps {a.reps} must be >= 1 and --warmup {a.warmup} >= 0")
    warmup = size["warmup"] if a.warmup is None else a.warmup
    target, params, mask, taps, vd = load_setup(a)
    if params.profile.threads and not a.tiny:
        torch.set_num_threads(params.profile.threads)
    drafters = build_drafters(target, params, mask, taps, vd)
    S = params.drafter.block_size
    t0 = time.perf_counter()
    from draftlab.kernels.linear import MODES

    linears = tuple(x.strip() for x in (a.linear or params.target.linear).split(",") if x.strip())
    if not linears or any(x not in MODES for x in linears):
        raise UsageError(f"--linear {a.linear!r} must be a comma list of auto / torch (target.linear's modes)")
    res = measure(target, drafters, S, batches, contexts, reps, warmup, linears=linears)
    out = {"schema": SCHEMA,
           "setup": {"target": getattr(target, "name", ""), "tiny": a.tiny, "quick": a.quick, "device": str(target.device),
                     "dtype": str(target.dtype).replace("torch.", ""), "threads": torch.get_num_threads(),
                     "block_size": S, "batches": list(batches), "contexts": list(contexts), "reps": reps,
                     "warmup": warmup, "taps": taps, "linear": list(linears), "wall_s": time.perf_counter() - t0,
                     "drafters": {n: {"seeded": d.arch.seeded, "seed_logit": d.arch.seed_logit, "layers": d.arch.num_layers,
                                      "head_vocab": d.arch.draft_vocab_size or target.vocab_size}
                                  for n, d in drafters.items()},
                     "note": "random weights; verify = StreamCache.append of w tokens with the drafter's taps; draft = "
                             "block_input + draft after the context; median and 95% order-statistic interval"},
           **res, "fits": derive(res, S)}
    write_json(a.out, out)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help=f"{QUICK['reps']} repetitions, contexts {QUICK['contexts']}, "
                                                         f"batches {QUICK['batches']}")
    ap.add_argument("--tiny", action="store_true", help="a tiny random target instead of models/target (tests)")
    ap.add_argument("--batches", default="", help=f"comma list (default {FULL['batches']})")
    ap.add_argument("--contexts", default="", help=f"context lengths in tokens (default {FULL['contexts']})")
    ap.add_argument("--reps", type=int, default=0, help=f"timed repetitions (default {FULL['reps']}, quick {QUICK['reps']})")
    ap.add_argument("--warmup", type=int, default=None, help="untimed repetitions first")
    ap.add_argument("--params", default=str(ROOT / "params.yaml"))
    ap.add_argument("--target", default=str(ROOT / "models" / "target"))
    ap.add_argument("--linear", default="", help="target.linear mode(s), comma list measured side by side, e.g. "
                                                 "auto,torch (default: params.yaml's target.linear)")
    ap.add_argument("--out", default=str(ROOT / "metrics" / "verify_cost.json"))
    a = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT / "src"))
    from draftlab.errors import DraftlabError

    try:
        out = run(a)
    except (UsageError, DraftlabError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(table(out))
    print(f"[verify_cost] wrote {a.out} in {out['setup']['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
