"""results.csv: one row per run of a study — arm, seed, learning rate, placement, curriculum, final metrics,
compute totals, status — read from the run directories, and the learning-rate selection of the arms that
sweep rates (the rate with the lowest mean CE on the model-selection set, never on the validation set).
"""

from __future__ import annotations

import csv
from pathlib import Path

from normgrow import atomic
from normgrow.errors import NormgrowError
from normgrow.rundir import read_summary
from normgrow.study.config import StudyConfig
from normgrow.study.jobs import Job
from normgrow.study.stats import COMPUTE

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


def collect(study: StudyConfig, jobs: list[Job], status: dict[str, str]) -> list[dict]:
    """One results.csv row per job, from its run directory."""
    rows = []
    for job in jobs:
        row = {k: "" for k in FIELDS}
        row.update(
            arm=job.arm,
            seed=job.seed,
            lr=job.cfg.train.lr,
            norm=job.cfg.model.norm,
            preset=study.arms[job.arm].preset or study.base,
            curriculum="-".join(str(s.n_layer) for s in job.cfg.curriculum.stages),
            matched_to=study.arms[job.arm].match or "",
            run_dir=str(job.run_dir.relative_to(job.run_dir.parent.parent)),
        )
        st = status.get(job.name)
        s = read_summary(job.run_dir) if job.finished else None
        if s is not None:
            match = s.get("budget_match") or {}
            row.update(
                status="ok",
                val_ce=s.get("val/ce", ""),
                val_kl=s.get("val/kl", ""),
                val_nll=s.get("val/nll", ""),
                val_teacher_entropy=s.get("val/teacher_entropy", ""),
                select_ce=(s.get("select") or {}).get("select/ce", ""),
                match_scale=match.get("scale", ""),
                wall_time_s=round(s["wall_time_s"], 1),
                **{k: s["compute"][k] for k in COMPUTE},
                steps=s["compute"]["step"],
            )
        elif (job.run_dir / "summary.json").is_file():  # present but cut or edited: say so, not "not run"
            row.update(
                status="failed",
                error=f"{job.run_dir / 'summary.json'} is unreadable (cut?); rerun the "
                "study to rebuild it from the run's final checkpoint",
            )
        else:
            row.update(status="failed" if st and st != "ok" else "missing", error=st or "not run")
        rows.append(row)
    return rows


def select_lrs(study: StudyConfig, rows: list[dict]) -> dict[str, dict]:
    """For every arm that sweeps learning rates: the mean selection-set CE of each rate over its seeds and the rate
    chosen (the lowest). A rate is scored only when every seed finished at it (mean None otherwise, `n` the seeds that
    did): a rate's mean over the seeds it survived would compare it on its easy seeds against the others on all.
    Marks every row `selected` yes/no (empty for arms without a sweep)."""
    chosen = {}
    for arm, a in study.arms.items():
        if not a.lrs:
            continue
        by_lr = {}
        for lr in a.lrs:
            runs = [r for r in rows if r["arm"] == arm and float(r["lr"]) == lr]
            vals = [float(r["select_ce"]) for r in runs if r["status"] == "ok" and r["select_ce"] != ""]
            whole = bool(vals) and len(vals) == len(runs)
            by_lr[lr] = {"mean": sum(vals) / len(vals) if whole else None, "n": len(vals)}
        scored = [lr for lr in a.lrs if by_lr[lr]["mean"] is not None]
        best = min(scored, key=lambda lr: by_lr[lr]["mean"]) if scored else None
        chosen[arm] = {"lrs": by_lr, "chosen": best}
        for r in rows:
            if r["arm"] == arm:
                r["selected"] = "yes" if best is not None and float(r["lr"]) == best else "no"
    return chosen


def write_results(rows: list[dict], path: Path, fields: list[str] = FIELDS) -> None:
    """results.csv, atomically: one row per run, the columns `fields`."""
    with atomic.atomic_open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


def read_results(path: Path) -> list[dict]:
    """results.csv's rows as dicts of strings."""
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def verified_results(study_dir: Path) -> list[dict]:
    """A study's results.csv rows, refused with one line unless the file parses completely (every row has every
    column of its header and no more, the columns a comparison reads, a val_ce that parses) and every finished row
    whose run directory is there has its run's summary.json val/ce: a cut or edited file is never read as a result
    (a study archived without its run directories is read as its file says).
    `normgrow report STUDY_DIR` rebuilds it from the runs."""
    path = study_dir / "results.csv"
    fix = f"rebuild it from the runs with `normgrow report {study_dir}`"
    rows = read_results(path)
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
            summary = read_summary(study_dir / row["run_dir"])
            if summary is None or summary.get("val/ce") != value:
                found = "no summary.json" if summary is None else f"{summary.get('val/ce')!r} in its summary.json"
                raise NormgrowError(
                    f"{path}: line {i}: val_ce {row['val_ce']!r} does not match its run ({found}); {fix}"
                )
    return rows
