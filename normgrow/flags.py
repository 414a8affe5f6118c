"""The command line's own flags get the contract config fields have (config.check_numbers): each is checked when
the command line is parsed, before any work — a number finite and in the range its meaning allows, a path of the
kind the verb needs — and a bad one is one line naming the flag, exit 2, nothing written.

Every argument a verb adds is typed with one of the checks below (`CHECKS`), or is a boolean switch, or is the
config/overrides pair that load_config checks itself; tests/test_cli_flags.py walks the parser so that a new flag
cannot skip this."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path

Check = Callable[[str], object]


def _number(text: str, integer: bool) -> float:
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {'an integer' if integer else 'a number'}, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _checked(fn: Check, what: str) -> Check:
    fn.checked = what  # type: ignore[attr-defined]  # the walk's mark (tests/test_cli_flags.py)
    fn.__name__ = what
    return fn


def count(low: int = 1) -> Check:
    """An integer ≥ `low` (a world size, a number of documents)."""

    def check(text: str) -> int:
        value = int(_number(text, integer=True))
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer ≥ {low}, got {text!r}")
        return value

    return _checked(check, f"integer ≥ {low}")


def positive() -> Check:
    """A finite number > 0 (a rate, a memory size, a peak throughput)."""

    def check(text: str) -> float:
        value = _number(text, integer=False)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
        return value

    return _checked(check, "number > 0")


def fraction() -> Check:
    """A number in (0, 1] (a share of a device's peak)."""

    def check(text: str) -> float:
        value = _number(text, integer=False)
        if not 0 < value <= 1:
            raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}")
        return value

    return _checked(check, "number in (0, 1]")


def names() -> Check:
    """A comma-separated list of names (letters, digits, _ . - /), none empty: task names."""

    def check(text: str) -> str:
        parts = [p.strip() for p in text.split(",")]
        if not all(p and all(ch.isalnum() or ch in "_.-/" for ch in p) for p in parts):
            raise argparse.ArgumentTypeError(f"expected comma-separated names, got {text!r}")
        return ",".join(parts)

    return _checked(check, "names")


def device() -> Check:
    """A torch device name: auto, cpu, cuda, cuda:N or mps."""

    def check(text: str) -> str:
        ok = text in ("auto", "cpu", "cuda", "mps") or (text.startswith("cuda:") and text[5:].isdigit())
        if not ok:
            raise argparse.ArgumentTypeError(f"expected auto, cpu, cuda, cuda:N or mps, got {text!r}")
        return text

    return _checked(check, "device")


def folder(needs: tuple[str, ...] = (), what: str = "a directory") -> Check:
    """An existing directory holding each file of `needs` (a run's config.yaml, a study's study.yaml)."""

    def check(text: str) -> str:
        path = Path(text)
        if not path.exists():
            raise argparse.ArgumentTypeError(f"{text}: no such directory")
        if not path.is_dir():
            raise argparse.ArgumentTypeError(f"{text}: not a directory")
        missing = [n for n in needs if not (path / n).is_file()]
        if missing:
            raise argparse.ArgumentTypeError(f"{text}: not {what} (no {' or '.join(missing)})")
        return text

    return _checked(check, what)


def output() -> Check:
    """A directory to write: absent (it is created) or an existing directory (what may be written into it is the
    verb's decision: a study's, a run's or an export's own rules); never an existing file."""

    def check(text: str) -> str:
        path = Path(text)
        if path.exists() and not path.is_dir():
            raise argparse.ArgumentTypeError(f"{text}: exists and is not a directory")
        if not path.exists() and path.parent.exists() and not path.parent.is_dir():
            raise argparse.ArgumentTypeError(f"{text}: its parent {path.parent} is not a directory")
        return text

    return _checked(check, "output directory")


def new_folder() -> Check:
    """A directory that does not exist yet (the verb creates it whole, or not at all)."""

    def check(text: str) -> str:
        path = Path(text)
        if path.exists():
            raise argparse.ArgumentTypeError(f"{text}: already exists (give a new directory)")
        if path.parent.exists() and not path.parent.is_dir():
            raise argparse.ArgumentTypeError(f"{text}: its parent {path.parent} is not a directory")
        return text

    return _checked(check, "new directory")


class Parser(argparse.ArgumentParser):
    """argparse's parser with its errors as one line, `normgrow: error: <verb>: <message>`, exit 2 (argparse's own
    form prints the usage first, which buries the line in a log)."""

    def error(self, message: str):
        verb = self.prog.split(" ", 1)[1] if " " in self.prog else ""
        self.exit(2, f"normgrow: error: {verb + ': ' if verb else ''}{message} (see `{self.prog} --help`)\n")
