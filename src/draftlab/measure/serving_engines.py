"""Serving engines (vLLM, SGLang) timed on our exported drafter against plain AR on the same engine
(tools/serve_bench.py is the command line; docs/export.md).

`engine_commands` gives each engine's AR and DFlash server commands (the DFlash options their sources read);
`export_and_check` exports the plain drafter for an engine and validates the folder against that loader's rules;
`run_arm` starts one server, sends a fixed prompt set (templated by the project, as token ids, `prompt_ids`) to
`/v1/completions` greedily at concurrency 1..32 and returns rows like the benchmark's concurrency rows
(`requests`, `tokens`, `wall_s`, `tokens_per_s`, `tokens_per_s_stream`) marked `engine` and `arm`. The run is
UNTESTED here (no GPU, no vLLM / SGLang); the engine's own acceptance statistics are not read. Problems raise
DraftlabError with one line.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from draftlab.errors import ConfigError, DraftlabError

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
    raise ConfigError(f"--engine {engine!r}: choose from {', '.join(ENGINES)}")


def export_and_check(drafter: str, target: str, out: Path, engine: str, dtype: str) -> tuple[Path, dict]:
    """Export for `engine` and validate the folder (raises DraftlabError with one line)."""
    from draftlab.drafter.serving import check_export, export_folder

    folder = export_folder(drafter, out / f"export-{engine}", engine, target, dtype, force=True)  # its own folder
    return folder, check_export(folder, engine)


# ---- the run (not exercised by the tests: no GPU, no engine) ---------------------------------


def post(url: str, body: dict, timeout: float) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def wait_healthy(port: int, proc: subprocess.Popen, timeout: float) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise DraftlabError(f"the server exited with {proc.returncode} before it was healthy")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(2)
    raise DraftlabError(f"the server on port {port} was not healthy within {timeout:.0f} s")


def prompt_ids(target: str, suite: str, n: int) -> list[list[int]]:
    """The first `n` prompts of `suite`, templated by the project with the target's tokenizer, as token ids."""
    from transformers import AutoTokenizer

    from draftlab.data.suites import load_suite
    from draftlab.data.templates import encode_prompt

    tok = AutoTokenizer.from_pretrained(target)
    return [encode_prompt(tok, p.text) for p in load_suite(suite)[:n]]


def run_arm(engine: str, arm: str, cmd: list[str], port: int, prompts: list[list[int]], max_new: int,
            timeout: float) -> list[dict]:
    """Start `cmd`, wait for its /health, send every prompt greedily at each concurrency (CONCURRENCY), stop the
    server: one row per concurrency (the benchmark's concurrency row keys, marked with engine and arm)."""
    proc = subprocess.Popen(cmd)
    try:
        wait_healthy(port, proc, timeout)
        model = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=30).read())["data"][0]["id"]
        url = f"http://127.0.0.1:{port}/v1/completions"
        one = lambda ids: post(url, {"model": model, "prompt": ids, "max_tokens": max_new, "temperature": 0.0,  # noqa: E731
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
