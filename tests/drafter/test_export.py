"""`draftlab export --for dflash|vllm|sglang`: the folder follows each loader's rules (config keys, every
tensor name and shape, dtype), round-trips through the authors' `dflash` loader, carries vLLM's reduced
draft vocabulary as d2t offsets + the sliced LM head, and refuses what the format cannot carry in one line."""
from __future__ import annotations

import json

import pytest
import torch

from conftest import tiny_target
from draftlab.drafter.checkpoint import save_drafter
from draftlab.drafter.model import DFlashDrafter, DrafterDesign, arch_from_target
from draftlab.drafter.refformat import reference_state
from draftlab.drafter.serving import (DTYPES, ENGINES, check_export, check_format, export_for, facts_from_folder,
                                      facts_from_target, read_export)
from draftlab.errors import DraftlabError

S = 4


target = pytest.fixture(scope="module", name="target")(lambda: tiny_target("qwen3", layers=5))  # taps 1 and 3 inside


@pytest.fixture(scope="module")
def target_folder(target, tmp_path_factory):
    out = tmp_path_factory.mktemp("target")
    target.model.save_pretrained(out)  # config.json + model.safetensors (tied embeddings: no lm_head.weight)
    return out


def _drafter(t, vocab=None, **kw) -> DFlashDrafter:
    torch.manual_seed(0)
    arch = arch_from_target(t, DrafterDesign(block_size=S, num_layers=2, target_layer_ids=[1, 3], mask_token_id=7,
                            draft_vocab_size=0 if vocab is None else len(vocab), **kw))
    d = DFlashDrafter.from_target(arch, t, vocab).eval()
    with torch.no_grad():
        for p in d.parameters():  # distinct values everywhere (norm weights too), so a swapped tensor shows
            p.add_(torch.randn_like(p) * 0.1)
    return d


def _vocab(t):
    g = torch.Generator().manual_seed(1)
    return torch.randperm(t.vocab_size, generator=g)[:40]  # not sorted: offsets of both signs


def test_cli_choices_are_the_serving_modules():
    from draftlab import cli

    assert cli.EXPORT_ENGINES == ENGINES and cli.EXPORT_DTYPES == tuple(DTYPES)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_round_trip_through_the_authors_loader(target, target_folder, tmp_path, dtype):
    """The dflash package's own `DFlashDraftModel.from_pretrained` reads back every weight: equal in fp32,
    to bf16 rounding in bf16; and its config is the drafter's."""
    dflash = pytest.importorskip("dflash.model", reason="dflash==0.1.0 (requirements-nodeps.txt) is not installed")
    d = _drafter(target)
    export_for(d, tmp_path / "ref", "dflash", facts_from_folder(target_folder), dtype)
    ref = dflash.DFlashDraftModel.from_pretrained(str(tmp_path / "ref")).eval()
    assert ref.block_size == S and list(ref.target_layer_ids) == [1, 3] and ref.mask_token_id == 7
    ours, theirs = reference_state(d), {k: v for k, v in ref.state_dict().items() if "rotary" not in k}
    assert ours.keys() == theirs.keys()
    for k, v in ours.items():
        got = theirs[k].float()
        if dtype == "float32":
            assert torch.equal(got, v), k
        else:  # one bf16 rounding: relative error <= 2^-8
            assert torch.allclose(got, v, rtol=2 ** -8, atol=0), k
            assert torch.equal(got, v.to(torch.bfloat16).float()), k
    if dtype == "float32":  # the authors' decoding loop on the exported folder: our engine's greedy tokens
        from draftlab.arms.peers import dflash_reference_generate
        from draftlab.decoding import SpeculativeEngine, generate_ar

        prompt = [3, 14, 15, 92, 65, 35]
        ar = generate_ar(target, [prompt], 16, eos_ids=[]).tokens[0]
        tokens, _ = dflash_reference_generate(ref, target, prompt, 16, [])
        assert tokens == SpeculativeEngine(target, d).generate([prompt], 16, eos_ids=[]).tokens[0] == ar


def test_config_and_tensors_follow_the_loader_rules(target, target_folder, tmp_path):
    facts = facts_from_folder(target_folder)
    cases = [(e, _drafter(target)) for e in ENGINES] + [("vllm", _drafter(target, _vocab(target)))]
    for i, (engine, d) in enumerate(cases):
        out = export_for(d, tmp_path / f"x{i}", engine, facts)
        cfg, tensors = read_export(out)
        assert cfg["architectures"] == ["DFlashDraftModel"] and cfg["model_type"] == "qwen3"
        assert cfg["block_size"] == S and cfg["num_target_layers"] == target.num_layers == 5
        assert cfg["dflash_config"] == {"target_layer_ids": [1, 3], "mask_token_id": 7, "block_size": S}
        assert cfg["max_position_embeddings"] == target.config.max_position_embeddings  # the target's, not a constant
        assert "auto_map" not in cfg and "format" not in cfg and cfg["dtype"] == "bfloat16"
        assert {v.dtype for k, v in tensors.items() if k != "d2t"} == {torch.bfloat16}
        assert check_format(cfg, tensors, engine) == [] and check_export(out, engine) == cfg
        reduced = bool(d.arch.draft_vocab_size)
        assert ("d2t" in tensors) == ("lm_head.weight" in tensors) == reduced == ("draft_vocab_size" in cfg)
        if reduced:
            assert cfg["draft_vocab_size"] == 40 and tuple(tensors["lm_head.weight"].shape) == (40, target.hidden_size)
    # each rule bites: a broken copy of the last (vLLM, reduced-vocabulary) export
    def problems(edit_cfg=None, edit_t=None, engine="vllm"):
        c, t = json.loads(json.dumps(cfg)), dict(tensors)
        (edit_cfg or (lambda c: None))(c)
        (edit_t or (lambda t: None))(t)
        return check_format(c, t, engine)

    assert any("architectures" in p for p in problems(lambda c: c.update(architectures=["Qwen3ForCausalLM"])))
    assert any("auto_map" in p for p in problems(lambda c: c.update(auto_map={"AutoModel": "x"}), engine="sglang"))
    assert any("eagle_aux" in p for p in problems(lambda c: c.update(eagle_aux_hidden_state_layer_ids=[2, 4])))
    assert any("target_layer_ids" in p for p in problems(lambda c: c["dflash_config"].update(target_layer_ids=[1, 5])))
    assert any("fc.weight" in p for p in problems(lambda c: c["dflash_config"].update(target_layer_ids=[1, 2, 3])))
    assert any("mask_token_id" in p for p in problems(lambda c: c["dflash_config"].pop("mask_token_id")))
    assert any("max_position_embeddings" in p for p in problems(lambda c: c.pop("max_position_embeddings")))
    assert any("'tap_norms.0.weight'" in p for p in problems(edit_t=lambda t: t.update({"tap_norms.0.weight": t["norm.weight"]})))
    assert any("'norm.weight' is missing" in p for p in problems(edit_t=lambda t: t.pop("norm.weight")))
    assert any("dtypes" in p for p in problems(edit_t=lambda t: t.update({"fc.weight": t["fc.weight"].float()})))
    assert any("distinct target ids" in p for p in problems(edit_t=lambda t: t.update(d2t=-torch.arange(len(t["d2t"])))))
    assert any("no d2t" in p for p in problems(engine="sglang"))


def test_d2t_offsets_map_each_draft_index_to_its_target_id(target, target_folder, tmp_path):
    """vLLM reads d2t as offsets (target id = index + d2t[index]) and scatters the logits of its own
    draft-vocabulary head into the full vocabulary: done here the same way, it gives our drafter's logits."""
    vocab = _vocab(target)
    d = _drafter(target, vocab)
    _, tensors = read_export(export_for(d, tmp_path / "v", "vllm", facts_from_folder(target_folder), "float32"))
    d2t, head = tensors["d2t"], tensors["lm_head.weight"]
    assert d2t.dtype == torch.int64 and (d2t != 0).any()
    assert torch.equal(torch.arange(len(vocab)) + d2t, vocab)
    h = torch.randn(6, target.hidden_size)
    full = torch.full((6, target.vocab_size), float("-inf"))
    full[:, torch.arange(len(vocab)) + d2t] = h @ head.T  # the engine's scatter into the target vocabulary
    ours = torch.full_like(full, float("-inf"))
    ours[:, vocab] = d.logits(h)
    assert torch.allclose(full, ours, atol=1e-5)
    assert torch.equal(full.argmax(-1), vocab[d.logits(h).argmax(-1)])


def test_refusals_are_one_line(target, target_folder, tmp_path):
    facts = facts_from_folder(target_folder)
    cases = [(_drafter(target, tap_norm=True), "vllm", "drafter.tap_norm=true"),
             (_drafter(target, _vocab(target)), "sglang", "drafter.draft_vocab_size=0"),
             (_drafter(target, _vocab(target)), "dflash", "drafter.draft_vocab_size=0")]
    for i, (d, engine, needle) in enumerate(cases):
        with pytest.raises(DraftlabError, match=needle) as e:
            export_for(d, tmp_path / f"no{i}", engine, facts)
        assert "\n" not in str(e.value) and not (tmp_path / f"no{i}").exists()
    other = facts_from_target(tiny_target("qwen3", layers=4))
    with pytest.raises(DraftlabError, match="pass --target the drafter's own target"):
        export_for(_drafter(target), tmp_path / "no", "vllm", other)
    with pytest.raises(DraftlabError, match="--dtype"):
        export_for(_drafter(target), tmp_path / "no", "vllm", facts, "int8")
    with pytest.raises(DraftlabError, match="no config.json"):
        facts_from_folder(tmp_path / "nowhere")
    with pytest.raises(DraftlabError, match="not loadable by sglang"):
        export_for(_drafter(target, _vocab(target)), tmp_path / "v", "vllm", facts)
        check_export(tmp_path / "v", "sglang")


def test_cli_export(target, target_folder, tmp_path, capsys):
    from draftlab.cli import main

    save_drafter(_drafter(target, _vocab(target)), tmp_path / "small")
    save_drafter(_drafter(target, tap_norm=True), tmp_path / "tapnorm")
    assert main(["export", str(tmp_path / "small"), str(tmp_path / "v"), "--for", "vllm",
                 "--target", str(target_folder)]) == 0
    assert check_export(tmp_path / "v", "vllm")["dtype"] == "bfloat16"
    capsys.readouterr()
    for src, engine, needle in (("small", "sglang", "drafter.draft_vocab_size=0"), ("tapnorm", "vllm", "drafter.tap_norm")):
        assert main(["export", str(tmp_path / src), str(tmp_path / "x"), "--for", engine,
                     "--target", str(target_folder)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0]
    assert main(["export", str(tmp_path / "small"), str(tmp_path / "x"), "--for", "vllm",
                 "--target", str(tmp_path / "none")]) == 2
    assert "--target" in capsys.readouterr().err


def test_serve_bench_dry_exports_validates_and_prints_the_commands(target, target_folder, tmp_path, capsys):
    """tools/serve_bench.py --dry (the command line of draftlab.measure.serving_engines, imported from its path)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("serve_bench", Path(__file__).resolve().parents[2] / "tools" / "serve_bench.py")
    sb = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sb)
    save_drafter(_drafter(target), tmp_path / "full")
    save_drafter(_drafter(target, _vocab(target)), tmp_path / "small")
    args = ["--target", str(target_folder), "--dry", "--port", "8411"]
    capsys.readouterr()
    assert sb.main(["--drafter", str(tmp_path / "full"), "--out", str(tmp_path / "o1"), *args]) == 0
    lines = capsys.readouterr().out.splitlines()
    cmd = {tuple(ln.split(": ", 1)[0].split()): ln.split(": ", 1)[1] for ln in lines if ln.split(":")[0].count(" ") == 1}
    draft = str((tmp_path / "o1" / "export-vllm").resolve())
    spec_cfg = json.dumps({"method": "dflash", "model": draft, "num_speculative_tokens": S - 1})
    assert cmd[("vllm", "dflash")].startswith(f"vllm serve {target_folder.resolve()} --port 8411")
    assert cmd[("vllm", "dflash")].endswith(f"--speculative-config '{spec_cfg}'")
    assert "--speculative" not in cmd[("vllm", "ar")] and "--speculative" not in cmd[("sglang", "ar")]
    assert cmd[("sglang", "dflash")].endswith(f"--speculative-algorithm DFLASH --speculative-draft-model-path "
                                              f"{(tmp_path / 'o1' / 'export-sglang').resolve()} "
                                              f"--speculative-num-draft-tokens {S}")
    for engine in ("vllm", "sglang"):
        assert check_export(tmp_path / "o1" / f"export-{engine}", engine)["block_size"] == S
    # a reduced draft vocabulary: vLLM via d2t, SGLang skipped in one line
    assert sb.main(["--drafter", str(tmp_path / "small"), "--out", str(tmp_path / "o2"), *args]) == 0
    out = capsys.readouterr().out
    assert "draft vocabulary 40 via d2t" in out and "sglang: skipped: " in out and "drafter.draft_vocab_size=0" in out
    assert not (tmp_path / "o2" / "export-sglang").exists()
    save_drafter(_drafter(target, tap_norm=True), tmp_path / "tapnorm")
    assert sb.main(["--drafter", str(tmp_path / "tapnorm"), "--out", str(tmp_path / "o3"), *args]) == 2
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(ln.startswith(f"{e}: skipped: ") and "drafter.tap_norm=true" in ln
                                   for ln, e in zip(lines, ("vllm", "sglang")))


def test_mask_token_string_for_sglang(target, target_folder, tmp_path):
    """SGLang versions that look the MASK up by string (`dflash_config.mask_token`) get the string of our MASK
    id when the target's tokenizer has one; an id beyond the tokenizer gets none (the id alone is written)."""
    import dataclasses

    from draftlab.drafter.serving import _token_string
    from draftlab.verifier.load import random_tokenizer

    tok = random_tokenizer("qwen3")
    im = tok.convert_tokens_to_ids("<|im_start|>")
    assert _token_string(tok, im) == "<|im_start|>" and _token_string(tok, len(tok) + 5) is None
    facts = dataclasses.replace(facts_from_folder(target_folder), token=lambda i: "<|mask|>" if i == 7 else None)
    cfg = check_export(export_for(_drafter(target), tmp_path / "s", "sglang", facts), "sglang")
    assert cfg["dflash_config"]["mask_token"] == "<|mask|>" and cfg["dflash_config"]["mask_token_id"] == 7
    _, tensors = read_export(tmp_path / "s")
    cfg["dflash_config"]["mask_token"] = ""
    assert any("mask_token must be" in p for p in check_format(cfg, tensors, "sglang"))


def test_head_rows_come_from_the_right_tensor(target, target_folder, tmp_path):
    """Tied target: the embedding; untied: `lm_head.weight` (never the embedding in its place)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    assert torch.equal(facts_from_folder(target_folder).head(), target.lm_head.weight)
    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                      head_dim=8, intermediate_size=32, max_position_embeddings=512, tie_word_embeddings=False)
    m = Qwen3ForCausalLM(cfg)
    m.save_pretrained(tmp_path / "untied")
    facts = facts_from_folder(tmp_path / "untied")
    assert facts.max_position_embeddings == 512 and torch.equal(facts.head(), m.lm_head.weight.detach())
    assert not torch.equal(facts.head(), m.model.embed_tokens.weight.detach())
