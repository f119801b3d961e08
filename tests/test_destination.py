"""Nothing lost: `draftlab export` / `import` never remove what they did not write (the current folder, the
source, a folder holding the source or other files are refused in one line, a previous result is replaced only
with --force and then only its own two files), and every file the project writes gets the mode the umask asks
for (0644 / 0755 under umask 022), stage outputs and exports alike."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import torch

from conftest import tiny_target
from draftlab.cli import main
from draftlab.destination import WRITTEN_BY, check_destination, previous_result, write_files
from draftlab.drafter.checkpoint import save_drafter
from draftlab.drafter.model import DFlashDrafter, DrafterDesign, arch_from_target
from draftlab.errors import DraftlabError
from draftlab.io import atomic_write, save_weights_folder, weights_metadata, write_json, write_json_folder


target = pytest.fixture(scope="module", name="target")(lambda: tiny_target("qwen3", layers=5))  # taps 1 and 3 inside


@pytest.fixture(scope="module")
def folders(target, tmp_path_factory):
    """A target folder and our drafter folder (the export's source)."""
    root = tmp_path_factory.mktemp("dest")
    target.model.save_pretrained(root / "target")
    torch.manual_seed(0)
    arch = arch_from_target(target, DrafterDesign(block_size=4, num_layers=1, target_layer_ids=[1, 3], mask_token_id=7))
    save_drafter(DFlashDrafter.from_target(arch, target).eval(), root / "models" / "drafter")
    return root


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def export(args: list[str], capsys) -> tuple[int, list[str]]:
    capsys.readouterr()
    code = main(["export", *args])
    return code, capsys.readouterr().err.strip().splitlines()


@pytest.fixture
def umask022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_export_refuses_the_current_folder_and_the_source_and_its_ancestors(folders, capsys, monkeypatch, tmp_path):
    src, tgt = folders / "models" / "drafter", str(folders / "target")
    before = snapshot(folders)
    monkeypatch.chdir(folders)
    for dst, needle in ((".", "is the current folder"), (str(folders), "is the current folder"),
                        ("models", "holds the source"), (str(src), "is the source folder itself"),
                        (str(src / "out"), "lies inside the source")):
        code, err = export([str(src), dst, "--for", "vllm", "--target", tgt], capsys)
        assert code == 2 and len(err) == 1 and needle in err[0], (dst, err)
        code, err = export([str(src), dst, "--for", "vllm", "--target", tgt, "--force"], capsys)
        assert code == 2 and len(err) == 1 and needle in err[0], (dst, err)  # --force does not lift these
    assert snapshot(folders) == before  # every file in place
    monkeypatch.chdir(tmp_path)  # the current folder is refused even when empty: `.` is never a destination
    code, err = export([str(src), ".", "--target", tgt], capsys)
    assert code == 2 and "current folder" in err[0] and not any(tmp_path.iterdir())


def test_export_into_a_folder_of_other_files_touches_nothing_even_with_force(folders, capsys, tmp_path):
    src, tgt = folders / "models" / "drafter", str(folders / "target")
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    (other / "config.json").write_text('{"mine": true}')
    before = snapshot(other)
    for extra in ([], ["--force"]):
        code, err = export([str(src), str(other), "--target", tgt, *extra], capsys)
        assert code == 2 and len(err) == 1 and "not a previous export" in err[0] and "--force" in err[0], err
        assert snapshot(other) == before
    # a stage's own drafter folder is not a previous export either (its safetensors say so)
    code, err = export([str(src), str(folders / "target"), "--target", tgt, "--force"], capsys)
    assert code == 2 and "not a previous export" in err[0]


def test_force_replaces_only_a_previous_exports_own_files(folders, capsys, tmp_path, umask022):
    src, tgt = folders / "models" / "drafter", str(folders / "target")
    out = tmp_path / "served"
    assert export([str(src), str(out), "--for", "vllm", "--target", tgt], capsys)[0] == 0
    assert weights_metadata(out)[WRITTEN_BY] == "export" and previous_result(out, "export")
    (out / "README.md").write_text("how we serve it")  # the user's own file beside the export
    code, err = export([str(src), str(out), "--for", "vllm", "--target", tgt], capsys)
    assert code == 2 and len(err) == 1 and "previous export; pass --force" in err[0]
    before = snapshot(out)
    assert export([str(src), str(out), "--for", "sglang", "--dtype", "float32", "--target", tgt, "--force"], capsys)[0] == 0
    after = snapshot(out)
    assert after["README.md"] == before["README.md"] and set(after) == set(before)
    assert after["model.safetensors"] != before["model.safetensors"]  # float32 now
    for name in ("config.json", "model.safetensors"):  # the export's files are readable by others
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o644
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    # an export written before the metadata entry (only `draftlab: dflash-reference`) is still recognised
    meta = weights_metadata(out)
    assert meta["draftlab"] == "dflash-reference"


def test_bad_places_are_one_line_and_remove_nothing(folders, capsys, tmp_path):
    src, tgt = folders / "models" / "drafter", str(folders / "target")
    f = tmp_path / "a-file"
    f.write_text("x")
    for dst, needle in ((f / "out", "which is a file"), (f, "is a file, not a folder"),
                        (Path("/proc/draftlab-out"), "cannot write")):
        code, err = export([str(src), str(dst), "--target", tgt], capsys)
        assert code == 2 and len(err) == 1 and needle in err[0], (dst, err)
    assert f.read_text() == "x"
    if os.geteuid() != 0:  # root writes anywhere: the permission check needs an ordinary user
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        code, err = export([str(src), str(ro / "out"), "--target", tgt], capsys)
        assert code == 2 and "permission denied" in err[0]


def test_import_guards_its_destination_and_refuses_a_vllm_export(folders, capsys, tmp_path, target):
    src, tgt = folders / "models" / "drafter", str(folders / "target")
    ref = tmp_path / "ref"
    assert export([str(src), str(ref), "--for", "dflash", "--dtype", "float32", "--target", tgt], capsys)[0] == 0
    back = tmp_path / "back"
    assert main(["import", str(ref), str(back)]) == 0
    assert previous_result(back, "import") and not previous_result(back, "export")
    capsys.readouterr()
    assert main(["import", str(ref), str(back)]) == 2
    assert "previous import; pass --force" in capsys.readouterr().err
    assert main(["import", str(ref), str(back), "--force"]) == 0
    # into the source drafter folder a stage wrote: refused, --force or not
    before = snapshot(folders / "models")
    capsys.readouterr()
    assert main(["import", str(ref), str(src), "--force"]) == 2
    assert "not a previous import" in capsys.readouterr().err and snapshot(folders / "models") == before
    # the project's own --for vllm export (a reduced vocabulary) is one line, not "Error(s) in loading state_dict"
    torch.manual_seed(0)
    vocab = torch.randperm(target.vocab_size)[:40]
    arch = arch_from_target(target, DrafterDesign(block_size=4, num_layers=1, target_layer_ids=[1, 3], mask_token_id=7,
                            draft_vocab_size=40))
    save_drafter(DFlashDrafter.from_target(arch, target, vocab).eval(), tmp_path / "small")
    assert export([str(tmp_path / "small"), str(tmp_path / "v"), "--for", "vllm", "--target", tgt], capsys)[0] == 0
    assert main(["import", str(tmp_path / "v"), str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "reduced 40-token vocabulary" in err[0] and "Error(s)" not in err[0], err
    assert not (tmp_path / "w").exists()


def test_write_files_never_removes_and_an_os_error_is_one_line(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    (d / "keep").write_text("k")
    write_files(d, {"a.txt": lambda p: p.write_text("1")})
    assert (d / "keep").read_text() == "k" and (d / "a.txt").read_text() == "1"
    with pytest.raises(DraftlabError, match="cannot write"):
        write_files(Path("/proc/no/such"), {"a": lambda p: p.write_text("1")})
    with pytest.raises(DraftlabError, match="the source folder itself"):
        check_destination(d, d, "export")


def test_every_written_file_and_folder_gets_the_umask_mode(tmp_path, umask022):
    mode = lambda p: stat.S_IMODE(p.stat().st_mode)  # noqa: E731
    assert mode(atomic_write(tmp_path / "a.txt", lambda p: p.write_text("x"))) == 0o644
    assert mode(write_json(tmp_path / "m.json", {"a": 1})) == 0o644
    folder = write_json_folder(tmp_path / "rows", {"x": {"a": 1}})
    assert mode(folder) == 0o755 and mode(folder / "x.json") == 0o644
    w = save_weights_folder(tmp_path / "w", {"a": 1}, {"t": torch.zeros(2)}, "test")
    assert mode(w) == 0o755 and all(mode(p) == 0o644 for p in w.iterdir())
    os.umask(0o077)  # a stricter umask is honoured too
    assert mode(atomic_write(tmp_path / "b.txt", lambda p: p.write_text("x"))) == 0o600
