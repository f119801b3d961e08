"""The reference stage's `openai` engine: prompts already templated by the project (`encode_prompt`, the ids the
other engines see) go as token ids (`"prompt": [int, ...]`) to `/v1/completions` on one or more OpenAI-compatible
servers (vLLM, SGLang), with the sampling settings passed explicitly and `return_token_ids: true`; the generated
token ids come back in `choices[0].token_ids` (both engines; docs/references.md names the source files read).

`resolve_models` checks every server's `/v1/models` against `reference.server_model`; `OpenAIEngine.generate`
spreads a batch over servers x concurrency requests in flight and returns one `Answer` per prompt (tokens, finish
reason, which server and model answered); `parse_completion` turns one response body into the project's row
convention (the response ends with the EOS token when the model stopped on it). Bad answers are one-line
`DraftlabError`s naming the server and what to change. HTTP through `requests` (installed with mlflow / dvc).
"""
from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass

from draftlab.errors import DraftlabError

COMPLETIONS = "/v1/completions"
MODELS = "/v1/models"
RETRY_STATUS = (429, 500, 502, 503, 504)  # busy or restarting: worth another try
HOW_TO = "docs/references.md"


@dataclass
class Answer:
    tokens: list[int]  # generated ids; ends with an EOS id when finish == "eos"
    finish: str  # eos | length
    server: str  # base URL that answered
    model: str  # model name in the response


def _short(x, n: int = 200) -> str:
    s = str(x).strip().splitlines()
    return (s[0] if s else type(x).__name__)[:n]


def parse_completion(body, eos: set[int], max_tokens: int, where: str) -> tuple[list[int], str, str]:
    """(tokens, finish, model) from one non-streaming /v1/completions body (one prompt, n=1).
    vLLM returns the stop token inside `token_ids` (`stop_reason` = a stop_token_ids id, None for the model's EOS);
    SGLang returns `output_ids` there with `matched_stop` = the id it stopped on, which may be trimmed from the ids:
    a stop on one of the target's EOS ids is put back, so rows end with it as the project's engines write them."""
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise DraftlabError(f"{where} answered without choices ({_short(body)}); is it an OpenAI-compatible "
                            f"/v1/completions endpoint?")
    c = choices[0]
    ids = c.get("token_ids")
    if ids is None:
        raise DraftlabError(f"{where} returned no token ids (choices[0].token_ids is missing); the openai engine needs "
                            f"a server that honours return_token_ids (vLLM, SGLang; {HOW_TO})")
    if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids):
        raise DraftlabError(f"{where} returned choices[0].token_ids that are not token ids: {_short(ids)}")
    finish, stop = c.get("finish_reason"), c.get("stop_reason", c.get("matched_stop"))
    cut = next((j + 1 for j, t in enumerate(ids) if t in eos), None)
    tokens = list(ids[:cut]) if cut is not None else list(ids)
    if cut is not None:
        how = "eos"
    elif finish == "stop" and isinstance(stop, int) and not isinstance(stop, bool) and stop in eos:
        tokens.append(stop)  # SGLang trims the matched stop token from output_ids
        how = "eos"
    elif finish == "length" or len(tokens) == max_tokens:  # max_tokens, or the server's context window
        how = "length"
    else:
        raise DraftlabError(f"{where} stopped after {len(tokens)} of max_tokens={max_tokens} tokens (finish_reason="
                            f"{finish!r}, stop={stop!r}) on no EOS id of the target {sorted(eos)}: does it serve the "
                            f"same model (reference.server_model), without stop strings?")
    if len(tokens) > max_tokens:
        raise DraftlabError(f"{where} returned {len(tokens)} tokens for max_tokens={max_tokens}")
    return tokens, how, str(body.get("model", ""))


class _Server:
    """One base URL: a `requests` session per thread, retries with back-off on connection errors and busy replies."""

    def __init__(self, url: str, timeout_s: float, retries: int, backoff_s: float):
        self.url, self.timeout, self.retries, self.backoff = url.rstrip("/"), timeout_s, retries, backoff_s
        self._local = threading.local()

    def _session(self):
        import requests

        if not hasattr(self._local, "s"):
            self._local.s = requests.Session()
        return self._local.s

    def call(self, method: str, path: str, payload: dict | None = None) -> dict:
        import requests

        where, last = f"server {self.url}", ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            try:
                r = self._session().request(method, self.url + path, json=payload, timeout=self.timeout)
            except requests.Timeout:
                last = f"no answer within reference.timeout_s={self.timeout:g}"
                continue
            except requests.RequestException as e:
                last = f"cannot connect ({_short(e, 160)})"
                continue
            if r.status_code in RETRY_STATUS:
                last = f"HTTP {r.status_code} {_short(r.text)}"
                continue
            if r.status_code != 200:
                raise DraftlabError(f"{where} refused {method} {path}: HTTP {r.status_code} {_short(r.text, 300)}")
            try:
                return r.json()
            except ValueError:
                raise DraftlabError(f"{where} answered {path} with a body that is not JSON: {_short(r.text)}") from None
        raise DraftlabError(f"{where} failed {method} {path} after {self.retries + 1} tries: {last}; start it, or fix "
                            f"reference.servers (finished batches are kept: a re-run resumes)")


def resolve_models(servers: list[_Server], expected: str) -> dict[str, str]:
    """The model name to request from each server: `expected` (reference.server_model), which every server must
    list at /v1/models, or, when empty, the one model each lists (all servers the same)."""
    names: dict[str, str] = {}
    for s in servers:
        body = s.call("GET", MODELS)
        data = body.get("data") if isinstance(body, dict) else None
        listed = [d.get("id") for d in data if isinstance(d, dict)] if isinstance(data, list) else []
        if not listed:
            raise DraftlabError(f"server {s.url} lists no model at {MODELS} ({_short(body)})")
        if expected:
            if expected not in listed:
                raise DraftlabError(f"server {s.url} serves {listed}, not reference.server_model={expected!r}; point "
                                    f"reference.servers at servers of that model or set reference.server_model")
            names[s.url] = expected
        elif len(listed) > 1:
            raise DraftlabError(f"server {s.url} serves several models {listed}; name one in reference.server_model")
        else:
            names[s.url] = listed[0]
    if len(set(names.values())) > 1:
        raise DraftlabError(f"the servers serve different models ({names}); set reference.server_model to the "
                            f"target's, or list only servers of one model in reference.servers")
    return names


class OpenAIEngine:
    """Sends token-id prompts to the servers; `concurrency` requests in flight per server, taken from one queue."""

    def __init__(self, servers: list[str], eos: list[int], server_model: str = "", concurrency: int = 8,
                 timeout_s: float = 600.0, retries: int = 3, temperature: float = 0.0, top_p: float = 1.0,
                 top_k: int = 0, backoff_s: float = 1.0):
        if not servers:
            raise DraftlabError("reference.servers is empty; list the servers' base URLs for reference.engine=openai")
        self.servers = [_Server(u, timeout_s, retries, backoff_s) for u in servers]
        self.eos, self.concurrency = set(eos), concurrency
        self.sampling = {"temperature": temperature, "top_p": top_p}
        if top_k > 0:
            self.sampling["top_k"] = top_k
        self.models = resolve_models(self.servers, server_model)

    def payload(self, ids: list[int], max_tokens: int, model: str, seed: int | None) -> dict:
        """One request: greedy (temperature 0) or sampled settings explicit, stop only on the target's EOS ids,
        the generated ids asked back (vLLM and SGLang: `return_token_ids`)."""
        p = {"model": model, "prompt": list(ids), "max_tokens": max_tokens, **self.sampling, "n": 1, "stream": False,
             "echo": False, "stop_token_ids": sorted(self.eos), "ignore_eos": False, "skip_special_tokens": True,
             "return_token_ids": True}
        if seed is not None and self.sampling["temperature"] > 0:
            p["seed"] = seed
        return p

    def generate(self, batch: list[list[int]], max_tokens: int, seeds: list[int] | None = None) -> list[Answer]:
        """One Answer per prompt of `batch`, in order (seeds: per-prompt sampling seeds, used at temperature > 0)."""
        out: list[Answer | None] = [None] * len(batch)
        errors: list[BaseException] = []
        todo: queue.Queue = queue.Queue()
        for i in range(len(batch)):
            todo.put(i)

        def work(s: _Server) -> None:
            while not errors:
                try:
                    i = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    body = s.call("POST", COMPLETIONS, self.payload(batch[i], max_tokens, self.models[s.url],
                                                                    seeds[i] if seeds else None))
                    tokens, finish, model = parse_completion(body, self.eos, max_tokens, f"server {s.url}")
                    out[i] = Answer(tokens, finish, s.url, model or self.models[s.url])
                except BaseException as e:  # noqa: BLE001 (handed to the caller's thread)
                    errors.append(e)
                    return

        n = min(len(batch), len(self.servers) * self.concurrency)
        threads = [threading.Thread(target=work, args=(self.servers[k % len(self.servers)],), daemon=True)
                   for k in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return out  # type: ignore[return-value]


def agreement(first: list[list[int]], second: list[list[int]], threshold: float) -> dict:
    """Greedy agreement of prompts answered twice: the share answered token for token alike, and the mean share
    of the longer answer that the two share as a common prefix. Engines in bf16 are not batch-invariant, so this
    is a reading (`below_threshold`), not a failure."""
    same, prefix = 0, 0.0
    for a, b in zip(first, second):
        same += a == b
        k = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        prefix += k / max(len(a), len(b), 1)
    n = len(first)
    rate = same / n if n else None
    return {"sample": n, "identical": same, "rate": rate, "mean_prefix_share": prefix / n if n else None,
            "threshold": threshold, "below_threshold": rate is not None and rate < threshold}
