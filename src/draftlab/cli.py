"""The `draftlab` console script.

    draftlab export DRAFTER_FOLDER OUT   our drafter folder -> the DFlash authors' reference format
                                         (config.json with dflash_config + model.safetensors)
    draftlab import REF_FOLDER OUT       a reference DFlash folder (e.g. a public checkpoint on disk)
                                         -> our drafter folder (then benchmark it with benchmark.drafter=OUT)

Neither needs the target's weights. Errors are one line on stderr and exit code 2.
"""
from __future__ import annotations

import argparse
import sys

from draftlab.errors import DraftlabError


def _export(src: str, dst: str) -> str:
    from torch import nn

    from draftlab.drafter.checkpoint import read_arch
    from draftlab.drafter.model import DFlashDrafter
    from draftlab.drafter.refformat import check_exportable, export_reference
    from draftlab.io import read_folder_tensors

    arch, _ = read_arch(src)
    check_exportable(arch)
    drafter = DFlashDrafter(arch, nn.Embedding(1, 1), nn.Linear(1, 1))  # the target's head is not needed
    drafter.load_state_dict(read_folder_tensors(src, "drafter"), strict=True)
    return str(export_reference(drafter, dst))


def _import(src: str, dst: str) -> str:
    from draftlab.drafter.refformat import import_reference

    return str(import_reference(src, dst))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="draftlab", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name, what in (("export", "our drafter folder -> the reference DFlash format"),
                       ("import", "a reference DFlash folder -> our drafter folder")):
        p = sub.add_parser(name, help=what)
        p.add_argument("src")
        p.add_argument("dst")
    args = ap.parse_args(argv)
    try:
        out = (_export if args.cmd == "export" else _import)(args.src, args.dst)
    except DraftlabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
