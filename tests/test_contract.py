"""The error contract at the study level, on numbers, paths and devices: every case a careless or hostile user
tried ends with one line naming the field or file and a non-zero exit, nothing written where it should not be."""

import errno
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import typing
from pathlib import Path

import pytest
from test_hostile import refused, tree_hash

from conftest import cli
from normgrow.config import RunConfig, load_config
from normgrow.config.schema import field_docs, leaf_fields
from normgrow.errors import ConfigError
from normgrow.study.config import load_study, study_schema

BAD = ("nan", "inf", "-inf", "0", "-1", "1e300")


def numeric_keys(cls: type, skip: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """(override key, help text) of every int or float field of a config class, a list of sections walked at its
    first entry (curriculum.stages.0.n_layer), a list of numbers at its first entry (budgets.0)."""
    out = []
    for key, owner, f in leaf_fields(cls):
        hint = typing.get_type_hints(owner)[f.name]
        args = [a for t in (typing.get_args(hint) or (hint,)) for a in (typing.get_args(t) or (t,))]
        if not any(a in (int, float) for a in args) or key.startswith(skip):
            continue
        if typing.get_origin(hint) is list:
            key += ".0"
        out.append((key.replace("[].", ".0."), field_docs(owner).get(f.name, "")))
    return out


def accepted_means_documented(key: str, value: str, doc: str, default) -> None:
    """A value the loader accepted must be a finite one whose meaning the field's help states ("0 = …"), or the
    field's default."""
    assert value not in ("nan", "inf", "-inf", "1e300"), f"{key}={value} was accepted"
    documented = re.search(rf"(^|[ (;,]){re.escape(value)} =", doc) is not None
    assert documented or float(value) == default, (
        f"{key}={value} was accepted, but its help does not say what it means: {doc!r}"
    )


def one_line_naming(e: ConfigError, key: str) -> None:
    """One line naming the field (a list's entry may be named by its list: `seeds` for seeds.0)."""
    msg = str(e)
    assert "\n" not in msg and key.removesuffix(".0") in msg, f"{key}: {msg}"


@pytest.mark.e2e
def test_every_number_of_a_run_config_is_checked_at_load_time():
    """Every numeric field (stage lists included) with NaN, ±inf, 0, −1 and 1e300: a one-line ConfigError naming it,
    or a value whose meaning its help documents (0 = off …). Before: inf and 1e300 passed for train.lr,
    distill.temperature, model.rope_theta and more, then failed at step 1 or not at all; a stage's field could not
    be set at all (a TypeError traceback); seed −1 was accepted."""
    keys = numeric_keys(RunConfig)
    assert len(keys) > 50 and "curriculum.stages.0.tokens" in dict(keys)
    walk(keys, lambda overrides: load_config("tiny", overrides))


def walk(keys: list[tuple[str, str]], load) -> None:
    """Every key with every BAD value through `load(overrides)`: refused in one line naming it, or accepted with a
    documented meaning (or as the key's default, read from `load([])`)."""
    base = load([])
    for key, doc in keys:
        try:
            default = _get(base, key)
        except (IndexError, AttributeError):  # an empty list's first entry
            default = None
        for value in BAD:
            try:
                load([f"{key}={value}"])
            except ConfigError as e:
                one_line_naming(e, key)
            else:
                accepted_means_documented(key, value, doc, default)


def _get(obj, key: str):
    for part in key.split("."):
        obj = obj[int(part)] if part.isdigit() else getattr(obj, part)
    return obj


@pytest.mark.e2e
def test_every_number_of_a_study_is_checked_at_load_time():
    """The same walk over a study's own numbers (budget_scale=1e300 was an OverflowError traceback that left a
    half-written study folder; a seed beyond 64 bits a traceback), on the gap study."""
    keys = numeric_keys(study_schema(), skip=("launcher.parameters",))
    assert {"budget_scale", "budgets.0", "seeds.0", "lr_pilot.lrs.0", "regime.min_kl"} <= set(dict(keys))
    walk(keys, lambda overrides: load_study("gap", overrides))
    for seed in (2**64, -(2**70)):
        with pytest.raises(ConfigError, match="seeds"):
            load_study("gap", [f"seeds=[{seed}]"])


def test_a_list_entry_can_be_overridden_and_a_yaml_tag_is_one_line():
    cfg = load_config(
        "tiny",
        ["curriculum.stages=[{n_layer: 1, tokens: 100}, {n_layer: 3, tokens: 200}]", "curriculum.stages.1.tokens=300"],
    )
    assert [(s.n_layer, s.tokens) for s in cfg.curriculum.stages] == [(1, 100), (3, 300)]
    with pytest.raises(ConfigError, match="curriculum.stages"):
        load_config("tiny", ["curriculum.stages.0.nope=1"])
    proc = cli("config", "tiny", "train.lr=!!python/object/apply:os.getcwd []", check=False)
    refused(proc, "train.lr: the value is not plain YAML")


# ----------------------------------------------------------------------------- study directories and exit codes


def micro_study(tmp_path: Path, cache: Path) -> Path:
    path = tmp_path / "micro.yaml"
    path.write_text(
        f"name: micro\nbase: tiny\noverrides: [data.cache_dir={cache}, "
        '"curriculum.stages=[{n_layer: 1, tokens: 2560}]", model.n_layer=1]\nseeds: [0]\n'
        "arms:\n  pre: {overrides: [model.norm=pre]}\nlauncher: {kind: inline}\n"
    )
    return path


def test_a_study_never_writes_into_a_users_folder_or_a_run(tiny_cache, tmp_path):
    """Before: `study -o` wrote into a non-empty folder and replaced the user's report.md, results.csv and
    plots (exit 0), and mixed a study into a run directory."""
    spec = micro_study(tmp_path, tiny_cache)
    mine = tmp_path / "mine"
    (mine / "plots").mkdir(parents=True)
    (mine / "report.md").write_text("my report")
    (mine / "plots" / "fig.png").write_bytes(b"my figure")
    before = tree_hash(mine)
    refused(cli("study", spec, "-o", mine, "--no-progress", check=False), "not empty and not a study directory")
    assert tree_hash(mine) == before
    run_dir = tmp_path / "run"
    cli(
        "run",
        "tiny",
        f"data.cache_dir={tiny_cache}",
        "curriculum.stages=[{n_layer: 1, tokens: 512}]",
        "model.n_layer=1",
        "-o",
        run_dir,
        "--no-progress",
        "--no-plots",
    )
    before = tree_hash(run_dir)
    for extra in ((), ("--force",)):  # --force never makes a run directory a study's
        refused(cli("study", spec, "-o", run_dir, "--no-progress", *extra, check=False), "is a run directory")
    assert tree_hash(run_dir) == before
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    refused(cli("study", spec, "-o", a_file, "--no-progress", check=False), "exists and is not a directory")
    # --force writes the study into the user's folder: its own files replaced, the others kept
    cli("study", spec, "-o", mine, "--no-progress", "--force")
    assert (mine / "study.yaml").is_file() and (mine / "report.md").read_text() != "my report"
    assert (mine / "plots" / "fig.png").read_bytes() == b"my figure"
    cli("study", spec, "-o", mine, "--no-progress")  # now a study directory of this study: no --force needed


def test_a_rerun_refuses_runs_trained_with_another_definition(tiny_cache, tmp_path):
    """Before: after an edit of the study's base preset, the rerun counted the old runs as finished, rewrote
    configs/*.yaml with the new values, and the lr column showed a rate the runs never trained at."""
    base = tmp_path / "base.yaml"
    base.write_text("base: tiny\ntrain: {lr: 0.001}\n")
    spec = micro_study(tmp_path, tiny_cache)
    spec.write_text(spec.read_text().replace("base: tiny", f"base: {base}"))
    out = tmp_path / "study"
    cli("study", spec, "-o", out, "--no-progress")
    saved = (out / "configs" / "pre-s0.yaml").read_text()
    base.write_text("base: tiny\ntrain: {lr: 0.002}\n")
    refused(
        cli("study", spec, "-o", out, "--no-progress", check=False),
        "1 run(s) were trained with another definition than today's: pre-s0 (train.lr)",
    )
    assert (out / "configs" / "pre-s0.yaml").read_text() == saved
    shutil.rmtree(out / "runs" / "pre-s0")  # the way to train it again
    cli("study", spec, "-o", out, "--no-progress")
    assert "lr: 0.002" in (out / "configs" / "pre-s0.yaml").read_text()


def test_a_rerun_with_the_study_directory_spelled_otherwise_keeps_its_finished_runs(tiny_cache, tmp_path, monkeypatch):
    """The definition check must not refuse a legitimate rerun: a matched arm's config names its reference run by
    a path spelled as -o was (relative here, absolute in the rerun)."""
    spec = micro_study(tmp_path, tiny_cache)
    spec.write_text(
        spec.read_text().replace(
            "arms:\n  pre: {overrides: [model.norm=pre]}\n",
            "arms:\n  pre: {overrides: [model.norm=pre]}\n  pre-matched: {overrides: [model.norm=pre], match: pre}\n",
        )
    )
    monkeypatch.chdir(tmp_path)
    cli("study", spec, "-o", "study", "--no-progress")
    again = cli("study", spec, "-o", tmp_path / "study", "--no-progress")
    assert "2 of 2 runs already finished" in again.stdout + again.stderr


def test_report_against_refuses_a_cut_or_edited_results_file(tiny_cache, tmp_path):
    """Before: `report B --against A` read a cut results.csv of A (a value "5.1") and reported a change, exit 0."""
    spec = micro_study(tmp_path, tiny_cache)
    a, b = tmp_path / "a", tmp_path / "b"
    cli("study", spec, "-o", a, "--no-progress")
    cli("study", spec, "-o", b, "--no-progress", "budget_scale=0.5")
    cli("report", b, "--against", a)
    text = (a / "results.csv").read_text()
    lines = text.splitlines()
    header, row = lines[0].split(","), lines[1].split(",")
    i = header.index("val_ce")
    (a / "results.csv").write_text("\n".join([lines[0], ",".join(row[:i] + [row[i][:3]] + row[i + 1 :])]) + "\n")
    refused(cli("report", b, "--against", a, check=False), "does not match its run")
    (a / "results.csv").write_text(text[: text.index(row[i])])  # the file cut in the middle of a row
    refused(cli("report", b, "--against", a, check=False), "is cut")


# ----------------------------------------------------------------------------- OS errors at the command line's edge


def real_os_error(action) -> OSError:
    try:
        action()
    except OSError as e:
        return e
    raise AssertionError("no OSError")


def test_os_errors_of_every_kind_become_one_line_naming_the_path(tmp_path):
    """The mapping at the command line's edge, over OS errors the kernel raised here (and the two a root user
    cannot provoke on an ordinary folder, built as the kernel reports them)."""
    from normgrow.errors import os_error_line

    a_file = tmp_path / "f"
    a_file.write_text("x")
    cases = {
        "a part of the path is not a directory": real_os_error(lambda: (a_file / "sub").mkdir()),
        "is a directory, not a file": real_os_error(lambda: open(tmp_path, "w")),
        "no such file or directory": real_os_error(lambda: open(tmp_path / "nowhere")),
        "already exists": real_os_error(lambda: a_file.mkdir()),
        "permission denied": OSError(errno.EACCES, os.strerror(errno.EACCES), str(tmp_path / "secret")),
        "on a read-only file system": OSError(errno.EROFS, os.strerror(errno.EROFS), str(tmp_path / "ro")),
    }
    for words, e in cases.items():
        line = os_error_line(e)
        assert line is not None and line.startswith(e.filename) and words in line, (words, line)
    full = real_os_error(lambda: os.write(os.open("/dev/full", os.O_WRONLY), b"x"))  # ENOSPC, no path
    assert "no space left on the device" in os_error_line(full)
    assert os_error_line(OSError(errno.ECONNRESET, "reset")) is None  # no path, not the user's: traceback kept


def test_a_cache_root_that_is_a_file_and_an_output_under_a_file_are_one_line(tiny_cache, tmp_path, monkeypatch):
    """Before: $NORMGROW_CACHE naming a file was a traceback."""
    a_file = tmp_path / "f"
    a_file.write_text("x")
    monkeypatch.setenv("NORMGROW_CACHE", str(a_file))
    refused(cli("prepare", "tiny", "teacher.path=none", check=False), str(a_file))
    refused(cli("run", "tiny", f"data.cache_dir={tiny_cache}", "-o", a_file / "run", check=False), str(a_file))


def unprivileged() -> list[str]:
    """The prefix that runs a command as an unprivileged user (root reads everything, whatever its mode)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: no unprivileged user to test permissions with")
    prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    if subprocess.run([*prefix, sys.executable, "-c", "import normgrow"], capture_output=True).returncode != 0:
        pytest.skip("the unprivileged user cannot import normgrow from this checkout (its folder is private)")
    return prefix


@pytest.fixture
def open_dir():
    """A directory every user may enter (pytest's tmp_path is its owner's only)."""
    d = Path(tempfile.mkdtemp(prefix="normgrow-contract-"))
    os.chmod(d, 0o777)
    yield d
    for p in d.rglob("*"):
        if p.is_dir() and not p.is_symlink():
            os.chmod(p, 0o777)
    shutil.rmtree(d)


def corpus_prepare(corpus: Path, cache: Path, prefix: list[str]) -> subprocess.CompletedProcess:
    """`normgrow prepare` of a corpus (no teacher), as the user `prefix` makes it."""
    env = {**os.environ, "HOME": str(cache), "NORMGROW_CACHE": str(cache)}
    return subprocess.run(
        [
            *prefix,
            sys.executable,
            "-m",
            "normgrow.cli",
            "prepare",
            "tiny",
            "teacher.path=none",
            f"data.corpus={corpus}",
            "data.vocab_size=260",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def make_corpus(root: Path, n: int = 20) -> Path:
    corpus = root / "corpus"
    for sub in ("a", "b"):
        (corpus / sub).mkdir(parents=True)
        for i in range(n):
            (corpus / sub / f"{i}.txt").write_text(f"document {sub}{i}: " + "some words of text " * 40)
    return corpus


@pytest.mark.slow  # ≈ 20 s: three processes as another user; `make test-slow`
def test_a_corpus_with_an_unreadable_folder_or_file_is_one_line_not_a_smaller_corpus(open_dir):
    """Before: a subfolder this user cannot read was left out (40 documents of 80, no message); an unreadable file
    was a traceback."""
    prefix = unprivileged()
    corpus, cache = make_corpus(open_dir), open_dir / "cache"
    cache.mkdir()
    os.chmod(cache, 0o777)
    os.chmod(corpus / "b", 0o000)
    refused(corpus_prepare(corpus, cache, prefix), f"{corpus / 'b'}: cannot be read")
    os.chmod(corpus / "b", 0o755)
    os.chmod(corpus / "b" / "3.txt", 0o000)
    refused(corpus_prepare(corpus, cache, prefix), f"{corpus / 'b' / '3.txt'}: permission denied")


@pytest.mark.e2e
@pytest.mark.parametrize("kind", ["fifo", "device", "fifo-in-folder", "too-big"])
def test_special_and_huge_corpus_files_are_refused_before_reading(tmp_path, kind):
    """Before: a FIFO as data.corpus hung with no output; /dev/zero and a 30 GB sparse file were read whole
    (MemoryError)."""
    corpus = make_corpus(tmp_path, n=2)
    if kind == "fifo":
        target = tmp_path / "pipe"
        os.mkfifo(target)
    elif kind == "device":
        target = Path("/dev/zero")
    elif kind == "fifo-in-folder":
        os.mkfifo(corpus / "a" / "pipe")
        target = corpus
    else:
        with open(corpus / "a" / "huge.txt", "wb") as f:  # sparse: 30 GB of size, no blocks
            f.truncate(30 * 2**30)
        target = corpus
    args = ["prepare", "tiny", "teacher.path=none", f"data.corpus={target}", f"data.cache_dir={tmp_path / 'cache'}"]
    if kind == "fifo":  # a fresh process with a timeout: the old code blocked on the pipe forever
        proc = subprocess.run(
            [sys.executable, "-m", "normgrow.cli", *args], capture_output=True, text=True, timeout=120
        )
    else:
        proc = cli(*args, check=False)
    if kind == "too-big":
        refused(proc, "more than data.max_document_bytes=268,435,456")
    else:
        refused(proc, "not a regular file (a FIFO, device or socket)")
    assert not (tmp_path / "cache" / "tokenizers").exists() and not (tmp_path / "cache" / "shards").exists()


@pytest.mark.slow  # ≈ 24 s: a fresh cache with its teacher, a run, an export; `make test-slow`
def test_cache_entries_checkpoints_and_exports_follow_the_umask(tmp_path):
    """Before: entries were created 0700/0600 (mkdtemp; safetensors writes 0600), so a cache one user built failed
    for every other user."""
    cache = tmp_path / "cache"
    env = {**os.environ, "NORMGROW_CACHE": str(cache)}
    script = (
        "import os, sys; os.umask(0o022); from normgrow.cli import main; "
        f"sys.exit(main(['run', 'tiny', '-o', {str(tmp_path / 'run')!r}, '--no-progress', '--no-plots']) or "
        f"main(['export', {str(tmp_path / 'run')!r}, '-o', {str(tmp_path / 'hf')!r}]))"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    paths = [
        p
        for root in (cache, tmp_path / "run", tmp_path / "hf")
        for p in root.rglob("*")
        if not p.name.startswith(".lock")
    ]
    assert any(p.name == "model.safetensors" for p in paths)  # the teacher's, the checkpoints', the export's
    for p in paths:
        mode = stat.S_IMODE(p.stat().st_mode)
        assert mode & 0o044 == 0o044, f"{p}: {oct(mode)}"  # group and others may read it
        assert not p.is_dir() or mode & 0o011 == 0o011, f"{p}: {oct(mode)}"  # and enter it


# ----------------------------------------------------------------------------- devices, signals, help


def test_an_absent_device_names_train_device_and_what_there_is(tiny_cache, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA; the absent device would be cuda:N beyond its count")
    proc = cli("run", "tiny", f"data.cache_dir={tiny_cache}", "train.device=cuda", "-o", tmp_path / "r", check=False)
    refused(proc, "train.device: cuda:0 is not on this machine; it has cpu only")


def test_config_fields_lists_the_registered_names():
    out = cli("config", "--fields").stdout
    line = next(x for x in out.splitlines() if x.startswith("curriculum.growth "))
    assert "[registered growth operators: append, stack, interleave" in line
    line = next(x for x in out.splitlines() if x.startswith("model.norm "))
    assert "pre, post, sandwich, deepnorm" in line
    line = next(x for x in cli("config", "--study").stdout.splitlines() if x.startswith("launcher.kind "))
    assert "[registered launchers: inline, local, submitit" in line


@pytest.mark.slow  # a micro study in a fresh process, signalled; `make test-slow`
def test_a_sigterm_during_a_study_says_so(tiny_cache, tmp_path):
    """Before: a SIGTERM'd run printed nothing."""
    spec = micro_study(tmp_path, tiny_cache)
    spec.write_text(spec.read_text().replace("tokens: 2560", "tokens: 200000"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "normgrow.cli", "study", str(spec), "-o", str(tmp_path / "s"), "--no-progress"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    metrics = tmp_path / "s" / "runs" / "pre-s0" / "metrics.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and not metrics.is_file() and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None and metrics.is_file(), proc.communicate()[1][-2000:]
    os.kill(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert any(
        line.startswith("normgrow: stopped by SIGTERM; rerunning the same command resumes") for line in err.splitlines()
    ), err[-2000:]


@pytest.mark.slow  # a whole micro study in a fresh process; `make test-slow`
def test_a_sighup_under_nohup_is_still_ignored(tiny_cache, tmp_path):
    """A study started under `nohup` (SIGHUP ignored) keeps running when the terminal goes: the handler that turns
    SIGTERM into a message must not take SIGHUP back."""
    spec = micro_study(tmp_path, tiny_cache)
    proc = subprocess.Popen(
        ["nohup", sys.executable, "-m", "normgrow.cli", "study", str(spec), "-o", str(tmp_path / "s"), "--no-progress"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    metrics = tmp_path / "s" / "runs" / "pre-s0" / "metrics.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and not metrics.is_file() and proc.poll() is None:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGHUP)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    assert (tmp_path / "s" / "report.md").is_file()


@pytest.mark.slow  # ≈ 22 s: a teacher and three runs, two as another user; `make test-slow`
def test_a_read_only_cache_that_holds_what_a_run_needs_is_used_as_it_is(open_dir):
    """A cache built by one user, read-only to another: the run uses it (the bf16 probe and file hashes, which it
    would have remembered there, are measured again); an empty read-only cache is one line. Before: a traceback."""
    prefix = unprivileged()
    corpus, cache, out = make_corpus(open_dir, n=40), open_dir / "cache", open_dir / "out"
    out.mkdir()
    os.chmod(out, 0o777)
    args = [
        sys.executable,
        "-m",
        "normgrow.cli",
        "run",
        "tiny",
        f"data.corpus={corpus}",
        f"data.cache_dir={cache}",
        "data.vocab_size=260",
        "train.dtype=auto",
        "--no-progress",
        "--no-plots",
    ]
    env = {**os.environ, "HOME": str(out)}
    first = cli(*args[3:], "-o", open_dir / "by-owner")  # the cache's owner builds it
    for p in [cache, *cache.rglob("*")]:
        os.chmod(p, stat.S_IMODE(p.stat().st_mode) & ~0o222)  # nobody may write anything in it
    other = subprocess.run([*prefix, *args, "-o", str(out / "run")], capture_output=True, text=True, env=env)
    assert other.returncode == 0, other.stderr[-2000:]
    same = [out.split(": val/ce")[1].split(" after ")[0] for out in (first.stdout, other.stdout)]
    assert same[0] == same[1]  # the same run: val/ce, val/kl and val/nll to the digit
    empty = open_dir / "empty"
    empty.mkdir(mode=0o555)
    args = [f"data.cache_dir={empty}" if a.startswith("data.cache_dir=") else a for a in args]
    proc = subprocess.run([*prefix, *args, "-o", str(out / "r2")], capture_output=True, text=True, env=env)
    refused(proc, f"{empty}")
    assert "permission denied" in proc.stderr.lower()


@pytest.mark.slow  # ≈ 21 s: two concurrent teacher builds; `make test-slow`
def test_two_builders_of_one_default_teacher_wait_for_each_other(tmp_path):
    """Before: the second of two runs started together on an empty cache failed ("in use by another run process")."""
    cmd = [
        sys.executable,
        "-m",
        "normgrow.cli",
        "teacher",
        "train",
        "tiny",
        f"data.cache_dir={tmp_path}",
        "--no-progress",
        "train.threads=1",
    ]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=900) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e[-1500:] for _, e in outs]
    said = [o for o, _ in outs]
    assert sum("waiting: " in o for o in said) == 1 and sum("building the default teacher" in o for o in said) == 1
    assert len({o.strip().splitlines()[-1] for o in said}) == 1  # both name the same teacher


def test_a_default_teacher_field_that_fails_names_the_teacher_preset(tmp_path):
    """Before: on a small corpus the error named data.probe_sequences, a value of the default teacher's preset, so
    lowering the student's own did not help."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(1, 9):
        (corpus / f"{i}.txt").write_text(f"document {i} " + "words of text " * 300 + "\n")
    proc = cli(
        "run",
        "tiny",
        f"data.corpus={corpus}",
        f"data.cache_dir={tmp_path / 'cache'}",
        "data.vocab_size=260",
        "data.probe_sequences=1",
        "data.val_fraction=0.1",
        "-o",
        tmp_path / "run",
        "--no-progress",
        check=False,
    )
    refused(proc, "the default teacher's run (preset 'teacher-tiny', teacher.default_preset): data.probe_sequences:")
