"""Pre-registered regime checks (study section `regime:`): what the regime a study runs in must be for its claims
to be about the placements, written in the study file before any run, printed when the study starts, and judged in
its report above the claims.

    regime:
      max_collapse: 0.5     # check 1, health: every arm's collapse share, mean over seeds, at most this
      min_kl: 0.05          # check 2, distance from the teacher: the arms' mean val/kl at least this (nats/token)
      scale_factor: 2.0     # check 3, descriptive: pre- and post-norm boundary streams at growth differ in RMS by
                            # at least this factor, all tokens and structural tokens
      drift_excess: 0.1     # check 4, the mechanism's precondition: pre-grow's boundary RMS drifts more than
                            # pre-joint's at the same tokens, by more than this (log units)

A null field registers no check. Each check reads this study's numbers and is one of

    pass            the registered condition holds
    fail            it does not
    undetermined    the 95% interval over seeds decides neither way (check 3; one seed gives no interval)
    not measured    the runs hold no such measure (no finished run, diagnostics off, no growth event)

1. health: per arm, the mean over seeds of `RunMeasures.collapse_share` (the worst block's at the end of training,
   as the report's collapse section reads it) must be ≤ max_collapse; the check passes when every arm does, fails
   when one does not (and names it), and is not measured while an arm has no value and none fails.
2. distance from the teacher: the mean over the arms of their mean final val/kl (results.csv) must be ≥ min_kl; a
   budget ladder judges it at its largest budget, where students get closest to their teacher.
3. the mechanism's precondition: per seed, `measures.scale_ratios` (log of pre_grow's / post_grow's boundary RMS at
   the growth events, mean over events; the claims roles), its mean and 95% t-interval over seeds, for all tokens
   and for the structural tokens. A class is *present* when the whole interval lies beyond ±log(scale_factor) on one
   side, *absent* when it lies inside (−log f, +log f), *undetermined* otherwise; the check passes when both are
   present and fails when one is absent. A ladder judges it at every budget.

4. the placement-independent precondition (drift_excess): per seed, pre_grow's boundary RMS drift |log(RMS at the
   end of the next stage / RMS at growth)| minus pre_joint's at the same tokens and residual index, mean over the
   growth events (mechanism.drift_excess); pass when the 95% interval lies above the threshold, fail below it.

A failed check 4 makes the mechanism's tests (MECHANISM_TESTS) not informative: the report says so above the
claims and regime.json lists them (`not_informative`), as the rule registered with the check says. Check 3 gated
them until session 20; it compares a post-norm stream's RMS — its norm's gains by construction — and is now
descriptive.

Several readings combine (check 3's two classes, a ladder's budgets) as: fail if any fails, else undetermined if
any is, else not measured if any is, else pass; a budget where the arms are not run takes no part. Nothing here
reads files but `write_regime`; runner.py hands in the rows and measures.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from normgrow import atomic
from normgrow.study.config import StudyConfig
from normgrow.study.engine.measures import Measures, scale_ratios
from normgrow.study.engine.stats import Estimate, estimate
from normgrow.study.paper.mechanism import drift_excess
from normgrow.study.paper.sections import CHECKS, MECHANISM_TESTS, regime_of, registered

PASS, FAIL, UNDETERMINED, NOT_MEASURED = "pass", "fail", "undetermined", "not measured"
NOT_RUN = "not run at this budget"  # a ladder's budget where the arms a check reads do not run
PRESENT, ABSENT = "present", "absent"  # check 3's reading of one token class
REGIME_FILE = "regime.json"


# ----------------------------------------------------------------------------- what a study prints when it starts


def _what(study: StudyConfig, key: str, ladder: bool) -> str:
    r, c = regime_of(study), study.claims
    if key == "max_collapse":
        return f"every arm's worst-block collapse share (end of training, mean over seeds) ≤ {r.max_collapse:g}"
    if key == "min_kl":
        where = f", judged at the largest budget ({study.budgets[-1]:g})" if ladder else ""
        return f"the mean over the arms of their mean final val/kl ≥ {r.min_kl:g} nats/token{where}"
    where = ", at every budget" if ladder else ""
    if key == "drift_excess":
        return (
            f"over the stage after each growth event, {c.get('pre_grow')}'s boundary RMS drift exceeds "
            f"{c.get('pre_joint')}'s at the same tokens by more than {r.drift_excess:g} (log units; the 95% interval "
            f"above it){where}; if not, the mechanism's tests are not informative"
        )
    return (
        f"at the growth events the boundary stream's RMS differs between {c.get('pre_grow')} and {c.get('post_grow')} by at "
        f"least ×{r.scale_factor:g} (the 95% interval of the log ratio beyond ±{math.log(r.scale_factor):.3f}), "  # type: ignore[arg-type]  # described only when set
        f"for all tokens and for the structural tokens{where}"
    )


def plan_lines(study: StudyConfig) -> list[str]:
    """The block a study (or ladder) prints before any run: its registered checks (none: no lines)."""
    keys = registered(regime_of(study))
    if not keys:
        return []
    return ["Regime checks, registered in the study file before any run:"] + [
        f"  {CHECKS[k][0]}. {CHECKS[k][1]}: {_what(study, k, bool(study.budgets))}" for k in keys
    ]


# ----------------------------------------------------------------------------- the checks


@dataclass
class Check:
    """One check's reading for a study, or for one budget of a ladder (`budget`)."""

    key: str  # the RegimeConfig field
    outcome: str  # PASS, FAIL, UNDETERMINED, NOT_MEASURED (or NOT_RUN at a ladder's budget)
    measured: str  # the value with its interval, as the report prints it
    threshold: str
    detail: str  # the reading in words: the arms that fail, each class's reading
    budget: float | None = None
    values: dict = field(default_factory=dict)  # the numbers behind it (regime.json)

    @property
    def number(self) -> int:
        return CHECKS[self.key][0]


def combine(outcomes: list[str]) -> str:
    """Several readings as one: fail if any fails, else undetermined, else not measured, else pass (budgets where the
    arms were not run take no part; none left: not measured)."""
    outcomes = [o for o in outcomes if o != NOT_RUN]
    for o in (FAIL, UNDETERMINED, NOT_MEASURED):
        if o in outcomes:
            return o
    return PASS if outcomes else NOT_MEASURED


def _ci(s: Estimate, nd: int) -> str:
    if s.mean is None:
        return "—"
    if s.half is None:
        return f"{s.mean:.{nd}f} (one seed, no interval)"
    return f"{s.mean:.{nd}f} ± {s.half:.{nd}f}"


def collapse_check(arms: list[str], measures: Measures, limit: float) -> Check:
    """Check 1 from the runs' measures: every arm's mean collapse share over seeds ≤ limit."""
    per = {
        a: estimate([m.collapse_share for m in measures.get(a, {}).values() if m.collapse_share is not None])
        for a in arms
    }
    have = {a: s for a, s in per.items() if s.mean is not None}
    mean: dict[str, float] = {a: s.mean for a, s in per.items() if s.mean is not None}
    failing = [a for a in have if mean[a] > limit]
    missing = [a for a in arms if a not in have]
    outcome = FAIL if failing else NOT_MEASURED if missing else PASS
    worst = max(have, key=lambda a: mean[a], default=None)
    measured = "—" if worst is None else f"worst `{worst}`: {_ci(have[worst], 3)}"
    if failing:
        detail = ", ".join(f"`{a}` {mean[a]:.3f}" for a in failing) + f" above {limit:g}"
    elif missing:
        detail = "no collapse share (no finished run with diagnostics) for " + ", ".join(f"`{a}`" for a in missing)
    else:
        assert worst is not None  # no arm missing, none failing: at least one measured
        detail = f"every arm at or below {limit:g} (worst `{worst}`, {mean[worst]:.3f})"
    values = {
        "arms": {a: e.as_dict() for a, e in per.items()},
        "failing": failing,
        "not_measured": missing,
        "worst": worst,
    }
    return Check("max_collapse", outcome, measured, f"≤ {limit:g} for every arm", detail, values=values)


def kl_check(arms: list[str], kls: dict[str, dict[int, float]], limit: float) -> Check:
    """Check 2 from each arm's final val/kl by seed (its finished runs): the mean over the arms of their mean final
    val/kl ≥ limit. Its interval, over the seeds, is shown where every arm finished the same seeds (the per-seed mean
    over the arms)."""
    per = {a: kls[a] for a in arms if kls.get(a)}
    if not per:
        return Check(
            "min_kl",
            NOT_MEASURED,
            "—",
            f"≥ {limit:g} nats/token",
            "no finished run records val/kl",
            values={"arms": {}},
        )
    means = {a: sum(v.values()) / len(v) for a, v in per.items()}
    value = sum(means.values()) / len(means)
    seeds = sorted(set.intersection(*(set(v) for v in per.values())))
    balanced = all(set(v) == set(seeds) for v in per.values())
    s = estimate([sum(per[a][sd] for a in per) / len(per) for sd in seeds]) if balanced else None
    measured = (_ci(s, 4) if s else f"{value:.4f} (arms finished different seeds: no interval)") + (
        f" over {len(per)} of {len(arms)} arms" if len(per) < len(arms) else ""
    )
    outcome = PASS if value >= limit else FAIL
    detail = f"{value:.4f} nats/token is {'at or above' if outcome == PASS else 'below'} {limit:g}"
    if len(per) < len(arms):
        detail += " (no val/kl for " + ", ".join(f"`{a}`" for a in arms if a not in per) + ")"
    return Check(
        "min_kl",
        outcome,
        measured,
        f"≥ {limit:g} nats/token",
        detail,
        values={"value": value, "arms": means, "interval": s.as_dict() if s else None},
    )


def class_reading(s: Estimate, edge: float) -> str:
    """Check 3's reading of one token class from the estimate of its per-seed log ratios and log(factor)."""
    lo, hi = s.lo, s.hi
    if s.mean is None:
        return NOT_MEASURED
    if lo is None or hi is None:
        return UNDETERMINED
    if lo > edge or hi < -edge:
        return PRESENT
    if -edge < lo and hi < edge:
        return ABSENT
    return UNDETERMINED


def _ratio_text(s: Estimate) -> str:
    if s.mean is None:
        return "—"
    times = f" (×{math.exp(s.mean):.3g})"
    if s.lo is None or s.hi is None:
        return f"{s.mean:+.3f}{times}, one seed: no interval"
    return f"{s.mean:+.3f} [{s.lo:+.3f}, {s.hi:+.3f}]{times}"


def scale_check(measures: Measures, pre: str | None, post: str | None, factor: float) -> Check:
    """Check 3 from the runs' measures: log(pre's / post's boundary RMS at growth), all and structural tokens."""
    edge, parts, values = math.log(factor), [], {}
    for cls, structural in (("all", False), ("structural", True)):
        s = estimate(list(scale_ratios(measures, pre, post, structural).values()))
        reading = class_reading(s, edge)
        values[cls] = {**s.as_dict(), "reading": reading}
        parts.append((cls, s, reading))
    outcome = combine([{PRESENT: PASS, ABSENT: FAIL}.get(r, r) for _, _, r in parts])
    measured = "; ".join(f"{cls}: {_ratio_text(s)}" for cls, s, _ in parts)
    detail = "; ".join(
        f"{cls} tokens {r}"
        + (f" ({_ratio_text(s)})" if s.mean is not None else " (no seed has both arms' boundary RMS at growth)")
        for cls, s, r in parts
    )
    return Check(
        "scale_factor", outcome, measured, f"beyond ±log {factor:g} = ±{edge:.3f}, both classes", detail, values=values
    )


def drift_check(measures: Measures, pre_grow: str | None, pre_joint: str | None, edge: float) -> Check:
    """Check 4 from the runs' measures: per seed, pre_grow's boundary RMS drift over the stage after each growth event
    minus pre_joint's at the same tokens and residual index (mean over events); pass when the 95% interval lies above
    `edge`, fail when it lies below, undetermined otherwise or with one seed."""
    excess = drift_excess(measures, pre_grow, pre_joint)
    s = estimate(list(excess.values()))
    threshold = f"above {edge:g} (log units)"
    if s.mean is None:
        why = "no seed has the growth events and the joint snapshots at their tokens"
        return Check("drift_excess", NOT_MEASURED, "—", threshold, why)
    if s.lo is None or s.hi is None:
        outcome = UNDETERMINED
    else:
        outcome = PASS if s.lo > edge else FAIL if s.hi < edge else UNDETERMINED
    measured = f"{s.mean:+.3f}" + ("" if s.lo is None else f" [{s.lo:+.3f}, {s.hi:+.3f}]") + f" over {s.n} seed(s)"
    detail = f"{pre_grow} − {pre_joint} boundary RMS drift: {measured}"
    return Check("drift_excess", outcome, measured, threshold, detail, values={"excess": s.as_dict()})


def study_checks(study: StudyConfig, kls: dict[str, dict[int, float]], measures: Measures) -> list[Check]:
    """The study's registered checks from its arms' final val/kl by seed and their runs' measures (each arm's
    selected rate)."""
    r, arms, out = regime_of(study), list(study.arms), []
    if r.max_collapse is not None:
        out.append(collapse_check(arms, measures, r.max_collapse))
    if r.min_kl is not None:
        out.append(kl_check(arms, kls, r.min_kl))
    if r.scale_factor is not None:
        out.append(scale_check(measures, study.claims.get("pre_grow"), study.claims.get("post_grow"), r.scale_factor))
    if r.drift_excess is not None:
        out.append(drift_check(measures, study.claims.get("pre_grow"), study.claims.get("pre_joint"), r.drift_excess))
    return out


def _not_run(key: str, budget: float, threshold: str) -> Check:
    return Check(key, NOT_RUN, NOT_RUN, threshold, NOT_RUN, budget)


def ladder_checks(
    study: StudyConfig, rungs: list[tuple[float, list[str], dict[str, dict[int, float]], Measures]]
) -> list[Check]:
    """A ladder's checks from its budgets' (budget, arms run there, their final val/kl by seed, measures): checks 1
    and 3 at every budget, check 2 at the largest."""
    r, out = regime_of(study), []
    pre, post = study.claims.get("pre_grow"), study.claims.get("post_grow")
    if r.max_collapse is not None:
        for budget, arms, _, measures in rungs:
            out.append(dataclasses.replace(collapse_check(arms, measures, r.max_collapse), budget=budget))
    if r.min_kl is not None:
        budget, arms, kls, _ = rungs[-1]
        out.append(dataclasses.replace(kl_check(arms, kls, r.min_kl), budget=budget))
    if r.scale_factor is not None:
        for budget, arms, _, measures in rungs:
            if pre in arms and post in arms:
                out.append(dataclasses.replace(scale_check(measures, pre, post, r.scale_factor), budget=budget))
            else:
                out.append(_not_run("scale_factor", budget, f"beyond ±log {r.scale_factor:g}"))
    if r.drift_excess is not None:
        joint = study.claims.get("pre_joint")
        for budget, arms, _, measures in rungs:
            if pre in arms and joint in arms:
                out.append(dataclasses.replace(drift_check(measures, pre, joint, r.drift_excess), budget=budget))
            else:
                out.append(_not_run("drift_excess", budget, f"above {r.drift_excess:g}"))
    return out


def outcomes(checks: list[Check]) -> dict[str, str]:
    """Each registered check's outcome, its readings combined (a ladder's budgets)."""
    return {
        key: combine([c.outcome for c in checks if c.key == key]) for key in CHECKS if any(c.key == key for c in checks)
    }


# ----------------------------------------------------------------------------- the report and regime.json


def _outcome_cell(outcome: str) -> str:
    return f"**{outcome}**" if outcome in (PASS, FAIL, UNDETERMINED) else outcome


def _what_cell(study: StudyConfig, key: str) -> str:
    c = study.claims
    if key == "max_collapse":
        return "worst block's collapse share at the end of training, mean over seeds, per arm (shown: the worst arm)"
    if key == "min_kl":
        return "mean over the arms of their mean final val/kl (nats/token)"
    return (
        f"log(RMS of `{c.get('pre_grow')}` / RMS of `{c.get('post_grow')}`) of the boundary stream at the growth events, per "
        "seed the mean over events; all tokens and structural tokens"
    )


def _detail_lines(study: StudyConfig, checks: list[Check]) -> list[str]:
    L = []
    for key, outcome in outcomes(checks).items():
        n, name = CHECKS[key]
        rows = [c for c in checks if c.key == key and c.outcome != NOT_RUN]
        at = "; ".join((f"at budget {c.budget:g}: " if c.budget is not None else "") + c.detail for c in rows)
        L.append(f"- Check {n} ({name}): **{outcome}** — {at or 'its arms are not run at any budget'}.")
    return L


def warning_lines(checks: list[Check]) -> list[str]:
    """The lines above the claims when a registered check fails, is undetermined or is not measured."""
    out = outcomes(checks)
    bad = [f"{CHECKS[k][0]} ({CHECKS[k][1]}: {o})" for k, o in out.items() if o in (FAIL, UNDETERMINED)]
    unmeasured = [f"{CHECKS[k][0]} ({CHECKS[k][1]})" for k, o in out.items() if o == NOT_MEASURED]
    L = []
    if bad:
        L += [
            f"> **The regime does not meet check{'s' if len(bad) > 1 else ''} {', '.join(bad)}**: the claims below "
            f"are about a regime that does not meet {'them' if len(bad) > 1 else 'it'}.",
            "",
        ]
    if out.get("drift_excess") == FAIL:
        L += [
            f"> **Check 4 failed: by the rule registered with it, the mechanism's tests ({', '.join(MECHANISM_TESTS)})"
            " are not informative in this regime.** Their verdicts below describe these runs; they are not "
            "evidence for or against the mechanism, whose precondition (a pre-norm boundary stream that drifts "
            "more under growth than under joint training) is absent here.",
            "",
        ]
    if unmeasured:
        L += [
            f"> Check{'s' if len(unmeasured) > 1 else ''} {', '.join(unmeasured)} registered but not measured: the "
            "claims below are not checked against "
            f"{'them' if len(unmeasured) > 1 else 'it'}.",
            "",
        ]
    return L


def regime_section(study: StudyConfig, checks: list[Check]) -> list[str]:
    """The report's "Regime checks" section (placed above the claims): a table of every reading, a line per check,
    and the warning when one fails or is undetermined. No registered check: no section."""
    if not checks:
        return []
    ladder = any(c.budget is not None for c in checks)
    L = [
        "## Regime checks",
        "",
        "Registered in the study file (`regime:`) before any run, judged here from this study's numbers: *pass*, "
        "*fail*, *undetermined* (the 95% interval over seeds decides neither way) or *not measured* (rules: "
        "normgrow/study/paper/regime.py)."
        + (
            f" Check 2 is judged at the largest budget ({study.budgets[-1]:g}), where students get closest to their "
            "teacher; checks 1 and 3 at every budget."
            if ladder
            else ""
        ),
        "",
        "| check | " + ("budget | " if ladder else "") + "what is measured | measured (95% interval) | threshold | "
        "outcome |",
        "|---|" + ("---|" if ladder else "") + "---|---|---|---|",
    ]
    for c in checks:
        n, name = CHECKS[c.key]
        budget = f"{c.budget:g} | " if ladder else ""
        L.append(
            f"| {n}. {name} | {budget}{_what_cell(study, c.key)} | {c.measured} | {c.threshold} | "
            f"{_outcome_cell(c.outcome)} |"
        )
    return L + [""] + _detail_lines(study, checks) + [""] + warning_lines(checks)


def headline_line(checks: list[Check]) -> list[str]:
    """The study's closing line on its checks (none registered: none)."""
    if not checks:
        return []
    return ["regime checks: " + "; ".join(f"{CHECKS[k][0]} {CHECKS[k][1]} {o}" for k, o in outcomes(checks).items())]


def regime_record(study: StudyConfig, checks: list[Check]) -> dict:
    """What regime.json holds: the thresholds as registered, each check's outcome and every reading's numbers."""
    return {
        "registered": {k: getattr(regime_of(study), k) for k in registered(regime_of(study))},
        "outcomes": outcomes(checks),
        "not_informative": list(MECHANISM_TESTS) if outcomes(checks).get("drift_excess") == FAIL else [],
        "readings": [{"check": c.number, "name": CHECKS[c.key][1], **dataclasses.asdict(c)} for c in checks],
    }


def write_regime(study: StudyConfig, checks: list[Check], out: Path) -> None:
    """regime.json beside report.md (only when the study registers a check)."""
    if checks:
        atomic.write_text(Path(out) / REGIME_FILE, json.dumps(regime_record(study, checks), indent=2) + "\n")
