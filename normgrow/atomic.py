"""Atomic file writes: a reader sees the old file or the new one, never half of either.

Every file normgrow writes that a later process reads back (configs, summaries, results, reports, caches'
metadata) goes through here: the content is written to a temporary file beside the target — named for the
writing process, so concurrent writers of the same file never share one — and then renamed over it, which
POSIX makes atomic within a file system. If writing fails, the temporary file is removed and the target is
left as it was. The temporary file is opened like any other (the process' umask applies), so the result has
the same permissions a plain `open(path, "w")` would give it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO


def temp_path(path: Path) -> Path:
    """The temporary sibling a write of `path` goes through (`<name>.<pid>.tmp`)."""
    return path.with_name(f"{path.name}.{os.getpid()}.tmp")


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w", **kwargs) -> Iterator[IO]:
    """`with atomic_open(path) as f: …` writes `f` to a temporary file renamed over `path` on success."""
    path = Path(path)
    tmp = temp_path(path)
    try:
        with open(tmp, mode, **kwargs) as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def write_text(path: str | Path, text: str) -> None:
    """Write `text` to `path` atomically."""
    with atomic_open(path, "w") as f:
        f.write(text)


def write_bytes(path: str | Path, data: bytes) -> None:
    """Write `data` to `path` atomically."""
    with atomic_open(path, "wb") as f:
        f.write(data)
