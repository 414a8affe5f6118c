"""Studies: every arm × seed of a comparison run as independent jobs, then aggregated into results, statistics,
the claims' verdicts and a report — all rebuilt from the study directory alone.

    config.py    the study file: arms, seeds, contrasts, claims' roles, launcher; loading and validation
    jobs.py      arm × seed (× learning rate) jobs, their names, the study directory
    launch.py    launchers (inline, local processes, submitit/SLURM) as a registry, the progress bar
    runner.py    run a study: prepare shared work, launch, summarize; `normgrow report` rebuilds from disk
    results.py   results.csv rows and the learning-rate selection
    pilot.py     the learning-rate pilot (lr_pilot): a short sub-study that chooses each arm's rate first
    measures.py  the typed per-run measures claims, report and figures read
    stats.py     paired t-intervals, Fieller ratio, phase-wise table, the sign of an interval
    claims.py    the claim registry and the paper's claims' verdicts
    report.py    report.md;  figures.py  its figures
    sweep.py     sweep axes and the sweep report;  compare.py  `report --against`
    ladder.py    budget ladders: each contrast's retention ratio between budgets and its label (also --against's)
    regime.py    pre-registered regime checks (health, distance from the teacher, the mechanism's precondition)
    plan.py      `normgrow plan`: memory per device and device-hours before running

The layer sits above the core: nothing outside normgrow/study/ (but the command line and the package's
`__init__`) imports it (tests/test_structure.py).
"""

from normgrow.study.claims import register_claim
from normgrow.study.compare import compare_studies
from normgrow.study.config import StudyConfig, load_study
from normgrow.study.launch import register_launcher
from normgrow.study.runner import rebuild_report, run_study

__all__ = [
    "StudyConfig",
    "compare_studies",
    "load_study",
    "rebuild_report",
    "register_claim",
    "register_launcher",
    "run_study",
]
