"""The explorer in a real browser: `streamlit run` on a free 127.0.0.1 port over a fixture of stage outputs,
headless Debian Chromium driven over its DevTools protocol; waits until the candidate grid and the
accepted-length figure are rendered, asserts on the page, saves screenshots under the test's tmp dir.

Skipped (with the reason) when /usr/bin/chromium is missing; with DRAFTLAB_INSTALL_CHROMIUM=1 the test
first tries `apt-get install -y chromium`."""
from __future__ import annotations

import base64
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-allow-origins=*", "--window-size=1500,1900", "--hide-scrollbars"]


def chromium() -> str:
    if not Path(CHROMIUM).exists() and os.environ.get("DRAFTLAB_INSTALL_CHROMIUM") == "1":
        subprocess.run(["apt-get", "install", "-y", "chromium"], capture_output=True, timeout=600)
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed at /usr/bin/chromium (set DRAFTLAB_INSTALL_CHROMIUM=1 to "
                    "let the test run `apt-get install -y chromium`)")
    return CHROMIUM


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

    def screenshot(self, path: Path) -> Path:
        r = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.write_bytes(base64.b64decode(r["data"]))
        return path

    def close(self):
        self.ws.close()


GRID_READY = ("document.querySelectorAll('table.dl-grid td.dl-cell').length > 0 && "
              "document.querySelectorAll('.vega-embed svg, .vega-embed canvas').length > 0 && "
              "!document.querySelector('[data-testid=\"stStatusWidget\"] [data-testid=\"stStatusWidgetRunningIcon\"]')")


@pytest.fixture
def served(tmp_path):
    sys.path.insert(0, str(Path(__file__).parent))
    from test_app import write_fixture

    browser = chromium()
    root = write_fixture(tmp_path / "outputs")
    port = free_port()
    env = {**os.environ, "DRAFTLAB_ROOT": str(root), "OMP_NUM_THREADS": "1"}
    st_bin = Path(sys.executable).parent / "streamlit"
    t0 = time.time()
    app = subprocess.Popen([str(st_bin), "run", str(ROOT / "app/explorer.py"), "--server.headless", "true",
                            "--server.address", "127.0.0.1", "--server.port", str(port),
                            "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"],
                           env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    procs = [app]
    try:
        assert wait_http(f"http://127.0.0.1:{port}/_stcore/health", 60), "streamlit did not come up"
        server_s = time.time() - t0
        profile = tmp_path / "chromium-profile"
        chrome = subprocess.Popen([browser, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0",
                                   f"http://127.0.0.1:{port}/"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True)
        procs.append(chrome)
        ws = None
        end = time.time() + 60
        for line in chrome.stderr:
            m = re.search(r"DevTools listening on ws://127\.0\.0\.1:(\d+)/", line)
            if m or time.time() > end:
                ws = m and int(m.group(1))
                break
        assert ws, "chromium did not open its DevTools port"
        pages = []
        while time.time() < end and not pages:
            with urllib.request.urlopen(f"http://127.0.0.1:{ws}/json/list", timeout=5) as r:
                pages = [p for p in json.load(r) if p.get("type") == "page"]
            time.sleep(0.1)
        cdp = CDP(pages[0]["webSocketDebuggerUrl"])
        yield {"cdp": cdp, "t0": t0, "server_s": server_s, "dir": tmp_path, "port": port}
        cdp.close()
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp_path / "chromium-profile", ignore_errors=True)


def test_grid_renders_in_chromium(served):
    cdp, t0 = served["cdp"], served["t0"]
    assert cdp.wait(GRID_READY, 90), "the candidate grid never rendered"
    first_render_s = time.time() - t0
    cells = cdp.js("document.querySelectorAll('table.dl-grid td.dl-cell').length")
    text = cdp.js("document.body.innerText")
    assert cells >= 4 * 3
    assert "accepted length" in text and "Accepted length per round" in text
    assert "␣keys" in text and "corrected: greedy" in text
    shot = cdp.screenshot(served["dir"] / "explorer_grid.png")
    assert shot.stat().st_size > 10_000

    # switch rounds: click the right end of the round slider's track (round 2 of 0..2); time until the grid changes
    before = cdp.js("document.querySelector('table.dl-grid').innerHTML")
    box = cdp.js("(() => { const r = document.querySelector('[data-testid=\"stSlider\"] [style*=\"touch-action\"]')"
                 ".getBoundingClientRect(); return [r.right - 2, r.top + r.height / 2]; })()")
    assert box, "no round slider on the page"
    t1 = time.time()
    for kind in ("mousePressed", "mouseReleased"):
        cdp.call("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)
    changed = cdp.wait(f"document.querySelector('table.dl-grid') && "
                       f"document.querySelector('table.dl-grid').innerHTML !== {json.dumps(before)}", 30)
    switch_s = time.time() - t1
    assert changed, "moving the round slider did not change the grid"
    cdp.screenshot(served["dir"] / "explorer_grid_round2.png")
    (served["dir"] / "timings.json").write_text(json.dumps(
        {"server_ready_s": served["server_s"], "first_grid_render_s": first_render_s, "round_switch_s": switch_s}))
    print(f"\n[explorer] server ready {served['server_s']:.2f} s, grid rendered {first_render_s:.2f} s after launch, "
          f"round switch {switch_s:.2f} s; screenshots in {served['dir']}")
