"""Running a study, and rebuilding its report: one walk of the study's tree with two launchers.

A study is a tree of study directories:

    the study                    a plain study: its own runs;  a sweep / a budget ladder: one node per point / budget
    ├── pilot/                   the learning-rate pilot (lr_pilot), a plain study run first
    │   └── extend-<k>/          its extension rounds, each decided by the rounds before it
    └── points/<label>/ | budgets/<label>/   a sweep's points or a ladder's budgets, launched in one queue

`walk(study, out, mode)` visits it in that order — pilot, rounds, the choice (lr_choice.json), then the leaves —
and `mode` says how a node's runs come about:

    Train     plan, write the study directories, prepare the shared work (teacher, data, the dtype verdict), launch
              every unfinished job (launch.py), log the failures      `normgrow study` (run_study)
    Rebuild   read from disk what the runs left (results.csv's failures); an extension round not on disk ends the
              pilot's rounds                                           `normgrow report STUDY_DIR` (rebuild_report)

Both end in summary.py, which reads every run once and writes results.csv, the statistics, the claims and
report.md. A rerun of `normgrow study` skips finished runs and resumes killed ones from their checkpoints; a failing
job is recorded (status, last error line) and does not stop the others. A new study shape is a new kind of node:
one more branch of `leaves`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from normgrow.data import cache_root
from normgrow.errors import NormgrowError
from normgrow.locks import DirLock
from normgrow.machine import dtypes
from normgrow.parallel.dist import pick_device
from normgrow.run.pipeline import build_cache, prepare_data
from normgrow.study.branches import TRUNKS, branched, without_failed_trunks, write_trunks
from normgrow.study.choice import UNSET, BudgetEnvelope, RateChoice, RatesAt, given
from normgrow.study.config import StudyConfig, load_study
from normgrow.study.envelope import (
    bracket,
    bracket_jobs,
    bracketed,
    budget_envelope,
    env_rates,
    filled_study,
    mark,
    widen_rates,
)
from normgrow.study.jobs import (
    Job,
    check_runs_unchanged,
    claim_study_dir,
    ladder_plan,
    plan_jobs,
    sweep_plan,
    write_study_dir,
    write_study_yaml,
)
from normgrow.study.launch import launch, threads_per_job
from normgrow.study.limits import curves_of, write_prediction
from normgrow.study.pilot import (
    CHECK_DIR,
    CONFIRM_DIR,
    NOT_LAUNCHED,
    PILOT_DIR,
    anchor_choice,
    beyond_edges,
    check_study,
    choose_rates,
    confirm_study,
    extension_study,
    moved,
    pilot_study,
    piloted_jobs,
    rates_at,
    round_dir,
    with_check,
    with_confirm,
    with_rates,
    write_choice,
)
from normgrow.study.plan import study_plan
from normgrow.study.record import RunRecord, read_results, read_runs, select_lrs
from normgrow.study.report.downstream import evaluate_study, settings
from normgrow.study.report.ladder import restricted
from normgrow.study.report.summary import summarize, summarize_sweep
from normgrow.study.sections import SECTIONS, budget_label
from normgrow.study.sweep import ladder_points, rung_study
from normgrow.study.tree import shape

Log = Callable[[str], None]
Node = tuple[StudyConfig, Path, list[Job]]  # a study directory of the tree: its study, directory and jobs


@dataclass
class Train:
    """The launcher that trains: write each node's directory, prepare the shared work, launch, log failures."""

    log: Log
    progress: bool = True

    def plain(self, study: StudyConfig, jobs: list[Job], out: Path, blocked: dict[str, str]) -> dict[str, str]:
        """A plain study's runs: its directory written, its unfinished jobs launched but the `blocked` ones."""
        write_study_dir(study, jobs, out)
        self.log(f"study {study.name}: {len(study.arms)} arms × {len(study.seeds)} seeds = {len(jobs)} runs → {out}")
        return self._launch([j for j in jobs if j.name not in blocked], study, out) | blocked

    def sweep(self, study: StudyConfig, plan: list[Node], out: Path, write_own: bool) -> dict[str, str]:
        """Every point's (budget's) jobs in one queue, so `launcher.parallel` spans them; a branch ladder's trunks
        first (branches.py)."""
        plan, trunks = branched(plan, out) if study.ladder == "branches" else (plan, [])
        for _, sub_dir, jobs in plan:  # every budget's runs checked before the ladder's own study.yaml is written
            check_runs_unchanged(jobs, sub_dir)
        check_runs_unchanged(trunks, out / TRUNKS)
        if write_own:
            write_study_yaml(study, out)
        for sub, sub_dir, jobs in plan:
            write_study_dir(sub, jobs, sub_dir)
        write_trunks(trunks, out)
        jobs = [j for _, _, js in plan for j in js]
        kind, what = ("budget ladder", "budgets") if study.budgets else ("sweep study", "points")
        some = restricted(study)
        arms = f"{len(study.arms)} arms{some}" if not some else f"up to {len(study.arms)} arms{some}"
        self.log(
            f"{kind} {study.name}: {len(plan)} {what} × {arms} × {len(study.seeds)} seeds = {len(jobs)} runs → {out}"
        )
        blocked: dict[str, str] = {}
        if trunks:
            self.log(f"{len(trunks)} trunks (one per arm × seed, to the largest budget's decay start) → {out / TRUNKS}")
            jobs, blocked = without_failed_trunks(jobs, trunks, self._launch(trunks, study, out))
        if study.holdout is None:
            return self._launch(jobs, study, out) | blocked
        held = [j for j in jobs if j.point == budget_label(study.holdout)]
        status = self._launch([j for j in jobs if j.point != budget_label(study.holdout)], study, out) | blocked
        fitted = [(sub.budget_scale, sub, js) for sub, _, js in plan if sub.budget_scale != study.holdout]
        self.log(predict_holdout(study, fitted, status, out, held))
        return status | self._launch(held, study, out)

    def _launch(self, jobs: list[Job], study: StudyConfig, out: Path) -> dict[str, str]:
        prepare_shared(jobs, self.log, progress=self.progress, threads=threads_per_job(study.launcher))
        status = launch(jobs, study.launcher, out, self.log, progress=self.progress)
        for name, err in status.items():
            if err != "ok":
                self.log(f"run {name} failed: {err}")
        return status

    def phase(self, study: StudyConfig, jobs: list[Job], out: Path, blocked: dict[str, str]) -> dict[str, str]:
        """Some of a study's runs (a phase of an envelope): their configs written beside the study's, launched."""
        write_study_dir(study, jobs, out)
        return self._launch([j for j in jobs if j.name not in blocked], study, out) | blocked

    def has_round(self, sub_dir: Path) -> bool:
        return True  # a round is run when the rounds before it call for it

    def has_jobs(self, jobs: list[Job]) -> bool:
        return True

    headlines = True  # every node's summary lines are logged as it ends


@dataclass
class Rebuild:
    """The launcher that reads: what the runs left on disk, their failures from results.csv."""

    log: Log

    def plain(self, study: StudyConfig, jobs: list[Job], out: Path, blocked: dict[str, str]) -> dict[str, str]:
        # a run the pilot kept from launching is decided again from the pilot's runs (`blocked`)
        return {k: v for k, v in failed_runs(out).items() if not v.startswith(NOT_LAUNCHED)} | blocked

    def sweep(self, study: StudyConfig, plan: list[Node], out: Path, write_own: bool) -> dict[str, str]:
        status = {}
        for _, sub_dir, jobs in plan:
            failed = failed_runs(sub_dir)
            status.update({j.name: failed[j.name.split("/", 1)[1]] for j in jobs if j.name.split("/", 1)[1] in failed})
        return status

    def phase(self, study: StudyConfig, jobs: list[Job], out: Path, blocked: dict[str, str]) -> dict[str, str]:
        names = {j.name.split("/", 1)[-1] for j in jobs}
        failed = {k: v for k, v in failed_runs(out).items() if k in names and not v.startswith(NOT_LAUNCHED)}
        prefix = jobs[0].point + "/" if jobs and jobs[0].point else ""
        return {prefix + k: v for k, v in failed.items()} | blocked

    def has_round(self, sub_dir: Path) -> bool:
        return (sub_dir / "results.csv").is_file()

    def has_jobs(self, jobs: list[Job]) -> bool:
        """Did a round of an envelope run (is any of its run directories on disk)?"""
        return any(j.run_dir.is_dir() for j in jobs)

    headlines = False  # only the study's own summary lines are logged


Mode = Train | Rebuild


def predict_holdout(
    study: StudyConfig, fitted: list[tuple[float, StudyConfig, list[Job]]], status: dict[str, str], out: Path,
    held: list[Job], choice: RateChoice | None = None,
) -> str:  # fmt: skip
    """Before any run of the held-out budget starts: the fitted budgets' runs read (each arm's chosen rate), fitted,
    and their prediction of the held-out budget written once (limits.write_prediction); a held-out run that had
    already begun is recorded in it."""
    by_budget = []
    for budget, sub, jobs in fitted:
        records, _ = select_lrs(sub, read_runs(sub, jobs, status))
        if choice is not None and choice.envelope is not UNSET:
            records = mark(records, rates_at(choice, budget).envelope)
        by_budget.append((budget, [r for r in records if r.kept]))
    started = [j.name for j in held if j.run_dir.exists() and any(j.run_dir.iterdir())]
    return write_prediction(study, curves_of(by_budget), out, started)


def walk(study: StudyConfig, out: Path, mode: Mode) -> Path:
    """The study's tree (tree.shape): its pilot and rounds (when it has one), then its leaves; returns its report.md's
    path."""
    tree, choice = shape(study), None
    if tree.chooses_rates and isinstance(mode, Train):
        write_study_yaml(study, out)  # a directory holding another study is refused before the pilot runs
    if tree.pilot:
        choice = pilot_choice(study, out, mode)
    elif tree.envelope:  # no pilot: the envelope anchors at each arm's own train.lr
        choice = anchor_choice(study)
    if choice is not None and tree.envelope:
        return envelope_walk(study, out, mode, choice)
    if tree.leaves != "plain":
        rated = rated_study(study, rates_at(choice)) if choice is not None else study
        plan = sweep_plan(rated, out)
        if choice is not None and moved(choice):  # per budget, the rates of the nearest pilot point
            pilot = choice
            plan = ladder_plan(study, out, lambda b: rated_study(study, rates_at(pilot, b)))
        status = mode.sweep(rated, plan, out, write_own=choice is None)
        if choice is not None and tree.leaves == "ladder" and tree.confirm and mode.has_round(out / CONFIRM_DIR):
            choice = confirm_ladder(study, plan[-1], status, choice, out, mode)
        return summarize_sweep(rated, plan, status, out, mode.log, lr_choice=choice)
    jobs, blocked = piloted_jobs(study, out, rates_at(choice)) if choice is not None else (plan_jobs(study, out), {})
    status = mode.plain(study, jobs, out, blocked)
    if choice is not None and tree.confirm and mode.has_round(out / CONFIRM_DIR):
        sub = confirm_study(study, rates_at(choice))
        mode.log(f"rate confirmation at budget {study.budget_scale:g}: each core arm at half and twice its rate")
        _sub(sub, out / CONFIRM_DIR, mode, "rate confirmation")
        confirm = with_confirm(study, rates_at(choice), read_runs(study, jobs, status), _records(out / CONFIRM_DIR))
        choice = dataclasses.replace(choice, confirm=confirm)
        write_choice(out, choice)
    done = summarize(study, jobs, status, out, rates_at(choice) if choice is not None else None)
    for line in done.headline:
        mode.log(line)
    return done.path


def envelope_walk(study: StudyConfig, out: Path, mode: Mode, choice: RateChoice) -> Path:
    """A study under envelope rates (envelope.py): every budget, smallest first, its brackets (anchored at the budget
    before's choice, the pilot's at the first), their widening rounds and its other seeds at the chosen rates; a
    ladder's held-out budget after the prediction. The choice gains each budget's envelope as it is decided."""
    anchors = {arm: choice.arms[arm].chosen for arm in bracketed(study)}
    if not study.budgets:
        jobs, status, env = envelope_node(study, out, mode, anchors)
        choice = dataclasses.replace(choice, envelope={budget_label(study.budget_scale): env})
        write_choice(out, choice)
        done = summarize(study, jobs, status, out, rates_at(choice, study.budget_scale))
        for line in done.headline:
            mode.log(line)
        return done.path
    choice = dataclasses.replace(choice, envelope={})
    plan: list[Node] = []
    seen: dict[str, str] = {}  # the launcher's word on every budget's runs
    for p in ladder_points(study.budgets):
        sub, sub_dir = rung_study(study, p), out / "budgets" / p.label
        if isinstance(mode, Train) and p.coords[0] == study.holdout:
            here = {a: bracket(r) for a, r in anchors.items() if r and a in bracketed(sub)}
            held = bracket_jobs(sub, sub_dir, here, p.label)
            fitted = [(s.budget_scale, s, js) for s, _, js in plan]
            mode.log(predict_holdout(study, fitted, seen, out, held, choice))
        jobs, st, env = envelope_node(sub, sub_dir, mode, anchors, p.label)
        choice = dataclasses.replace(choice, envelope={**choice.envelope, p.label: env})
        write_choice(out, choice)
        anchors |= {arm: a.chosen for arm, a in env.arms.items()}  # an arm not run here keeps its anchor
        plan.append((sub, sub_dir, jobs))
        seen |= st
    return summarize_sweep(study, plan, seen, out, mode.log, lr_choice=choice)


def envelope_node(
    study: StudyConfig, out: Path, mode: Mode, anchors: dict[str, float | None], point: str = ""
) -> tuple[list[Job], dict[str, str], BudgetEnvelope]:
    """One budget's envelope (`study` that budget's study, `out` its directory): the brackets, their widening rounds,
    the choice, then every other seed at the chosen rates. Returns every job, the launcher's word on them and the
    budget's envelope."""
    at = f"budget {study.budget_scale:g}"
    anchors = {a: r for a, r in anchors.items() if a in bracketed(study)}  # the arms run at this budget
    rounds = {a: 0 for a, r in anchors.items() if r is not None}
    jobs = bracket_jobs(study, out, {a: bracket(r) for a, r in anchors.items() if r is not None}, point)
    mode.log(
        f"envelope at {at}: " + ", ".join(f"{a} at {', '.join(f'{x:g}' for x in bracket(r))}" for a, r in anchors.items() if r)
        + f" on seed(s) {', '.join(map(str, study.lr_pilot.envelope_seeds))}"
    )  # fmt: skip
    status = mode.phase(study, jobs, out, {})
    for _ in range(study.lr_pilot.envelope_widen):
        more = widen_rates(budget_envelope(study, read_runs(study, jobs, status), anchors, rounds))
        new = bracket_jobs(study, out, {a: [lr] for a, lr in more.items()}, point) if more else []
        if not new or not mode.has_jobs(new):
            break
        mode.log(f"envelope at {at}, widened: " + ", ".join(f"{a} at {lr:g}" for a, lr in more.items()))
        status |= mode.phase(study, new, out, {})
        jobs += new
        for a in more:
            rounds[a] += 1
    env = budget_envelope(study, read_runs(study, jobs, status), anchors, rounds)
    rates = env_rates(study, env)
    for arm, e in env.arms.items():
        edge = "" if e.closed else " (bracket not closed: its claims read undetermined)"
        mode.log(f"learning rate of {arm} at {at}: " + (f"{e.chosen:g}{edge}" if e.chosen else "none"))
    names = {j.name for j in jobs}
    fill = [j for j in plan_jobs(filled_study(study, env), out, point=point) if j.name not in names]
    blocked = {
        j.name: f"{NOT_LAUNCHED}no envelope rate for {j.arm} at {at} (every rate of its bracket failed, or its "
        f"pilot chose none: {PILOT_DIR}/results.csv)"
        for j in fill
        if rates[j.arm] is None
    }
    status |= mode.phase(study, fill, out, blocked)
    return jobs + fill, status, env


def confirm_ladder(
    study: StudyConfig, top: Node, status: dict[str, str], choice: RateChoice, out: Path, mode: Mode
) -> RateChoice:
    """A ladder's rate confirmation, once every budget has trained: at its largest budget (`top`, its plan node), each
    core arm at half and twice the rate it trained at there; the choice gains the outcome, for that budget only."""
    sub, _, jobs = top
    at = rates_at(choice, sub.budget_scale)
    mode.log(f"rate confirmation at budget {sub.budget_scale:g}: each core arm at half and twice its rate")
    _sub(confirm_study(study, at), out / CONFIRM_DIR, mode, "rate confirmation")
    runs = read_runs(sub, jobs, {j.name: v for j in jobs if (v := status.get(j.name))})
    choice = dataclasses.replace(choice, confirm=with_confirm(study, at, runs, _records(out / CONFIRM_DIR)))
    write_choice(out, choice)
    return choice


def _sub(study: StudyConfig, out: Path, mode: Mode, role: str) -> None:
    """A pilot node (the pilot, one of its rounds, its check): a plain study, run or read, then summarized; its
    summary lines are logged as the `role`'s ("pilot round 1: …"), so that none reads as the study's result."""
    jobs = plan_jobs(study, out)
    done = summarize(study, jobs, mode.plain(study, jobs, out, {}), out)
    if mode.headlines:
        for line in done.headline:
            mode.log(f"{role}: {line}")


def pilot_choice(study: StudyConfig, out: Path, mode: Mode) -> RateChoice:
    """The pilot (pilot/) and its extension rounds, then the choice: while lr_pilot.extend allows, an arm whose choice
    sits at an edge of the rates it tried gets the next rate beyond it in round k (its own node, pilot/extend-<k>/);
    rebuilding, a round not on disk ends the extension. The choice is written to lr_choice.json and logged."""
    pilot = pilot_study(study)
    _sub(pilot, out / PILOT_DIR, mode, f"pilot (budget {pilot.budget_scale:g})")
    extra: dict[str, list[float]] = {}
    for k in range(1, shape(study).extend + 1):
        more = beyond_edges(study, choose_rates(study, _pilot_records(out, k - 1), extra))
        if not more:
            break
        sub, sub_dir = extension_study(study, k, {arm: [lr] for arm, lr in more.items()}), out / round_dir(k)
        if not mode.has_round(sub_dir):
            break
        mode.log(
            f"pilot round {k}: " + ", ".join(f"{arm} at {lr:g}" for arm, lr in more.items()) + " (beyond the edge)"
        )
        _sub(sub, sub_dir, mode, f"pilot round {k}")
        for arm, lr in more.items():
            extra.setdefault(arm, []).append(lr)
    choice = choose_rates(study, _pilot_records(out, study.lr_pilot.extend), extra)
    tree = shape(study)
    if tree.check == "skipped":
        choice = dataclasses.replace(choice, check_skipped=str(tree.check_note))
        mode.log(f"pilot check: {tree.check_note}")
    elif tree.check == "run" and mode.has_round(out / CHECK_DIR):
        sub = check_study(study, choice)
        mode.log(f"pilot check at budget {sub.budget_scale:g}: the chosen rates and their neighbours")
        _sub(sub, out / CHECK_DIR, mode, f"pilot check (budget {sub.budget_scale:g})")
        choice = with_check(study, choice, sub, _records(out / CHECK_DIR))
        for arm in moved(choice):
            mode.log(
                f"learning rate of {arm} moved at budget {sub.budget_scale:g}: {given(choice.arms[arm].check).chosen:g}"
            )
    write_choice(out, choice)
    for arm, c in choice.arms.items():
        rate = f"{c.chosen:g} (pilot of {c.piloted_as})" if c.chosen is not None else None
        mode.log(f"learning rate of {arm}: " + (rate or "none: its pilot finished no rate, its runs are not launched"))
    return choice


def _records(sub_dir: Path) -> list[RunRecord]:
    return read_results(sub_dir / "results.csv", runs=False) if (sub_dir / "results.csv").is_file() else []


def _pilot_records(out: Path, last: int) -> list[RunRecord]:
    """The results.csv rows of the pilot rounds 0 … last on disk (a round's rows count only at the rates the
    extension gave its arms: choose_rates scores an arm at its rates alone)."""
    paths = [out / round_dir(k) / "results.csv" for k in range(last + 1)]
    return [r for path in paths if path.is_file() for r in read_results(path, runs=False)]


def rated_study(study: StudyConfig, rates: RatesAt) -> StudyConfig:
    """A sweep's or ladder's study with every arm at its chosen rate (what each point runs); an arm without a rate
    stops it, with one line."""
    missing = [arm for arm, c in rates.arms.items() if c.chosen is None]
    if missing:
        raise NormgrowError(
            f"lr_pilot: the pilot finished no rate on every pilot seed for {', '.join(missing)} "
            f"({PILOT_DIR}/results.csv); the budget ladder is not launched"
        )
    return with_rates(study, rates)


# ----------------------------------------------------------------------------- the two commands


def run_study(study: StudyConfig, out: Path, log: Log = print, progress: bool = True, force: bool = False) -> Path:
    """`normgrow study`: plan, prepare shared work, launch the jobs, aggregate, report. Returns report.md's path.
    The study's registered regime checks are printed first, before any run (its pilot's included). Every job's
    config is resolved (and so checked) before anything is written. `out` must be new, empty or this study's
    directory; `force` lets it be a user's folder (claim_study_dir)."""
    claim_study_dir(out, force)
    for sec in SECTIONS.values():  # a paper's registered checks (its regime:), before any run
        for line in sec.start_lines(study):
            log(line)
    tree = shape(study)
    if tree.leaves != "plain":
        jobs = [j for _, _, js in sweep_plan(study, out) for j in js]  # every point's configs checked
    else:
        jobs = plan_jobs(study, out)  # every arm's config checked (at its rate without the pilot)
        if tree.pilot:
            plan_jobs(pilot_study(study), out / PILOT_DIR)
    check_pools(study, jobs)
    if study.evaluate.tasks:  # before any run: a missing harness is one line now, not after hours of training
        chosen = settings(study.evaluate, None, [], None, None, None)
    with DirLock(out, "study"):  # one study process per directory (each run locks its own directory too)
        report = walk(study, out, Train(log, progress))
        if not study.evaluate.tasks:
            return report
        evaluate_study(out, **chosen, log=log)
        return walk(study, out, Rebuild(log))


def rebuild_report(study_dir: Path, log: Log = print) -> Path:
    """`normgrow report STUDY_DIR`: results.csv, report.md and plots from what is on disk."""
    return walk(load_study(str(study_dir / "study.yaml")), study_dir, Rebuild(log))


def check_pools(study: StudyConfig, jobs: list[Job]) -> None:
    """A study whose runs train on a pool: every job's epochs over it against data.max_pool_repeats, budgets matched
    as the runs will match them (study_plan, in a temporary directory), before anything is written or runs."""
    if any(j.cfg.data.train_pool_sequences and j.cfg.data.max_pool_repeats for j in jobs):
        study_plan(study, None, False)


def prepare_shared(jobs: list[Job], log: Log, progress: bool = True, threads: int | None = None) -> None:
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


def unfinished_runs(study_dir: Path) -> list[str]:
    """The runs of a study (every budget's or point's) that its results.csv records as not finished, named
    `[point/]job`; not its pilot's, nor a rate an arm's sweep did not select (a rate that diverged is an outcome of
    the choice of rates, not a failure of the study) unless the arm has no selected rate at all."""
    path = study_dir / "results.csv"
    if not path.is_file():
        return []
    records = read_results(path, runs=False)
    chosen = {(r.point, r.arm) for r in records if r.kept}  # arms left a result
    return [
        (f"{r.point}/" if r.point else "") + r.job
        for r in records
        if not r.ok and (r.kept or (r.point, r.arm) not in chosen)
    ]


def failed_runs(study_dir: Path) -> dict[str, str]:
    """{job name: error} of the runs a study's results.csv records as failed (none without one)."""
    if not (study_dir / "results.csv").is_file():
        return {}
    return {r.job: r.error for r in read_results(study_dir / "results.csv", runs=False) if r.status == "failed"}
