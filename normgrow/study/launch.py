"""Launchers: how a study's jobs (one `normgrow run` each) get executed.

A launcher is a function `launch(jobs, options, out, progress) -> {job name: "ok" | error line}`
registered by name in `LAUNCHERS` (`launcher.kind`); user code adds one with `register_launcher`.
Three are built in:

    inline     one after another in the study's own process
    local      parallel processes on this machine (`launcher.parallel` at a time), forked from a server that
               imported the training modules once (launcher.preload), or fresh interpreters
    submitit   one submitit job each: SLURM, or submitit's local executor

Every launcher that starts processes runs the same command (`job_command`) in the same
environment (`job_env`: thread counts set so parallel jobs do not oversubscribe the cores), and a
job's status follows one rule (`job_status`): ok when it exited 0 and left a summary, else the last
error line of its log.
"""

from __future__ import annotations

import ctypes
import functools
import multiprocessing
import os
import runpy
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from multiprocessing import forkserver
from pathlib import Path
from typing import Any

from tqdm import tqdm

from normgrow.machine.costs import stage_costs
from normgrow.progress import progress_bar
from normgrow.registry import Registry
from normgrow.run.pipeline import quiet, run
from normgrow.study.config import LauncherConfig
from normgrow.study.jobs import Job
from normgrow.train.rundir import RunDir


def threads_per_job(options: LauncherConfig) -> int:
    if options.threads:
        return options.threads
    return max(1, (os.cpu_count() or 1) // (options.parallel * options.torchrun_nproc))


def job_command(job: Job, options: LauncherConfig) -> list[str]:
    """The `normgrow run` command of a job (through torchrun when it has several processes)."""
    run_args = [
        "run",
        str(job.config_path),
        "-o",
        str(job.run_dir),
        "--no-progress",
        "--no-plots",
        f"train.threads={threads_per_job(options)}",
    ]
    if options.torchrun_nproc > 1:
        return [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={options.torchrun_nproc}",
            "-m",
            "normgrow.cli",
            *run_args,
        ]
    return [sys.executable, "-m", "normgrow.cli", *run_args]


DIE_WITH_PARENT = "NORMGROW_DIE_WITH_PARENT"


def job_env(threads: int) -> dict[str, str]:
    """The environment of a job's process, from the environment of the process that starts it (on a cluster,
    the worker's): OpenMP threads capped like torch's, tokenizers single-threaded, and the request to end
    with the process that started it (`die_with_parent`)."""
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false", DIE_WITH_PARENT: "1"}


def die_with_parent() -> None:
    """Called first by `normgrow run`: in a job started by a launcher (DIE_WITH_PARENT=1 in its environment),
    ask Linux to send SIGTERM when the parent process ends, however it ends (PR_SET_PDEATHSIG), so a killed
    study leaves no trainer running as an orphan. Elsewhere a no-op; the run directory's lock still keeps a
    rerun from starting a second trainer on a live run. (Under torchrun the parent is torchrun itself.)"""
    if os.environ.get(DIE_WITH_PARENT) != "1" or not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    if os.getppid() != parent or parent == 1:  # the parent is already gone: the signal will never come
        os.kill(os.getpid(), signal.SIGTERM)


def last_error(log_path: Path) -> str:
    if not log_path.is_file():
        return "failed (no log)"
    lines = [line for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
    errs = [line for line in lines if line.startswith("normgrow: error:") or "Error" in line]
    return (errs or lines or ["failed"])[-1][:300]


def job_status(job: Job, returncode: int) -> str:
    """ok if the job's process exited 0 and left its summary; otherwise the last error line of its log."""
    return "ok" if returncode == 0 and job.finished else last_error(job.log_path)


def exception_line(e: BaseException, prefix: str = "") -> str:
    first = str(e).splitlines()[0] if str(e) else ""
    return f"{prefix}{type(e).__name__}: {first}"[:300]


# ----------------------------------------------------------------------------- progress


def _steps_done(job: Job) -> int:
    """Steps a job has logged so far (read from the tail of its metrics.jsonl)."""
    return RunDir(job.run_dir).steps_logged()


def job_costs(job: Job) -> list[tuple[int, float]]:
    """(steps, estimated FLOPs per step) of each stage of a job (costs.stage_costs: student and teacher), so a
    3-block stage weighs less than a 9-block one in the progress bar's ETA."""
    return stage_costs(job.cfg)


def cost_of_steps(costs: list[tuple[int, float]], steps: int) -> float:
    """FLOPs of a job's first `steps` steps."""
    done = 0.0
    for n, per_step in costs:
        done += min(n, max(steps, 0)) * per_step
        steps -= n
    return done


class Progress:
    """The study's progress bar over the estimated FLOPs of all its unfinished jobs (so its ETA weighs shallow
    stages and small arms by their cost, across arms and seeds); launchers call `poll`."""

    def __init__(self, jobs: list[Job], enabled: bool = True):
        self.jobs = jobs
        self.costs = {j.name: job_costs(j) for j in jobs}
        self.span = {j.name: (j.start_step, j.stop_step or sum(n for n, _ in self.costs[j.name])) for j in jobs}
        self.total = {j.name: self._cost(j, self.span[j.name][1]) for j in jobs}
        self.bar = progress_bar(
            sum(self.total.values()),
            "study",
            "FLOP",
            enabled=enabled,
            unit_scale=True,
            bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} FLOP [{elapsed}<{remaining}{postfix}]",
        )
        self.tty = isinstance(self.bar, tqdm)
        self.done = -1

    def poll(self, status: dict[str, str], current: str = "") -> None:
        self.bar.n = sum(
            self.total[j.name] if j.finished else self._cost(j, min(_steps_done(j), self.span[j.name][1]))
            for j in self.jobs
        )
        done = sum(1 for j in self.jobs if j.name in status)
        self.bar.set_postfix_str(f"runs {done}/{len(self.jobs)}{' · ' + current if current else ''}", refresh=False)
        if self.tty or done != self.done:  # a log file: a line per finished run
            self.bar.refresh()
        self.done = done

    def _cost(self, job: Job, steps: int) -> float:
        """FLOPs of a job from where it starts (a branch: its trunk's step) to `steps`."""
        c = self.costs[job.name]
        return max(0.0, cost_of_steps(c, steps) - cost_of_steps(c, job.start_step))

    def close(self) -> None:
        self.bar.close()


# ----------------------------------------------------------------------------- the launchers

Launcher = Callable[[list[Job], LauncherConfig, Path, Progress], dict[str, str]]
LAUNCHERS: Registry[Launcher] = Registry("launcher", field="launcher.kind")


def register_launcher(name: str, launch: Launcher, replace: bool = False) -> Launcher:
    """Make `launcher.kind=<name>` run a study's jobs with `launch(jobs, options, out, progress)`."""
    if not callable(launch):
        raise TypeError(f"launcher '{name}': expected a function (jobs, options, out, progress) -> statuses")
    return LAUNCHERS.register(name, launch, replace=replace)


def inline(jobs: list[Job], options: LauncherConfig, out: Path, progress: Progress) -> dict[str, str]:
    """One after another in this process."""
    status: dict[str, str] = {}
    for job in jobs:
        progress.poll(status, job.name)
        try:
            run(job.cfg, job.run_dir, log=quiet, progress=False)
            status[job.name] = "ok"
        except Exception as e:  # noqa: BLE001 - a failing arm is reported, the others go on
            status[job.name] = exception_line(e)
    return status


# ----------------------------------------------------------------------------- the local launcher

# What the fork server imports once (launcher.preload): everything a `normgrow run` process imports before training,
# this module first (its import in the server asks for the server's end with the launcher: server_dies_with_parent).
PRELOAD = ["normgrow.study.launch", "normgrow.cli", "normgrow.run.pipeline", "normgrow.train.loop"]
FORK_SERVER = "NORMGROW_FORK_SERVER"


def server_dies_with_parent() -> None:
    """In the fork server (FORK_SERVER=1 in its environment while it starts; removed here, so its jobs do not see it):
    SIGKILL when the launcher's process ends, however it ends. The server's jobs end with the server (their own
    die_with_parent), so a killed study leaves no run training on; without this the server would outlive the study
    by its slow interpreter exit, its jobs training meanwhile. Elsewhere a no-op."""
    if os.environ.pop(FORK_SERVER, None) != "1" or not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    if os.getppid() != parent or parent == 1:
        os.kill(os.getpid(), signal.SIGKILL)


def forked_job(argv: list[str], log_path: str, env: dict[str, str]) -> None:
    """A job's process under launcher.preload, forked from the server: the environment a fresh one gets (job_env),
    stdin from /dev/null, stdout and stderr into its log, then `python -m normgrow.cli <argv>` in this process (the
    module already imported by the server); its exit status is the command line's."""
    os.environ.update(env)
    null = os.open(os.devnull, os.O_RDONLY)
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(null)
    os.close(log)
    sys.argv = ["normgrow", *argv]
    with warnings.catch_warnings():  # runpy's note that the server imported the module already: it did, on purpose
        warnings.filterwarnings(
            "ignore", message=".*found in sys.modules after import of package", category=RuntimeWarning
        )
        runpy.run_module("normgrow.cli", run_name="__main__", alter_sys=True)  # as `python -m normgrow.cli`: its exit


@functools.cache
def fork_context() -> Any:
    """multiprocessing's forkserver, started now, having imported PRELOAD. Its server runs one OpenMP thread
    (OMP_NUM_THREADS=1 while it starts: no thread pool a fork could inherit half-made); each job then sets its own
    count (train.threads). One server per process; it ends with this process, and its jobs with it (die_with_parent)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    server_env = {"OMP_NUM_THREADS": "1", FORK_SERVER: "1"}
    before = {k: os.environ.get(k) for k in server_env}
    os.environ.update(server_env)
    try:
        forkserver.ensure_running()
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return ctx


class _Forked:
    """A job forked from the server, with Popen's poll() (exit status; a signal as its negative)."""

    def __init__(self, job: Job, options: LauncherConfig):
        threads = threads_per_job(options)
        argv = job_command(job, options)[3:]  # after `python -m normgrow.cli`
        self.proc = fork_context().Process(target=forked_job, args=(argv, str(job.log_path), job_env(threads)))
        self.proc.start()

    def poll(self) -> int | None:
        return None if self.proc.is_alive() else self.proc.exitcode

    def terminate(self) -> None:
        self.proc.terminate()


def forks(options: LauncherConfig) -> bool:
    """Are the jobs forked from the preloaded server (the local launcher, launcher.preload, one process a job)?"""
    return options.kind == "local" and options.preload and options.torchrun_nproc == 1


def fork_seconds() -> float:
    """Seconds to start and end an empty job forked from the server (the server up and preloaded first, by an empty
    job outside the timing)."""
    ctx = fork_context()
    seconds = []
    for _ in range(2):
        t0 = time.perf_counter()
        p = ctx.Process(target=int)
        p.start()
        p.join()
        seconds.append(time.perf_counter() - t0)
    return seconds[-1]


def start_job(job: Job, options: LauncherConfig) -> tuple[Any, Any]:
    """A job's process and (for a fresh interpreter) its open log: forked from the preloaded server when
    launcher.preload and the job is one process, else `normgrow run` in a fresh interpreter."""
    if options.preload and options.torchrun_nproc == 1:
        return _Forked(job, options), None
    logf = open(job.log_path, "a")
    env = job_env(threads_per_job(options))
    return subprocess.Popen(job_command(job, options), stdout=logf, stderr=subprocess.STDOUT, env=env), logf


def local(jobs: list[Job], options: LauncherConfig, out: Path, progress: Progress) -> dict[str, str]:
    """Processes on this machine, `options.parallel` at a time."""
    status: dict[str, str] = {}
    queue, running = list(jobs), dict[str, tuple[Job, Any, Any]]()  # name → (job, process, log file or None)
    try:
        while queue or running:
            while queue and len(running) < options.parallel:
                job = queue.pop(0)
                running[job.name] = (job, *start_job(job, options))
            for name, (job, proc, logf) in list(running.items()):
                rc = proc.poll()
                if rc is not None:
                    if logf is not None:
                        logf.close()
                    status[name] = job_status(job, rc)
                    del running[name]
            progress.poll(status)
            time.sleep(0.5)
    finally:  # stopped (SIGTERM, Ctrl-C, an error): each run still going is told to stop, checkpointing as it does
        for _, proc, _ in running.values():
            if proc.poll() is None:
                proc.terminate()
    return status


def _run_command(cmd: list[str], log_path: str, threads: int) -> int:
    """What a submitit job executes: the same `normgrow run` subprocess the local launcher starts."""
    with open(log_path, "a") as f:
        return subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=job_env(threads)).returncode


def submitit_launcher(jobs: list[Job], options: LauncherConfig, out: Path, progress: Progress) -> dict[str, str]:
    """One submitit job each (SLURM, or submitit's local executor)."""
    import submitit  # imported only when this launcher is used: it probes for SLURM on import

    ex = submitit.AutoExecutor(folder=str(out / "submitit"), cluster=options.cluster)
    params = dict(options.parameters)
    if ex.cluster != "debug":
        params.setdefault("timeout_min", 24 * 60)
        params.setdefault("cpus_per_task", threads_per_job(options) * options.torchrun_nproc)
    ex.update_parameters(**params)
    # On SLURM the queue decides what runs at once; on this machine (submitit's local executor) every submitted
    # job starts at once, so at most `options.parallel` are submitted at a time, as the local launcher runs them.
    at_once = options.parallel if ex.cluster in ("local", "debug") else len(jobs)
    pending, futures = list(jobs), list[tuple[Job, Any]]()
    status: dict[str, str] = {}
    while futures or pending:
        while pending and len(futures) < at_once:
            job = pending.pop(0)
            futures.append(
                (job, ex.submit(_run_command, job_command(job, options), str(job.log_path), threads_per_job(options)))
            )
        for job, fut in list(futures):
            if fut.done():
                try:
                    status[job.name] = job_status(job, fut.result())
                except Exception as e:  # noqa: BLE001 - the job's failure is recorded
                    status[job.name] = f"submitit: {str(e).splitlines()[0] if str(e) else type(e).__name__}"[:300]
                futures.remove((job, fut))
        progress.poll(status)
        time.sleep(1.0)
    return status


register_launcher("inline", inline)
register_launcher("local", local)
register_launcher("submitit", submitit_launcher)


def launch(
    jobs: list[Job], options: LauncherConfig, out: Path, log: Callable[[str], None] = print, progress: bool = True
) -> dict[str, str]:
    """Run every unfinished job with the configured launcher; {job name: "ok" | error line} for all jobs."""
    status = {j.name: "ok" for j in jobs if j.finished}
    todo = [j for j in jobs if not j.finished]
    if status:
        log(f"{len(status)} of {len(jobs)} runs already finished: skipped")
    if not todo:
        return status
    bar = Progress(todo, enabled=progress)
    try:
        status.update(LAUNCHERS[options.kind](todo, options, out, bar))
        bar.poll(status)
    finally:
        bar.close()
    return status


server_dies_with_parent()
