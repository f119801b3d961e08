"""OpenMP's wait policy comes from the profile, before torch is imported (draftlab.omp)."""
from __future__ import annotations

import os
import subprocess
import sys

from draftlab.omp import configure, wanted


def test_the_profile_picks_the_policy_and_the_environment_wins(tmp_path, monkeypatch):
    f = tmp_path / "params.yaml"
    assert wanted(str(f)) == "passive"  # no file: the default
    f.write_text("profile:\n  omp_wait_policy: active\n")
    assert wanted(str(f)) == "active"
    f.write_text("profile:\n  omp_wait_policy: spin\n")  # not a policy: the default (check_params names it)
    assert wanted(str(f)) == "passive"
    f.write_text("profile: [\n")
    assert wanted(str(f)) == "passive"
    f.write_text("profile:\n  omp_wait_policy: active\n")
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert configure(f) == "ACTIVE" == os.environ["OMP_WAIT_POLICY"]
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    assert configure(str(f)) == "PASSIVE"
    monkeypatch.delenv("OMP_WAIT_POLICY")
    assert configure(None) is None and "OMP_WAIT_POLICY" not in os.environ  # None: the policy is left alone


def test_configure_sets_the_thread_count(monkeypatch):
    import torch

    n = torch.get_num_threads()
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    try:
        configure(None, 1)
        assert torch.get_num_threads() == 1 and "OMP_WAIT_POLICY" not in os.environ
        configure(None, 0)  # 0: the count is left as it is
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(n)


def test_one_place_sets_threads_and_the_wait_policy(root):
    """Library code, stages and tools set OMP_WAIT_POLICY and torch's thread count only through draftlab.omp.configure
    (tests may pin their own process's threads)."""
    import re

    bad = re.compile(r"set_num_threads\(|setdefault\(\"OMP_WAIT_POLICY|\[\"OMP_WAIT_POLICY\"\]\s*=|\"OMP_WAIT_POLICY\":")
    files = [f for d in ("src", "stages", "tools", "app") for f in (root / d).rglob("*.py")]
    hits = [f"{f.relative_to(root)}:{i}" for f in files if f.name != "omp.py"
            for i, line in enumerate(f.read_text().splitlines(), 1) if bad.search(line)]
    assert not hits, hits


def test_a_stage_sets_it_before_torch_loads(tmp_path):
    """Importing the stage module (as every stage script does first) sets the profile's policy, and torch is not
    yet loaded then — the OpenMP runtime reads the variable once, at load."""
    (tmp_path / "params.yaml").write_text("profile:\n  omp_wait_policy: active\n")
    code = ("import os, sys; import draftlab.pipeline.stage; "
            "print(os.environ['OMP_WAIT_POLICY'], 'torch' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["ACTIVE", "False"]


def test_a_bad_policy_is_one_line(root):
    import pytest

    from draftlab.errors import ConfigError
    from draftlab.params import load_params

    with pytest.raises(ConfigError, match=r"profile.omp_wait_policy='spin' is not valid; choose one of: passive, active"):
        load_params(root / "params.yaml", ["profile.omp_wait_policy=spin"])
