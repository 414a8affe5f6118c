"""Report parts: what a paper adds to a study's report through a registry, so that the report imports no paper.

A part is registered once (`register_report_part`) and called at every summary with a view of the study's numbers;
it returns its report sections by slot, its terminal headline lines and its opening cautions. The report places
each slot's lines where the slot says, in the parts' registration order:

    a study's report   above_claims (above the claims table), after_claims (after it), and the part's headline
                       lines after the report's own; its cautions after the report's own in the opening
    a ladder's report  above_headline (above the headline), after_limits (after the fitted curves), the same for
                       headline lines and cautions

The paper's parts (its regime checks, the rivals' claims, the causal dose) register in normgrow/study/paper/plugin.py;
a second paper's from its own module (tests/study/paper/test_second_paper.py). A part may also write files beside the
report (regime.json): it is called once per summary.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from normgrow.config import RunConfig
from normgrow.registry import Registry
from normgrow.study.config import StudyConfig
from normgrow.study.engine.measures import Measures
from normgrow.study.engine.verdicts import Claim
from normgrow.study.record import RunRecord

STUDY_SLOTS = ("above_claims", "after_claims")
LADDER_SLOTS = ("above_headline", "after_limits")


@dataclass(frozen=True)
class StudyView:
    """One study's numbers, as a part reads them: its runs at their chosen rates (`kept`), their measures, the
    engine's claims (after the rate and shape gates), and each arm's resolved config."""

    study: StudyConfig
    out: Path
    cfgs: Mapping[str, RunConfig]
    kept: Sequence[RunRecord]
    measures: Measures
    claims: Sequence[Claim]


@dataclass(frozen=True)
class Rung:
    """One budget of a ladder: its budget scale, the arms run there, its runs and their measures."""

    budget: float
    arms: Sequence[str]
    kept: Sequence[RunRecord]
    measures: Measures


@dataclass(frozen=True)
class LadderView:
    study: StudyConfig
    out: Path
    rungs: Sequence[Rung]


@dataclass(frozen=True)
class Part:
    """What a part adds: report lines by slot, headline lines, opening cautions."""

    sections: Mapping[str, Sequence[str]] = field(default_factory=dict)
    headline: Sequence[str] = ()
    cautions: Sequence[str] = ()


@dataclass(frozen=True)
class ReportPart:
    """A registered part: what it adds to a study's report and to a ladder's (either may be None)."""

    study: Callable[[StudyView], Part] | None = None
    ladder: Callable[[LadderView], Part] | None = None


REPORT_PARTS: Registry[ReportPart] = Registry("report part", field="study.report_part")


def register_report_part(name: str, part: ReportPart, replace: bool = False) -> ReportPart:
    """Add a part to every study's and ladder's report, after the parts registered before it."""
    return REPORT_PARTS.register(name, part, replace=replace)


def study_parts(view: StudyView) -> list[Part]:
    return [spec.study(view) for name in REPORT_PARTS if (spec := REPORT_PARTS[name]).study is not None]


def ladder_parts(view: LadderView) -> list[Part]:
    return [spec.ladder(view) for name in REPORT_PARTS if (spec := REPORT_PARTS[name]).ladder is not None]


def slot(parts: Sequence[Part], name: str) -> list[str]:
    """Every part's lines for one slot, in registration order."""
    return [line for p in parts for line in p.sections.get(name, ())]


def headlines(parts: Sequence[Part]) -> list[str]:
    return [line for p in parts for line in p.headline]


def cautions(parts: Sequence[Part]) -> list[str]:
    return [line for p in parts for line in p.cautions]
