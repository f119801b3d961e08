"""Stage check_params: the pipeline's first stage. It validates params.yaml before any other stage runs
(every section, the rules across sections, arm names against the arm table, every record of every
local prompt file), so a typo or an unknown arm fails here in one line, before DVC removes any output.

It also runs the cost plan's memory and disk check (`draftlab.plan.report.check_run`) for the device the run
will use: each stage's largest step against a CUDA device's memory (target.device; auto = CUDA when present)
or, on CPU, the machine's physical RAM, and each feature cache against the free disk; a step or cache that does
not fit is one line naming the key to change (`draftlab plan` prints the terms).

It always runs (a few seconds) and writes, atomically and only after the checks pass:
- data/checks/params.ok: constant text; every stage depends on it, so it orders them after this one
  and never makes one re-run;
- data/checks/reference_prompts.json / benchmark_prompts.json: the sha256 of each local prompt file
  that the reference / benchmark stage reads, so editing such a file re-runs exactly that stage.
"""
from __future__ import annotations


OK_TEXT = "params.yaml passed the check_params stage\n"


def local_files(params) -> dict[str, dict[str, str]]:
    """stage -> {suite name (or 'local_jsonl') -> file} of the local prompt files that stage reads. The
    benchmark's sharegpt-chat suite is carved from the pools the reference stage splits, so with it the
    benchmark reads the reference stage's files too."""
    from draftlab.data.suites import CHAT_SUITE

    d = params.data
    ref = {s: d.local_suites[s] for s in d.eval_suites if s in d.local_suites}
    if d.local_jsonl:
        ref["local_jsonl"] = d.local_jsonl
    bench = {s: d.local_suites[s] for s in params.benchmark.suites if s in d.local_suites}
    if CHAT_SUITE in params.benchmark.suites:
        bench.update(ref)
    return {"reference": ref, "benchmark": bench}


def run(params) -> None:
    import hashlib
    import json
    from pathlib import Path

    from draftlab.io import atomic_write
    from draftlab.paths import CHECKS, TARGET
    from draftlab.arms.grammar import check_trained
    from draftlab.pipeline.layout import check_model_folders
    from draftlab.plan.report import check_run

    check_model_folders(params)
    check_trained(params)  # every arm's corrector variants (and control) trained by the corrector stage
    if params.target.source == "toy":  # the toy world's knobs and its target's recipe (one line if wrong)
        from draftlab.toy.world import train_config, world_config

        print(f"toy world {world_config(params.target.toy).config_hash()[:12]}…, target recipe "
              f"{train_config(params.target.toy)}")
    print(f"memory: {check_run(params, TARGET)}")
    out = Path(CHECKS)
    for stage, files in local_files(params).items():
        record = {name: {"path": path, "sha256": hashlib.sha256(Path(path).read_bytes()).hexdigest()}
                  for name, path in sorted(files.items())}
        text = json.dumps(record, indent=2, sort_keys=True) + "\n"
        atomic_write(out / f"{stage}_prompts.json", lambda p, t=text: p.write_text(t))
    atomic_write(out / "params.ok", lambda p: p.write_text(OK_TEXT))
