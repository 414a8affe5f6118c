"""The paper's own study-file sections, as data: `rivals:` (its claims read for other arms; rivals.py), `regime:` (the
pre-registered checks; regime.py judges them) and `dose:` (the causal dose's arms; mechanism.py). They register on the
study's schema (sections.register_section) from plugin.py, with their checks here; the core study names none of
them. Read a study's value with `rivals_of`, `regime_of`, `dose_of`: a study made without the section reads empty.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from normgrow.config.schema import need
from normgrow.study.sections import section

# ----------------------------------------------------------------------------- rivals: the claims for other arms


@dataclass
class RivalConfig:
    against: list[str] = field(default_factory=list)
    """[joint arm, grow arm] of the rival (a placement, or post-norm under another growth operator)."""
    reference: list[str] = field(default_factory=list)
    """[joint arm, grow arm] it is read against; empty = the claims' pre_joint and pre_grow."""


RIVALS_DOC = """The paper's joint-gap and grow-gap claims read for other arms than post-norm: per entry, its `against` arms
    [joint, grow] in post-norm's part and its `reference` arms [joint, grow] in pre-norm's; the same claim functions,
    Holm across every entry's claims (rivals.py). A pair already read by the paper's claims is not read again."""


def rivals_of(study: Any) -> dict[str, RivalConfig]:
    return section(study, "rivals")


def validate_rivals(s: Any) -> None:
    for rname, rival in rivals_of(s).items():
        for key, pair in (("against", rival.against), ("reference", rival.reference)):
            need(
                (key == "reference" and not pair) or (len(pair) == 2 and all(a in s.arms for a in pair)),
                f"rivals.{rname}.{key}",
                f"expected two arm names [joint, grow], got {pair}",
            )
        need(
            bool(rival.reference) or all(s.claims.get(r) for r in ("pre_joint", "pre_grow")),
            f"rivals.{rname}.reference",
            "not given, and the study's claims name no pre_joint and pre_grow arms to read it against",
        )


# ----------------------------------------------------------------------------- regime: the pre-registered checks


@dataclass
class RegimeConfig:
    max_collapse: float | None = None
    """Check 1, health: every arm's collapse share (worst block, end of training; diagnostics `collapse_share`) must
    have a mean over seeds at most this (a share in (0, 1]). null: not registered."""
    min_kl: float | None = None
    """Check 2, distance from the teacher: the mean over the arms of their mean final val/kl must be at least this
    (nats/token); a budget ladder judges it at its largest budget. null: not registered."""
    scale_factor: float | None = None
    """Check 3, the mechanism's precondition: at the growth events the stream the appended blocks receive must differ
    in RMS between claims.pre_grow and claims.post_grow by at least this factor (> 1), the 95% interval of the log
    ratio beyond ±log(factor), for all tokens and for the structural tokens; a ladder judges it at every budget.
    Descriptive since session 20: a post-norm stream's RMS is its norm's gains by construction, so this gates
    nothing (check 4 does). null: not registered."""
    drift_excess: float | None = None
    """Check 4, the placement-independent precondition and the gate of the mechanism's tests: over the stage after
    each growth event, claims.pre_grow's boundary RMS drift |log(RMS end / RMS at growth)| minus claims.pre_joint's
    at the same tokens and residual index (mean over events) must exceed this (log units), the 95% interval over
    seeds above it; below it, the mechanism's tests are not informative. null: not registered."""


# number, name, what is measured (the report's table and the start-of-study block)
CHECKS = {
    "max_collapse": (1, "health"),
    "min_kl": (2, "distance from the teacher"),
    "scale_factor": (3, "placements' boundary scales (descriptive)"),
    "drift_excess": (4, "mechanism precondition"),
}
# What a failed check 4 takes away, as registered with it (docs/LOG.md, session 20; check 3 until then, session 9):
# the mechanism's tests read a boundary drift the precondition says is not there, so their verdicts are not evidence
# for or against the mechanism.
MECHANISM_TESTS = ("boundary_update", "boundary_renorm", "the dose–response")


def validate_regime(r: RegimeConfig, claims) -> None:
    """Positive finite thresholds; a collapse share in (0, 1]; a factor above 1, with the two grow arms it compares."""
    for key in CHECKS:
        v = getattr(r, key)
        need(v is None or (math.isfinite(v) and v > 0), f"regime.{key}", f"must be a positive finite number, got {v}")
    need(
        r.max_collapse is None or r.max_collapse <= 1,
        "regime.max_collapse",
        f"a collapse share is at most 1, got {r.max_collapse}",
    )
    need(
        r.scale_factor is None or r.scale_factor > 1,
        "regime.scale_factor",
        f"must be greater than 1 (a factor between the two placements' scales), got {r.scale_factor}",
    )
    need(
        r.drift_excess is None or (claims.get("pre_grow") and claims.get("pre_joint")),
        "regime.drift_excess",
        "compares the claims roles pre_grow and pre_joint: name both arms (claims.pre_grow, claims.pre_joint)",
    )
    need(
        r.scale_factor is None or (claims.get("pre_grow") and claims.get("post_grow")),
        "regime.scale_factor",
        "compares the claims roles pre_grow and post_grow: name both arms (claims.pre_grow, claims.post_grow)",
    )


def registered(r: RegimeConfig) -> list[str]:
    return [key for key in CHECKS if getattr(r, key) is not None]


REGIME_DOC = """Pre-registered regime checks (regime.py): health, distance from the teacher, the mechanism's precondition;
    printed when the study starts and judged in its report above the claims. All null: none registered."""


def regime_of(study: Any) -> RegimeConfig:
    return section(study, "regime")


def regime_at(r: RegimeConfig, study: Any, arms: Collection[str]) -> RegimeConfig:
    """A ladder budget's checks: without checks 3 and 4 where an arm they compare does not run there."""
    c = study.claims
    if not all(a in arms for a in (c.get("pre_grow"), c.get("post_grow"))):
        r = dataclasses.replace(r, scale_factor=None)
    if not all(a in arms for a in (c.get("pre_grow"), c.get("pre_joint"))):
        r = dataclasses.replace(r, drift_excess=None)
    return r


# ----------------------------------------------------------------------------- dose: the causal dose's arms


@dataclass
class DoseConfig:
    pre: list[str] = field(default_factory=list)
    """Pre-norm grow arms that differ only in model.boundary_scale (at least two values): the dose claim's arms."""
    post: list[str] = field(default_factory=list)
    """The same for post-norm (its slope is reported beside, descriptive)."""


DOSE_DOC = """The causal dose (mechanism.dose_claims): arms run at several model.boundary_scale values; the claim is the
    per-seed slope of val/ce on log c. Empty: none."""


def dose_of(study: Any) -> DoseConfig:
    return section(study, "dose")


def validate_dose(s: Any) -> None:
    for key in ("pre", "post"):
        arms = getattr(dose_of(s), key)
        need(all(a in s.arms for a in arms), f"dose.{key}", f"names arms the study does not have: {arms}")
        need(not arms or len(arms) >= 2, f"dose.{key}", "needs at least two arms (two doses) to fit a slope")
