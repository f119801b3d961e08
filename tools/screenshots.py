"""Screenshots of every explorer page, for docs/explorer.md.

    .venv/bin/python tools/screenshots.py --root . --out docs/img/explorer          # after the `cpu` run
    .venv/bin/python tools/screenshots.py --root .smoke --out /tmp/shots            # the smoke outputs
    .venv/bin/python tools/screenshots.py --root . --out DIR --compare HEAD~1       # Compare: B = a revision / folder

It serves the explorer on `--root` and drives one headless Debian Chromium over the DevTools protocol
(app/browser.py, the same code as tests/app/test_app_browser.py). For each view it opens the view's deep
link (`?page=...&<widget key>=<value>`), waits until Streamlit has finished, every chart has drawn and the
page has stayed still for a moment, then captures the whole page (not just the window). Views: each page;
the candidate grid again on an arm that records DCOCO transition scores (the K×K heatmap), one that records
LiLiCorr's pair rows, and a tree arm (the round's tree); the
Compare page against `--compare` (a folder, or a git revision / DVC experiment of the root) when given.
Writes <out>/explorer_<view>.png and <out>/screenshots.json (view -> file, root, address, seconds, problems; views
already listed there from another root, e.g. with --only, are kept).
Exit status 1 when a page showed a Python exception or never settled.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))  # app/browser.py
from browser import CHROMIUM, explorer  # noqa: E402

PAGES = {"grid": "Candidate grid", "acceptance": "Acceptance", "speed": "Speed", "runs": "Runs",
         "pipeline-plots": "Pipeline plots", "trees": "Trees", "lilicorr": "LiLiCorr", "compare": "Compare"}
EXCEPTION = "[...document.querySelectorAll('[data-testid=\"stException\"]')].map(e => e.innerText.slice(0, 300))"


GRID_VIEWS = (("transition_scores", ("dcoco", "dcoco-seeded"), "{arm}"),  # DCOCO's K×K heatmap
              ("pair_rows", ("lilicorr", "lilicorr-seeded"), "{arm}"),  # LiLiCorr's pair rows
              ("tree_tokens", ("dflash-tree16", "dcoco-tree16", "lilicorr-tree16"), "tree-{arm}"))  # a round's tree


def recorded_arm(root: Path, column: str, prefer: tuple[str, ...]) -> str | None:
    """An arm whose recorded rounds carry `column` (one of `prefer` when there is one), for a candidate-grid view."""
    import pandas as pd

    try:
        df = pd.read_parquet(root / "data" / "benchmark_rounds.parquet", columns=["arm", column])
    except Exception:  # noqa: BLE001 - no rounds, or no arm records it: no such view
        return None
    arms = sorted(set(df.loc[df[column].notna(), "arm"]))
    return next((a for a in prefer if a in arms), arms[0] if arms else None)


def tree_round(root: Path, arm: str) -> dict:
    """The deep link's suite, prompt and round of a tree round worth showing (draftlab.explore.tree_view.interesting)."""
    import pandas as pd

    from draftlab.explore.tree_view import interesting

    df = pd.read_parquet(root / "data" / "benchmark_rounds.parquet")
    r = interesting(df[df["arm"] == arm])
    return {} if r is None else {"grid_suite": r["suite"], "grid_prompt": r["prompt_id"], "grid_round": int(r["round"])}


def views(root: Path, compare: str | None) -> list[tuple[str, dict]]:
    out = [(name, {"page": page}) for name, page in PAGES.items() if name != "compare"]
    for column, prefer, name in GRID_VIEWS:
        arm = recorded_arm(root, column, prefer)
        if arm:
            out.insert(1, (f"grid-{name.format(arm=arm)}", {"page": PAGES["grid"], "grid_arm": arm, "grid_temp": "0",
                                                             **(tree_round(root, arm) if column == "tree_tokens" else {})}))
    cmp: dict = {"page": PAGES["compare"]}
    if compare:
        folder = Path(compare).expanduser()
        if folder.is_dir():
            cmp["cmp_B_folder"] = str(folder.resolve())
        else:
            cmp.update(cmp_B_kind="git revision / DVC experiment", cmp_B_rev=compare)
    out.append(("compare", cmp))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=".", help="the outputs to show (a checkout, or .smoke)")
    ap.add_argument("--out", required=True, help="folder for the PNG files and screenshots.json")
    ap.add_argument("--compare", default=None, help="Compare page: side B is this folder or git revision")
    ap.add_argument("--width", type=int, default=1500, help="browser window width in pixels")
    ap.add_argument("--height", type=int, default=6000, help="browser window height: taller than any page, so a "
                                                             "page is captured as it is laid out (then clipped)")
    ap.add_argument("--only", default="", help="comma-separated view names (default: all)")
    ap.add_argument("--chromium", default=CHROMIUM)
    a = ap.parse_args(argv)
    root, out = Path(a.root).resolve(), Path(a.out)
    if not Path(a.chromium).exists():
        print(f"error: no Chromium at {a.chromium} (Debian: apt-get install -y chromium)", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    wanted = [v for v in a.only.split(",") if v]
    report, bad = {}, 0
    with tempfile.TemporaryDirectory(prefix="draftlab-shots-") as work, \
            explorer(root, Path(work), a.chromium, width=a.width, height=a.height) as ex:
        cdp = ex["cdp"]
        for name, params in views(root, a.compare):
            if wanted and name not in wanted:
                continue
            url = ex["url"] + "?" + urllib.parse.urlencode(params)
            t = time.time()
            cdp.goto(url)
            time.sleep(0.5)
            settled = cdp.settle(timeout=120)
            errors = cdp.js(EXCEPTION) or []
            f = cdp.screenshot(out / f"explorer_{name}.png", a.width)
            title = cdp.js("(document.querySelector('h2') || {}).innerText || ''")
            report[name] = {"file": f.name, "root": str(root), "url": url.replace(ex["url"], "/"),
                            "seconds": round(time.time() - t, 1), "header": title, "settled": settled,
                            "exceptions": errors}
            bad += (not settled) or bool(errors)
            print(f"{name}: {f} ({report[name]['seconds']} s){'' if settled else ' NOT SETTLED'}"
                  f"{' EXCEPTION: ' + errors[0] if errors else ''}")
    index = out / "screenshots.json"  # views taken from other roots before (--only) stay listed with theirs
    kept = json.loads(index.read_text()).get("views", {}) if index.exists() else {}
    index.write_text(json.dumps({"views": {**kept, **report}}, indent=2) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
