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


def test_argparse_errors_are_one_line_in_a_real_process():
    """The console script's own path (a fresh interpreter): a bad number and an unknown flag, one line each."""
    proc = cli_process("plan", "tiny", "--mfu", "nan", "--bogus", check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("normgrow: error: plan: argument --mfu: expected a finite number, got 'nan'")
    proc = cli("export", check=False)  # a missing argument
    assert proc.returncode == 2 and "the following arguments are required: run_dir, -o/--output" in proc.stderr
