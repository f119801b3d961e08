"""The Streamlit explorer (app/) on a small fixture of stage outputs written here into tmp dirs:
every page renders, widgets change what is shown, empty roots give messages naming the stage to run."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "app"
sys.path.insert(0, str(APP))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # tree_fixture

from streamlit.testing.v1 import AppTest  # noqa: E402

from draftlab import paths  # noqa: E402
from draftlab.explore import grid as G  # noqa: E402
from draftlab.explore import loaders as L  # noqa: E402
import dvc_plots as DP  # noqa: E402
import plots as P  # noqa: E402
from draftlab.explore import provenance as V  # noqa: E402
from draftlab.explore import tokens as T  # noqa: E402

VOCAB = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", " the", " cat", " sat", " on", " mat", "\n", " a", " dog",
         " ran", " to", " and", " it", " was", " big", " red", " hat", " sun", " key", " keys", " is", " are",
         " missing", " here", "These", "The", "A", "."]
N, K = 4, 3  # proposed slots, candidates


def write_tokenizer(folder: Path) -> None:
    from tokenizers import AddedToken, Tokenizer
    from tokenizers.models import WordLevel

    tok = Tokenizer(WordLevel({w: i for i, w in enumerate(VOCAB)}, unk_token="<|endoftext|>"))
    tok.add_special_tokens([AddedToken(w, special=True) for w in VOCAB[:3]])
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))


def _detail() -> dict:
    def spec(tau, oracle, tps, curve):
        cov = [[min(1.0, 0.2 * (k + 1) + 0.1 * (3 - j)) for k in range(K)] for j in range(N)]
        return {"requests": 2, "tokens": 40, "wall_s": 2.0, "tokens_per_s": tps, "decode_tokens_per_s": tps * 1.2,
                "tokens_per_s_stream": tps, "prefill_s": 0.1, "rounds": 10,
                "round_ms": {"draft": 5.0, "propose": 1.0, "verify": 20.0, "book": 0.5}, "round_total_ms": 26.5,
                "round_share": {"draft": 0.19, "propose": 0.04, "verify": 0.75, "book": 0.02},
                "tau": tau, "accept_curve": curve, "coverage": cov, "coverage_top1_mean": 0.3,
                "coverage_topK_mean": 0.7, "oracle_tau": oracle, "oracle_tau_reachable": oracle - 0.5}

    def ar(tps):
        return {"requests": 2, "tokens": 40, "wall_s": 4.0, "tokens_per_s": tps, "rounds": 40,
                "round_ms": {"verify": 30.0, "book": 0.5}, "round_total_ms": 30.5,
                "round_share": {"verify": 0.98, "book": 0.02}, "tau": 1.0}

    suites = {}
    for s in ("mt-bench", "humaneval"):
        suites[s] = {}
        for tk in ("t0", "t1"):
            by = {"ar": ar(10.0), "dflash": spec(1.8, 2.6, 12.0, [0.5, 0.2, 0.1, 0.0]),
                  "dcoco": spec(2.2, 2.9, 13.5, [0.6, 0.35, 0.2, 0.05])}
            for arm, m in by.items():
                m["speedup"] = m["tokens_per_s"] / 10.0
                m["break_even_tau"] = None if arm == "ar" else 0.87
                m["ablation"] = False
                g = 1.0 if arm == "ar" else m["tau"]  # issue 23: by position (the later bin gains more)
                m["positions"] = {"width": 32, "first": 32, "bins": [
                    {"start": st, "rounds": 10, "tokens": int(10 * g * (1 + 0.2 * i)), "tau": g * (1 + 0.2 * i),
                     "tokens_per_s": 10.0 * g * (1 + 0.2 * i), "speedup": g * (1 + 0.2 * i)}
                    for i, st in enumerate((0, 32))]}
                m["copying"] = {"copy_share": 0.1, "repeat_share": 0.2, "loop_share": 0.5, "answers": 2}
                if arm == "dflash":  # per-prompt τ and oracle τ: the headroom's standard error (here 0.05 τ)
                    m["per_prompt"] = {"tau": [1.75, 1.85], "oracle_tau": [2.5, 2.7],
                                       "oracle_tau_reachable": [2.0, 2.2]}
            suites[s][tk] = by
    gain = {"ar": 1.0, "dflash": 1.2, "dcoco": 1.3}
    conc = {tk: {a: {str(c): {"tokens_per_s": 10.0 * c ** 0.5 * g, "decode_tokens_per_s": 11.0 * c,
                              "tokens_per_s_stream": 10.0, "tau": 1.0 if a == "ar" else 1.8 * g / 1.2,
                              "tau_ratio": g / 1.2, "tokens_per_s_ratio": g / 1.2 - 0.02 * c,
                              "round_total_ms": 50.0 + c, "propose_ms": None if a == "ar" else 0.5,
                              "round_overhead_ms": -5.0 if a == "ar" else 0.5}  # an older file's AR overhead
                         for c in (1, 2, 4)} for a, g in gain.items()} for tk in ("t0", "t1")}
    src = {"lookup": {"rounds": 6, "share": 0.6, "accepted_per_round": 2.5, "accepted_tokens": 15},
           "drafter": {"rounds": 4, "share": 0.4, "accepted_per_round": 0.25, "accepted_tokens": 1}}
    summary = {"ar": {"tau_t0": 1.0, "tokens_per_s_t0": 10.0, "speedup_t0": 1.0, "tokens_equal_ar_t0": True,
                      "tau_t1": 1.0, "tokens_per_s_t1": 10.0, "speedup_t1": 1.0},
               "pld": {"tau_t0": 2.1, "tokens_per_s_t0": 14.0, "speedup_t0": 1.4, "tokens_equal_ar_t0": True,
                       "sources_t0": {"lookup": src["lookup"]}, "tau_t1": 1.7, "tokens_per_s_t1": 12.0,
                       "speedup_t1": 1.2, "sources_t1": {"lookup": src["lookup"]}},
               "dflash-pld": {"tau_t0": 2.3, "tokens_per_s_t0": 13.0, "speedup_t0": 1.3, "tokens_equal_ar_t0": True,
                              "sources_t0": src, "tau_t1": 1.9, "tokens_per_s_t1": 11.0, "speedup_t1": 1.1,
                              "sources_t1": src},
               "hf-generate": {"tau_t0": 1.0, "tokens_per_s_t0": 9.5, "speedup_t0": 0.95, "tokens_equal_ar_t0": True,
                               "tau_t1": None}}
    for arm in ("ar", "dflash", "dcoco"):  # the arms with per-suite rows: means over suites with intervals
        e = summary.setdefault(arm, {})
        for tk in ("t0", "t1"):
            for m in ("tau", "speedup", "tokens_per_s"):
                vals = [suites[s][tk][arm][m] for s in suites]
                e[f"{m}_{tk}"] = sum(vals) / len(vals)
                e[f"{m}_{tk}_ci"] = [e[f"{m}_{tk}"], e[f"{m}_{tk}"]] if arm == "ar" and m != "tokens_per_s" else \
                    [e[f"{m}_{tk}"] - 0.1, e[f"{m}_{tk}"] + 0.1]
            e[f"positions_{tk}"] = {seg: {k: suites["mt-bench"][tk][arm]["positions"]["bins"][i][k]
                                          for k in ("tau", "tokens_per_s", "speedup")}
                                    for i, seg in enumerate(("first", "later"))}
            e["ablation"] = False
            e.update({f"{k}_{tk}": suites["mt-bench"][tk][arm]["copying"][k] for k in ("copy_share", "repeat_share",
                                                                                       "loop_share")})
            for m in ("tau", "speedup", "tokens_per_s"):
                for s in suites:  # per-suite intervals, as draftlab.bench.uncertainty writes them
                    v = suites[s][tk][arm][m]
                    suites[s][tk][arm].setdefault("ci", {})[m] = [v - 0.15, v + 0.15] if arm != "ar" else [v, v]
    pairs = [{"pair": "dcoco vs dflash", "a": "dcoco", "b": "dflash", "temperature": tk, "tau_diff": 0.4,
              "tau_diff_ci": [0.25, 0.55], "tau_exceeds_noise": True, "tokens_per_s_ratio": 1.125,
              "tokens_per_s_ratio_ci": [0.98, 1.3], "speed_exceeds_noise": False, "ablation": False,
              "prompts": {"mt-bench": 7, "humaneval": 7},
              "no_loop": {"tau_diff": 0.3, "tau_exceeds_noise": False, "tokens_per_s_ratio": 1.05,
                          "speed_exceeds_noise": False}} for tk in ("t0", "t1")]
    return {"suites": suites, "concurrency": conc, "summary": summary, "pairs": pairs, "setup": {"target": "tiny"},
            "config": {"concurrency_temperatures": [0.0, 1.0], "concurrency_max_new_tokens": 8,
                       "concurrency_base": "dflash"}}


def _rounds() -> pd.DataFrame:
    """Rounds of two arms on two prompts. Token ids index VOCAB. The dcoco arm corrects slot 2
    (' key' -> ' keys') and records transition scores."""
    cand = [[26, 27, 28], [20, 21, 10], [22, 23, 15], [24, 25, 7]]  # These/The/A, key/keys/dog, is/are/was, missing/here/mat
    logits = [[4.2, 3.6, 2.8], [2.7, 2.5, 1.1], [3.1, 2.9, 0.8], [2.8, 1.6, 0.5]]
    committed = [26, 21, 23, 24]  # "These keys are missing"
    scores = [[[logits[p + 1][b] for b in range(K)] for _ in range(K)] for p in range(N - 1)]
    scores[0][0][1] += 1.0  # These -> keys
    scores[1][1][1] += 1.0  # keys -> are
    rows = []
    for arm in ("dflash", "dcoco"):
        for temp in (0.0, 1.0):
            for pid in ("mt-bench/1", "mt-bench/2"):
                for r in range(3):
                    if arm == "dflash":
                        props, acc = [26, 20, 22, 24], 1  # argmax block: slot 2 rejected
                    else:
                        props, acc = [26, 21, 23, 24], 4
                    if r == 2:  # a round where slot 1 is rejected
                        props, acc = [27, 20, 22, 24], 0
                    row = {"arm": arm, "suite": "mt-bench", "temperature": temp, "concurrency": 1, "prompt_id": pid,
                           "round": r, "offset": 5 * r, "accepted": acc, "proposals": props, "topk_ids": cand,
                           "topk_logits": logits, "target_tokens": (committed + [8]) if temp == 0.0 else None,
                           "committed": committed}
                    if arm == "dcoco":
                        row["transition_scores"] = scores
                    rows.append(row)
    from tree_fixture import extra_rounds

    return pd.DataFrame(rows + extra_rounds())


def write_fixture(root: Path, mlflow_runs: bool = True) -> Path:
    from draftlab.bench.report import plot_frames

    root.mkdir(parents=True, exist_ok=True)
    detail = _detail()
    (root / "results").mkdir(exist_ok=True)
    (root / L.BENCH_JSON).write_text(json.dumps(detail))
    (root / "plots").mkdir(exist_ok=True)
    for name, df in plot_frames(detail).items():
        df.to_csv(root / L.PLOTS[name], index=False)
    pd.DataFrame({"step": [10, 20, 30], "train_minutes": [0.1, 0.2, 0.3], "heldout": [1.0, 1.2, 1.3],
                  "mt-bench": [1.0, 1.1, 1.25]}).to_csv(root / "plots/pretrain_budget.csv", index=False)
    (root / "data").mkdir(exist_ok=True)
    _rounds().to_parquet(root / L.ROUNDS)
    write_tokenizer(root / "models/target")
    for rel in (paths.TREES, paths.LILICORR):  # the verdict tools' files: the toy world's, as committed
        (root / rel).write_text((ROOT / "worlds/toy" / rel).read_text())
    (root / "params.yaml").write_text("tracking:\n  uri: sqlite:///mlruns.db\n  experiment: draftlab\n  enabled: true\n")
    (root / "dvc.yaml").write_text(
        "stages:\n  pretrain_drafter:\n    cmd: x\n    plots:\n      - plots/pretrain_budget.csv:\n"
        "          x: train_minutes\n          y: heldout\n  benchmark:\n    cmd: y\n    plots:\n"
        "      - plots/benchmark_tau_per_slot.csv:\n          x: slot\n          y: accept_rate\n"
        "      - plots/benchmark_speedup.csv:\n          x: suite\n          y: speedup\n"
        "plots:\n  - concurrency_claim:\n      x: streams\n      y:\n"
        "        plots/benchmark_concurrency.csv: [tau_ratio, tokens_per_s_ratio]\n")
    if mlflow_runs:
        write_mlflow(root / "mlruns.db")
    return root


def write_mlflow(db: Path) -> None:
    import logging

    logging.getLogger("alembic").setLevel(logging.WARNING)
    from mlflow.tracking import MlflowClient

    c = MlflowClient(tracking_uri=f"sqlite:///{db}")
    exp = c.create_experiment("draftlab")
    for stage, dvc_exp, lr in (("pretrain_drafter", "", "0.001"), ("pretrain_drafter", "exp-lr", "0.003"),
                               ("benchmark", "exp-lr", "0.003")):
        r = c.create_run(exp, run_name=stage, tags={"stage": stage, "dvc_exp": dvc_exp, "target": "tiny"})
        rid = r.info.run_id
        c.log_param(rid, "pretrain.lr", lr)
        c.log_param(rid, "drafter.block_size", "8")
        for step in range(3):
            c.log_metric(rid, "train/loss", 3.0 - step * float(lr) * 100, step=step)
        c.set_terminated(rid)


@pytest.fixture(scope="module")
def fixture_root(tmp_path_factory) -> Path:
    return write_fixture(tmp_path_factory.mktemp("outputs"))


def app(root: Path, page: str | None = None) -> AppTest:
    at = AppTest.from_file(str(APP / "explorer.py"), default_timeout=60)
    at.session_state["root"] = str(root)
    if page:
        at.session_state["page"] = page
    return at.run()


def grid_html(at: AppTest) -> str:
    return next(m.value for m in at.markdown if "dl-grid" in m.value)


def test_every_page_renders(fixture_root):
    at = app(fixture_root)
    for page in L_PAGES:
        at.sidebar.radio(key="page").set_value(page).run()
        assert not at.exception, (page, [e.value for e in at.exception])
        assert not [i.value for i in at.info if "run `dvc repro" in i.value], (page, [i.value for i in at.info])
    at.sidebar.radio(key="page").set_value("Acceptance").run()
    assert len(at.get("vega_lite_chart")) >= 2
    assert any("headroom" in s.value.lower() for s in at.subheader)


L_PAGES = ["Candidate grid", "Acceptance", "Speed", "Runs", "Pipeline plots", "Compare", "Trees", "LiLiCorr"]


def test_grid_cells_tokens_and_rounds(fixture_root):
    at = app(fixture_root, "Candidate grid")
    at.selectbox(key="grid_arm").select("dflash").run()
    html = grid_html(at)
    assert html.count('class="dl-cell') >= N * K
    assert "␣keys" in html and "These" in html  # whitespace made visible
    assert "st-rejected" in html and "st-accepted" in html
    assert at.metric[0].value == "1"  # dflash, round 0: slot 2 rejected
    assert len(at.get("vega_lite_chart")) == 1  # the accepted-length figure
    at.select_slider(key="grid_round").set_value(2).run()
    assert at.metric[0].value == "0"
    assert grid_html(at) != html


def test_grid_corrected_arm_and_transition_table(fixture_root):
    at = app(fixture_root, "Candidate grid")
    at.selectbox(key="grid_arm").select("dcoco").run()
    assert not at.exception
    html = grid_html(at)
    for rule in ("greedy", "globalsum", "geometric"):
        assert f"corrected: {rule}" in html
    assert "st-corrected-accepted" in html
    assert at.metric[0].value == "4"
    tables = [d.value for d in at.dataframe]
    assert tables and "S_p(a, b)" in tables[-1].columns
    assert tables[-1].iloc[0]["token"] == "␣keys"  # These -> keys scored highest (+1.0)
    at.selectbox(key="grid_pred_slot").select(2).run()
    assert at.dataframe[-1].value.iloc[0]["token"] == "␣are"
    # T>0: no replay of other paths, the arm's own verdict stays
    at.selectbox(key="grid_temp").select(1.0).run()
    assert any("T>0" in c.value for c in at.caption)


def test_grid_replay_goes_through_verify(fixture_root, monkeypatch):
    import draftlab.decoding.verify as V

    calls = []
    real = V.greedy_accept_length
    monkeypatch.setattr(V, "greedy_accept_length", lambda *a, **k: calls.append(1) or real(*a, **k))
    row = _rounds().query("arm == 'dcoco' and temperature == 0 and round == 0").iloc[0]
    g = G.build(row)
    assert calls
    by = {p.name: p for p in g.paths}
    assert by["drafter argmax"].accepted == 1 and by["drafter argmax"].statuses[:3] == ["accepted", "rejected", "unverified"]
    assert by["corrected: greedy"].tokens == [26, 21, 23, 24] and by["corrected: greedy"].accepted == 4
    assert by["corrected: greedy"].statuses == ["accepted", "corrected-accepted", "corrected-accepted", "accepted"]


def test_acceptance_and_speed_widgets(fixture_root):
    at = app(fixture_root, "Acceptance")
    n0 = len(at.dataframe[0].value.columns)
    at.multiselect(key="acc_suites").unselect("humaneval").run()
    assert len(at.dataframe[0].value.columns) == n0 - 1
    hc = next(d.value for d in at.dataframe if any(str(c).startswith("headroom closed") for c in d.value.columns))
    assert set(hc["arm"]) == {"dcoco"} and set(hc["base"]) == {"dflash"}  # one headroom-closed column per oracle
    top, reach = "headroom closed (drafter's top-K oracle τ)", "headroom closed (drafter's top-K reachable oracle τ)"
    assert {top, reach} <= set(hc.columns)
    assert hc[reach].iloc[0] == f"{(2.2 - 1.8) / (2.1 - 1.8):.1%}"
    at = app(fixture_root, "Speed")
    assert not at.exception and len(at.get("vega_lite_chart")) >= 4  # incl. the Fig. 3 ratio chart
    spec = at.get("vega_lite_chart")[-2].proto.spec
    assert "tokens_per_s_ratio" in spec and "strokeDash" in spec  # throughput ratio dashed
    at.selectbox(key="speed_conc_t").select("t1").run()
    assert not at.exception
    before = at.get("vega_lite_chart")[-1].proto.spec
    at.selectbox(key="speed_conc_y").select("decode_tokens_per_s").run()
    assert at.get("vega_lite_chart")[-1].proto.spec != before


def test_peers_on_acceptance_and_speed_pages(fixture_root, tmp_path):
    """The lookup arms' proposal sources (Acceptance) and the peers table with the hf-generate reference
    row, its ratio to AR and the tokens-equal flag (Speed); the reference row is absent at T=1."""
    at = app(fixture_root, "Acceptance")
    assert any("Proposal sources" in s.value for s in at.subheader)
    src = next(d.value for d in at.dataframe if "source" in d.value.columns)
    assert set(src["arm"]) == {"pld", "dflash-pld"} and set(src["source"]) == {"lookup", "drafter"}
    at = app(fixture_root, "Speed")
    peers = next(d.value for d in at.dataframe if "greedy tokens = AR" in d.value.columns)
    row = peers.set_index("arm").loc["hf-generate"]
    assert row["kind"].startswith("reference row") and row["ratio to AR"] == "0.95"  # ratios: 2 decimals
    assert row["greedy tokens = AR"] == "yes" and row["tokens_per_s"] == "9.5"  # tokens/s: 1 decimal
    at.selectbox(key="speed_temp").select("t1").run()
    peers = next(d.value for d in at.dataframe if "greedy tokens = AR" in d.value.columns)
    assert "hf-generate" not in set(peers["arm"]) and "pld" in set(peers["arm"])
    empty = write_fixture(tmp_path / "nosrc", mlflow_runs=False)
    d = json.loads((empty / L.BENCH_JSON).read_text())
    d["summary"] = {}
    (empty / L.BENCH_JSON).write_text(json.dumps(d))
    at = app(empty, "Acceptance")
    assert any("pld" in i.value and "dvc repro benchmark" in i.value for i in at.info)


def test_runs_filter_and_params_diff(fixture_root):
    at = app(fixture_root, "Runs")
    assert not at.exception
    assert len(at.dataframe[0].value) == 3
    at.multiselect(key="runs_exp").unselect("(workspace)").run()
    assert len(at.dataframe[0].value) == 2
    at.multiselect(key="runs_stage").unselect("benchmark").run()
    assert len(at.dataframe[0].value) == 1
    at.multiselect(key="runs_exp").select("(workspace)").run()
    at.multiselect(key="runs_pick").set_value(at.multiselect(key="runs_pick").options).run()
    diff = at.dataframe[1].value
    assert list(diff.index) == ["pretrain.lr"]  # block_size is equal: hidden
    assert len(at.get("vega_lite_chart")) == 1  # the metric curve


def test_empty_root_messages(tmp_path):
    at = app(tmp_path)
    for page in L_PAGES:
        at.sidebar.radio(key="page").set_value(page).run()
        assert not at.exception, page
        text = " ".join(i.value for i in at.info) + " ".join(c.value for c in at.caption)
        if page in ("Acceptance", "Speed"):
            assert "dvc repro benchmark" in text, (page, text)
        elif page == "Candidate grid":  # the commands that write the rounds
            assert "dvc repro -s benchmark" in text and "make smoke" in text and "ROOT=.smoke" in text, text
        elif page == "Runs":
            assert "No MLflow store" in text and "dvc repro" in text
    assert not (tmp_path / "mlruns.db").exists()  # nothing written


def test_partial_outputs(tmp_path):
    root = write_fixture(tmp_path, mlflow_runs=False)
    (root / L.ROUNDS).unlink()
    (root / L.PLOTS["coverage"]).unlink()
    at = app(root, "Candidate grid")  # the figures are there, the rounds not (a fresh clone): why, and what fills it
    assert any("benchmark_rounds.parquet" in i.value and "git does not keep" in i.value and "dvc repro -s benchmark"
               in i.value and "make explore ROOT=.smoke" in i.value for i in at.info)
    at.sidebar.radio(key="page").set_value("Acceptance").run()
    assert not at.exception
    assert any("benchmark_coverage.csv" in i.value for i in at.info)
    assert len(at.get("vega_lite_chart")) >= 1  # the acceptance curves still render


def test_tokenizer_visible_text(fixture_root, tmp_path):
    tok = T.load_tokenizer(fixture_root)
    assert tok(3) == "␣the" and tok(8) == "↵" and tok(2) == "⟨<|im_end|>⟩" and tok(-1) == "∅"
    none = T.load_tokenizer(tmp_path)
    assert not none.available and none(5) == "#5" and "prepare_target" in none.source


def test_plots_from_dvc_json_and_csv(fixture_root, tmp_path):
    spec = {"$schema": "https://vega.github.io/schema/vega-lite/v5.json", "data": {"values": [{"x": "1", "y": "2"}]},
            "mark": "line", "encoding": {"x": {"field": "x", "type": "quantitative"},
                                         "y": {"field": "y", "type": "quantitative"}}}
    js = {"data": {"plots/a.csv": [{"type": "vega", "revisions": ["workspace"], "content": spec}]}}
    specs = DP.specs_from_dvc_json(json.dumps(js))
    assert list(specs) == ["plots/a.csv"] and "$schema" not in specs["plots/a.csv"][0]
    (tmp_path / "show.json").write_text(json.dumps(js))
    out = DP.write_specs(tmp_path / "show.json", tmp_path / "vl")
    assert out and json.loads(out[0].read_text())["mark"] == "line"
    assert DP.altair_from_spec(specs["plots/a.csv"][0]) is not None
    defs = DP.dvc_plot_defs(fixture_root / "dvc.yaml")
    assert {d["path"] for d in defs} >= {"plots/pretrain_budget.csv", "plots/benchmark_tau_per_slot.csv"}
    claim = next(d for d in defs if d["stage"] == "concurrency_claim")  # a top-level plot: one file, two columns
    assert claim["path"] == "plots/benchmark_concurrency.csv" and claim["y"] == ["tau_ratio", "tokens_per_s_ratio"]
    assert "strokeDash" in json.dumps(DP.chart_for_def(fixture_root, claim).to_dict())  # the Fig. 3 chart
    for d in defs:
        assert DP.chart_for_def(fixture_root, d).to_dict()
    at = app(fixture_root, "Pipeline plots")
    n = len(at.get("vega_lite_chart"))
    assert n == len(defs)
    at.text_input(key="plots_json").input(str(tmp_path / "show.json")).run()
    assert len(at.get("vega_lite_chart")) == n + 1


# ---------------------------------------------------------------- freshness: stamp-keyed caches, reload, corrupt files
def _best(at: AppTest) -> str:
    return next(m.value for m in at.markdown if m.value.startswith("Highest mean τ"))


def _set_tau(f: Path, arm: str, value: float, keep_stamp: bool = False) -> None:
    st = f.stat()
    d = json.loads(f.read_text())
    d["summary"][arm]["tau_t0"] = value
    f.write_text(json.dumps(d))
    if keep_stamp:
        os.truncate(f, st.st_size) if f.stat().st_size > st.st_size else f.write_text(f.read_text().ljust(st.st_size))
        os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_cache_follows_the_file_and_corrupt_then_fixed(tmp_path):
    root = write_fixture(tmp_path, mlflow_runs=False)
    f = root / L.BENCH_JSON
    assert "dcoco** 2.200 (95% interval 2.100–2.300)" in _best(app(root, "Acceptance"))
    _set_tau(f, "dcoco", 2.5)  # a new run rewrote the file: a new session sees it (the stamp is in the cache key)
    assert "dcoco** 2.500" in _best(app(root, "Acceptance"))
    good = f.read_text()
    f.write_text(good[: len(good) // 2])  # corrupt: named as such, with the stage that rebuilds it
    at = app(root, "Acceptance")
    warn = " ".join(w.value for w in at.warning)
    assert "`results/benchmark.json` is corrupt or unreadable" in warn and "`dvc repro benchmark`" in warn
    assert "not written yet" not in warn and not at.exception
    f.write_text(good)  # fixed: the error is gone in the next session
    at = app(root, "Acceptance")
    assert not at.warning and "dcoco** 2.500" in _best(at)


def test_reload_button_rereads_unchanged_stamps(tmp_path):
    root = write_fixture(tmp_path, mlflow_runs=False)
    f = root / L.BENCH_JSON
    at = app(root, "Acceptance")
    assert "dcoco** 2.200" in _best(at)
    _set_tau(f, "dcoco", 2.9, keep_stamp=True)  # same mtime and size: the cache cannot tell
    at = app(root, "Acceptance")
    assert "dcoco** 2.200" in _best(at)
    at.sidebar.button(key="reload").click().run()
    assert "dcoco** 2.900" in _best(at) and any("reloaded" in c.value for c in at.sidebar.caption)


def test_pages_say_data_age_and_revision(tmp_path):
    root = write_fixture(tmp_path, mlflow_runs=False)
    at = app(root, "Speed")
    line = next(c.value for c in at.caption if c.value.startswith("data written"))
    assert "results/benchmark.json" in line or "plots/" in line
    assert "not a git repository" in line
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    _git_commit(root, "outputs")
    p = V.provenance(root, (L.BENCH_JSON,))
    assert p["git"]["head"] and p["git"]["last_commit"] and not p["git"]["modified"]
    _set_tau(root / L.BENCH_JSON, "dcoco", 2.4)
    assert V.provenance(root, (L.BENCH_JSON,))["git"]["modified"]
    assert "differ from that commit" in V.provenance_text(V.provenance(root, (L.BENCH_JSON,)))


def _git_commit(root: Path, msg: str) -> None:
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", msg], cwd=root, check=True)


# ---------------------------------------------------------------- the K×K transition-score heatmap
def test_heatmap_frame_and_page(fixture_root):
    row = _rounds().query("arm == 'dcoco' and temperature == 0 and round == 0").iloc[0]
    g = G.build(row)
    frame = G.heatmap_frame(g, T.load_tokenizer(fixture_root))
    cells, marks = frame[frame.rule == ""], frame[frame.rule != ""]
    assert len(cells) == (N - 1) * K * K and set(marks["rule"]) == {"greedy", "globalsum", "geometric"}
    greedy = marks[marks.rule == "greedy"].sort_values("p")
    assert list(zip(greedy.a, greedy.b)) == [(0, 1), (1, 1), (1, 0)]  # These → keys → are → missing
    top = cells.loc[cells["dtheta"].idxmax()]
    assert top["dtheta"] == pytest.approx(1.0) and (top.a_label, top.b_label) in {("1·These", "2·␣keys"),
                                                                                 ("2·␣keys", "2·␣are")}
    assert cells[(cells.p == 1) & (cells.a == 0) & (cells.b == 1)]["on_paths"].iloc[0].startswith("greedy")
    at = app(fixture_root, "Candidate grid")
    at.selectbox(key="grid_arm").select("dcoco").run()
    assert not at.exception
    assert any("every slot pair" in s.value for s in at.subheader)
    assert any("Δθ" in m.value and "zero" in m.value for m in at.markdown)  # Δθ explained
    spec = json.loads(at.get("vega_lite_chart")[-1].proto.spec)
    text = json.dumps(spec)
    assert spec["facet"]["field"] == "pair" and '"rect"' in text and "viridis" in text  # one panel per slot pair
    at.radio(key="grid_heat_value").set_value("dtheta").run()
    assert "redblue" in at.get("vega_lite_chart")[-1].proto.spec
    at.selectbox(key="grid_arm").select("dflash").run()  # no scores recorded: no heatmap
    assert not any("every slot pair" in s.value for s in at.subheader)


def test_accepted_length_visible_when_every_round_rejects(tmp_path):
    root = write_fixture(tmp_path, mlflow_runs=False)
    df = _rounds()
    df["accepted"] = 0
    df.to_parquet(root / L.ROUNDS)
    at = app(root, "Candidate grid")
    spec = json.loads(at.get("vega_lite_chart")[0].proto.spec)
    assert [layer["mark"]["type"] for layer in spec["layer"]] == ["bar", "point"]  # dots mark the zeros
    assert spec["layer"][0]["encoding"]["y"]["scale"]["domain"] == [0, N]
    assert any("accepted 0 proposals" in c.value for c in at.caption)



def _seeded_rounds() -> pd.DataFrame:
    """Rounds of a seeded drafter (issue 20 item 6): slot 1's seed 'These' is kept (the drafter's top-1), slot 2's
    seed ' keys' changed (its top-1 is ' key'), slots 3-4 MASK; and of its cut arm, whose verify-width rule
    proposed 1 of the 4 slots."""
    base = _rounds()
    base = base[(base["arm"] == "dflash") & (base["temperature"] == 0.0)].copy()
    rows = []
    for arm, props in (("dflash-seeded", None), ("dflash-seeded-cut", [26])):
        for _, r in base.iterrows():
            row = r.to_dict()
            row["arm"] = arm
            row["seed_ids"], row["seed_kept"] = [26, 21, -1, -1], [1, 0, -1, -1]
            if props is not None:
                row["proposals"], row["accepted"] = props, 1
                row["target_tokens"] = row["target_tokens"][:2]  # the verifier judged slot 0 and 1 proposal
            rows.append(row)
    return pd.concat([_rounds(), pd.DataFrame(rows)], ignore_index=True)


def test_grid_marks_seeded_slots_and_cut_blocks(tmp_path):
    root = write_fixture(tmp_path, mlflow_runs=False)
    _seeded_rounds().to_parquet(root / L.ROUNDS)
    at = app(root, "Candidate grid")
    at.selectbox(key="grid_arm").select("dflash-seeded").run()
    assert not at.exception, [e.value for e in at.exception]
    html = grid_html(at)
    assert "seed (block input)" in html and html.count("dl-seed seed-kept") == 1 and html.count("seed-changed") == 1
    assert html.count("dl-seed seed-none") == 2 and "MASK" in html and "changed by the drafter" in html
    cap = [c.value for c in at.caption if c.value.startswith("Seeds:")]
    assert cap and "2 of this round's 4 slots" in cap[0] and "kept 1 and changed 1" in cap[0]
    assert "kept 3 of 6 seeds" in cap[0]  # three rounds of this prompt, each with one kept and one changed seed
    at.selectbox(key="grid_arm").select("dflash-seeded-cut").run()
    assert not at.exception, [e.value for e in at.exception]
    html = grid_html(at)
    assert html.count("st-cut") == 3 and "seed (block input)" in html  # slots 2-4 of the proposal were not proposed
    assert any("not proposed" in c.value for c in at.caption)
    at.selectbox(key="grid_arm").select("dflash").run()  # a plain drafter's grid has no seed row
    assert "seed (block input)" not in grid_html(at)


def test_grid_of_a_seeds_only_round():
    """A round without a draft pass (seeded.verify.full_span=seeds) records its seeds as the only candidates (ranks
    2..K = -1, logits -inf): the grid shows a dash there, with no logit, and the seeds as rank 1."""
    row = {"arm": "dflash-seeded-cut", "temperature": 0.0, "accepted": 1, "proposals": [5, 6, 7],
           "topk_ids": [[5, -1], [6, -1], [7, -1]], "topk_logits": [[0.0, float("-inf")]] * 3,
           "target_tokens": [5, 9, 3, 3], "committed": [5, 9, 3], "seed_ids": [5, 6, 7], "seed_kept": [1, 1, 1]}
    g = G.build(pd.Series(row))
    html = G.grid_html(g, lambda i: f"<t{i}>")
    assert g.K == 2 and g.argmax == [5, 6, 7] and "&lt;t-1&gt;" not in html and "inf" not in html
    assert html.count("–") >= 3 and html.count("&lt;t5&gt;") >= 1


# ---------------------------------------------------------------- comparison of two results
def _variant(root: Path, delta: float) -> None:
    f = root / L.BENCH_JSON
    d = json.loads(f.read_text())
    for k in ("tau_t0", "tau_t1"):
        d["summary"]["dcoco"][k] += delta
        d["summary"]["dcoco"][k + "_ci"] = [v + delta for v in d["summary"]["dcoco"][k + "_ci"]]
    d["config"]["max_new_tokens"] = 99
    f.write_text(json.dumps(d))


def test_compare_two_folders(tmp_path):
    a = write_fixture(tmp_path / "a", mlflow_runs=False)
    b = write_fixture(tmp_path / "b", mlflow_runs=False)
    _variant(b, 0.5)
    at = AppTest.from_file(str(APP / "explorer.py"), default_timeout=60)
    at.session_state["root"] = str(a)
    at.session_state["page"] = "Compare"
    at.session_state["cmp_B_folder"] = str(b)
    at.run()
    assert not at.exception
    t = at.dataframe[0].value
    assert list(t.columns[:3]) == ["A: a", "A: a CI low", "A: a CI high"] and "B: b − A: a" in t.columns
    assert t.loc["dcoco", "B: b − A: a"] == "0.500" and t.loc["dcoco", "intervals disjoint"] == "yes"  # τ: 3 decimals
    assert t.loc["dflash", "B: b − A: a"] == "0.000" and t.loc["dflash", "intervals disjoint"] == "no"
    assert t.loc["pld", "intervals disjoint"] == "n/a"  # a summary-only arm: no interval to compare
    spec = at.get("vega_lite_chart")[0].proto.spec
    assert json.loads(spec)["facet"]["column"]["field"] == "source"  # the same chart for both, side by side
    diff = at.dataframe[-1].value
    assert list(diff["setting"]) == ["config.max_new_tokens"]
    at.selectbox(key="cmp_metric").select("speedup").run()
    assert at.dataframe[0].value.loc["dcoco", "B: b − A: a"] == "0.00"  # a ratio: 2 decimals


def test_compare_git_revisions_and_experiments(tmp_path):
    root = write_fixture(tmp_path, mlflow_runs=False)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    _git_commit(root, "base run")
    _variant(root, -0.25)
    _git_commit(root, "second run")
    at = AppTest.from_file(str(APP / "explorer.py"), default_timeout=60)
    for k, v in dict(root=str(root), page="Compare", cmp_A_kind=KIND_REV, cmp_A_rev="HEAD~1", cmp_B_kind=KIND_REV,
                     cmp_B_rev="HEAD").items():
        at.session_state[k] = v
    at.run()
    assert not at.exception
    t = at.dataframe[0].value
    assert t.loc["dcoco", "B: HEAD − A: HEAD~1"] == "-0.250"
    # the experiment list: `dvc exp show --json` rows (this layout is DVC 3's), else git's refs/exps
    sha = V.git(root, "rev-parse", "HEAD").strip()
    shown = [{"rev": "workspace", "name": None, "experiments": None},
             {"rev": sha, "name": "main", "experiments": [{"name": "exp-lr", "revs": [{"rev": "f" * 40, "name": "exp-lr"}]}]}]

    class Ran:
        returncode, stdout = 0, json.dumps(shown).encode()

    rows = V.experiments(root, run=lambda *a, **k: Ran())
    assert [(r["name"], r["kind"]) for r in rows] == [("main", "commit"), ("exp-lr", "experiment")]
    subprocess.run(["git", "update-ref", f"refs/exps/{sha[:2]}/{sha[2:]}/exp-b", sha], cwd=root, check=True)

    def no_dvc(*a, **k):
        raise OSError("no dvc")

    rows = V.experiments(root, run=no_dvc)
    assert rows == [{"name": "exp-b", "rev": sha, "baseline": sha, "kind": "experiment"}]
    assert isinstance(V.load_benchmark_at(root, "exp-nope"), L.Missing)
    assert V.load_benchmark_at(root, sha)["summary"]["dcoco"]["tau_t0"] == pytest.approx(1.95)


KIND_REV = "git revision / DVC experiment"


# ---------------------------------------------------------------- chart correctness
def _data(spec: dict) -> list[dict]:
    return [row for rows in (spec.get("datasets") or {}).values() for row in rows]


def test_pipeline_plots_filter_never_sum(fixture_root):
    defs = {d["path"]: d for d in DP.dvc_plot_defs(fixture_root / "dvc.yaml")}
    sp = DP.chart_for_def(fixture_root, defs["plots/benchmark_speedup.csv"], "t1").to_dict()
    rows = _data(sp)
    assert {r["temperature"] for r in rows} == {"t1"} and len(rows) == 2 * 3  # one bar per suite and arm
    assert {(r["arm"], r["speedup"]) for r in rows if r["suite"] == "mt-bench"} == {("ar", 1.0), ("dflash", 1.2),
                                                                                    ("dcoco", 1.35)}
    curve = DP.chart_for_def(fixture_root, defs["plots/benchmark_tau_per_slot.csv"], "t0", ["mt-bench"]).to_dict()
    assert {(r["temperature"], r["suite"]) for r in _data(curve)} == {("t0", "mt-bench")}  # one line per arm
    both = DP.chart_for_def(fixture_root, defs["plots/benchmark_tau_per_slot.csv"], "t0").to_dict()
    assert both["facet"]["field"] == "suite" and both["columns"] == 2  # wrapped small multiples
    claim = DP.chart_for_def(fixture_root, next(d for d in defs.values() if d["stage"] == "concurrency_claim"), "t1")
    rows = _data(claim.to_dict())
    assert {r["streams"] for r in rows if "streams" in r} == {1, 2, 4}
    assert {r["temperature"] for r in rows if "temperature" in r} == {"T=1"}  # read as the user reads it
    assert "(T=1)" in json.dumps(claim.to_dict()["title"])


def test_corrupt_plot_csv_is_named_with_its_stage(tmp_path):
    root = write_fixture(tmp_path, mlflow_runs=False)
    (root / L.PLOTS["speedup"]).write_bytes(b"\x00\x01\x02 garbage without columns")
    (root / L.PLOTS["tau_per_slot"]).unlink()
    at = app(root, "Pipeline plots")
    assert not at.exception
    warn = " ".join(w.value for w in at.warning)
    assert "`plots/benchmark_speedup.csv` is corrupt or unreadable" in warn and "dvc repro benchmark" in warn
    caps = " ".join(c.value for c in at.caption)
    assert "plots/benchmark_tau_per_slot.csv" in caps and "No `plots/benchmark_tau_per_slot.csv`" in caps
    assert "not written yet" not in warn
    bad = L.read_csv(root, L.PLOTS["speedup"], "benchmark")
    assert bad.kind == "corrupt"


def test_one_colour_per_arm_everywhere(fixture_root):
    from colours import ARM_COLOURS, arm_colour

    seen: dict[str, set] = {}
    for page in ("Acceptance", "Speed", "Pipeline plots", "Compare"):
        at = app(fixture_root, page)
        for ch in at.get("vega_lite_chart"):
            for scale in _colour_scales(json.loads(ch.proto.spec)):
                for arm, colour in zip(scale["domain"], scale["range"]):
                    seen.setdefault(arm, set()).add(colour)
    assert set(seen) >= {"ar", "dflash", "dcoco"}
    assert all(len(c) == 1 for c in seen.values()), seen  # the same colour in every chart
    assert {a: c.pop() for a, c in seen.items()} == {a: ARM_COLOURS[a] for a in seen}
    assert len(set(ARM_COLOURS.values())) == len(ARM_COLOURS)  # distinct (more arms than a 10-colour palette)
    new = arm_colour("brand-new-arm")
    assert new == arm_colour("brand-new-arm") and new not in ARM_COLOURS.values() and new.startswith("#")
    # an arm on the seeded drafter: a shade of its plain twin's colour, distinct from every other, next to it in order
    from colours import arm_order

    seeded = [f"{a}-seeded" for a in ARM_COLOURS if a not in ("ar", "hf-generate", "pld", "dflash-pld", "dflash-ref")]
    shades = [arm_colour(a) for a in seeded]
    assert len(set(shades) | set(ARM_COLOURS.values())) == len(shades) + len(ARM_COLOURS)
    assert arm_order(["pld", "dcoco-seeded", "ar", "dflash-seeded", "dcoco", "dflash"]) == [
        "ar", "dflash", "dflash-seeded", "pld", "dcoco", "dcoco-seeded"]


def _colour_scales(spec):
    if isinstance(spec, dict):
        enc = spec.get("encoding", {})
        c = enc.get("color") if isinstance(enc, dict) else None
        if isinstance(c, dict) and c.get("field") == "arm" and isinstance(c.get("scale"), dict):
            yield c["scale"]
        for v in spec.values():
            yield from _colour_scales(v)
    elif isinstance(spec, list):
        for v in spec:
            yield from _colour_scales(v)


def test_axes_line_styles_and_na(fixture_root):
    conc = pd.read_csv(fixture_root / L.PLOTS["concurrency"])
    spec = P.concurrency_ratio_chart(conc[conc.temperature == "t0"]).to_dict()
    text = json.dumps(spec)
    assert '"format": "d"' in text and '"values": [1, 2, 4]' in text  # whole numbers of streams only
    assert "solid: \\u03c4, dashed: tokens/s" in text and '"title": "line style"' in text  # styles explained
    cov = P.coverage_chart(pd.read_csv(fixture_root / L.PLOTS["coverage"]).query("temperature == 't0'"), [1, 2])
    assert '"title": "slot (line style)"' in json.dumps(cov.to_dict())
    at = app(fixture_root, "Speed")
    table = next(d.value for d in at.dataframe if "round_overhead_ms" in d.value.columns)
    by = table.set_index("arm")["round_overhead_ms"]
    assert (by.loc["ar"] == "n/a").all() and (by.loc["dcoco"] == "0.5").all()  # AR's −5 from an older file: n/a
    assert any("difference of two measured round times" in c.value and "Negative" in c.value for c in at.caption)


def test_deep_link_opens_a_page_with_widgets(fixture_root):
    at = AppTest.from_file(str(APP / "explorer.py"), default_timeout=60)
    at.session_state["root"] = str(fixture_root)
    at.query_params.update(page="Candidate grid", grid_arm="dcoco", grid_temp="1")
    at.run()
    assert not at.exception
    assert at.header[0].value == "Candidate grid" and at.selectbox(key="grid_arm").value == "dcoco"
    assert at.selectbox(key="grid_temp").value == 1.0


def test_headroom_lists_every_oracle(tmp_path):
    root = write_fixture(tmp_path, mlflow_runs=False)
    f = root / L.BENCH_JSON
    d = json.loads(f.read_text())
    for temps in d["suites"].values():
        for by in temps.values():
            for arm in ("dflash", "dcoco"):
                by[arm]["oracle_tau_other"] = by[arm]["oracle_tau"] - 0.3  # an oracle the explorer has no label for
            by["dflash"]["per_prompt"]["oracle_tau_other"] = [2.2, 2.4]
    f.write_text(json.dumps(d))
    at = app(root, "Acceptance")
    hc = next(d.value for d in at.dataframe if any(str(c).startswith("headroom closed") for c in d.value.columns))
    assert {"headroom closed (drafter's top-K oracle τ)", "headroom closed (drafter's top-K reachable oracle τ)",
            "headroom closed (oracle_tau_other)"} <= set(hc.columns)
    assert hc.set_index("arm").loc["dcoco", "headroom closed (oracle_tau_other)"].tolist() == ["80.0%", "80.0%"]


def test_fmt_na_text():
    from cached import fmt_na

    df = pd.DataFrame({"arm": ["ar", "dcoco"], "ms": [None, 0.5], "x": [1.0, 2.0], "ok": [None, True],
                       "share": [0.25, float("nan")]})
    out = fmt_na(df, digits=2, percent=("share",))
    assert out["ms"].tolist() == ["n/a", "0.50"] and out["ok"].tolist() == ["n/a", "yes"]
    assert out["share"].tolist() == ["25.0%", "n/a"] and out["x"].dtype.kind == "f"  # no gap: stays a number


def test_positions_plot_and_ablation_marks(fixture_root):
    """Issue 23: the Speed page's per-position plot (τ / tokens/s / speedup by where a round starts) and the
    first-32 vs later table; the pairs tables carry the ablation flag and the verdicts without looping prompts;
    ablation arms are labelled in the position readings."""
    import positions as Q

    at = app(fixture_root, "Speed")
    assert not at.exception and any("By position" in s.value for s in at.subheader)
    spec = next(c.proto.spec for c in at.get("vega_lite_chart") if "answer position" in c.proto.spec)
    assert '"tau"' in spec
    at.selectbox(key="pos_metric").select("tokens_per_s").run()
    spec = next(c.proto.spec for c in at.get("vega_lite_chart") if "answer position" in c.proto.spec)
    assert "tokens_per_s" in spec and not at.exception
    seg = next(d.value for d in at.dataframe if "tau (first)" in d.value.columns)
    row = seg.set_index("arm").loc["dcoco"]
    assert float(row["tau (later)"]) > float(row["tau (first)"]) and row["loop_share"] == "50.0%"  # shares: %
    pairs = next(d.value for d in at.dataframe if "ratio without loops" in d.value.columns)
    assert "ablation" in pairs.columns and float(pairs["ratio without loops"].iloc[0]) == 1.05
    assert int(pairs["prompts"].iloc[0]) == 14  # the pair's own sample, over the suites
    at = app(fixture_root, "Acceptance")
    assert any("Δτ without loops" in d.value.columns for d in at.dataframe)
    df = pd.read_csv(fixture_root / L.PLOTS["positions"])
    df.loc[df["arm"] == "dcoco", "ablation"] = True
    g = Q.positions_rows(df, "t0", ["mt-bench", "humaneval"])
    assert set(g["label"]) == {"ar", "dflash", "dcoco (ablation)"}
    pooled = g[(g["arm"] == "dflash") & (g["start"] == 0)].iloc[0]  # two suites pooled: tokens / rounds
    assert pooled["rounds"] == 20 and pooled["tau"] == pytest.approx(pooled["tokens"] / 20)
    # speed pooled in total time: Σ tokens / Σ seconds (each bin's tokens / its tokens/s), over AR's in the same bin
    rows = df[(df["temperature"] == "t0") & df["suite"].isin(["mt-bench", "humaneval"]) & (df["start"] == 0)]
    tps = lambda arm: (lambda r: r["tokens"].sum() / (r["tokens"] / r["tokens_per_s"]).sum())(rows[rows["arm"] == arm])  # noqa: E731
    assert pooled["tokens_per_s"] == pytest.approx(tps("dflash"))
    assert pooled["speedup"] == pytest.approx(tps("dflash") / tps("ar"))


# ---------------------------------------------------------------- oracles, headroom, rows without acceptance
def _committed_like(root: Path) -> Path:
    """The fixture with the committed run's mt-bench T=0 rows (tests/bench/test_oracles.py) in every suite: seeded arms
    beside dflash-seeded, dflash-pld beyond its drafter's oracle, hf-generate-pld without rounds."""
    from test_oracles import MT_BENCH_T0

    f = root / L.BENCH_JSON
    d = json.loads(f.read_text())
    for temps in d["suites"].values():
        temps["t0"].update(json.loads(json.dumps(MT_BENCH_T0)))
        temps["t0"].pop("dcoco")
    d["summary"]["hf-generate-pld"] = {"tau_t0": 1.0, "tokens_per_s_t0": 17.3, "speedup_t0": 1.18,
                                       "tokens_equal_ar_t0": True, "tau_t0_ci": [1.0, 1.0]}
    d["config"]["topk"] = 8
    f.write_text(json.dumps(d))
    return root


def test_acceptance_headroom_against_own_base_oracle_bounds_and_no_acceptance(tmp_path):
    root = _committed_like(write_fixture(tmp_path, mlflow_runs=False))
    at = app(root, "Acceptance")
    assert not at.exception, [e.value for e in at.exception]
    tau = at.dataframe[0].value
    assert (tau.loc["hf-generate-pld"] == "not reported").all() and tau.loc["dflash-seeded", "mt-bench"] == "3.583"
    assert any("hf-generate-pld" in c.value and "no acceptance figure" in c.value for c in at.caption)
    top = "drafter's top-8 oracle τ"
    orc = next(d.value for d in at.dataframe if top in d.value.columns and "note" in d.value.columns).set_index("arm")
    pld = orc.loc["dflash-pld"].iloc[0]
    assert pld[top] == "—" and "prompt lookup" in pld["note"] and "1.499" in pld["note"]  # never a ceiling below τ
    assert orc.loc["dflash-seeded", top].iloc[0] == "3.715"  # shown to 3 decimals
    assert any("top-8 candidates" in m.value for m in at.markdown)  # the oracle says what it is
    hc = next(d.value for d in at.dataframe if f"headroom closed ({top})" in d.value.columns).set_index("arm")
    col = f"headroom closed ({top})"
    assert set(hc.loc[["dcoco-seeded", "dflash-seeded-cut"], "base"]) == {"dflash-seeded"}
    assert hc.loc["dcoco-seeded", col].iloc[0] == "-55.8%" and hc.loc["dflash-seeded-cut", col].iloc[0] == "-7.4%"
    assert hc.loc["dflash-pld", col].iloc[0].startswith("n/a: lookup") and "lookup" in hc.loc["dflash-pld", "why n/a"].iloc[0]
    assert not {"dflash", "dflash-seeded", "hf-generate-pld", "pld", "ar"} & set(hc.index)
    assert any("dflash-seeded" in c.value and "own uncorrected drafter" in c.value for c in at.caption)
    sf = L.summary_frame(json.loads((root / L.BENCH_JSON).read_text()))  # the means over suites, Compare's too
    assert set(sf.loc[sf["arm"] == "hf-generate-pld", "metric"]) == {"speedup", "tokens_per_s"}  # τ: no figure
    at = app(root, "Speed")
    assert not at.exception
    peers = next(d.value for d in at.dataframe if "greedy tokens = AR" in d.value.columns).set_index("arm")
    assert peers.loc["hf-generate-pld", "tau"] == "not reported" and peers.loc["ar", "tau"] == "1.000"
    table = next(d.value for d in at.dataframe if "break_even_tau" in d.value.columns)
    assert set(table.loc[table["arm"] == "hf-generate-pld", "tau"]) == {"not reported"}


def test_concurrency_ratio_shades_only_speculative_arms(fixture_root):
    """AR runs no speculative round: its two lines stay, but the band between them (a large grey polygon) is gone;
    one panel per arm, so the arms' bands do not pile into one block."""
    conc = pd.read_csv(fixture_root / L.PLOTS["concurrency"])
    spec = P.concurrency_ratio_chart(conc[conc.temperature == "t0"]).to_dict()
    assert spec["facet"]["field"] == "arm" and spec["columns"] == 2  # ar and dcoco (dflash is the base)
    layers = spec["spec"]["layer"]
    area = next(layer for layer in layers if (layer.get("mark") or {}).get("type") == "area")
    lines = next(layer for layer in layers if (layer.get("mark") or {}).get("type") == "line")
    rows = spec["datasets"][spec["data"]["name"]]
    assert {r["arm"] for r in rows} == {"ar", "dcoco"}
    assert {r["arm"] for r in rows if r["speculative"]} == {"dcoco"}
    assert {"filter": "datum.speculative"} in area["transform"]  # ar's band dropped
    assert area["encoding"]["color"]["scale"] == lines["encoding"]["color"]["scale"]  # one colour per arm
    assert lines["encoding"]["strokeDash"]["legend"]["symbolFillColor"] == "transparent"
    assert "one panel per arm" in json.dumps(spec["title"])


def test_faceted_bars_fit_the_page():
    """13 arms × 4 suites: panels of 390 px wrap two to a row (three were cut at 1,500 px)."""
    arms = ["ar", "hf-generate", "dflash", "dflash-seeded", "dflash2-seeded", "dflash-specopd-seeded", "dflash-pld",
            "pld", "dcoco-seeded", "dspark-seeded", "domino-seeded", "dflash-seeded-cut", "hf-generate-pld"]
    df = pd.DataFrame([{"suite": s, "temperature": "t0", "arm": a, "speedup": 1.0}
                       for s in ("humaneval", "math500", "mt-bench", "sharegpt-chat") for a in arms])
    spec = P.bar_chart(df, "speedup", "x").to_dict()
    w = spec["spec"]["width"]
    assert spec["columns"] * (w + P.PANEL_PAD) <= P.PAGE_W and spec["columns"] == 2
    few = P.bar_chart(df[df["arm"].isin(arms[:3])], "speedup", "x").to_dict()
    assert few["columns"] == 3  # small panels keep three to a row
    split = P.round_split_chart(df.assign(phase="verify", ms=1.0, share=1.0)).to_dict()
    assert split["columns"] * (split["spec"]["width"] + P.PANEL_PAD) <= P.PAGE_W


# ---------------------------------------------------------------- what a user reads (frames; the browser test reads
# the same on the drawn page)
def test_one_format_per_kind_of_figure():
    from draftlab.explore import formats as F

    assert [F.kind(c) for c in ("tau", "Δτ lo", "break_even_tau", "oracle_tau", "tokens_per_s", "tokens_per_s (first)",
                                "tokens_per_s_ratio", "speedup CI low", "ratio to AR", "tau_ratio", "share",
                                "loop_share", "headroom closed (x)", "round_overhead_ms", "rounds", "sequences")] == [
        "tau", "tau", "tau", "tau", "tokens_per_s", "tokens_per_s", "ratio", "ratio", "ratio", "ratio", "share", "share",
        "share", "ms", "count", "count"]
    t = F.table(pd.DataFrame({"tau": [1, 3.5212], "tokens_per_s": [17.8065, None], "speedup": [1.0, 1.234],
                              "share": [0.5771, 0.0], "ok": [True, None], "rounds": [442, 3]}))
    assert t.to_dict("list") == {"tau": ["1.000", "3.521"], "tokens_per_s": ["17.8", "n/a"], "speedup": ["1.00", "1.23"],
                                 "share": ["57.7%", "0.0%"], "ok": ["yes", "n/a"], "rounds": ["442", "3"]}
    assert [F.temp_label(t) for t in ("t0", "t1", 0.0, "t0.7", "T=0")] == ["T=0", "T=1", "T=0", "T=0.7", "T=0"]
    assert F.temp_suffix("engine_tau_t0") == "engine_tau (T=0)"


def test_tied_leaders_named_together():
    import bench_pages as B

    d = _detail()
    for arm in ("dflash-seeded", "dcoco-seeded"):  # equal to dcoco at 3 decimals (2.2 vs 2.2004)
        d["suites"]["mt-bench"]["t0"][arm] = d["suites"]["mt-bench"]["t0"]["dcoco"]
        d["summary"][arm] = {**d["summary"]["dcoco"], "tau_t0": 2.2004 if arm == "dcoco-seeded" else 2.2}
    d["summary"]["dflash"]["tau_t0_ci"] = [1.75, 2.25]  # dflash 1.8: its interval reaches 2.2, and 1.8 is not in dcoco's
    line = B.best_line(d, "t0")
    assert line.startswith("Highest mean τ over all suites at T=0: **dflash-seeded**, **dcoco** and **dcoco-seeded** "
                           "2.200 (3 arms tied"), line
    assert "Not distinguishable" not in line
    for arm in ("dflash-seeded", "dcoco", "dcoco-seeded"):  # wider intervals: dflash within the highest's, and back
        d["summary"][arm]["tau_t0_ci"] = [1.7, 2.3]
    assert "Not distinguishable from it (each mean inside the other's 95% interval): dflash 1.800" in B.best_line(d, "t0")


def test_headroom_table_no_share_of_noise():
    from draftlab.explore import oracle_view as OV

    rows = []
    for arm, tau, orc in (("dflash-seeded", 3.583, 3.610), ("dcoco-seeded", 3.509, 3.743), ("dflash", 1.2, 2.0),
                          ("dcoco", 1.6, 2.2), ("dflash-pld", 3.59, 1.5)):
        r = {"suite": "mt-bench", "temperature": "t0", "arm": arm, "tau": tau, "oracle_tau": orc}
        if arm == "dflash-seeded":  # Δ = 0.027 ± 0.027: under 2 standard errors
            r["per_prompt"] = {"tau": [3.5, 3.666], "oracle_tau": [3.5, 3.72]}
        if arm == "dflash":  # Δ = 0.8 ± 0.1
            r["per_prompt"] = {"tau": [1.1, 1.3], "oracle_tau": [1.8, 2.2]}
        if arm == "dflash-pld":
            r["sources"] = {"lookup": {"rounds": 1}}
        rows.append(r)
    hc = OV.headroom_frame(pd.DataFrame(rows), ["oracle_tau"], 8)
    t = OV.headroom_table(hc).set_index("arm")
    col, delta = "headroom closed (drafter's top-8 oracle τ)", "base headroom Δ ± SE (drafter's top-8 oracle τ − τ)"
    assert list(t.columns[:5]) == ["suite", "base", "Δτ over base", col, delta]  # the share beside its figures
    assert t.loc["dcoco-seeded", col] == "n/a: headroom below noise" and "%" not in "".join(t.loc["dcoco-seeded"])
    assert t.loc["dcoco-seeded", "Δτ over base"] == "-0.074" and t.loc["dcoco-seeded", delta] == "0.027 ± 0.027"
    assert t.loc["dcoco", col] == "50.0%" and t.loc["dcoco", delta] == "0.800 ± 0.100"
    assert t.loc["dflash-pld", col].startswith("n/a: lookup") and "lookup" in t.loc["dflash-pld", "why n/a"]
    assert not [v for v in t.to_numpy().ravel() if v == "n/a"]  # every n/a says why


def test_pld_no_match_and_overhead_note():
    import bench_pages as B
    import peers as R

    d = _detail()
    d["summary"]["pld"]["sources_t0"]["drafter"] = {"rounds": 4, "share": 0.4, "accepted_per_round": 0.0,
                                                    "accepted_tokens": 0}
    src = R.sources_frame(d, "t0")
    assert set(zip(src["arm"], src["source"])) == {("pld", "lookup"), ("pld", "no match"), ("dflash-pld", "lookup"),
                                                   ("dflash-pld", "drafter")}
    assert "difference of two measured round times" in B.OVERHEAD_NOTE and "Negative" in B.OVERHEAD_NOTE


def test_single_value_axes_get_two_ticks_and_charts_keep_titles(fixture_root):
    import pages
    import positions as Q

    g = Q.positions_rows(pd.read_csv(fixture_root / L.PLOTS["positions"]).query("start == 0"), "t0", ["mt-bench"])
    x = Q.positions_chart(g, "tau", "τ by where the round starts (T=0)").to_dict()["encoding"]["x"]
    assert x["scale"]["domain"] == [0, 32] and x["axis"]["values"] == [0, 32]  # one bin: its two edges
    h = pd.DataFrame({"run_id": ["a"], "label": ["run a"], "step": [0], "value": [2.5]})
    spec = pages.curve_chart(h, "eval/loss").to_dict()
    assert spec["encoding"]["x"]["scale"]["domain"] == [0, 1] and spec["encoding"]["y"]["scale"]["domain"] == [2.0, 3.0]
    assert spec["autosize"] == {"type": "fit-x", "contains": "padding"}  # its own height, not squeezed into it
    slot = pd.read_csv(fixture_root / L.PLOTS["tau_per_slot"]).query("temperature == 't0'")
    for ch in (P.accept_curve_chart(slot), P.coverage_chart(pd.read_csv(fixture_root / L.PLOTS["coverage"]))):
        spec = ch.to_dict()
        assert "facet" in spec and spec["title"] and "title" not in spec["spec"]  # on the faceted chart


def test_when_the_results_were_made(tmp_path):
    root = write_fixture(tmp_path / "r", mlflow_runs=False)
    p = V.provenance(root, (L.BENCH_JSON,))
    assert p["made"]["file_time"] and "file modification time" in V.provenance_text(p)  # not a git repository
    f = root / L.BENCH_JSON
    d = json.loads(f.read_text())
    d["setup"]["created"] = "2026-12-01T10:00:00+00:00"
    f.write_text(json.dumps(d))
    from datetime import datetime, timezone

    noon = datetime(2026, 12, 1, 12, tzinfo=timezone.utc).timestamp()
    p = V.provenance(root, (L.BENCH_JSON,), now=noon)
    assert p["made"]["age_s"] == pytest.approx(7200) and "results made 2.0 h ago" in V.provenance_text(p)
    assert "`setup.created` recorded in `results/benchmark.json`" in V.provenance_text(p)
    d["setup"].pop("created")
    f.write_text(json.dumps(d))
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    _git_commit(root, "the run")
    text = V.provenance_text(V.provenance(root, (L.BENCH_JSON,)))
    assert text.startswith("results committed") and "when this checkout was written" in text
