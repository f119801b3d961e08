"""`--render` takes the commit the pack was made at (issue 49, item 8): a bundle of an earlier commit than HEAD renders
with `--commit SHA` when SHA is the bundle's; any other commit is one line that says how to pass it. The rehearsal's
outputs are git-ignored."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from draftlab.errors import DraftlabError
from draftlab.offline import bundle, render

ROOT = Path(__file__).resolve().parents[2]
PACKED_AT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def out(tmp_path):
    work = tmp_path / "work"
    (work / "results").mkdir(parents=True)
    (work / "metrics").mkdir()
    (work / "results" / "reference.json").write_text(json.dumps({"sequences": 3}))
    (work / "metrics" / "pretrain_drafter.json").write_text(json.dumps({"sim_tau": 1.5}))
    bundle.write(tmp_path / "out", {"profile": "gpu-small", "commit": PACKED_AT, "mode": "full",
                                    "finished": ["reference"], "failed": None}, work, "log")
    return tmp_path / "out"


def test_a_bundle_of_the_packs_commit_renders_with_commit(out, tmp_path):
    with pytest.raises(DraftlabError) as e:
        render.render(out, tmp_path / "root", "gpu-small", head="f" * 40)
    msg = str(e.value)
    assert "\n" not in msg and f"--commit {PACKED_AT[:12]}" in msg and "--any-commit" in msg, msg
    for sha in (PACKED_AT, PACKED_AT[:7], PACKED_AT.upper()):
        line = render.render(out, tmp_path / "root", "gpu-small", head="f" * 40, commit=sha)
        assert line.startswith("rendered") and "\n" not in line
    assert (tmp_path / "root/results/gpu-small/reference.json").is_file()


@pytest.mark.parametrize("sha,needle", [("fedcba9876543", "not --commit fedcba987654"), ("01234", "7 to 40 hex digits"),
                                        ("main", "not a commit sha")])
def test_another_commit_is_one_line(out, tmp_path, sha, needle):
    with pytest.raises(DraftlabError) as e:
        render.render(out, tmp_path / "root", "gpu-small", head=PACKED_AT, commit=sha)
    assert "\n" not in str(e.value) and needle in str(e.value), str(e.value)
    assert not (tmp_path / "root").exists()


def test_the_script_passes_commit_to_render(out):
    """A wrong --commit from the command line is refused naming it (so it reached the render), in one line."""
    proc = subprocess.run([sys.executable, str(ROOT / "tools/gpu_run.py"), "--render", str(out), "--commit", "fedcba98"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "not --commit fedcba98" in proc.stderr, proc.stderr


def test_the_rehearsals_outputs_are_git_ignored():
    paths = ["gpu-out-dry/bundle.json", "results/gpu-small-dry/benchmark.json", "metrics/gpu-small-dry/specopd.json",
             "gpu-work-dry/run.log", "gpu-pack/manifest.json"]
    proc = subprocess.run(["git", "check-ignore", "--no-index", *paths], cwd=ROOT, capture_output=True, text=True)
    assert sorted(proc.stdout.split()) == sorted(paths), proc.stdout
    kept = subprocess.run(["git", "check-ignore", "--no-index", "results/gpu-small/benchmark.json",
                           "metrics/gpu-small/specopd.json"], cwd=ROOT, capture_output=True, text=True)
    assert kept.stdout == ""  # the real run's rendered results are committed
