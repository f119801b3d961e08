"""Serving-engine recipe: export the trained plain drafter for vLLM and SGLang, start each
engine with the DFlash options its source reads, and time a fixed prompt set at concurrency 1..32 against
plain AR on the same engine.

    python tools/serve_bench.py --dry                       # CI: export + validate, print the exact commands
    python tools/serve_bench.py --engine vllm --out DIR     # on a GPU machine with vLLM installed

`--dry` exports the drafter (`draftlab export ... --for ENGINE`) into `--out`/export-ENGINE, validates the
folder against that loader's rules (`draftlab.drafter.serving.check_export`), and prints, per engine, the
command for the AR arm and for the DFlash arm. An engine the drafter cannot be served by (SGLang with a
reduced draft vocabulary) is reported in one line and skipped.

Without `--dry` (UNTESTED here: this repository's machines have neither a GPU nor vLLM / SGLang; see
docs/export.md): for each engine and arm it starts the printed command, waits for `/health`, sends every
prompt (templated by the project, as token ids) to `/v1/completions` greedily at each concurrency, stops the
server, and writes `--out`/serve_bench.json: rows like the benchmark's concurrency rows (`requests`,
`tokens`, `wall_s`, `tokens_per_s`, `tokens_per_s_stream`) marked `engine: vllm|sglang`, `arm: ar|dflash`,
`concurrency`. The engine's own acceptance statistics are not read (their metrics endpoints differ).

What it runs is draftlab.measure.serving_engines (export, commands, the timed run); this script is its command line.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from draftlab import paths
from draftlab.measure.serving_engines import ENGINES, engine_commands, export_and_check, prompt_ids, run_arm


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--drafter", default=paths.PLAIN_DRAFTER, help="our trained plain drafter folder")
    ap.add_argument("--target", default=paths.TARGET, help="the target's local model folder")
    ap.add_argument("--engine", choices=(*ENGINES, "both"), default="both")
    ap.add_argument("--out", default=paths.SERVE_BENCH, help="exports and serve_bench.json go here")
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    ap.add_argument("--port", type=int, default=8300)
    ap.add_argument("--suite", default="mt-bench", help="the fixed prompt set (a suite name)")
    ap.add_argument("--prompts", type=int, default=32, help="how many prompts of the suite")
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--timeout-s", type=float, default=900.0, help="server start-up and per-request timeout")
    ap.add_argument("--dry", action="store_true", help="export + validate, print the commands, start nothing")
    a = ap.parse_args(argv)
    from draftlab.errors import DraftlabError

    out = Path(a.out)
    engines = ENGINES if a.engine == "both" else (a.engine,)
    plans = {}
    for engine in engines:
        try:
            folder, cfg = export_and_check(a.drafter, a.target, out, engine, a.dtype)
        except DraftlabError as e:
            print(f"{engine}: skipped: {e}")
            continue
        vd = cfg.get("draft_vocab_size")
        print(f"{engine}: export {folder} valid (block_size {cfg['block_size']}, taps "
              f"{cfg['dflash_config']['target_layer_ids']}, {cfg['dtype']}"
              f"{f', draft vocabulary {vd} via d2t' if vd else ''})")
        plans[engine] = engine_commands(engine, str(Path(a.target).resolve()), str(folder.resolve()),
                                        int(cfg["block_size"]), a.port)
        for arm, cmd in plans[engine].items():
            print(f"{engine} {arm}: {shlex.join(cmd)}")
    if not plans:
        print("error: no engine can serve this drafter (see the lines above)", file=sys.stderr)
        return 2
    if a.dry:
        return 0
    prompts = prompt_ids(a.target, a.suite, a.prompts)
    rows = []
    try:
        for engine, cmds in plans.items():
            for arm, cmd in cmds.items():
                rows += run_arm(engine, arm, cmd, a.port, prompts, a.max_new_tokens, a.timeout_s)
    except DraftlabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    from draftlab.io import atomic_write

    atomic_write(out / "serve_bench.json", lambda p: p.write_text(json.dumps(rows, indent=1) + "\n"))
    print(f"wrote {out / 'serve_bench.json'} ({len(rows)} rows)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
