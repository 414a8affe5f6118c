"""One record per run: a study's run directory read once into a typed `RunRecord`, which results.csv, the
statistics, the claims (through its `measures` view), the regime checks, ladders, the report and its figures read.

    RunRecord
        identity    arm, seed, lr, the job's preset, placement, curriculum, the arm it is matched to, the sweep
                    point it belongs to; `selected` (yes / no in an arm that sweeps rates, else empty)
        status      ok (a readable summary.json), failed (with the error, e.g. the launcher's last log line, or a
                    summary that is cut), missing (never run)
        summary     summary.json ({} unless ok): final metrics, compute totals, stage records, boundaries
        config      the run's resolved config.yaml (None without one)
        metrics, diagnostics   metrics.jsonl and diagnostics.jsonl, read when first asked for (a figure of one seed
                    reads one run's metrics; a study does not fail on a cut metrics.jsonl of a run it never draws)
        measures    the claims' view of the run (measures.RunMeasures), built once from the above
        columns     for a run whose directory is gone (an archived study), its results.csv values as written

results.csv is written from `row()`, column by column as it has always been written (csv writes a float's repr,
so reading a row back and writing it again changes nothing). `read_records(study_dir)` reads a study back: its
results.csv verified (a cut or edited file is one line) and each row's run directory, where it is still there.

The learning-rate selection of the arms that sweep rates (`select_lrs`) keeps, per arm, the rate with the lowest
mean CE on the model-selection set — never the validation set it reports.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from normgrow import atomic
from normgrow.config import RunConfig
from normgrow.errors import NormgrowError
from normgrow.study.config import StudyConfig
from normgrow.study.engine.measures import Measures, RunMeasures, run_measures
from normgrow.study.jobs import Job, job_name
from normgrow.train.rundir import RunDir, Summary, freeze

COMPUTE = ("tokens", "active_layer_tokens", "trainable_layer_tokens", "flops")
FIELDS = [
    "arm",
    "seed",
    "lr",
    "selected",
    "status",
    "norm",
    "curriculum",
    "preset",
    "val_ce",
    "val_kl",
    "val_nll",
    "val_teacher_entropy",
    "select_ce",
    "tokens",
    "active_layer_tokens",
    "trainable_layer_tokens",
    "flops",
    "steps",
    "matched_to",
    "match_scale",
    "wall_time_s",
    "run_dir",
    "error",
]
SUMMARY_KEYS = {
    "val_ce": "val/ce",
    "val_kl": "val/kl",
    "val_nll": "val/nll",
    "val_teacher_entropy": "val/teacher_entropy",
}


NO_SUMMARY: Summary = freeze({})  # a record without a readable summary.json


@dataclass(frozen=True)
class RunRecord:
    """One run of a study, as its directory holds it (module docstring)."""

    arm: str
    seed: int
    lr: float
    status: str
    run_dir: str  # relative to the study directory
    study_dir: Path | None = None  # None: the record came from a results.csv alone
    preset: str = ""
    norm: str = ""
    curriculum: str = ""
    matched_to: str = ""
    selected: str = ""
    error: str = ""
    point: str = ""  # the sweep point's (ladder budget's) label, in a sweep's (ladder's) own records
    summary: Summary = field(default_factory=lambda: NO_SUMMARY)
    config: RunConfig | None = None
    columns: dict = field(default_factory=dict)  # results.csv values of a run whose directory is gone

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def kept(self) -> bool:
        """Does the study's statistics use it: not a swept rate the selection left out?"""
        return self.selected != "no"

    @property
    def job(self) -> str:
        """The name of the job it records (its rate is part of it where the arm sweeps rates)."""
        return job_name(self.arm, self.seed, self.lr if self.selected else None)

    @property
    def path(self) -> Path | None:
        """The run directory, where it is still there."""
        if self.study_dir is None or not self.run_dir or not (self.study_dir / self.run_dir).is_dir():
            return None
        return self.study_dir / self.run_dir

    def value(self, column: str) -> float | None:
        """A numeric results.csv column of a finished run (val_ce, tokens, select_ce, …), None where it has none."""
        raw = self.row().get(column, "")
        return None if raw in ("", None) else float(raw)

    @functools.cached_property
    def metrics(self) -> list[dict]:
        return RunDir(self.path).metrics() if self.path is not None else []

    @functools.cached_property
    def diagnostics(self) -> list[dict]:
        return RunDir(self.path).diagnostics() if self.path is not None else []

    @functools.cached_property
    def measures(self) -> RunMeasures:
        """The claims' view (measures.RunMeasures); a run whose directory is gone gives its val/ce alone."""
        m = RunMeasures() if self.path is None else run_measures(self.summary, self.config, self.diagnostics)
        if m.val_ce is None:
            m.val_ce = self.value("val_ce")
        return m

    def row(self) -> dict[str, Any]:
        """The results.csv row."""
        if self.columns:
            return {**{k: "" for k in FIELDS}, **self.columns, "selected": self.selected}
        row: dict[str, Any] = {k: "" for k in FIELDS}
        row.update(
            arm=self.arm,
            seed=self.seed,
            lr=self.lr,
            selected=self.selected,
            status=self.status,
            norm=self.norm,
            curriculum=self.curriculum,
            preset=self.preset,
            matched_to=self.matched_to,
            run_dir=self.run_dir,
            error=self.error,
        )
        s = self.summary
        if self.ok and s:
            match = s.get("budget_match") or {}
            row.update({col: s.get(key, "") for col, key in SUMMARY_KEYS.items()})
            row.update(
                select_ce=(s.get("select") or {}).get("select/ce", ""),
                match_scale=match.get("scale", ""),
                wall_time_s=round(s["wall_time_s"], 1),
                steps=s["compute"]["step"],
                **{k: s["compute"][k] for k in COMPUTE},
            )
        return row


def read_run(job: Job, study: StudyConfig, status: str | None = None) -> RunRecord:
    """The record of one job of `study` from its run directory; `status` the launcher's word on it ("ok" or the
    error line), if it ran in this process."""
    arm = study.arms[job.arm]
    rel = str(job.run_dir.relative_to(job.run_dir.parent.parent))
    base = RunRecord(
        job.arm,
        job.seed,
        job.cfg.train.lr,
        "missing",
        rel,
        job.run_dir.parent.parent,
        preset=arm.preset or study.base,
        norm=job.cfg.model.norm,
        curriculum="-".join(str(s.n_layer) for s in job.cfg.curriculum.stages),
        matched_to=arm.match or "",
    )
    run = RunDir(job.run_dir)
    summary = run.summary()
    if summary is not None:
        return dataclasses.replace(base, status="ok", summary=summary, config=run.config_or_none())
    if run.has_summary_file():  # present but cut or edited: say so, not "not run"
        why = f"{run.summary_file} is unreadable (cut?); rerun the study to rebuild it from the run's final checkpoint"
        return dataclasses.replace(base, status="failed", error=why)
    return dataclasses.replace(
        base, status="failed" if status and status != "ok" else "missing", error=status or "not run"
    )


def read_runs(study: StudyConfig, jobs: list[Job], status: dict[str, str]) -> list[RunRecord]:
    """One record per job, in the jobs' order."""
    return [read_run(job, study, status.get(job.name)) for job in jobs]


def finished(records: list[RunRecord], arm: str) -> dict[int, RunRecord]:
    """The finished runs of an arm, by seed."""
    return {r.seed: r for r in records if r.arm == arm and r.ok}


def values(records: list[RunRecord], arm: str, column: str) -> dict[int, float]:
    """{seed: value} of a numeric column over an arm's finished runs that record it."""
    return {s: v for s, r in finished(records, arm).items() if (v := r.value(column)) is not None}


def study_measures(records: list[RunRecord]) -> Measures:
    """{arm: {seed: RunMeasures}} of the finished runs the statistics use (each arm's chosen learning rate)."""
    out: Measures = {}
    for r in records:
        if r.ok and r.kept:
            out.setdefault(r.arm, {})[r.seed] = r.measures
    return out


def select_lrs(study: StudyConfig, records: list[RunRecord]) -> tuple[list[RunRecord], dict[str, dict]]:
    """For every arm that sweeps learning rates: the mean selection-set CE of each rate over its seeds and the rate
    chosen (the lowest). A rate is scored only when every seed finished at it (mean None otherwise, `n` the seeds that
    did): a rate's mean over the seeds it survived would compare it on its easy seeds against the others on all.
    Returns the records with `selected` yes/no (empty for arms without a sweep) and the selection."""
    chosen, marks = {}, {}
    for arm, a in study.arms.items():
        if not a.lrs:
            continue
        by_lr = {}
        for lr in a.lrs:
            runs = [r for r in records if r.arm == arm and r.lr == lr]
            vals = [v for r in runs if r.ok and (v := r.value("select_ce")) is not None]
            whole = bool(vals) and len(vals) == len(runs)
            by_lr[lr] = {"mean": sum(vals) / len(vals) if whole else None, "n": len(vals)}
        scored = [lr for lr in a.lrs if by_lr[lr]["mean"] is not None]
        best = min(scored, key=lambda lr: cast(float, by_lr[lr]["mean"])) if scored else None
        chosen[arm] = {"lrs": by_lr, "chosen": best}
        marks[arm] = best
    out = [
        dataclasses.replace(r, selected="yes" if marks[r.arm] is not None and r.lr == marks[r.arm] else "no")
        if r.arm in marks
        else r
        for r in records
    ]
    return out, chosen


def write_results(rows: list[dict], path: Path, fields: list[str] = FIELDS) -> None:
    """results.csv, atomically: one row per run, the columns `fields`."""
    with atomic.atomic_open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


def read_results(path: Path, runs: bool = True) -> list[RunRecord]:
    """A results.csv as records: each row's values as written (`columns`), and (`runs`) the run's summary and config
    where its directory is still there (relative to the file's folder)."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return [from_row(row, path.parent, runs) for row in rows]


def from_row(row: dict, study_dir: Path | None = None, runs: bool = True) -> RunRecord:
    """The record of one results.csv row (values as strings); with `runs`, the run's summary and config where its
    directory (under `study_dir`) is still there."""
    r = RunRecord(
        row["arm"],
        int(row["seed"]),
        float(row["lr"]) if row.get("lr") else 0.0,
        row["status"],
        row.get("run_dir") or "",
        study_dir,
        selected=row.get("selected") or "",
        error=row.get("error") or "",
        point=row.get("point") or "",
        columns=dict(row),
    )
    if runs and r.ok and r.path is not None:
        run = RunDir(r.path)
        return dataclasses.replace(r, summary=run.summary() or NO_SUMMARY, config=run.config_or_none())
    return r


def verified_results(study_dir: Path) -> list[RunRecord]:
    """A study's records from its results.csv, refused with one line unless the file parses completely (every row
    has every column of its header and no more, the columns a comparison reads, a val_ce that parses) and every
    finished row whose run directory is there has its run's summary.json val/ce: a cut or edited file is never
    read as a result (a study archived without its run directories is read as its file says).
    `normgrow report STUDY_DIR` rebuilds it from the runs."""
    path = study_dir / "results.csv"
    fix = f"rebuild it from the runs with `normgrow report {study_dir}`"
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for i, row in enumerate(rows, start=2):  # line 1 is the header
        if None in row or None in row.values() or {"arm", "seed", "status", "val_ce"} - set(row):
            raise NormgrowError(f"{path}: line {i} is cut or its columns are not results.csv's; {fix}")
        if row["status"] != "ok":
            continue
        try:
            value = float(row["val_ce"])
        except ValueError:
            raise NormgrowError(f"{path}: line {i}: val_ce {row['val_ce']!r} is not a number; {fix}") from None
        if row.get("run_dir") and (study_dir / row["run_dir"]).is_dir():  # a study archived without its runs: as is
            summary = RunDir(study_dir / row["run_dir"]).summary()
            if summary is None or summary.get("val/ce") != value:
                found = "no summary.json" if summary is None else f"{summary.get('val/ce')!r} in its summary.json"
                raise NormgrowError(
                    f"{path}: line {i}: val_ce {row['val_ce']!r} does not match its run ({found}); {fix}"
                )
    return [from_row(row, study_dir) for row in rows]
