"""Studies: every arm × seed of a comparison run as independent jobs, then aggregated into results, statistics,
the claims' verdicts and a report — all rebuilt from the study directory alone.

    config.py     the study file: arms, seeds, contrasts, claims' roles, launcher; loading and validation
    sections.py   its regime: and sweep: sections as data (read by config.py; acted on by regime.py, sweep.py)
    jobs.py       arm × seed (× learning rate) jobs, their names, the study directory
    launch.py     launchers (inline, local processes, submitit/SLURM) as a registry, the progress bar
    runner.py     one walk of a study's tree (pilot, rounds, points or budgets) with two launchers: train, or read
    summary.py    a study directory summarized: results.csv, statistics, claims, regime checks, report.md
    record.py     one record per run (RunRecord), results.csv, the learning-rate selection
    measures.py   the claims' view of a run record (RunMeasures)
    stats.py      one typed interval estimate (Estimate), paired contrasts, Fieller's ratio, Holm, power
    contrasts.py  a study's numbers from its records: per arm, contrasts, the gap ratio, the phase-wise table
    verdicts.py   the verdict engine: claims, roles and settings as registries, verdicts, p-values, Holm
    paper.py      the paper's claims, registered on the engine;  mechanism.py  its mechanism claims' measures
    pilot.py      the learning-rate pilot (lr_pilot): a short sub-study that chooses each arm's rate first (and a
                  ladder's check of it at its middle budget)
    report.py     report.md;  figures.py  its figures
    sweep.py      sweep axes and the sweep report;  compare.py  `report --against`
    ladder.py     budget ladders: each contrast's retention ratio between budgets and its label (also --against's)
    branches.py   a ladder trained as trunks and decay branches (`ladder: branches`; the runs' side: train/branch.py)
    fits.py       L(B) = E + A·B^−α per arm, jackknife over seeds;  limits.py  the limit, the held-out prediction,
                  the claims at the limit (the paper's: paper_limits.py);  limit_figures.py  their figures
    regime.py     pre-registered regime checks (health, distance from the teacher, the mechanism's precondition)
    plan.py       `normgrow plan`: memory per device and device-hours before running

The layer sits above the core: nothing outside normgrow/study/ (but the command line and the package's
`__init__`) imports it; the engine (verdicts.py) imports no claim of the paper's (tests/test_structure.py).
"""

from normgrow.study import (
    paper,  # noqa: F401 - registers the paper's claims on the engine, as a user's are
    paper_limits,  # noqa: F401 - and its claims at the limit of a ladder
    paper_parts,  # noqa: F401 - and its report parts: regime checks, rivals, the causal dose
)
from normgrow.study.compare import compare_studies
from normgrow.study.config import StudyConfig, load_study, register_study_section
from normgrow.study.engine.verdicts import register_claim, register_role, register_setting
from normgrow.study.launch import register_launcher
from normgrow.study.parts import ReportPart, register_report_part
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
