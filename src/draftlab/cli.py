"""The `draftlab` console script (argparse subcommands): daily use of the workbench from a shell.

- `draftlab check [key=value ...] [-S override ...]`: validate params.yaml (with overrides), arm names
  against the arm table and every local prompt file included; one line either way (exit 0 / 2).
  `-S` overrides are composed from conf/ the way `dvc exp run -S` composes them.
- `draftlab exp [-S override ...] [dvc exp run options]`: the same check first, then `dvc exp run`
  (so a typo is one line, not a Hydra traceback, and nothing runs).
- `draftlab compose [--conf DIR] [target=NAME profile=NAME key=value ...]`: print the composed params.yaml, arm
  names checked against the arm table (`make params`; the one compose entry point).
- `draftlab decode --arm NAME --prompt TEXT`: decode one prompt with any arm of the arm table from the
  pipeline's outputs; prints the text with each token's fate marked, then τ and tokens/s.
- `draftlab plan [key=value ...] [-S override ...] [--gpus N --gpu-mem GiB --tflops T --json]`: the cost plan
  (draftlab.plan) of the composition: per stage tokens, FLOPs, time, peak device memory, disk; exit 2 with one
  line when a step or a cache does not fit.
- `draftlab explore [--root DIR]`: the Streamlit explorer on 127.0.0.1.
- `draftlab verdicts [--check | --write-docs | --world DIR [--json FILE]]`: every pair, interval and table of the
  current results recomputed from committed files (draftlab.verdicts.command); writes nothing unless asked.
- `draftlab export DRAFTER_FOLDER OUT [--for dflash|vllm|sglang] [--dtype bfloat16] [--target DIR]`: our
  drafter folder -> the DFlash folder (config.json with dflash_config + model.safetensors) that the
  authors' `dflash` package, vLLM or SGLang load, checked against that loader's rules (docs/export.md);
  it reads the target's config (and, for vLLM's reduced draft vocabulary, its LM-head rows).
  `draftlab import REF_FOLDER OUT`: a reference DFlash folder (e.g. a public checkpoint on disk) -> our
  drafter folder (then benchmark it with benchmark.drafter=OUT); it needs no target.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from draftlab.errors import DraftlabError, InputFileError
from draftlab.paths import TARGET

# `draftlab export` choices (kept torch-free here; tests/drafter/test_export.py checks them against drafter.serving)
EXPORT_ENGINES = ("dflash", "vllm", "sglang")
EXPORT_DTYPES = ("bfloat16", "float16", "float32")
REPO = Path(__file__).resolve().parents[2]  # src/draftlab/cli.py -> the repository (an editable install)
APP = REPO / "app" / "explorer.py"
FORCE_HELP = ("replace a previous {cmd}'s config.json and model.safetensors in DST (nothing else there is touched; "
              "a folder holding anything else is always refused)")


def _arm_names() -> tuple[str, ...]:
    from draftlab.pipeline.names import arm_names

    return arm_names()


def _names():
    from draftlab.pipeline.names import method_names

    return method_names()


def _fail(msg: str) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return 2


# ----------------------------------------------------------------------------------------------
# check / compose / exp


def validate(params_path: str, overrides: list[str], dvc_overrides: list[str], conf_dir: str = "conf"):
    """The validated params: params.yaml (+ `key=value` overrides), or, with `dvc_overrides`, the
    composition of conf/ that `dvc exp run -S ...` would write (Hydra's rules for keys included)."""
    from draftlab.params import build_params, compose_params, load_params

    from draftlab.arms.grammar import check_trained
    from draftlab.pipeline.layout import check_model_folders

    pick_groups(overrides, params_path, conf_dir)
    if dvc_overrides:
        raw = compose_params(dvc_overrides, conf_dir, arms=_arm_names(), strict=True, names=_names())
        p = build_params(raw, overrides, arms=_arm_names(), names=_names())
    else:
        p = load_params(params_path, overrides, arms=_arm_names(), names=_names())
    check_model_folders(p)
    check_trained(p)
    if p.target.source in ("packaged-gguf", "local"):
        from draftlab.verifier.load import check_source

        check_source(p.target)
    return p


def pick_groups(overrides: list[str], params_path: str, conf_dir: str) -> None:
    """One line for a positional `group=preset` (`profile=gpu`, `target=qwen3-8b`, `benchmark/arms=two`): a
    positional key=value sets one value of the params file, while picking a preset recomposes conf/, which is
    what -S does (as `dvc exp run -S`)."""
    conf = Path(conf_dir)
    for o in overrides:
        key, eq, value = o.partition("=")
        key = key.lstrip("+~")
        if eq and (conf / key).is_dir() and not value.strip().startswith(("{", "[")):
            raise DraftlabError(f"'{o}' picks a preset of {conf / key}/, which recomposes the params: write it as "
                                f"-S {key}={value} (a positional key=value sets one key of {params_path}, e.g. "
                                "pretrain.lr=0.003)")


def applied(params_path: str, overrides: list[str], dvc_overrides: list[str]) -> str:
    """What a command ran on, echoed: `params.yaml + a=1 b=2` or `conf/ + -S profile=gpu + c=3`."""
    base = f"conf/ + -S {' -S '.join(dvc_overrides)}" if dvc_overrides else params_path
    return base + (f" + {' '.join(overrides)}" if overrides else "")


def cmd_check(a: argparse.Namespace) -> int:
    p = validate(a.params, a.overrides, a.set, a.conf)
    source = applied(a.params, a.overrides, a.set)
    local = f"; local suites: {', '.join(p.data.local_suites)}" if p.data.local_suites else ""
    print(f"ok: {source} (target {p.target.name}, profile {p.profile.name}; {len(p.benchmark.arms)} arms; "
          f"suites: {', '.join(p.benchmark.suites)}{local})")
    return 0


def cmd_compose(a: argparse.Namespace) -> int:
    from draftlab.params import compose_text

    text = compose_text([*a.overrides, *a.set], a.conf, arms=_arm_names(), names=_names())
    print(f"composed {a.conf}/" + "".join(f" -S {o}" for o in [*a.overrides, *a.set]), file=sys.stderr)
    print(text, end="")
    return 0


def cmd_exp(a: argparse.Namespace, rest: list[str]) -> int:
    sets = [*(a.set or []), *[r for r in rest if "=" in r and not r.startswith("-")]]  # positional = -S here
    rest = [r for r in rest if r not in sets]
    validate(a.params, [], sets, a.conf)  # without -S, DVC runs params.yaml as it is
    argv = ["dvc", "exp", "run", *[x for s in sets for x in ("-S", s)], *rest]
    if a.dry:
        print("ok: " + " ".join(argv))
        return 0
    print("running: " + " ".join(argv), file=sys.stderr, flush=True)
    os.execvp("dvc", argv)
    return 0  # not reached


def plan_device(params) -> tuple[str, str]:
    """The device kind a run's stages use, from its params: target.device when it names one, else its profile's (the
    gpu profiles run on CUDA, every other one on the CPU) -> (kind, why)."""
    dev, profile = params.target.device, params.profile.name
    if dev != "auto":
        return ("cpu" if dev == "cpu" else "cuda"), f"target.device={dev}"
    return ("cuda" if profile.startswith("gpu") else "cpu"), f"profile {profile}, target.device=auto"


def cmd_plan(a: argparse.Namespace) -> int:
    from draftlab.plan.report import render
    from draftlab.plan.stages import Device

    params = validate(a.params, a.overrides, a.set, a.conf)
    kind, why = (a.device, "given") if a.device else plan_device(params)
    dev = Device.of(kind, gpus=a.gpus, tflops=a.tflops, efficiency=a.efficiency, bandwidth=a.bandwidth,
                    memory_gib=a.gpu_mem, fill=a.fill, tau=a.tau, per_op_us=a.per_op_us,
                    prompt_fill=a.prompt_fill)  # None: the preset's
    dev.check()
    if a.disk is not None and not a.disk > 0:
        raise DraftlabError(f"--disk {a.disk:g} is not possible: give the free disk of the run's machine in GiB, > 0")
    text, err = render(params, dev, a.json, disk_gib=a.disk)
    if not err:  # an error is the one line
        print(f"plan of {applied(a.params, a.overrides, a.set)} on --device {kind} ({why})", file=sys.stderr)
    try:
        print(text, flush=True)
    except BrokenPipeError:  # `draftlab plan | head -1`: the reader closed the pipe; stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush does not raise again
        os.close(devnull)
    return _fail(err) if err else 0


# ----------------------------------------------------------------------------------------------
# decode


def cmd_decode(a: argparse.Namespace) -> int:
    if a.max_new_tokens < 1 or a.temperature < 0:
        raise DraftlabError("--max-new-tokens must be >= 1 and --temperature >= 0")
    if not a.prompt.strip():
        raise DraftlabError("--prompt is empty; give the text to decode (e.g. --prompt 'Write a haiku about rain.')")
    if a.root:
        if not Path(a.root).is_dir():
            raise DraftlabError(f"--root {a.root} is not a folder; give the folder that holds params.yaml and the "
                                f"pipeline's outputs (default: the current folder)")
        os.chdir(a.root)
    p = validate(a.params, a.overrides, [])
    if a.arm not in _arm_names():
        import difflib

        near = difflib.get_close_matches(a.arm, list(_arm_names()), n=3)
        hint = f"did you mean {', '.join(repr(n) for n in near)}? " if near else ""
        raise DraftlabError(f"unknown arm '{a.arm}'; {hint}this run's arms: {', '.join(p.benchmark.arms)} (all "
                            f"{len(_arm_names())}: the arm table, draftlab/arms/grammar.py)")
    if p.target.source == "toy":  # a toy target knows its world's families only: one line before loading anything
        from draftlab.toy.tasks import family_of
        from draftlab.toy.world import world_config

        world_config(p.target.toy).family(family_of(a.prompt))
    from draftlab.pipeline.decode import decode

    return decode(a, p, applied(a.params, a.overrides, []))

# ----------------------------------------------------------------------------------------------
# explore


def explore_command(port: int) -> list[str]:
    return [sys.executable, "-m", "streamlit", "run", str(APP), "--server.headless", "true",
            "--server.address", "127.0.0.1", "--server.port", str(port), "--browser.gatherUsageStats", "false"]


def cmd_explore(a: argparse.Namespace) -> int:
    if not APP.exists():
        raise DraftlabError(f"the explorer {APP} is missing: it ships with the repository (run from a clone, "
                            "installed with `make install`)")
    root = Path(a.root).resolve()
    if not root.is_dir():
        raise DraftlabError(f"--root {a.root} is not a folder (give the repository, or .smoke for the smoke run)")
    os.environ["DRAFTLAB_ROOT"] = str(root)
    print(f"explorer on http://127.0.0.1:{a.port} (root {root}); Ctrl-C stops it", file=sys.stderr, flush=True)
    cmd = explore_command(a.port)
    os.execv(cmd[0], cmd)
    return 0  # not reached


# ----------------------------------------------------------------------------------------------
# export / import (the DFlash reference format)


def _export(a: argparse.Namespace) -> str:
    from draftlab.drafter.serving import export_folder

    return str(export_folder(a.src, a.dst, a.engine, a.target, a.dtype, a.force))


def _import(a: argparse.Namespace) -> str:
    from draftlab.drafter.refformat import import_reference

    return str(import_reference(a.src, a.dst, force=a.force))


def cmd_convert(a: argparse.Namespace) -> int:
    out = _export(a) if a.command == "export" else _import(a)
    print(f"wrote {out}")
    return 0


# ----------------------------------------------------------------------------------------------


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("draftlab")
    except PackageNotFoundError:  # run from a source tree without `pip install -e .`
        return "(not installed)"


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="draftlab", description="draftlab: check params, run experiments, decode, explore, "
                                 "export / import drafters.")
    ap.add_argument("--version", action="version", version=f"draftlab {_version()}")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def params_args(p: argparse.ArgumentParser, overrides: bool = True) -> None:
        p.add_argument("--params", default="params.yaml", help="params file (default: params.yaml)")
        p.add_argument("--conf", default="conf", help="Hydra presets folder for -S (default: conf)")
        if overrides:
            p.add_argument("overrides", nargs="*", metavar="key=value", help="overrides applied to the params file")

    c = sub.add_parser("check", help="validate params.yaml (and overrides) in one line")
    params_args(c)
    c.add_argument("-S", "--set", action="append", default=[], metavar="OVERRIDE",
                   help="compose conf/ with this override, as `dvc exp run -S` does (repeatable)")
    c.set_defaults(func=cmd_check)

    c = sub.add_parser("plan", help="the cost plan: per stage tokens, FLOPs, time, peak memory, disk (no weights)")
    params_args(c)
    c.add_argument("-S", "--set", action="append", default=[], metavar="OVERRIDE", help="as for check")
    preset = " (default: the --device preset's; the plan's last line, 'assumptions', shows the value used)"
    for flag, kind, var, what in (
            ("--gpus", int, "N", "devices the training stages run on, data-parallel (default 1)"),
            ("--gpu-mem", float, "GIB", "GiB of memory per device; a stage whose largest step needs more is refused "
                                 "(default 80)"),
            ("--tflops", float, "T", "the device's dense TFLOP/s: on cuda its bf16 peak (an H100 SXM: 989), on cpu the "
                                "effective fp32 rate measured on the project's 2-core machine" + preset),
            ("--efficiency", float, "E", "the share of --tflops a step achieves, in (0, 1]" + preset),
            ("--bandwidth", float, "GBPS", "GB/s of device memory; each decode step reads the weights and KV cache once"
                                   + preset),
            ("--per-op-us", float, "US", "host microseconds per dispatched aten op of an eager step" + preset),
            ("--fill", float, "F", "mean response length over its max_new_tokens, in (0, 1] (default 1: every "
                              "response at its maximum, an upper bound)"),
            ("--prompt-fill", float, "F", "mean prompt length over data.max_prompt_tokens, in (0, 1] (default: "
                                     "--fill)"),
            ("--tau", float, "TAU", "tokens committed per round by the benchmark's speculative arms (default 3)")):
        c.add_argument(flag, type=kind, default=None, metavar=var, help=what)
    c.add_argument("--disk", type=float, default=None, help="free disk GiB of the run's machine (default: free here)")
    c.add_argument("--device", choices=("cuda", "cpu"), default=None,
                   help="the device kind the stages run on: cuda (bf16, an H100 by default) or cpu (fp32, the "
                        "project's 2-core machine); sets the defaults of the rates above (default: the run's own, "
                        "target.device or its profile: gpu profiles cuda, the others cpu)")
    c.add_argument("--json", action="store_true", help="machine output")
    c.set_defaults(func=cmd_plan)

    c = sub.add_parser("compose", help="print params.yaml composed from conf/ (target=, profile=, key=value)")
    c.add_argument("--conf", default="conf", help="Hydra presets folder (default: conf)")
    c.add_argument("overrides", nargs="*", metavar="OVERRIDE",
                   help="Hydra overrides: a preset (profile=smoke, target=qwen3-8b, benchmark/arms=two) or a key "
                        "(pretrain.lr=0.003); the same as -S")
    c.add_argument("-S", "--set", action="append", default=[], metavar="OVERRIDE",
                   help="the same as a positional OVERRIDE (the spelling of check, exp and `dvc exp run`)")
    c.set_defaults(func=cmd_compose)

    c = sub.add_parser("exp", help="check the -S overrides, then `dvc exp run` with the same arguments",
                       allow_abbrev=False)  # every other option goes to dvc as written
    params_args(c, overrides=False)
    c.add_argument("-S", "--set", action="append", default=[], metavar="OVERRIDE",
                   help="compose conf/ with this override, as `dvc exp run -S` does (repeatable; a positional "
                        "key=value is taken as -S)")
    c.add_argument("--dry", action="store_true", help="check and print the dvc command without running it")
    c.set_defaults(func=None)

    c = sub.add_parser("decode", help="decode one prompt with an arm, tokens marked accepted / corrected / rejected")
    params_args(c)
    c.add_argument("--arm", required=True, help="an arm of the arm table (e.g. dflash, dcoco)")
    c.add_argument("--prompt", required=True, help="the user prompt (chat template applied)")
    c.add_argument("--max-new-tokens", type=int, default=64)
    c.add_argument("--temperature", type=float, default=0.0)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--root", default="", help="the folder with params.yaml and the pipeline's outputs (default: .)")
    c.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                   help="ANSI colours (auto: on a terminal); otherwise brackets mark the tokens")
    c.add_argument("--show-tree", action="store_true",
                   help="a tree arm: also mark every other node the walk rejected (the path's off-path children)")
    c.set_defaults(func=cmd_decode)

    sub.add_parser("verdicts", help="recompute every pair, interval and table of the current results from committed "
                                    "files (--check, --write-docs, --world DIR)", add_help=False)
    c = sub.add_parser("explore", help="start the Streamlit explorer on 127.0.0.1")
    c.add_argument("--root", default=os.environ.get("DRAFTLAB_ROOT", "."),
                   help="folder with metrics/, plots/, data/ (default: $DRAFTLAB_ROOT or .; .smoke = the smoke run)")
    c.add_argument("--port", type=int, default=8501)
    c.set_defaults(func=cmd_explore)

    c = sub.add_parser("export", help="our drafter folder -> the DFlash folder that dflash / vLLM / SGLang load")
    c.add_argument("src", help="our drafter folder (e.g. models/drafter/pretrained)")
    c.add_argument("dst", help="the folder to write: new, empty, or a previous export (with --force)")
    c.add_argument("--for", dest="engine", choices=EXPORT_ENGINES, default="dflash",
                   help="the loader to write for (default dflash: the authors' package; vllm carries a reduced "
                        "draft vocabulary via d2t, sglang and dflash need a full-vocabulary drafter)")
    c.add_argument("--dtype", choices=EXPORT_DTYPES, default="bfloat16", help="weight dtype (default bfloat16)")
    c.add_argument("--target", default=TARGET,
                   help=f"the drafter's target folder: its depth, context length and LM head (default {TARGET})")
    c.add_argument("--force", action="store_true", help=FORCE_HELP.format(cmd="export"))
    c.set_defaults(func=cmd_convert)
    c = sub.add_parser("import", help="a reference DFlash folder -> our drafter folder")
    c.add_argument("src", help="a reference DFlash folder (config.json with dflash_config + model.safetensors)")
    c.add_argument("dst", help="the folder to write: new, empty, or a previous import (with --force)")
    c.add_argument("--force", action="store_true", help=FORCE_HELP.format(cmd="import"))
    c.set_defaults(func=cmd_convert)
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["verdicts"]:  # its own parser (draftlab.verdicts.command)
        from draftlab.verdicts.command import main as verdicts

        return verdicts(argv[1:])
    ap = parser()
    args, rest = ap.parse_known_args(argv)
    if args.command != "exp" and rest:
        ap.parse_args(argv)  # the standard "unrecognized arguments" error
    from draftlab import interrupts

    interrupts.install()  # Ctrl-C / SIGTERM: one line, exit 130 / 143 (draftlab.interrupts)
    try:
        if args.command == "exp":
            return cmd_exp(args, rest)
        return args.func(args)
    except KeyboardInterrupt as e:
        print(f"interrupted ({interrupts.name(e)}): draftlab {args.command} stopped; nothing was half-written "
              "(files are written under a temp name and renamed)", file=sys.stderr)
        return interrupts.code(e)
    except InputFileError as e:
        from draftlab.paths import rebuild_hint

        return _fail(f"{e}{rebuild_hint(e.path)}")
    except DraftlabError as e:
        return _fail(str(e))


if __name__ == "__main__":
    raise SystemExit(main())
