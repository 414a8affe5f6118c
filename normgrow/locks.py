"""Directory locks: one process at a time in a run directory or a study directory.

`DirLock(dir, what)` takes an advisory `flock` on `<dir>/.lock` and writes the holder's PID and
host into it. A second process asking for the same lock gets a one-line `LockedError` naming the
holder. The kernel drops the lock when its holder exits, however it exits (SIGKILL included), so
a lock is never stale: the next process takes it and overwrites the PID. `flock` is local to a
machine; on a shared filesystem (NFS) mounted without lock support two hosts are not excluded.
"""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path
from typing import TextIO

from normgrow.errors import ConfigError, NormgrowError

LOCK_NAME = ".lock"


class LockedError(NormgrowError):
    """The directory is in use by another live process."""


class DirLock:
    def __init__(self, directory: Path, what: str):
        self.directory, self.what = Path(directory), what
        self.file: TextIO | None = None

    def acquire(self) -> DirLock:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            f = open(self.directory / LOCK_NAME, "a+")
        except OSError as e:
            raise ConfigError(f"{self.directory}: cannot write the {self.what} directory ({e.strerror})") from None
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "unknown"
            f.close()
            pid, _, host = holder.partition(" ")
            raise LockedError(f"{self.directory}: in use by another {self.what} process (pid {pid} on {host or '?'}); "
                              "wait for it to finish or stop it") from None
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()} {socket.gethostname()}\n")
        f.flush()
        self.file = f
        return self

    def release(self) -> None:
        if self.file is not None:
            fcntl.flock(self.file.fileno(), fcntl.LOCK_UN)
            self.file.close()
            self.file = None

    def __enter__(self) -> DirLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
