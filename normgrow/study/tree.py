"""A study's tree as a value: which sub-studies it has and in which order they run, decided once from the study file.
The runner walks it to train or to rebuild a report (runner.walk), and `plan` walks it to price the runs
(plan.study_plan); neither re-derives the conditions on its own.

    the study
    ├── pilot/                   `pilot`: the learning-rate pilot, first            (lr_pilot.lrs)
    │   ├── extend-<k>/          up to `extend` rounds, each decided by the rounds before it
    │   └── check/               `check`: a ladder's second pilot point ("run"), or why it is not ("skipped: …")
    ├── the leaves               `leaves`: the study's own runs ("plain"), a sweep's points or a ladder's budgets;
    │                            a ladder's `trunks` first when its budgets are decay branches; its `holdout` last
    │                            under `envelope`, every budget chooses its rates by its brackets first
    └── pilot/confirm/           `confirm`: the rates confirmed at the study's (a ladder's largest) budget

Which runs a node holds may depend on what its parents chose (a rate, an extension round); the shape does not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from normgrow.study.config import StudyConfig, envelope_on
from normgrow.study.pilot import check_skipped


@dataclass(frozen=True)
class Shape:
    pilot: bool  # a learning-rate pilot runs first
    extend: int  # at most this many extension rounds of the pilot
    check: Literal["none", "run", "skipped"]  # a ladder's check of the pilot's choice at another budget
    check_note: str | None  # why it is skipped
    envelope: bool  # envelope rates: every budget brackets its arms' rates (anchored at the pilot's, or at train.lr)
    confirm: bool  # the rates confirmed at the study's budget once it has trained
    leaves: Literal["plain", "sweep", "ladder"]
    trunks: bool  # a ladder whose budgets are decay branches of shared trunks
    holdout: float | None  # a ladder's held-out budget, run after the prediction

    @property
    def chooses_rates(self) -> bool:
        """The study's own runs train at chosen rates (a pilot's, or an envelope's without a pilot)."""
        return self.pilot or self.envelope


def shape(study: StudyConfig) -> Shape:
    """The tree of `study` (see the module's docstring)."""
    ladder = bool(study.budgets)
    checked = ladder and bool(study.lr_pilot.lrs) and study.lr_pilot.check and not envelope_on(study)
    note = check_skipped(study) if checked else None
    return Shape(
        pilot=bool(study.lr_pilot.lrs),
        extend=study.lr_pilot.extend if study.lr_pilot.lrs else 0,
        check="none" if not checked else "skipped" if note else "run",
        check_note=note,
        envelope=envelope_on(study),
        confirm=bool(study.lr_pilot.lrs) and bool(study.lr_pilot.confirm_seeds),
        leaves="ladder" if ladder else "sweep" if study.sweep.axes else "plain",
        trunks=ladder and study.ladder == "branches",
        holdout=study.holdout if ladder else None,
    )
