"""Train one toy-world target setting and report its figures (a thin command over draftlab.toy).

    .venv/bin/python tools/probes/toy_target.py --set layers=8 --set budget_s=300 --out /tmp/p1.json
    .venv/bin/python tools/probes/toy_target.py --world '{"families": [{"name": "copy", "lengths": [48, 64]}]}'
    .venv/bin/python tools/probes/toy_target.py --set eval_n=64 --save /tmp/toy-target

`--set key=value` overrides a field of draftlab.toy.train.TrainConfig (values parsed as JSON, else strings);
`--world` is a JSON object of WorldConfig fields. Threads default to 2. Prints and writes (`--out`, atomically)
one JSON object: the settings, steps, wall time, tokens/s, the learning curve (teacher-forced exact match per
family), the held-out greedy exact match and T=1 high-entropy share per family, parameters and FLOPs per token
(target, and a 1-/2-layer drafter of its width). The model folder goes to `--save` (default: a temporary folder,
removed). Heavy: run with the machine idle.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time


def _value(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a TrainConfig field")
    ap.add_argument("--world", default="{}", help="WorldConfig fields as a JSON object")
    ap.add_argument("--name", default="", help="a label stored in the output")
    ap.add_argument("--out", default="", help="write the JSON here too")
    ap.add_argument("--save", default="", help="keep the trained folder here")
    a = ap.parse_args(argv)

    from draftlab.errors import DraftlabError
    from draftlab.toy.tasks import WorldConfig
    from draftlab.toy.train import TrainConfig, run

    try:
        fields = {"threads": 2}
        for item in a.set:
            key, sep, value = item.partition("=")
            if not sep:
                raise DraftlabError(f"--set {item!r}: expected KEY=VALUE")
            fields[key] = _value(value)
        cfg = TrainConfig.from_dict(fields)
        world = WorldConfig.from_dict(json.loads(a.world))
    except (DraftlabError, ValueError, TypeError) as e:
        print(f"toy_target: {e}", file=sys.stderr)
        return 2
    out_dir = a.save or tempfile.mkdtemp(prefix="toy-target-")
    t = time.perf_counter()
    report = run(world, cfg, out_dir, log=lambda s: print(s, flush=True))
    wall = time.perf_counter() - t
    if not a.save:
        shutil.rmtree(out_dir, ignore_errors=True)
    ev = report.get("eval", {})
    summary = {
        "name": a.name, "train": cfg.to_dict(), "world": world.to_dict(), "world_hash": world.config_hash(),
        "steps": report["steps"], "train_seconds": report["train_seconds"], "wall_seconds": round(wall, 1),
        "eval_seconds": report["eval_seconds"], "tokens_per_s": round(report["tokens_per_s"]),
        "padding_share": 1 - report["real_tokens"] / max(report["padded_tokens"], 1),
        "params": report["params"], "flops_per_token": report["flops_per_token"],
        "exact_match": {k: v["exact_match"] for k, v in ev.get("families", {}).items()},
        "overall": ev.get("overall", {}),
        "high_entropy_share": {k: v["high_entropy_share"] for k, v in ev.get("families", {}).items()},
        "curve": report["curve"], "failures": {k: v["failures"][:1] for k, v in ev.get("families", {}).items()},
    }
    text = json.dumps(summary, indent=1)
    print(text)
    if a.out:
        tmp = a.out + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
