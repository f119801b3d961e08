"""Serving-engine recipe: export the trained plain drafter for vLLM and SGLang, start each
engine with the DFlash options its source reads, and time a fixed prompt set at concurrency 1..32 against
plain AR on the same engine.

    python tools/serve_bench.py --dry                       # CI: export + validate, print the exact commands
    python tools/serve_bench.py --engine vllm --out DIR     # on a GPU machine with vLLM installed

`--dry` exports the drafter (`draftlab export ... --for ENGINE`) into `--out`/export-ENGINE, validates the
folder against that loader's rules (`draftlab.drafter.serving.check_export`), and prints, per engine, the
command for the AR arm and for the DFlash arm. An engine the drafter cannot be served by (SGLang with a
reduced draft vocabulary) is reported in one line and skipped.

Without `--dry` (UNTESTED here: this repository's machines have neither a GPU nor vLLM / SGLang; see
docs/export.md): for each engine and arm it starts the printed command, waits for `/health`, sends every
prompt (templated by the project, as token ids) to `/v1/completions` greedily at each concurrency, stops the
server, and writes `--out`/serve_bench.json: rows like the benchmark's concurrency rows (`requests`,
`tokens`, `wall_s`, `tokens_per_s`, `tokens_per_s_stream`) marked `engine: vllm|sglang`, `arm: ar|dflash`,
`concurrency`. The engine's own acceptance statistics are not read (their metrics endpoints differ).

Only the standard library is imported at module level; the library (export, prompts, templates) is called
from `draftlab`, never copied.
"""
from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ENGINES = ("vllm", "sglang")
CONCURRENCY = (1, 2, 4, 8, 16, 32)


def engine_commands(engine: str, target: str, draft_dir: str, block_size: int, port: int) -> dict[str, list[str]]:
    """The AR and DFlash server commands of `engine` (the options their sources read; docs/export.md)."""
    if engine == "vllm":
        base = ["vllm", "serve", target, "--port", str(port), "--dtype", "bfloat16", "--seed", "0"]
        spec = {"method": "dflash", "model": draft_dir, "num_speculative_tokens": block_size - 1}
        return {"ar": base, "dflash": base + ["--speculative-config", json.dumps(spec)]}
    if engine == "sglang":
        base = [sys.executable, "-m", "sglang.launch_server", "--model-path", target, "--port", str(port),
                "--dtype", "bfloat16", "--random-seed", "0"]
        return {"ar": base, "dflash": base + ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path",
                                              draft_dir, "--speculative-num-draft-tokens", str(block_size)]}
    raise SystemExit(f"error: --engine {engine!r}: choose from {', '.join(ENGINES)}")


def export_and_check(drafter: str, target: str, out: Path, engine: str, dtype: str) -> tuple[Path, dict]:
    """Export for `engine` and validate the folder (raises DraftlabError with one line)."""
    from draftlab.drafter.serving import check_export, export_folder

    folder = export_folder(drafter, out / f"export-{engine}", engine, target, dtype, force=True)  # its own folder
    return folder, check_export(folder, engine)


# ---- the run (not exercised here: no GPU, no engine) ---------------------------------------------


def _post(url: str, body: dict, timeout: float) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def _wait_healthy(port: int, proc: subprocess.Popen, timeout: float) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise SystemExit(f"error: the server exited with {proc.returncode} before it was healthy")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(2)
    raise SystemExit(f"error: the server on port {port} was not healthy within {timeout:.0f} s")


def _prompt_ids(target: str, suite: str, n: int) -> list[list[int]]:
    from transformers import AutoTokenizer

    from draftlab.data.suites import load_suite
    from draftlab.data.templates import encode_prompt

    tok = AutoTokenizer.from_pretrained(target)
    return [encode_prompt(tok, p.text) for p in load_suite(suite)[:n]]


def run_arm(engine: str, arm: str, cmd: list[str], port: int, prompts: list[list[int]], max_new: int,
            timeout: float) -> list[dict]:
    proc = subprocess.Popen(cmd)
    try:
        _wait_healthy(port, proc, timeout)
        model = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=30).read())["data"][0]["id"]
        url = f"http://127.0.0.1:{port}/v1/completions"
        one = lambda ids: _post(url, {"model": model, "prompt": ids, "max_tokens": max_new, "temperature": 0.0,  # noqa: E731
                                      "ignore_eos": True}, timeout)
        rows = []
        for c in CONCURRENCY:
            batch = (prompts * ((c + len(prompts) - 1) // len(prompts)))[: max(c, len(prompts))]
            t0 = time.perf_counter()
            with ThreadPoolExecutor(c) as pool:
                outs = list(pool.map(one, batch))
            wall = time.perf_counter() - t0
            tokens = sum(int(o["usage"]["completion_tokens"]) for o in outs)
            rows.append({"engine": engine, "arm": arm, "concurrency": c, "requests": len(batch), "tokens": tokens,
                         "wall_s": round(wall, 6), "tokens_per_s": round(tokens / wall, 6),
                         "tokens_per_s_stream": round(tokens / wall / c, 6), "model": model})
        return rows
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--drafter", default="models/drafter/pretrained", help="our trained plain drafter folder")
    ap.add_argument("--target", default="models/target", help="the target's local model folder")
    ap.add_argument("--engine", choices=(*ENGINES, "both"), default="both")
    ap.add_argument("--out", default="metrics/serve_bench", help="exports and serve_bench.json go here")
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    ap.add_argument("--port", type=int, default=8300)
    ap.add_argument("--suite", default="mt-bench", help="the fixed prompt set (a suite name)")
    ap.add_argument("--prompts", type=int, default=32, help="how many prompts of the suite")
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--timeout-s", type=float, default=900.0, help="server start-up and per-request timeout")
    ap.add_argument("--dry", action="store_true", help="export + validate, print the commands, start nothing")
    a = ap.parse_args(argv)
    from draftlab.errors import DraftlabError

    out = Path(a.out)
    engines = ENGINES if a.engine == "both" else (a.engine,)
    plans = {}
    for engine in engines:
        try:
            folder, cfg = export_and_check(a.drafter, a.target, out, engine, a.dtype)
        except DraftlabError as e:
            print(f"{engine}: skipped: {e}")
            continue
        vd = cfg.get("draft_vocab_size")
        print(f"{engine}: export {folder} valid (block_size {cfg['block_size']}, taps "
              f"{cfg['dflash_config']['target_layer_ids']}, {cfg['dtype']}"
              f"{f', draft vocabulary {vd} via d2t' if vd else ''})")
        plans[engine] = engine_commands(engine, str(Path(a.target).resolve()), str(folder.resolve()),
                                        int(cfg["block_size"]), a.port)
        for arm, cmd in plans[engine].items():
            print(f"{engine} {arm}: {shlex.join(cmd)}")
    if not plans:
        print("error: no engine can serve this drafter (see the lines above)", file=sys.stderr)
        return 2
    if a.dry:
        return 0
    prompts = _prompt_ids(a.target, a.suite, a.prompts)
    rows = []
    for engine, cmds in plans.items():
        for arm, cmd in cmds.items():
            rows += run_arm(engine, arm, cmd, a.port, prompts, a.max_new_tokens, a.timeout_s)
    from draftlab.io import atomic_write

    atomic_write(out / "serve_bench.json", lambda p: p.write_text(json.dumps(rows, indent=1) + "\n"))
    print(f"wrote {out / 'serve_bench.json'} ({len(rows)} rows)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
