"""Benchmark metrics from the runs (definitions: docs/algorithms.md).

- τ: mean over rounds of acc + 1 per request, then averaged over requests (AR: 1 by definition).
- accept curve: per slot j = 1..n, the share of (stream, round) pairs with acc >= j.
- tokens/s: aggregate = output tokens / wall time of the batches (prefill included); decode = tokens after
  each stream's first / (wall − prefill); per stream = mean over requests of tokens / time until that
  stream's last token.
- speedup: aggregate tokens/s over the AR arm's on the same prompts in the same run (an arm that decoded
  fewer prompts — an ablation arm, a T>0 subset — against AR on those prompts only). Over a mix of suites (the
  summary): total tokens / total seconds of the arm over AR's on the same prompts (`total_speedup`), with the
  geometric mean of the per-suite ratios beside it (`speedup_geomean_<t>`); never an arithmetic mean of ratios.
- round split: mean seconds per round of each phase (draft / propose / verify / commit; AR: verify / commit),
  from the engines' `PhaseTimer` (CUDA events on a GPU, perf_counter on CPU); `round_wall_ms`: the mean
  wall time of a round, read at its one synchronisation (None for a peer's opaque loop).
- coverage[j][k]: share of slots j whose finally committed token (the output token at that position)
  is among the drafter's top-k there; oracle τ: per round, slots accepted while that token is in the
  top-K (an ideal re-selector), + 1; reachable oracle τ (`oracle_tau_reachable`): the same with slot 1
  fixed to the drafter's top-1, the best a prefix-first greedy corrector can do (docs/algorithms.md "Path rules"); both
  from `draftlab.corrector.paths.oracle_path`.
- break-even τ: (mean speculative round time) / (mean AR step time) at the same setting — the τ at
  which speculation matches AR on this machine.
- summary per arm, beside the means over suites: `proposal_share_of_round` (mean share of the
  `propose` phase in a round over suites and temperatures: the corrector's cost; the argmax for
  plain DFlash) and `headroom_closed_t0` = (τ_arm − τ_base) / (τ_oracle(base) − τ_base) at T=0 (means over
  suites), the base being the arm's own uncorrected drafter (`dflash-seeded` for arms on the seeded drafter,
  `dflash` for the others; None for the lookup arms, whose proposals are not the drafter's candidates) and
  τ_oracle(base) its top-K oracle τ; `headroom_closed_reachable_t0` the same against its reachable oracle τ
  (definitions: draftlab.bench.oracles).
- sources (arms whose proposal step records `lookup_len`: `pld`, `dflash-pld`): per source (lookup /
  drafter) the share of (stream, round) pairs it proposed, accepted proposals per such round, and the
  accepted tokens it contributed (in a spliced block the lookup's slots come first).
- tokens_equal_ar (T=0): every output of the arm equals the AR arm's output for the same prompt (the
  exactness flag; reference rows such as `hf-generate` included).
- concurrency sweep, per temperature, arm and level: tokens/s, τ, speedup over AR, and relative to the
  base arm (`dflash`) at the same level `tau_ratio`, `tokens_per_s_ratio`, `round_overhead_ms` (speculative
  arms only; None for AR).
- copying (per suite / temperature / arm; summary `copy_share_t0`, `repeat_share_t0`, `loop_share_t0`): the
  shares of output tokens that copy the prompt or repeat earlier output, and of answers that looped
  (draftlab.bench.copying).
- positions (per group; summary `positions_<t>` = {first, later}: τ, tokens/s, speedup, means over suites):
  the reading by where in the answer a round starts (draftlab.bench.positions).
- confidence intervals over prompts and paired arm differences: draftlab.bench.uncertainty.
"""
from __future__ import annotations

from collections import defaultdict

import torch

from draftlab.bench.positions import reading as position_reading
from draftlab.bench.copying import reading
from draftlab.bench.oracles import (  # noqa: F401 (headroom_closed: re-exported)
    headroom_base, headroom_closed, headroom_noise, is_lookup, mean_noise, noise_why, oracle_bounded,
)
from draftlab.bench.runner import BatchRun
from draftlab.corrector.paths import oracle_path
from draftlab.decoding.verify import greedy_accept_length
from draftlab.stats import geometric_mean


def tkey(t: float) -> str:
    return f"t{t:g}"


def _final_tokens(run: BatchRun) -> torch.Tensor:
    toks = run.result.tokens
    out = torch.full((len(toks), max((len(t) for t in toks), default=0) + 1), -1, dtype=torch.long)
    for i, t in enumerate(toks):
        out[i, : len(t)] = torch.tensor(t, dtype=torch.long)
    return out  # [B, Lmax+1], -1 beyond each stream's end


def round_hits(run: BatchRun, rec) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For one RoundRecord: committed [b, n] (final output token at each slot, -1 beyond the end),
    defined [b, n] bool, hit_at_k [b, n, K] bool (committed token within the top-k, k = 1..K). n = the drafter's
    slots (its top-K's), which a verify-width rule may propose fewer of (`draftlab.decoding.width`)."""
    toks = _final_tokens(run)
    n = rec.topk_ids.shape[1] if rec.topk_ids is not None else rec.proposals.shape[1]
    idx = (rec.offset[:, None] + torch.arange(1, n + 1)).clamp(max=toks.shape[1] - 1)  # [b, n]
    committed = toks[rec.stream[:, None], idx]  # [b, n]
    defined = committed >= 0
    hit = (rec.topk_ids == committed[..., None]) & defined[..., None]  # [b, n, K]
    return committed, defined, hit.long().cumsum(-1) > 0


def group_metrics(runs: list[BatchRun]) -> dict:
    """Metrics of one (arm, suite, temperature, concurrency) group of batch runs."""
    res = [r.result for r in runs]
    n_tokens = sum(r.num_tokens for r in res)
    wall = sum(r.wall_s for r in res)
    per_stream = [len(t) / d for r in res for t, d in zip(r.tokens, r.t_done) if d > 0 and t]
    times = torch.cat([r.round_times for r in res]) if res else torch.zeros(0, 0)
    phases = res[0].phases if res else ()
    R = times.shape[0]
    round_s = times.mean(0) if R else torch.zeros(len(phases))
    m = {
        "requests": sum(len(r.tokens) for r in res), "tokens": n_tokens, "wall_s": wall,
        "tokens_per_s": n_tokens / wall if wall > 0 else None,
        # decode only: tokens after each stream's first (which the prefill yields) over wall minus prefill
        "decode_tokens_per_s": _ratio(n_tokens - sum(len(r.tokens) for r in res), wall - sum(r.prefill_s for r in res)),
        "tokens_per_s_stream": sum(per_stream) / len(per_stream) if per_stream else None,
        "prefill_s": sum(r.prefill_s for r in res) / max(len(res), 1),
        "rounds": R, "round_ms": {p: 1e3 * float(v) for p, v in zip(phases, round_s)},
        "round_total_ms": 1e3 * float(round_s.sum()),
        "round_wall_ms": _round_wall_ms(res),
    }
    total = float(round_s.sum())
    m["round_share"] = {p: (float(v) / total if total > 0 else None) for p, v in zip(phases, round_s)}
    accepted = [a for r in res for a in r.accepted if a]
    if not accepted:  # AR: one token per step
        m["tau"] = 1.0
        return m
    m["tau"] = sum(sum(a) / len(a) + 1 for a in accepted) / len(accepted)
    flat = torch.tensor([x for a in accepted for x in a])
    n = max(r.block_size for r in res) - 1
    m["accept_curve"] = [(flat >= j).float().mean().item() for j in range(1, n + 1)]
    m.update(coverage_metrics(runs))
    sources = source_metrics(runs)
    if sources:
        m["sources"] = sources
    return m


def _round_wall_ms(res) -> float | None:
    """Mean wall ms per round over the runs that timed their rounds (None when none did)."""
    walls = [r.round_wall for r in res if r.round_wall is not None and r.round_wall.numel()]
    return 1e3 * float(torch.cat(walls).mean()) if walls else None


def source_metrics(runs: list[BatchRun]) -> dict:
    """Lookup vs drafter from the rounds' `lookup_len` / `lookup_slots` records (empty without them)."""
    slots, acc = [], []
    for run in runs:
        for rec in run.result.records:
            if "lookup_len" in rec.extras:
                slots.append(rec.extras.get("lookup_slots", rec.extras["lookup_len"]).long())
                acc.append(rec.accepted.long())
    if not slots:
        return {}
    L, a = torch.cat(slots), torch.cat(acc)  # [rounds·streams]
    from_lookup = (L > 0)
    acc_lookup = torch.minimum(a, L)  # accepted tokens that the lookup proposed
    out = {}
    for name, sel, tok in (("lookup", from_lookup, acc_lookup), ("drafter", ~from_lookup, a - acc_lookup)):
        k = int(sel.sum())
        out[name] = {"rounds": k, "share": k / len(L), "accepted_per_round": float(a[sel].float().mean()) if k else None,
                     "accepted_tokens": int(tok.sum())}
    return out


def copying_metrics(runs: list[BatchRun]) -> dict:
    """Copy / repeat shares (weighted by output tokens) and the share of prompts whose answer looped
    (draftlab.bench.copying)."""
    rows = [(len(o), reading(p, o)) for r in runs for p, o in zip(r.prompts, r.result.tokens)]
    total = sum(n for n, _ in rows)
    out = {k: (sum(n * x[k] for n, x in rows if x[k] is not None) / total if total else None)
           for k in ("copy_share", "repeat_share")}
    out["loop_share"] = sum(x["loop"] for _, x in rows) / len(rows) if rows else None
    out["answers"] = len(rows)
    return out


def _ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


ORACLES = {"oracle_tau": False, "oracle_tau_reachable": True}  # metric -> reachable (`oracle_path`)


def coverage_metrics(runs: list[BatchRun]) -> dict:
    """Top-k coverage per slot and both oracle τ from the runs' round records (empty without records)."""
    cov_sum, cov_cnt = None, None
    for run in runs:
        for rec in run.result.records:
            if rec.topk_ids is None:
                continue
            committed, defined, hitk = round_hits(run, rec)
            cov_sum = hitk.sum(0).double() if cov_sum is None else cov_sum + hitk.sum(0)  # [n, K]
            cov_cnt = defined.sum(0).double() if cov_cnt is None else cov_cnt + defined.sum(0)  # [n]
    if cov_sum is None:
        return {}
    cov = cov_sum / cov_cnt.clamp(min=1)[:, None]  # [n, K]
    per_request = [oracle_taus(run) for run in runs]  # per run: {oracle: {stream: τ}}
    return {
        "coverage": cov.tolist(),  # [slot 1..n][k 1..K]
        "coverage_top1_mean": float(cov[:, 0].mean()), "coverage_topK_mean": float(cov[:, -1].mean()),
        **{name: _mean([t for o in per_request for t in o[name].values()]) for name in ORACLES},
    }


def oracle_taus(run: BatchRun) -> dict[str, dict[int, float]]:
    """Per oracle, per stream of one batch run that has top-K records: the request's oracle τ (the mean over its
    rounds of the oracle's accepted slots + 1). The benchmark's oracle τ is the mean of these over requests;
    the per-prompt figures (`draftlab.bench.uncertainty.per_prompt`) give the headroom its noise."""
    if run.oracles is None:  # computed once per run: the metrics and the per-prompt figures both read it
        acc: dict = {name: defaultdict(list) for name in ORACLES}
        for rec in run.result.records:
            if rec.topk_ids is None:
                continue
            committed, defined, _ = round_hits(run, rec)
            for name, reachable in ORACLES.items():
                o_acc = greedy_accept_length(oracle_path(rec.topk_ids, committed, reachable), committed, defined)  # [b]
                for s, a in zip(rec.stream.tolist(), o_acc.tolist()):
                    acc[name][s].append(a + 1)
        run.oracles = {name: {s: sum(v) / len(v) for s, v in o.items()} for name, o in acc.items()}
    return run.oracles


def _groups(runs: list[BatchRun], sweep: bool) -> dict:
    g: dict = defaultdict(list)
    for r in runs:
        if r.sweep == sweep:
            g[(r.arm, r.suite, r.temperature, r.concurrency)].append(r)
    return g


def break_even(spec: dict, ar: dict) -> float | None:
    ar_step = ar.get("round_total_ms") or 0.0
    return spec["round_total_ms"] / ar_step if ar_step > 0 and spec.get("rounds") else None


def compute(runs: list[BatchRun], arms: list[str], ar_arm: str = "ar", base_arm: str = "dflash") -> dict:
    """Full detail: per suite / temperature / arm metrics (+ speedup, break-even τ), the concurrency
    sweep per arm and level, and the per-arm summary (means over suites)."""
    suites: dict = defaultdict(lambda: defaultdict(dict))
    groups = _groups(runs, sweep=False)
    bases: dict = {}  # (suite, temperature key, arm) -> the AR arm's metrics on that arm's prompts
    for (arm, suite, temp, c), group in groups.items():
        suites[suite][tkey(temp)][arm] = group_metrics(group)
        mine = [pid for r in group for pid in r.prompt_ids]
        ar = [r for r in groups.get((ar_arm, suite, temp, c), []) if set(r.prompt_ids) <= set(mine)]
        if arm != ar_arm and ar and len(ar) < len(groups[(ar_arm, suite, temp, c)]):
            bases[(suite, tkey(temp), arm)] = group_metrics(ar)  # an arm on fewer prompts (ablation, sampled)
        m = suites[suite][tkey(temp)][arm]
        m["copying"] = copying_metrics(group)
        pos = position_reading(group, ar if arm != ar_arm else None)
        if pos is not None:
            m["positions"] = pos
    outputs = {(r.suite, r.arm, pid): toks for r in runs if r.temperature == 0 and not r.sweep
               for pid, toks in zip(r.prompt_ids, r.result.tokens)}
    for suite, temps in suites.items():
        for arm, m in temps.get(tkey(0.0), {}).items():
            mine = {pid: toks for (s, a, pid), toks in outputs.items() if s == suite and a == arm}
            ref = [outputs.get((suite, ar_arm, pid)) for pid in mine]
            m["tokens_equal_ar"] = None if not mine or any(x is None for x in ref) else all(
                toks == outputs[(suite, ar_arm, pid)] for pid, toks in mine.items())
        for tk, by_arm in temps.items():
            for arm, m in by_arm.items():
                base = bases.get((suite, tk, arm), by_arm.get(ar_arm))
                m["speedup"] = (m["tokens_per_s"] / base["tokens_per_s"]) if base and base.get("tokens_per_s") and m.get("tokens_per_s") else None
                if base is not None:  # AR's totals on the arm's prompts: the summary's total-time ratio reads them
                    m["ar_tokens"], m["ar_wall_s"] = base.get("tokens"), base.get("wall_s")
                m["break_even_tau"] = break_even(m, base) if base and arm != ar_arm else None
    conc: dict = defaultdict(lambda: defaultdict(dict))  # temperature key -> arm -> level -> metrics
    for (arm, _s, temp, c), group in sorted(_groups(runs, sweep=True).items(), key=lambda kv: kv[0][3]):
        conc[tkey(temp)][arm][str(c)] = group_metrics(group)
    for by_arm in conc.values():
        for arm, levels in by_arm.items():
            for c, m in levels.items():
                ar, base = by_arm.get(ar_arm, {}).get(c), by_arm.get(base_arm, {}).get(c)
                m["speedup"] = _ratio_of(m, ar, "tokens_per_s")
                m["break_even_tau"] = break_even(m, ar) if ar and arm != ar_arm else None
                sweep_ratios(m, base)
    return {"suites": _plain(suites), "concurrency": _plain(conc), "summary": summary(suites, conc, arms)}


def _ratio_of(m: dict, base: dict | None, key: str) -> float | None:
    return m[key] / base[key] if base and base.get(key) and m.get(key) is not None else None


def sweep_ratios(m: dict, base: dict | None) -> None:
    """The concurrency claim's figures (docs/algorithms.md "What the DCOCO paper reports") of one arm at one level,
    relative to the base arm (DFlash) at the same level: τ ratio, aggregate-throughput ratio, and the per-round overhead
    (ms of round time beyond the base's; the `propose` phase is the corrector's own cost)."""
    m["tau_ratio"] = _ratio_of(m, base, "tau")
    m["tokens_per_s_ratio"] = _ratio_of(m, base, "tokens_per_s")
    m["propose_ms"] = (m.get("round_ms") or {}).get("propose")
    speculative = "accept_curve" in m  # AR has no rounds to compare: its overhead is n/a, not a negative number
    m["round_overhead_ms"] = (m["round_total_ms"] - base["round_total_ms"]
                              if speculative and base and base.get("rounds") and m.get("rounds") else None)


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def _geomean(xs):
    xs = [x for x in xs if x is not None and x > 0]
    return geometric_mean(xs) if xs else None


def total_rate(ms: list[dict], tokens: str = "tokens", wall: str = "wall_s") -> float | None:
    """Σ tokens / Σ seconds over per-suite metric rows (None when a row lacks either or no time passed)."""
    if not ms or any(m.get(tokens) is None or m.get(wall) is None for m in ms):
        return None
    secs = sum(m[wall] for m in ms)
    return sum(m[tokens] for m in ms) / secs if secs > 0 else None


def total_speedup(ms: list[dict]) -> float | None:
    """The speed of an arm over a mix of suites: its total tokens / total seconds over AR's total tokens / total
    seconds on the same prompts (per suite `ar_tokens` / `ar_wall_s`, set by `compute`)."""
    mine, ar = total_rate(ms), total_rate(ms, "ar_tokens", "ar_wall_s")
    return mine / ar if mine is not None and ar else None


def summary(suites: dict, conc: dict, arms: list[str]) -> dict:
    out = {}
    for arm in arms:
        e: dict = {}
        temps = sorted({tk for s in suites.values() for tk in s})
        for tk in temps:
            ms = [s[tk][arm] for s in suites.values() if arm in s.get(tk, {})]
            e[f"tau_{tk}"] = _mean([m.get("tau") for m in ms])
            # speed over the mix: total tokens / total seconds, against AR's on the same prompts (never a mean of
            # per-suite ratios); the geometric mean of the per-suite ratios beside it
            e[f"tokens_per_s_{tk}"] = total_rate(ms)
            e[f"speedup_{tk}"] = total_speedup(ms)
            e[f"speedup_geomean_{tk}"] = _geomean([m.get("speedup") for m in ms])
            for name in ORACLES:
                if any(name in m for m in ms):
                    e[f"{name}_{tk}"] = _mean([m.get(name) for m in ms])
            if any(m.get("break_even_tau") for m in ms):
                e[f"break_even_tau_{tk}"] = _mean([m.get("break_even_tau") for m in ms])
            for key in ("copy_share", "repeat_share", "loop_share"):
                e[f"{key}_{tk}"] = _mean([(m.get("copying") or {}).get(key) for m in ms])
            segs = [m["positions"]["segments"] for m in ms if m.get("positions")]
            if segs:
                e[f"positions_{tk}"] = {seg: {k: _mean([x[seg].get(k) for x in segs])
                                              for k in ("tau", "tokens_per_s", "speedup")} for seg in segs[0]}
        eq = [s[tkey(0.0)][arm].get("tokens_equal_ar") for s in suites.values() if arm in s.get(tkey(0.0), {})]
        if any(x is not None for x in eq):
            e["tokens_equal_ar_t0"] = all(x for x in eq if x is not None)
        for tk in temps:
            src = [s[tk][arm]["sources"] for s in suites.values() if "sources" in s.get(tk, {}).get(arm, {})]
            if src:
                e[f"sources_{tk}"] = merge_sources(src)
        shares = [m.get("round_share", {}).get("propose") for s in suites.values() for by_arm in s.values()
                  for a, m in by_arm.items() if a == arm]
        e["proposal_share_of_round"] = _mean(shares)
        if any(arm in by_arm for by_arm in conc.values()):  # {temperature key: {level: value}}
            e["concurrency"] = {tk: {c: m["tokens_per_s"] for c, m in by_arm[arm].items()}
                                for tk, by_arm in conc.items() if arm in by_arm}
            e["concurrency_tokens_per_s_ratio"] = {tk: {c: m["tokens_per_s_ratio"] for c, m in by_arm[arm].items()}
                                                   for tk, by_arm in conc.items() if arm in by_arm}
            e["concurrency_tau_ratio"] = {tk: {c: m["tau_ratio"] for c, m in by_arm[arm].items()}
                                          for tk, by_arm in conc.items() if arm in by_arm}
        out[arm] = e
    summary_headroom(out, suites)
    return out


def summary_headroom(out: dict, suites: dict) -> None:
    """Per arm of a summary, in place: `headroom_closed_t0` / `headroom_closed_reachable_t0` against its own base
    (definitions and the noise rule: draftlab.bench.oracles) and `headroom_t0` = {oracle: {delta, se, why}}: the
    base's headroom Δ at T=0 (mean over suites), its paired standard error from the suites' per-prompt figures
    (None before `draftlab.bench.uncertainty.add_intervals` adds them) and why the ratio is not given, if not."""
    t0 = tkey(0.0)
    for arm, e in out.items():  # speculative arms (those with top-K records); AR has no headroom
        b = headroom_base(arm, is_lookup(e))  # its own uncorrected drafter; None for a lookup arm
        base = out.get(b, {}) if b else {}
        notes = {}
        for name in ORACLES:  # headroom_closed_t0 (top-K oracle), headroom_closed_reachable_t0
            key = "headroom_closed" + name[len("oracle_tau"):] + "_t0"
            if f"{name}_t0" not in e:
                e[key] = None
                continue
            rows = [s[t0][b] for s in suites.values() if b in s.get(t0, {})] if b and b != arm else []
            noise = mean_noise(headroom_noise(m.get("per_prompt"), name) for m in rows) if rows else None
            tau_b, orc_b = base.get("tau_t0"), base.get(f"{name}_t0")
            se = 0.0 if b == arm else noise[1] if noise else None  # a base closes 0 of its own headroom
            bounded = oracle_bounded(arm)
            e[key] = headroom_closed(e.get("tau_t0"), tau_b, orc_b, se) if bounded else None
            delta = orc_b - tau_b if orc_b is not None and tau_b is not None else None
            if b and b != arm and delta is not None and delta > 1e-9:
                notes[name] = {"delta": round(delta, 6), "se": round(noise[1], 6) if noise else None,
                               "why": "" if e[key] is not None else noise_why(b, delta, noise) if bounded else
                               "a tree: the chain's oracle does not bound it"}
        if notes:
            e["headroom_t0"] = notes


def merge_sources(parts: list[dict]) -> dict:
    """Source metrics summed over suites (shares and per-round means re-weighted by rounds)."""
    out = {}
    total = sum(p[k]["rounds"] for p in parts for k in p)
    for k in parts[0]:
        rounds = sum(p[k]["rounds"] for p in parts)
        acc = sum((p[k]["accepted_per_round"] or 0.0) * p[k]["rounds"] for p in parts)
        out[k] = {"rounds": rounds, "share": rounds / total if total else None,
                  "accepted_per_round": acc / rounds if rounds else None,
                  "accepted_tokens": sum(p[k]["accepted_tokens"] for p in parts)}
    return out


def _plain(d):
    return {k: _plain(v) for k, v in d.items()} if isinstance(d, dict) else d
