"""draftlab.toy.train / evaluate: a few training steps write a folder that reloads with the Auto classes and
decodes; the loss reads answer tokens only; batches are a function of the step (a resumed run sees the same
data and ends with the same weights); the schedule ends at whichever limit comes first; the batched greedy
loop equals a one-row full recompute."""
from __future__ import annotations

import json

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from draftlab.data.templates import encode_prompt
from draftlab.toy import evaluate as E
from draftlab.toy.tasks import FamilySpec, WorldConfig, examples
from draftlab.toy.tokenizer import build_tokenizer, chat_ids
from draftlab.toy.train import WORLD_FILE, Batches, TrainConfig, build_model, lr_at, run, train

WORLD = WorldConfig(families=(FamilySpec("copy", 1.0), FamilySpec("distinct", 1.0, (48, 56), (8, 16))))
TINY = dict(layers=2, hidden=32, heads=2, kv_heads=2, intermediate=64, batch=4, bucket=2, warmup=2,
            curve_every_s=0, eval_n=2, checkpoint_s=0)


def test_smoke_writes_a_loadable_folder(tmp_path):
    cfg = TrainConfig(max_steps=3, **TINY)
    report = run(WORLD, cfg, tmp_path / "target")
    assert report["steps"] == 3 and report["stopped_by"] == "max_steps"
    assert set(report["eval"]["families"]) == {"copy", "distinct"}
    assert report["params"] > 0 and report["flops_per_token"]["ratio_1_layer"] > 0
    folder = tmp_path / "target"
    doc = json.loads((folder / WORLD_FILE).read_text())
    assert doc["world_hash"] == WORLD.config_hash() and WorldConfig.from_dict(doc["world"]) == WORLD
    assert TrainConfig.from_dict(doc["train"]) == cfg
    model = AutoModelForCausalLM.from_pretrained(folder)
    tok = AutoTokenizer.from_pretrained(folder)
    assert model.config.eos_token_id == tok.eos_token_id and model.config.tie_word_embeddings
    ids, _ = encode_prompt(tok, examples(WORLD, "eval", 1)[0].prompt)
    out = model.generate(torch.tensor([ids]), max_new_tokens=4, do_sample=False)
    assert out.shape[1] == len(ids) + 4 or int(out[0, -1]) == tok.eos_token_id
    assert not (tmp_path / "target.work").exists()  # the checkpoint goes once the folder is written


def test_loss_reads_the_answer_only():
    tok = build_tokenizer(WORLD)
    b = Batches(WORLD, tok, TrainConfig(**TINY))
    ids, loss_at, real = b(0)
    assert ids.shape[0] == 4 and real == int((ids != tok.pad_token_id).sum())
    for row, at in zip(ids, loss_at):
        scored = row[1:][at[:-1]].tolist()  # the tokens the loss predicts
        assert scored[-1] == tok.eos_token_id and tok.convert_tokens_to_ids("assistant") not in scored
        n = len(scored)
        assert row[:int((row != tok.pad_token_id).sum())].tolist()[-n:] == scored
    again = Batches(WORLD, tok, TrainConfig(**TINY))
    assert torch.equal(again(3)[0], b(3)[0])  # a pure function of the step


def test_resume_gives_the_same_weights(tmp_path):
    straight, _, _ = train(WORLD, TrainConfig(max_steps=4, **TINY), None, log=lambda s: None)
    work = tmp_path / "work"
    train(WORLD, TrainConfig(max_steps=4, **TINY), work, log=lambda s: None)  # leaves a checkpoint at step 4
    state = json.loads((work / "ckpt" / "state.json").read_text())
    assert state["step"] == 4
    # a run of 2 steps, then the same run resumed to 4
    work2 = tmp_path / "work2"
    train(WORLD, TrainConfig(max_steps=2, **TINY), work2, log=lambda s: None)
    s2 = json.loads((work2 / "ckpt" / "state.json").read_text())
    s2["key"] = state["key"]  # the step cap is part of the recipe; pretend the first leg was the 4-step run's
    (work2 / "ckpt" / "state.json").write_text(json.dumps(s2))
    resumed, _, rep = train(WORLD, TrainConfig(max_steps=4, **TINY), work2, log=lambda s: None)
    assert rep["resumed"] == 1 and rep["steps"] == 4
    a, b = straight.state_dict(), resumed.state_dict()
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_schedule_ends_at_the_first_limit():
    cfg = TrainConfig(lr=1.0, min_lr_ratio=0.1, warmup=10, max_steps=1000, budget_s=100.0)
    assert lr_at(cfg, 0, 0.0) == 0.1 and lr_at(cfg, 9, 0.0) == 1.0
    assert abs(lr_at(cfg, 1000, 0.0) - 0.1) < 1e-9 and abs(lr_at(cfg, 20, 100.0) - 0.1) < 1e-9
    assert lr_at(cfg, 500, 10.0) == lr_at(cfg, 100, 50.0)  # progress = the larger fraction


def test_greedy_loop_equals_full_recompute():
    tok = build_tokenizer(WORLD)
    model = build_model(tok, TrainConfig(**TINY)).eval()
    prompts = [chat_ids(tok, e.prompt) for e in examples(WORLD, "eval", 3)]
    got = E.greedy_answers(model, prompts, tok.eos_token_id, tok.pad_token_id, 6)
    for p, g in zip(prompts, got):
        ids, ref = list(p), []
        for _ in range(6):
            n = int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax())
            if n == tok.eos_token_id:
                break
            ref.append(n)
            ids.append(n)
        assert g == ref
