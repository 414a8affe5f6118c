"""Shared fixtures: one tiny cache per test session holding the tiny corpus shards and the tiny
default teacher, built through the real code paths (`normgrow teacher train` does the same)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The suite runs alone on its machine, where spinning OpenMP threads are ≈ 14% faster than the passive ones
# normgrow's processes default to; set before normgrow (and torch) load, inherited by the processes tests
# start. The default itself is tested in test_hardware.py with a clean environment.
os.environ.setdefault("OMP_WAIT_POLICY", "ACTIVE")

from normgrow.config import load_config  # noqa: E402
from normgrow.run.pipeline import build_default_teacher  # noqa: E402


@pytest.fixture(scope="session")
def tiny_cache(tmp_path_factory) -> Path:
    """A cache dir with the tiny preset's shards and default teacher already built."""
    cache = tmp_path_factory.mktemp("the cache é ü")  # a space and non-ASCII in every path of every test using it
    build_default_teacher(load_config("tiny", [f"data.cache_dir={cache}"]), log=lambda *_: None, progress=False)
    return cache


def tiny_cfg(cache, *overrides):
    return load_config("tiny", [f"data.cache_dir={cache}", *overrides])


def cli_process(*args, check=True, **kw) -> subprocess.CompletedProcess:
    """Run the real console entry point in a fresh interpreter (what a user's shell does)."""
    proc = subprocess.run([sys.executable, "-m", "normgrow.cli", *map(str, args)], capture_output=True, text=True, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"normgrow {' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc


def cli(*args, check=True) -> subprocess.CompletedProcess:
    """The command line's `main` in this process, its output captured: the same code path as the console
    script without the ≈ 8 s interpreter start-up (torch and transformers imports) of a fresh process.
    Tests that need a real process (kill, torchrun, entry points, a fresh interpreter) use cli_process."""
    import contextlib
    import io

    import torch

    from normgrow.cli import main

    out, err, threads = io.StringIO(), io.StringIO(), torch.get_num_threads()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main([str(a) for a in args])
        except SystemExit as e:  # argparse usage errors
            rc = e.code if isinstance(e.code, int) else 2
        finally:
            torch.set_num_threads(threads)  # a run's train.threads must not leak into later tests
    proc = subprocess.CompletedProcess(["normgrow", *map(str, args)], rc, out.getvalue(), err.getvalue())
    if check and rc != 0:
        raise AssertionError(f"normgrow {' '.join(map(str, args))} failed ({rc}):\n{proc.stderr[-3000:]}")
    return proc


def events(run_dir, kind=None) -> list[dict]:
    """The events of a run's metrics.jsonl (of one kind)."""
    rows = [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if kind is None or r["event"] == kind]


def without_perf(rows: list[dict]) -> list[dict]:
    """Events without their wall-clock measurements (the only values a resume may change)."""
    return [{k: v for k, v in r.items() if not k.startswith("perf/")} for r in rows]


QUIET = dict(log=lambda *_: None, progress=False)  # a run in-process without its log lines or progress bar


def trained_student(run_dir):
    """The student of a finished run, at its latest checkpoint, in eval mode."""
    from normgrow.nn.model import Student
    from normgrow.train import checkpoint

    cfg = load_config(str(Path(run_dir) / "config.yaml"))
    weights = checkpoint.load(checkpoint.latest(Path(run_dir) / "checkpoints"))[0]
    student = Student(cfg.model).eval()
    student.load_state_dict(weights)
    return student


def final_weights(run_dir) -> dict:
    from safetensors.torch import load_file

    from normgrow.train import checkpoint

    return load_file(str(checkpoint.latest(Path(run_dir) / "checkpoints") / "model.safetensors"))


def kill_and_resume(
    tmp_path, args: list, killed_when, after_kill=None, timeout: float = 120, sig: int = signal.SIGKILL
) -> tuple[Path, Path]:
    """The run `normgrow run ARGS` twice: uninterrupted into tmp_path/full, and into tmp_path/killed, where
    the real process gets `sig` (SIGKILL) as soon as `killed_when(run_dir)` holds, then is started again to finish.
    A catchable signal must end it with exit 128 + signal and one line naming the signal and the resume.
    `after_kill(run_dir)` may tamper with what the killed attempt left. Returns (full, killed)."""
    full, killed = tmp_path / "full", tmp_path / "killed"
    cli("run", "--no-plots", "-o", full, *args)  # figures are tested elsewhere; here they only cost time
    proc = subprocess.Popen(
        [sys.executable, "-m", "normgrow.cli", "run", "--no-plots", "-o", str(killed), *map(str, args)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None and not killed_when(killed):
        time.sleep(0.005)
    assert proc.poll() is None, "the run finished before it could be killed; lengthen it"
    os.kill(proc.pid, sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == (-sig if sig == signal.SIGKILL else 128 + sig), err[-2000:]
    if sig != signal.SIGKILL:
        assert (
            f"normgrow: stopped by {signal.Signals(sig).name}; rerunning the same command resumes from the last "
            "checkpoint (finished runs are kept)"
        ) in err.splitlines(), err[-2000:]
    assert not (killed / "summary.json").exists()
    if after_kill is not None:
        after_kill(killed)
    cli("run", "--no-plots", "-o", killed, *args)
    return full, killed


def stage_started(index: int):
    """A kill_and_resume predicate: the run has logged the start of stage `index` (just after its growth event)."""

    def started(run_dir) -> bool:
        metrics = Path(run_dir) / "metrics.jsonl"
        return metrics.is_file() and f'"stage": {index}, "event": "stage_start"' in metrics.read_text()

    return started


def assert_same_run(a, b) -> None:
    """Two run directories hold the same run: every event (floats compared exactly) and the final weights."""
    import torch

    assert without_perf(events(a)) == without_perf(events(b))
    sa, sb = (json.loads((Path(d) / "summary.json").read_text()) for d in (a, b))
    assert sa["final"] == sb["final"] and sa["compute"] == sb["compute"]
    assert sa["data_pool"] == sb["data_pool"]  # a resumed iterator recounts what it served
    wa, wb = final_weights(a), final_weights(b)
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.fixture(scope="session")
def standin(tmp_path_factory) -> Path:
    """The paper path's CPU stand-in (normgrow/teacher/standin.py): a Qwen3-8B-shaped teacher with a padded head and
    Qwen-style tokenizer, and a FineWeb-Edu-shaped local dataset; 150 documents for the fast tests."""
    from normgrow.teacher.standin import make_standin

    return make_standin(tmp_path_factory.mktemp("stand in ß") / "s é", documents=150, base_vocab=400)
