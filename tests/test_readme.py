"""The README stays true to the code: its code tour names every module of the package (and nothing else), every
`normgrow …` command it shows parses with the real argument parser, it stays under 15,000 bytes, and every
relative link in it points at a file of the repository."""

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
TOUR_HEADING = "## Code tour"
MAX_BYTES = 15_000

FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
MODULE = re.compile(r"\bnormgrow/(?:\w+/)*\w+\.py\b")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|^\s*\[[^\]]+\]:\s*(\S+)", re.M)


def readme_text() -> str:
    return README.read_text(encoding="utf-8")


def section(text: str, heading: str) -> str:
    """The lines under `heading` up to the next heading of the same or a higher level."""
    level = len(heading) - len(heading.lstrip("#"))
    lines = text.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == heading)
    except StopIteration:
        raise AssertionError(f"README.md has no '{heading}' section") from None
    out = []
    for line in lines[start + 1 :]:
        hashes = len(line) - len(line.lstrip("#"))
        if 0 < hashes <= level and line[hashes : hashes + 1] == " ":
            break
        out.append(line)
    return "\n".join(out)


def package_modules() -> set[str]:
    """Every .py file under normgrow/, as a path relative to the repository root."""
    return {p.relative_to(ROOT).as_posix() for p in (ROOT / "normgrow").rglob("*.py") if "__pycache__" not in p.parts}


def shown_commands(text: str) -> list[str]:
    """The normgrow command lines of the README's code blocks, continuation lines joined."""
    commands = []
    for block in FENCE.findall(text):
        logical, pending = [], ""
        for raw in block.splitlines():
            line = pending + raw.strip()
            if line.endswith("\\"):
                pending = line[:-1] + " "
                continue
            pending = ""
            logical.append(line)
        for line in logical:
            line = line.removeprefix("$ ").strip()
            try:
                words = shlex.split(line, comments=True)
            except ValueError:
                continue
            if words and (words[0] == "normgrow" or "normgrow.cli" in words):
                commands.append(line)
    return commands


def cli_arguments(command: str) -> list[str]:
    """What the parser receives: the words after `normgrow`, or after `-m normgrow.cli` (torchrun, python -m)."""
    words = shlex.split(command, comments=True)
    if words[0] == "normgrow":
        return words[1:]
    return words[words.index("normgrow.cli") + 1 :]


def test_the_code_tour_names_every_module_and_nothing_else():
    named = set(MODULE.findall(section(readme_text(), TOUR_HEADING)))
    modules = package_modules()
    missing, extra = sorted(modules - named), sorted(named - modules)
    assert not missing and not extra, (
        f"README.md '{TOUR_HEADING}' is out of date: "
        + (f"missing {', '.join(missing)}" if missing else "")
        + ("; " if missing and extra else "")
        + (f"names modules that do not exist: {', '.join(extra)}" if extra else "")
    )


COMMANDS = shown_commands(readme_text())


def test_the_readme_shows_commands():
    assert len(COMMANDS) >= 5, f"expected the README's code blocks to show normgrow commands, found {COMMANDS}"


@pytest.mark.parametrize("command", COMMANDS, ids=[c.split("#")[0].strip() for c in COMMANDS])
def test_every_command_shown_parses(command, capsys):
    """The command is well formed; the folders it names are the reader's, so a path flag refused only because its
    folder does not exist here (flags.folder checks kinds when parsing) is a pass, any other refusal a failure."""
    from normgrow.cli import build_parser

    try:
        args = build_parser().parse_args(cli_arguments(command))
    except SystemExit:
        err = capsys.readouterr().err
        if ": no such directory" not in err:
            pytest.fail(f"README.md shows a command the argument parser refuses: {command}\n{err}")
        return
    assert callable(args.func)


def test_the_readme_stays_short():
    size = len(README.read_bytes())
    assert size <= MAX_BYTES, (
        f"README.md is {size:,} bytes, over {MAX_BYTES:,}: move measurements to docs/results.md and details to docs/"
    )


def test_every_relative_link_resolves():
    text = FENCE.sub("", readme_text())  # links inside code blocks are not links
    broken = []
    for inline, reference in LINK.findall(text):
        target = (inline or reference).split("#", 1)[0]
        if not target or re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # an anchor, or http:, mailto:, …
            continue
        if not (ROOT / target).exists():
            broken.append(inline or reference)
    assert not broken, f"README.md links to files that do not exist: {', '.join(broken)}"
