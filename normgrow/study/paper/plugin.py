"""The paper as a plug-in: its study-file sections (sections.py: `rivals:`, `regime:`, `dose:`, registered on the
study's schema) and its report parts (parts.py), registered in the order their sections and headline lines appear: its regime
checks (regime.py: the section above the claims, regime.json beside the report, a caution when one fails), the
rivals' claims (rivals.py: a section after the claims) and the causal dose (mechanism.py: its claims, gated, after
the rivals). The report reaches none of these modules; the study package's `__init__` imports this one.
"""

from __future__ import annotations

from normgrow.study.config import envelope_on, register_study_section
from normgrow.study.engine.verdicts import Claim
from normgrow.study.envelope import bracketed
from normgrow.study.paper.mechanism import dose_claims, dose_gate
from normgrow.study.paper.regime import (
    headline_line,
    ladder_checks,
    plan_lines,
    regime_section,
    study_checks,
    write_regime,
)
from normgrow.study.paper.rivals import RIVALS_TITLE, rival_claims, rivals_intro
from normgrow.study.paper.sections import (
    DOSE_DOC,
    REGIME_DOC,
    RIVALS_DOC,
    DoseConfig,
    RegimeConfig,
    RivalConfig,
    dose_of,
    regime_at,
    regime_of,
    rivals_of,
    validate_dose,
    validate_regime,
    validate_rivals,
)
from normgrow.study.record import values
from normgrow.study.report.parts import LadderView, Part, ReportPart, StudyView, register_report_part
from normgrow.study.report.study import CAUSAL_DOSE_TITLE, claims_section, verdict_counts
from normgrow.study.sections import StudySection

# the study file's sections, in study.yaml's order: rivals after claims; regime, then dose, after lr_pilot
register_study_section(StudySection("rivals", dict[str, RivalConfig], dict, "claims", RIVALS_DOC, validate_rivals))
register_study_section(
    StudySection(
        "regime",
        RegimeConfig,
        RegimeConfig,
        "lr_pilot",
        REGIME_DOC,
        lambda s: validate_regime(regime_of(s), s.claims),
        late=True,
        rung=regime_at,
        start_lines=plan_lines,
    )
)
register_study_section(StudySection("dose", DoseConfig, DoseConfig, "regime", DOSE_DOC, validate_dose, pilot=True))


def kls(arms, kept) -> dict[str, dict[int, float]]:
    """Each arm's final val/kl by seed (what regime check 2 reads)."""
    return {arm: values(list(kept), arm, "val_kl") for arm in arms}


def regime_study(v: StudyView) -> Part:
    checks = study_checks(v.study, kls(v.study.arms, v.kept), v.measures)
    write_regime(v.study, checks, v.out)
    failed = [f"{c.number}" for c in checks if c.outcome == "fail"]
    return Part(
        {"above_claims": regime_section(v.study, checks)},
        headline_line(checks),
        [f"Caution: regime check(s) {', '.join(failed)} fail (see Regime checks)."] if failed else [],
    )


def regime_ladder(v: LadderView) -> Part:
    checks = ladder_checks(v.study, [(r.budget, list(r.arms), kls(r.arms, r.kept), r.measures) for r in v.rungs])
    write_regime(v.study, checks, v.out)
    failed = sorted({f"{c.number}" for c in checks if c.outcome == "fail"})
    return Part(
        {"above_headline": regime_section(v.study, checks)},
        headline_line(checks),
        [f"Caution: regime check(s) {', '.join(failed)} fail at some budget (see Regime checks)."] if failed else [],
    )


def rivals_study(v: StudyView) -> Part:
    rivals = rival_claims(rivals_of(v.study), v.study.claims, v.measures)
    if not rivals:
        return Part()
    section = claims_section(v.study, list(v.kept), rivals, v.measures, title=RIVALS_TITLE)
    return Part(
        {"after_claims": section[:2] + rivals_intro(rivals_of(v.study), v.study.claims) + section[2:]},
        [verdict_counts("rivals' claims", rivals)],
    )


def dose_claims_of(v: StudyView) -> list[Claim]:
    """The causal dose's claims, gated (mechanism.dose_gate): none when the study names no dose arms."""
    study, d = v.study, dose_of(v.study)
    if not d.pre:
        return []
    doses = {arm: cfg.model.boundary_scale for arm, cfg in v.cfgs.items()}
    pre, post = ({a: doses[a] for a in arms if a in doses} for arms in (d.pre, d.post))
    dose = dose_claims(pre, post, float(study.claims.get("margin", 0.01)), v.measures)
    if not dose:
        return []
    own = envelope_on(study) and all(a in bracketed(study) for a in d.pre)
    return dose_gate(dose, list(v.claims), own)


def dose_study(v: StudyView) -> Part:
    dose = dose_claims_of(v)
    if not dose:
        return Part()
    return Part(
        {"after_claims": claims_section(v.study, list(v.kept), dose, v.measures, title=CAUSAL_DOSE_TITLE)},
        [f"dose ({c.measure}): {c.sentence.split(': ', 1)[-1]}" for c in dose if c.key == "dose" and c.n],
    )


register_report_part("regime", ReportPart(study=regime_study, ladder=regime_ladder))
register_report_part("rivals", ReportPart(study=rivals_study))
register_report_part("dose", ReportPart(study=dose_study))
