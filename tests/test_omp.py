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
    """Library code and tools set OMP_WAIT_POLICY and torch's thread count only through draftlab.omp.configure
    (tests may pin their own process's threads)."""
    import re

    bad = re.compile(r"set_num_threads\(|setdefault\(\"OMP_WAIT_POLICY|\[\"OMP_WAIT_POLICY\"\]\s*=|\"OMP_WAIT_POLICY\":")
    files = [f for d in ("src", "tools", "app") for f in (root / d).rglob("*.py")]
    hits = [f"{f.relative_to(root)}:{i}" for f in files if f.name != "omp.py"
            for i, line in enumerate(f.read_text().splitlines(), 1) if bad.search(line)]
    assert not hits, hits


def test_a_stage_sets_it_before_torch_loads(tmp_path):
    """Importing the stage module (as the runner, python -m draftlab.pipeline, does before torch) sets the profile's policy, and torch is not
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


def test_a_decoding_process_reads_the_engines_policy(tmp_path, monkeypatch):
    """The benchmark stage and `draftlab decode` decode under `engine.omp_wait_policy` (default active), the other
    stages under the profile's; the environment still wins."""
    f = tmp_path / "params.yaml"
    f.write_text("profile:\n  omp_wait_policy: passive\n")
    assert wanted(str(f)) == "passive" and wanted(str(f), decoding=True) == "active"  # the engine's default
    f.write_text("profile:\n  omp_wait_policy: active\nengine:\n  omp_wait_policy: passive\n")
    assert wanted(str(f)) == "active" and wanted(str(f), decoding=True) == "passive"
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert configure(f, decoding=True) == "PASSIVE"


def test_the_benchmark_stage_sets_the_engines_policy_before_torch_loads(tmp_path, root):
    (tmp_path / "params.yaml").write_text("profile:\n  omp_wait_policy: passive\n")
    # the runner as `python -m draftlab.pipeline benchmark` starts it, stopped right after its first configure
    code = ("import sys\nfrom draftlab.pipeline import __main__ as m\nfirst = m.omp.configure\n"
            "def once(*a, **k):\n    print(first(*a, **k), 'torch' in sys.modules)\n    raise SystemExit(0)\n"
            "m.omp.configure = once\nm.main(['benchmark'])")
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["ACTIVE", "False"]  # the engine's policy, and torch not loaded before it


def test_more_threads_than_cores_is_one_line():
    import pytest

    from draftlab.errors import ConfigError

    n = os.cpu_count() or 1
    with pytest.raises(ConfigError, match=rf"{n + 1} threads asked for, but this machine has {n} cores; set the "
                                          rf"profile's threads \(or engine.threads\) to at most {n}"):
        configure(None, n + 1)


def test_setup_records_the_machine_and_warns_when_others_compete(monkeypatch):
    from draftlab import omp

    monkeypatch.setitem(omp._START, "load_avg", [0.1, 0.2, 0.3])
    monkeypatch.setitem(omp._START, "others_running", 0)
    s = omp.setup()
    assert s["load_avg_start"] == [0.1, 0.2, 0.3] and s["cores"] == (os.cpu_count() or 1) and "warning" not in s
    assert s["threads"] >= 1 and s["wait_policy"]
    monkeypatch.setitem(omp._START, "others_running", os.cpu_count() or 1)
    assert "run ~10x slower" in omp.setup()["warning"]


def test_a_bad_engine_setting_is_one_line(root):
    import pytest

    from draftlab.errors import ConfigError
    from draftlab.params import load_params

    with pytest.raises(ConfigError, match=r"engine.omp_wait_policy='spin' is not valid; choose one of: passive, active"):
        load_params(root / "params.yaml", ["engine.omp_wait_policy=spin"])
    with pytest.raises(ConfigError, match=r"engine.threads=-1 must be an integer >= 0"):
        load_params(root / "params.yaml", ["engine.threads=-1"])
