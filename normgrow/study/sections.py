"""The two study-file sections their own modules act on, as data: `regime:` (the pre-registered checks; regime.py
judges them) and `sweep:` (axes of run-config values; sweep.py expands them into points). They live here, apart from
the modules that act on them, so that the study's schema (config.py) reads them without importing those modules, and
those modules take the whole StudyConfig without an import running back."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from normgrow.config.schema import need


class _Arm(Protocol):
    """What a ladder's checks read of an arm (study.config.ArmConfig)."""

    @property
    def budgets(self) -> Sequence[float]: ...
    @property
    def match(self) -> str | None: ...


class _Sweep(Protocol):
    @property
    def axes(self) -> Sequence[Any]: ...


class LadderView(Protocol):
    """What a ladder's checks read of a study (study.config.StudyConfig, which imports this module: a protocol, so
    that no import runs back)."""

    @property
    def arms(self) -> Mapping[str, _Arm]: ...
    @property
    def budgets(self) -> Sequence[float]: ...
    @property
    def budget_scale(self) -> float: ...
    @property
    def holdout(self) -> float | None: ...
    @property
    def ladder(self) -> str: ...
    @property
    def ladder_base(self) -> float | None: ...
    @property
    def sweep(self) -> _Sweep: ...
    @property
    def contrasts(self) -> Mapping[str, Sequence[str]]: ...


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


# ----------------------------------------------------------------------------- sweep: axes of run-config values


@dataclass
class SweepAxis:
    key: str = ""
    """A run-config key (model.d_model, curriculum.growth, …) set to each value in turn."""
    values: list[Any] = field(default_factory=list)
    """The axis' values, in the order the report plots them."""
    also: dict[str, list[Any]] = field(default_factory=dict)
    """Keys that move with this axis: one value per entry of `values` (e.g. model.d_ff with model.d_model)."""


@dataclass
class SweepConfig:
    axes: list[SweepAxis] = field(default_factory=list)
    """One or two axes (none: not a sweep). Two make a grid."""
    budget_rule: str | None = None
    """null: every point trains the study's budget; `params`: budgets × (N / N_first point)^budget_exponent, N the
    full-depth student's non-embedding parameters."""
    budget_exponent: float = 1.0
    """Exponent of the budget rule."""


def validate_sweep(s: SweepConfig, run_sections: tuple[str, ...]) -> None:
    need(len(s.axes) <= 2, "sweep.axes", f"one or two axes, got {len(s.axes)}")
    for i, ax in enumerate(s.axes):
        key = f"sweep.axes.{i}"
        need(
            ax.key.startswith(run_sections),
            f"{key}.key",
            f"'{ax.key}' is not a run-config key ({', '.join(k.rstrip('.') for k in run_sections)})",
        )
        need(len(ax.values) > 0, f"{key}.values", "needs at least one value")
        need(
            len({str(v) for v in ax.values}) == len(ax.values), f"{key}.values", f"values must differ, got {ax.values}"
        )
        for other, values in ax.also.items():
            need(other.startswith(run_sections), f"{key}.also.{other}", "is not a run-config key")
            need(
                len(values) == len(ax.values),
                f"{key}.also.{other}",
                f"needs one value per value of {ax.key} ({len(ax.values)}), got {len(values)}",
            )
    need(len({ax.key for ax in s.axes}) == len(s.axes), "sweep.axes", "two axes on the same key")
    need(s.budget_rule in (None, "params"), "sweep.budget_rule", f"null or 'params', got '{s.budget_rule}'")
    need(s.budget_exponent > 0, "sweep.budget_exponent", f"must be positive, got {s.budget_exponent}")


def budget_label(scale: float) -> str:
    """The directory name of a ladder's budget: b0.5, b1, b2 (no "=": the command line reads key=value)."""
    return f"b{scale:g}"


# ----------------------------------------------------------------------------- a budget ladder's checks


def arms_at(study: LadderView, budget: float) -> list[str]:
    """The arms a budget ladder runs at `budget`: those whose `budgets` name it, or are empty (every budget)."""
    return [name for name, a in study.arms.items() if not a.budgets or budget in a.budgets]


def validate_ladder(s: LadderView) -> None:
    """A budget ladder: at least two distinct positive scales, ascending, the study's budget_scale among them, and
    no sweep axes beside it."""
    b = s.budgets
    need(not s.holdout or bool(b), "holdout", "names a held-out budget of a budget ladder: set `budgets` too")
    need(
        s.ladder == "rungs" or bool(b) or s.ladder_base is not None,
        "ladder",
        f"'{s.ladder}' says how a budget ladder trains its budgets: set `budgets` too",
    )
    if not b:
        return
    need(
        not s.sweep.axes,
        "budgets",
        "a study has either a budget ladder or sweep axes, not both (sweep over "
        "budget_scale with a ladder of its own per point is not supported)",
    )
    need(len(b) >= 2, "budgets", f"a ladder needs at least two budget scales, got {b}")
    need(all(x > 0 for x in b), "budgets", f"budget scales must be positive, got {b}")
    need(len({budget_label(x) for x in b}) == len(b), "budgets", f"budget scales must differ, got {b}")
    need(list(b) == sorted(b), "budgets", f"budget scales must be in ascending order, got {b}")
    need(
        s.budget_scale in b,
        "budgets",
        f"must contain the study's budget_scale ({s.budget_scale:g}), the reference "
        f"budget whose report is the study's main one; got {b}",
    )
    need(s.ladder_base is None, "ladder_base", "is written by a ladder into its budgets' studies, not set by hand")
    h = s.holdout
    need(h is None or h == b[-1], "holdout", f"must be the ladder's largest budget ({b[-1]:g}), got {h}")
    need(
        h is None or len(b) >= 5,
        "holdout",
        f"the fits of the other budgets predict it: the curve has three parameters and a fit needs a fourth budget "
        f"to show a miss, so a ladder with a holdout needs at least four other budgets, got {len(b) - 1}",
    )


def validate_arm_budgets(s: LadderView) -> None:
    """An arm's budgets are some of the ladder's (none outside a ladder); every budget runs an arm, and a matched arm
    runs only where the arm it matches does."""
    for name, arm in s.arms.items():
        if not arm.budgets:
            continue
        key = f"arms.{name}.budgets"
        need(
            bool(s.budgets),
            key,
            f"only a budget ladder (budgets: [...]) runs an arm at some budgets, got {arm.budgets}",
        )
        need(
            all(b in s.budgets for b in arm.budgets),
            key,
            f"must be among the study's budgets {[f'{b:g}' for b in s.budgets]}, got {arm.budgets}",
        )
        need(len(set(arm.budgets)) == len(arm.budgets), key, f"budgets must differ, got {arm.budgets}")
    for b in s.budgets:
        need(bool(arms_at(s, b)), "budgets", f"no arm runs at budget {b:g} (every arm's `budgets` leaves it out)")
        for name in arms_at(s, b):
            ref = s.arms[name].match
            need(
                ref is None or ref in arms_at(s, b),
                f"arms.{name}.budgets",
                f"matches {ref}, which does not run at budget {b:g}",
            )
    for cname, pair in s.contrasts.items() if s.budgets else ():
        need(
            any(all(a in arms_at(s, b) for a in pair) for b in s.budgets),
            f"contrasts.{cname}",
            f"its arms {pair[0]} and {pair[1]} never run at the same budget",
        )
