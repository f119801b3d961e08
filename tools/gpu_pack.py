"""Prepare what an offline accelerator machine lacks for the regime run: `python tools/gpu_pack.py [--out gpu-pack]
[--profile gpu-small] [-S key=value ...]` (`make gpu-pack`). Writes the selected prompts, the pure-Python wheels and
the target GGUF in parts, each piece ≤ 64 MiB, with manifest.json (draftlab.offline.pack; docs/gpu.md)."""
import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="gpu_pack.py", description="the pack for an offline regime run")
    ap.add_argument("--out", default="gpu-pack")
    ap.add_argument("--profile", default="gpu-small")
    ap.add_argument("--dry", action="store_true", help="the rehearsal's sizes (what gpu_run.py --dry packs itself)")
    ap.add_argument("-S", dest="overrides", action="append", default=[])
    a = ap.parse_args(argv)
    from draftlab.checks.common import git_sha
    from draftlab.errors import DraftlabError
    from draftlab.offline import pack
    from draftlab.offline.runner import compose

    try:
        params, raw = compose(a.profile, a.dry, a.overrides)
        out = Path(a.out).resolve()
        m = pack.build(params, raw, out, git_sha(ROOT) or "unknown")
    except DraftlabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    total = sum(v["bytes"] for v in m["pieces"].values())
    for piece, v in m["pieces"].items():
        print(f"  {v['bytes'] / 2**20:8.2f} MiB  {piece}")
    print(f"[gpu-pack] {len(m['pieces'])} pieces, {total / 2**20:.1f} MiB in all, in {out} (profile {m['profile']}, "
          f"commit {m['commit'][:12]})")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    raise SystemExit(main(sys.argv[1:]))
