"""The paper's claims, each turned into a verdict from this study's numbers and their uncertainty.

Every claim names the arms it compares (`ClaimsConfig`, part of a study file), a measure taken per
seed, and a rule that turns the measure's 95% interval over seeds into one of

    supported      the interval lies on the side the paper states
    contradicted   the interval lies on the other side
    undetermined   the interval straddles the boundary, or there are fewer than two seeds
    not tested     the study lacks the arms the claim needs (or the diagnostics records it reads)
    descriptive    a number reported without a verdict (Claim.kind "descriptive"): outside Holm's family and
                   the headline's counts

The sentence a report prints for a claim is generated here from the numbers: nothing is written
by hand, and "undetermined at this number of seeds" is a valid answer.

Claims are a registry (`register_claim`): a claim declares the roles it needs (which arm plays which
part: `pre_grow`, `post_grow`, …, set in a study's `claims:` section), the measures it reads (fields
of `measures.RunMeasures`, or diagnostics by name) and a function `(roles, measures) -> Claim` that
computes its number, interval and verdict. A claim whose roles the study leaves unset is *not tested*
without being called. The paper's claims below are registered the same way user code registers one:

    from normgrow.study.claims import register_claim, sign_claim, gap

    def my_gap(r, m):
        return sign_claim(f"val/ce {r.post_sandwich} − {r.post_grow}", gap(m, r.post_grow, r.post_sandwich), -1)

    register_claim("sandwich", "Sandwich beats post-norm under growth.", my_gap, roles=("post_grow", "post_sandwich"))

and a study names the new role under `claims.roles: {post_sandwich: <arm>}`. Two kinds of rule:

- sign: the paper says a difference has a sign (post − pre < 0 under growth). Supported when
  the whole interval has that sign, contradicted when it has the other.
- equivalence: the paper says a difference is about zero (the joint gap, 0.0004). Supported
  when the whole interval lies within ±margin (`ClaimsConfig.margin`, default 0.01 nats/token —
  a third of the paper's grow gap, so "about zero" means small next to the effect under study),
  contradicted when it lies entirely outside.
"""

from __future__ import annotations

import contextvars
import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from types import SimpleNamespace
from typing import Any

from normgrow.config import need
from normgrow.registry import Registry
from normgrow.study.measures import BoundaryEvent, Measures
from normgrow.study.stats import fieller_ratio, holm, interval_sign, mean_ci

SUPPORTED, CONTRADICTED, UNDETERMINED, NOT_TESTED = "supported", "contradicted", "undetermined", "not tested"
DESCRIPTIVE = "descriptive"  # the verdict of a claim of kind "descriptive": a number reported, nothing decided


@dataclass
class ClaimsConfig:
    pre_joint: str | None = None
    """Arm: pre-norm, joint training."""
    post_joint: str | None = None
    """Arm: post-norm, joint training."""
    pre_grow: str | None = None
    """Arm: pre-norm, curriculum growth."""
    post_grow: str | None = None
    """Arm: post-norm, curriculum growth."""
    matched: list[str] = field(default_factory=list)
    """Two arms [joint, grow] compared at equal compute: one of them is budget-matched to the other (in the shipped
    studies the grow arm, given the joint arm's compute: the upward control)."""
    joint_matched: list[str] = field(default_factory=list)
    """Two arms [joint, grow], the joint arm budget-matched to the grow arm: the paper's direction (a joint control
    given the grow arm's compute). Read by the claims `matched_paper` and `matched_paper_flops`."""
    pre_single: str | None = None
    """Arm: pre-norm, the single-block control (one block appended per stage)."""
    post_single: str | None = None
    """Arm: post-norm, the single-block control."""
    pre_freeze: str | None = None
    """Arm: pre-norm, the freeze control (only appended blocks train after each growth)."""
    post_freeze: str | None = None
    """Arm: post-norm, the freeze control."""
    pre_shallow: str | None = None
    """Arm: pre-norm, the shallow control (the first-stage prefix for the whole budget)."""
    post_shallow: str | None = None
    """Arm: post-norm, the shallow control."""
    pre_grow_renorm: str | None = None
    """Arm: pre-norm under growth with the boundary renormalized: model.block_norms post at the first block above each
    growth boundary, pre elsewhere (3 → 6 → 9: [pre, pre, pre, post, pre, pre, post, pre, pre]). Read by the claim
    `boundary_renorm`, the causal test of the mechanism."""
    pre_joint_renorm: str | None = None
    """Arm: the same block list as pre_grow_renorm under joint training: what the list does without growth (the
    baseline `boundary_renorm` subtracts)."""
    roles: dict[str, str] = field(default_factory=dict)
    """Further roles → arms, for claims registered by user code (`register_claim(..., roles=...)`)."""
    margin: float = 0.01
    """Practical margin δ (nats/token of val/ce): differences inside ±δ count as 'about zero', and a claim that one
    arm beats another is supported only when the whole interval lies beyond δ."""
    magnitude: float = 10.0
    """'An order of magnitude larger': the grow gap's |lower bound| must reach this many times the joint gap's
    |upper bound|."""
    scale_margin: float = 0.1
    """Practical margin of the mechanism claims' log-scale differences (natural-log units: 0.1 is a factor e^0.1 ≈
    1.105): a difference in differences of log update ratios or |log| drifts is supported only beyond it (0 = no
    margin: any difference its interval excludes from 0)."""
    identity_update: float = 0.1
    """'Nearly an identity map': a block's relative update ‖B(h) − h‖/‖h‖ must lie below this (and its skip-ΔCE
    below `margin` nats)."""


@dataclass
class Claim:
    key: str  # the registered claim's key and statement are filled in by `evaluate_claims`
    paper: str  # what the paper says
    measure: str  # what is measured here, and its sign convention
    n: int = 0  # seeds
    mean: float | None = None
    lo: float | None = None  # 95% interval
    hi: float | None = None
    verdict: str = NOT_TESTED
    sentence: str = ""
    p: float | None = None  # the smallest two-sided α at which the verdict still holds (1 when undetermined)
    holm: str = NOT_TESTED  # the verdict after Holm's adjustment across the study's tested claims
    kind: str = "verdict"  # "descriptive": a number with no verdict, outside Holm's family and the headline


# per-seed values of one measure for one arm: {seed: value}
Values = dict[int, float]


def paired(a: Values, b: Values) -> list[float]:
    """b − a over the seeds both have."""
    return [b[s] - a[s] for s in sorted(set(a) & set(b))]


# The interval level the claims are computed at: 95% for the verdicts, other levels only while `evaluate_claims`
# finds each verdict's p-value (the smallest α at which it holds) for Holm's adjustment.
LEVEL: contextvars.ContextVar[float] = contextvars.ContextVar("claims_level", default=0.95)


def _interval(diffs: list[float]) -> tuple[int, float | None, float | None, float | None]:
    s = mean_ci(diffs, LEVEL.get())
    if s["mean"] is None:
        return 0, None, None, None
    if s["ci95"] is None:
        return s["n"], s["mean"], None, None
    return s["n"], s["mean"], s["mean"] - s["ci95"], s["mean"] + s["ci95"]


def sign_verdict(n: int, lo: float | None, hi: float | None, expected: int, margin: float = 0.0) -> str:
    """expected −1: the paper says the value is negative; +1: positive. With a practical margin δ > 0 the claim is
    *supported* only when the whole interval lies beyond −δ (+δ), and *contradicted* when it lies entirely on the
    near side of −δ (+δ): an effect smaller than δ in the paper's direction, or one the other way, is all it
    allows. With δ = 0 these are the signs of the interval."""
    if n < 2 or lo is None:
        return UNDETERMINED
    if expected < 0:
        return SUPPORTED if hi < -margin else CONTRADICTED if lo > -margin else UNDETERMINED
    return SUPPORTED if lo > margin else CONTRADICTED if hi < margin else UNDETERMINED


def equivalence_verdict(n: int, lo: float | None, hi: float | None, margin: float) -> str:
    if n < 2 or lo is None:
        return UNDETERMINED
    if -margin < lo and hi < margin:
        return SUPPORTED
    if lo > margin or hi < -margin:
        return CONTRADICTED
    return UNDETERMINED


def describe(n: int, mean: float | None, lo: float | None, hi: float | None, nd: int = 4) -> str:
    """'−0.0123 [−0.0200, −0.0046] over 3 seeds', or the single value with 'one seed: no interval'."""
    if mean is None:
        return "no finished runs"
    if lo is None:
        return f"{mean:+.{nd}f} (one seed: no interval)"
    return f"{mean:+.{nd}f} [{lo:+.{nd}f}, {hi:+.{nd}f}] over {n} seeds"


def _because(verdict: str, n: int, rule: str) -> str:
    if verdict == UNDETERMINED and n < 2:
        return "undetermined at one seed"
    if verdict == UNDETERMINED:
        return f"undetermined at {n} seeds: the 95% interval {rule}"
    return verdict


def sign_claim(measure: str, diffs: list[float], expected: int, margin: float = 0.0) -> Claim:
    """A claim that the paired differences `diffs` have the sign `expected` (−1 or +1), by more than `margin`."""
    n, mean, lo, hi = _interval(diffs)
    verdict = sign_verdict(n, lo, hi, expected, margin)
    side = "below" if expected < 0 else "above"
    edge = f"{expected * margin:+g}" if margin else "0"  # the boundary the interval must clear: −δ or +δ
    if verdict == CONTRADICTED and margin:
        reversed_ = (lo > margin) if expected < 0 else (hi < -margin)
        why = f"contradicted: the whole interval lies {'above' if expected < 0 else 'below'} {edge}: " + (
            "the effect is reversed beyond the margin"
            if reversed_
            else f"any effect in the paper's direction is smaller than the margin of {margin:g} (practically none)"
        )
    elif verdict == SUPPORTED and margin:
        why = f"supported: the whole interval lies {side} {edge} (the margin of {margin:g})"
    else:
        why = _because(verdict, n, f"includes {edge} (the paper puts it {side} {edge})")
    c = Claim("", "", measure, n, mean, lo, hi, verdict)
    c.sentence = f"{measure}: {describe(n, mean, lo, hi)} — {why}."
    return c


def equivalence_claim(measure: str, diffs: list[float], margin: float) -> Claim:
    """A claim that the paired differences `diffs` are about zero (within ±margin)."""
    n, mean, lo, hi = _interval(diffs)
    verdict = equivalence_verdict(n, lo, hi, margin)
    c = Claim("", "", measure, n, mean, lo, hi, verdict)
    c.sentence = (
        f"{measure}: {describe(n, mean, lo, hi)} — "
        f"{_because(verdict, n, f'crosses ±{margin:g}, the margin for about zero')}."
    )
    return c


def not_tested(why: str) -> Claim:
    return Claim("", "", "—", verdict=NOT_TESTED, sentence=f"not tested: {why}.")


# ----------------------------------------------------------------------------- the registry


Roles = SimpleNamespace  # role → arm (None where the study names none), plus `margin`; e.g. r.pre_grow
Evaluate = Callable[[Roles, Measures], Claim]

SETTINGS = {"roles", "margin", "magnitude", "scale_margin", "identity_update"}  # ClaimsConfig fields that are not roles

# roles that name two arms, with the parts they play (for the "not tested" sentence)
PAIR_ROLES = {"matched": ("joint", "grow"), "joint_matched": ("joint", "grow")}


@dataclass(frozen=True)
class ClaimSpec:
    key: str
    paper: str  # what the paper says
    evaluate: Evaluate
    roles: tuple[str, ...]  # the roles it needs; not tested (and not called) unless the study sets them all
    reads: tuple[str, ...]  # the measures it reads: RunMeasures fields or diagnostics' names


CLAIMS: Registry[ClaimSpec] = Registry("claim", field="claims")


def register_claim(
    key: str,
    paper: str,
    evaluate: Evaluate,
    roles: tuple[str, ...],
    reads: tuple[str, ...] = ("val_ce",),
    replace: bool = False,
) -> ClaimSpec:
    """Make every study report the claim `key`: `evaluate(roles, measures)` returns its number, interval and
    verdict (build it with `sign_claim` / `equivalence_claim`, or by hand); `roles` are the parts it needs a
    study to name (ClaimsConfig fields, or new names a study sets under `claims.roles`)."""
    if not callable(evaluate):
        raise TypeError(f"claim '{key}': expected a function (roles, measures) -> Claim")
    if not roles:
        raise ValueError(f"claim '{key}': name the roles (arms) it compares")
    return CLAIMS.register(key, ClaimSpec(key, paper, evaluate, tuple(roles), tuple(reads)), replace=replace)


def role_names() -> set[str]:
    """Every role some registered claim needs, and every role ClaimsConfig declares."""
    declared = {f.name for f in fields(ClaimsConfig)} - SETTINGS
    return declared | {r for name in CLAIMS for r in CLAIMS[name].roles}


def study_roles(cfg: ClaimsConfig) -> Roles:
    """The study's roles as attributes: r.pre_grow is an arm name or None, r.matched a [joint, grow] list."""
    values = {name: None for name in role_names()}
    values.update({f.name: getattr(cfg, f.name) for f in fields(ClaimsConfig) if f.name not in SETTINGS})
    values.update(cfg.roles)
    return Roles(**values, **{name: getattr(cfg, name) for name in sorted(SETTINGS - {"roles"})})


def validate_roles(cfg: ClaimsConfig, arms) -> None:
    """Every role a study sets names its arms (two for a pair role); extra roles must be some claim's."""
    for f in fields(ClaimsConfig):
        value = getattr(cfg, f.name)
        if f.name in PAIR_ROLES:
            parts = ", ".join(PAIR_ROLES[f.name])
            need(
                not value or (len(value) == 2 and all(a in arms for a in value)),
                f"claims.{f.name}",
                f"expected two arm names [{parts}], got {value}",
            )
        elif f.name not in SETTINGS:
            need(value is None or value in arms, f"claims.{f.name}", f"no arm named '{value}'")
    known = role_names()
    for role, arm in cfg.roles.items():
        need(
            role in known,
            f"claims.roles.{role}",
            f"no registered claim needs this role (roles: {', '.join(sorted(known))})",
        )
        need(arm in arms, f"claims.roles.{role}", f"no arm named '{arm}'")
    need(cfg.margin > 0, "claims.margin", f"must be positive, got {cfg.margin}")
    need(cfg.magnitude >= 1, "claims.magnitude", f"must be at least 1, got {cfg.magnitude}")
    need(cfg.scale_margin >= 0, "claims.scale_margin", f"must be 0 or positive (log units), got {cfg.scale_margin}")
    need(cfg.identity_update > 0, "claims.identity_update", f"must be positive, got {cfg.identity_update}")


def roles_within(cfg: ClaimsConfig, arms) -> ClaimsConfig:
    """`cfg` with every role that names an arm outside `arms` unset (a pair role when either of its arms is): the roles
    of a ladder's budget where some arms are not run."""
    unset = {}
    for f in fields(ClaimsConfig):
        value = getattr(cfg, f.name)
        if f.name in PAIR_ROLES and value and not all(a in arms for a in value):
            unset[f.name] = []
        elif f.name not in SETTINGS and f.name not in PAIR_ROLES and value is not None and value not in arms:
            unset[f.name] = None
    return replace(cfg, **unset, roles={role: arm for role, arm in cfg.roles.items() if arm in arms})


def claim_arms(cfg: ClaimsConfig, key: str) -> set[str]:
    """The arms the study's roles give the registered claim `key` (those it names; unset roles add none)."""
    r = study_roles(cfg)
    out = set()
    for role in CLAIMS[key].roles:
        value = getattr(r, role)
        out |= set(value or []) if role in PAIR_ROLES else {value} - {None}
    return out


def _missing(r: Roles, spec: ClaimSpec) -> str | None:
    pairs = [n for n in spec.roles if n in PAIR_ROLES and len(getattr(r, n) or []) != 2]
    if pairs:
        return f"the study names no {pairs[0]} [{', '.join(PAIR_ROLES[pairs[0]])}] pair"
    missing = [n for n in spec.roles if n not in PAIR_ROLES and not getattr(r, n)]
    return f"the study names no {', '.join(missing)} arm" if missing else None


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


def evaluate_claims(cfg: ClaimsConfig, measures: Measures) -> list[Claim]:
    """Every registered claim's verdict for this study, in registration order, each with its p-value and its
    verdict after Holm's adjustment across the claims tested with at least two seeds (the multiplicity of asking
    twelve questions of one study: a verdict survives only if it holds at α = 0.05 / (claims left))."""
    r, out, tested = study_roles(cfg), [], []
    for name in CLAIMS:
        spec = CLAIMS[name]
        why = _missing(r, spec)
        claim = not_tested(why) if why else spec.evaluate(r, measures)
        claim.key, claim.paper = spec.key, spec.paper
        if claim.verdict == DESCRIPTIVE:  # a number, not a decision: outside Holm's family
            claim.holm = DESCRIPTIVE
            out.append(claim)
            continue
        if claim.verdict != NOT_TESTED and claim.n >= 2:
            claim.p = decision_p(spec, r, measures, claim.verdict)
            tested.append(claim)
        claim.holm = claim.verdict if claim.verdict == NOT_TESTED or claim.n >= 2 else UNDETERMINED
        out.append(claim)
    for claim, adjusted in zip(tested, holm([c.p for c in tested]), strict=True):
        claim.holm = claim.verdict if adjusted <= FAMILY_ALPHA else UNDETERMINED
    return out


def claims_reading(cfg: ClaimsConfig, a: str, b: str) -> list[str]:
    """The registered claims that read the contrast (a, b): those whose number is a final val/ce difference
    (`val_ce` among what they read) between exactly these two arms, by the study's roles (a budget ladder prints
    their verdicts beside the contrast). A claim on the stage ends or on diagnostics of the same arms does not."""
    r = study_roles(cfg)
    out = []
    for name in CLAIMS:
        spec = CLAIMS[name]
        if _missing(r, spec) or "val_ce" not in spec.reads:
            continue
        arms = {arm for role in spec.roles for arm in (getattr(r, role) if role in PAIR_ROLES else [getattr(r, role)])}
        if arms == {a, b}:
            out.append(spec.key)
    return out


# ----------------------------------------------------------------------------- reading the measures


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


# ----------------------------------------------------------------------------- the paper's claims


def joint_gap(r: Roles, m: Measures) -> Claim:
    return equivalence_claim(
        f"joint gap, val/ce {r.post_joint} − {r.pre_joint}", gap(m, r.pre_joint, r.post_joint), r.margin
    )


def grow_gap(r: Roles, m: Measures) -> Claim:
    return sign_claim(f"grow gap, val/ce {r.post_grow} − {r.pre_grow}", gap(m, r.pre_grow, r.post_grow), -1, r.margin)


def magnitude_verdict(n: int, grow: tuple, joint: tuple, k: float, margin: float) -> str:
    """ "The grow gap is an order of magnitude larger than the joint gap", from the two 95% intervals (lo, hi):
    supported when the grow gap favours post beyond the margin and its smallest plausible size, |hi|, is at least
    k times the joint gap's largest plausible size, max(|lo|, |hi|); contradicted when the grow gap does not favour
    post beyond the margin (its sign claim is contradicted), or when its largest plausible size is below k times the
    joint gap's smallest (0 if the joint interval contains 0); undetermined otherwise or with one seed."""
    (glo, ghi), (jlo, jhi) = grow, joint
    if n < 2 or glo is None or jlo is None:
        return UNDETERMINED
    if sign_verdict(n, glo, ghi, -1, margin) == CONTRADICTED:
        return CONTRADICTED
    joint_most, joint_least = max(abs(jlo), abs(jhi)), (0.0 if jlo <= 0 <= jhi else min(abs(jlo), abs(jhi)))
    if ghi < -margin and -ghi >= k * joint_most:
        return SUPPORTED
    if max(abs(glo), abs(ghi)) < k * joint_least:
        return CONTRADICTED
    return UNDETERMINED


def interaction(r: Roles, m: Measures) -> Claim:
    js, gs = gap_by_seed(m, r.pre_joint, r.post_joint), gap_by_seed(m, r.pre_grow, r.post_grow)
    seeds = sorted(set(js) & set(gs))
    n, mean, glo, ghi = _interval([gs[s] for s in seeds])
    _, jmean, jlo, jhi = _interval([js[s] for s in seeds])
    c = Claim("", "", f"|grow gap| against {r.magnitude:g} × |joint gap| (val/ce, post − pre)", n, mean, glo, ghi)
    c.verdict = magnitude_verdict(n, (glo, ghi), (jlo, jhi), r.magnitude, r.margin)
    if n < 2 or glo is None or jlo is None:
        c.sentence = f"{c.measure}: grow gap {describe(n, mean, glo, ghi)} — undetermined at one seed."
        return c
    bound = max(abs(jlo), abs(jhi))
    c.sentence = (
        f"{c.measure}: grow gap {describe(n, mean, glo, ghi)}, joint gap {describe(n, jmean, jlo, jhi)}; "
        f"the grow gap is at least {max(-ghi, 0.0):.4f} in post's favour, {r.magnitude:g} × the joint gap's "
        f"largest plausible size is {r.magnitude * bound:.4f} — {c.verdict}"
    )
    ratio = fieller_ratio([gs[s] for s in seeds], [js[s] for s in seeds])
    if ratio["ratio"] is None:
        c.sentence += ". Ratio grow gap / joint gap: undefined (the joint gap is 0)."
    elif ratio["lo"] is None:
        c.sentence += f". Ratio grow gap / joint gap: {ratio['ratio']:+.1f}, interval undefined ({ratio['why']})."
    else:
        c.sentence += (
            f". Ratio grow gap / joint gap: {ratio['ratio']:+.1f} [{ratio['lo']:+.1f}, {ratio['hi']:+.1f}] (Fieller)."
        )
    return c


MATCH_TOLERANCE = 0.02  # budgets are matched to one optimizer step; closer than this counts as equal compute


def compute_ratio(m: Measures, joint: str, grow: str, key: str) -> float | None:
    """Mean over seeds of grow's compute / joint's under one measure (None where the runs do not record it)."""
    ratios = [
        m[grow][s].compute[key] / m[joint][s].compute[key]
        for s in sorted(set(m.get(joint, {})) & set(m.get(grow, {})))
        if m[grow][s].compute.get(key) and m[joint][s].compute.get(key)
    ]
    return sum(ratios) / len(ratios) if ratios else None


COMPUTE_UNITS = (
    ("tokens", "tokens (and with them optimizer steps and teacher queries)"),
    ("active_layer_tokens", "active-layer tokens"),
    ("student_flops", "student FLOPs"),
    ("total_flops", "total FLOPs"),
)


def what_matching_shows(m: Measures, joint: str, grow: str) -> str:
    """The pair's compute in every unit the runs record, generated from the numbers: equal (within
    MATCH_TOLERANCE) in some, one arm ahead in others. A lead at equal compute by one unit says nothing about
    compute measured in a unit where the arms differ."""
    equal, unequal = [], []
    for key, label in COMPUTE_UNITS:
        ratio = compute_ratio(m, joint, grow, key)
        if ratio is None:
            continue
        if abs(ratio - 1) <= MATCH_TOLERANCE:
            equal.append(label)
        else:
            unequal.append(f"{label} ×{ratio:.2f} ({grow if ratio > 1 else joint} had more)")
    if not equal and not unequal:
        return ""
    can = f"equal in {', '.join(equal)}" if equal else "equal in no recorded unit"
    cannot = f"; not equal in {'; '.join(unequal)}, so it cannot rule out compute measured that way" if unequal else ""
    return f" This pair is {can}{cannot} ({grow} / {joint})."


def matched_by(key: str, label: str, role: str = "matched") -> Evaluate:
    """The compute-matched control read under one compute measure, on the pair of arms of `role`. "Compute alone
    does not explain the gap" is supported only when grow beats joint beyond the margin while having no more
    compute than joint by this measure; contradicted only when grow fails to beat it while having no less;
    otherwise matching left one arm ahead in compute and the comparison cannot decide — undetermined, whichever
    arm was matched and in whichever direction. The sentence ends with what the pair can and cannot show: its
    compute ratio in every recorded unit."""

    def evaluate(r: Roles, m: Measures) -> Claim:
        joint, grow = getattr(r, role)
        c = sign_claim(f"at matched compute, val/ce {grow} − {joint}", gap(m, joint, grow), -1, r.margin)
        ratio = compute_ratio(m, joint, grow, key)
        scales = {arm: [v for v in values(m, arm, "match_scale").values()] for arm in (joint, grow)}
        matched = [
            f"{arm} matched to {other} (×{sum(v) / len(v):.2f}, {'upward' if sum(v) / len(v) >= 1 else 'downward'})"
            for arm, other, v in ((joint, grow, scales[joint]), (grow, joint, scales[grow]))
            if v
        ]
        how = "; ".join(matched) or "neither arm was budget-matched"
        if ratio is None:
            c.verdict, c.sentence = UNDETERMINED, c.sentence.rstrip(".") + f"; {label} not recorded — undetermined."
            return c
        compute = f"{label}: {grow} / {joint} = ×{ratio:.3f} ({how})"
        head, decided = c.sentence.split(" — ", 1)
        if c.verdict == SUPPORTED and ratio > 1 + MATCH_TOLERANCE:
            c.verdict = UNDETERMINED
            decided = f"undetermined by this measure: {grow} had more {label} than {joint}, so its lead may be compute."
        elif c.verdict == CONTRADICTED and ratio < 1 - MATCH_TOLERANCE:
            c.verdict = UNDETERMINED
            decided = f"undetermined by this measure: {joint} had more {label} than {grow}."
        c.sentence = f"{head} — {decided} {compute[0].upper()}{compute[1:]}.{what_matching_shows(m, joint, grow)}"
        return c

    return evaluate


def crossover_verdict(signs: list[int], n: int) -> tuple[str, str]:
    """The phase-wise claim from the sign of post − pre at every stage end (−1 post leads, +1 pre leads, 0 the
    interval contains 0): supported when pre leads before the first append (stage 0) and post leads from an append
    on through the final stage, each interval excluding 0; contradicted when pre leads at the final stage or post
    already leads before any block is appended; undetermined otherwise. Returns (verdict, why)."""
    if n < 2:
        return UNDETERMINED, "undetermined at one seed (a crossover needs intervals)"
    if len(signs) < 2:
        return UNDETERMINED, "undetermined: a single stage has no append to cross over at"
    if signs[-1] > 0:
        return CONTRADICTED, "pre still leads at the last stage end"
    if signs[0] < 0:
        return CONTRADICTED, "post already leads before any block is appended"
    tail = len(signs)
    while tail > 1 and signs[tail - 1] < 0:
        tail -= 1  # post leads at every stage end from `tail` on
    if signs[0] > 0 and tail < len(signs):
        return SUPPORTED, (
            f"pre leads at stage 0 and post at every stage end from stage {tail} on, each interval excluding 0"
        )
    return UNDETERMINED, f"undetermined at {n} seeds: no lead change with intervals excluding 0 that lasts to the end"


def crossover(r: Roles, m: Measures) -> Claim:
    pre, post = values(m, r.pre_grow, "stage_ce"), values(m, r.post_grow, "stage_ce")
    seeds = sorted(set(pre) & set(post))
    if not seeds:
        return not_tested("no finished pair of grow runs")
    n_stages = min(len(pre[s]) for s in seeds)
    ends = [_interval([post[s][k] - pre[s][k] for s in seeds]) for k in range(n_stages)]
    text = "; ".join(f"stage {k}: {describe(*e)}" for k, e in enumerate(ends))
    measure = "val/ce post − pre at every stage end of the grow arms"
    c = Claim("", "", measure, len(seeds))
    c.verdict, why = crossover_verdict([interval_sign(e[2], e[3]) for e in ends], len(seeds))
    c.sentence = f"{measure}: {text} — {why}."
    return c


def control(pre_role: str, post_role: str) -> Evaluate:
    """A claim that post beats pre between the arms of two roles (the single-block and freeze controls)."""

    def evaluate(r: Roles, m: Measures) -> Claim:
        pre, post = getattr(r, pre_role), getattr(r, post_role)
        return sign_claim(f"val/ce {post} − {pre}", gap(m, pre, post), -1, r.margin)

    return evaluate


def shallow(r: Roles, m: Measures) -> Claim:
    n, mean, lo, hi = _interval(gap(m, r.pre_shallow, r.post_shallow))
    c = Claim("", "", f"val/ce {r.post_shallow} − {r.pre_shallow}", n, mean, lo, hi)
    if n < 2 or lo is None:
        c.verdict = UNDETERMINED
    elif lo > -r.margin:
        c.verdict = SUPPORTED  # post is not better by more than the margin
    elif hi < -r.margin:
        c.verdict = CONTRADICTED  # post's prefix alone is already clearly better
    else:
        c.verdict = UNDETERMINED
    c.sentence = (
        f"{c.measure}: {describe(n, mean, lo, hi)} — "
        f"{_because(c.verdict, n, f'crosses −{r.margin:g} (post better by more than the margin)')}."
    )
    return c


# ----------------------------------------------------------------------------- the causal test
#
# The mechanism says pre-norm loses under growth because an appended block receives a grown stream. Renormalizing
# the stream where the appended blocks receive it (a post-norm block first above each boundary, pre-norm elsewhere)
# should then close the grow gap, and do so under growth more than the same block list moves pre-norm under joint
# training (where there is no boundary to renormalize).

RENORM_ROLES = ("pre_grow", "post_grow", "pre_joint", "post_joint", "pre_grow_renorm", "pre_joint_renorm")


def renorm_share(closed: list[float], grow_gap: list[float]) -> str:
    """'renormalizing the boundary closes 62.0 % of the grow gap [40.1 %, 85.3 %] (Fieller, 3 seeds)': the share
    mean(closed) / mean(grow_gap) with Fieller's 95% interval over the seeds, 'unbounded' when that interval is not
    finite (the grow gap's own interval contains 0)."""
    f = fieller_ratio(closed, grow_gap)
    if f["ratio"] is None:
        return "the share of the grow gap renormalizing the boundary closes is undefined (the grow gap's mean is 0)"
    head = f"renormalizing the boundary closes {100 * f['ratio']:.1f} % of the grow gap"
    if f["n"] < 2:
        return f"{head} (one seed: no interval)"
    if f["lo"] is None:
        return f"{head}, interval unbounded (Fieller, {f['n']} seeds: {f['why']})"
    return f"{head} [{100 * f['lo']:.1f} %, {100 * f['hi']:.1f} %] (Fieller, {f['n']} seeds)"


def _nats(stats: tuple) -> str:
    """describe() of a val/ce difference with its unit after the number: '+0.0020 nats [−0.0005, +0.0045] over 3 seeds'."""
    head, _, rest = describe(*stats).partition(" ")
    return f"{head} nats {rest}"


def boundary_renorm(r: Roles, m: Measures) -> Claim:
    """Per seed: the grow gap g = CE[pre_grow] − CE[post_grow] (> 0: post-norm better), what renormalizing closes
    under growth, CE[pre_grow] − CE[pre_grow_renorm], and what the same list moves under joint training,
    CE[pre_joint] − CE[pre_joint_renorm]; D = sign(ḡ) · (closed − joint) over the seeds every arm finished.
    Undetermined when g's interval contains 0 (no gap to close); else a sign claim on D beyond +δ."""
    ce = [values(m, getattr(r, role), "val_ce") for role in RENORM_ROLES]
    seeds = sorted(set.intersection(*(set(v) for v in ce)))
    if not seeds:
        return not_tested("no seed finished all six arms it reads")
    pg, qg, pj, qj, pgr, pjr = ([v[s] for s in seeds] for v in ce)
    gap = [a - b for a, b in zip(pg, qg, strict=True)]
    closed = [a - b for a, b in zip(pg, pgr, strict=True)]
    joint = [a - b for a, b in zip(pj, pjr, strict=True)]
    n, mean, lo, hi = _interval(gap)
    sign = -1 if mean < 0 else 1
    c = sign_claim(
        f"D = sign(ḡ) · [({r.pre_grow} − {r.pre_grow_renorm}) − ({r.pre_joint} − {r.pre_joint_renorm})], val/ce",
        [sign * (x - y) for x, y in zip(closed, joint, strict=True)],
        +1,
        r.margin,
    )
    why = c.sentence.split(" — ", 1)[1]
    if n >= 2 and interval_sign(lo, hi) == 0:
        c.verdict = UNDETERMINED
        why = (
            f"undetermined at {n} seeds: the grow gap's 95% interval contains 0, so there is no gap to close (in "
            "either direction)."
        )
    joint_gap = describe(*_interval([a - b for a, b in zip(pj, qj, strict=True)]))
    c.sentence = (
        f"{renorm_share(closed, gap)}; the grow gap {r.pre_grow} − {r.post_grow} is {describe(n, mean, lo, hi)} "
        f"(> 0: post-norm better); under joint training the same block list moves pre-norm by "
        f"{_nats(_interval(joint))} ({r.pre_joint} − {r.pre_joint_renorm}; the joint gap "
        f"{r.pre_joint} − {r.post_joint} is {joint_gap}); difference in differences {c.measure}: "
        f"{describe(c.n, c.mean, c.lo, c.hi)} → {why}"
    )
    return c


# ----------------------------------------------------------------------------- the mechanism claims
#
# Each reads a grow run's growth events (measures.BoundaryEvent: the boundary b, the block below it, the training
# tokens T_k at the event and at the end of the next stage) against the joint run of the same placement and seed at
# the same residual or block index and the same training tokens (its diagnostics snapshot there). Indices are the grown
# model's: residual b, appended block b, block b − 1 below the boundary (for `append` also the final student's). A joint
# run has a snapshot at T tokens when `diagnostics.every_tokens` divides T; without one the claim is not tested.
# Verdicts: boundary_update and structural_drift are sign claims (+1) with margin `scale_margin` (log units); identity
# is `identity_verdict`; boundary_scale is descriptive (kind "descriptive": a number, outside Holm and the headline).

GrowRead = Callable[[BoundaryEvent], Any]  # the grow run's value at one event (None: not recorded)
JointRead = Callable[[BoundaryEvent, dict, dict], Any]  # the joint's, from its snapshots at T_k and at the end
EventKey = tuple[int, int]  # (stage, boundary)


def _log(x: float | None) -> float | None:
    return math.log(x) if x is not None and x > 0 else None


def _drift(before: float | None, after: float | None) -> float | None:
    """|log(after / before)|: how far a scale moved, either way (None without both, or at 0)."""
    a, b = _log(before), _log(after)
    return abs(b - a) if a is not None and b is not None else None


def _pick(snap: dict, key: str, i: int, cls: str | None = None) -> float | None:
    v = snap.get(key)
    v = v[i] if isinstance(v, list) and 0 <= i < len(v) else None
    return v.get(cls) if cls is not None and isinstance(v, dict) else v


@dataclass
class EventValues:
    """Per seed both arms finished, per growth event of the grow run: (grow value, joint value at the same index and
    tokens); seeds lacking a value at some event are left out (`unreadable`), and joint snapshots that do not exist
    are listed (`missing`: (arm, seed, tokens))."""

    by_seed: dict[int, dict[EventKey, tuple[float, float]]] = field(default_factory=dict)
    missing: list[tuple[str, int, int | None]] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    no_events: list[str] = field(default_factory=list)


def event_values(m: Measures, grow: str, joint: str, read_grow: GrowRead, read_joint: JointRead) -> EventValues:
    out = EventValues()
    for s in sorted(set(m.get(grow, {})) & set(m.get(joint, {}))):
        g, j = m[grow][s], m[joint][s]
        if not g.events:
            out.no_events.append(f"{grow} seed {s}")
            continue
        row, lacking = {}, len(out.missing)
        for ev in g.events:
            at, end = j.snapshots.get(ev.tokens_at), j.snapshots.get(ev.tokens_end)
            out.missing += [(joint, s, t) for t, snap in ((ev.tokens_at, at), (ev.tokens_end, end)) if snap is None]
            gv, jv = read_grow(ev), (read_joint(ev, at, end) if at is not None and end is not None else None)
            if gv is not None and jv is not None:
                row[(ev.stage, ev.boundary)] = (gv, jv)
        if len(row) == len(g.events):
            out.by_seed[s] = row
        elif len(out.missing) == lacking:
            out.unreadable.append(f"{grow}/{joint} seed {s}")
    return out


def _untestable(*parts: EventValues) -> Claim | None:
    """'Not tested' when a joint snapshot is missing, a grow run has no growth events, or no seed has every value."""
    missing = sorted({x for v in parts for x in v.missing}, key=lambda x: (x[0], x[1], x[2] or -1))
    if missing:
        by_seed: dict[tuple[str, int], list[str]] = {}
        for arm, seed, tokens in missing:
            by_seed.setdefault((arm, seed), []).append("—" if tokens is None else f"{tokens:,}")
        by_tokens: dict[tuple[str, str], list[str]] = {}  # seeds that lack the same tokens, together
        for (arm, seed), t in by_seed.items():
            by_tokens.setdefault((arm, ", ".join(t)), []).append(str(seed))
        runs = "; ".join(
            f"{arm} seed{'s' if len(seeds) > 1 else ''} {', '.join(seeds)} at {t} tokens"
            for (arm, t), seeds in by_tokens.items()
        )
        known = [t for _, _, t in missing if t]
        hint = f" to a divisor of {math.gcd(*known):,}" if known else ""
        return not_tested(
            f"the joint runs have no diagnostics record at the grow runs' growth-event tokens ({runs}): "
            "a joint run records one at T tokens when diagnostics.every_tokens divides T — set "
            f"diagnostics.every_tokens{hint} for the joint arms"
        )
    none = [x for v in parts for x in v.no_events]
    if none:
        return not_tested(f"no growth events recorded ({', '.join(none)}: its summary has no boundaries)")
    if any(not v.by_seed for v in parts):
        bad = [x for v in parts for x in v.unreadable]
        return not_tested(f"no seed has the diagnostics this claim reads at every growth event ({', '.join(bad)})")
    return None


def _event_mean(v: EventValues, f: Callable[[float, float], float]) -> dict[int, float]:
    """{seed: mean over its growth events of f(grow, joint)}."""
    return {s: sum(f(g, j) for g, j in row.values()) / len(row) for s, row in v.by_seed.items() if row}


def _new_update(ev: BoundaryEvent) -> float | None:
    return _log(ev.new_update)


def _joint_new_update(ev: BoundaryEvent, at: dict, end: dict) -> float | None:
    return _log(_pick(end, "branch_update", ev.boundary))


def boundary_update(r: Roles, m: Measures) -> Claim:
    pre = event_values(m, r.pre_grow, r.pre_joint, _new_update, _joint_new_update)
    post = event_values(m, r.post_grow, r.post_joint, _new_update, _joint_new_update)
    if (why := _untestable(pre, post)) is not None:
        return why
    dpre, dpost = _event_mean(pre, lambda g, j: g - j), _event_mean(post, lambda g, j: g - j)
    seeds = sorted(set(dpre) & set(dpost))
    c = sign_claim(
        "first appended block's log ‖F(h)‖/‖h‖ at the end of its stage, difference in differences "
        f"[{r.post_grow} − {r.pre_grow}] − [{r.post_joint} − {r.pre_joint}] (joint at the same block index "
        "and tokens; mean over growth events)",
        [dpost[s] - dpre[s] for s in seeds],
        +1,
        r.scale_margin,
    )
    each = "; ".join(
        f"{g} − {j}: {describe(*_interval(list(d.values())), nd=3)}"
        for g, j, d in ((r.pre_grow, r.pre_joint, dpre), (r.post_grow, r.post_joint, dpost))
    )
    c.sentence += (
        f" Within each placement, grow − joint of that log ratio: {each}. The margin is {r.scale_margin:g} "
        f"in log units (a factor e^{r.scale_margin:g})."
    )
    return c


def _rms_drift(ev: BoundaryEvent) -> float | None:
    return _drift(ev.rms_at, ev.rms_end)


def _joint_rms_drift(ev: BoundaryEvent, at: dict, end: dict) -> float | None:
    return _drift(_pick(at, "residual_rms", ev.boundary, "all"), _pick(end, "residual_rms", ev.boundary, "all"))


def boundary_scale(r: Roles, m: Measures) -> Claim:
    pre = event_values(m, r.pre_grow, r.pre_joint, _rms_drift, _joint_rms_drift)
    post = event_values(m, r.post_grow, r.post_joint, _rms_drift, _joint_rms_drift)
    if (why := _untestable(pre, post)) is not None:
        return why
    seeds = sorted(set(pre.by_seed) & set(post.by_seed))
    grow = {k: _event_mean(v, lambda g, j: g) for k, v in (("pre", pre), ("post", post))}
    joint = {k: _event_mean(v, lambda g, j: j) for k, v in (("pre", pre), ("post", post))}
    n, mean, lo, hi = _interval([grow["post"][s] - grow["pre"][s] for s in seeds])
    c = Claim(
        "",
        "",
        f"boundary RMS drift |log(RMS end of next stage / RMS at growth)|, {r.post_grow} − {r.pre_grow}",
        n,
        mean,
        lo,
        hi,
        DESCRIPTIVE,
        kind="descriptive",
    )
    jd = describe(*_interval([joint["post"][s] - joint["pre"][s] for s in seeds]))
    c.sentence = (
        f"{c.measure}: {describe(n, mean, lo, hi)}; the joint arms over the same tokens at the same residual "
        f"index, {r.post_joint} − {r.pre_joint}: {jd} — descriptive, no verdict: a post-norm stream is a "
        "norm's output, so its RMS is the norm's gains by construction and a small post drift says nothing "
        "about the mechanism (boundary_update is the placement-independent test)."
    )
    return c


def _ratio_drift(ev: BoundaryEvent) -> float | None:
    return _drift(ev.ratio_at, ev.ratio_end)


def _joint_ratio_drift(ev: BoundaryEvent, at: dict, end: dict) -> float | None:
    return _drift(_pick(at, "struct_content_ratio", ev.boundary), _pick(end, "struct_content_ratio", ev.boundary))


def structural_drift(r: Roles, m: Measures) -> Claim:
    pre = event_values(m, r.pre_grow, r.pre_joint, _ratio_drift, _joint_ratio_drift)
    post = (
        event_values(m, r.post_grow, r.post_joint, _ratio_drift, _joint_ratio_drift)
        if r.post_grow and r.post_joint
        else None
    )
    if (why := _untestable(pre, *([post] if post else []))) is not None:
        return why
    d = _event_mean(pre, lambda g, j: g - j)
    c = sign_claim(
        f"|log| drift of the boundary's structural/content RMS ratio from the growth event to the end of the "
        f"next stage, {r.pre_grow} − {r.pre_joint} (joint at the same residual index and tokens; mean over "
        "growth events)",
        [d[s] for s in sorted(d)],
        +1,
        r.scale_margin,
    )
    if post is not None:
        dp = _event_mean(post, lambda g, j: g - j)
        c.sentence += (
            f" The same for post (context), {r.post_grow} − {r.post_joint}: {describe(*_interval(list(dp.values())))}."
        )
    return c


IdentityEvent = tuple[tuple[float | None, float | None], tuple[float | None, float | None]]  # r (lo, hi), s (lo, hi)


def identity_verdict(n: int, events: list[IdentityEvent], r_max: float, s_max: float) -> tuple[str, str]:
    """ "Nearly an identity map" at every growth event, from the 95% intervals of the block's relative update r and
    skip-ΔCE s there: supported when at every event both upper bounds lie below their thresholds (r < r_max and
    s < s_max); contradicted when at some event a lower bound lies above its threshold; undetermined otherwise or
    with one seed. Returns (verdict, why) — why names the first event that decides against."""
    if n < 2 or not events or any(lo is None for (rl, _), (sl, _) in events for lo in (rl, sl)):
        return UNDETERMINED, "undetermined at one seed" if n < 2 else "undetermined: no intervals"
    for k, ((rlo, _), (slo, _)) in enumerate(events):
        if rlo > r_max or slo > s_max:
            what = (
                f"r's lower bound {rlo:.3f} > {r_max:g}" if rlo > r_max else f"s's lower bound {slo:+.4f} > {s_max:g}"
            )
            return CONTRADICTED, f"contradicted: at event {k + 1} {what}"
    if all(rhi < r_max and shi < s_max for (_, rhi), (_, shi) in events):
        return SUPPORTED, f"supported: at every event r's upper bound < {r_max:g} and s's < {s_max:g} nats"
    return UNDETERMINED, (
        f"undetermined at {n} seeds: at some event an interval crosses its threshold (r {r_max:g}, s {s_max:g} nats)"
    )


def _prefix(ev: BoundaryEvent) -> tuple[float, float] | None:
    return None if ev.prefix_update is None or ev.prefix_skip is None else (ev.prefix_update, ev.prefix_skip)


def _joint_prefix(ev: BoundaryEvent, at: dict, end: dict) -> tuple[float, float] | None:
    """The joint run's block b − 1 at T_k: the grown model's index of the block below the boundary (= ev.prefix, the
    index before growth, for append)."""
    rel, skip = _pick(at, "rel_update", ev.boundary - 1), _pick(at, "skip_ce_delta", ev.boundary - 1)
    return None if rel is None or skip is None else (rel, skip)


def _per_event(v: EventValues, side: int) -> dict[EventKey, tuple[list[float], list[float]]]:
    """{event: (r over seeds, s over seeds)} of the grow run (side 0) or the joint run (side 1)."""
    out: dict[EventKey, tuple[list[float], list[float]]] = {}
    for row in v.by_seed.values():
        for key, pair in row.items():
            rs, ss = out.setdefault(key, ([], []))
            rs.append(pair[side][0])
            ss.append(pair[side][1])
    return out


def _rs(rs: list[float], ss: list[float]) -> str:
    (_, rm, rl, rh), (_, sm, sl, sh) = _interval(rs), _interval(ss)
    r = f"r {rm:.3f}" + (f" [{rl:.3f}, {rh:.3f}]" if rl is not None else "")
    return r + f", s {sm:+.4f}" + (f" [{sl:+.4f}, {sh:+.4f}]" if sl is not None else "")


def identity_block(r: Roles, m: Measures) -> Claim:
    pre = event_values(m, r.pre_grow, r.pre_joint, _prefix, _joint_prefix)
    post = event_values(m, r.post_grow, r.post_joint, _prefix, _joint_prefix) if r.post_grow and r.post_joint else None
    if (why := _untestable(pre, *([post] if post else []))) is not None:
        return why
    arms = [(r.pre_grow, _per_event(pre, 0))] + ([(r.post_grow, _per_event(post, 0))] if post else [])
    arms += [(r.pre_joint, _per_event(pre, 1))] + ([(r.post_joint, _per_event(post, 1))] if post else [])
    grown, keys = arms[0][1], sorted(arms[0][1])
    n = min(len(grown[k][0]) for k in keys)
    intervals = [(_interval(grown[k][0])[2:], _interval(grown[k][1])[2:]) for k in keys]
    c = Claim(
        "",
        "",
        f"block below each boundary at its growth event in {r.pre_grow}: relative update r (shown: the last "
        f"event's) and skip-ΔCE s; nearly an identity map = r < {r.identity_update:g} and s < {r.margin:g} nats",
        n,
        *_interval(grown[keys[-1]][0])[1:],
    )
    c.verdict, why = identity_verdict(n, intervals, r.identity_update, r.margin)
    text = " | ".join(
        f"event {i + 1} (stage {k[0]}, boundary {k[1]}): "
        + "; ".join(f"{arm} {_rs(*ev[k])}" for arm, ev in arms if k in ev)
        for i, k in enumerate(keys)
    )
    c.sentence = f"{c.measure}: {text} — {why}."
    prov = {x for x in values(m, r.pre_grow, "last_prefix_provenance").values()}
    if prov:
        c.sentence += f" Provenance of the last event's block: {', '.join(sorted(prov))}."
    return c


register_claim(
    "joint_gap",
    "Under joint training pre- and post-norm reach the same validation CE (post − pre = −0.0004).",
    joint_gap,
    roles=("pre_joint", "post_joint"),
)
register_claim(
    "grow_gap",
    "Under curriculum growth post-norm beats pre-norm (post − pre = −0.0328).",
    grow_gap,
    roles=("pre_grow", "post_grow"),
)
register_claim(
    "grow_vs_joint",
    "The grow gap is an order of magnitude larger than the joint gap (−0.0328 vs −0.0004).",
    interaction,
    roles=("pre_joint", "post_joint", "pre_grow", "post_grow"),
)
MATCHED = (
    "A compute-matched post-norm joint control stays worse than post-norm growth: compute alone does not explain "
    "the gap."
)
register_claim(
    "matched",
    MATCHED,
    matched_by("active_layer_tokens", "active-layer tokens"),
    roles=("matched",),
    reads=("val_ce", "match_scale", "compute"),
)
register_claim(
    "matched_flops",
    MATCHED + " (Read at total FLOPs: the student's, LM head included, and the teacher's.)",
    matched_by("total_flops", "total FLOPs"),
    roles=("matched",),
    reads=("val_ce", "match_scale", "compute"),
)
MATCHED_PAPER = MATCHED + " (The paper's direction: the joint arm given the grow arm's compute.)"
register_claim(
    "matched_paper",
    MATCHED_PAPER,
    matched_by("active_layer_tokens", "active-layer tokens", "joint_matched"),
    roles=("joint_matched",),
    reads=("val_ce", "match_scale", "compute"),
)
register_claim(
    "matched_paper_flops",
    MATCHED_PAPER + " (Read at total FLOPs.)",
    matched_by("total_flops", "total FLOPs", "joint_matched"),
    roles=("joint_matched",),
    reads=("val_ce", "match_scale", "compute"),
)
register_claim(
    "crossover",
    "Phase-wise, the pre/post ranking crosses over: post-norm takes the lead once blocks are appended.",
    crossover,
    roles=("pre_grow", "post_grow"),
    reads=("stage_ce",),
)
register_claim(
    "single_block",
    "Single-block control: appending one block per stage also favours post-norm.",
    control("pre_single", "post_single"),
    roles=("pre_single", "post_single"),
)
register_claim(
    "freeze",
    "Freeze control: with the prefix frozen (only appended blocks train), post-norm still wins.",
    control("pre_freeze", "post_freeze"),
    roles=("pre_freeze", "post_freeze"),
)
register_claim(
    "shallow",
    "The ranking change is not shallow-block quality: on the prefix alone post-norm has no advantage.",
    shallow,
    roles=("pre_shallow", "post_shallow"),
)
register_claim(
    "boundary_update",
    "A pre-norm stream that grows makes an appended block's contribution small: relative to what it "
    "receives, the first appended block adds more under post-norm than under pre-norm, beyond what joint "
    "training gives the same block.",
    boundary_update,
    roles=("pre_grow", "post_grow", "pre_joint", "post_joint"),
    reads=("events", "snapshots"),
)
register_claim(
    "boundary_scale",
    "Post-norm goes with stable residual scales at the growth boundary.",
    boundary_scale,
    roles=("pre_grow", "post_grow", "pre_joint", "post_joint"),
    reads=("events", "snapshots"),
)
register_claim(
    "structural_drift",
    "Pre-norm goes with scale drift of structural tokens (BOS, delimiters, whitespace) at the boundary.",
    structural_drift,
    roles=("pre_grow", "pre_joint"),
    reads=("events", "snapshots"),
)
register_claim(
    "identity",
    "On a fixed batch the final pre-growth block of the pre-norm model is nearly an identity map.",
    identity_block,
    roles=("pre_grow", "pre_joint"),
    reads=("events", "snapshots", "last_prefix_provenance"),
)
register_claim(
    "boundary_renorm",
    "The mechanism is causal: renormalizing the stream at each growth boundary (a post-norm "
    "block first above it, pre-norm elsewhere) moves pre-norm toward post-norm under growth, more than the "
    "same block list moves it under joint training.",
    boundary_renorm,
    roles=RENORM_ROLES,
)
