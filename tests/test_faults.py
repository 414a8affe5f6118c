"""Faults while running: damaged checkpoints, killed writes. Each ends either with the uninterrupted run's
result or with a one-line error; nothing damaged is loaded silently."""

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import assert_same_run, cli, events, kill_and_resume
from normgrow.train import checkpoint

ARGS = [
    "curriculum.stages=[{n_layer: 3, tokens: 16384}]",
    "train.checkpoint_every_tokens=4096",
    "train.eval_every_tokens=8192",
    "train.threads=1",
    "--no-progress",
]


def at_least_two_checkpoints_past(step):
    def ready(run_dir):
        ckpts = checkpoint.list_checkpoints(run_dir / "checkpoints")
        return len(ckpts) >= 2 and int(ckpts[-1].name.split("_")[1]) >= step

    return ready


def flip_a_byte(path, offset_from_end=100):
    data = bytearray(path.read_bytes())
    data[len(data) - offset_from_end] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.e2e
def test_a_flipped_byte_in_the_latest_checkpoint_falls_back_to_the_previous_one(tiny_cache, tmp_path):
    damaged = {}

    def damage_latest(run_dir):
        ckpts = checkpoint.list_checkpoints(run_dir / "checkpoints")
        damaged["name"], damaged["previous"] = ckpts[-1].name, ckpts[-2].name
        flip_a_byte(ckpts[-1] / "model.safetensors")  # inside the weights: still a loadable file
        # and a killed write of the next checkpoint, left behind by a process that no longer exists
        (run_dir / "checkpoints" / ".tmp-step_99999999-999999999").mkdir()

    args = ["tiny", f"data.cache_dir={tiny_cache}", *ARGS]
    full, killed = kill_and_resume(tmp_path, args, at_least_two_checkpoints_past(24), after_kill=damage_latest)
    assert_same_run(full, killed)  # ends exactly as the uninterrupted run: same events, val/ce and weights
    ckdir = killed / "checkpoints"
    assert (ckdir / f".damaged-{damaged['name']}").is_dir()  # set aside for inspection, not deleted
    assert not list(ckdir.glob(".tmp-*"))  # the dead writer's temp dir is gone
    final = json.loads((killed / "summary.json").read_text())["val/ce"]
    assert final == json.loads((full / "summary.json").read_text())["val/ce"]


@pytest.mark.e2e
def test_resume_reports_the_damaged_checkpoint(tiny_cache, tmp_path):
    out = tmp_path / "run"
    base = ["run", "tiny", f"data.cache_dir={tiny_cache}", "-o", out, *ARGS[1:]]
    cli(*base, "curriculum.stages=[{n_layer: 3, tokens: 12288}]")
    ckpts = checkpoint.list_checkpoints(out / "checkpoints")
    latest = ckpts[-1]
    (latest / "state.json").write_text((latest / "state.json").read_text()[:40])  # a cut state.json
    assert checkpoint.damage(latest) == "state.json is unreadable or cut"
    os.remove(out / "summary.json")  # make the run unfinished so that it resumes
    proc = cli(*base, "curriculum.stages=[{n_layer: 3, tokens: 12288}]")
    said = proc.stdout + proc.stderr
    assert f"checkpoint {latest}: state.json is unreadable or cut" in said and "falling back" in said
    assert f"resuming {out} from {ckpts[-2].name}" in said
    assert events(out)[-1]["event"] == "stage_end"


def long_study(tmp_path, cache):
    spec = tmp_path / "s.yaml"
    spec.write_text(f"""name: long
base: tiny
overrides: [data.cache_dir={cache}, train.threads=1, train.checkpoint_every_tokens=2048, "curriculum.stages=[{{n_layer: 2, tokens: 15000}}]", model.n_layer=2]
seeds: [0]
arms:
  a: {{overrides: [model.norm=post]}}
launcher: {{kind: local, parallel: 1}}
""")
    return spec


def start_study(spec, out):
    return subprocess.Popen(
        [sys.executable, "-m", "normgrow.cli", "study", str(spec), "-o", str(out), "--no-progress"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def wait_for(cond, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline and not cond():
        time.sleep(0.05)
    assert cond(), "timed out"


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in state  # a zombie has exited


def no_repeated_steps(run_dir):
    steps = [e["step"] for e in events(run_dir, "train")]
    return steps == sorted(set(steps))


@pytest.mark.e2e
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux-only")
def test_a_second_study_is_refused_and_killing_a_study_ends_its_runs(tiny_cache, tmp_path):
    """One live study: a second study on its directory is refused in one line; then the first is killed, its
    run does not train on as an orphan, and the rerun resumes it to the end with no step taken twice."""
    spec, out = long_study(tmp_path, tiny_cache), tmp_path / "study"
    study = start_study(spec, out)
    run_dir = out / "runs" / "a-s0"
    ckpts = run_dir / "checkpoints"
    wait_for(lambda: ckpts.is_dir() and any(p.name.startswith("step_") for p in ckpts.iterdir()))
    second = cli("study", spec, "-o", out, "--no-progress", check=False)
    lines = second.stderr.strip().splitlines()
    assert second.returncode == 2 and len(lines) == 1 and "Traceback" not in second.stderr
    assert f"in use by another study process (pid {study.pid} on" in lines[0]
    assert study.poll() is None  # the refused study left the live one alone
    trainer = int((run_dir / ".lock").read_text().split()[0])  # the run's lock names its process
    assert trainer != study.pid and alive(trainer)
    os.kill(study.pid, signal.SIGKILL)  # only the study process: its run must not train on as an orphan
    study.wait()
    wait_for(lambda: not alive(trainer), timeout=30)
    assert not (run_dir / "summary.json").exists()
    cli("study", spec, "-o", out, "--no-progress")
    assert "resuming" in (out / "logs" / "a-s0.log").read_text()  # from its checkpoint, not from scratch
    assert (out / "results.csv").read_text().count(",ok,") == 1
    assert no_repeated_steps(run_dir)


@pytest.mark.e2e
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux-only")
def test_a_study_told_to_stop_stops_its_runs_now(tiny_cache, tmp_path):
    """SIGTERM to a study (what a scheduler or `kill` sends): its run stops at once, checkpointing, and the study
    exits. Before: the study's exit waited for its forked runs (multiprocessing joins its children at exit), so a
    stopped study trained on until its runs finished."""
    spec = long_study(tmp_path, tiny_cache).read_text().replace("tokens: 15000", "tokens: 3000000")
    (tmp_path / "s.yaml").write_text(spec)
    out = tmp_path / "study"
    study = start_study(tmp_path / "s.yaml", out)
    run_dir = out / "runs" / "a-s0"
    ckpts = run_dir / "checkpoints"
    wait_for(lambda: ckpts.is_dir() and any(p.name.startswith("step_") for p in ckpts.iterdir()))
    trainer = int((run_dir / ".lock").read_text().split()[0])
    os.kill(study.pid, signal.SIGTERM)
    assert study.wait(timeout=60) != 0  # stopped, not finished: the run alone needs minutes
    wait_for(lambda: not alive(trainer), timeout=30)
    assert not (run_dir / "summary.json").exists()
    assert "stopped by SIGTERM" in (out / "logs" / "a-s0.log").read_text()  # the run stopped itself, checkpointing


@pytest.mark.e2e
def test_a_second_trainer_on_a_live_run_is_refused(tiny_cache, tmp_path):
    out = tmp_path / "run"
    args = [
        "run",
        "tiny",
        f"data.cache_dir={tiny_cache}",
        "-o",
        str(out),
        "train.threads=1",
        "--no-progress",
        "curriculum.stages=[{n_layer: 3, tokens: 12288}]",
    ]
    first = subprocess.Popen(
        [sys.executable, "-m", "normgrow.cli", *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    wait_for(lambda: (out / "metrics.jsonl").is_file() and events(out, "train"))
    # held live while the second starts: on a fast CPU the first run could finish before the second's imports do
    # (Zen 5, session 27: 12,288 tokens in 2 s, and the second found a finished run)
    os.kill(first.pid, signal.SIGSTOP)
    try:
        second = cli(*args, check=False)
    finally:
        os.kill(first.pid, signal.SIGCONT)
    assert second.returncode == 2 and f"in use by another run process (pid {first.pid} on" in second.stderr
    assert first.wait(timeout=300) == 0 and no_repeated_steps(out)


def test_a_cut_summary_is_rebuilt_and_cut_or_missing_event_logs_are_refused(tiny_cache, tmp_path):
    out = tmp_path / "run"
    args = [
        "run",
        "tiny",
        f"data.cache_dir={tiny_cache}",
        "-o",
        out,
        "--no-progress",
        "--no-plots",
        "curriculum.stages=[{n_layer: 3, tokens: 4096}]",
    ]
    cli(*args)
    whole = json.loads((out / "summary.json").read_text())
    (out / "summary.json").write_text((out / "summary.json").read_text()[:100])
    proc = cli(*args)  # rebuilt from the final checkpoint, with the same numbers
    assert "summary.json is unreadable; rebuilding it" in proc.stdout + proc.stderr
    again = json.loads((out / "summary.json").read_text())
    assert again["final"] == whole["final"] and again["compute"] == whole["compute"]

    lines = (out / "metrics.jsonl").read_text().splitlines()
    (out / "metrics.jsonl").write_text("\n".join(lines[:-1]) + "\n" + lines[-1][: len(lines[-1]) // 2] + "\n")
    bad = cli("report", out, "-o", tmp_path / "plots", check=False)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert f"{out / 'metrics.jsonl'}: line {len(lines)} is not valid JSON" in bad.stderr.strip().splitlines()[-1]

    (out / "metrics.jsonl").unlink()  # deleted, then the run resumed: its early events would be lost
    (out / "summary.json").unlink()
    before = sorted(p.name for p in (out / "checkpoints").iterdir())
    gone = cli(*args, check=False)
    assert gone.returncode == 2 and "Traceback" not in gone.stderr
    assert "metrics.jsonl: holds 0 events but the checkpoint being resumed was taken after" in gone.stderr
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == before


def _small_disk(path: Path, size: str) -> bool:
    path.mkdir()
    return (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
        ).returncode
        == 0
    )


def test_a_full_disk_is_one_line_naming_the_checkpoint_and_leaves_no_partial_one(tiny_cache, tmp_path):
    """Before: a traceback naming neither disk nor file. The run's directory sits on a 512 KiB file system
    (tmpfs; needs root to mount) that its first checkpoint (≈ 0.7 MB) does not fit."""
    small = tmp_path / "small"
    if not _small_disk(small, "512k"):
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        proc = cli(
            "run",
            "tiny",
            f"data.cache_dir={tiny_cache}",
            "-o",
            small / "run",
            "--no-progress",
            "--no-plots",
            check=False,
        )
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
        assert f"{small / 'run' / 'checkpoints'}/step_" in lines[0] and "no space left on the device" in lines[0]
        assert "bytes needed" in lines[0] and "bytes free" in lines[0]
        assert not [p for p in (small / "run" / "checkpoints").iterdir() if p.name.startswith(".tmp-")]
    finally:
        subprocess.run(["umount", str(small)], capture_output=True)


def test_a_cut_summary_in_a_study_is_reported_then_rebuilt_by_the_rerun(tiny_cache, tmp_path):
    """Before: `normgrow report` listed the run as 'not run', and a rerun skipped it as finished."""
    spec = tmp_path / "s.yaml"
    spec.write_text(f"""name: cut
base: tiny
overrides: [data.cache_dir={tiny_cache}, "curriculum.stages=[{{n_layer: 2, tokens: 2048}}]", model.n_layer=2]
seeds: [0]
arms:
  a: {{overrides: [model.norm=post]}}
launcher: {{kind: inline}}
""")
    out = tmp_path / "study"
    cli("study", spec, "-o", out, "--no-progress")

    def results():  # every column but the wall time (the rebuilt summary has the final checkpoint's)
        return [
            {k: v for k, v in row.items() if k != "wall_time_s"}
            for row in csv.DictReader((out / "results.csv").read_text().splitlines())
        ]

    ok = results()
    assert ok[0]["status"] == "ok"
    summary = out / "runs" / "a-s0" / "summary.json"
    whole = json.loads(summary.read_text())
    summary.write_text(summary.read_text()[:60])
    cli("report", out)
    assert f"{summary} is unreadable (cut?)" in (out / "report.md").read_text()
    again = cli("study", spec, "-o", out, "--no-progress")
    assert "already finished" not in again.stdout + again.stderr  # not skipped as finished …
    rebuilt = json.loads(summary.read_text())  # … but rebuilt from the run's final checkpoint
    assert rebuilt["final"] == whole["final"] and rebuilt["compute"] == whole["compute"]
    assert results() == ok
