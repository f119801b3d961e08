"""The pretrain_seeded stage's recipe (issue 20): the seeded drafter trained beside the plain one, and its
held-out comparison table against teacher-forced prompt lookup, the dflash-pld hybrid and the plain drafter,
paired over sequences, split by looping references."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch

from draftlab.bench.copying import looped
from draftlab.bench.simulate import simulated_tau
from draftlab.config import DrafterConfig, PLDConfig, PretrainConfig
from draftlab.decoding import generate_ar
from draftlab.decoding.verify import greedy_accept_length
from draftlab.errors import DraftlabError
from draftlab.recipes.pretrain.seeded import block_proposals, lookup_blocks, pretrain_seeded, summarise
from test_seeded import brute_seed, looping_text, make_seeded

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("hybrid,min_match", [("switch", 1), ("splice", 2)])
def test_lookup_and_hybrid_blocks_follow_the_arms_rules(hybrid, min_match):
    """Lookup alone: the most recent earlier match of the longest suffix (SPEC §5 read literally), at most
    num_tokens, only those verified; the hybrid: the lookup where >= min_match tokens matched (switch: padded
    to the block as the arm pads; splice: the plain drafter's tokens after it), the plain drafter elsewhere."""
    n, mask, pld = 6, -1, PLDConfig(max_ngram=3, num_tokens=4, min_match=min_match, hybrid=hybrid)
    tokens = looping_text(80, 9, 3)
    anchors = list(range(2, 70, 3))
    plain = torch.randint(100, 200, (len(anchors), n))  # tokens the text never holds: the fallback shows
    got = block_proposals(tokens, anchors, plain, n, pld)
    (lk, lv), (hy, hv) = got["lookup"], got["hybrid"]
    assert lookup_blocks(tokens, anchors, n, 3, 4, 1) == [[t for t in brute_seed(tokens, a, 4, 3, 1, mask) if t != mask]
                                                           for a in anchors]
    routed = seen = 0
    for j, a in enumerate(anchors):
        look = [t for t in brute_seed(tokens, a, 4, 3, 1, mask) if t != mask]
        assert lk[j, :len(look)].tolist() == look and lv[j].tolist() == [k < len(look) for k in range(n)]
        route = [t for t in brute_seed(tokens, a, 4, 3, min_match, mask) if t != mask]
        if not route:
            assert hy[j].tolist() == plain[j].tolist()
            continue
        routed += 1
        want = (route + [route[-1]] * n)[:n] if hybrid == "switch" else route + plain[j, len(route):].tolist()
        assert hy[j].tolist() == want
        seen += len(look)
    assert hv.all() and routed >= len(anchors) // 2 and seen > 0
    assert routed < len(anchors) or min_match == 1  # min_match 2 leaves some anchors to the drafter


def _rows(spec):
    """spec: [(loop, seeded block taus, other block taus)] -> rows whose lookup / hybrid / plain are `other`."""
    out = []
    for i, (loop, s, o) in enumerate(spec):
        o = torch.tensor(o, dtype=torch.float64).numpy()
        out.append({"index": i, "loop": loop, "tau": {"seeded": torch.tensor(s, dtype=torch.float64).numpy(),
                                                      "lookup": o, "hybrid": o, "plain": o}})
    return out


def test_summary_pairs_resample_sequences_and_split_loops():
    """Block-weighted and per-sequence figures by hand; the interval resamples whole sequences (the blocks of one
    sequence move together), so two sequences that disagree give an interval from 0 to 1."""
    rows = _rows([(True, [3, 3, 3], [2, 2, 2]), (False, [1], [1])])
    s = summarise(rows, n_boot=400, seed=1)
    a = s["all"]
    assert (a["sequences"], a["blocks"]) == (2, 4)
    assert a["tau"]["seeded"] == pytest.approx(2.5) and a["tau"]["lookup"] == pytest.approx(1.75)
    assert a["tau_per_sequence"]["seeded"] == pytest.approx(2.0) and a["tau_per_sequence"]["plain"] == pytest.approx(1.5)
    p = a["pairs"]["seeded-lookup"]
    assert p["diff"] == pytest.approx(0.75) and p["diff_per_sequence"] == pytest.approx(0.5)
    assert p["ci"] == pytest.approx([0.0, 1.0]) and p["ci_excludes_0"] is False  # resamples: {B,B} 0, {A,A} 1
    assert s["looping"]["sequences"] == 1 and s["looping"]["pairs"]["seeded-hybrid"]["diff"] == pytest.approx(1.0)
    assert s["looping"]["pairs"]["seeded-hybrid"]["ci"] is None  # one sequence: no interval
    assert s["non_looping"]["pairs"]["seeded-plain"]["diff"] == pytest.approx(0.0)
    steady = summarise(_rows([(i % 2 == 0, [2.0 + i, 1.0], [1.0 + i, 0.0]) for i in range(6)]), n_boot=300)
    assert steady["all"]["pairs"]["seeded-lookup"]["ci"] == pytest.approx([1.0, 1.0])  # +1 on every block
    assert steady["all"]["pairs"]["seeded-lookup"]["ci_excludes_0"] is True
    assert steady["looping"]["sequences"] + steady["non_looping"]["sequences"] == 6


def test_recipe_trains_the_seeded_drafter_and_compares_it_on_the_validation_anchors(target, tmp_path):
    """The seeded row equals the training's own held-out simulated τ (same anchors, labels, block averaging); the
    plain row equals simulated τ of the plain drafter per sequence; the lookup row is the literal definition;
    looping sequences are those whose answer repeats an 8-token span."""
    S, stride = 4, 2
    prompts = [looping_text(10, 30, s) for s in range(7)]
    resps = generate_ar(target, prompts, 28, eos_ids=[]).tokens  # the target's greedy answers: labels = the text
    resps[5] = resps[5][:9] + resps[5][:9] + resps[5][:9]  # one answer that surely loops (not greedy: labels differ)
    splits = ["train"] * 4 + ["heldout"] * 3
    df = pd.DataFrame({"prompt_id": [str(i) for i in range(7)], "suite": ["sharegpt"] * 7, "split": splits,
                       "prompt_ids": prompts, "response_ids": resps})
    dcfg = DrafterConfig(block_size=S, num_layers=1, target_layer_ids=[0, 2, 3], mask_token_id=1, draft_vocab_size=0,
                         seed="lookup")
    pcfg = PretrainConfig(max_steps=3, max_minutes=0, val_every=0, batch_size=2, anchors_per_seq=8,
                          val_anchor_stride=stride, checkpoint_every=0, topk=4, cache_features=False)
    plain = make_seeded(target, S, seed_mode="none")  # taps [0, 2]: the comparison reads both tap sets
    pld = PLDConfig(max_ngram=3, num_tokens=3, min_match=1, hybrid="splice")
    out = pretrain_seeded(target, df, plain, dcfg, pcfg, pld, tmp_path / "work", log=lambda m: None, n_boot=200)
    comp, rep = out.report["comparison"], out.report
    assert out.drafter.arch.seeded and rep["steps"] == 3
    a = comp["all"]
    assert a["sequences"] == 3 and a["blocks"] == rep["val_blocks"]
    assert a["tau"]["seeded"] == pytest.approx(rep["sim_tau"], abs=1e-9)
    greedy_ok = [i for i in (4, 6)]  # the greedy answers: simulated τ's labels (the text) are the target's tokens
    sim = simulated_tau(target, plain, [(prompts[i], resps[i]) for i in greedy_ok], stride, paths=("train",))
    ours = [r for r in comp["per_sequence"] if r["index"] in greedy_ok]
    assert sum(r["tau"]["plain"] for r in ours) / 2 == pytest.approx(sim["train"], abs=1e-9)
    lk_sum = lk_n = 0
    for i in (4, 5, 6):
        text = prompts[i] + resps[i]
        ids = torch.tensor([text])
        labels = target(ids).logits[0].argmax(-1)  # label of position p+1 = argmax at p
        for a_ in range(len(prompts[i]), len(text) - S + 1, stride):
            look = [t for t in brute_seed(text, a_, 3, 3, 1, -1) if t != -1]
            prop = torch.tensor((look + [-1] * S)[:S - 1])
            lk_sum += 1 + int(greedy_accept_length(prop, labels[a_:a_ + S - 1]))
            lk_n += 1
    assert a["tau"]["lookup"] == pytest.approx(lk_sum / lk_n, abs=1e-9) and lk_n == a["blocks"]
    assert comp["looping_sequences"] == [i for i in (4, 5, 6) if looped(resps[i])] and 5 in comp["looping_sequences"]
    assert comp["looping"]["sequences"] + comp["non_looping"]["sequences"] == 3
    assert set(a["pairs"]) == {"seeded-lookup", "seeded-hybrid", "seeded-plain"}
    with pytest.raises(DraftlabError, match="plain drafter is seeded"):
        pretrain_seeded(target, df, out.drafter, dcfg, pcfg, pld, tmp_path / "w2", log=lambda m: None)


@pytest.mark.slow  # an end-to-end stage run (~10 s: the tiny-random target's preparation)
def test_stage_trains_when_enabled_and_leaves_a_marker_when_disabled(root, tmp_path, monkeypatch):
    """The pretrain_seeded stage's body on the smoke profile (tiny-random target): enabled, a seeded drafter, the report
    with its comparison and the headline; disabled, a folder with disabled.json only, which the arm refuses."""
    import json

    from draftlab.arms.grammar import ArmContext, Checkpoints, seeded_arm
    from draftlab.config import BenchmarkConfig
    from draftlab.drafter import DFlashDrafter, DrafterDesign, arch_from_target, load_drafter, save_drafter
    from draftlab.params import build_params, compose_params
    from draftlab.verifier.load import load_target

    from draftlab.pipeline.steps import prepare_target
    from draftlab.pipeline.steps import pretrain_seeded as stage

    monkeypatch.chdir(tmp_path)

    raw = compose_params(["target=tiny-random", "profile=smoke", "tracking.enabled=false"], root / "conf")
    prepare_target.run(build_params(raw))
    t = load_target("models/target", "cpu", "float32")
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(100, t.vocab_size - 1, (8,), generator=g).tolist() for _ in range(6)]
    resps = generate_ar(t, prompts, 24, eos_ids=[]).tokens
    Path("data").mkdir()
    pd.DataFrame({"prompt_id": [str(i) for i in range(6)], "suite": ["sharegpt"] * 6, "split": ["train"] * 4 + ["heldout"] * 2,
                  "prompt_ids": prompts, "response_ids": resps}).to_parquet("data/references.parquet")
    torch.manual_seed(0)
    mask = next(i for i in range(2, t.vocab_size) if all(i not in p + q for p, q in zip(prompts, resps)))
    save_drafter(DFlashDrafter.from_target(arch_from_target(t, DrafterDesign(8, 1, [], mask)), t), "models/drafter/pretrained")
    stage.run(build_params(raw, [f"drafter.mask_token_id={mask}"]))
    rep = json.loads(Path("results/pretrain_seeded.json").read_text())
    head = json.loads(Path("metrics/pretrain_seeded.json").read_text())
    assert rep["enabled"] and rep["steps"] == 6 and rep["comparison"]["all"]["sequences"] == 2
    assert head["sim_tau"] == rep["sim_tau"] and head["lookup_tau"] == rep["comparison"]["all"]["tau"]["lookup"]
    assert load_drafter("models/drafter/seeded", t).arch.seed == "lookup"
    assert Path("plots/pretrain_seeded_budget.csv").read_text().startswith("step,train_minutes,")
    stage.run(build_params(raw, ["seeded.enabled=false", "seeded.methods=false", "benchmark.arms=[ar,dflash]",
                                 "benchmark.pairs=[[dflash,ar]]", "benchmark.ablation_arms=[]",
                                 "benchmark.concurrency_arms=[ar,dflash]"]))
    assert [f.name for f in Path("models/drafter/seeded").iterdir()] == ["disabled.json"]
    assert json.loads(Path("results/pretrain_seeded.json").read_text())["enabled"] is False
    ctx = ArmContext(t, BenchmarkConfig(), Checkpoints("", "", "", "", "models/drafter/seeded"),
                     load_drafter=lambda f: load_drafter(f, t))
    with pytest.raises(DraftlabError, match=r"holds no drafter \(the pretrain_seeded stage ran with seeded.enabled=false\)"):
        seeded_arm("dflash-seeded", ctx)
