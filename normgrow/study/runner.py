"""Running a study: plan its jobs, prepare the shared work once, launch the jobs, then summarize — results.csv,
the statistics, the claims and report.md — from what the run directories hold. `normgrow report STUDY_DIR`
(`rebuild_report`) does the last part alone, from disk.

A study with a learning-rate pilot (`lr_pilot`, pilot.py) runs the pilot sub-study `pilot/` first, writes the choice
(`lr_choice.json`), then its own runs, each arm at its chosen rate; `normgrow report` re-derives the choice from the
pilot's runs.

Shared work (the default teacher, tokenizer, token shards, a teacher cache) is done once, in the study
process, before any job starts. A second invocation skips finished runs and resumes killed ones from their
checkpoints; a failing job is recorded (status, last error line) and does not stop the others.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from normgrow import atomic, dtypes
from normgrow.data import cache_root
from normgrow.dist import pick_device
from normgrow.errors import NormgrowError
from normgrow.locks import DirLock
from normgrow.pipeline import build_cache, prepare_data
from normgrow.rundir import read_summary
from normgrow.study.claims import Claim, evaluate_claims
from normgrow.study.config import StudyConfig, load_study
from normgrow.study.figures import dose_response
from normgrow.study.jobs import (
    Job,
    check_runs_unchanged,
    claim_study_dir,
    plan_jobs,
    row_job_name,
    sweep_plan,
    write_study_dir,
    write_study_yaml,
)
from normgrow.study.ladder import ladder_headline, ladder_report_lines, ladder_rung, reference_title, restricted
from normgrow.study.launch import launch, threads_per_job
from normgrow.study.measures import Measures, study_measures
from normgrow.study.pilot import (
    NOT_LAUNCHED,
    PILOT_DIR,
    beyond_edges,
    choose_rates,
    extension_study,
    pilot_study,
    piloted_jobs,
    round_dir,
    with_rates,
    write_choice,
)
from normgrow.study.plan import study_plan
from normgrow.study.regime import headline_line, ladder_checks, plan_lines, regime_section, study_checks, write_regime
from normgrow.study.report import claims_section, collapsed_arms, dose_section, headline, write_report
from normgrow.study.results import FIELDS, collect, read_results, select_lrs, write_results
from normgrow.study.stats import aggregate, paired
from normgrow.study.sweep import axis_keys, plot_contrast, sentences, sub_points, sub_root, sweep_report_lines


def prepare_shared(
    jobs: list[Job], log: Callable[[str], None], progress: bool = True, threads: int | None = None
) -> None:
    """Default teacher, tokenizer and token shards (and a teacher cache when asked), once per distinct
    (data, teacher) config, before any job starts; then `dtype: auto`'s verdict per shape (dtypes.resolve_for_jobs)."""
    seen = set()
    for job in jobs:
        key = (
            json.dumps(dataclasses.asdict(job.cfg.data), sort_keys=True),
            json.dumps(dataclasses.asdict(job.cfg.teacher)),
        )
        if key in seen:
            continue
        seen.add(key)
        try:
            if job.cfg.teacher.cache and not job.cfg.teacher.cache_path:  # one teacher pass for the whole study
                build_cache(job.cfg, log=log, progress=progress)
            else:
                prepare_data(job.cfg, log=log, progress=progress)
        except NormgrowError as e:  # the affected jobs fail on their own, with this error in their logs
            log(f"shared preparation for {job.name} failed: {e}")
    dtypes.resolve_for_jobs(
        ((j.arm, j.cfg, pick_device(j.cfg.train.device), cache_root(j.cfg.data)) for j in jobs), log, threads
    )


class Summary(NamedTuple):
    """What summarizing a study leaves beside its files: report.md's path, the headline lines, the claims'
    verdicts, the runs the statistics use (each arm's selected learning rate) and their measures."""

    path: Path
    headline: list[str]
    claims: list[Claim]
    kept: list[dict]
    measures: Measures


def summarize(
    study: StudyConfig, jobs: list[Job], status: dict[str, str], out: Path, lr_choice: dict | None = None
) -> Summary:
    """results.csv, the statistics, the claims and report.md (with its figures) from what the run directories hold;
    `lr_choice` the learning-rate pilot's choice (pilot.py), if the study ran one."""
    rows = collect(study, jobs, status)
    selection = select_lrs(study, rows)
    write_results(rows, out / "results.csv")
    kept = [r for r in rows if r["selected"] != "no"]  # an arm's chosen learning rate only
    stages = {
        (r["arm"], int(r["seed"])): (read_summary(out / r["run_dir"]) or {}).get("stages", [])
        for r in kept
        if r["status"] == "ok" and r["arm"] in study.phase
    }
    agg = aggregate(list(study.arms), study.contrasts, study.gap_ratio, study.phase, kept, stages)
    measures = study_measures(kept, out)
    claims = evaluate_claims(study.claims, measures)
    checks = study_checks(study, kept, measures)
    write_regime(study, checks, out)
    path = write_report(
        study,
        kept,
        agg,
        out,
        claims=claims,
        measures=measures,
        selection=selection,
        all_rows=rows,
        lr_choice=lr_choice,
        regime=checks,
    )
    heads = headline(study, agg, claims, collapsed_arms(study, measures)) + headline_line(checks)
    return Summary(path, heads, claims, kept, measures)


# ----------------------------------------------------------------------------- the whole study


def run_study(
    study: StudyConfig, out: Path, log: Callable[[str], None] = print, progress: bool = True, force: bool = False
) -> Path:
    """Plan, prepare shared work, launch the jobs, aggregate, report. Returns report.md's path. The study's registered
    regime checks are printed first, before any run (its pilot's included). `out` must be new, empty or this study's
    directory; `force` lets it be a user's folder (claim_study_dir)."""
    claim_study_dir(out, force)
    for line in plan_lines(study):
        log(line)
    if study.sweep.axes or study.budgets:
        plan = sweep_plan(study, out)  # every point's configs checked before anything runs
        check_pools(study, [j for _, _, jobs in plan for j in jobs])
        with DirLock(out, "study"):
            if not study.lr_pilot.lrs:
                return _run_sweep_locked(study, plan, out, log, progress)
            write_study_yaml(study, out)  # a directory holding another study is refused before the pilot runs
            rated, choice = _pilot_first(study, out, log, progress)
            return _run_sweep_locked(study, sweep_plan(rated, out), out, log, progress, choice)
    jobs = plan_jobs(study, out)  # every arm's config checked (at its rate without the pilot) before anything runs
    check_pools(study, jobs)
    pilot = (pilot_study(study), plan_jobs(pilot_study(study), out / PILOT_DIR)) if study.lr_pilot.lrs else None
    with DirLock(out, "study"):  # one study process per directory (each run locks its own directory too)
        if pilot is None:
            return _run_locked(study, jobs, out, log, progress)
        return _run_piloted(study, *pilot, out, log, progress)


def check_pools(study: StudyConfig, jobs: list[Job]) -> None:
    """A study whose runs train on a pool: every job's epochs over it against data.max_pool_repeats, budgets matched
    as the runs will match them (study_plan, in a temporary directory), before anything is written or runs."""
    if any(j.cfg.data.train_pool_sequences and j.cfg.data.max_pool_repeats for j in jobs):
        study_plan(study, None, False)


def _run_piloted(
    study: StudyConfig, pilot: StudyConfig, pilot_jobs: list[Job], out: Path, log: Callable[[str], None], progress: bool
) -> Path:
    """The pilot sub-study first (its finished runs skipped), the choice from its runs, then the study's runs, each
    arm at its chosen rate (pilot.py)."""
    write_study_yaml(study, out)  # a directory holding another study is refused before the pilot runs
    _run_locked(pilot, pilot_jobs, out / PILOT_DIR, log, progress)
    choice = _pilot_rounds(study, out, log, lambda sub, d: _run_locked(sub, plan_jobs(sub, d), d, log, progress))
    jobs, blocked = piloted_jobs(study, out, choice)
    return _run_locked(study, jobs, out, log, progress, choice, blocked)


def _pilot_rounds(
    study: StudyConfig,
    out: Path,
    log: Callable[[str], None],
    do_round: Callable[[StudyConfig, Path], object] | None = None,
) -> dict:
    """The pilot's choice after its rounds (round 0, pilot/, already done): while lr_pilot.extend allows, an arm whose
    choice sits at an edge of the rates it tried gets the next rate beyond it in round k (`do_round(sub, dir)` runs
    it, or rebuilds its results from disk; without it, rounds not on disk end the extension). Then `_choice`."""
    extra: dict[str, list[float]] = {}
    for k in range(1, study.lr_pilot.extend + 1):
        more = beyond_edges(study, choose_rates(study, _pilot_rows(study, out, k - 1), extra))
        if not more:
            break
        sub, sub_dir = extension_study(study, k, {arm: [lr] for arm, lr in more.items()}), out / round_dir(k)
        if do_round is None and not (sub_dir / "results.csv").is_file():
            break
        log(f"pilot round {k}: " + ", ".join(f"{arm} at {lr:g}" for arm, lr in more.items()) + " (beyond the edge)")
        (do_round or (lambda st, d: summarize(st, plan_jobs(st, d), failed_runs(d), d)))(sub, sub_dir)
        for arm, lr in more.items():
            extra.setdefault(arm, []).append(lr)
    return _choice(study, out, log, extra)


def _pilot_rows(study: StudyConfig, out: Path, last: int) -> list[dict]:
    """The results.csv rows of the pilot rounds 0 … last on disk (a round's rows count only at the rates the
    extension gave its arms: choose_rates scores an arm at its rates alone)."""
    return [
        r
        for k in range(last + 1)
        if (out / round_dir(k) / "results.csv").is_file()
        for r in read_results(out / round_dir(k) / "results.csv")
    ]


def _choice(study: StudyConfig, out: Path, log: Callable[[str], None], extra: dict | None = None) -> dict:
    """The pilot's choice from its finished runs (every round's), written to lr_choice.json and logged."""
    choice = choose_rates(study, _pilot_rows(study, out, study.lr_pilot.extend), extra)
    write_choice(out, choice)
    for arm, c in choice["arms"].items():
        log(
            f"learning rate of {arm}: "
            + (
                f"{c['chosen']:g} (pilot of {c['piloted_as']})"
                if c["chosen"] is not None
                else "none: its pilot finished no rate, its runs are not launched"
            )
        )
    return choice


def _pilot_first(study: StudyConfig, out: Path, log: Callable[[str], None], progress: bool) -> tuple[StudyConfig, dict]:
    """A ladder's learning-rate pilot, once, at the reference budget × lr_pilot.budget_scale: the study with every arm
    at its chosen rate (what each budget runs) and the choice. An arm without a rate stops the ladder, with one line."""
    pilot = pilot_study(study)
    _run_locked(pilot, plan_jobs(pilot, out / PILOT_DIR), out / PILOT_DIR, log, progress)
    choice = _pilot_rounds(study, out, log, lambda sub, d: _run_locked(sub, plan_jobs(sub, d), d, log, progress))
    return _rated(study, choice), choice


def _rated(study: StudyConfig, choice: dict) -> StudyConfig:
    missing = [arm for arm, c in choice["arms"].items() if c["chosen"] is None]
    if missing:
        raise NormgrowError(
            f"lr_pilot: the pilot finished no rate on every pilot seed for {', '.join(missing)} "
            f"({PILOT_DIR}/results.csv); the budget ladder is not launched"
        )
    return with_rates(study, choice)


def _run_sweep_locked(
    study: StudyConfig, plan, out: Path, log: Callable[[str], None], progress: bool, lr_choice: dict | None = None
) -> Path:
    """Every point's (every budget's) jobs launched together (one queue, so `launcher.parallel` spans them), then
    each one's report and the sweep's (the ladder's). With a pilot's `lr_choice`, `study` already carries the rates
    and the study as written is on disk."""
    for _, sub_dir, jobs in plan:  # every budget's runs checked before the ladder's own study.yaml is written
        check_runs_unchanged(jobs, sub_dir)
    if lr_choice is None:
        write_study_yaml(study, out)
    for sub, sub_dir, jobs in plan:
        write_study_dir(sub, jobs, sub_dir)
    jobs = [j for _, _, js in plan for j in js]
    kind, what = ("budget ladder", "budgets") if study.budgets else ("sweep study", "points")
    some = restricted(study)
    arms = f"{len(study.arms)} arms{some}" if not some else f"up to {len(study.arms)} arms{some}"
    log(f"{kind} {study.name}: {len(plan)} {what} × {arms} × {len(study.seeds)} seeds = {len(jobs)} runs → {out}")
    prepare_shared(jobs, log, progress=progress, threads=threads_per_job(study.launcher))
    status = launch(jobs, study.launcher, out, log, progress=progress)
    for name, err in status.items():
        if err != "ok":
            log(f"run {name} failed: {err}")
    return summarize_sweep(study, plan, {j.name: status.get(j.name) for j in jobs}, out, log, lr_choice=lr_choice)


def summarize_sweep(
    study: StudyConfig,
    plan,
    status: dict,
    out: Path,
    log: Callable[[str], None] = print,
    plots: bool = True,
    lr_choice: dict | None = None,
) -> Path:
    """Each point's (budget's) results.csv and report.md, the sweep's results.csv (every run, with its point and
    axis values; a ladder's with its budget label and budget_scale), its report.md (a sweep's with one figure per
    contrast) and headline, logged. Returns the sweep's (ladder's) report path."""
    subs, all_rows, keys, root = [], [], axis_keys(study), sub_root(study)
    for (sub, sub_dir, jobs), p in zip(plan, sub_points(study), strict=True):
        done = summarize(sub, jobs, {j.name: v for j in jobs if (v := status.get(j.name))}, sub_dir, lr_choice)
        subs.append((p, sub, jobs, done))
        for r in read_results(sub_dir / "results.csv"):
            all_rows.append(
                {
                    "point": p.label,
                    **dict(zip(keys, p.coords, strict=True)),
                    **r,
                    "run_dir": f"{root}/{p.label}/{r['run_dir']}",
                }
            )
    write_results(all_rows, out / "results.csv", fields=["point", *keys, *FIELDS])
    if study.budgets:
        lines, heads = _ladder_report(study, subs, out, plots)
    else:
        lines, heads = _sweep_report(study, subs, out, plots)
    atomic.write_text(out / "report.md", "\n".join(lines) + "\n")
    for line in heads:
        log(line)
    return out / "report.md"


def _sweep_report(study: StudyConfig, subs: list, out: Path, plots: bool) -> tuple[list[str], list[str]]:
    """A sweep's report lines (its figures drawn) and its sign sentences."""
    table = {name: [(p, paired(done.kept, a, b)) for p, _, _, done in subs] for name, (a, b) in study.contrasts.items()}
    figures = {}
    if plots:
        for name, entries in table.items():
            if any(c["mean"] is not None for _, c in entries):
                plot_contrast(study, name, entries, out / "plots" / f"sweep_{name}.png")
                figures[name] = f"plots/sweep_{name}.png"
    configs = [(p.label, jobs[0].cfg) for p, _, jobs, _ in subs if jobs]
    return sweep_report_lines(study, table, figures, configs), [
        line for name, entries in table.items() for line in sentences(study, name, entries)
    ]


def _ladder_report(study: StudyConfig, subs: list, out: Path, plots: bool) -> tuple[list[str], list[str]]:
    """A ladder's report lines and its headline: every budget's numbers, its regime checks (regime.json written),
    the dose–response figure over every budget (drawn into out/plots/), and the reference budget's claims section."""
    rungs = [
        ladder_rung(study, p, done.kept, {j.arm: j.cfg.model for j in jobs}, done.claims) for p, _, jobs, done in subs
    ]
    sub, done = next((sub, done) for p, sub, _, done in subs if p.coords[0] == study.budget_scale)
    reference_claims = claims_section(sub, done.kept, done.claims, done.measures, title=reference_title(study))
    checks = ladder_checks(study, [(p.coords[0], list(sub.arms), done.kept, done.measures) for p, sub, _, done in subs])
    write_regime(study, checks, out)
    by_budget = [(p.coords[0], d.measures) for p, _, _, d in subs]
    dose = dose_section(dose_response(study.claims, by_budget, out / "plots") if plots else None)
    return (
        ladder_report_lines(study, rungs, reference_claims, regime_section(study, checks), dose),
        ladder_headline(study, rungs) + headline_line(checks),
    )


def _run_locked(
    study: StudyConfig,
    jobs: list[Job],
    out: Path,
    log: Callable[[str], None],
    progress: bool,
    lr_choice: dict | None = None,
    blocked: dict[str, str] | None = None,
) -> Path:
    """Write the study dir, launch `jobs` but the `blocked` ones ({name: why not}), summarize."""
    blocked = blocked or {}
    write_study_dir(study, jobs, out)
    log(f"study {study.name}: {len(study.arms)} arms × {len(study.seeds)} seeds = {len(jobs)} runs → {out}")
    todo = [j for j in jobs if j.name not in blocked]
    prepare_shared(todo, log, progress=progress, threads=threads_per_job(study.launcher))
    status = launch(todo, study.launcher, out, log, progress=progress)
    for name, err in status.items():
        if err != "ok":
            log(f"run {name} failed: {err}")
    status.update(blocked)
    done = summarize(study, jobs, status, out, lr_choice)
    for line in done.headline:
        log(line)
    return done.path


def unfinished_runs(study_dir: Path) -> list[str]:
    """The runs of a study (every budget's or point's) that its results.csv records as not finished, named
    `[point/]job`; not its pilot's, nor a rate an arm's sweep did not select (a rate that diverged is an outcome of
    the choice of rates, not a failure of the study) unless the arm has no selected rate at all."""
    path = study_dir / "results.csv"
    if not path.is_file():
        return []
    rows = read_results(path)
    chosen = {(r.get("point", ""), r["arm"]) for r in rows if r.get("selected") != "no"}  # arms left a result
    return [
        (f"{r['point']}/" if r.get("point") else "") + row_job_name(r)
        for r in rows
        if r["status"] != "ok" and (r.get("selected") != "no" or (r.get("point", ""), r["arm"]) not in chosen)
    ]


def failed_runs(study_dir: Path) -> dict[str, str]:
    """{job name: error} of the runs a study's results.csv records as failed (none without one)."""
    if not (study_dir / "results.csv").is_file():
        return {}
    return {row_job_name(r): r["error"] for r in read_results(study_dir / "results.csv") if r["status"] == "failed"}


def rebuild_report(study_dir: Path, log: Callable[[str], None] = print) -> Path:
    """`normgrow report STUDY_DIR`: results.csv, report.md and plots from what is on disk."""
    study = load_study(str(study_dir / "study.yaml"))
    if study.sweep.axes or study.budgets:
        choice = None
        if study.lr_pilot.lrs:  # a ladder's pilot: its report, the choice, the rates every budget ran at
            pilot, pilot_dir = pilot_study(study), study_dir / PILOT_DIR
            summarize(pilot, plan_jobs(pilot, pilot_dir), failed_runs(pilot_dir), pilot_dir)
            choice = _pilot_rounds(study, study_dir, log)
            study = _rated(study, choice)
        plan = sweep_plan(study, study_dir)
        status = {}
        for _, sub_dir, jobs in plan:
            failed = failed_runs(sub_dir)
            status.update({j.name: failed[j.name.split("/", 1)[1]] for j in jobs if j.name.split("/", 1)[1] in failed})
        return summarize_sweep(study, plan, status, study_dir, log, lr_choice=choice)
    choice = None  # a run the pilot kept from launching is decided again from the pilot's runs, below
    status = {k: v for k, v in failed_runs(study_dir).items() if not v.startswith(NOT_LAUNCHED)}
    if study.lr_pilot.lrs:  # the pilot's report and the choice first, from the pilot's run directories
        pilot, pilot_dir = pilot_study(study), study_dir / PILOT_DIR
        summarize(pilot, plan_jobs(pilot, pilot_dir), failed_runs(pilot_dir), pilot_dir)
        choice = _pilot_rounds(study, study_dir, log)
        jobs, blocked = piloted_jobs(study, study_dir, choice)
        status.update(blocked)
    else:
        jobs = plan_jobs(study, study_dir)
    done = summarize(study, jobs, status, study_dir, choice)
    for line in done.headline:
        log(line)
    return done.path
