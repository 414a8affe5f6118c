"""Atomic file writes: a reader sees the old file or the new one, never half of either.

Every file normgrow writes that a later process reads back (configs, summaries, results, reports, caches'
metadata) goes through here: the content is written to a temporary file beside the target — named for the
writing process, so concurrent writers of the same file never share one — and then renamed over it, which
POSIX makes atomic within a file system. If writing fails, the temporary file is removed and the target is
left as it was. The temporary file is opened like any other (the process' umask applies), so the result has
the same permissions a plain `open(path, "w")` would give it. A whole directory (a cache entry) is published
the same way: written under a temporary name beside it, then renamed (`publish_directory`); the temporary
directory gets the permissions `mkdir` would give it (`make_temp_dir`), so a team sharing a cache can read it.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
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


READ_ONLY = (errno.EROFS, errno.EACCES, errno.EPERM)  # a shared cache this user may read but not write


def remember(path: str | Path, text: str) -> bool:
    """Write a cache's memo (a probe's verdict, a file's hash) atomically if this user may; False where the cache
    is read-only (the memo is then measured again next time, never required)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, text)
    except OSError as e:
        if e.errno not in READ_ONLY:
            raise
        return False
    return True


def write_bytes(path: str | Path, data: bytes) -> None:
    """Write `data` to `path` atomically."""
    with atomic_open(path, "wb") as f:
        f.write(data)


def current_umask() -> int:
    """The process' umask: from /proc/self/status where Linux gives it (reading it otherwise means setting it and
    setting it back, a moment in which another thread's new file would get 022)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def make_temp_dir(parent: Path, prefix: str) -> Path:
    """A new temporary directory in `parent` with the permissions `mkdir` would give it (the umask applies), not
    mkdtemp's 0700: a cache entry or export renamed from it is readable by whom the user's files are."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    os.chmod(tmp, 0o777 & ~current_umask())
    return tmp


def follow_umask(root: Path) -> None:
    """Give every file and folder under `root` the permissions `open` and `mkdir` would have given it (the umask
    applies): libraries that write through private temporary files (safetensors via transformers writes 0600)
    would otherwise leave entries of a shared cache, or an export, readable by their builder alone."""
    mask = current_umask()
    for p in [root, *root.rglob("*")]:
        if not p.is_symlink():
            os.chmod(p, (0o777 if p.is_dir() else 0o666) & ~mask)


def publish_directory(final: Path, write: Callable[[Path], None]) -> None:
    """Run `write(tmp)` in a temporary directory beside `final`, then rename it into place: a cache entry is
    never half-written, and a writer that loses the race to a concurrent one drops its copy and keeps the
    winner's."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = make_temp_dir(final.parent, f".{final.name}.")
    try:
        write(tmp)
        follow_umask(tmp)
        try:
            os.rename(tmp, final)
        except OSError:  # a non-empty `final` exists: another writer finished first
            if not final.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone already after a successful rename


def sha256_file(path: Path) -> str:
    """The file's SHA-256, hex, read in 1 MiB blocks (checkpoints, exports and the teacher cache record it)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
