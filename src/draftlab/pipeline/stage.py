"""What every stage shares (`python -m draftlab.pipeline <stage>` runs it; no `sys.path` edit): `stage_main` parses
`key=value` overrides, loads and validates params.yaml (check_params alone checks arm names against the arm grammar:
every other stage depends on its stamp), sets threads and seeds,
turns a `DraftlabError` into one line on stderr (exit 2; for an unreadable input file that line also names the stage
that rebuilds it) and re-executes a training stage under torchrun when params.trainer asks for several devices.
Each stage's two report files: the full detail `results/<stage>.json` (a DVC out, `cache: false`) and the few
headline numbers `metrics/<stage>.json` (a DVC metric, so `dvc metrics show` stays one screen). And what the
training stages share: a stage-tagged log, the target and references they read, their MLflow run, the budget-curve
CSV. Paths come from the one table, `draftlab.paths`."""
from __future__ import annotations

import csv
import io
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

from draftlab import paths

# OpenMP's wait policy (draftlab.omp: passive unless the profile says active) must be set before torch is
# imported, which every stage does after importing this module.
from draftlab import omp  # noqa: E402

omp.configure(paths.PARAMS)


# headline key -> dotted key of the stage's report; the benchmark (one row per arm) and the corrector (one row
# per variant) build their rows themselves and pass them to `write_report` as {row name: {key: value}}
# per arm / variant. prepare_target and reference have no headline: they prepare, they measure no method.
HEADLINES: dict[str, dict[str, str]] = {
    "pretrain_drafter": {"sim_tau": "sim_tau"},  # held-out simulated τ of the kept checkpoint
    # the seeded drafter's held-out simulated τ, and the table's τ of the lookup and the dflash-pld hybrid beside it
    "pretrain_seeded": {"sim_tau": "sim_tau", "lookup_tau": "comparison.all.tau.lookup",
                        "hybrid_tau": "comparison.all.tau.hybrid", "plain_tau": "comparison.all.tau.plain",
                        "vs_lookup": "comparison.all.pairs.seeded-lookup.diff",
                        "vs_hybrid": "comparison.all.pairs.seeded-hybrid.diff"},
    "specopd": {"sim_tau": "sim_tau_after", "sim_tau_t1": "tau_t1_surrogate_final"},  # T=1: the E2E-TV surrogate
}


def pick(report: dict, keys: dict[str, str]) -> dict[str, Any]:
    """{headline key: value} of the numeric values found at the dotted keys of `report` (missing ones left out)."""
    out = {}
    for name, dotted in keys.items():
        v: Any = report
        for part in dotted.split("."):
            v = v.get(part) if isinstance(v, dict) else None
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out[name] = v
    return out


def write_report(stage: str, report: dict, rows: dict[str, dict] | None = None) -> tuple[Path, ...]:
    """Write results/<stage>.json (the whole report) and the headline: metrics/<stage>.json picked by
    HEADLINES[stage], or, when `rows` is given, metrics/<stage>/<row>.json (one DVC metrics row each);
    none for a stage without a headline. Returns the paths written."""
    from draftlab.io import write_json, write_json_folder

    detail = write_json(paths.results(stage), report)
    if rows is not None:
        return detail, write_json_folder(Path(paths.METRICS) / stage, rows)
    if stage in HEADLINES:
        return detail, write_json(paths.metrics(stage), pick(report, HEADLINES[stage]))
    return (detail,)


def relaunch_command(devices: int, stage: str, argv: list[str]) -> list[str]:
    """The command that runs stage `stage` as `devices` processes on this node (torchrun, standalone)."""
    from draftlab.pipeline.table import RUNNER

    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={devices}", "--module",
            RUNNER, stage, *argv]


CHECKS_ARMS = "check_params"  # the one stage that checks the benchmark's arm names


def stage_main(name: str, run: Callable, argv: list[str] | None = None, distributed: bool = False) -> int:
    """Parse, validate and run a stage. `distributed`: a training stage, which runs on params.trainer's
    processes: started as one process with trainer.devices > 1 on one node, it re-executes itself under
    torchrun (every rank then runs it; `draftlab.training.dist`)."""
    os.environ.setdefault("DVC_NO_ANALYTICS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in argv):
        print(f"usage: python -m draftlab.pipeline {name} [section.key=value ...]  (reads {paths.PARAMS})")
        return 0
    from draftlab import interrupts
    from draftlab.pipeline.names import arm_names, method_names
    from draftlab.errors import DraftlabError, InputFileError
    from draftlab.params import load_params

    t0 = time.time()
    interrupts.install()  # Ctrl-C / SIGTERM: one line, exit 130 / 143
    try:
        # arm names are checked once, by check_params (every stage depends on its stamp): the arm grammar knows every
        # method, and no other stage needs it to run (the benchmark resolves its arms when it builds them)
        arms = arm_names() if name == CHECKS_ARMS else None
        params = load_params(paths.PARAMS, argv, arms=arms, names=method_names())
        if params.target.source == "toy":  # the method stages run only in the frozen toy world (draftlab.toy.freeze)
            from draftlab.toy.freeze import check_frozen

            check_frozen(name, params.target.toy, paths.TARGET)
        if distributed:
            from draftlab.config.trainer import launched
            from draftlab.training.dist import configure

            if params.trainer.world > 1 and launched()[0] == 1:  # num_nodes == 1 here (checked)
                sys.stdout.flush()
                sys.stderr.flush()
                cmd = relaunch_command(params.trainer.devices, name, argv)
                os.execv(cmd[0], cmd)
            configure(params.trainer)
        prepare(params)
        from draftlab.pipeline.trace import finish, start  # the smoke run's record of what it used (unset: nothing)

        run(start(params))
        finish(name)
    except InputFileError as e:
        print(f"error [{name}]: {e}{paths.rebuild_hint(e.path)}", file=sys.stderr)
        return 2
    except DraftlabError as e:
        print(f"error [{name}]: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        return _interrupted(name, interrupts, e)
    except SystemExit:
        if interrupts.received() is None:
            raise
        return _interrupted(name, interrupts)  # Lightning's fit turns the interrupt into sys.exit(1)
    if os.environ.get("RANK", "0") in ("", "0"):
        print(f"[{name}] done in {time.time() - t0:.1f}s", file=sys.stderr)
    return 0


def _interrupted(name: str, interrupts, exc: BaseException | None = None) -> int:
    print(f"[{name}] interrupted ({interrupts.name(exc)}): its outputs were not replaced and no temp file is left; "
          "run it again to resume from its last checkpoint", file=sys.stderr)
    return interrupts.code(exc)


def prepare(params) -> None:
    """What a stage's process sets before its recipe runs: the profile's thread count and seed (every stage
    under DVC and the offline runner alike)."""
    import torch

    omp.configure(paths.PARAMS, params.profile.threads)
    torch.manual_seed(params.profile.seed)


def stage_log(stage: str) -> Callable[[str], None]:
    """A log function that writes `[stage] msg` lines to stderr (under DDP: rank 0's only)."""
    def log(msg: str) -> None:
        if os.environ.get("RANK", "0") in ("", "0"):
            print(f"[{stage}] {msg}", file=sys.stderr, flush=True)

    return log


def require_references() -> None:
    from draftlab.errors import DraftlabError

    if not Path(paths.REFERENCES).exists():
        raise DraftlabError(f"{paths.REFERENCES} not found; run the reference stage first (dvc repro reference)")


def load_inputs(params):
    """(target, references DataFrame): the target of `params.target` and data/references.parquet."""
    from draftlab.io import read_parquet
    from draftlab.verifier.load import load_target

    from draftlab.training.dist import local_device

    t = params.target
    # under DDP each rank's target on its local rank's device (cuda -> cuda:LOCAL_RANK)
    target = load_target(paths.TARGET, local_device(t.device), t.dtype, t.attn_implementation)
    return target, read_parquet(paths.REFERENCES)


def training_run(stage: str, params, sections: tuple[str, ...]):
    """The stage's MLflow run (a context manager): the params `sections` logged, tagged by target and profile."""
    from draftlab.params import to_dict
    from draftlab.tracking import stage_run

    p = to_dict(params)
    return stage_run(stage, {k: p[k] for k in sections}, params.tracking,
                     {"target": params.target.name, "profile": params.profile.name})


def numeric(d: dict, prefix: str = "") -> dict:
    """The int / float entries of a report (bools excluded), keys prefixed: what MLflow logs as metrics."""
    return {f"{prefix}{k}": v for k, v in d.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def publish(mlrun, report: dict, metrics: Path, curve: Path, write_curve: Callable[[Path], None],
            extra_metrics: dict | None = None) -> None:
    """Write the stage's report — the headline `metrics` (metrics/<stage>.json) and the full detail
    results/<stage>.json — and budget-curve CSV (atomically), log the report's numbers as `final/...`
    (+ `extra_metrics`) and the files as artifacts of the stage's MLflow run."""
    from draftlab.io import atomic_write

    paths = write_report(Path(metrics).stem, report)
    atomic_write(curve, write_curve)
    mlrun.log_metrics({**numeric(report, "final/"), **(extra_metrics or {})})
    for p in (*paths, curve):
        mlrun.log_artifact(p)


def curve_csv(rows: list[dict]) -> str:
    """The budget curve (step, train_minutes, simulated τ per validation set) as CSV text."""
    buf = io.StringIO()
    cols = list(rows[0]) if rows else ["step", "train_minutes", "heldout"]
    w = csv.DictWriter(buf, fieldnames=cols)
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if r.get(k) is None else (round(r[k], 4) if isinstance(r[k], float) else r[k])) for k in cols})
    return buf.getvalue()
