"""Shared fixtures: one tiny cache per test session holding the tiny corpus shards and the tiny
default teacher, built through the real code paths (`normgrow teacher train` does the same)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from normgrow.config import load_config
from normgrow.teacher import build_default_teacher

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_cache(tmp_path_factory) -> Path:
    """A cache dir with the tiny preset's shards and default teacher already built."""
    cache = tmp_path_factory.mktemp("cache")
    build_default_teacher(load_config("tiny", [f"data.cache_dir={cache}"]), log=lambda *_: None, progress=False)
    return cache


def tiny_cfg(cache, *overrides):
    return load_config("tiny", [f"data.cache_dir={cache}", *overrides])


def cli(*args, check=True, **kw) -> subprocess.CompletedProcess:
    """Run the real console entry point in a subprocess."""
    proc = subprocess.run([sys.executable, "-m", "normgrow.cli", *map(str, args)], capture_output=True, text=True, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"normgrow {' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc
