"""Every flag of every verb is checked when the command line is parsed (normgrow/flags.py): numbers finite and in
range, paths of the right kind; a bad one is one line naming it, exit 2, and nothing on disk."""

import argparse

import pytest

from conftest import cli, cli_process
from normgrow.cli import build_parser

EXEMPT = {"config", "overrides"}  # a preset or YAML and its key=value list: load_config checks them (test_config.py)
SWITCHES = (argparse._HelpAction, argparse._VersionAction, argparse._StoreTrueAction, argparse._SubParsersAction)


def verbs(parser: argparse.ArgumentParser, prefix=()):
    """(words, parser) for the parser and every sub-command under it."""
    yield prefix, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from verbs(sub, (*prefix, name))


def flags():
    """(verb words, action) of every argument that takes a value."""
    for words, parser in verbs(build_parser()):
        for action in parser._actions:
            if not isinstance(action, SWITCHES):
                yield words, action


def test_every_flag_is_walked():
    """A new argument must carry one of normgrow.flags' checks (or be the config/overrides pair)."""
    seen = list(flags())
    assert len(seen) > 15  # the walk found the verbs' arguments at all
    unchecked = [
        f"{' '.join(words)} {action.option_strings or action.dest}"
        for words, action in seen
        if action.dest not in EXEMPT and not getattr(action.type, "checked", None)
    ]
    assert not unchecked, f"flags without a check from normgrow/flags.py: {unchecked}"


NUMERIC = ("integer ≥ 1", "number > 0", "number in (0, 1]")


def numeric_flags():
    for words, action in flags():
        if getattr(action.type, "checked", None) in NUMERIC:
            yield words, action.option_strings[-1]


def test_numeric_flags_are_found():
    found = {(" ".join(w), f) for w, f in numeric_flags()}
    assert {
        ("plan", "--world-size"),
        ("plan", "--device-memory"),
        ("plan", "--tokens-per-hour"),
        ("plan", "--peak-tflops"),
        ("plan", "--mfu"),
        ("standin", "--documents"),
    } <= found


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_every_numeric_flag_refuses_zero_negative_nan_inf(tmp_path, monkeypatch, value):
    """0, −1, nan and inf are out of range for every numeric flag (a count ≥ 1, a rate > 0, a share in (0, 1]):
    one line naming the flag, exit 2, no traceback, nothing written."""
    monkeypatch.chdir(tmp_path)
    study = tmp_path.parent / f"{tmp_path.name}-study"  # what `evaluate` takes: a finished study's files
    study.mkdir(exist_ok=True)
    for name in ("study.yaml", "results.csv"):
        (study / name).write_text("")
    for words, flag in numeric_flags():
        positional = (
            [str(tmp_path / "new")] if words == ("standin",) else [str(study)] if words == ("evaluate",) else ["tiny"]
        )
        proc = cli(*words, *positional, f"{flag}={value}", check=False)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2, (words, flag, value, proc.stderr)
        assert len(lines) == 1 and flag in lines[0] and "Traceback" not in proc.stderr, (words, flag, proc.stderr)
        assert lines[0].startswith(f"normgrow: error: {' '.join(words)}: argument {flag}")
    assert list(tmp_path.iterdir()) == []


def test_numbers_in_range_pass_the_walk(tmp_path):
    """The checks refuse only what is out of range: the smallest allowed values parse."""
    args = build_parser().parse_args(
        ["plan", "tiny", "--world-size=1", "--device-memory=0.5", "--tokens-per-hour=1e9", "--peak-tflops=1", "--mfu=1"]
    )
    assert (args.world_size, args.device_memory, args.tokens_per_hour, args.peak_tflops, args.mfu) == (
        1,
        0.5,
        1e9,
        1.0,
        1.0,
    )
    assert build_parser().parse_args(["standin", str(tmp_path / "s"), "--documents", "1"]).documents == 1
    with pytest.raises(SystemExit):
        build_parser().parse_args(["plan", "tiny", "--world-size=1.5"])  # a count is an integer


def test_path_flags_are_checked_for_kind(tmp_path, monkeypatch):
    """Each path argument against the kind its verb needs, before any work: one line naming the path."""
    monkeypatch.chdir(tmp_path)
    a_file = tmp_path / "a-file.txt"
    a_file.write_text("x")
    empty = tmp_path / "empty dir é"  # a space and a non-ASCII character on the way
    empty.mkdir()
    cases = [
        (["export", "missing", "-o", "out"], "missing: no such directory"),
        (["export", a_file, "-o", "out"], "not a directory"),
        (["export", empty, "-o", "out"], "not a run directory (no config.yaml)"),
        (["diagnose", empty], "not a run directory (no config.yaml)"),
        (["report", "missing"], "missing: no such directory"),
        (["report", empty, "--against", empty], "not a finished study directory (no study.yaml or results.csv)"),
        (["run", "tiny", "-o", a_file], "exists and is not a directory"),
        (["study", "tiny", "-o", a_file], "exists and is not a directory"),
        (["study", "default", "-o", a_file / "sub"], "is not a directory"),
        (["standin", empty], "already exists"),
        (["plan", "default", "--pilot", empty], "not a finished study directory (no study.yaml or results.csv)"),
    ]
    before = sorted(tmp_path.rglob("*"))
    for args, expected in cases:
        proc = cli(*args, check=False)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and expected in lines[0], (args, proc.stderr)
        assert lines[0].startswith(f"normgrow: error: {args[0]}: argument ")
    assert sorted(tmp_path.rglob("*")) == before  # nothing written


@pytest.mark.e2e
def test_argparse_errors_are_one_line_in_a_real_process():
    """The console script's own path (a fresh interpreter): a bad number and an unknown flag, one line each."""
    proc = cli_process("plan", "tiny", "--mfu", "nan", "--bogus", check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("normgrow: error: plan: argument --mfu: expected a finite number, got 'nan'")
    proc = cli("export", check=False)  # a missing argument
    assert proc.returncode == 2 and "the following arguments are required: run_dir, -o/--output" in proc.stderr


def test_values_that_parse_but_cannot_be_honoured_are_one_line(tmp_path, monkeypatch):
    """The walk of every flag with values that pass its check but not the verb (issue 51, item 6). Before: `plan
    --world-size 3` planned a batch of 8 split three ways (the run refuses it), `--no-measure --remeasure` measured
    nothing silently, `config tiny --fields` ignored `tiny`, `standin --documents 100000` wrote 731 documents,
    `report S --against S` compared a study with itself."""
    monkeypatch.chdir(tmp_path)
    study = tmp_path / "s"  # the path check's finished-study files; the verb refuses before reading them
    study.mkdir()
    for name in ("study.yaml", "results.csv"):
        (study / name).write_text("")
    cases = [
        (
            ["plan", "tiny", "--world-size=3", "--no-measure"],
            "train.batch_size: 8 is not divisible by the world size 3",
        ),
        (
            ["plan", "tiny", "--no-measure", "--remeasure"],
            "argument --remeasure: not allowed with argument --no-measure",
        ),
        (["config", "tiny", "--fields"], "config --fields lists every field; it takes no preset or overrides"),
        (["config", "--study", "model.norm=post"], "config --study lists every field; it takes no preset or overrides"),
        (["standin", tmp_path / "new", "--documents=100000"], "--documents: 100,000 asked; the embedded corpus has "),
        (["report", study, "--against", f"{study}/."], "is the study itself; give another study to compare with"),
    ]
    for args, expected in cases:
        proc = cli(*args, check=False)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and expected in lines[0], (args, proc.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]  # nothing written


@pytest.mark.e2e
def test_a_reader_that_goes_away_ends_the_output_quietly():
    """`normgrow config --fields | head -1`: before, a BrokenPipeError traceback; now what `cat` does (exit 141).
    The pipe's reading end is closed before normgrow writes, so the first write fails (no race with a reader)."""
    import os
    import subprocess
    import sys

    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "normgrow.cli", "config", "--fields"],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
        )
    finally:
        os.close(write)
    assert proc.returncode == 141 and proc.stderr == "", proc.stderr


def test_model_prints_any_size_without_allocating_it():
    """`normgrow model` counts a student of 9 × 10^12 parameters (before: torch's allocation error traceback)."""
    out = cli("model", "tiny", "model.d_model=1000000", "model.n_head=4").stdout
    d, v, ff, hd = 1_000_000, 512, 64, 250_000  # tiny: 2 kv heads, d_ff 64; head_dim d / 4
    block = d * d + 2 * (d // 2) * d + d * d + 2 * hd + 3 * ff * d + 2 * d  # q, k and v, o, q/k norms, MLP, 2 norms
    assert f"block 0: {block:,}" in out
    assert f"parameters: total {3 * block + 2 * v * d + d:,} = embedding {v * d:,}" in out
