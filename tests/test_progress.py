"""Progress that suits where it goes (normgrow/progress.py): a redrawn bar on a terminal, whole lines in a log."""

import io
import os
import subprocess
import sys

import pytest

from conftest import cli
from normgrow.progress import LineProgress, progress_bar


def test_a_log_gets_a_line_at_each_tenth_and_none_redrawn():
    out = io.StringIO()
    bar = progress_bar(100, "run", "step", file=out)
    assert isinstance(bar, LineProgress)
    for _ in range(100):
        bar.update(1)
        bar.set_postfix(loss="1.0")
    bar.close()
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue() and len(lines) == 10  # 10, 20, …, 100 steps; close adds nothing new
    assert [line.split("|")[-1].split()[0] for line in lines] == [f"{k}/100" for k in range(10, 101, 10)]
    assert lines[-1].startswith("run: 100%") and lines[-1].endswith("loss=1.0]")


def test_a_resumed_bar_counts_from_where_it_starts_and_closes_with_its_last_value():
    out = io.StringIO()
    bar = progress_bar(40, "run", "step", initial=13, file=out)
    bar.update(2)  # 15: not yet the next tenth (16)
    assert out.getvalue() == ""
    bar.update(3)  # 18 ≥ 16: a line
    bar.close()  # 18 already written: nothing more
    assert [line.split("|")[-1].split()[0] for line in out.getvalue().splitlines()] == ["18/40"]
    out = io.StringIO()
    bar = progress_bar(40, "run", "step", initial=13, file=out)
    bar.close()  # nothing happened: nothing written
    assert out.getvalue() == ""


def test_a_terminal_gets_tqdm_and_disabled_writes_nothing():
    from tqdm import tqdm

    master, slave = os.openpty()
    with os.fdopen(slave, "w") as tty:
        bar = progress_bar(10, "run", "step", file=tty)
        assert isinstance(bar, tqdm)
        bar.close()
    os.close(master)
    out = io.StringIO()
    bar = progress_bar(10, "run", "step", enabled=False, file=out)
    bar.update(10)
    bar.refresh()
    bar.close()
    assert out.getvalue() == ""


@pytest.mark.e2e
def test_teacher_train_and_run_into_a_log_have_no_carriage_return(tmp_path, tiny_cache):
    """`normgrow teacher train … > log 2>&1` in a real process (a fresh cache: the teacher trains), and
    `normgrow run tiny` with its output captured: lines, never `\\r` updates."""
    log = tmp_path / "teacher.log"
    with open(log, "w") as f:
        proc = subprocess.run(
            [sys.executable, "-m", "normgrow.cli", "teacher", "train", "tiny", f"data.cache_dir={tmp_path / 'cache'}"],
            stdout=f,
            stderr=subprocess.STDOUT,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
    text = log.read_text()
    assert proc.returncode == 0, text[-2000:]
    assert "\r" not in text
    bars = [line for line in text.splitlines() if line.startswith("teacher-tiny:")]
    assert len(bars) == 10 and bars[-1].startswith("teacher-tiny: 100%"), text
    proc = cli("run", "tiny", f"data.cache_dir={tiny_cache}", "-o", tmp_path / "run", "--no-plots")
    assert "\r" not in proc.stderr + proc.stdout
    assert [line for line in proc.stderr.splitlines() if line.startswith("tiny: 100%")], proc.stderr
