"""A real OpenAI-compatible server for the tests (FastAPI + uvicorn, docs/decisions.md says why not LitServe):
`/v1/models` and non-streaming `/v1/completions` with token-id prompts, answering in vLLM's shape (`token_ids`
with the stop token, `stop_reason`, `prompt_token_ids`) when the request asks `return_token_ids`. The model is the
tests' tiny random target (`conftest.tiny_target`, fp32), generating one request at a time with transformers
`generate` (greedy, or sampled with the request's seed), independent of the project's AR engine.

`/bare/v1/...` is the same server answering like a plain OpenAI endpoint that ignores `return_token_ids`.
Run: python tests/openai_server.py --port P [--name tiny-llama] [--arch llama] [--seed 3] [--eos 1]
     or --target-dir models/target (a prepared target folder, e.g. tiny-random, loaded in fp32 on the CPU)
"""
from __future__ import annotations

import argparse
import contextlib
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running(port: int, *args: str, timeout_s: float = 300.0):
    """This server as a subprocess on 127.0.0.1:`port` (extra `args`: --name, --seed, --target-dir, ...): yields its
    URL once `/v1/models` answers, kills it at the end."""
    import os
    import subprocess

    import requests

    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--port", str(port), *args],
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + timeout_s  # a loaded 2-core machine imports torch + transformers slowly
        while True:
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            assert time.time() < deadline, f"the test server did not come up in {timeout_s:.0f} s"
            try:
                if requests.get(url + "/v1/models", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                time.sleep(0.1)
        yield url
    finally:
        proc.kill()
        proc.wait(timeout=30)


def make_app(target, name: str, token_ids: bool):
    import torch
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    app, lock = FastAPI(), threading.Lock()

    @app.get("/v1/models")
    def models():
        return {"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "tests"}]}

    @app.post("/v1/completions")
    def completions(req: dict):
        prompt = req.get("prompt")
        if req.get("model") not in (None, name):
            return JSONResponse({"error": {"message": f"model {req.get('model')!r} not found"}}, status_code=404)
        if not (isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt)):
            return JSONResponse({"error": {"message": "this test server takes one token-id prompt"}}, status_code=400)
        stop_ids = list(req.get("stop_token_ids") or []) + target.eos_token_ids
        temperature = float(req.get("temperature", 1.0))
        gen = dict(max_new_tokens=int(req.get("max_tokens", 16)), eos_token_id=stop_ids or None,
                   pad_token_id=stop_ids[0] if stop_ids else 0)
        if temperature > 0:
            gen.update(do_sample=True, temperature=temperature, top_p=float(req.get("top_p", 1.0)),
                       top_k=int(req.get("top_k") or 0) or None)
        else:
            gen.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        with lock, torch.no_grad():  # one request at a time: the seed below is the global torch RNG's
            if temperature > 0:
                torch.manual_seed(int(req.get("seed") or 0))
            out = target.model.generate(input_ids=torch.tensor([prompt]), **gen)[0, len(prompt):].tolist()
        cut = next((j + 1 for j, t in enumerate(out) if t in stop_ids), None)
        out = out[:cut] if cut is not None else out
        choice = {"index": 0, "text": "", "logprobs": None, "finish_reason": "stop" if cut is not None else "length",
                  "stop_reason": out[-1] if cut is not None and out[-1] not in target.eos_token_ids else None}
        if token_ids and req.get("return_token_ids"):
            choice.update(token_ids=out, prompt_token_ids=prompt)
        return {"id": f"cmpl-{time.time_ns()}", "object": "text_completion", "created": int(time.time()),
                "model": name, "choices": [choice],
                "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(out),
                          "total_tokens": len(prompt) + len(out)}}

    return app


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--name", default="tiny-llama")
    ap.add_argument("--arch", default="llama")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--eos", type=int, default=1)
    ap.add_argument("--target-dir", default="")
    a = ap.parse_args()
    import torch
    import uvicorn

    torch.set_num_threads(1)
    if a.target_dir:
        from draftlab.verifier.load import load_target

        target = load_target(a.target_dir, "cpu", "float32")
    else:
        from conftest import tiny_target

        target = tiny_target(a.arch, seed=a.seed)
        target.model.generation_config.eos_token_id = a.eos
    app = make_app(target, a.name, token_ids=True)
    app.mount("/bare", make_app(target, a.name, token_ids=False))
    uvicorn.run(app, host="127.0.0.1", port=a.port, log_level="warning")


if __name__ == "__main__":
    main()
