"""Verify cost against width: what one more verified position costs on this machine (tools/verify_cost.py is
its command line).

For each batch size B and context length C (random prompts of C tokens that loop, so a seeded drafter finds
seeds), `measure` times
- the target's verify forward of w = 1..S tokens per stream after the context (`StreamCache.append` with
  the drafter's taps, as a round's verify phase; the cache is put back after each pass). w = 1 is an AR
  step's forward; S = drafter.block_size;
- one drafter draft pass (`block_input` + `draft`, the round's draft phase after the context is in) of the
  plain drafter (`drafter.*`) and the seeded one (`seeded.drafter` resolved), each with the draft vocabulary
  (`drafter.draft_vocab_size`) and with the full vocabulary head (what the head costs); under each
  target.linear mode, installed on the drafter as the benchmark does (its layers and its head).
Drafters have random weights (the cost does not depend on them). The measurements are repeated `reps` times,
interleaved (each repetition times every width and drafter once, in a rotated order, so machine drift hits
them alike) after `warmup` untimed repetitions; each figure is the median with a distribution-free 95%
interval for the median (order statistics of the binomial; [min, max] for fewer than 6 repetitions).

`derive` gives per (B, C, mode): `per_position_ms` (least-squares slope of the medians over w), `full_over_ar`
(w = S over w = 1) and `break_even_min_prob` = per_position_ms / (w = 1 median): an added verified slot pays when
the chance that it is accepted exceeds it (what `seeded.verify.min_prob` should be). `run` assembles the file
(schema draftlab-verify-cost-v1) and writes it atomically; its printed views are `draftlab.measure.verify_cost_tables`.
"""
from __future__ import annotations

import math
import os
import statistics
import time

from draftlab.errors import ConfigError

SCHEMA = "draftlab-verify-cost-v1"
FULL = dict(batches=(1, 4, 16), contexts=(256, 512), reps=15, warmup=2)
QUICK = dict(batches=(1, 4), contexts=(256,), reps=5, warmup=1)
TINY = dict(vocab=256, taps=[0, 2], layers=4)  # tiny: a random llama target of tests' size


class UsageError(ConfigError):
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


def load_setup(params_file, target_dir, tiny: bool = False):
    """(target, params, mask id, tap layers, draft vocabulary size): the target in `target_dir` (the pipeline's),
    or a tiny random one; `params_file`: params.yaml."""
    from draftlab.params import load_params

    params = load_params(params_file)
    if tiny:
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
    target = load_target(target_dir, t.device, t.dtype, t.attn_implementation)  # one line when it is not prepared
    mask = resolve_mask_token(params.drafter.mask_token_id, target.tokenizer, target.vocab_size)
    return target, params, mask, list(params.drafter.target_layer_ids), params.drafter.draft_vocab_size


def build_drafters(target, params, mask: int, taps: list[int], vd: int) -> dict:
    """name -> random-weight DFlash drafter: plain / seeded (seeded.drafter resolved) x draft / full vocabulary."""
    from dataclasses import replace

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
            arch = arch_from_target(target, replace(d.design(mask, size), target_layer_ids=taps, init_block_heads=0,
                                                    seed_logit=d.seed_logit and bool(size)))
            torch.manual_seed(0)
            vocab = torch.arange(size) if size else None  # which ids does not change the cost
            out[name] = DFlashDrafter.from_target(arch, target, vocab).to(target.dtype).eval()
    return out


def machine_rates(reps: int = 5, read_mib: int = 1024) -> dict:
    """This machine's streaming read bandwidth (GB/s: a sum over `read_mib` MiB of float32, well above the last
    cache level) and matrix-product rate (GFLOP/s: 2048³ float32 products), medians of `reps`, on torch's current
    threads."""
    import torch

    big = torch.ones(read_mib << 18)
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    bw, mm = [], []
    for _ in range(reps + 1):
        t = time.perf_counter()
        big.sum()
        bw.append(big.numel() * 4 / (time.perf_counter() - t) / 1e9)
        t = time.perf_counter()
        a @ b
        mm.append(2 * 2048 ** 3 / (time.perf_counter() - t) / 1e9)
    return {"read_gb_s": statistics.median(bw[1:]), "matmul_gflop_s": statistics.median(mm[1:]), "reps": reps,
            "read_mib": read_mib}


def floor_ms(target, rows: int, rates: dict) -> float:
    """The time the linear layers of one pass need at least on this machine: the weights read once at the
    measured bandwidth, or their arithmetic (2 FLOPs per weight per row) at the measured product rate, whichever
    is longer."""
    from draftlab.kernels.linear import linear_layers

    n = sum(m.weight.numel() for m in linear_layers(target.model))
    size = sum(m.weight.numel() * m.weight.element_size() for m in linear_layers(target.model))
    return 1e3 * max(size / (rates["read_gb_s"] * 1e9), 2 * n * rows / (rates["matmul_gflop_s"] * 1e9))


def plans(target, linears: tuple[str, ...]) -> dict:
    """mode -> the linear `Plan` it runs on the target's device (auto measured once, here; torch: F.linear's)."""
    from draftlab.kernels.linear import Plan, install, plan_of, uninstall

    out = {}
    for mode in linears:
        uninstall(target.model)
        out[mode] = plan_of(target.model) if install(target.model, mode) else Plan.fixed("torch")
    uninstall(target.model)
    return out


def measure(target, drafters: dict, widths, batches, contexts, reps: int, warmup: int, log=print,
            linears: tuple[str, ...] = ("torch",), read_mib: int = 1024) -> dict:
    """Interleaved timings (ms) of the verify forward per width and target.linear mode, and of each drafter's
    draft pass per mode (the benchmark installs the target's plan on its drafters: their layers and head). The
    modes' plans are set once (`plans`) and switched between jobs; the packed weights of the oneDNN path are
    made in the untimed repetitions."""
    import torch

    from draftlab.decoding.round import valid_positions
    from draftlab.kernels.linear import install, uninstall
    from draftlab.verifier.streams import StreamCache

    taps = next(iter(drafters.values())).target_layer_ids
    dev, V = target.device, target.vocab_size
    S = max(widths)
    rows_v, rows_d = [], []
    by_mode = plans(target, linears)
    sync = (lambda: torch.cuda.synchronize()) if dev.type == "cuda" else (lambda: None)  # noqa: E731
    for B in batches:
        for C in contexts:
            prompts = looping_prompts(B, C, V, seed=B * 1000 + C)
            with torch.no_grad():
                sc = StreamCache(target, B)
                pre = sc.prefill(prompts, 0, taps=taps, last_logits_only=True)
                last = pre.logits[:, -1].argmax(-1)  # [B]
                states = {}
                for name, d in drafters.items():
                    st = d.new_state(B)
                    d.extend_context(st, pre.taps, sc.prompt_valid, valid_positions(sc.prompt_valid))
                    st.start(prompts, last)
                    states[name] = st
            jobs = {("verify", (w, mode)): None for mode in linears for w in widths}
            jobs.update({("draft", (n, mode)): None for mode in linears for n in drafters})
            order = list(jobs)
            times: dict = {k: [] for k in order}
            for r in range(warmup + reps):
                k0 = r % len(order)
                for job in order[k0:] + order[:k0]:
                    kind, arg = job
                    install(target.model, by_mode[arg[1]])
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
                            install(d, by_mode[arg[1]])
                            pos = sc.next_pos[:, None] + torch.arange(d.arch.block_size, device=dev)  # [B, S]
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
                for w in widths:
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
    # the products alone (every linear weight once, per path and row count) and the machine's floor beside them
    from draftlab.kernels.linear import measure_plan

    rates = machine_rates(read_mib=read_mib)
    floor = []
    for B in batches:
        prod = measure_plan(target.model, rows=tuple(B * w for w in widths), reps=max(3, reps // 2))
        non_mm = {r["linear"]: r["median_ms"] for r in rows_v
                  if r["batch"] == B and r["context"] == contexts[0] and r["width"] == 1}
        for i, w in enumerate(widths):
            floor.append({"batch": B, "width": w, "floor_linear_ms": floor_ms(target, B * w, rates),
                          "products_ms": {p: ms[i] for p, ms in prod.ms.items()}})
        best1 = min(v[0] for v in prod.ms.values())  # one row per stream: the fastest path's products
        for f in floor:
            if f["batch"] == B:
                # + what a pass does besides its products, as measured at width 1 (attention, norms, glue)
                f["non_matmul_w1_ms"] = min(non_mm.values()) - best1
                f["floor_ms"] = f["floor_linear_ms"] + f["non_matmul_w1_ms"]
    return {"verify": rows_v, "draft": rows_d, "plans": {mode: p.as_dict() for mode, p in by_mode.items()},
            "rates": rates, "floor": floor}


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
        ar = ms[0]  # width 1 (parse_widths keeps it)
        full = ms[ws.index(S)] if S in ws else ms[-1]
        drafts = {r["drafter"]: r["median_ms"] for r in res["draft"] if (r["batch"], r["context"], r["linear"]) == (B, C, L)}
        head = {k: drafts[f"{k}/full-vocab"] - drafts[f"{k}/draft-vocab"] for k in ("plain", "seeded")
                if f"{k}/draft-vocab" in drafts and f"{k}/full-vocab" in drafts}
        out.append({"batch": B, "context": C, "linear": L, "ar_ms": ar, "full_block_ms": full, "per_position_ms": per,
                    "full_over_ar": full / ar if ar else None, "break_even_min_prob": per / ar if ar else None,
                    "full_head_extra_ms": head, "block_size": S})
    return out


def parse_ints(text: str, flag: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise UsageError(f"{flag} {text!r} must be a comma list of positive integers") from None
    if not vals or any(v < 1 for v in vals):
        raise UsageError(f"{flag} {text!r} must be a comma list of positive integers")
    return vals


def parse_widths(text: str, block: int) -> tuple[int, ...]:
    """"1-17" or "1,2,8" -> sorted widths with 1 (the AR step) among them; empty: 1..block."""
    if not text:
        return tuple(range(1, block + 1))
    vals: set[int] = set()
    try:
        for part in text.split(","):
            lo, _, hi = part.strip().partition("-")
            vals.update(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise UsageError(f"--widths {text!r} must be a comma list of widths or ranges, e.g. 1-17 or 1,2,8") from None
    if not vals or min(vals) < 1:
        raise UsageError(f"--widths {text!r} must name positive widths, e.g. 1-17")
    return tuple(sorted(vals | {1}))


def run(params_file, target_dir, out_file, *, tiny: bool = False, quick: bool = False, batches: str = "",
        contexts: str = "", reps: int = 0, warmup: int | None = None, linear: str = "", widths: str = "",
        threads: int = 0) -> dict:
    """Measure and write `out_file` (atomically); returns its content. The text arguments are the command line's
    (`batches`, `contexts`, `linear`: comma lists, empty for the defaults; `reps` 0 for the default); bad ones
    raise UsageError naming the flag."""
    from draftlab import omp
    from draftlab.omp import configure

    configure(params_file, decoding=True)  # the decoding processes' wait policy (engine.omp_wait_policy)
    import torch

    from draftlab.io import write_json

    size = QUICK if quick else FULL
    given_reps = reps
    batches = parse_ints(batches, "--batches") if batches else size["batches"]
    contexts = parse_ints(contexts, "--contexts") if contexts else size["contexts"]
    reps = reps or size["reps"]
    if reps < 1 or warmup is not None and warmup < 0:
        raise UsageError(f"--reps {given_reps} must be >= 1 and --warmup {warmup} >= 0")
    warmup = size["warmup"] if warmup is None else warmup
    target, params, mask, taps, vd = load_setup(params_file, target_dir, tiny)
    configure(params_file, threads or (0 if tiny else params.engine.threads or params.profile.threads))
    drafters = build_drafters(target, params, mask, taps, vd)
    S = params.drafter.design().block_size
    ws = parse_widths(widths, S)
    t0 = time.perf_counter()
    from draftlab.kernels.linear import MODES

    linears = tuple(x.strip() for x in (linear or params.target.linear).split(",") if x.strip())
    if not linears or any(x not in MODES for x in linears):
        raise UsageError(f"--linear {linear!r} must be a comma list of {' / '.join(MODES)} (target.linear's modes)")
    res = measure(target, drafters, ws, batches, contexts, reps, warmup, linears=linears, read_mib=64 if tiny else 1024)
    out = {"schema": SCHEMA,
           "setup": {"target": getattr(target, "name", ""), "tiny": tiny, "quick": quick, "device": str(target.device),
                     "dtype": str(target.dtype).replace("torch.", ""), "threads": torch.get_num_threads(),
                     "omp": omp.setup(),
                     "block_size": S, "widths": list(ws), "batches": list(batches), "contexts": list(contexts), "reps": reps,
                     "warmup": warmup, "taps": taps, "linear": list(linears), "wall_s": time.perf_counter() - t0,
                     "drafters": {n: {"seeded": d.arch.seeded, "seed_logit": d.arch.seed_logit, "layers": d.arch.num_layers,
                                      "head_vocab": d.arch.draft_vocab_size or target.vocab_size}
                                  for n, d in drafters.items()},
                     "note": "random weights; verify = StreamCache.append of w tokens with the drafter's taps; draft = "
                             "block_input + draft after the context; median and 95% order-statistic interval"},
           **res, "fits": derive(res, S)}
    write_json(out_file, out)
    return out
