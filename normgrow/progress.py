"""Progress that suits where it goes: on a terminal, tqdm's bar redrawn in place; into a file or a pipe (a log), a
plain line at each tenth of the work and at its end, so a log holds a few readable lines and never a carriage
return. Every progress display of the package (a run's steps, the teacher cache's chunks, a study's FLOPs) comes
from `progress_bar`."""

from __future__ import annotations

import sys
import time
from typing import IO, Any, TypeAlias

from tqdm import tqdm

STEPS = 10  # lines per bar in a log: one at each tenth of the total, and one at the end


class LineProgress:
    """tqdm's interface as the package uses it (`update`, `set_postfix`, `set_postfix_str`, `refresh`, `close`,
    `n`, `disable`), written as whole lines: at each tenth of `total` crossed, on `refresh()`, and at `close()`
    when something is new since the last line. The line is tqdm's own meter (`tqdm.format_meter`)."""

    def __init__(
        self,
        total: float | None,
        desc: str = "",
        unit: str = "it",
        initial: float = 0,
        unit_scale: bool = False,
        disable: bool = False,
        file: IO[str] | None = None,
        bar_format: str | None = None,
    ):
        self.total, self.desc, self.unit, self.unit_scale = total, desc, unit, unit_scale
        self.n, self.initial, self.disable, self.bar_format = initial, initial, disable, bar_format
        self.fp = file if file is not None else sys.stderr
        self.postfix = ""
        self.start = time.monotonic()
        self.written: float | None = None  # n at the last line written
        self.next = self._next_mark(initial)

    def _next_mark(self, n: float) -> float:
        if not self.total:
            return float("inf")
        step = self.total / STEPS
        return (int(n / step) + 1) * step

    def update(self, n: float = 1) -> None:
        self.n += n
        if self.n >= self.next:
            self.next = self._next_mark(self.n)
            self.refresh()

    def set_postfix(self, refresh: bool = False, **kwargs: Any) -> None:
        self.postfix = ", ".join(f"{k}={v}" for k, v in kwargs.items())

    def set_postfix_str(self, s: str = "", refresh: bool = False) -> None:
        self.postfix = s

    def line(self) -> str:
        return tqdm.format_meter(
            self.n,
            self.total,
            time.monotonic() - self.start,
            prefix=self.desc,
            unit=self.unit,
            unit_scale=self.unit_scale,
            postfix=self.postfix or None,
            bar_format=self.bar_format,
            initial=self.initial,
        )

    def refresh(self) -> None:
        if self.disable:
            return
        self.fp.write(self.line() + "\n")
        self.fp.flush()
        self.written = self.n

    def close(self) -> None:
        if self.written != self.n and self.n != self.initial:
            self.refresh()
        self.disable = True


Bar: TypeAlias = "tqdm[Any] | LineProgress"  # what progress_bar returns


def is_terminal(file: IO[str]) -> bool:
    try:
        return file.isatty()
    except (AttributeError, ValueError):  # a closed or file-less stream
        return False


def progress_bar(
    total: float | None,
    desc: str = "",
    unit: str = "it",
    enabled: bool = True,
    initial: float = 0,
    unit_scale: bool = False,
    file: IO[str] | None = None,
    bar_format: str | None = None,
) -> Bar:
    """A progress display of `total` units: tqdm's bar when `file` (stderr by default) is a terminal, else
    LineProgress's lines; nothing at all when not `enabled`."""
    fp = file if file is not None else sys.stderr
    if enabled and is_terminal(fp):
        return tqdm(
            total=total,
            initial=initial,
            desc=desc,
            unit=unit,
            unit_scale=unit_scale,
            dynamic_ncols=True,
            file=fp,
            bar_format=bar_format,
        )
    return LineProgress(total, desc, unit, initial, unit_scale, disable=not enabled, file=fp, bar_format=bar_format)
