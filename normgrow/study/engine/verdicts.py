"""The verdict engine: claims turned into verdicts from a study's numbers and their uncertainty, for any paper.

A claim names the arms it compares through *roles* (which arm plays which part, set in a study file's `claims:`
section), reads measures per seed (fields of measures.RunMeasures, or diagnostics by name) and turns an interval
over seeds into one of

    supported      the interval lies on the side the paper states
    contradicted   the interval lies on the other side
    undetermined   the interval straddles the boundary, or there are fewer than two seeds
    not tested     the study lacks the arms the claim needs (or the diagnostics records it reads)
    descriptive    a number reported without a verdict (Claim.kind "descriptive"): outside Holm's family and
                   the headline's counts

The sentence a report prints for a claim is generated from the numbers by the claim's own function: nothing is
written by hand, and "undetermined at this number of seeds" is a valid answer.

Three registries, filled by explicit calls — the paper's claims (paper.py, mechanism.py) are registered the same way
a user's are, and this module knows none of them:

    register_role(name, help, parts=())     a role: one arm, or a pair of arms with named parts (["joint", "grow"])
    register_setting(name, default, help)   a number a study may set under `claims:` (a margin, a threshold)
    register_claim(key, paper, evaluate, roles, reads)   evaluate(roles, measures) -> Claim

A study's `claims:` section holds roles and settings side by side (`normalize_claims` checks it when the study
loads); a claim whose roles the study leaves unset is *not tested* without being called. Rules of the verdicts:

- sign (`sign_claim`): the paper says a difference has a sign. With a practical margin δ > 0 supported only when the
  whole interval lies beyond −δ (+δ), contradicted when it lies entirely on the near side.
- equivalence (`equivalence_claim`): the paper says a difference is about zero: supported inside ±δ, contradicted
  entirely outside it.
- multiplicity: each decided verdict's p-value is the smallest two-sided α at which it still holds (the claim
  re-evaluated at other interval levels, by bisection: its intervals come from `interval`, which follows the level);
  Holm's step-down adjustment across the claims tested with two or more seeds gives the adjusted verdicts.
"""

from __future__ import annotations

import contextvars
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any

from normgrow.config.schema import need
from normgrow.errors import ConfigError
from normgrow.registry import Registry
from normgrow.study.engine.measures import Measures
from normgrow.study.engine.stats import Estimate, estimate, holm

SUPPORTED, CONTRADICTED, UNDETERMINED, NOT_TESTED = "supported", "contradicted", "undetermined", "not tested"
DESCRIPTIVE = "descriptive"  # the verdict of a claim of kind "descriptive": a number reported, nothing decided


@dataclass
class Claim:
    measure: str  # what is measured here, and its sign convention
    est: Estimate = field(default_factory=Estimate)  # the measure over seeds (shown: its mean and 95% interval)
    verdict: str = NOT_TESTED
    sentence: str = ""
    key: str = ""  # the registered claim's key and statement are filled in by `evaluate_claims`
    paper: str = ""  # what the paper says
    p: float | None = None  # the smallest two-sided α at which the verdict still holds (1 when undetermined)
    holm: str = NOT_TESTED  # the verdict after Holm's adjustment across the study's tested claims
    kind: str = "verdict"  # "descriptive": a number with no verdict; "gate": a check gating others; both outside
    # Holm's family and the headline's counts

    @property
    def n(self) -> int:
        return self.est.n


# The interval level the claims are computed at: 95% for the verdicts, other levels only while `evaluate_claims`
# finds each verdict's p-value (the smallest α at which it holds) for Holm's adjustment.
LEVEL: contextvars.ContextVar[float] = contextvars.ContextVar("claims_level", default=0.95)


def interval(values: list[float]) -> Estimate:
    """The t-interval of per-seed values at the level in force (95%, or another while p-values are found)."""
    return estimate(values, LEVEL.get())


def sign_verdict(est: Estimate, expected: int, margin: float = 0.0) -> str:
    """expected −1: the paper says the value is negative; +1: positive. With a practical margin δ > 0 the claim is
    *supported* only when the whole interval lies beyond −δ (+δ), and *contradicted* when it lies entirely on the
    near side of −δ (+δ): an effect smaller than δ in the paper's direction, or one the other way, is all it
    allows. With δ = 0 these are the signs of the interval."""
    lo, hi = est.lo, est.hi
    if est.n < 2 or lo is None or hi is None:
        return UNDETERMINED
    if expected < 0:
        return SUPPORTED if hi < -margin else CONTRADICTED if lo > -margin else UNDETERMINED
    return SUPPORTED if lo > margin else CONTRADICTED if hi < margin else UNDETERMINED


def equivalence_verdict(est: Estimate, margin: float) -> str:
    lo, hi = est.lo, est.hi
    if est.n < 2 or lo is None or hi is None:
        return UNDETERMINED
    if -margin < lo and hi < margin:
        return SUPPORTED
    if lo > margin or hi < -margin:
        return CONTRADICTED
    return UNDETERMINED


def describe(est: Estimate, nd: int = 4) -> str:
    """'−0.0123 [−0.0200, −0.0046] over 3 seeds', or the single value with 'one seed: no interval'."""
    if est.mean is None:
        return "no finished runs"
    if est.lo is None:
        return f"{est.mean:+.{nd}f} (one seed: no interval)"
    return f"{est.mean:+.{nd}f} [{est.lo:+.{nd}f}, {est.hi:+.{nd}f}] over {est.n} seeds"


def because(verdict: str, n: int, rule: str) -> str:
    """The reason a sentence gives for its verdict ('undetermined at 3 seeds: the 95% interval <rule>')."""
    if verdict == UNDETERMINED and n < 2:
        return "undetermined at one seed"
    if verdict == UNDETERMINED:
        return f"undetermined at {n} seeds: the 95% interval {rule}"
    return verdict


def sign_claim(measure: str, diffs: list[float], expected: int, margin: float = 0.0) -> Claim:
    """A claim that the paired differences `diffs` have the sign `expected` (−1 or +1), by more than `margin`."""
    est = interval(diffs)
    verdict = sign_verdict(est, expected, margin)
    side = "below" if expected < 0 else "above"
    edge = f"{expected * margin:+g}" if margin else "0"  # the boundary the interval must clear: −δ or +δ
    if verdict == CONTRADICTED and margin:
        lo, hi = est.lo, est.hi
        reversed_ = (lo is not None and lo > margin) if expected < 0 else (hi is not None and hi < -margin)
        why = f"contradicted: the whole interval lies {'above' if expected < 0 else 'below'} {edge}: " + (
            "the effect is reversed beyond the margin"
            if reversed_
            else f"any effect in the paper's direction is smaller than the margin of {margin:g} (practically none)"
        )
    elif verdict == SUPPORTED and margin:
        why = f"supported: the whole interval lies {side} {edge} (the margin of {margin:g})"
    else:
        why = because(verdict, est.n, f"includes {edge} (the paper puts it {side} {edge})")
    return Claim(measure, est, verdict, f"{measure}: {describe(est)} — {why}.")


def equivalence_claim(measure: str, diffs: list[float], margin: float) -> Claim:
    """A claim that the paired differences `diffs` are about zero (within ±margin)."""
    est = interval(diffs)
    verdict = equivalence_verdict(est, margin)
    why = because(verdict, est.n, f"crosses ±{margin:g}, the margin for about zero")
    return Claim(measure, est, verdict, f"{measure}: {describe(est)} — {why}.")


def not_tested(why: str) -> Claim:
    return Claim("—", verdict=NOT_TESTED, sentence=f"not tested: {why}.")


# ----------------------------------------------------------------------------- the registries


Roles = SimpleNamespace  # role → arm (None where the study names none; a pair role a list), and the settings
Evaluate = Callable[[Roles, Measures], Claim]


@dataclass(frozen=True)
class RoleSpec:
    name: str
    help: str
    parts: tuple[str, ...] = ()  # a pair role's parts (e.g. ("joint", "grow")): it names two arms; () = one arm


@dataclass(frozen=True)
class SettingSpec:
    name: str
    default: float
    help: str
    check: Callable[[float], str | None] = lambda v: None  # a complaint about a value, or None


@dataclass(frozen=True)
class ClaimSpec:
    key: str
    paper: str  # what the paper says
    evaluate: Evaluate
    roles: tuple[str, ...]  # the roles it needs; not tested (and not called) unless the study sets them all
    reads: tuple[str, ...]  # the measures it reads: RunMeasures fields or diagnostics' names


ROLES: Registry[RoleSpec] = Registry("claims role", field="claims.role")
SETTINGS: Registry[SettingSpec] = Registry("claims setting", field="claims.setting")
CLAIMS: Registry[ClaimSpec] = Registry("claim", field="claims")


def register_role(name: str, help: str, parts: tuple[str, ...] = (), replace: bool = False) -> RoleSpec:
    """A role a study's `claims:` section can set: one arm, or with `parts` a pair of arms ([joint, grow])."""
    return ROLES.register(name, RoleSpec(name, help, tuple(parts)), replace=replace)


def register_setting(
    name: str, default: float, help: str, check: Callable[[float], str | None] | None = None, replace: bool = False
) -> SettingSpec:
    """A number a study's `claims:` section can set (a margin, a threshold), with its default and its check."""
    return SETTINGS.register(name, SettingSpec(name, default, help, check or (lambda v: None)), replace=replace)


def register_claim(
    key: str,
    paper: str,
    evaluate: Evaluate,
    roles: tuple[str, ...],
    reads: tuple[str, ...] = ("val_ce",),
    replace: bool = False,
) -> ClaimSpec:
    """Make every study report the claim `key`: `evaluate(roles, measures)` returns its number, interval and
    verdict (build it with `sign_claim` / `equivalence_claim`, or by hand); `roles` are the parts it needs a study
    to name: registered roles, or new names, which become one-arm roles of their own."""
    if not callable(evaluate):
        raise TypeError(f"claim '{key}': expected a function (roles, measures) -> Claim")
    if not roles:
        raise ValueError(f"claim '{key}': name the roles (arms) it compares")
    for role in roles:
        if role not in ROLES:
            register_role(role, f"Arm read by the claim `{key}`.")
    return CLAIMS.register(key, ClaimSpec(key, paper, evaluate, tuple(roles), tuple(reads)), replace=replace)


MARGIN = register_setting(
    "margin",
    0.01,
    "Practical margin δ (nats/token of val/ce): differences inside ±δ count as 'about zero', and a claim that one arm "
    "beats another is supported only when the whole interval lies beyond δ.",
    lambda v: None if v > 0 else f"must be positive, got {v}",
)


# ----------------------------------------------------------------------------- a study's `claims:` section


def _empty(spec: RoleSpec) -> Any:
    return [] if spec.parts else None


def normalize_claims(raw: dict[str, Any], arms) -> dict[str, Any]:
    """A study's `claims:` section checked and completed: every registered role (unset: null, or [] for a pair) and
    setting (its default), in registration order. A `roles:` sub-section (the form of study files before roles were
    registered by their claims) is read as roles beside the others. An unknown key that sets nothing is dropped (a
    role of an extension not loaded now); one that sets something is a one-line ConfigError naming it."""
    flat: dict[str, tuple[str, Any]] = {}  # key → (the key as the study spelled it, value)
    for key, value in (raw or {}).items():
        if key == "roles" and isinstance(value, dict):
            flat.update({k: (f"claims.roles.{k}", v) for k, v in value.items()})
        else:
            flat[key] = (f"claims.{key}", value)
    out: dict[str, Any] = {name: _empty(ROLES[name]) for name in ROLES}
    out.update({name: SETTINGS[name].default for name in SETTINGS})
    for key, (where, value) in flat.items():
        if key in SETTINGS:
            out[key] = _setting(SETTINGS[key], where, value)
        elif key in ROLES:
            out[key] = _role(ROLES[key], where, value, arms)
        elif value not in (None, [], ""):
            raise ConfigError(
                f"{where}: no registered claim needs this role or setting (roles: {', '.join(ROLES.names())}; "
                f"settings: {', '.join(SETTINGS.names())})"
            )
    return out


def _setting(spec: SettingSpec, where: str, value: Any) -> float:
    number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    need(number, where, f"must be a finite number, got {value!r}")
    complaint = spec.check(value)
    need(complaint is None, where, complaint or "")
    return value


def _role(spec: RoleSpec, where: str, value: Any, arms) -> Any:
    if spec.parts:
        value = list(value or [])
        need(
            not value or (len(value) == 2 and all(a in arms for a in value)),
            where,
            f"expected two arm names [{', '.join(spec.parts)}], got {value}",
        )
        return value
    need(value is None or value in arms, where, f"no arm named '{value}'")
    return value


def section_fields() -> list[tuple[str, str, str]]:
    """(claims.<name>, default, help) of every registered role and setting (`normgrow config --study`)."""
    rows = [(f"claims.{n}", repr(_empty(ROLES[n])), ROLES[n].help) for n in ROLES]
    return rows + [(f"claims.{n}", repr(SETTINGS[n].default), SETTINGS[n].help) for n in SETTINGS]


def study_roles(section: dict[str, Any]) -> Roles:
    """A study's roles and settings as attributes: r.pre_grow is an arm name or None, r.matched a [joint, grow] list,
    r.margin a number; a role or setting the study's section lacks (registered since) takes its empty value or
    default."""
    values = {name: _empty(ROLES[name]) for name in ROLES} | {name: SETTINGS[name].default for name in SETTINGS}
    values.update({k: v for k, v in section.items() if k in values})
    return Roles(**values)


def roles_within(section: dict[str, Any], arms) -> dict[str, Any]:
    """`section` with every role that names an arm outside `arms` unset (a pair role when either of its arms is): the
    roles of a ladder's budget where some arms are not run."""
    out = dict(section)
    for name, value in section.items():
        if name not in ROLES or not value:
            continue
        named = value if ROLES[name].parts else [value]
        if not all(a in arms for a in named):
            out[name] = _empty(ROLES[name])
    return out


def _arms_of(r: Roles, role: str) -> set[str]:
    value = getattr(r, role)
    return set(value or []) if ROLES[role].parts else {value} - {None}


def claim_arms(section: dict[str, Any], key: str) -> set[str]:
    """The arms the study's roles give the registered claim `key` (those it names; unset roles add none)."""
    r = study_roles(section)
    return set().union(*(_arms_of(r, role) for role in CLAIMS[key].roles))


def _missing(r: Roles, spec: ClaimSpec) -> str | None:
    pairs = [n for n in spec.roles if ROLES[n].parts and len(getattr(r, n) or []) != 2]
    if pairs:
        return f"the study names no {pairs[0]} [{', '.join(ROLES[pairs[0]].parts)}] pair"
    missing = [n for n in spec.roles if not ROLES[n].parts and not getattr(r, n)]
    return f"the study names no {', '.join(missing)} arm" if missing else None


# ----------------------------------------------------------------------------- evaluating a study's claims

FAMILY_ALPHA = 0.05  # a verdict stands at 95%: two-sided α 0.05 for the raw verdicts and, across claims, for Holm's


def verdict_at(spec: ClaimSpec, r: Roles, measures: Measures, alpha: float) -> str:
    """The claim's verdict with every interval at level 1 − alpha."""
    token = LEVEL.set(1 - alpha)
    try:
        return spec.evaluate(r, measures).verdict
    finally:
        LEVEL.reset(token)


def decision_p(spec: ClaimSpec, r: Roles, measures: Measures, verdict: str) -> float:
    """The smallest two-sided α at which `verdict` (decided at α = 0.05) still holds, by bisection on log α: the
    claim's p-value for that decision. Wider intervals only ever turn a decision into *undetermined*, so the set of
    α where it holds is an interval [p, 0.05]."""
    if verdict not in (SUPPORTED, CONTRADICTED):
        return 1.0
    lo, hi = 1e-12, FAMILY_ALPHA
    if verdict_at(spec, r, measures, lo) == verdict:
        return lo
    for _ in range(48):
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if verdict_at(spec, r, measures, mid) == verdict else (mid, hi)
    return hi


def evaluate_claims(section: dict[str, Any], measures: Measures, registry: Registry[ClaimSpec] = CLAIMS) -> list[Claim]:
    """Every claim of `registry` (the study's claims, or a ladder's limit claims) with its verdict for this study, in
    registration order, each with its p-value and its verdict after Holm's adjustment across the claims tested with
    at least two seeds (the multiplicity of asking a dozen questions of one study: a verdict survives only if it holds
    at α = 0.05 / (claims left)). A claim of kind "descriptive" (a number) or "gate" (a check that gates others, whose
    supported verdict is the absence of a miss, not a rejection) is kept out of Holm's family."""
    r = study_roles(section)
    return evaluate_specs([(registry[name], r) for name in registry], measures)


def evaluate_specs(specs: list[tuple[ClaimSpec, Roles]], measures: Measures) -> list[Claim]:
    """Claims given as (spec, the roles it reads) — registered ones with the study's roles, or claims built for a
    study (rivals.py: the paper's claims with other arms in its roles) — evaluated as `evaluate_claims` does, Holm's
    adjustment across them."""
    out: list[Claim] = []
    tested: list[Claim] = []
    for spec, r in specs:
        why = _missing(r, spec)
        claim = not_tested(why) if why else spec.evaluate(r, measures)
        claim = replace(claim, key=spec.key, paper=spec.paper)
        if claim.verdict == DESCRIPTIVE or claim.kind == "gate":  # not a decision of Holm's family
            out.append(replace(claim, holm=claim.verdict))
            continue
        if claim.verdict != NOT_TESTED and claim.n >= 2:
            claim.p = decision_p(spec, r, measures, claim.verdict)
            tested.append(claim)
        claim.holm = claim.verdict if claim.verdict == NOT_TESTED or claim.n >= 2 else UNDETERMINED
        out.append(claim)
    for claim, adjusted in zip(tested, holm([c.p for c in tested if c.p is not None]), strict=True):
        claim.holm = claim.verdict if adjusted <= FAMILY_ALPHA else UNDETERMINED
    return out


def claims_reading(section: dict[str, Any], a: str, b: str) -> list[str]:
    """The registered claims that read the contrast (a, b): those whose number is a final val/ce difference
    (`val_ce` among what they read) between exactly these two arms, by the study's roles (a budget ladder prints
    their verdicts beside the contrast). A claim on the stage ends or on diagnostics of the same arms does not."""
    r = study_roles(section)
    out = []
    for name in CLAIMS:
        spec = CLAIMS[name]
        if _missing(r, spec) or "val_ce" not in spec.reads:
            continue
        if set().union(*(_arms_of(r, role) for role in spec.roles)) == {a, b}:
            out.append(spec.key)
    return out


# ----------------------------------------------------------------------------- reading the measures

Values = dict[int, Any]  # per-seed values of one measure for one arm: {seed: value} (a number, a list, a name)


def values(measures: Measures, arm: str | None, key: str) -> Values:
    """{seed: measure} of an arm's finished runs that have this measure (a RunMeasures field or a diagnostic)."""
    if arm is None:
        return {}
    return {s: v for s, m in measures.get(arm, {}).items() if (v := m.value(key)) is not None}


def gap_by_seed(measures: Measures, a: str | None, b: str | None, key: str = "val_ce") -> dict[int, float]:
    """{seed: b − a} of a measure over the seeds both arms have."""
    va, vb = values(measures, a, key), values(measures, b, key)
    return {s: vb[s] - va[s] for s in sorted(set(va) & set(vb))}


def gap(measures: Measures, a: str | None, b: str | None, key: str = "val_ce") -> list[float]:
    """b − a of a measure, one value per seed both arms have."""
    return list(gap_by_seed(measures, a, b, key).values())
