"""Hostile and careless inputs: each ends with exit code 2 and one line naming the field or file, no
traceback, and not a byte changed outside normgrow's own files (the target tree is hashed before and after)."""

import hashlib
import json
import os
from pathlib import Path

import pytest

from conftest import cli, tiny_cfg
from normgrow.run.pipeline import quiet, run


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
    out = tmp_path_factory.mktemp("hostile é") / "a run ü"  # spaces and non-ASCII in every path below
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


@pytest.mark.parametrize("target", ["run", "parent", "cwd", "link to the run", "link to its parent"])
def test_export_never_targets_the_run_or_a_parent_of_it(tiny_run, target, monkeypatch, tmp_path):
    before = tree_hash(tiny_run.parent)
    for name, to in (("link to the run", tiny_run), ("link to its parent", tiny_run.parent)):
        (tmp_path / name).symlink_to(to, target_is_directory=True)
    dest = {"run": tiny_run, "parent": tiny_run.parent, "cwd": Path(".")}.get(target, tmp_path / target)
    if target == "cwd":
        monkeypatch.chdir(tiny_run)  # `-o .` from inside the run directory
    for extra in ([], ["--force"]):
        refused(cli("export", tiny_run, "-o", dest, *extra, check=False), "is the run directory")
    assert tree_hash(tiny_run.parent) == before


def test_export_through_a_link_lands_in_its_target_and_keeps_the_link(tiny_run, tmp_path):
    target, link = tmp_path / "on another disk", tmp_path / "hf link"
    target.mkdir()
    link.symlink_to(target, target_is_directory=True)
    cli("export", tiny_run, "-o", link)
    assert link.is_symlink() and link.resolve() == target.resolve() and (target / "config.json").is_file()
    cli("export", tiny_run, "-o", link)  # its own previous export, through the link: replaced in the target
    assert link.is_symlink() and (target / "normgrow_export.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf link", "on another disk"]  # no temp dirs left


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
    refused(
        cli("run", "tiny", f"data.cache_dir={tiny_cache}", "-o", mine, "--no-progress", check=False),
        "not empty and not a normgrow run directory",
    )
    assert tree_hash(mine) == before


def test_a_study_naming_an_arm_twice_is_refused(tmp_path):
    spec = tmp_path / "twice.yaml"
    spec.write_text(
        "name: twice\nbase: tiny\nseeds: [0]\narms:\n  a: {overrides: [model.norm=pre]}\n"
        "  a: {overrides: [model.norm=post]}\n"
    )
    refused(cli("study", spec, "-o", tmp_path / "out", check=False), "key 'a' given twice")
    assert not (tmp_path / "out").exists()


def test_a_binary_file_as_config_is_one_line(tmp_path):
    blob = tmp_path / "weights.yaml"
    blob.write_bytes(bytes(range(256)) * 4)
    refused(cli("run", blob, "-o", tmp_path / "out", check=False), "not a text (UTF-8) file")
    assert not (tmp_path / "out").exists()


def test_a_teacher_shorter_than_the_sequence_is_one_line(tiny_cache, tmp_path):
    import shutil

    from normgrow.run.pipeline import default_teacher_dir

    short = tmp_path / "short-teacher"
    shutil.copytree(default_teacher_dir(tiny_cfg(tiny_cache)), short)
    cfg = json.loads((short / "config.json").read_text())
    cfg["max_position_embeddings"] = 16  # the tiny runs use sequences of 32
    (short / "config.json").write_text(json.dumps(cfg))
    refused(
        cli(
            "run",
            "tiny",
            f"data.cache_dir={tiny_cache}",
            f"teacher.path={short}",
            "-o",
            tmp_path / "out",
            "--no-progress",
            check=False,
        ),
        "data.seq_len: 32 is longer than the teacher's max_position_embeddings 16",
    )
    assert not (tmp_path / "out").exists()


def test_a_cache_path_without_a_cache_is_one_line(tiny_cache, tmp_path):
    empty = tmp_path / "not-a-cache"
    empty.mkdir()
    refused(
        cli(
            "run",
            "tiny",
            f"data.cache_dir={tiny_cache}",
            f"teacher.cache_path={empty}",
            "-o",
            tmp_path / "out",
            "--no-progress",
            check=False,
        ),
        f"teacher.cache_path: {empty} holds no teacher cache",
    )
    assert not (tmp_path / "out").exists()


def test_a_corpus_edited_in_place_gets_its_own_default_teacher(tiny_cache, tmp_path):
    """The default teacher is named by the corpus's content: editing a corpus file (even with its size and
    modification time put back) leads the next run to a new teacher instead of the one trained on the old text."""
    import sysconfig

    from normgrow.run.pipeline import default_teacher_dir

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for name in ("textwrap.py", "colorsys.py", "bisect.py", "fnmatch.py", "glob.py", "shlex.py"):
        (corpus / f"{name}.txt").write_text((stdlib / name).read_text())
    cfg = tiny_cfg(tiny_cache, f"data.corpus={corpus}", "data.val_fraction=0.3")
    before = default_teacher_dir(cfg)
    assert default_teacher_dir(cfg) == before  # stable while nothing changes
    target = corpus / "glob.py.txt"
    st = target.stat()
    text = target.read_text()
    target.write_text(text[:-4] + "Q" * 4)  # same size …
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))  # … and the old modification time
    after = default_teacher_dir(cfg)
    assert after != before and after.parent == before.parent


@pytest.mark.e2e
def test_a_default_teacher_with_another_tokenizer_is_one_line(tiny_cache, tmp_path):
    """A default teacher whose tokenizer is not the run's (here: copied by hand into the place of another
    vocabulary's teacher) is refused, naming both tokenizers' hashes."""
    import shutil

    from normgrow.run.pipeline import default_teacher_dir

    tiny = default_teacher_dir(tiny_cfg(tiny_cache))
    recorded = json.loads((tiny / "normgrow_teacher.json").read_text())["tokenizer_sha256"]
    other = tiny_cfg(tiny_cache, "data.tokenizer=bpe", "data.vocab_size=600")
    target = default_teacher_dir(other)
    assert target != tiny and not target.exists()
    shutil.copytree(tiny, target)
    try:
        proc = cli(
            "run",
            "tiny",
            f"data.cache_dir={tiny_cache}",
            "data.tokenizer=bpe",
            "data.vocab_size=600",
            "-o",
            tmp_path / "out",
            "--no-progress",
            check=False,
        )
    finally:
        shutil.rmtree(target)
    refused(proc, f"was trained with tokenizer {recorded[:12]}, but this run's tokenizer is ")
    assert not (tmp_path / "out").exists()


def test_a_teacher_rewritten_in_place_is_hashed_again(tmp_path):
    """The memo of teacher weight hashes (a 16 GB teacher is hashed once) must not vouch for a file rewritten
    in place with its size and modification time put back."""
    from normgrow.teacher.cache import teacher_identity

    teacher = tmp_path / "teacher"
    teacher.mkdir()
    (teacher / "config.json").write_text("{}")
    weights = teacher / "model.safetensors"
    weights.write_bytes(bytes(range(256)) * 4096)  # 1 MiB
    memo = tmp_path / "memo.json"
    first = teacher_identity(str(teacher), memo)["weights_sha256"]
    assert teacher_identity(str(teacher), memo)["weights_sha256"] == first
    st = weights.stat()
    data = bytearray(weights.read_bytes())
    data[123_457] ^= 0xFF
    weights.write_bytes(bytes(data))
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert weights.stat().st_size == st.st_size and weights.stat().st_mtime_ns == st.st_mtime_ns
    assert teacher_identity(str(teacher), memo)["weights_sha256"] != first


@pytest.mark.e2e
def test_a_corpus_with_a_huge_word_prepares(tmp_path):
    """One 2 MB 'word' (no whitespace) used to make BPE training quadratic (minutes for 20 MB, no output):
    training now sees it in 256-character pieces; the shards still hold all of it."""
    import subprocess
    import sys

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "blob.txt").write_text("ab" * 1_000_000)
    for i in range(12):
        (corpus / f"doc{i}.txt").write_text(f"def f{i}(x):\n    return x + {i}\n" * 20)
    args = [
        "prepare",
        "tiny",
        f"data.corpus={corpus}",
        "data.tokenizer=bpe",
        "teacher.path=none",
        "data.max_documents=null",
        "data.val_fraction=0.3",
        f"data.cache_dir={tmp_path / 'cache'}",
    ]
    proc = subprocess.run([sys.executable, "-m", "normgrow.cli", *args], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "trained a byte-level BPE" in proc.stdout + proc.stderr
    meta = json.loads(next((tmp_path / "cache" / "shards").glob("*/meta.json")).read_text())
    assert sum(meta["n_tokens"].values()) > 2_000_000 / 256  # the blob is tokenized, not dropped


def test_a_student_too_large_for_the_machine_is_one_line(tiny_cache, tmp_path):
    """Before: an allocator traceback after 22 s. Now the weights and optimizer state are estimated from the
    config (a lower bound) and compared with the free memory before anything is allocated or written."""
    proc = cli(
        "run",
        "tiny",
        f"data.cache_dir={tiny_cache}",
        "model.d_model=1000000",
        "-o",
        tmp_path / "out",
        "--no-progress",
        check=False,
    )
    refused(proc, "model.d_model=1000000")
    assert "GiB for its weights, gradients and optimizer state" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_a_batch_that_torchrun_cannot_split_is_one_line_before_anything_starts(tmp_path):
    """Under raw torchrun each rank prints the right line and torchrun then adds its own traceback; a study
    that would launch such runs is refused before it starts any."""
    proc = cli("study", "tiny", "-o", tmp_path / "s", "launcher.torchrun_nproc=2", "train.batch_size=7", check=False)
    refused(proc, "train.batch_size: 7 is not divisible by launcher.torchrun_nproc=2")
    assert not (tmp_path / "s").exists()


def test_a_corpus_of_binary_files_says_so(tmp_path):
    """Before: 'holds no non-empty documents' for a folder of binary files."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(3):
        (corpus / f"blob{i}.bin").write_bytes(b"\x00\x01\x02" * 100)
    before = tree_hash(corpus)
    refused(
        cli(
            "prepare",
            "tiny",
            f"data.corpus={corpus}",
            "data.tokenizer=bpe",
            "teacher.path=none",
            f"data.cache_dir={tmp_path / 'cache'}",
            check=False,
        ),
        "its 3 file(s) are binary, not text",
    )
    assert tree_hash(corpus) == before


@pytest.mark.parametrize("text", ["", "\n\n", "# a comment, nothing else\n"])
def test_an_empty_yaml_file_is_refused_in_every_verb_that_reads_one(tmp_path, text):
    """An empty file (or comments only) is more likely cut or the wrong file than a wish for the defaults: one line,
    exit 2, nothing written; `{}` is the way to ask for the built-in defaults in a file (docs/DESIGN.md)."""
    path = tmp_path / "config.yaml"
    path.write_text(text)
    before = tree_hash(tmp_path)
    for verb in (
        ["config"],
        ["model"],
        ["plan", "--no-measure"],
        ["run", "-o", tmp_path / "r"],
        ["study", "-o", tmp_path / "s"],
    ):
        refused(cli(verb[0], path, *verb[1:], check=False), f"{path}: is empty (no config keys)")
    assert tree_hash(tmp_path) == before
    path.write_text("{}\n")
    assert "name: ''" in cli("config", path).stdout  # the built-in defaults, as with no config at all
    assert cli("config", path).stdout == cli("config").stdout


def test_every_verb_takes_paths_with_spaces_and_non_ascii(tiny_run, tiny_cache, tmp_path):
    """The verbs not covered by the fixtures' own paths (the tests' cache, stand-in and run all carry a space and
    non-ASCII characters): a config file, an output and a run directory named so, each verb to its end."""
    root = tmp_path / "my files ß é"
    root.mkdir()
    cfg = root / "a config ü.yaml"
    cfg.write_text(f"base: tiny\ndata: {{cache_dir: '{tiny_cache}'}}\n")
    assert f"cache_dir: {tiny_cache}" in cli("config", cfg).stdout
    assert "parameters: total" in cli("model", cfg).stdout
    assert "reused cached token shards" in cli("prepare", cfg).stdout
    assert "plan of run" in cli("plan", cfg, "--no-measure").stdout
    assert "checkpoints diagnosed" in cli("diagnose", tiny_run).stdout
    plots = root / "plots ü"
    cli("report", tiny_run, "-o", plots)
    assert any(plots.glob("*.png"))
    cli("export", tiny_run, "-o", root / "hf é")
    assert (root / "hf é" / "config.json").is_file()
