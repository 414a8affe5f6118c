"""Errors a user can cause. The CLI prints each as one line (`normgrow: error: …`) and exits non-zero."""


class NormgrowError(Exception):
    """A problem with the user's input or environment, stated in one line naming the field or file."""


class ConfigError(NormgrowError):
    """A config value is missing, unknown, mistyped or inconsistent."""


class DataError(NormgrowError):
    """A corpus, tokenizer or token-shard problem."""


def no_space(error: BaseException) -> bool:
    """Did a write fail because the file system is full? (OSError ENOSPC, or a library's wrapped I/O error)."""
    import errno

    return (isinstance(error, OSError) and error.errno == errno.ENOSPC) or "No space left on device" in str(error)


def disk_full(path, need: int | None = None) -> NormgrowError:
    """The one-line error for a full file system: the path being written, the bytes needed and free."""
    import shutil
    from pathlib import Path

    existing = Path(path)
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    free = shutil.disk_usage(existing).free
    needed = f"about {need:,} bytes needed, " if need is not None else ""
    return NormgrowError(f"{path}: no space left on the device ({needed}{free:,} bytes free)")


class RunsFailed(NormgrowError):
    """A study finished with runs that did not: its report is written without them (exit code 1, not 2)."""

    exit_code = 1


class Stopped(BaseException):
    """The process was asked to stop by a signal (SIGTERM, SIGHUP): raised in the main thread by the handler that
    `catch_stop_signals` installs, so that cleanup runs and the command line can say what stopped it."""

    def __init__(self, signum: int):
        import signal

        super().__init__(signum)
        self.signum, self.name = signum, signal.Signals(signum).name


def catch_stop_signals() -> dict:
    """SIGTERM and SIGHUP raise `Stopped` in the main thread instead of ending the process without a word; a signal
    the process was told to ignore (SIGHUP under `nohup`) stays ignored. Returns the previous handlers, for
    `restore_signals` (nothing is installed outside the main thread)."""
    import signal
    import threading

    def stop(signum, frame):
        signal.signal(signum, signal.SIG_DFL)  # a second one ends the process even if this one is swallowed
        raise Stopped(signum)

    previous: dict = {}
    if threading.current_thread() is not threading.main_thread():
        return previous
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is not signal.SIG_IGN:
            previous[sig] = signal.signal(sig, stop)
    return previous


def restore_signals(previous: dict) -> None:
    import signal

    for sig, handler in previous.items():
        signal.signal(sig, handler)


# errno → what the one-line error says after the path (the kinds a user's path or a shared cache can cause)
OS_ERRORS = {
    "EACCES": "permission denied (this user may not read or write it)",
    "EPERM": "operation not permitted for this user",
    "ENOTDIR": "a part of the path is not a directory",
    "EISDIR": "is a directory, not a file",
    "EROFS": "on a read-only file system",
    "ENOENT": "no such file or directory",
    "EEXIST": "already exists (and is not a directory where one is needed)",
    "ENXIO": "a device or special file that cannot be used here",
    "ENODEV": "a device that cannot be used here",
    "ENAMETOOLONG": "the name is too long",
    "ELOOP": "too many levels of symbolic links",
    "EMFILE": "too many open files (raise `ulimit -n`)",
    "EDQUOT": "the disk quota is exceeded",
    "ETXTBSY": "is busy (a running program)",
}


def os_error_line(error: OSError) -> str | None:
    """The one-line error for an OSError that reached the command line: the path it names and what went wrong, by
    its errno (a full disk with its free space). None for an OSError that names no path and is not a full disk:
    that is not a problem with the user's input, and its traceback is kept."""
    import errno

    if no_space(error):
        return str(disk_full(error.filename)) if error.filename else f"no space left on the device ({error})"
    if not error.filename:
        return None
    what = OS_ERRORS.get(errno.errorcode.get(error.errno or 0, ""), error.strerror or str(error))
    where = f"{error.filename} → {error.filename2}" if error.filename2 else f"{error.filename}"
    return f"{where}: {what}"
