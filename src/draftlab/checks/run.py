"""The accelerator check's runner and command line (`tools/gpu_check.py` calls `main`).

    python tools/gpu_check.py [--out-dir DIR] [--commit SHA]   # on the accelerator: every section, ~5 minutes
    python tools/gpu_check.py --dry                            # the same code at tiny sizes on CPU (CI)
    python tools/gpu_check.py --render FILE.json               # a fetched result -> metrics/ + docs/gpu.md

Sections, in order, each with its own time budget (a section that cannot fit skips what is left and says so; one
that raises is recorded and the next one runs), the JSON rewritten after every section (a run cut short keeps what
it finished): kernels, engine, concurrency (with the sanity gates and the AR step against the bandwidth floor),
seeded, specopd, specopd_scale, flex, and last the compiled engine (`compiled`: AR and one DFlash arm at one batch
size, <= 8 graphs, skipped in one line when its predicted compile time does not fit). Without --out-dir a full run writes metrics/gpu_check.json and docs/gpu.md's
generated block; a dry run writes into a temporary folder.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

from draftlab import paths
from draftlab.checks.common import MODULES, ROOT, SCHEMA, SECTIONS, Budget, Ctx, UsageError, environment, one_line
from draftlab.checks.models import DRY_TARGET, PAPER_TARGET
from draftlab.omp import configure
PAPER = dict(
    target=PAPER_TARGET, drafter=dict(block_size=16, num_layers=5), corrector_k=16,  # every family at its defaults
    prompt_tokens=256, new_tokens=24, verify_tokens=(1, 8, 16), verify_reps=6, reps=2,
    streams=(1, 8, 64), copy_gib=1.0, kernel_reps=(5, 30), budget_s=355.0,
    section_s=dict(kernels=20, engine=30, concurrency=100, seeded=30, specopd=40, specopd_scale=30, flex=45,
                   compiled=60),
)
DRY = dict(
    target=DRY_TARGET, drafter=dict(block_size=16, num_layers=1), corrector_k=4,
    prompt_tokens=24, new_tokens=24, verify_tokens=(1, 8, 16), verify_reps=8, reps=3,
    streams=(1, 3), copy_gib=1 / 64, kernel_reps=(1, 2), budget_s=420.0,  # generous: a loaded CI machine still
    section_s=dict(kernels=60, engine=60, concurrency=60, seeded=60, specopd=60, specopd_scale=60, flex=60,  # passes
                   compiled=60),
)


def section_function(name: str):
    """The section's function, imported on use (a section whose imports fail is that section's error alone)."""
    import importlib

    return getattr(importlib.import_module(f"draftlab.checks.{MODULES[name]}"), f"section_{name}")


def run(args) -> int:
    import torch

    if args.dry:
        configure(None, 1)  # the policy stays the environment's: the check reads no params.yaml
        dev = torch.device("cpu")
    else:
        if not torch.cuda.is_available():
            raise UsageError("no CUDA device is visible; run with --dry on a CPU machine")
        dev = torch.device("cuda")
    size = DRY if args.dry else PAPER
    budget = Budget(args.budget_s or size["budget_s"])
    ctx = Ctx(dev=dev, dry=args.dry, size=size, budget=budget, sections=args.sections,
              streams=args.streams or size["streams"], compile=args.compile, compile_backend=args.compile_backend)
    env = environment(dev, args.dry)
    if args.commit:  # the device machine's copy of the tree carries another repository's HEAD
        env["git_sha"], env["git_sha_source"] = args.commit, "--commit (the project commit the tree was copied from)"
    ctx.cache["device_name"] = env.get("device", "cpu")
    out = {"schema": SCHEMA, "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "budget_s": budget.seconds, "section_budgets_s": {k: size["section_s"][k] for k in args.sections},
           "environment": env, "sections": {}}
    for name in SECTIONS:
        if name not in args.sections:
            continue
        t = time.perf_counter()
        ctx.section = Budget(min(size["section_s"][name], budget.left()))
        if budget.left() < 3:
            out["sections"][name] = {"status": "skipped", "error": "the run's time budget is spent"}
        else:
            if dev.type == "cuda":
                torch.cuda.reset_peak_memory_stats(dev)
            try:
                out["sections"][name] = section_function(name)(ctx)
            except Exception as e:  # noqa: BLE001  fail soft: record and go on with the next section
                out["sections"][name] = {"status": "error", "error": one_line(e),
                                         "traceback": traceback.format_exc().splitlines()[-12:]}
        sec = out["sections"][name]
        sec["seconds"] = round(time.perf_counter() - t, 2)
        if name == "concurrency":  # the run's headline: gates and the floor, at the top of the JSON
            out["sanity_gates"] = sec.get("sanity_gates", {})
            out["sanity_gate_values"] = sec.get("sanity_gate_values", {})
            out["ar_step_over_floor"] = sec.get("ar_step_over_floor")
        print(f"[gpu_check] {name}: {sec['status']} ({sec['seconds']} s)", file=sys.stderr, flush=True)
        out["wall_s"] = round(budget.elapsed(), 2)
        write_outputs(out, args.out, args.doc)  # after every section: a run cut short keeps what it finished
    out["finished"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    out["wall_s"] = round(budget.elapsed(), 2)
    bad = [k for k, v in out["sections"].items() if v["status"] in ("error", "failed")]
    out["ok"] = not bad
    write_outputs(out, args.out, args.doc)
    print(f"[gpu_check] wrote {args.out} and {args.doc} in {out['wall_s']} s; "
          + ("all sections passed" if not bad else f"problems in: {', '.join(bad)}"), file=sys.stderr)
    return 0 if not bad else 1


def write_outputs(out: dict, json_path: Path, doc_path: Path) -> None:
    from draftlab.checks.report import DOC_TEMPLATE, render_doc, splice_doc
    from draftlab.io import atomic_write

    text = json.dumps(out, indent=1, sort_keys=False) + "\n"
    atomic_write(json_path, lambda p: p.write_text(text))
    old = doc_path.read_text() if doc_path.exists() else DOC_TEMPLATE
    doc = splice_doc(old, render_doc(out))
    atomic_write(doc_path, lambda p: p.write_text(doc))


def parse_args(argv: list[str]):
    ap = argparse.ArgumentParser(prog="gpu_check.py", description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--dry", action="store_true", help="tiny shapes on CPU, Triton in its interpreter (CI)")
    ap.add_argument("--sections", default=",".join(SECTIONS), help=f"comma list of {', '.join(SECTIONS)}")
    ap.add_argument("--streams", default="", help="stream counts of the concurrency sweep, e.g. 1,8,64")
    ap.add_argument("--budget-s", type=float, default=0.0, help="the whole run's budget in seconds (default 295; dry "
                    "420, generous for a loaded machine); each section also has its own")
    ap.add_argument("--out-dir", default="", help="write gpu_check.json and gpu.md into this folder (default: "
                    f"{paths.METRICS}/ and docs/ of the repository; dry: a temporary folder)")
    ap.add_argument("--compile", default="auto", choices=("auto", "on", "off"), help="the engine's steps in the "
                    "concurrency section, as engine.compile: auto = eager (the compiled engine is measured in the "
                    "last section, `compiled`)")
    ap.add_argument("--compile-backend", default="cudagraphs", choices=("cudagraphs", "inductor"), help="the "
                    "`compiled` section's backend on CUDA: cudagraphs (the eager kernels captured; quick) or inductor "
                    "(reduce-overhead: fused kernels, long codegen)")
    ap.add_argument("--commit", default="", help="the project commit the tree was copied from (recorded as git_sha)")
    ap.add_argument("--render", default="", metavar="JSON", help="re-render docs/gpu.md from a result file and copy "
                    f"it to {paths.GPU_CHECK} (or --out-dir); runs nothing")
    args = ap.parse_args(argv)
    names = [s.strip() for s in args.sections.split(",") if s.strip()]
    bad = [s for s in names if s not in SECTIONS]
    if bad or not names:
        raise UsageError(f"--sections {args.sections!r}: unknown {', '.join(bad) or 'empty list'}; choose from "
                         f"{', '.join(SECTIONS)}")
    args.sections = names
    try:
        args.streams = tuple(int(s) for s in args.streams.split(",") if s.strip()) if args.streams else ()
    except ValueError:
        raise UsageError(f"--streams {args.streams!r} must be a comma list of positive integers") from None
    if any(n < 1 for n in args.streams):
        raise UsageError(f"--streams {args.streams!r} must be positive")
    if args.budget_s < 0:
        raise UsageError(f"--budget-s {args.budget_s} must be >= 0")
    if args.out_dir:
        d = Path(args.out_dir)
        args.out, args.doc = d / "gpu_check.json", d / "gpu.md"
    elif args.dry:
        d = Path(tempfile.gettempdir()) / "draftlab-gpu-check-dry"
        args.out, args.doc = d / "gpu_check.json", d / "gpu.md"
    else:
        args.out, args.doc = ROOT / paths.GPU_CHECK, ROOT / "docs" / "gpu.md"
    return args


def render_only(path: str, out: Path, doc: Path) -> int:
    from draftlab.checks.report import check_schema

    src = Path(path)
    try:
        data = json.loads(src.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise UsageError(f"--render {path}: cannot read a result file ({one_line(e)})") from None
    check_schema(data, f"--render {path}")
    write_outputs(data, out, doc)
    print(f"[gpu_check] rendered {doc} and wrote {out} from {src}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
        if args.render:
            return render_only(args.render, args.out, args.doc)
        return run(args)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def set_interpreter(argv: list[str]) -> None:
    """TRITON_INTERPRET=1 for --dry, unset otherwise: before anything imports Triton (its @jit reads it)."""
    if "--dry" in argv:
        os.environ["TRITON_INTERPRET"] = "1"
    else:
        os.environ.pop("TRITON_INTERPRET", None)
