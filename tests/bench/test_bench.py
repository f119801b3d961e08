"""Benchmark library: the real DFlash drafter in the engine (greedy exactness, engine proposals ==
teacher-forced proposals at the same anchors), simulated τ, metrics (τ, coverage, oracle τ, break-even),
the arm registry, and a full runner -> report pass on a tiny target."""
from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from draftlab.bench import ArmContext, Checkpoints, PromptItem, SpeculativeArm, build_arm, compute, run_benchmark, write_outputs
from draftlab.arms.grammar import ARM_TABLE
from draftlab.bench.report import mark_ablation
from draftlab.bench.simulate import _train_path, simulated_tau
from draftlab.bench.uncertainty import add_intervals
from draftlab.config import BenchmarkConfig
from draftlab.errors import DraftlabError
from draftlab.decoding import SamplingParams, SpeculativeEngine, generate_ar
from conftest import arms_preset
from stubs import OracleDrafter

NO_CHECKPOINTS = Checkpoints("", "", "", "")  # arms here load their drafter through load_drafter


def _prompts(target, lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, target.vocab_size, (n,), generator=g).tolist() for n in lengths]


def _real_drafter(target, S=4, vocab_size=0, seed=0):
    drafter_mod = pytest.importorskip("draftlab.drafter")
    torch.manual_seed(seed)
    vocab = None
    if vocab_size:
        vocab = torch.randperm(target.vocab_size - 1, generator=torch.Generator().manual_seed(seed))[:vocab_size].sort().values
    spec = drafter_mod.arch_from_target(target, drafter_mod.DrafterDesign(block_size=S, num_layers=1, target_layer_ids=[], mask_token_id=target.vocab_size - 1,
                                        draft_vocab_size=vocab_size))
    d = drafter_mod.DFlashDrafter.from_target(spec, target, vocab).eval()
    with torch.no_grad():  # a larger init so the random drafter has opinions (some acceptances)
        for p in d.parameters():
            p.mul_(3.0)
    return d


@pytest.mark.parametrize("lengths,vocab_size", [((9,), 0), ((5, 12, 8), 0), ((7, 10), 40)])
def test_real_drafter_greedy_equals_ar(llama_target, lengths, vocab_size):
    t = llama_target
    prompts = _prompts(t, lengths, seed=1)
    ref = [generate_ar(t, [p], 16, eos_ids=[]).tokens[0] for p in prompts]
    d = _real_drafter(t, S=4, vocab_size=vocab_size)
    res = SpeculativeEngine(t, d, record_topk=3, ).generate(prompts, 16, eos_ids=[])
    assert res.tokens == ref
    # T=1 runs and respects the stop rule
    res1 = SpeculativeEngine(t, d).generate(prompts, 16, SamplingParams(1.0), eos_ids=[], generator=torch.Generator().manual_seed(0))
    assert [len(x) for x in res1.tokens] == [16] * len(prompts)


class _HybridState:
    def __init__(self, real, oracle, rows):
        self.real, self.oracle, self.rows = real, oracle, rows

    def drop_streams(self, keep):
        self.real.drop_streams(keep)
        self.oracle.drop_streams(keep)
        self.rows = [r for r, k in zip(self.rows, keep.tolist()) if k]


class HybridDrafter:
    """The real drafter runs every round (its context cache sees the engine's ragged acceptances and dropped
    streams) and its proposals are logged; the oracle stub decides what is
    proposed, so blocks get partly accepted."""

    def __init__(self, real, oracle):
        self.real, self.oracle = real, oracle
        self.block_size, self.mask_token_id = real.block_size, real.mask_token_id
        self.target_layer_ids = real.arch.target_layer_ids
        oracle.mask_token_id = real.mask_token_id
        self.log = []  # (stream, anchor position, real drafter proposals [n])

    def new_state(self, b, capacity=0):
        return _HybridState(self.real.new_state(b, capacity), self.oracle.new_state(b, capacity), list(range(b)))

    def extend_context(self, st, feats, valid, positions):
        self.real.extend_context(st.real, feats, valid, positions)
        self.oracle.extend_context(st.oracle, feats, valid, positions)

    def draft(self, st, ids, positions):
        real = self.real.draft(st.real, ids, positions)
        for r, a, p in zip(st.rows, positions[:, 0].tolist(), real.argmax()[:, 1:]):
            self.log.append((r, a, p))
        return self.oracle.draft(st.oracle, ids, positions)


@pytest.mark.parametrize("lengths", [(11,), (6, 13, 9, 4)])
def test_real_drafter_with_partial_acceptance(llama_target, lengths):
    """Greedy output == AR while blocks are partly accepted, and every round's real-drafter proposals
    equal the drafter's training-path proposals at the same anchor over the final text (serving and
    training agree on positions, context features and masks under ragged acceptance)."""
    t = llama_target
    prompts = _prompts(t, lengths, seed=2)
    ref = generate_ar(t, prompts, 20, eos_ids=[]).tokens
    d = HybridDrafter(_real_drafter(t, S=5, vocab_size=50), OracleDrafter(t, block_size=5, mode="mixed", p_right=0.7, seed=4))
    d.oracle.prompts = prompts
    res = SpeculativeEngine(t, d, ).generate(prompts, 20, eos_ids=[])
    assert res.tokens == ref
    assert len({a for acc in res.accepted for a in acc}) > 2  # ragged acceptance happened
    for b, (prompt, out) in enumerate(zip(prompts, res.tokens)):
        ids = torch.tensor([prompt + out])
        feats = t(ids, taps=d.target_layer_ids).taps
        logged = [(a, p) for r, a, p in d.log if r == b]
        tf = _train_path(d.real, feats, ids, torch.tensor([a for a, _ in logged]))
        assert torch.equal(torch.stack([p for _, p in logged]), tf)


def test_simulated_tau_paths_agree(llama_target):
    t = llama_target
    d = _real_drafter(t, S=5, vocab_size=50)
    prompt = _prompts(t, (11,), seed=2)[0]
    out = generate_ar(t, [prompt], 20, eos_ids=[]).tokens[0]
    sim = simulated_tau(t, d, [(prompt, out)], stride=1)
    assert abs(sim["train"] - sim["infer"]) < 1e-9  # the two drafter paths agree
    assert 1.0 <= sim["train"] <= 5.0 and len(sim["train_curve"]) == 4 and sim["sequences"] == 1


class OracleArm(SpeculativeArm):
    def generate(self, prompts, *a, **kw):
        self.drafter.prompts = prompts
        return super().generate(prompts, *a, **kw)


def test_metrics_tau_coverage_oracle(llama_target):
    t = llama_target
    prompts = _prompts(t, (6, 9), seed=3)
    S, K = 4, 3
    cfg = BenchmarkConfig(suites=["mt-bench"], max_new_tokens=13, temperatures=[0.0], concurrency=[], topk=K, warmup=False)
    arms = {"ar": build_arm("ar", ArmContext(t, cfg, NO_CHECKPOINTS)),
            "right": OracleArm("right", t, OracleDrafter(t, block_size=S, mode="right")),
            "wrong": OracleArm("wrong", t, OracleDrafter(t, block_size=S, mode="wrong"))}
    suites = {"mt-bench": [PromptItem(f"p{i}", "mt-bench", p) for i, p in enumerate(prompts)]}
    runs = run_benchmark(arms, suites, cfg, [], t.device)
    detail = compute(runs.runs, runs.arms)
    m = detail["suites"]["mt-bench"]["t0"]
    assert m["right"]["tau"] == S and m["wrong"]["tau"] == 1.0 and m["ar"]["tau"] == 1.0
    assert m["right"]["accept_curve"] == [1.0] * (S - 1) and m["wrong"]["accept_curve"] == [0.0] * (S - 1)
    # always right: the committed token is the top-1 everywhere; always wrong: never the top-1 ...
    assert all(row[0] == 1.0 for row in m["right"]["coverage"])
    assert all(row[0] == 0.0 for row in m["wrong"]["coverage"])
    assert m["right"]["oracle_tau"] == S and m["wrong"]["oracle_tau"] < S
    # the reachable oracle keeps slot 1 = the drafter's top-1: never right there, it stays at 1
    assert m["right"]["oracle_tau_reachable"] == S and m["wrong"]["oracle_tau_reachable"] == 1.0
    assert m["ar"]["speedup"] == 1.0 and m["right"]["speedup"] > 0
    assert m["right"]["break_even_tau"] > 0 and set(m["right"]["round_ms"]) == {"draft", "propose", "verify", "commit"}
    s = detail["summary"]
    assert s["right"]["tau_t0"] == S and "oracle_tau_t0" in s["right"] and s["ar"]["speedup_t0"] == 1.0
    assert s["wrong"]["oracle_tau_reachable_t0"] == 1.0 and s["wrong"]["headroom_closed_reachable_t0"] is None


def test_arm_table_is_explicit_and_isolated(root):
    """Unknown names fail in one line; a caller's own table does not touch ARM_TABLE; every arm that a
    config preset names is in the table (conf/benchmark/arms/*.yaml)."""
    before = dict(ARM_TABLE)
    with pytest.raises(DraftlabError, match="unknown benchmark arm 'no-such-arm'") as e:
        build_arm("no-such-arm", ArmContext(None, BenchmarkConfig(), NO_CHECKPOINTS))
    assert "\n" not in str(e.value)
    table = {**ARM_TABLE, "dummy": lambda name, ctx: f"built {name}"}
    assert build_arm("dummy", ArmContext(None, BenchmarkConfig(), NO_CHECKPOINTS), table) == "built dummy"
    assert ARM_TABLE == before and "dummy" not in ARM_TABLE
    for preset in sorted((root / "conf" / "benchmark" / "arms").glob("*.yaml")):
        names = arms_preset(preset.stem)
        for name in (names["arms"] + names["concurrency_arms"] + names.get("ablation_arms", [])
                     + names.get("sampled_arms", []) + [a for pair in names.get("pairs", []) for a in pair if a != "best"]):
            assert name in ARM_TABLE, (preset.name, name)


def test_runner_and_report_end_to_end(llama_target, tmp_path):
    t = llama_target
    cfg = BenchmarkConfig(suites=["mt-bench", "humaneval"], max_new_tokens=10, temperatures=[0.0, 1.0],
                          concurrency=[1, 2, 4], concurrency_prompts=2, concurrency_max_new_tokens=8, topk=4,
                          concurrency_temperatures=[0.0, 1.0],
                          arms=["ar", "dflash", "pld", "dflash-pld", "hf-generate"], ablation_arms=["dflash-b"],
                          ablation_prompts_per_suite=2, concurrency_arms=["ar", "dflash", "pld", "dflash-pld"])
    d = _real_drafter(t, S=4, vocab_size=40)
    from draftlab.config import PLDConfig

    ctx = ArmContext(t, cfg, NO_CHECKPOINTS, load_drafter=lambda path: d, pld=PLDConfig(num_tokens=3, min_match=1),
                     block_size=4)
    arms = {name: build_arm(name, ctx) for name in ("ar", "dflash")}
    arms["dflash-b"] = SpeculativeArm("dflash-b", t, d)  # not in the sweep (concurrency_arms)
    arms.update({name: build_arm(name, ctx) for name in ("pld", "dflash-pld", "hf-generate")})
    suites = {s: [PromptItem(f"{s}/{i}", s, p) for i, p in enumerate(_prompts(t, (5, 8, 6), seed=i + 4))]
              for i, s in enumerate(cfg.suites)}
    ticks = []
    runs = run_benchmark(arms, suites, cfg, [], t.device, tick=ticks.append)
    from draftlab.bench.runner import plan_size

    assert len(ticks) == plan_size(cfg, suites, arms) == len(runs.runs)
    assert {r.arm for r in runs.runs if r.sweep} == {"ar", "dflash", "pld", "dflash-pld"}
    assert {r.temperature for r in runs.runs if r.arm == "hf-generate"} == {0.0}  # a greedy reference row
    assert {r.temperature for r in runs.runs if r.sweep} == {0.0, 1.0}
    detail = compute(runs.runs, runs.arms)
    detail["simulated"] = {"dflash": simulated_tau(t, d, [(p.ids, r) for p, r in zip(suites["mt-bench"], runs.runs[1].result.tokens)])}
    add_intervals(detail, runs.runs, n_boot=200, pairs=[["dflash-b", "dflash"], ["best", "ar"], ["nosuch", "dflash"]],
                  ablation=cfg.ablation_arms)
    mark_ablation(detail, cfg.ablation_arms)
    written = write_outputs(detail, runs.runs, root=tmp_path)
    js = json.loads((tmp_path / "results/benchmark.json").read_text())
    head = {f.stem: json.loads(f.read_text()) for f in (tmp_path / "metrics/benchmark").glob("*.json")}
    assert set(head) == set(cfg.running_arms())  # one small DVC metrics row per arm
    assert set(head["dflash"]) == {"ablation"} | {f"{m}_{t}{pm}" for m in ("tau", "speedup") for t in ("t0", "t1")
                                                  for pm in ("", "_pm")}
    assert head["dflash-b"]["ablation"] is True and head["dflash"]["ablation"] is False
    # the ablation arm decoded the first 2 prompts of each suite; its pair is on those, marked, and its speedup is
    # against AR on the same prompts
    assert {r.prompt_ids[0] for r in runs.runs if r.arm == "dflash-b" and not r.sweep} == {
        f"{s}/{i}" for s in cfg.suites for i in range(2)}
    pb = next(p for p in js["pairs"] if p["a"] == "dflash-b" and p["temperature"] == "t0")
    assert pb["ablation"] is True and pb["prompts"] == {"humaneval": 2, "mt-bench": 2}
    assert js["summary"]["dflash-b"]["ablation"] is True and js["suites"]["mt-bench"]["t0"]["dflash-b"]["ablation"]
    assert js["summary"]["dflash-b"]["speedup_t0_ci"] is not None
    assert all(p["ablation"] is False for p in js["pairs"] if p["pair"] == "best vs ar")  # best: headline arms only
    # copy / loop reading per prompt, verdicts without the looping prompts, the per-position reading
    assert set(js["suites"]["mt-bench"]["t0"]["pld"]["per_prompt"]) >= {"copy_share", "repeat_share", "loop"}
    assert all("no_loop" in p and "tau_diff_halfwidth" in p for p in js["pairs"])
    pos = js["suites"]["mt-bench"]["t0"]["dflash"]["positions"]
    assert sum(b["tokens"] for b in pos["bins"]) == sum(len(x) - 1 for r in runs.runs if r.arm == "dflash" and
                                                       r.suite == "mt-bench" and r.temperature == 0 and not r.sweep
                                                       for x in r.result.tokens)  # every decoded token, once
    assert "positions_t0" in js["summary"]["dflash"] and "hf-generate" not in [
        a for a in js["summary"] if "positions_t0" in js["summary"][a]]  # no per-round times, no reading
    ci = js["summary"]["dflash"]["tau_t0_ci"]
    assert head["dflash"]["tau_t0"] == js["summary"]["dflash"]["tau_t0"] and ci[0] <= head["dflash"]["tau_t0"] <= ci[1]
    assert abs(head["dflash"]["tau_t0_pm"] - (ci[1] - ci[0]) / 2) < 1e-6
    assert js["summary"]["ar"]["speedup_t0_ci"] == [1.0, 1.0]  # AR against itself, on every resample
    pp = js["suites"]["mt-bench"]["t0"]["dflash"]["per_prompt"]
    assert len(pp["tau"]) == 3 and abs(sum(pp["tau"]) / 3 - js["suites"]["mt-bench"]["t0"]["dflash"]["tau"]) < 1e-5
    for name in ("oracle_tau", "oracle_tau_reachable"):  # per prompt (the headroom's noise), the same estimator
        assert abs(sum(pp[name]) / 3 - js["suites"]["mt-bench"]["t0"]["dflash"][name]) < 1e-5
        assert all(o >= t - 1e-9 for o, t in zip(pp[name], pp["tau"]))
        gaps = [g for unit in pp[name + "_gaps"] for g in unit]  # per sequence: the headroom's noise
        want = js["suites"]["mt-bench"]["t0"]["dflash"][name] - js["suites"]["mt-bench"]["t0"]["dflash"]["tau"]
        assert len(gaps) == 3 and min(gaps) >= -1e-9 and abs(sum(gaps) / 3 - want) < 1e-5
    assert "oracle_tau" not in js["suites"]["mt-bench"]["t0"]["ar"]["per_prompt"]  # AR has no candidates
    assert sorted(p["pair"] for p in js["pairs"]) == ["best vs ar"] * 2 + ["dflash-b vs dflash"] * 2  # unknown: skipped
    assert set(head["hf-generate"]) == {"ablation", "tau_t0", "tau_t0_pm", "speedup_t0", "speedup_t0_pm"}  # greedy-only
    for p in js["pairs"]:  # `best`: the highest mean speedup at that temperature
        if p["pair"] == "best vs ar":
            tk = p["temperature"]
            cands = [a for a in cfg.arms if a != "ar" and js["summary"][a].get(f"speedup_{tk}") is not None]
            assert p["a"] == max(cands, key=lambda a: js["summary"][a][f"speedup_{tk}"])
    assert all(p["tau_diff"] == 0.0 and p["tau_diff_ci"] == [0.0, 0.0] and p["tau_exceeds_noise"] is False
               for p in js["pairs"] if p["b"] == "dflash")  # the same drafter under two names: no difference
    for key in ("tau_t0", "tau_t1", "speedup_t0", "speedup_t1", "tokens_per_s_t0", "tokens_per_s_t1", "oracle_tau_t0", "concurrency"):
        assert key in js["summary"]["dflash"], key
    assert set(js["summary"]["dflash"]["concurrency"]) == {"t0", "t1"}
    assert set(js["summary"]["dflash"]["concurrency"]["t0"]) == {"1", "2", "4"}
    assert "concurrency" not in js["summary"]["dflash-b"]
    summ = js["summary"]
    for arm in ("dflash", "pld", "dflash-pld", "hf-generate"):  # greedy outputs are AR's
        assert summ[arm]["tokens_equal_ar_t0"] is True, arm
    assert summ["hf-generate"]["tokens_per_s_t0"] > 0 and summ["hf-generate"]["speedup_t0"] > 0
    assert summ["hf-generate"]["tau_t1"] is None and summ["hf-generate"].get("break_even_tau_t0") is None and set(summ["pld"]["concurrency"]) == {"t0", "t1"}
    src = summ["dflash-pld"]["sources_t0"]
    assert src["lookup"]["rounds"] + src["drafter"]["rounds"] > 0 and "sources_t0" in summ["pld"]
    for c, m in js["concurrency"]["t0"]["dflash"].items():  # the base arm is 1.0 of itself
        assert m["tau_ratio"] == 1.0 and m["tokens_per_s_ratio"] == 1.0 and m["round_overhead_ms"] == 0.0
    ar1 = js["concurrency"]["t1"]["ar"]["1"]
    assert ar1["tau"] == 1.0 and ar1["tau_ratio"] < 1.0 + 1e-9 and ar1["round_overhead_ms"] is None  # n/a for AR
    assert js["summary"]["ar"]["tau_t0"] == 1.0
    for name in ("tau_per_slot", "coverage", "speedup", "concurrency", "positions", "peers"):
        df = pd.read_csv(written[name])
        assert len(df) > 0 and "ablation" in df.columns, name
    assert set(pd.read_csv(written["speedup"]).query("ablation").arm) == {"dflash-b"}
    rounds = pd.read_parquet(written["rounds"])
    assert set(rounds["arm"]) == {"dflash", "dflash-b", "pld", "dflash-pld"} and len(rounds) > 0
    assert rounds[rounds.arm == "pld"]["topk_ids"].isna().all()  # no drafter: nothing ranked
    assert (rounds[rounds.arm == "dflash-pld"]["lookup_len"] >= 0).all()
    rounds = rounds[rounds.arm.isin(["dflash", "dflash-b"])]
    assert rounds["accepted"].between(0, 3).all() and len(rounds["topk_ids"].iloc[0]) == 3
    # per-round records reproduce the engine's τ
    t0 = rounds[(rounds.suite == "mt-bench") & (rounds.temperature == 0.0)]
    tau = (t0.groupby("prompt_id")["accepted"].mean() + 1).mean()
    assert abs(tau - js["suites"]["mt-bench"]["t0"]["dflash"]["tau"]) < 1e-6
