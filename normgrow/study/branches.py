"""A budget ladder trained as trunks and decay branches (`ladder: branches`).

Every budget's run of an arm × seed follows the ladder's continued-training recipe (jobs.continued: the warmup and
the stages before the last at the smallest budget's lengths, the last stretched, WSD), so all of them take the same
steps until their own decay starts (branch.decay_start_step). The ladder trains that common prefix once per arm ×
seed, as a trunk:

    <ladder>/trunks/configs/<arm>-s<seed>.yaml   the largest budget's config, stopping at its decay start
                                                 (train.stop_tokens) and checkpointing every other budget's
                                                 (train.checkpoint_tokens)
    <ladder>/trunks/runs/<arm>-s<seed>/          the trunk's run directory (no summary: it never decays)
    <ladder>/budgets/<label>/runs/<arm>-s<seed>/ each budget's run: a branch (train.init_from = the trunk's
                                                 checkpoint at its decay start), equal bit for bit to training it
                                                 directly (tests/train/test_branch.py), read by the ladder as any rung

A matched arm is matched per budget with its stages before the last kept (curriculum.match_stages=last), so its
budgets too share a prefix. The trunks run first, then the fitted budgets' branches, then — after the prediction is
written (runner.predict_holdout) — the held-out budget's. A trunk's checkpoints are fixed by the ladder's budgets:
a ladder whose budgets change under trained trunks is refused (jobs.check_runs_unchanged names them).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from normgrow import atomic
from normgrow.config import RunConfig, to_yaml
from normgrow.machine.costs import with_vocab
from normgrow.run.budget import match_budget
from normgrow.study.config import StudyConfig
from normgrow.study.jobs import Job, job_name
from normgrow.train.branch import decay_start_step
from normgrow.train.rundir import RunDir
from normgrow.train.stages import planned_totals, tokens_per_step

TRUNKS = "trunks"  # the ladder's directory of trunks

Node = tuple[StudyConfig, Path, list[Job]]


def resolved(job: Job, by_path: dict[str, Job]) -> RunConfig:
    """The job's config as its run will train it: a matched budget resolved from the config of the job it matches
    (by its path, as the run reads it), vocabulary filled in."""
    cfg = with_vocab(job.cfg)
    ref = cfg.curriculum.match_budget
    if ref is None:
        return cfg
    return match_budget(cfg, planned_totals(resolved(by_path[ref], by_path)))[0]


Family = tuple[str, int, float | None, float]  # arm, seed, swept rate (or None), the rate it trains at


def family(j: Job) -> Family:
    return j.arm, j.seed, j.lr, j.cfg.train.lr


def families(plan: list[Node]) -> dict[Family, list[tuple[Job, RunConfig]]]:
    """Each arm × seed's jobs over the budgets, smallest budget first, with their resolved configs — one family per
    rate where the arm's rate differs by budget (a choice that moved at the pilot's check)."""
    by_path = {str(j.config_path): j for _, _, jobs in plan for j in jobs}
    out: dict[Family, list[tuple[Job, RunConfig]]] = {}
    for _, _, jobs in plan:
        for j in jobs:
            out.setdefault(family(j), []).append((j, resolved(j, by_path)))
    return out


def trunk_of(family: list[tuple[Job, RunConfig]], out: Path, by_rate: bool = False) -> Job:
    """The family's trunk: its largest budget's config, stopped at that budget's decay start and checkpointed at
    every other budget's; named by its rate too (`by_rate`) where the arm has a trunk per rate."""
    largest, cfg = family[-1]
    per_step = tokens_per_step(cfg)
    starts = [decay_start_step(c) for _, c in family]
    train = dataclasses.replace(
        largest.cfg.train,
        stop_tokens=starts[-1] * per_step,
        checkpoint_tokens=sorted({s * per_step for s in starts[:-1]}),
    )
    name = job_name(largest.arm, largest.seed, largest.lr if not by_rate else largest.cfg.train.lr)
    root = out / TRUNKS
    return Job(
        largest.arm,
        largest.seed,
        dataclasses.replace(largest.cfg, train=train),
        root / "configs" / f"{name}.yaml",
        root / "runs" / name,
        root / "logs" / f"{name}.log",
        largest.lr,
        TRUNKS,
        stop_step=starts[-1],
        label=name,  # unique where the arm has a trunk per rate: names key the launchers' bookkeeping
    )


def branched(plan: list[Node], out: Path) -> tuple[list[Node], list[Job]]:
    """The ladder's nodes with every job made a branch of its family's trunk, and the trunks."""
    trunks, branch_of = [], {}
    fams = families(plan)
    for key, members in fams.items():
        trunk = trunk_of(members, out, by_rate=sum(1 for k in fams if k[:3] == key[:3]) > 1)
        trunks.append(trunk)
        for job, cfg in members:
            step = decay_start_step(cfg)
            init = str(RunDir(trunk.run_dir).checkpoint(step))
            train = dataclasses.replace(job.cfg.train, init_from=init)
            branch_of[job.name] = dataclasses.replace(
                job, cfg=dataclasses.replace(job.cfg, train=train), start_step=step
            )
    nodes = [(sub, d, [branch_of[j.name] for j in jobs]) for sub, d, jobs in plan]
    return nodes, trunks


def write_trunks(trunks: list[Job], out: Path) -> None:
    """trunks/configs, runs, logs (the caller has checked, with jobs.check_runs_unchanged, that trunks already
    trained were trained from today's configs)."""
    if not trunks:
        return
    for sub in ("configs", "runs", "logs"):
        (out / TRUNKS / sub).mkdir(parents=True, exist_ok=True)
    for job in trunks:
        atomic.write_text(job.config_path, to_yaml(job.cfg))


def without_failed_trunks(jobs: list[Job], trunks: list[Job], status: dict[str, str]) -> tuple[list[Job], dict]:
    """The branches whose trunk reached its stop, and {branch: why not launched} for the others."""
    failed = {family(t): status[t.name] for t in trunks if status.get(t.name, "ok") != "ok"}
    keep = [j for j in jobs if family(j) not in failed]
    blocked = {j.name: f"not launched: its trunk failed ({failed[family(j)]})" for j in jobs if family(j) in failed}
    return keep, blocked
