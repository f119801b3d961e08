"""The reference stage's openai engine against a real OpenAI-compatible server process on 127.0.0.1
(tests/openai_server.py: FastAPI + uvicorn serving the tiny random target): rows match the other engines'
schema plus server / model, greedy tokens are the same across two requests and equal the project's AR engine
(fp32), the sharded writer resumes; response bodies in vLLM's and SGLang's exact shapes parse; bad input is one line."""
from __future__ import annotations


import pytest

from conftest import tiny_target
from openai_server import free_port, running
from draftlab.data.references import EncodedPrompt
from draftlab.data.suites import Prompt
from draftlab.errors import ConfigError, DraftlabError
from draftlab.recipes.reference.openai_engine import OpenAIEngine, agreement, parse_completion
from draftlab.recipes.reference.recipe import generate_references

pytestmark = pytest.mark.usefixtures("one_thread")

NAME, EOS = "tiny-llama", 30  # the tiny target answers two of the ten prompts with 30 first
ARGS = dict(max_new_tokens=6, batch_size=4, progress=False)


@pytest.fixture(scope="module")
def server():
    """The test server, started once for the module and killed at its end."""
    with running(free_port(), "--name", NAME, "--seed", "3", "--eos", str(EOS)) as url:
        yield url


@pytest.fixture(scope="module")
def target():
    t = tiny_target("llama", seed=3)  # the server's model
    t.model.generation_config.eos_token_id = EOS
    return t


def _prompts() -> list[EncodedPrompt]:
    lengths = [3, 11, 5, 8, 1, 6, 9, 2, 4, 7]
    return [EncodedPrompt(Prompt(id=f"p{i}", suite="sharegpt", text=""), "train" if i % 3 else "heldout",
                          [(7 * i + j) % 90 + 2 for j in range(n)]) for i, n in enumerate(lengths)]


def test_openai_rows_are_deterministic_resumable_and_equal_the_ar_engine(server, target, tmp_path):
    prompts = _prompts()
    client = OpenAIEngine([server], target.eos_token_ids, concurrency=3, retries=0)
    assert client.models == {server: NAME}
    rows, stats = generate_references(target, prompts, engine="openai", client=client, shards=tmp_path / "a",
                                      agreement_sample=4, **ARGS)
    ar_rows, _ = generate_references(target, prompts, **ARGS)
    assert [r["prompt_id"] for r in rows] == [p.prompt.id for p in prompts]
    assert set(rows[0]) == set(ar_rows[0]) | {"server", "server_model"}
    assert all(r["server"] == server and r["server_model"] == NAME for r in rows)
    assert all(1 <= len(r["response_ids"]) <= 6 and r["finish_reason"] in ("eos", "length") for r in rows)
    assert {r["finish_reason"] for r in rows} == {"eos", "length"}  # both endings occur in this sample
    # the server's transformers `generate` (one prompt per request) == the project's AR engine (batched), fp32
    assert [r["response_ids"] for r in rows] == [r["response_ids"] for r in ar_rows]
    assert [r["finish_reason"] for r in rows] == [r["finish_reason"] for r in ar_rows]
    a = stats["agreement"]
    assert (a["sample"], a["identical"], a["rate"], a["below_threshold"]) == (4, 4, 1.0, False)
    assert stats["servers"] == [{"url": server, "rows": 10}] and stats["server_models"] == [NAME] and stats["batches"] == 3
    # a second run asks again (fresh work folder): the same greedy tokens
    again, _ = generate_references(target, prompts, engine="openai", client=client, shards=tmp_path / "b", **ARGS)
    assert [r["response_ids"] for r in again] == [r["response_ids"] for r in rows]
    # the sharded writer as for the other engines: a re-run on the first folder reads every batch back
    (tmp_path / "a" / "batch-00001.parquet").unlink()
    resumed, st = generate_references(target, prompts, engine="openai", client=client, shards=tmp_path / "a", **ARGS)
    assert (st["batches_resumed"], st["batches_generated"]) == (2, 1) and resumed == rows


def test_request_sends_token_ids_and_explicit_greedy_settings(server, target):
    client = OpenAIEngine([server], [EOS, 5], concurrency=1, retries=0, top_k=0)
    p = client.payload([4, 5, 6], 7, NAME, seed=11)
    assert p["prompt"] == [4, 5, 6] and p["model"] == NAME and p["max_tokens"] == 7
    assert (p["temperature"], p["top_p"], p["n"], p["stream"], p["echo"]) == (0.0, 1.0, 1, False, False)
    assert p["stop_token_ids"] == sorted([EOS, 5]) and p["ignore_eos"] is False and p["return_token_ids"] is True
    assert "seed" not in p and "top_k" not in p  # greedy: no sampling seed, no top-k
    sampled = OpenAIEngine([server], [EOS], concurrency=1, retries=0, temperature=0.7, top_k=20)
    q = sampled.payload([4], 3, NAME, seed=11)
    assert (q["temperature"], q["top_k"], q["seed"]) == (0.7, 20, 11)


def test_sampled_references_ask_each_prompt_with_its_own_seed(server, target, tmp_path):
    """At T > 0 each request carries a seed from (reference.seed, prompt id): a re-run asks the same, so the
    sampled rows repeat; another reference.seed asks other seeds. No agreement reading for sampled runs."""
    prompts = _prompts()
    client = OpenAIEngine([server], target.eos_token_ids, concurrency=2, retries=0, temperature=1.0)
    kw = dict(ARGS, temperature=1.0, engine="openai", client=client, agreement_sample=4)
    a, st = generate_references(target, prompts, seed=0, **kw)
    b, _ = generate_references(target, prompts, seed=0, **kw)
    c, _ = generate_references(target, prompts, seed=1, **kw)
    assert [r["response_ids"] for r in a] == [r["response_ids"] for r in b] != [r["response_ids"] for r in c]
    assert "agreement" not in st


# response bodies as vLLM and SGLang write them (docs/references.md names the source files and commits read)
VLLM_EOS = {"id": "cmpl-8f3", "object": "text_completion", "created": 1764590000, "model": "Qwen/Qwen3-8B",
            "choices": [{"index": 0, "text": " Paris.", "logprobs": None, "finish_reason": "stop",
                         "stop_reason": None, "token_ids": [12095, 13, 151645], "prompt_logprobs": None,
                         "prompt_token_ids": [151644, 872, 198], "routed_experts": None}],
            "service_tier": None, "system_fingerprint": None,
            "usage": {"prompt_tokens": 3, "total_tokens": 6, "completion_tokens": 3, "prompt_tokens_details": None},
            "kv_transfer_params": None, "ec_transfer_params": None, "metrics": None}
VLLM_LENGTH = {**VLLM_EOS, "choices": [{**VLLM_EOS["choices"][0], "finish_reason": "length", "text": " Paris is",
                                        "token_ids": [12095, 374, 279, 6722]}]}
VLLM_STOP_ID = {**VLLM_EOS, "choices": [{**VLLM_EOS["choices"][0], "stop_reason": 151643,
                                         "token_ids": [12095, 151643]}]}
SGLANG_EOS = {"id": "a1b2c3", "object": "text_completion", "created": 1764590000, "model": "default",
              "choices": [{"index": 0, "text": " Paris.", "logprobs": None, "finish_reason": "stop",
                           "matched_stop": 151645, "token_ids": [12095, 13], "prompt_token_ids": [151644, 872, 198]}],
              "usage": {"prompt_tokens": 3, "total_tokens": 5, "completion_tokens": 2, "reasoning_tokens": 0},
              "metadata": {"weight_version": "default"}}
SGLANG_NO_IDS = {**SGLANG_EOS, "choices": [{k: v for k, v in SGLANG_EOS["choices"][0].items()
                                            if k not in ("token_ids", "prompt_token_ids")}]}


def test_parse_vllm_and_sglang_completion_bodies():
    eos = {151645, 151643}
    assert parse_completion(VLLM_EOS, eos, 8, "s") == ([12095, 13, 151645], "eos", "Qwen/Qwen3-8B")
    assert parse_completion(VLLM_LENGTH, eos, 4, "s") == ([12095, 374, 279, 6722], "length", "Qwen/Qwen3-8B")
    assert parse_completion(VLLM_STOP_ID, eos, 8, "s")[:2] == ([12095, 151643], "eos")
    # SGLang may trim the matched stop id from output_ids: it is put back, as the project's engines keep it
    assert parse_completion(SGLANG_EOS, eos, 8, "s") == ([12095, 13, 151645], "eos", "default")
    with pytest.raises(DraftlabError, match="returned no token ids"):
        parse_completion(SGLANG_NO_IDS, eos, 8, "server x")
    with pytest.raises(DraftlabError, match="on no EOS id of the target"):  # stopped on another model's EOS
        parse_completion({**VLLM_EOS, "choices": [{**VLLM_EOS["choices"][0], "token_ids": [12095, 2]}]}, eos, 8, "s")
    with pytest.raises(DraftlabError, match="without choices"):
        parse_completion({"object": "error", "message": "boom"}, eos, 8, "s")
    with pytest.raises(DraftlabError, match="5 tokens for max_tokens=4"):
        parse_completion({**VLLM_LENGTH, "choices": [{**VLLM_LENGTH["choices"][0], "token_ids": [3] * 5}]}, eos, 4, "s")


def test_agreement_reading():
    a = agreement([[1, 2, 3], [4, 5], [6]], [[1, 2, 3], [4, 9], [6]], threshold=0.9)
    assert (a["sample"], a["identical"], a["below_threshold"]) == (3, 2, True)
    assert a["rate"] == pytest.approx(2 / 3) and a["mean_prefix_share"] == pytest.approx((1 + 0.5 + 1) / 3)


def _one_line(e) -> str:
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_bad_input_is_one_line(server, target):
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(DraftlabError, match="cannot connect") as e:
        OpenAIEngine([dead], [EOS], retries=1, backoff_s=0.01)
    assert dead in _one_line(e) and "reference.servers" in _one_line(e)
    with pytest.raises(DraftlabError, match="returned no token ids") as e:
        OpenAIEngine([server + "/bare"], [EOS], retries=0).generate([[3, 4]], 4)
    _one_line(e)
    with pytest.raises(DraftlabError, match="not reference.server_model='other-model'") as e:
        OpenAIEngine([server], [EOS], server_model="other-model", retries=0)
    assert NAME in _one_line(e)
    from draftlab.config import ReferenceConfig

    with pytest.raises(ConfigError, match="reference.servers is empty but reference.engine=openai"):
        ReferenceConfig(engine="openai").check("reference")
    with pytest.raises(ConfigError, match="http:// or https://"):
        ReferenceConfig(engine="openai", servers=["gpu1:8000"]).check("reference")
