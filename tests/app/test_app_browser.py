"""The explorer in a real browser: `streamlit run` on a free 127.0.0.1 port over a fixture of stage outputs,
headless Debian Chromium driven over its DevTools protocol (app/browser.py, shared with
tools/screenshots.py). One server and one browser serve every test of this module (module-scoped fixture).
Checks: the candidate grid and the accepted-length figure render and the round slider changes the grid; the full
K×K transition-score heatmap renders for the DCOCO arm (opened by deep link); the Compare page shows two result
folders side by side; what a user reads on Acceptance, Speed, Runs and Pipeline plots (issue 51: chart titles,
no axis with a single tick, no plot area squeezed flat, no percentage on a headroom below noise, tied leaders
named together, T=0 rather than t0, `pld`'s rounds without a match); the reload path — a rewritten file is read
again by a new session (cache keyed on mtime and size), and the "Reload data" button re-reads a file whose mtime
and size did not change (last: it rewrites the fixture). Screenshots go under the module's tmp dir.

Skipped (with the reason) when /usr/bin/chromium is missing; with DRAFTLAB_INSTALL_CHROMIUM=1 (as `make test`
sets) the test first tries `apt-get install -y chromium` and a Chromium still missing is a failure, not a skip."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "app"))  # app/browser.py
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from browser import CHARTS, CHROMIUM, TABLES, explorer  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
GRID_READY = ("document.querySelectorAll('table.dl-grid td.dl-cell').length > 0 && "
              "document.querySelectorAll('.vega-embed svg, .vega-embed canvas').length > 0 && "
              "!document.querySelector('[data-testid=\"stStatusWidget\"] [data-testid=\"stStatusWidgetRunningIcon\"]')")
SELECTED = "[...document.querySelectorAll('[data-testid=\"stSelectbox\"] input')].map(i => i.value)"
SVG_TEXT = "[...document.querySelectorAll('.vega-embed svg text')].map(t => t.textContent).join('|')"


def chromium() -> str:
    """The Chromium to drive; with DRAFTLAB_INSTALL_CHROMIUM=1 (`make test`) a missing one is installed, and one
    that still cannot be had fails the test: a fresh clone's `make test` must not pass without the browser tests."""
    install = os.environ.get("DRAFTLAB_INSTALL_CHROMIUM") == "1"
    why = ""
    if not Path(CHROMIUM).exists() and install:
        try:
            r = subprocess.run(["apt-get", "install", "-y", "chromium"], capture_output=True, text=True, timeout=600)
            lines = (r.stderr or r.stdout or "").strip().splitlines()
            why = lines[-1] if lines else f"exit status {r.returncode}"
        except (OSError, subprocess.SubprocessError) as e:
            why = str(e)
    if not Path(CHROMIUM).exists():
        if install:
            pytest.fail(f"DRAFTLAB_INSTALL_CHROMIUM=1 but no Chromium at {CHROMIUM} after `apt-get install -y chromium`"
                        f"{f' ({why})' if why else ''}: the browser tests cannot run", pytrace=False)
        pytest.skip("Debian chromium is not installed at /usr/bin/chromium (set DRAFTLAB_INSTALL_CHROMIUM=1 to "
                    "let the test run `apt-get install -y chromium`)")
    return CHROMIUM


def test_missing_chromium_fails_under_make_test(monkeypatch):
    """`make test` (DRAFTLAB_INSTALL_CHROMIUM=1): a Chromium that cannot be installed fails; otherwise it skips."""
    import test_app_browser as me

    monkeypatch.setattr(me, "CHROMIUM", "/nonexistent/chromium")
    monkeypatch.setattr(me.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 100, "", "E: no network"))
    monkeypatch.setenv("DRAFTLAB_INSTALL_CHROMIUM", "1")
    with pytest.raises(pytest.fail.Exception, match="no Chromium.*E: no network"):
        me.chromium()
    monkeypatch.delenv("DRAFTLAB_INSTALL_CHROMIUM")
    with pytest.raises(pytest.skip.Exception):
        me.chromium()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from test_app import write_fixture

    browser = chromium()
    tmp_path = tmp_path_factory.mktemp("browser")
    root = user_fixture(write_fixture(tmp_path / "outputs"))
    other = write_fixture(tmp_path / "other", mlflow_runs=False)  # the Compare page's side B
    detail = json.loads((other / "results/benchmark.json").read_text())
    for m in detail["summary"]["dcoco"]:
        if m.startswith("tau_t") and not m.endswith("_ci"):
            detail["summary"]["dcoco"][m] += 0.5
    (other / "results/benchmark.json").write_text(json.dumps(detail))
    with explorer(root, tmp_path, browser) as ex:
        yield {**ex, "dir": tmp_path, "root": root, "other": other}


def user_fixture(root: Path) -> Path:
    """The fixture with what the committed run showed a new user (issue 51): seeded arms tied with dcoco at τ 2.200
    (dflash-seeded, the seeded arms' base, with a headroom Δ of 0.050 ± 0.050 τ: below noise, so dcoco-seeded gets
    no share), `pld`'s rounds without a lookup match (recorded as "drafter"), a recorded `setup.created` time, the
    peers plot declared in dvc.yaml, and an MLflow metric logged at one step (the Runs page's default curve)."""
    from draftlab.bench.report import plot_frames

    from draftlab.explore import loaders as L

    f = root / L.BENCH_JSON
    d = json.loads(f.read_text())
    for temps in d["suites"].values():
        for by in temps.values():
            for arm, oracle in (("dflash-seeded", 2.25), ("dcoco-seeded", 2.4)):
                m = json.loads(json.dumps(by["dcoco"]))
                m.update(tau=2.2, oracle_tau=oracle, oracle_tau_reachable=oracle - 0.01)
                if arm == "dflash-seeded":
                    m["per_prompt"] = {"tau": [2.1, 2.3], "oracle_tau": [2.2, 2.3], "oracle_tau_reachable": [2.19, 2.29]}
                by[arm] = m
    for arm in ("dflash-seeded", "dcoco-seeded"):
        d["summary"][arm] = {k: v for k, v in d["summary"]["dcoco"].items() if k != "headroom_t0"}
    src = d["summary"]["pld"]["sources_t0"]
    src["drafter"] = {"rounds": 4, "share": 0.4, "accepted_per_round": 0.0, "accepted_tokens": 0}
    src["lookup"]["share"] = 0.6
    d["setup"]["created"] = "2026-12-01T10:00:00+00:00"
    f.write_text(json.dumps(d))
    for name, df in plot_frames(d).items():
        df.to_csv(root / L.PLOTS[name], index=False)
    (root / "dvc.yaml").write_text((root / "dvc.yaml").read_text().replace(
        "plots:\n  - concurrency_claim:", "      - plots/benchmark_peers.csv:\n          x: arm\n          y: speedup\n"
        "plots:\n  - concurrency_claim:", 1))
    from mlflow.tracking import MlflowClient

    c = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlruns.db'}")
    for r in c.search_runs([c.get_experiment_by_name("draftlab").experiment_id]):
        c.log_metric(r.info.run_id, "eval/loss", 2.5, step=0)  # one step: the default curve ("loss", sorted first)
    return root


def body(cdp) -> str:
    return cdp.js("document.body.innerText") or ""


def open_view(served, **params) -> None:
    cdp = served["cdp"]
    cdp.goto(served["url"] + "?" + urllib.parse.urlencode(params))
    time.sleep(0.5)  # the navigation starts: the old page is not taken for the new one
    # drawn and unchanged for 1 s (the charts' count is read every 0.2 s; each assertion after it waits for its own)
    assert cdp.settle(timeout=90, quiet=1.0), f"the page {params} never settled"


def test_explorer_in_chromium(served):
    cdp, t0 = served["cdp"], served["t0"]
    assert cdp.wait(GRID_READY, 90), "the candidate grid never rendered"
    first_render_s = time.time() - t0
    cells = cdp.js("document.querySelectorAll('table.dl-grid td.dl-cell').length")
    text = body(cdp)
    assert cells >= 4 * 3
    assert "accepted length" in text and "Accepted length per round" in text
    assert "␣keys" in text  # the first arm (dflash): its candidates, whitespace made visible
    assert "data written" in text or "results made" in text  # the page says how old its data is
    shot = cdp.screenshot(served["dir"] / "explorer_grid.png")
    assert shot.stat().st_size > 10_000

    # switch rounds: click the right end of the round slider's track (round 2 of 0..2); time until the grid changes
    before = cdp.js("document.querySelector('table.dl-grid').innerHTML")
    box = cdp.js("(() => { const r = document.querySelector('[data-testid=\"stSlider\"] [style*=\"touch-action\"]')"
                 ".getBoundingClientRect(); return [r.right - 2, r.top + r.height / 2]; })()")
    assert box, "no round slider on the page"
    t1 = time.time()
    cdp.click(*box)
    changed = cdp.wait(f"document.querySelector('table.dl-grid') && "
                       f"document.querySelector('table.dl-grid').innerHTML !== {json.dumps(before)}", 30)
    switch_s = time.time() - t1
    assert changed, "moving the round slider did not change the grid"

    # the full K×K heatmap of the DCOCO arm (a deep link presets the arm)
    open_view(served, page="Candidate grid", grid_arm="dcoco", grid_temp="0")
    assert "K×K transition scores, every slot pair" in body(cdp) and "Δθ" in body(cdp)
    assert "corrected: greedy" in body(cdp)
    assert cdp.wait(f"{SVG_TEXT}.includes('slot 3 → 4')", 30), "the heatmap never drew"
    svg = cdp.js(SVG_TEXT)
    for label in ("slot 1 → 2", "slot 2 → 3", "slot 3 → 4", "predecessor a at slot p", "path rule (marker)"):
        assert label in svg, label
    cdp.screenshot(served["dir"] / "explorer_heatmap.png")

    # the per-position reading on the Speed page (issue 23): the chart draws, with its axis
    open_view(served, page="Speed")
    assert "By position in the answer" in body(cdp)
    assert cdp.wait(f"{SVG_TEXT}.includes('answer position where the round starts')", 30), "the position plot never drew"

    # two result folders side by side
    open_view(served, page="Compare", cmp_B_folder=str(served["other"]))
    text = body(cdp)
    assert "A: outputs" in text and "B: other" in text
    assert cdp.wait(f"{SVG_TEXT}.includes('B: other')", 30), "the comparison chart never drew"
    assert "A: outputs" in cdp.js(SVG_TEXT)  # one chart panel per side
    cdp.screenshot(served["dir"] / "explorer_compare.png")
    (served["dir"] / "timings.json").write_text(json.dumps(
        {"server_ready_s": served["server_s"], "first_grid_render_s": first_render_s, "round_switch_s": switch_s}))
    print(f"\n[explorer] server ready {served['server_s']:.2f} s, grid rendered {first_render_s:.2f} s after launch, "
          f"round switch {switch_s:.2f} s; screenshots in {served['dir']}")


def charts(cdp) -> list[dict]:
    return cdp.js(CHARTS) or []


def tables(cdp) -> list[list[list[str]]]:
    return cdp.js(TABLES) or []


def table_with(cdp, column: str) -> list[dict]:
    """The rows (header -> cell text) of the first table with a column named `column`."""
    for t in tables(cdp):
        if t and column in t[0]:
            return [dict(zip(t[0], r)) for r in t[1:]]
    raise AssertionError(f"no table with a column {column!r}: {[t[0] for t in tables(cdp) if t]}")


def chart_titled(cdp, words: str) -> dict:
    found = [c for c in charts(cdp) if any(words in t for t in c["titles"])]
    assert found, f"no chart titled {words!r}: {[c['titles'] for c in charts(cdp)]}"
    return found[0]


def axis_problems(cdp, page: str) -> list[str]:
    """Axes a user cannot read: a continuous axis with fewer than two tick labels, or a Y axis whose labels span under
    60 px (a plot squeezed flat)."""
    bad = []
    for c in charts(cdp):
        name = next((t for t in reversed(c["titles"]) if t), "untitled")
        for a in c["axes"]:
            continuous = "linear scale" in a["aria"] or "log scale" in a["aria"]
            if continuous and len(set(a["ticks"])) < 2:
                bad.append(f"{page} / {name} / {a['title'] or a['aria'][:40]}: ticks {a['ticks']}")
            if continuous and a["aria"].startswith("Y") and a["span"] < 60:
                bad.append(f"{page} / {name} / {a['title'] or a['aria'][:40]}: labels span {a['span']} px")
    return bad


def test_what_a_user_reads(served):
    """Issue 51: the defects a new user found, read back from the page as drawn — chart titles, tick labels per axis
    (Vega's SVG), table cells, sentences."""
    cdp, problems = served["cdp"], []

    open_view(served, page="Acceptance")
    text = body(cdp)
    assert "results made" in text and "`setup.created`" not in text and "setup.created" in text  # recorded time
    best = next(line for line in text.splitlines() if line.startswith("Highest mean τ"))
    assert "at T=0:" in best and "3 arms tied" in best, best  # tied leaders, named together
    assert best.index("dflash-seeded") < best.index("2.200") and "dcoco and dcoco-seeded 2.200" in best, best
    chart_titled(cdp, "Per-slot acceptance")
    chart_titled(cdp, "Top-k coverage")
    head = table_with(cdp, "Δτ over base")
    by = {r["arm"]: r for r in head if r["suite"] == "mt-bench"}
    top = "headroom closed (drafter's top-K oracle τ)"
    noise = by["dcoco-seeded"]  # its base dflash-seeded: Δ = 0.050 ± 0.050 τ, under 2 standard errors
    assert noise[top] == "n/a: headroom below noise" and not any("%" in v for v in noise.values()), noise
    assert noise["Δτ over base"] == "0.000" and noise["base headroom Δ ± SE (drafter's top-K oracle τ − τ)"] == \
        "0.050 ± 0.050"
    assert by["dcoco"][top] == "50.0%" and by["dcoco"]["base headroom Δ ± SE (drafter's top-K oracle τ − τ)"] == \
        "0.800 ± 0.050"  # above noise: the share, beside its absolute figures
    assert all(v != "n/a" for r in head for v in r.values()), "an n/a without its reason"
    src = table_with(cdp, "source")
    assert {(r["arm"], r["source"]) for r in src} >= {("pld", "lookup"), ("pld", "no match"), ("dflash-pld", "drafter")}
    assert ("pld", "drafter") not in {(r["arm"], r["source"]) for r in src}
    assert cdp.js(SELECTED) == ["T=0"]  # the temperature selector
    problems += axis_problems(cdp, "Acceptance")
    pages_text = [text]

    open_view(served, page="Speed")
    chart_titled(cdp, "by where the round starts (T=0)")
    ratio = chart_titled(cdp, "Tokens/s ratio to AR")
    y = next(a for a in ratio["axes"] if a["aria"].startswith("Y-axis"))
    assert y["span"] >= 150 and len(y["ticks"]) >= 3, y  # not squashed
    conc = chart_titled(cdp, "one panel per arm")
    assert {"ar", "dcoco"} <= set(conc["titles"])  # one panel per arm: the shaded gaps do not pile up
    assert "difference of two measured round times" in body(cdp) and "Negative means" in body(cdp)
    peers = {r["arm"]: r for r in table_with(cdp, "greedy tokens = AR")}  # one format per kind of figure
    assert (peers["ar"]["tau"], peers["ar"]["tokens_per_s"], peers["ar"]["ratio to AR"]) == ("1.000", "10.0", "1.00")
    assert peers["dcoco"]["tau"] == "2.200" and peers["pld"]["tokens_per_s"] == "14.0"
    seg = {r["arm"]: r for r in table_with(cdp, "loop_share")}
    assert seg["dcoco"]["loop_share"] == "50.0%" and seg["dcoco"]["tokens_per_s (first)"] == "22.0"
    problems += axis_problems(cdp, "Speed")
    pages_text.append(body(cdp))
    assert set(cdp.js(SELECTED)) >= {"T=0"} and not {"t0", "t1"} & set(cdp.js(SELECTED))

    open_view(served, page="Runs")
    assert cdp.wait("document.querySelectorAll('.vega-embed svg').length > 0", 30), "the metric curve never drew"
    problems += axis_problems(cdp, "Runs")  # the default curve (eval/loss) has one step

    open_view(served, page="Pipeline plots")
    peers = chart_titled(cdp, "plots/benchmark_peers.csv (T=0)")
    y = next(a for a in peers["axes"] if a["aria"].startswith("Y-axis"))
    assert y["span"] >= 150 and len(y["ticks"]) >= 3, y  # was ~5 px with one "0" tick
    chart_titled(cdp, "plots/benchmark_tau_per_slot.csv (T=0)")
    assert cdp.js(SELECTED)[0] == "T=0"
    problems += axis_problems(cdp, "Pipeline plots")
    pages_text.append(body(cdp))
    cdp.screenshot(served["dir"] / "explorer_pipeline-plots.png")

    assert not problems, problems
    import re

    assert not [m for t in pages_text for m in re.findall(r"\bt[01]\b", t)], "a temperature shown as t0 / t1"


def test_trees_and_lilicorr_in_chromium(served):
    """Issue "A newcomer's third hour", item 2: a tree round's view, LiLiCorr's pair rows in the candidate grid, and the
    Trees / LiLiCorr verdict pages, drawn in the browser (screenshots under the module's tmp dir)."""
    cdp = served["cdp"]
    open_view(served, page="Candidate grid", grid_arm="dflash-tree8", grid_temp="0")
    text = body(cdp)
    assert "The round's tree" in text and "the block's marginals" in text
    assert cdp.wait(f"{SVG_TEXT}.includes('bonus: the target')", 30), "the tree never drew"
    svg = cdp.js(SVG_TEXT)
    assert "16 nodes" not in svg and "8 nodes, 2 accepted below the root" in svg and "after the walk" in svg
    rows = table_with(cdp, "status")
    assert {r["status"] for r in rows} == {"root", "accepted", "rejected", "not reached"}
    cdp.screenshot(served["dir"] / "explorer_grid-tree.png")

    open_view(served, page="Candidate grid", grid_arm="lilicorr", grid_temp="0")
    assert "K×K pair scores, every slot pair" in body(cdp) and "Start scores" in body(cdp)
    assert cdp.wait(f"{SVG_TEXT}.includes('slot 3 → 4')", 30), "the pair-score heatmap never drew"
    assert "pair_s(a, b)" in cdp.js(SVG_TEXT)
    cdp.screenshot(served["dir"] / "explorer_grid-lilicorr.png")

    for page, arm in (("Trees", "dcoco-tree16"), ("LiLiCorr", "lilicorr-tree16")):
        open_view(served, page=page)
        text = body(cdp)
        assert "Intervals: 95% over 6 batches" in text and "Pairs" in text, text[:400]
        arms = {r["arm"]: r for r in table_with(cdp, "× AR (total time)")}
        assert arm in arms and arms[arm]["unit"] == "batch" and arms[arm]["T"] == "T=0"
        cdp.screenshot(served["dir"] / f"explorer_{page.lower()}.png")


def _rewrite_tau(f: Path, old: str, new: str, keep_stamp: bool) -> None:
    """Replace dcoco's τ text in the benchmark file; with keep_stamp, restore its mtime (size is unchanged)."""
    st = f.stat()
    f.write_text(f.read_text().replace(old, new))
    if keep_stamp:
        os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert f.stat().st_size == st.st_size and f.stat().st_mtime_ns == st.st_mtime_ns


def test_reload_path(served):
    """Last in this module: it rewrites the fixture's benchmark file (dcoco's mean τ, and the arms tied with it)."""
    cdp, f = served["cdp"], served["root"] / "results/benchmark.json"
    open_view(served, page="Acceptance")
    assert "dcoco-seeded 2.200" in body(cdp)  # the leaders' line: "... dcoco and dcoco-seeded 2.200"
    # same mtime and size: the cache (keyed on both) still serves the old numbers to a new session ...
    _rewrite_tau(f, '"tau_t0": 2.2,', '"tau_t0": 3.3,', keep_stamp=True)
    open_view(served, page="Acceptance")
    assert "dcoco-seeded 2.200" in body(cdp)
    # ... until "Reload data" clears the caches
    assert cdp.click_text("[data-testid='stSidebar'] button", "Reload data")
    assert cdp.wait("document.body.innerText.includes('dcoco-seeded 3.300')", 30), "Reload data did not re-read the file"
    # a rewrite that changes the stamp is read again by the next session without pressing anything
    _rewrite_tau(f, '"tau_t0": 3.3,', '"tau_t0": 2.75,', keep_stamp=False)
    open_view(served, page="Acceptance")
    assert "dcoco-seeded 2.750" in body(cdp)
    cdp.screenshot(served["dir"] / "explorer_acceptance.png")
