"""Section `specopd`: supervised positions per second of SpecOPD's branch-parallel update against the sequential
Draft-OPD loop, on the random target of the paper's shape (bf16) with the paper-shape drafter (fp32, bf16 autocast).

An update is the objective with its target passes, the backward and the AdamW step (`specopd.terms`):
    branch_parallel          one reference of L tokens, A branches of W sampled slots at random anchors: one trunk
                             pass, one drafter forward over every branch, one packed tree pass of the target;
    branch_parallel_equal    the same update on max(seq_batches) references with `rounds` anchors each, none close
                             enough to the end to cut a branch: exactly as many supervised positions (B x rounds x W)
                             as the widest sequential arm, on as many sequences;
    sequential_b{B}          Draft-OPD's loop: B streams batched together (one batch per round, not one stream at a
                             time), `rounds` dependent draft -> verify -> commit rounds, then one update over the
                             committed text (`draft_opd_terms`).
Both sides run the same target, drafter and kernel dispatch (Triton on CUDA; in --dry the interpreter, fp32
inputs), and the sequential loop runs on the fastest engine the project has today: its one speculative round
(`decoding.round.speculative_round` over `verifier.streams.StreamCache`), eager. That engine is bound by the host's
dispatch (a target pass is thousands of small launches), so the sequential loop's 16 dependent rounds cost far more
than their GPU work: each arm's GPU-busy share (torch.profiler, one more update) says by how much, and the ratios hold
for this engine only; an engine near its floor would make the sequential loop cheaper and the ratios smaller.
Timing: on CUDA each update between CUDA events (the host clock elsewhere), the median of `steps` updates after an
untimed first one; the steps shrink to what the section's budget still allows, and an arm that does not fit is
skipped and named.
"""
from __future__ import annotations

import statistics

from draftlab.checks.common import Ctx, dry_triton, one_line, round_tree, sync
from draftlab.checks.events import call_ms, clock_name, device_busy_ms, is_cuda, peak_memory, reset_memory
from draftlab.checks.models import build_drafter, paper_target
from draftlab.markdown import markdown_table

# the first accelerator run's shape (L=2048, A=512, W=7 = block 8), 16 rounds as the gpu profile's specopd.seq_rounds
PAPER_SPECOPD = dict(L=2048, A=512, W=7, prompt=256, rounds=16, seq_batches=(8, 1), steps=3, busy=True)
DRY_SPECOPD = dict(L=48, A=6, W=7, prompt=12, rounds=2, seq_batches=(2, 1), steps=1, busy=True)
PAPER_RATIO = 16.09  # the SpecOPD paper's throughput ratio (27B target, 8 GPUs)


def sizes(ctx: Ctx) -> dict:
    """This section's sizes: the runner's `specopd` entry when it gives one, else PAPER_SPECOPD / DRY_SPECOPD."""
    return ctx.size.get("specopd") or (DRY_SPECOPD if ctx.dry else PAPER_SPECOPD)


def specopd_batch(ctx: Ctx, s: dict, B: int, A: int, seed: int, whole: bool = False) -> dict:
    """B random references of L tokens (prompt P), up to A random response anchors each: the batch SpecOPD reads.
    whole: only anchors with room for all W branch slots (none cut by the sequence's end)."""
    import torch

    from draftlab.specopd.tree import sample_branch_anchors

    dev = ctx.dev
    V = paper_target(ctx).vocab_size
    g = torch.Generator().manual_seed(seed)
    top = s["L"] - (s["W"] - 1 if whole else 0)  # the sampler's anchors lie in [P, top - 2]: W_b = W below L-W
    anchors = [sample_branch_anchors(top, s["prompt"], A, g) for _ in range(B)]
    n = max(a.numel() for a in anchors)
    anc = torch.zeros(B, n, dtype=torch.long)
    valid = torch.zeros(B, n, dtype=torch.bool)
    for b, a in enumerate(anchors):
        anc[b, :a.numel()], valid[b, :a.numel()] = a, True
    gd = torch.Generator(device=dev).manual_seed(seed)
    return {"ids": torch.randint(1, V - 1, (B, s["L"]), generator=gd, device=dev),
            "seq_len": torch.full((B,), s["L"], device=dev), "anchors": anc.to(dev), "anchor_valid": valid.to(dev),
            "seq": torch.arange(B, device=dev) + seed}


def make_update(drafter, opt, terms_fn, dev):
    """One full update (objective incl. its target passes, backward, AdamW step) -> its supervised positions; the
    objective's step counter advances per call (fresh branches and rounds each time)."""
    import torch

    amp = torch.autocast(dev.type, dtype=torch.bfloat16)  # bf16-mixed, as the gpu profile trains
    count = [0]

    def update():
        with amp:
            terms = terms_fn(count[0])
            loss = terms.numerator / terms.count.clamp(min=1)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        count[0] += 1
        return terms.positions

    return update


def time_updates(ctx: Ctx, update, steps: int) -> dict:
    """One untimed update, then up to `steps` timed ones (as many as the section's budget allows, at least one):
    median seconds, supervised positions, positions/s and the timed updates' peak memory."""
    import time

    dev = ctx.dev
    sync(dev)
    t0 = time.perf_counter()
    update()  # warm-up: the shapes of every round, autotuning, allocator growth
    sync(dev)
    first_s = time.perf_counter() - t0
    fit = int(max(ctx.left() - 2.0, 0.0) / max(first_s, 1e-3))
    n = max(1, min(steps, fit))
    reset_memory(dev)
    ms, positions = [], 0
    for _ in range(n):
        m, positions = call_ms(update, dev)
        ms.append(m)
    step_s = statistics.median(ms) / 1e3
    return {"positions": positions, "step_s": step_s, "positions_per_s": positions / step_s, "steps": n,
            "steps_asked": steps, "first_s": first_s, **peak_memory(dev)}


def busy_pass(ctx: Ctx, res: dict, updates: dict, order: list[str]) -> None:
    """After every arm is timed, with what is left of the budget: one more update per arm under torch.profiler,
    the sequential arms first; its GPU-busy seconds and their share of the arm's update time (CUDA only). An arm the
    budget leaves no time for is named in `busy_skipped` (an extra: the section's status does not depend on it)."""
    if not is_cuda(ctx.dev):
        return
    for name in order:
        a = res["arms"].get(name)
        if a is None or name not in updates:
            continue
        if ctx.left() < 3 * a["step_s"] + 10:  # the profiler's own processing of a trace of many small launches
            res["busy_skipped"].append(f"{name}: {max(ctx.left(), 0):.0f} s left of the section's budget")
            continue
        try:
            b = device_busy_ms(updates[name], ctx.dev)
        except Exception as e:  # noqa: BLE001  an extra: named, the timings stand
            res["busy_skipped"].append(f"{name}: the profiler failed ({one_line(e)})")
            continue
        a["gpu_busy_s"] = b / 1e3
        a["gpu_busy_share"] = b / 1e3 / a["step_s"]


def arms(ctx: Ctx, s: dict, target, drafter) -> list[tuple[str, dict, object]]:
    """(name, its description, the objective of update i) for every arm, in the order they run."""
    from draftlab.specopd.terms import draft_opd_terms, specopd_terms

    W, R, Bmax = s["W"], s["rounds"], max(s["seq_batches"])
    one = specopd_batch(ctx, s, 1, s["A"], seed=0)
    many = specopd_batch(ctx, s, Bmax, s["A"], seed=10)
    equal = specopd_batch(ctx, s, Bmax, R, seed=10, whole=True)  # B x R x W positions, as sequential_b{Bmax}

    def bp(batch):
        return lambda i: specopd_terms(target, drafter, batch, W, 1.0, seed=0, step=i)

    def seq(batch):
        return lambda i: draft_opd_terms(target, drafter, batch, W, R, 1.0, seed=0, step=i)

    out = [("branch_parallel", {"kind": "branch-parallel", "batch": 1, "anchors": s["A"]}, bp(one)),
           ("branch_parallel_equal", {"kind": "branch-parallel", "batch": Bmax, "anchors": R}, bp(equal))]
    for B in s["seq_batches"]:
        batch = many if B == Bmax else {k: v[:B] for k, v in many.items()}
        out.append((f"sequential_b{B}", {"kind": "sequential", "batch": B, "rounds": R}, seq(batch)))
    return out


def compare(res: dict, s: dict) -> None:
    """Each sequential arm's ratio to branch_parallel, and the equal-positions pair."""
    a = res["arms"]
    bp = a.get("branch_parallel")
    for name, x in a.items():
        if bp and name.startswith("sequential"):
            x["branch_parallel_ratio"] = bp["positions_per_s"] / x["positions_per_s"]
    eq, sq = a.get("branch_parallel_equal"), a.get(f"sequential_b{max(s['seq_batches'])}")
    if eq and sq:
        res["equal_positions"] = {
            "branch_parallel": "branch_parallel_equal", "sequential": f"sequential_b{max(s['seq_batches'])}",
            "positions": [eq["positions"], sq["positions"]], "s_per_update": [eq["step_s"], sq["step_s"]],
            "positions_per_s_ratio": eq["positions_per_s"] / sq["positions_per_s"],
            "update_time_ratio": sq["step_s"] / eq["step_s"]}


NOTE = ("the sequential loop's {R} dependent rounds (a drafter pass, a target verify pass and a commit each, launched "
        "op by op from Python) are dispatch-bound on today's eager engine: its GPU-busy share (where measured) says "
        "how little of an update the GPU works; the branch-parallel update is a few large passes. The ratios hold for "
        "this engine; on an engine near its floor the sequential loop would be cheaper and the ratios smaller")


def section_specopd(ctx: Ctx) -> dict:
    import torch

    s = sizes(ctx)
    target = paper_target(ctx)
    drafter = build_drafter(target, s["W"] + 1, ctx.size["drafter"]["num_layers"], torch.float32).train()
    res = {"L": s["L"], "A": s["A"], "W": s["W"], "block_size": s["W"] + 1, "rounds": s["rounds"],
           "drafter_layers": drafter.arch.num_layers, "precision": "bf16-mixed (fp32 drafter, autocast; bf16 target)",
           "temperature": 1.0, "paper_ratio": PAPER_RATIO, "clock": clock_name(ctx.dev),
           "engine": "sequential rollout: decoding.round.speculative_round over verifier.streams.StreamCache (eager), "
                     "streams batched; both sides: the same target, drafter and kernel dispatch",
           "note": NOTE.format(R=s["rounds"]), "arms": {}, "errors": [], "skipped": [], "busy_skipped": []}
    opt = torch.optim.AdamW(drafter.parameters(), lr=1e-6)  # one optimizer for every arm: one AdamW state
    updates = {}
    with dry_triton(ctx, True):  # the overlap kernel's inputs are fp32 logits: Triton forward, torch backward
        for name, desc, fn in arms(ctx, s, target, drafter):
            if ctx.left() < (3 if ctx.dry else 8):
                res["skipped"].append(f"{name}: {max(ctx.left(), 0):.0f} s left of the section's budget")
                continue
            updates[name] = make_update(drafter, opt, fn, ctx.dev)
            try:
                res["arms"][name] = {**desc, **time_updates(ctx, updates[name], s["steps"])}
            except Exception as e:  # noqa: BLE001  one failed arm does not hide the others
                res["errors"].append({"arm": name, "error": one_line(e)})
            reset_memory(ctx.dev)
        if s["busy"]:
            seq = [n for n in res["arms"] if n.startswith("sequential")]
            busy_pass(ctx, res, updates, seq + [n for n in res["arms"] if n not in seq])
    compare(res, s)
    del drafter, opt, updates
    res["status"] = "error" if not res["arms"] else ("failed" if res["errors"] else (
        "partial" if res["skipped"] else "ok"))
    if not res["arms"]:
        res["error"] = (res["errors"] or [{"error": "; ".join(res["skipped"])}])[0]["error"]
    return round_tree(res)


def _f(x, fmt="{:.3g}"):
    return "–" if x is None else fmt.format(x)


def render_specopd(sec: dict | None) -> list[str]:
    """The docs/gpu.md lines of this section."""
    if not sec or not sec.get("arms"):
        return []
    lines = ["", f"### SpecOPD training throughput: branch-parallel vs the sequential Draft-OPD loop (L={sec['L']}, "
                 f"A={sec['A']}, W={sec['W']}, {sec['rounds']} rounds; {sec['precision']}; {sec['clock']})", ""]
    lines += markdown_table(
        ["update", "sequences", "anchors / rounds", "supervised positions", "s per update", "positions/s",
         "branch-parallel ÷ this", "GPU-busy share", "peak allocated GiB", "peak reserved GiB"],
        [[name, a['batch'], a.get("anchors", a.get("rounds")), a['positions'], _f(a['step_s'], '{:.3f}'),
          _f(a['positions_per_s'], '{:,.0f}'), _f(a.get('branch_parallel_ratio'), '{:.2f}×'),
          _f(a.get('gpu_busy_share'), '{:.0%}'), _f(a.get('peak_allocated_gib'), '{:.1f}'),
          _f(a.get('peak_reserved_gib'), '{:.1f}')] for name, a in sec["arms"].items()])
    eq = sec.get("equal_positions")
    if eq:
        lines.append(f"\nEqual supervised positions ({eq['positions'][0]} vs {eq['positions'][1]}, the same number of "
                     f"sequences): {eq['branch_parallel']} updates in {_f(eq['s_per_update'][0], '{:.3f}')} s, "
                     f"{eq['sequential']} in {_f(eq['s_per_update'][1], '{:.3f}')} s (sequential ÷ branch-parallel: "
                     f"**{_f(eq['update_time_ratio'], '{:.2f}×')}**).")
    lines.append(f"\nEngine: {sec['engine']}. Note: {sec['note']}. The paper reports {sec['paper_ratio']}× "
                 "(27B target, 8 GPUs).")
    for sk in sec.get("skipped", []):
        lines.append(f"\nSkipped: {sk}.")
    if sec.get("busy_skipped"):
        lines.append(f"\nGPU-busy time not measured for {'; '.join(sec['busy_skipped'])}.")
    for err in sec.get("errors", []):
        lines.append(f"\nError ({err['arm']}): {err['error']}")
    return lines
