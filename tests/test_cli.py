"""The `draftlab` console script: check / compose / exp validate in one line, decode marks each token's
fate (accepted, corrected, rejected, the target's own) from the pipeline's outputs, explore serves the
explorer on 127.0.0.1. Runs the installed script (`make install` puts it in the venv)."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import torch

from draftlab.bench.marks import Mark, legend, mark_tokens, render, seed_counts
from draftlab.decoding.common import GenerationResult, RoundRecord

DRAFTLAB = Path(sys.executable).parent / "draftlab"


def cli(*args: str, cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_WAIT_POLICY="PASSIVE")
    return subprocess.run([str(DRAFTLAB), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def one_line(r: subprocess.CompletedProcess) -> str:
    lines = [line for line in (r.stdout + r.stderr).splitlines() if line.strip()]
    assert len(lines) == 1, r.stdout + r.stderr
    return lines[0]


def test_console_script_is_installed():
    assert DRAFTLAB.exists(), "run `make install` (pip install -e .) to get the draftlab console script"


def test_check_compose_and_exp_answer_in_one_line(root, tmp_path):
    ok = cli("check", cwd=root)
    assert ok.returncode == 0 and re.match(r"ok: params.yaml \(target smollm2-135m, profile cpu; \d+ arms; suites: ",
                                           one_line(ok))
    cases = [
        (["check", "benchmark.arms=[ar,dflash,nosuch]"], "error: benchmark.arms names unknown arm 'nosuch'; known arms: ar,"),
        (["check", "-S", "pretrain.lrr=1"], "error: unknown key 'pretrain.lrr' (did you mean 'lr'?)"),
        (["check", "-S", "profile=nosuch"], "error: profile='nosuch' is not a preset; choose one of: cpu, cpu-long"),
        (["exp", "-S", "pretrain.lrr=1", "-n", "typo"], "error: unknown key 'pretrain.lrr'"),
        (["exp", "-S", "profile=nosuch"], "error: profile='nosuch' is not a preset"),
        (["check", "--params", str(tmp_path / "none.yaml")], f"error: {tmp_path / 'none.yaml'} not found"),
    ]
    for args, start in cases:
        r = cli(*args, cwd=root)
        assert r.returncode == 2 and one_line(r).startswith(start), (args, r.stdout + r.stderr)
    dry = cli("exp", "--dry", "-S", "benchmark/arms=two", "-n", "two-arms", cwd=root)
    assert dry.returncode == 0 and one_line(dry) == "ok: dvc exp run -S benchmark/arms=two -n two-arms"
    composed = cli("compose", "profile=smoke", cwd=root)
    assert composed.returncode == 0 and "name: smoke" in composed.stdout
    same = subprocess.run([sys.executable, "-m", "draftlab.config", "compose", "profile=smoke"], cwd=root,
                          capture_output=True, text=True)
    assert same.stdout == composed.stdout
    bad = cli("decode", "--arm", "dflash", cwd=root)  # argparse: --prompt is required
    assert bad.returncode == 2 and "the following arguments are required: --prompt" in bad.stderr


def test_overrides_as_users_spell_them(root):
    """A Hydra user's positional `profile=gpu` is one line pointing to -S; every command says what it applied;
    `check` verifies the target's source without loading it."""
    for cmd in (["check", "profile=gpu"], ["plan", "target=qwen3-8b"], ["check", "benchmark/arms=two"]):
        r = cli(*cmd, cwd=root)
        key, value = cmd[1].split("=")
        assert r.returncode == 2 and one_line(r) == (
            f"error: '{cmd[1]}' picks a preset of conf/{key}/, which recomposes the params: write it as -S {cmd[1]} "
            "(a positional key=value sets one key of params.yaml, e.g. pretrain.lr=0.003)"), r.stdout + r.stderr
    ok = cli("check", "pretrain.lr=0.003", "benchmark.max_new_tokens=32", cwd=root)
    assert ok.returncode == 0 and one_line(ok).startswith(
        "ok: params.yaml + pretrain.lr=0.003 benchmark.max_new_tokens=32 (target smollm2-135m"), ok.stdout
    both = cli("check", "-S", "profile=smoke", "pretrain.lr=0.003", cwd=root)
    assert both.returncode == 0 and one_line(both).startswith("ok: conf/ + -S profile=smoke + pretrain.lr=0.003 ("), both.stdout
    bad = cli("check", "target.package=nosuchpkg", cwd=root)
    assert bad.returncode == 2 and one_line(bad).startswith(
        "error: target.package=nosuchpkg, target.gguf_file=SmolLM2-135M-Instruct.Q4_1.gguf: package 'nosuchpkg' is not "
        "installed"), bad.stderr
    bad = cli("check", "target.source=local", "target.path=/nonexistent", cwd=root)
    assert bad.returncode == 2 and one_line(bad).startswith("error: target.path=/nonexistent holds no config.json"), bad.stderr
    composed = cli("compose", "profile=smoke", cwd=root)
    assert composed.stderr.strip() == "composed conf/ -S profile=smoke"
    assert cli("compose", "-S", "profile=smoke", cwd=root).stdout == composed.stdout  # -S and positional: the same
    dry = cli("exp", "--dry", "profile=smoke", "-n", "s", cwd=root)  # positional = -S for exp
    assert dry.returncode == 0 and one_line(dry) == "ok: dvc exp run -S profile=smoke -n s"
    v = cli("--version", cwd=root)
    assert v.returncode == 0 and re.fullmatch(r"draftlab \S+\n", v.stdout)


# ---- decode: the marks ----------------------------------------------------------------------------------------


def _result() -> GenerationResult:
    """Output 10 11 12 13 14 15: round 1 (slot 0 = output 0) accepts 2 proposals, the second one corrected (the
    drafter's argmax was 7), its third proposal 99 rejected, the target says 13; round 2 accepts 1 of 3."""
    rec = lambda off, acc, props, argmax: RoundRecord(  # noqa: E731
        stream=torch.tensor([0]), offset=torch.tensor([off]), accepted=torch.tensor([acc]),
        proposals=torch.tensor([props]), topk_ids=torch.tensor([[[a] for a in argmax]]))
    return GenerationResult(tokens=[[10, 11, 12, 13, 14, 15]], finish_reason=["length"], t_done=[1.0], prefill_s=0.1,
                            wall_s=1.0, phases=(), round_times=torch.zeros(2, 0), round_streams=torch.ones(2),
                            accepted=[[2, 1]], records=[rec(0, 2, [11, 12, 99], [11, 7, 99]), rec(3, 1, [14, 98, 97], [14, 98, 97])],
                            block_size=4)


def test_marks_and_rendering():
    res = _result()
    marks = mark_tokens(res, corrects=True)
    assert marks == [Mark(10, "target"), Mark(11, "accepted"), Mark(12, "corrected"), Mark(99, "rejected"),
                     Mark(13, "target"), Mark(14, "accepted"), Mark(98, "rejected"), Mark(15, "target")]
    assert [m.kind for m in mark_tokens(res, corrects=False)][2] == "accepted"  # DFlash's own samples are no corrections
    dec = lambda ids: "".join(chr(ord("a") + i % 26) for i in ids)  # noqa: E731
    assert render(marks, dec, color=False) == "k[l]{m}(~v~)n[o](~u~)p"
    colored = render(marks, dec, color=True)
    assert "\x1b[32ml\x1b[0m" in colored and "\x1b[1;36mm\x1b[0m" in colored and "\x1b[9;31mv\x1b[0m" in colored
    assert re.sub(r"\x1b\[[0-9;]*m", "", colored) == "klmvnoup"



def test_seed_marks_in_decode():
    """A seeded drafter's rounds (`seed_kept`): accepted tokens from a seeded slot are marked by what the drafter
    did with the seed; the legend names the seed kinds only for such output."""
    res = _result()
    res.records[0].extras["seed_kept"] = torch.tensor([[1, 0, -1]])  # slot 1 kept its seed, slot 2 changed it
    res.records[1].extras["seed_kept"] = torch.tensor([[-1, -1, -1]])  # no seed
    kinds = [m.kind for m in mark_tokens(res, corrects=False)]
    assert kinds == ["target", "seed-kept", "seed-changed", "rejected", "target", "accepted", "rejected", "target"]
    assert [m.kind for m in mark_tokens(res, corrects=True)][2] == "corrected"  # a correction outranks the seed mark
    dec = lambda ids: "".join(chr(ord("a") + i % 26) for i in ids)  # noqa: E731
    assert render(mark_tokens(res, corrects=False), dec, color=False) == "k«l»‹m›(~v~)n[o](~u~)p"
    assert seed_counts(res) == (2, 1) and seed_counts(_result()) is None
    assert "«accepted, the drafter kept the slot's seed»" in legend(False, seeded=True)
    assert "seed" not in legend(False) and "\x1b[33m" in legend(True, seeded=True)


# ---- decode: end to end on a tiny pipeline -------------------------------------------------------------------


@pytest.fixture(scope="module")
def outputs(root, tmp_path_factory) -> Path:
    """A folder with the outputs decode reads: a prepared tiny-random target, a (random) pretrained drafter
    and a dcoco corrector checkpoint, and the params.yaml that names them."""
    from draftlab.config import CorrectorConfig
    from draftlab.corrector.families import build_corrector
    from draftlab.drafter import DFlashDrafter, arch_from_target
    from draftlab.drafter.checkpoint import save_drafter
    from draftlab.verifier.load import load_target

    wd = tmp_path_factory.mktemp("decode")
    params = subprocess.run([sys.executable, "-m", "draftlab.config", "compose", "target=tiny-random", "profile=smoke",
                             "tracking.enabled=false", "drafter.block_size=4", "drafter.draft_vocab_size=0", "pld.num_tokens=3"], cwd=root, capture_output=True, text=True, check=True).stdout
    (wd / "params.yaml").write_text(params)
    r = subprocess.run([sys.executable, str(root / "stages" / "prepare_target.py")], cwd=wd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    t = load_target(wd / "models" / "target", "cpu", "float32")
    torch.manual_seed(0)
    d = DFlashDrafter.from_target(arch_from_target(t, 4, 1, [0, 1], t.vocab_size - 1), t).eval()
    with torch.no_grad():  # a larger init so the random drafter has opinions (some acceptances)
        for p in d.parameters():
            p.mul_(3.0)
    save_drafter(d, wd / "models" / "drafter" / "pretrained")
    torch.manual_seed(0)  # the seeded drafter (the dflash-seeded arms), copying its seeds at initialisation
    arch = arch_from_target(t, 4, 1, [0, 1], t.vocab_size - 1, seed="lookup", seed_bias=8.0)
    save_drafter(DFlashDrafter.from_target(arch, t).eval(), wd / "models" / "drafter" / "seeded")
    save_drafter(d, wd / "models" / "corrector" / "dcoco" / "drafter")
    corr = build_corrector(CorrectorConfig(k=4, dim=8, hidden=16), d, "dcoco")
    corr.save(wd / "models" / "corrector" / "dcoco" / "corrector",
              info={"path_rule": "greedy", "lam": 0.75, "kernels": "torch", "k": 4})
    return wd


@pytest.mark.parametrize("arm", ["dflash", "dcoco", "ar", "dflash-seeded-cut"])
def test_decode_prints_marked_text_tau_and_speed(outputs, arm):
    r = cli("decode", "--root", str(outputs), "--arm", arm, "--prompt", "Tell me a story.", "--max-new-tokens", "12",
            "--color", "never", cwd=outputs)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.rstrip("\n").split("\n")
    legend, text, stats = lines[0], "\n".join(lines[1:-1]), lines[-1]  # the text may hold newlines
    assert legend.startswith("legend: ")
    m = re.fullmatch(rf"arm {arm} · T=0 · 12 tokens in (\d+) (rounds|steps) · τ ([\d.]+) · ([\d.]+) tokens/s .*", stats)
    assert m, stats
    rounds, tau = int(m.group(1)), float(m.group(3))
    if arm == "ar":
        assert tau == 1.0 and rounds == 12 and "[" not in text
    elif arm.startswith("dflash-seeded"):  # seed marks: in the legend and the stats line (tokens «kept» ‹changed›)
        assert 1.0 <= tau <= 4 and rounds <= 12
        assert "the drafter kept the slot's seed" in legend and re.search(r"seeded slots \d+, the drafter kept \d+", stats)
    else:
        assert 1.0 <= tau <= 4 and rounds <= 12
        assert ("[" in text) == (tau > 1.0)  # accepted draft tokens are bracketed
    r = cli("decode", "--root", str(outputs), "--arm", "nosuch", "--prompt", "x", cwd=outputs)
    assert r.returncode == 2 and one_line(r).startswith("error: unknown arm 'nosuch'; known arms: ar, dflash,")


@pytest.mark.parametrize("sig, code, name", [(signal.SIGINT, 130, "Ctrl-C")])  # SIGTERM: the stage's test
def test_an_interrupted_decode_prints_the_text_so_far_and_one_line(outputs, sig, code, name):
    """Ctrl-C while decoding: the text decoded so far, a count, and one line; no traceback. (SIGTERM takes the same
    path with exit 143: tests/training/test_resume_training.py sends it to a running stage.)"""
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_WAIT_POLICY="PASSIVE", DRAFTLAB_DECODE_PROGRESS="1")
    p = subprocess.Popen([str(DRAFTLAB), "decode", "--root", str(outputs), "--arm", "dflash", "--prompt",
                          "Tell me a story.", "--max-new-tokens", "100000", "--color", "never"], cwd=outputs, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = p.stderr.readline()  # printed just before the generation starts
    assert first.startswith("decoding up to 100000 tokens with dflash"), first
    time.sleep(2.0)  # some rounds
    p.send_signal(sig)
    out, err = p.communicate(timeout=60)
    assert p.returncode == code, (p.returncode, out[-2000:], err[-3000:])
    assert "Traceback" not in out + err, err[-3000:]
    m = re.search(r"\[(\d+) tokens decoded in [\d.]+ s before the interrupt\]", out)
    assert m and int(m.group(1)) > 0, out[-2000:]
    assert out.index(m.group(0)) > 0  # the text came first
    assert [line for line in err.splitlines() if line.strip()] == [
        f"interrupted ({name}): draftlab decode stopped; nothing was half-written (files are written under a temp "
        "name and renamed)"], err


def test_decode_names_a_corrupt_checkpoint_and_its_stage(outputs, tmp_path):
    import shutil

    wd = tmp_path / "copy"
    shutil.copytree(outputs, wd)
    (wd / "dvc.yaml").write_text("stages:\n  pretrain_drafter:\n    cmd: x\n    outs:\n      - models/drafter/pretrained\n")
    w = wd / "models" / "drafter" / "pretrained" / "model.safetensors"
    w.write_bytes(w.read_bytes()[: w.stat().st_size // 2])  # truncated
    r = cli("decode", "--root", str(wd), "--arm", "dflash", "--prompt", "x", cwd=wd)
    line = one_line(r)
    assert r.returncode == 2 and line.startswith("error: models/drafter/pretrained/model.safetensors is not a readable "
                                                 "safetensors file"), line
    assert line.endswith("stage 'pretrain_drafter' writes it: rebuild with `dvc repro -f -s pretrain_drafter` "
                         "(or restore the last version: dvc checkout models/drafter/pretrained)")


def test_a_drafter_of_another_kind_or_shape_is_one_line(outputs, tmp_path):
    """A seeded drafter where the plain one belongs (copied over models/drafter/pretrained), or a drafter whose block
    size or vocabulary is not the params' for its kind: one line naming the arm, the folder and the fix."""
    import shutil

    wd = tmp_path / "swapped"
    shutil.copytree(outputs, wd)
    shutil.rmtree(wd / "models" / "drafter" / "pretrained")
    shutil.copytree(wd / "models" / "drafter" / "seeded", wd / "models" / "drafter" / "pretrained")
    for arm in ("dflash", "dflash-pld"):
        r = cli("decode", "--root", str(wd), "--arm", arm, "--prompt", "x", cwd=wd)
        line = one_line(r)
        assert r.returncode == 2 and line.startswith(f"error: arm {arm}: models/drafter/pretrained holds a seeded "
                                                     f"drafter"), line
    shutil.copytree(outputs / "models" / "drafter" / "pretrained", wd / "models" / "drafter" / "seeded", dirs_exist_ok=True)
    r = cli("decode", "--root", str(wd), "--arm", "dflash-seeded", "--prompt", "x", cwd=wd)
    assert r.returncode == 2 and "models/drafter/seeded holds a plain drafter" in one_line(r)
    for override, needle in (("drafter.block_size=5", "holds a drafter of block size 4, but the params give the plain "
                                                      "drafter block size 5"),
                             ("drafter.draft_vocab_size=10", "holds a drafter with the full vocabulary, but the params "
                                                             "give the plain drafter draft_vocab_size = 10 tokens")):
        r = cli("decode", "--root", str(outputs), "--arm", "dflash", "--prompt", "x", override, cwd=outputs)
        line = one_line(r)
        assert r.returncode == 2 and needle in line, line


def test_bad_input_is_one_line_naming_the_value_and_the_fix(root, outputs, tmp_path):
    cases = [
        (("plan", "--gpus", "0"), "--gpus 0 is not possible: give a whole number of devices >= 1"),
        (("plan", "--gpus", "-2"), "--gpus -2 is not possible"),
        (("plan", "--tflops", "0"), "--tflops 0 is not possible"),
        (("plan", "--gpu-mem", "-80"), "--gpu-mem -80 is not possible"),
        (("plan", "--efficiency", "1.5"), "--efficiency 1.5 is not possible"),
        (("plan", "--disk", "0"), "--disk 0 is not possible"),
        (("decode", "--root", "/nonexistent", "--arm", "ar", "--prompt", "x"), "--root /nonexistent is not a folder"),
        (("decode", "--arm", "ar", "--prompt", ""), "--prompt is empty"),
        (("decode", "--arm", "ar", "--prompt", "   "), "--prompt is empty"),
        (("check", "benchmark.arms=ar"), "benchmark.arms takes a list: write benchmark.arms=[ar]"),
        (("check", "-S", "benchmark.arms=ar"), "benchmark.arms takes a list: write benchmark.arms=[ar]"),
        (("check", "benchmark.drafter=models/nosuch"), "benchmark.drafter=models/nosuch: no such folder, and no stage"),
        (("check", f"benchmark.drafter={tmp_path}"), "holds no config.json (not a model folder)"),
    ]
    bad = tmp_path / "bad.yaml"
    bad.write_text("target:\n  name: x\n bad: [1\n")
    cases.append((("check", "--params", str(bad)), f"{bad}:3:2: not valid YAML"))
    for args, needle in cases:
        r = cli(*args, cwd=root)
        line = one_line(r)
        assert r.returncode == 2 and line.startswith("error: ") and needle in line, (args, line)
    r = cli("check", f"benchmark.drafter={outputs / 'models' / 'drafter' / 'pretrained'}", cwd=root)
    assert r.returncode == 0, r.stderr  # a folder that holds a drafter passes


# ---- explore ---------------------------------------------------------------------------------------------------


def test_explore_serves_on_localhost(root, tmp_path):
    port = 18000 + os.getpid() % 1000
    proc = subprocess.Popen([str(DRAFTLAB), "explore", "--root", str(tmp_path), "--port", str(port)], cwd=root,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline, body = time.time() + 90, ""
        while time.time() < deadline and not body:
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2).read().decode()
            except OSError:
                time.sleep(1)
        assert body == "ok", "the explorer did not answer on 127.0.0.1"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        out = proc.communicate(timeout=30)[0]
    assert f"explorer on http://127.0.0.1:{port} (root {tmp_path})" in out
    r = cli("explore", "--root", str(tmp_path / "none"), cwd=root)
    assert r.returncode == 2 and "is not a folder" in one_line(r)
    assert not list(tmp_path.iterdir())  # explore never writes into the root
