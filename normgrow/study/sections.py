"""Study-file sections beside the core schema (config.py), as data:

- the registry of a paper's own sections (`register_section`): a paper declares its study-file sections (the
  normgrow paper's `rivals:`, `regime:` and `dose:`, in study/paper/sections.py) with their type, default, place in
  study.yaml, checks, and what a pilot or a ladder's budget keeps of them; config.py builds the study's schema from
  them, so the core names no paper field;
- `sweep:` (axes of run-config values; sweep.py expands them into points) and a budget ladder's checks, which the
  schema reads without importing the modules that act on them;
- a study's size limits and number bounds, checked before anything is planned.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from normgrow.config.schema import need

# ----------------------------------------------------------------------------- a study's sizes and numbers


# the study's numbers whose meaningful range ends below schema.FLOAT_LIMIT / INT_LIMIT (check_numbers)
STUDY_UPPER = {
    "budget_scale": 1e4,
    "budgets.*": 1e4,
    "holdout": 1e4,
    "arms.*.budgets.*": 1e4,
    "seeds.*": 2**32 - 1,
    "lr_pilot.seeds.*": 2**32 - 1,
    "lr_pilot.envelope_seeds.*": 2**32 - 1,
    "arms.*.lrs.*": 1e6,
    "lr_pilot.lrs.*": 1e6,
    "launcher.parallel": 4096,
    "launcher.threads": 4096,
    "launcher.torchrun_nproc": 4096,
}


# the longest list a study may give each field, and its most runs: what the paper and its ablations need, and less
LIST_LIMITS = {"arms": 500, "seeds": 1000, "budgets": 64, "lr_pilot.lrs": 64, "lr_pilot.seeds": 100,
               "lr_pilot.envelope_seeds": 100, "evaluate.tasks": 500}  # fmt: skip
MAX_RUNS = 5_000  # arms × seeds × budgets × rates: a study beyond this is refused


def check_sizes(s: Any) -> None:
    """Every list a user types is refused in one line beyond its limit (LIST_LIMITS), and so is a study of more than
    MAX_RUNS runs, before anything is planned: a mistyped range would otherwise stall `plan` or `study` silently."""
    sizes = {"arms": len(s.arms), "seeds": len(s.seeds), "budgets": len(s.budgets), "lr_pilot.lrs": len(s.lr_pilot.lrs),
             "lr_pilot.seeds": len(s.lr_pilot.seeds), "lr_pilot.envelope_seeds": len(s.lr_pilot.envelope_seeds),
             "evaluate.tasks": len(s.evaluate.tasks)}  # fmt: skip
    for key, n in sizes.items():
        need(n <= LIST_LIMITS[key], key, f"{n:,} entries: at most {LIST_LIMITS[key]:,}")
    for name, arm in s.arms.items():
        for key, n in (("lrs", len(arm.lrs)), ("budgets", len(arm.budgets))):
            need(n <= 64, f"arms.{name}.{key}", f"{n:,} entries: at most 64")
    rates = max([len(a.lrs) for a in s.arms.values()] + [len(s.lr_pilot.lrs), 1])
    runs = len(s.arms) * len(s.seeds) * max(1, len(s.budgets)) * rates
    need(runs <= MAX_RUNS, "seeds", f"the study would plan about {runs:,} runs (arms × seeds × budgets × rates): "
         f"at most {MAX_RUNS:,}")  # fmt: skip


# ----------------------------------------------------------------------------- a paper's study-file sections


def _keep(value: Any, study: Any, arms: Collection[str]) -> Any:
    return value


@dataclass(frozen=True)
class StudySection:
    """A study-file section a paper adds to the schema: `name:` holds a `kind` (a config dataclass, or a map of them)
    whose empty value is `default()`. It follows the field `after` in study.yaml and in `normgrow config --study`
    (sections that follow one field keep their registration order). `validate(study)` raises a one-line
    ConfigError; `late` ones run after the ladder's checks (the others before `evaluate:`'s). A learning-rate pilot
    keeps the value when `pilot` is true (else the empty one); a ladder's budget takes `rung(value, study, arms)`
    with the arms that run there. `start_lines(study)` is printed when a study starts, before any run."""

    name: str
    kind: Any
    default: Callable[[], Any]
    after: str
    doc: str
    validate: Callable[[Any], None]
    late: bool = False
    pilot: bool = False
    rung: Callable[[Any, Any, Collection[str]], Any] = _keep
    start_lines: Callable[[Any], list[str]] = lambda study: []


SECTIONS: dict[str, StudySection] = {}


def register_section(sec: StudySection, core: Collection[str]) -> None:
    """Add a section to every study's schema from now on (config.register_study_section passes the core fields)."""
    if sec.name in SECTIONS or sec.name in core:
        raise ValueError(f"study section '{sec.name}' is already a field of the study file")
    if sec.after not in core and sec.after not in SECTIONS:
        raise ValueError(f"study section '{sec.name}': follows '{sec.after}', which is no field of the study file")
    SECTIONS[sec.name] = sec


def section(study: Any, name: str) -> Any:
    """The value of section `name` in `study` (its empty value when the study was made without it)."""
    return getattr(study, name) if hasattr(study, name) else SECTIONS[name].default()


def field_order(core: Sequence[str]) -> list[str]:
    """The study file's top-level keys in order: the core fields, each section after the field it follows."""
    order = list(core)
    for name, sec in SECTIONS.items():
        at = order.index(sec.after) + 1
        while at < len(order) and order[at] in SECTIONS:
            at += 1
        order.insert(at, name)
    return order


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
