"""The cost plan (issue 21 item 1): `draftlab plan` runs offline on the presets' numbers, fits the gpu profile's
SpecOPD shape in 80 GB with its chunking and refuses it without, reads a config.json over the preset (and says
where they disagree), refuses in one line what does not fit; and its memory model is checked against the peak
memory that the torch profiler measures for three real training steps on CPU (±25%)."""
from __future__ import annotations

import json

import pytest
import torch

from conftest import tiny_target
from test_chunked import peak_bytes
from draftlab.cli import main
from draftlab.errors import ConfigError
from draftlab.plan import memory as M
from draftlab.plan.arch import shapes_of, target_shape
from draftlab.plan.stages import GiB, Device, check_fit, plan

GPU = ["-S", "target=qwen3-8b", "-S", "profile=gpu", "--gpus", "8", "--gpu-mem", "80", "--disk", "100000"]
NO_CHUNKS = ["-S", "specopd.chunk_rows=0", "-S", "specopd.vocab_chunk=0"]


def _plan_json(capsys, *extra):
    rc = main(["plan", *GPU, *extra, "--json"])
    cap = capsys.readouterr()
    return rc, json.loads(cap.out), cap.err


@pytest.mark.parametrize("sets, kind, why", [(["-S", "profile=cpu"], "cpu", "profile cpu, target.device=auto"),
                                             (["-S", "profile=gpu"], "cuda", "profile gpu, target.device=auto"),
                                             (["-S", "profile=gpu", "-S", "target.device=cpu"], "cpu",
                                              "target.device=cpu"),
                                             (["-S", "profile=cpu", "--device", "cuda"], "cuda", "given")])
def test_the_plan_is_for_the_device_the_run_uses_and_says_so(capsys, sets, kind, why):
    """Without --device the plan is for the run's own device (target.device, else its profile's: gpu profiles CUDA, the
    others the CPU), named in its first line; the CPU plan's rates are the CPU preset's."""
    assert main(["plan", *sets, "--disk", "100000"]) == 0
    cap = capsys.readouterr()
    assert cap.err.splitlines()[0].endswith(f"on --device {kind} ({why})"), cap.err
    last = cap.out.splitlines()[-1]
    assert last.startswith("assumptions: ") and ("of the CPU" in last) == (kind == "cpu"), last


def test_qwen3_8b_on_8_gpus_runs_offline_and_fits(capsys):
    rc = main(["plan", *GPU])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "36 layers, hidden 4096, heads 32/8, head_dim 128, intermediate 12288, vocab 151936" in out
    for stage in ("reference", "pretrain_drafter", "specopd", "corrector", "benchmark"):
        assert f"\n{stage} " in out, stage
    assert "assumptions: time = FLOPs / (8 GPU x 989 TFLOP/s x 0.4 efficiency)" in out
    rc, js, _ = _plan_json(capsys)
    spec = next(s for s in js["stages"] if s["stage"] == "specopd")
    assert js["fits"] and 0 < spec["peak_gib"] < 80 and spec["hours"] > 0 and spec["flops"] > 0
    assert "chunk_rows=2048, vocab_chunk=16384" in spec["step"]


def test_the_profile_specopd_shape_fits_with_chunks_and_not_without(capsys):
    from draftlab.cli import validate

    p = validate("params.yaml", [], ["target=qwen3-8b", "profile=gpu"])
    t = target_shape(p.target)
    from draftlab.plan.arch import drafter_shape

    d = drafter_shape(t, p.drafter)
    s = p.specopd
    assert (s.batch_size, s.anchors_per_seq, d.block_size - 1, d.draft_vocab) == (8, 256, 15, 151936)
    # the T=1 evaluation at the whole profile shape (B=8, A=256, W=15, full vocabulary) with the profile's chunks
    L = p.data.max_prompt_tokens + p.reference.max_new_tokens
    ev = M.total(M.specopd_step(t, d, 8, L, 256, 15, s.chunk_rows, s.vocab_chunk, 2, 2, True, grad=False))
    assert ev < 80 * GiB
    p.specopd.chunk_rows = p.specopd.vocab_chunk = 0
    unchunked = next(x for x in plan(p, t, Device(gpus=8)) if x.name == "specopd")
    assert unchunked.peak > 150 * GiB  # the estimate of the unchunked evaluation: well over 150 GB
    rc = main(["plan", *GPU, *NO_CHUNKS])
    cap = capsys.readouterr()
    assert rc == 2 and "\nspecopd " in cap.out  # the table shows what it would need
    err = cap.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: specopd: its largest step") and "specopd.chunk_rows" in err[0]
    assert "more than the 80 GiB of --gpu-mem" in err[0]


def test_ddp_gradient_buckets_are_their_own_term_on_more_than_one_gpu(capsys):
    """DDP keeps a flat bucket copy of the gradients on every rank: with --gpus 2 every training stage's step
    has that term, the size of its trainable gradients (fp32); with --gpus 1 none has it, nor do the stages
    that do not train."""
    from draftlab.cli import validate
    from draftlab.plan.arch import drafter_shape
    from draftlab.plan.stages import corrector_params

    p = validate("params.yaml", [], ["target=qwen3-8b", "profile=gpu"])
    t = target_shape(p.target)
    d = drafter_shape(t, p.drafter)
    key = next(iter(M.ddp_buckets(1, 2)))
    assert M.ddp_buckets(d.params(), 1) == {}
    trainable = {"pretrain_drafter": d.params(), "specopd": d.params(),
                 "corrector": d.params() + corrector_params(t, d, p.corrector, "dcoco")}
    for gpus in (1, 2):
        rc = main(["plan", "-S", "target=qwen3-8b", "-S", "profile=gpu", "--gpus", str(gpus), "--gpu-mem", "200",
                   "--disk", "100000", "--json"])
        stages = {s["stage"]: s for s in json.loads(capsys.readouterr().out)["stages"]}
        assert rc == 0
        for name, n in trainable.items():
            mem = stages[name]["memory_gib"]
            if gpus == 1:
                assert key not in mem, name
            else:
                assert mem[key] == pytest.approx(n * 4 / GiB), name
        assert all(key not in stages[s]["memory_gib"] for s in ("reference", "benchmark"))


def test_bad_input_is_one_line(capsys):
    assert main(["plan", "-S", "target=nosuch"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "target='nosuch' is not a preset; choose one of:" in err[0] and "qwen3-8b" in err[0]
    assert main(["plan", "-S", "target=qwen3-8b", "-S", "profile=gpu", "--gpu-mem", "8", "--disk", "100000"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "more than the 8 GiB of --gpu-mem; lower it with" in err[0]


def test_a_config_json_wins_and_a_disagreement_is_reported(tmp_path, capsys):
    cfg = {"num_hidden_layers": 28, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
           "head_dim": 128, "intermediate_size": 12288, "vocab_size": 151936, "tie_word_embeddings": False}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    rc = main(["plan", *GPU, "-S", "target.source=local", "-S", f"target.path={tmp_path}"])
    out = capsys.readouterr().out
    assert rc == 0 and f"28 layers" in out and f"(from {tmp_path / 'config.json'})" in out
    assert f"warning: target.arch.num_layers=36 in the preset, 28 in {tmp_path / 'config.json'}: using 28" in out


def test_presets_agree_with_their_models(root):
    import yaml

    from draftlab.config import RandomModelConfig, TargetArchConfig, TargetConfig

    def preset(name):  # conf/target/NAME.yaml as the target section (no Hydra: only its own keys matter here)
        raw = yaml.safe_load((root / "conf" / "target" / f"{name}.yaml").read_text())
        arch, rnd = TargetArchConfig(**raw.pop("arch")), RandomModelConfig(**raw.pop("random", {}))
        return TargetConfig(**raw, arch=arch, random=rnd)

    tiny = preset("tiny-random")
    assert target_shape(tiny).notes == ()  # target.arch restates target.random
    tiny.arch.num_layers = 5
    assert target_shape(tiny).notes == ("target.arch.num_layers=5 in the preset, 4 in target.random: using 4",)
    for name, params in (("qwen3-8b", 8.19e9), ("qwen3-4b", 4.02e9), ("llama-3.1-8b", 8.03e9), ("smollm2-135m", 1.35e8)):
        t = target_shape(preset(name), prepared=None)
        assert t.params() == pytest.approx(params, rel=0.01), name  # the models' published sizes


def test_a_cache_larger_than_the_disk_and_a_step_larger_than_the_device_refuse():
    from draftlab.cli import validate

    p = validate("params.yaml", [], ["target=qwen3-8b", "profile=gpu", "pretrain.cache_features=true"])
    stages = plan(p, target_shape(p.target), Device(gpus=8))
    with pytest.raises(ConfigError, match=r"pretrain_drafter: its feature cache .* set pretrain.cache_features=false"):
        check_fit(stages, 80, 10 * GiB)
    with pytest.raises(ConfigError, match=r"more than the 1 GiB of cuda:0; lower it with"):
        check_fit(stages, 1, None, "cuda:0")
    assert check_fit(stages, 80, None) == []


# ---- the memory model against measured peaks ----------------------------------------------------------------


def _resident(*mods, opt=None) -> int:
    """Bytes that exist before the step: weights, buffers and the optimizer's moments (each tensor once)."""
    seen = {}
    for m in mods:
        for x in [*m.parameters(), *m.buffers()]:
            seen[x.data_ptr()] = x.numel() * x.element_size()
    for st in opt.state.values():
        seen.update({v.data_ptr(): v.numel() * v.element_size() for v in st.values() if torch.is_tensor(v)})
    return sum(seen.values())


def _measured(step, target, drafter, opt) -> int:
    step()  # the first step creates the AdamW moments; the measured one is a steady-state step
    opt.zero_grad(set_to_none=True)
    return _resident(target, drafter, opt=opt) + peak_bytes(step)


def _pretrain(V, B, L, A, S, chunk):
    from draftlab.config import PretrainConfig
    from draftlab.drafter import DFlashDrafter, DrafterDesign, arch_from_target
    from draftlab.training.ce import DrafterCE
    from draftlab.training.module import TrainModule

    target = tiny_target("llama", vocab=V)
    torch.manual_seed(0)
    d = DFlashDrafter.from_target(arch_from_target(target, DrafterDesign(S, 2, [], 1, 0)), target)
    ce = DrafterCE(d, PretrainConfig(chunk_rows=chunk, batch_size=B, anchors_per_seq=A, cache_features=False), target)
    opt = TrainModule(ce, 10).configure_optimizers()["optimizer"]
    g = torch.Generator().manual_seed(0)
    anc = torch.stack([torch.randperm(L - S - 4, generator=g)[:A].sort().values + 2 for _ in range(B)])
    batch = {"ids": torch.randint(3, V, (B, L), generator=g), "ctx_valid": torch.ones(B, L, dtype=torch.bool),
             "anchors": anc, "anchor_valid": torch.ones(B, A, dtype=torch.bool), "seq_len": torch.full((B,), L)}

    def step():  # the stage's training step (DrafterCE.step's loss) + backward + AdamW
        opt.zero_grad(set_to_none=True)
        ce.loss_parts(batch, dense=False)["loss"].backward()
        opt.step()
    t, ds = shapes_of(target, d)
    return _measured(step, target, d, opt), M.total(M.pretrain_step(t, ds, B, L, A, chunk, 4, 4, fused=False))


def _specopd(V, B, L, A, W, chunk, vchunk):
    from draftlab.drafter import DFlashDrafter, DrafterDesign, arch_from_target
    from draftlab.specopd.terms import specopd_terms
    from draftlab.specopd.tree import sample_branch_anchors

    target = tiny_target("llama", vocab=V)
    torch.manual_seed(0)
    d = DFlashDrafter.from_target(arch_from_target(target, DrafterDesign(W + 1, 1, [], 1, 0)), target)
    opt = torch.optim.AdamW(d.parameters())
    anc = torch.stack([sample_branch_anchors(L, 4, A, torch.Generator().manual_seed(b)) for b in range(B)])
    b = {"ids": torch.randint(3, V, (B, L), generator=torch.Generator().manual_seed(0)), "seq_len": torch.full((B,), L),
         "anchors": anc, "seq": torch.arange(B), "anchor_valid": torch.ones_like(anc, dtype=torch.bool)}

    def step():  # one SpecOPD update: terms (trunk, blocks, sampling, tree, overlaps) + backward + AdamW
        opt.zero_grad(set_to_none=True)
        t = specopd_terms(target, d, b, W, 1.0, chunk_rows=chunk, vocab_chunk=vchunk)
        (t.numerator / t.count).backward()
        opt.step()
    t, ds = shapes_of(target, d)
    return _measured(step, target, d, opt), M.total(M.specopd_step(t, ds, B, L, A, W, chunk, vchunk, 4, 4, fused=False))


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("case,run", [
    ("pretrain, whole logits (V=4096)", lambda: _pretrain(4096, 2, 64, 8, 5, 0)),
    ("pretrain, row chunks of 16, more blocks (V=512)", lambda: _pretrain(512, 2, 96, 16, 5, 16)),
    ("specopd update, whole logits", lambda: _specopd(4096, 2, 40, 6, 4, 0, 0)),
    ("specopd update, row + vocabulary chunks", lambda: _specopd(4096, 2, 40, 6, 4, 12, 512)),
])
def test_predicted_peak_memory_is_within_25_percent_of_the_measured(case, run):
    measured, predicted = run()
    assert 0.75 <= predicted / measured <= 1.25, (case, measured, predicted)
