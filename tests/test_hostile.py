"""Hostile and careless inputs: each ends with exit code 2 and one line naming the field or file, no
traceback, and not a byte changed outside normgrow's own files (the target tree is hashed before and after)."""

import hashlib
import json
import os
from pathlib import Path

import pytest

from conftest import cli, tiny_cfg
from normgrow.pipeline import quiet, run


def tree_hash(root: Path) -> str:
    """sha256 over every path and file content under root (root itself included)."""
    h = hashlib.sha256()
    if root.is_file():
        h.update(root.read_bytes())
        return h.hexdigest()
    for p in sorted(root.rglob("*")):
        h.update(str(p.relative_to(root)).encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


def refused(proc, needle: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and len(lines) == 1, proc.stderr[-2000:]
    assert needle in lines[0], lines[0]


@pytest.fixture(scope="module")
def tiny_run(tiny_cache, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("hostile") / "run"
    run(tiny_cfg(tiny_cache), out, log=quiet, progress=False)
    return out


def test_export_never_deletes_a_users_folder(tiny_run, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("my thesis")
    (mine / "metrics.jsonl").write_text("{}\n")  # looking like a run is not enough
    before = tree_hash(mine)
    refused(cli("export", tiny_run, "-o", mine, check=False), "files normgrow did not write")
    assert tree_hash(mine) == before
    # --force is the explicit way to replace it
    cli("export", tiny_run, "-o", mine, "--force")
    assert (mine / "config.json").is_file() and not (mine / "notes.txt").exists()


@pytest.mark.parametrize("target", ["run", "parent", "cwd"])
def test_export_never_targets_the_run_or_a_parent_of_it(tiny_run, target, monkeypatch):
    before = tree_hash(tiny_run.parent)
    dest = {"run": tiny_run, "parent": tiny_run.parent, "cwd": Path(".")}[target]
    if target == "cwd":
        monkeypatch.chdir(tiny_run)  # `-o .` from inside the run directory
    for extra in ([], ["--force"]):
        refused(cli("export", tiny_run, "-o", dest, *extra, check=False), "is the run directory")
    assert tree_hash(tiny_run.parent) == before


def test_export_to_a_file_is_one_line(tiny_run, tmp_path):
    f = tmp_path / "model.bin"
    f.write_bytes(b"\x00\x01")
    refused(cli("export", tiny_run, "-o", f, check=False), "is not a directory")
    assert f.read_bytes() == b"\x00\x01"


def test_export_replaces_its_own_previous_export_but_not_another_runs(tiny_run, tiny_cache, tmp_path):
    dest = tmp_path / "hf"
    cli("export", tiny_run, "-o", dest)
    first = json.loads((dest / "normgrow_export.json").read_text())
    os.utime(dest / "config.json", (0, 0))
    cli("export", tiny_run, "-o", dest)  # same run again: replaced in place
    assert json.loads((dest / "normgrow_export.json").read_text()) == first
    assert (dest / "config.json").stat().st_mtime > 0
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".hf.")]  # no temp or set-aside dirs left
    other = tmp_path / "other-run"
    run(tiny_cfg(tiny_cache, "model.norm=post"), other, log=quiet, progress=False)
    before = tree_hash(dest)
    refused(cli("export", other, "-o", dest, check=False), "an export of another run")
    assert tree_hash(dest) == before


def test_run_refuses_a_non_empty_folder_that_is_not_a_run(tiny_cache, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "metrics.jsonl").write_text('{"my": "results"}\n')
    before = tree_hash(mine)
    refused(cli("run", "tiny", f"data.cache_dir={tiny_cache}", "-o", mine, "--no-progress", check=False),
            "not empty and not a normgrow run directory")
    assert tree_hash(mine) == before


def test_a_study_naming_an_arm_twice_is_refused(tmp_path):
    spec = tmp_path / "twice.yaml"
    spec.write_text("name: twice\nbase: tiny\nseeds: [0]\narms:\n  a: {overrides: [model.norm=pre]}\n"
                    "  a: {overrides: [model.norm=post]}\n")
    refused(cli("study", spec, "-o", tmp_path / "out", check=False), "key 'a' given twice")
    assert not (tmp_path / "out").exists()


def test_a_binary_file_as_config_is_one_line(tmp_path):
    blob = tmp_path / "weights.yaml"
    blob.write_bytes(bytes(range(256)) * 4)
    refused(cli("run", blob, "-o", tmp_path / "out", check=False), "not a text (UTF-8) file")
    assert not (tmp_path / "out").exists()


def test_a_teacher_shorter_than_the_sequence_is_one_line(tiny_cache, tmp_path):
    import shutil

    from normgrow.teacher import default_teacher_dir

    short = tmp_path / "short-teacher"
    shutil.copytree(default_teacher_dir(tiny_cfg(tiny_cache)), short)
    cfg = json.loads((short / "config.json").read_text())
    cfg["max_position_embeddings"] = 16  # the tiny runs use sequences of 32
    (short / "config.json").write_text(json.dumps(cfg))
    refused(cli("run", "tiny", f"data.cache_dir={tiny_cache}", f"teacher.path={short}", "-o", tmp_path / "out",
                "--no-progress", check=False), "data.seq_len: 32 is longer than the teacher's max_position_embeddings 16")
    assert not (tmp_path / "out").exists()


def test_a_cache_path_without_a_cache_is_one_line(tiny_cache, tmp_path):
    empty = tmp_path / "not-a-cache"
    empty.mkdir()
    refused(cli("run", "tiny", f"data.cache_dir={tiny_cache}", f"teacher.cache_path={empty}", "-o", tmp_path / "out",
                "--no-progress", check=False), f"teacher.cache_path: {empty} holds no teacher cache")
    assert not (tmp_path / "out").exists()
