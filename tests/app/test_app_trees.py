"""The explorer's tree view, LiLiCorr's pair rows in the candidate grid and the Trees / LiLiCorr verdict pages
(issue "A newcomer's third hour", item 2), with Streamlit's AppTest on test_app's fixture: what each view shows is
checked against what does not come from the view's own reading — the engine's tree and walk (tests/app/tree_fixture.py
grows and walks it with draftlab.decoding.tree), the pair rows as written, and the verdict tools' JSON files."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pandas as pd
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "app"))
sys.path.insert(0, str(HERE))

import tree_fixture as TF  # noqa: E402
from test_app import VOCAB, app, write_fixture  # noqa: E402

from draftlab import paths  # noqa: E402
from draftlab.explore import loaders as L  # noqa: E402
from draftlab.explore import tree_view as TV  # noqa: E402
from draftlab.explore import verdict_files as VF  # noqa: E402


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return write_fixture(tmp_path_factory.mktemp("trees"), mlflow_runs=False)


def test_tree_view_reads_the_walk_of_the_engine():
    tree, w, row = TF.tree_round()
    t = TV.build(pd.Series({"arm": "dflash-tree8", **row}))
    tok, par = tree.tokens[0].tolist(), tree.parent[0].tolist()
    acc = int(w.accepted[0])
    path = w.path[0, : acc + 1].tolist()
    nodes = t.nodes.set_index("node")
    assert t.accepted == acc == 2 and t.bonus == int(w.next_token[0]) == TF.NEXT[tok[path[-1]]]
    assert sorted(nodes.index) == [i for i in range(len(tok)) if tree.valid[0, i]]
    for i, r in nodes.iterrows():
        if i == 0:
            assert r["status"] == "root"
            continue
        want = TF.NEXT.get(tok[par[i]], 8)  # the target's token after the parent's (the fixture's own map)
        if r["status"] == "accepted":  # on the walk's path, holding the target's token after its parent
            assert i in path and tok[i] == want
        elif r["status"] == "rejected":  # a child of a path node that did not hold the target's token
            assert par[i] in path and i not in path and tok[i] != want
        else:
            assert r["status"] == "not reached" and par[i] not in path
        # the step log-prob is the marginal lattice's value of the node's candidate at its slot
        j = int(r["depth"]) - 1
        lp = pd.Series(TF.LOGITS[j]).pipe(lambda s: s - math.log(sum(math.exp(v) for v in s)))
        assert r["step_logp"] == pytest.approx(lp[TF.CAND[j].index(tok[i])], abs=1e-5)
    assert (nodes["status"] == "accepted").sum() == acc
    ranks = nodes[nodes["parent"] == 0].sort_index()["rank"].tolist()
    assert ranks == list(range(1, len(ranks) + 1))  # the root's children in their row's order


def test_tree_view_in_the_candidate_grid(root):
    at = app(root, "Candidate grid")
    at.selectbox(key="grid_arm").set_value("dflash-tree8").run()
    assert not at.exception, [e.value for e in at.exception]
    assert any(s.value == "The round's tree" for s in at.subheader)
    metrics = {m.label: m.value for m in at.metric}
    _, w, row = TF.tree_round()
    assert metrics["accepted depth"] == str(int(w.accepted[0]))
    assert metrics["bonus token"].strip("␣ ").lower() == VOCAB[int(w.next_token[0])].strip().lower()
    table = next(d.value for d in at.dataframe if "status" in d.value.columns)
    assert table["node"].tolist() != [] and set(table["status"]) == {"root", "accepted", "rejected", "not reached"}
    assert sorted(table["token"]) == sorted(t for t in row["tree_tokens"] if t >= 0)
    assert any("marginals" in m.value for m in at.markdown)


def test_lilicorr_pair_rows_in_the_candidate_grid(root):
    at = app(root, "Candidate grid")
    at.selectbox(key="grid_arm").set_value("lilicorr").run()
    assert not at.exception, [e.value for e in at.exception]
    assert any(s.value == "Pair scores of one predecessor" for s in at.subheader)
    assert any(s.value == "K×K pair scores, every slot pair" for s in at.subheader)
    start, pair, path = TF.pair_rows()
    shown = next(d.value for d in at.dataframe if "pair_s(a, b)" in d.value.columns)
    assert shown["pair_s(a, b)"].tolist() == sorted(pair[0][path[0]], reverse=True)  # slot 1 -> 2, its chosen row
    assert any("Start scores" in c.value and f"{start[1]:+.2f}" in c.value for c in at.caption)


@pytest.mark.parametrize("page", ["Trees", "LiLiCorr"])
def test_verdict_pages_show_the_files_figures_and_units(root, page):
    d = json.loads((root / VF.FILES[page].rel).read_text())
    at = app(root, page)
    assert not at.exception, [e.value for e in at.exception]
    temps = VF.temperatures(d)
    assert len(at.selectbox(key=f"verdict_{page}_temp").options) == len(temps) > 0
    for tk in temps:
        at.selectbox(key=f"verdict_{page}_temp").set_value(tk).run()
        arms, pairs = (next(x.value for x in at.dataframe if c in x.value.columns) for c in ("τ", "Δτ (a − b)"))
        assert len(arms) == sum(f"tau_{tk}" in e for e in d["summary"].values()) > 0
        for _, r in arms.iterrows():
            e = d["summary"][r["arm"]]
            assert (r["τ"], r["τ lo"], r["τ hi"]) == (e[f"tau_{tk}"], *e[f"tau_{tk}_ci"])
            assert (r["tokens/s"], r["tokens/s lo"], r["tokens/s hi"]) == (e[f"tokens_per_s_{tk}"],
                                                                           *e[f"tokens_per_s_{tk}_ci"])
            assert r["× AR (total time)"] == e[f"speedup_{tk}"]
            assert (r["unit"], r["n"]) == (e[f"units_{tk}"]["unit"], e[f"units_{tk}"]["n"])
        want = [p for p in d["pairs"] if p["temperature"] == tk]
        assert len(pairs) == len(want)
        for (_, r), p in zip(pairs.iterrows(), want):
            assert (r["a"], r["b"], r["Δτ (a − b)"], r["Δτ lo"], r["Δτ hi"]) == (p["a"], p["b"], p["tau_diff"],
                                                                               *p["tau_diff_ci"])
            assert (r["tokens/s a ÷ b"], r["ratio lo"], r["ratio hi"]) == (p["tokens_per_s_ratio"],
                                                                          *p["tokens_per_s_ratio_ci"])
            assert (r["unit"], r["n"]) == (p["units"]["unit"], p["units"]["n"])
        unit = next(e[f"units_{tk}"] for e in d["summary"].values() if f"units_{tk}" in e)
        assert any(f"95% over {unit['n']} {unit['unit']}" in c.value for c in at.caption)


def test_verdict_page_without_its_file_names_the_tool(tmp_path):
    at = app(tmp_path, "Trees")
    msg = " ".join(i.value for i in at.info)
    assert "tools/tree_verdict.py" in msg and "worlds/toy" in msg
    (tmp_path / "results").mkdir()
    (tmp_path / paths.LILICORR).write_text("{not json")
    at = app(tmp_path, "LiLiCorr")
    assert any("corrupt" in x.value and "tools/lilicorr_verdict.py" in x.value for x in at.warning)


def test_rounds_hint_names_the_run_explored(tmp_path):
    world = tmp_path / "worlds" / "toy"
    world.mkdir(parents=True)
    (world / "params.yaml").write_text("profile:\n  name: toy\n")
    msg = L.rounds_absent(world).message
    assert "`toy` world's run, profile `toy`" in msg and "ROOT=.smoke/worlds/toy" in msg and "cpu" not in msg
    (tmp_path / "params.yaml").write_text("profile:\n  name: cpu\n")
    msg = L.rounds_absent(tmp_path).message
    assert "run of profile `cpu`" in msg and "ROOT=.smoke`" in msg


def test_pipeline_plots_say_what_they_plot_and_filter_suites(root):
    import dvc_plots as DP

    d = {"path": paths.CURVES["pretrain_drafter"], "x": "train_minutes", "y": "heldout"}
    spec = DP.chart_for_def(root, d, None, ["humaneval"]).to_dict()
    assert spec["encoding"]["y"]["title"] == "simulated τ (acceptance length)"
    series = {r["series"] for r in spec["datasets"][next(iter(spec["datasets"]))]}
    assert series == {"heldout"}  # mt-bench's column left out with the suite
    spec = DP.chart_for_def(root, d, None, ["mt-bench"]).to_dict()
    assert {r["series"] for r in spec["datasets"][next(iter(spec["datasets"]))]} == {"heldout", "mt-bench"}
