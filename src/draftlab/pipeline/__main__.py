"""`python -m draftlab.pipeline <stage> [section.key=value ...]`: run one stage of the stage table — the command of
every stage in dvc.yaml. It sets OpenMP's wait policy first, before torch loads (the engine's for a decoding stage:
the table's `decoding`; draftlab.omp), then hands the stage's entry, `run(params)` of
draftlab.pipeline.steps.<stage>, to stage_main: parse the overrides, validate params.yaml, set threads and seeds,
re-execute a training stage (the table's `distributed`) under torchrun when params.trainer asks for several devices,
and turn bad input into one line."""
from __future__ import annotations

import importlib
import sys

from draftlab import omp, paths
from draftlab.pipeline.table import BY_NAME, RUNNER


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    usage = f"usage: python -m {RUNNER} STAGE [section.key=value ...], STAGE one of: {', '.join(BY_NAME)}"
    if argv and argv[0] in ("-h", "--help"):
        print(usage)
        return 0
    if not argv or argv[0] not in BY_NAME:
        print(f"error: {f'unknown stage {argv[0]!r}' if argv else 'no stage named'}; {usage}", file=sys.stderr)
        return 2
    stage = BY_NAME[argv[0]]
    omp.configure(paths.PARAMS, decoding=stage.decoding)  # before torch loads; stage_main's own call keeps it
    from draftlab.pipeline.stage import stage_main

    return stage_main(stage.name, importlib.import_module(stage.entry).run, argv[1:], distributed=stage.distributed)


if __name__ == "__main__":
    raise SystemExit(main())
