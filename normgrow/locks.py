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
import time
from pathlib import Path
from typing import TextIO

from normgrow.errors import ConfigError, NormgrowError

LOCK_NAME = ".lock"


class LockedError(NormgrowError):
    """The directory is in use by another live process."""


class DirLock:
    """`wait_s` > 0: a lock held by another process is waited for (polled every `poll_s`, `on_wait` told once who
    holds it) for up to wait_s seconds, then the one-line LockedError, which says how long it waited."""

    def __init__(self, directory: Path, what: str, wait_s: float = 0.0, on_wait=None, poll_s: float = 1.0):
        self.directory, self.what = Path(directory), what
        self.wait_s, self.on_wait, self.poll_s = wait_s, on_wait, poll_s
        self.file: TextIO | None = None

    def acquire(self) -> DirLock:
        deadline, told = time.monotonic() + self.wait_s, False
        while True:
            try:
                return self._try_acquire()
            except LockedError as e:
                if time.monotonic() >= deadline:
                    if self.wait_s:
                        raise LockedError(f"{e} (waited {self.wait_s:g} s)") from None
                    raise
                if not told and self.on_wait is not None:
                    self.on_wait(f"waiting: {e}".split("; wait for it")[0])
                    told = True
                time.sleep(self.poll_s)

    def _try_acquire(self) -> DirLock:
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
            raise LockedError(
                f"{self.directory}: in use by another {self.what} process (pid {pid} on {host or '?'}); "
                "wait for it to finish or stop it"
            ) from None
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
