"""The explorer in a real, headless browser: start `streamlit run app/explorer.py` on a free 127.0.0.1 port,
start Debian's Chromium with its DevTools protocol on, and drive the page over that protocol (evaluate
JavaScript, click, wait for the charts, take screenshots). Not a page of the explorer: the harness that drives it,
beside it, used by tests/app/test_app_browser.py and tools/screenshots.py (import it as `browser` with app/ on sys.path,
as the explorer's own modules are); nothing here downloads anything, and both servers bind 127.0.0.1.

Waiting for a page means: Streamlit says its script run has finished (`data-test-script-state` of the app
element), the page's header is there, every vega chart has drawn its svg, and the number of charts has
not changed for a while (a one-shot `chromium --screenshot` can capture the loading skeleton;
docs/install.md, "Streamlit and Chromium").
"""
from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-allow-origins=*", "--hide-scrollbars"]
# Streamlit marks its root element with the script's state; "notRunning" after a finished run
APP_IDLE = ("(() => { const a = document.querySelector('[data-testid=\"stApp\"]'); return a !== null && "
            "a.getAttribute('data-test-script-state') === 'notRunning' && "
            "a.getAttribute('data-test-connection-state') === 'CONNECTED'; })()")
# the script has finished, a page header is there, no loading skeleton, and every vega chart has drawn its
# svg/canvas; the value (element, chart counts) must then stay the same for a while (charts load lazily)
SETTLED = ("(() => { const charts = document.querySelectorAll('.vega-embed').length;"
           " const drawn = document.querySelectorAll('.vega-embed svg, .vega-embed canvas').length;"
           " const elements = document.querySelectorAll('[data-testid=\"stElementContainer\"]').length;"
           f" return {APP_IDLE} && document.querySelector('h2') !== null && drawn >= charts"
           " && !document.querySelector('[data-testid=\"stSkeleton\"]') ? `${elements}/${charts}` : ''; })()")

# what a user reads in each vega chart: its titles (chart and facet headers), and per axis its description
# (Vega's aria-label: "X-axis titled 'k' for a linear scale ..."), its title, its tick labels and how far apart its
# first and last tick labels are along the axis, in px (`span`: a Y axis whose labels sit within a few px is a plot
# squeezed flat; the explorer's theme draws no axis domain line to measure instead)
CHARTS = ("(() => [...document.querySelectorAll('.vega-embed')].map(e => ({"
          " titles: [...e.querySelectorAll('.role-title text')].map(t => t.textContent),"
          " axes: [...e.querySelectorAll('g.role-axis[aria-label]')].map(a => {"
          " const y = (a.getAttribute('aria-label') || '').startsWith('Y');"
          " const at = [...a.querySelectorAll('.role-axis-label text')].map(t => { const r = t.getBoundingClientRect();"
          " return y ? r.top + r.height / 2 : r.left + r.width / 2; });"
          " return {aria: a.getAttribute('aria-label'),"
          " title: [...a.querySelectorAll('.role-axis-title text')].map(t => t.textContent).join(' '),"
          " ticks: [...a.querySelectorAll('.role-axis-label text')].map(t => t.textContent),"
          " span: at.length ? Math.round(Math.max(...at) - Math.min(...at)) : 0}; })})))()")
# the cells of every st.dataframe as text rows (the grid's accessible table holds what its canvas draws; columns
# and rows beyond the visible part are not in it)
TABLES = ("(() => [...document.querySelectorAll('[data-testid=\"stDataFrame\"]')].map(x => [...x.querySelectorAll("
          "'table tr')].map(r => [...r.querySelectorAll('th, td')].map(c => c.textContent))))()")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout: float) -> bool:
    end = time.time() + timeout
    while time.time() < end:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return True
        except OSError:
            time.sleep(0.1)
    return False


class CDP:
    """A minimal DevTools-protocol client over one page's websocket."""

    def __init__(self, ws_url: str):
        from websockets.sync.client import connect

        self.ws = connect(ws_url, max_size=64 * 2**20, open_timeout=20)
        self.i = 0

    def call(self, method: str, **params):
        self.i += 1
        self.ws.send(json.dumps({"id": self.i, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=60))
            if msg.get("id") == self.i:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def js(self, expr: str):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        return r.get("result", {}).get("value")

    def wait(self, expr: str, timeout: float = 60.0):
        end = time.time() + timeout
        while time.time() < end:
            v = self.js(expr)
            if v:
                return v
            time.sleep(0.1)
        return None

    def settle(self, timeout: float = 90.0, quiet: float = 2.0) -> bool:
        """Wait until the page is drawn and has stayed so (same number of charts) for `quiet` seconds."""
        end, last, since = time.time() + timeout, None, time.time()
        while time.time() < end:
            v = self.js(SETTLED)
            if v and v == last:
                if time.time() - since >= quiet:
                    return True
            else:
                last, since = v, time.time()
            time.sleep(0.2)
        return False

    def goto(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def click(self, x: float, y: float) -> None:
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def click_text(self, selector: str, text: str) -> bool:
        """Click the first element matching `selector` whose text is `text` (e.g. a button or a radio label)."""
        box = self.js(f"(() => {{ const el = [...document.querySelectorAll({json.dumps(selector)})]"
                      f".find(e => e.innerText.trim() === {json.dumps(text)}); if (!el) return null;"
                      f" el.scrollIntoView(); const r = el.getBoundingClientRect();"
                      f" return [r.left + r.width / 2, r.top + r.height / 2]; }})()")
        if not box:
            return False
        self.click(*box)
        return True

    def screenshot(self, path: Path, width: int | None = None) -> Path:
        """The whole page, not only what fits the window: Streamlit scrolls inside its own container, so the
        picture is clipped to that content's height when the window is tall enough (start the browser with a
        tall window, as tools/screenshots.py does), else the window is stretched to it for the capture."""
        # the bottom of the lowest element (the containers themselves are at least as tall as the window)
        # (a collapsed expander's body and empty containers can be taller than anything shown: skipped)
        h = int(self.js("Math.max(...[...document.querySelectorAll('[data-testid=\"stElementContainer\"], "
                        "[data-testid=\"stSidebarUserContent\"], [data-testid=\"stExpander\"]')]"
                        ".filter(e => !e.closest('details:not([open])') && ((e.innerText || '').trim() || "
                        "e.querySelector('svg, canvas, img, table')))"
                        ".map(e => e.getBoundingClientRect().bottom + window.scrollY))") or 1860) + 60
        w = int(width or self.js("window.innerWidth") or 1500)
        inner = int(self.js("window.innerHeight") or 0)
        if h <= inner:
            r = self.call("Page.captureScreenshot", format="png", clip={"x": 0, "y": 0, "width": w, "height": h, "scale": 1})
        else:
            self.call("Emulation.setDeviceMetricsOverride", width=w, height=h, deviceScaleFactor=1, mobile=False)
            time.sleep(1.5)  # vega re-lays out and the sidebar finishes its transition at the new size
            self.settle(timeout=30, quiet=1.0)
            r = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
            self.call("Emulation.clearDeviceMetricsOverride")
        Path(path).write_bytes(base64.b64decode(r["data"]))
        return Path(path)

    def region(self, start: str = "", end: str | None = None, chart: str | None = None, text: str | None = None,
               pad: int = 8) -> dict | None:
        """The part of the page (window coordinates, the main column's width) from the heading that starts with
        `start` to the next heading that starts with `end` (else the end of the page), or — with `chart` — the one
        vega chart with a title containing `chart`, or the one paragraph that starts with `text`, scrolled to the top of Streamlit's own scrolling container
        first (the window itself does not scroll); None when not found."""
        find = ("(() => { const start = %s, chart = %s, text = %s;"
                " return chart ? [...document.querySelectorAll('.vega-embed')].find(v => [...v.querySelectorAll("
                "'.role-title text')].some(t => t.textContent.includes(chart)))"
                " : text ? [...document.querySelectorAll('[data-testid=\"stMarkdownContainer\"] p')].find(e =>"
                " e.innerText.trim().startsWith(text))"
                " : [...document.querySelectorAll('h1, h2, h3')].find(e => e.innerText.trim().startsWith(start)); })()"
                ) % (json.dumps(start), json.dumps(chart), json.dumps(text))
        if not self.js(f"(() => {{ const e = {find}; if (!e) return false; e.scrollIntoView({{block: 'start'}});"
                       " return true; })()"):
            return None
        time.sleep(0.5)
        r = self.js(f"(() => {{ const e = {find}; const end = {json.dumps(end)};"
                    " const main = document.querySelector('[data-testid=\"stMainBlockContainer\"]').getBoundingClientRect();"
                    " const top = e.getBoundingClientRect().top; let bottom = e.getBoundingClientRect().bottom;"
                    f" if (!{json.dumps(bool(chart or text))}) {{"
                    " const n = end ? [...document.querySelectorAll('h1, h2, h3')].find(h => h.innerText.trim()"
                    ".startsWith(end) && h.getBoundingClientRect().top > top) : null;"
                    " bottom = n ? n.getBoundingClientRect().top : Math.max(...[...document.querySelectorAll("
                    "'[data-testid=\"stElementContainer\"]')].filter(c => !c.closest('details:not([open])') && "
                    "((c.innerText || '').trim() || c.querySelector('svg, canvas, img, table')))"
                    ".map(c => c.getBoundingClientRect().bottom)); }"
                    " return {x: Math.max(0, main.left), y: Math.max(0, top), width: main.width,"
                    " height: Math.min(bottom, window.innerHeight) - Math.max(0, top)}; })()")
        if not r:
            return None
        return {"x": r["x"], "y": max(0, r["y"] - pad), "width": r["width"], "height": r["height"] + 2 * pad}

    def shoot(self, clip: dict, path: Path, colours: int = 128) -> Path:
        """A PNG of `clip` (page coordinates), reduced to `colours` colours (Pillow) so a docs image stays small."""
        r = self.call("Page.captureScreenshot", format="png", clip={**clip, "scale": 1}, captureBeyondViewport=True)
        data = base64.b64decode(r["data"])
        try:
            import io

            from PIL import Image

            img = Image.open(io.BytesIO(data)).convert("RGB").quantize(colors=colours, dither=Image.Dither.NONE)
            buf = io.BytesIO()
            img.save(buf, format="PNG", optimize=True)
            data = buf.getvalue()
        except ImportError:
            pass
        Path(path).write_bytes(data)
        return Path(path)

    def close(self) -> None:
        self.ws.close()


def stop(procs: list[subprocess.Popen]) -> None:
    for p in reversed(procs):
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()


# views whose readability the explorer fixed on 2026-12-05 (docs/explorer.md shows them): (file, page, region arguments)
FIXED_VIEWS = [
    ("fixed_leaders.png", "Acceptance", {"text": "Highest mean τ"}),
    ("fixed_slot_curves.png", "Acceptance", {"chart": "Per-slot acceptance"}),
    ("fixed_headroom.png", "Acceptance", {"start": "Headroom closed", "end": "Proposal sources"}),
    ("fixed_sources.png", "Acceptance", {"start": "Proposal sources"}),
    ("fixed_ratio_to_ar.png", "Speed", {"chart": "Tokens/s ratio to AR"}),
    ("fixed_positions.png", "Speed", {"chart": "by where the round starts"}),
    ("fixed_concurrency.png", "Speed", {"start": "Concurrency"}),
    ("fixed_peers_plot.png", "Pipeline plots", {"chart": "benchmark_peers.csv"}),
]


def shoot_fixed(root: Path, out: Path, chromium: str = CHROMIUM) -> dict:
    """Serve the explorer on `root`, open each page of FIXED_VIEWS once and shoot its regions into `out`;
    -> {file: {page, bytes}} (a region not found is left out)."""
    import tempfile
    import urllib.parse

    out.mkdir(parents=True, exist_ok=True)
    done: dict = {}
    with tempfile.TemporaryDirectory(prefix="draftlab-fixed-") as work, \
            explorer(root, Path(work), chromium, width=1500, height=6000) as ex:
        cdp = ex["cdp"]
        for page in dict.fromkeys(p for _, p, _ in FIXED_VIEWS):
            cdp.goto(ex["url"] + "?" + urllib.parse.urlencode({"page": page}))
            time.sleep(0.5)
            cdp.settle(timeout=120)
            for name, p, where in FIXED_VIEWS:
                if p != page:
                    continue
                clip = cdp.region(**where)
                if clip:
                    f = cdp.shoot(clip, out / name)
                    done[name] = {"page": page, "bytes": f.stat().st_size}
    return done


@contextlib.contextmanager
def explorer(root: Path, workdir: Path, chromium: str = CHROMIUM, width: int = 1500, height: int = 1900,
             query: str = "", ready_s: float = 60.0) -> Iterator[dict]:
    """Serve the explorer on `root` and open it in headless Chromium; yields {cdp, url, port, t0, server_s}.
    Both processes are stopped on exit; Chromium's profile lives under `workdir`."""
    port = free_port()
    env = {**os.environ, "DRAFTLAB_ROOT": str(root), "OMP_NUM_THREADS": "1"}
    st_bin = Path(sys.executable).parent / "streamlit"
    t0 = time.time()
    procs = [subprocess.Popen([str(st_bin), "run", str(ROOT / "app/explorer.py"), "--server.headless", "true",
                               "--server.address", "127.0.0.1", "--server.port", str(port),
                               "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"],
                              env=env, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)]
    try:
        if not wait_http(f"http://127.0.0.1:{port}/_stcore/health", ready_s):
            raise RuntimeError("streamlit did not come up")
        server_s = time.time() - t0
        url = f"http://127.0.0.1:{port}/{query}"
        chrome = subprocess.Popen([chromium, *FLAGS, f"--window-size={width},{height}",
                                   f"--user-data-dir={Path(workdir) / 'chromium-profile'}", "--remote-debugging-port=0",
                                   url], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        procs.append(chrome)
        ws, end = None, time.time() + ready_s
        for line in chrome.stderr:
            m = re.search(r"DevTools listening on ws://127\.0\.0\.1:(\d+)/", line)
            if m or time.time() > end:
                ws = m and int(m.group(1))
                break
        if not ws:
            raise RuntimeError("chromium did not open its DevTools port")
        pages: list = []
        while time.time() < end and not pages:
            with urllib.request.urlopen(f"http://127.0.0.1:{ws}/json/list", timeout=5) as r:
                pages = [p for p in json.load(r) if p.get("type") == "page"]
            time.sleep(0.1)
        cdp = CDP(pages[0]["webSocketDebuggerUrl"])
        try:
            yield {"cdp": cdp, "url": f"http://127.0.0.1:{port}/", "port": port, "t0": t0, "server_s": server_s}
        finally:
            cdp.close()
    finally:
        stop(procs)
        import shutil

        shutil.rmtree(Path(workdir) / "chromium-profile", ignore_errors=True)


if __name__ == "__main__":  # python app/browser.py ROOT OUT: the FIXED_VIEWS shots (docs/explorer.md)
    for k, v in shoot_fixed(Path(sys.argv[1]).resolve(), Path(sys.argv[2])).items():
        print(f"{k}: {v['page']}, {v['bytes'] / 1024:.0f} KB")
