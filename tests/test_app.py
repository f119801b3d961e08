"""The Streamlit explorer (app/) on a small fixture of stage outputs written here into tmp dirs:
every page renders, widgets change what is shown, empty roots give messages naming the stage to run."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "app"
sys.path.insert(0, str(APP))

from streamlit.testing.v1 import AppTest  # noqa: E402

import grid as G  # noqa: E402
import loaders as L  # noqa: E402
import plots as P  # noqa: E402

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
            suites[s][tk] = by
    gain = {"ar": 1.0, "dflash": 1.2, "dcoco": 1.3}
    conc = {tk: {a: {str(c): {"tokens_per_s": 10.0 * c ** 0.5 * g, "decode_tokens_per_s": 11.0 * c,
                              "tokens_per_s_stream": 10.0, "tau": 1.0 if a == "ar" else 1.8 * g / 1.2,
                              "tau_ratio": g / 1.2, "tokens_per_s_ratio": g / 1.2 - 0.02 * c,
                              "round_total_ms": 50.0 + c, "propose_ms": 0.5, "round_overhead_ms": 0.5}
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
    return {"suites": suites, "concurrency": conc, "summary": summary, "setup": {"target": "tiny"},
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
    df = pd.DataFrame(rows)
    return df


def write_fixture(root: Path, mlflow_runs: bool = True) -> Path:
    from draftlab.bench.report import plot_frames

    root.mkdir(parents=True, exist_ok=True)
    detail = _detail()
    (root / "metrics").mkdir(exist_ok=True)
    (root / "metrics/benchmark.json").write_text(json.dumps(detail))
    (root / "plots").mkdir(exist_ok=True)
    for name, df in plot_frames(detail).items():
        df.to_csv(root / L.PLOTS[name], index=False)
    pd.DataFrame({"step": [10, 20, 30], "train_minutes": [0.1, 0.2, 0.3], "heldout": [1.0, 1.2, 1.3],
                  "mt-bench": [1.0, 1.1, 1.25]}).to_csv(root / "plots/pretrain_budget.csv", index=False)
    (root / "data").mkdir(exist_ok=True)
    _rounds().to_parquet(root / L.ROUNDS)
    write_tokenizer(root / "models/target")
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


L_PAGES = ["Candidate grid", "Acceptance", "Speed", "Runs", "Pipeline plots"]


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
    assert set(hc["arm"]) == {"dcoco"}  # one headroom-closed column per oracle
    assert {"headroom closed (top-K oracle)", "headroom closed (reachable oracle)"} <= set(hc.columns)
    assert hc["headroom closed (reachable oracle)"].iloc[0] == pytest.approx((2.2 - 1.8) / (2.1 - 1.8))
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
    assert row["kind"].startswith("reference row") and abs(row["ratio to AR"] - 0.95) < 1e-9
    assert bool(row["greedy tokens = AR"])
    at.selectbox(key="speed_temp").select("t1").run()
    peers = next(d.value for d in at.dataframe if "greedy tokens = AR" in d.value.columns)
    assert "hf-generate" not in set(peers["arm"]) and "pld" in set(peers["arm"])
    empty = write_fixture(tmp_path / "nosrc", mlflow_runs=False)
    d = json.loads((empty / "metrics/benchmark.json").read_text())
    d["summary"] = {}
    (empty / "metrics/benchmark.json").write_text(json.dumps(d))
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
        if page in ("Candidate grid", "Acceptance", "Speed"):
            assert "dvc repro benchmark" in text, (page, text)
        elif page == "Runs":
            assert "No MLflow store" in text and "dvc repro" in text
    assert not (tmp_path / "mlruns.db").exists()  # nothing written


def test_partial_outputs(tmp_path):
    root = write_fixture(tmp_path, mlflow_runs=False)
    (root / L.ROUNDS).unlink()
    (root / L.PLOTS["coverage"]).unlink()
    at = app(root, "Candidate grid")
    assert any("benchmark_rounds.parquet" in i.value and "dvc repro benchmark" in i.value for i in at.info)
    at.sidebar.radio(key="page").set_value("Acceptance").run()
    assert not at.exception
    assert any("benchmark_coverage.csv" in i.value for i in at.info)
    assert len(at.get("vega_lite_chart")) >= 1  # the acceptance curves still render


def test_tokenizer_visible_text(fixture_root, tmp_path):
    tok = L.load_tokenizer(fixture_root)
    assert tok(3) == "␣the" and tok(8) == "↵" and tok(2) == "⟨<|im_end|>⟩" and tok(-1) == "∅"
    none = L.load_tokenizer(tmp_path)
    assert not none.available and none(5) == "#5" and "prepare_target" in none.source


def test_plots_from_dvc_json_and_csv(fixture_root, tmp_path):
    spec = {"$schema": "https://vega.github.io/schema/vega-lite/v5.json", "data": {"values": [{"x": "1", "y": "2"}]},
            "mark": "line", "encoding": {"x": {"field": "x", "type": "quantitative"},
                                         "y": {"field": "y", "type": "quantitative"}}}
    js = {"data": {"plots/a.csv": [{"type": "vega", "revisions": ["workspace"], "content": spec}]}}
    specs = P.specs_from_dvc_json(json.dumps(js))
    assert list(specs) == ["plots/a.csv"] and "$schema" not in specs["plots/a.csv"][0]
    (tmp_path / "show.json").write_text(json.dumps(js))
    out = P.write_specs(tmp_path / "show.json", tmp_path / "vl")
    assert out and json.loads(out[0].read_text())["mark"] == "line"
    assert P.altair_from_spec(specs["plots/a.csv"][0]) is not None
    defs = P.dvc_plot_defs(fixture_root / "dvc.yaml")
    assert {d["path"] for d in defs} >= {"plots/pretrain_budget.csv", "plots/benchmark_tau_per_slot.csv"}
    claim = next(d for d in defs if d["stage"] == "concurrency_claim")  # a top-level plot: one file, two columns
    assert claim["path"] == "plots/benchmark_concurrency.csv" and claim["y"] == ["tau_ratio", "tokens_per_s_ratio"]
    assert "strokeDash" in json.dumps(P.chart_for_def(fixture_root, claim).to_dict())  # the Fig. 3 chart
    for d in defs:
        assert P.chart_for_def(fixture_root, d).to_dict()
    at = app(fixture_root, "Pipeline plots")
    n = len(at.get("vega_lite_chart"))
    assert n == len(defs)
    at.text_input(key="plots_json").input(str(tmp_path / "show.json")).run()
    assert len(at.get("vega_lite_chart")) == n + 1
