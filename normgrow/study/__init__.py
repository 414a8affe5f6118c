"""Studies: every arm × seed of a comparison run as independent jobs, then aggregated into results, statistics,
the claims' verdicts and a report — all rebuilt from the study directory alone. Three rooms and the plumbing:

    engine/       the verdict engine, knowing no paper: measures.py (a run's view), stats.py (intervals, Fieller,
                  Holm, power), verdicts.py (claims, roles, settings as registries), fits.py (L(B) = E + A·B^−α)
    paper/        the paper, a plug-in: its claims (claims.py, mechanism.py, rivals.py, limits.py), its regime
                  checks (regime.py), its study-file sections (sections.py) and report parts (plugin.py)
    report/       a study directory read back: summary.py, study.py (report.md), ladder.py, figures.py,
                  overview.py, parts.py (the report-part registry), contrasts.py, compare.py, downstream.py, …

    config.py     the study file: arms, seeds, contrasts, claims' roles, launcher; a paper's sections registered
    sections.py   the study-file section registry; sweep: and a ladder's checks as data
    jobs.py       arm × seed (× learning rate) jobs, their names, the study directory
    launch.py     launchers (inline, local processes, submitit/SLURM) as a registry, the progress bar
    tree.py       a study's tree as a value (tree.shape): its pilot, check, envelope, leaves, confirmation
    runner.py     one walk of a study's tree (pilot, rounds, points or budgets) with two launchers: train, or read
    record.py     one record per run (RunRecord), results.csv, the learning-rate selection
    choice.py     lr_choice.json as frozen records;  pilot.py, envelope.py  the rates' pilot and per-budget envelope
    sweep.py      sweep axes;  branches.py  a ladder trained as trunks and decay branches
    limits.py     the limit per arm, the held-out prediction, the registry of claims at the limit
    plan.py       `normgrow plan`: memory per device and device-hours before running

The layer sits above the core: nothing outside normgrow/study/ (but the command line and the package's
`__init__`) imports it; the engine imports nothing of the study outside it; the report and the plumbing import
nothing of the paper (tests/test_structure.py).
"""

from normgrow.study import paper  # noqa: F401 - the paper, registered as a plug-in (study/paper/__init__.py)
from normgrow.study.config import StudyConfig, load_study, register_study_section
from normgrow.study.engine.verdicts import register_claim, register_role, register_setting
from normgrow.study.launch import register_launcher
from normgrow.study.report.compare import compare_studies
from normgrow.study.report.parts import ReportPart, register_report_part
from normgrow.study.runner import rebuild_report, run_study
from normgrow.study.sections import StudySection

__all__ = [
    "ReportPart",
    "StudyConfig",
    "StudySection",
    "compare_studies",
    "load_study",
    "rebuild_report",
    "register_claim",
    "register_launcher",
    "register_report_part",
    "register_role",
    "register_setting",
    "register_study_section",
    "run_study",
]
