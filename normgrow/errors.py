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
