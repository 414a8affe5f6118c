"""What a budget ladder says at the limit: every arm's curve fitted (fits.py), each contrast's asymptote ΔE and its
value at ten times the largest fitted budget, the claims that read them, and a prediction of a held-out budget
written — and hashed into the study's log — before that budget runs, then checked against it.

A ladder may name `holdout: B`, its largest budget: the fits use every other budget. Training a ladder with a
holdout runs the fitted budgets first; then, before any run of budget B starts, `write_prediction` fits them and
writes prediction.json (each arm's mean val/ce at B and each contrast's Δ at B, with prediction intervals that hold
together at 95%: Bonferroni over the m predictions, each at 1 − 0.05/m) once — created, never replaced — and
appends its sha256 and the time to study.log. A rerun reads the file it finds. The report checks the file against
that line (an edited prediction is not a prediction) and states coverage: each arm's observed mean over the
prediction's seeds inside its interval or not, each contrast the same.

    extrapolation   a gate, not a finding: contradicted when any prediction misses its observation; supported when
                    every one covers it and is sharp enough to have missed (`sharpness`: an arm's half-width below
                    the change it predicts from the largest fitted budget, a contrast's below the margin δ);
                    undetermined when all cover but some are that wide; kept out of Holm's family and the headline's
                    counts (a covered prediction is the absence of a miss, not a rejection); not tested without a
                    holdout, a prediction, or the held-out runs of every seed the prediction was made from
    limit claims    registered with `register_limit_claim` (the paper's are in paper/limits.py) and judged by the same
                    engine as a study's claims (p-values, Holm within the ladder's limit claims) from the centred
                    jackknife pseudo-values of their statistic; *not informative* unless `extrapolation` is supported:
                    a limit read from a law that has not predicted a budget it had not seen is a guess

Nothing here trains; the runner hands in each budget's kept records.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, cast

from normgrow import atomic
from normgrow.registry import Registry
from normgrow.study.config import StudyConfig
from normgrow.study.engine.fits import (
    Curves,
    Fit,
    Prediction,
    Resampled,
    arm_stat,
    asymptote,
    at_budget,
    complete_seeds,
    contrast_stat,
    fit_power_law,
    jackknife,
    mean_fit,
    predict,
    with_floor,
)
from normgrow.study.engine.stats import estimate
from normgrow.study.engine.verdicts import (
    CONTRADICTED,
    DESCRIPTIVE,
    NOT_TESTED,
    ROLES,
    SUPPORTED,
    UNDETERMINED,
    Claim,
    ClaimSpec,
    Evaluate,
    Roles,
    describe,
    evaluate_claims,
    not_tested,
    register_role,
)
from normgrow.study.record import RunRecord

PREDICTION, STUDY_LOG = "prediction.json", "study.log"
FAR = 10.0  # the extrapolated contrast is read at FAR × the largest fitted budget
FAMILY = 0.95  # the predictions' intervals hold together at this level
NOT_INFORMATIVE = "not informative"


def curves_of(by_budget: list[tuple[float, list[RunRecord]]]) -> dict[str, Curves]:
    """arm → seed → budget → final val/ce, from each budget's kept records (an arm's chosen rate, finished runs),
    each arm's curves carrying the floor its fits respect: the teacher's entropy on the validation set (the largest
    the runs record; every run of a ladder reads the same set), 0 where none is recorded."""
    out: dict[str, Curves] = {}
    floor = 0.0
    for budget, records in by_budget:
        for r in records:
            v = r.value("val_ce") if r.ok else None
            if v is not None:
                out.setdefault(r.arm, {}).setdefault(r.seed, {})[budget] = v
                floor = max(floor, r.value("val_teacher_entropy") or 0.0)
    return {arm: with_floor(c, floor) for arm, c in out.items()}


@dataclass
class ArmFit:
    """One arm's fit over the fitted budgets: of the seeds' mean curve (with jackknife pseudo-values of E, A, α and
    of its value at FAR × the largest budget), and of each seed alone."""

    seeds: list[int]
    fit: Fit
    E: Resampled
    A: Resampled
    alpha: Resampled
    far: Resampled
    per_seed: dict[int, Fit] = field(default_factory=dict)


@dataclass
class ContrastLimit:
    """A contrast (b − a) at the limit: ΔE, and Δ at FAR × the largest fitted budget, both over the paired seeds."""

    a: str
    b: str
    dE: Resampled
    far: Resampled


@dataclass
class Limits:
    """A ladder's fits: the fitted budgets, the held-out one, every arm's fit and every contrast's limit."""

    budgets: list[float]
    holdout: float | None
    curves: dict[str, Curves]
    arms: dict[str, ArmFit]
    contrasts: dict[str, ContrastLimit]

    @property
    def far_budget(self) -> float:
        return FAR * self.budgets[-1]


def fitted_budgets(study: StudyConfig) -> list[float]:
    return [b for b in study.budgets if b != study.holdout]


def fit_limits(study: StudyConfig, curves: dict[str, Curves]) -> Limits:
    """Every arm's fit and every contrast's limit over the study's fitted budgets (its holdout left out)."""
    budgets = fitted_budgets(study)
    far = FAR * budgets[-1]
    arms = {}
    for arm in study.arms:
        c = curves.get(arm, {})
        seeds = complete_seeds([c], budgets)
        arms[arm] = ArmFit(
            seeds,
            mean_fit(c, seeds, budgets) if seeds else Fit(why="no seed has every fitted budget"),
            jackknife(seeds, arm_stat(c, budgets, asymptote)),
            jackknife(seeds, arm_stat(c, budgets, lambda f: f.A)),
            jackknife(seeds, arm_stat(c, budgets, lambda f: f.alpha)),
            jackknife(seeds, arm_stat(c, budgets, at_budget(far))),
            {s: fit_power_law(budgets, [c[s][b] for b in budgets], getattr(c, "floor", 0.0)) for s in seeds},
        )
    contrasts = {}
    for name, (a, b) in study.contrasts.items():
        ca, cb = curves.get(a, {}), curves.get(b, {})
        seeds = complete_seeds([ca, cb], budgets)
        contrasts[name] = ContrastLimit(
            a,
            b,
            jackknife(seeds, contrast_stat(ca, cb, budgets, asymptote)),
            jackknife(seeds, contrast_stat(ca, cb, budgets, at_budget(far))),
        )
    return Limits(budgets, study.holdout, curves, arms, contrasts)


def combination(limits: Limits, terms: list[tuple[str, int]], what=asymptote) -> Resampled:
    """Σ sign × `what` (E by default) of the arms' mean-curve fits, over the seeds every arm has at every fitted
    budget, with its jackknife: a contrast's ΔE is [(a, −1), (b, +1)], an interaction has four terms."""
    curves = [limits.curves.get(arm, {}) for arm, _ in terms]
    seeds = complete_seeds(curves, limits.budgets)
    stats = [(sign, arm_stat(c, limits.budgets, what)) for c, (_, sign) in zip(curves, terms, strict=True)]

    def stat(ss: list[int]) -> float | None:
        vals = [(sign, st(ss)) for sign, st in stats]
        return None if any(v is None for _, v in vals) else sum(sign * v for sign, v in vals)

    return jackknife(seeds, stat)


def limit_claim(measure: str, r: Resampled, judge: Callable[[str, list[float]], Claim]) -> Claim:
    """A limit claim from its resampled statistic: `judge(measure, pseudo-values)` (a sign or equivalence claim)
    where there is an interval to judge, undetermined with the reason where there is none."""
    if len(r.values) >= 2:
        return judge(measure, r.values)
    value = "" if r.value is None else f" {r.value:+.4f}"
    return Claim(measure, verdict=UNDETERMINED, sentence=f"{measure}:{value} — undetermined: {r.why}.")


# ----------------------------------------------------------------------------- the prediction of the held-out budget


def _last_values(curves: list[Curves], seeds: list[int], budget: float) -> list[float]:
    """Per seed at `budget`: the arm's val/ce (one curve) or b − a (two)."""
    if len(curves) == 1:
        return [curves[0][s][budget] for s in seeds]
    return [curves[1][s][budget] - curves[0][s][budget] for s in seeds]


def predictions(study: StudyConfig, curves: dict[str, Curves]) -> dict[str, Any]:
    """The held-out budget's predictions from the fitted budgets (module docstring): per arm and per contrast the
    value, its interval at the Bonferroni level, and the seeds it is over; what could not be predicted, and why."""
    assert study.holdout is not None
    budgets, h = fitted_budgets(study), study.holdout
    todo: dict[str, tuple[str, list[Curves], Resampled]] = {}
    for arm in study.arms:
        c = curves.get(arm, {})
        seeds = complete_seeds([c], budgets)
        todo[f"arm:{arm}"] = (arm, [c], jackknife(seeds, arm_stat(c, budgets, at_budget(h))))
    for name, (a, b) in study.contrasts.items():
        ca, cb = curves.get(a, {}), curves.get(b, {})
        seeds = complete_seeds([ca, cb], budgets)
        todo[f"contrast:{name}"] = (name, [ca, cb], jackknife(seeds, contrast_stat(ca, cb, budgets, at_budget(h))))
    made: dict[str, Prediction] = {}
    missing: dict[str, str] = {}
    for key, (_, cs, r) in todo.items():
        p = predict(r, _last_values(cs, r.seeds, budgets[-1]), 0.95) if r.values else None
        if p is None:
            missing[key] = r.why or "fewer than two seeds"
        else:
            made[key] = p
    level = 1 - (1 - FAMILY) / max(1, len(made))
    out = {}
    for key in made:
        r = todo[key][2]
        q = predict(r, _last_values(todo[key][1], r.seeds, budgets[-1]), level)
        assert q is not None
        out[key] = {"value": q.value, "lo": q.lo, "hi": q.hi, "se_fit": q.se_fit, "sd_seed": q.sd_seed,
                    "seeds": r.seeds, "level": level}  # fmt: skip
    return {
        "holdout": h,
        "fitted_budgets": budgets,
        "family_level": FAMILY,
        "predictions": out,
        "not_predicted": missing,
        "inputs": {
            arm: {str(s): {f"{b:g}": v for b, v in sorted(c[s].items()) if b in budgets} for s in sorted(c)}
            for arm, c in sorted(curves.items())
        },  # fmt: skip
    }


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_prediction(study: StudyConfig, curves: dict[str, Curves], out: Path, started: list[str]) -> str:
    """prediction.json, created once (an existing one is kept: a rerun never rewrites it), with its sha256 and the
    time appended to study.log; `started` the held-out runs that had begun before it was written (recorded: their
    coverage is then not a test). Returns a line for the study's log."""
    path = out / PREDICTION
    if path.exists():
        return f"prediction of budget {study.holdout:g}: kept as written ({PREDICTION}, sha256 {_sha(path.read_bytes())[:12]})"
    record = predictions(study, curves)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    record = {"written": stamp, "started_before": sorted(started), **record}
    data = (json.dumps(record, indent=2, sort_keys=True) + "\n").encode()
    tmp = atomic.temp_path(path)
    tmp.write_bytes(data)
    try:
        os.link(tmp, path)  # created only if absent: two processes cannot both write it
    except FileExistsError:
        return f"prediction of budget {study.holdout:g}: kept as written by another process"
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
    when = BEFORE if not started else f"{AFTER} {len(started)} of its runs had begun: not a test"
    with open(out / STUDY_LOG, "a") as f:
        f.write(f"{stamp} {PREDICTION} sha256 {_sha(data)} (budget {study.holdout:g}, {when})\n")
    return f"prediction of budget {study.holdout:g} written {when}: {PREDICTION}, sha256 {_sha(data)[:12]}"


BEFORE, AFTER = "before its runs", "after"  # how study.log says when a prediction was written


def read_prediction(out: Path) -> tuple[dict | None, str]:
    """The prediction on disk and '' — or None and why it is not one: absent, unreadable, or not the file whose
    hash study.log recorded when it was written."""
    path = out / PREDICTION
    if not path.is_file():
        return None, f"no {PREDICTION}: nothing was predicted before the held-out budget ran"
    data = path.read_bytes()
    log = (out / STUDY_LOG).read_text() if (out / STUDY_LOG).is_file() else ""
    logged = {
        line.split()[3]: line for line in log.splitlines() if len(line.split()) > 3 and line.split()[1] == PREDICTION
    }  # every prediction this study wrote (one more each time the file was deleted and written again)
    if not logged:
        return None, f"{STUDY_LOG} records no hash of {PREDICTION}: it cannot be shown to predate the held-out runs"
    line = logged.get(_sha(data))
    if line is None:
        return None, f"{PREDICTION} is not a file whose sha256 {STUDY_LOG} recorded when it was written: edited since"
    if not line.rstrip().endswith(f"{BEFORE})"):
        return None, (
            f"{PREDICTION} was written ({line.split()[0]}) after runs of the budget it predicts had begun (its line "
            f"in {STUDY_LOG}): it was not written blind, so it tests nothing"
        )
    try:
        return json.loads(data), ""
    except ValueError:
        return None, f"{PREDICTION} is not valid JSON"


@dataclass(frozen=True)
class Check:
    """One prediction against its observation: the observed mean over the prediction's seeds (None while any of
    them has not finished the held-out budget)."""

    key: str
    lo: float
    hi: float
    value: float
    observed: float | None
    missing: list[int]
    tolerance: float  # the half-width below which the prediction could have failed (`sharpness`)

    @property
    def covered(self) -> bool | None:
        return None if self.observed is None else self.lo <= self.observed <= self.hi

    @property
    def sharp(self) -> bool:
        return (self.hi - self.lo) / 2 < self.tolerance


def sharpness(study: StudyConfig, prediction: dict, key: str) -> float:
    """The half-width below which a prediction says something the held-out budget could refute (rule registered in
    docs/LOG.md, session 16, before the first held-out runs finished): for an arm, the change it predicts from the
    largest fitted budget, |L̂(B_h) − mean L(B_max)| over its seeds; for a contrast, the claims' margin δ, the
    resolution contrasts are read at. Computed from the prediction's own recorded inputs."""
    kind, name = key.split(":", 1)
    if kind != "arm":
        return float(study.claims.get("margin") or 0.0)
    p, last = prediction["predictions"][key], f"{prediction['fitted_budgets'][-1]:g}"
    values = [prediction["inputs"][name][str(seed)][last] for seed in p["seeds"]]
    return abs(p["value"] - sum(values) / len(values))


def coverage(study: StudyConfig, prediction: dict, curves: dict[str, Curves]) -> list[Check]:
    """Every prediction checked against the held-out budget's runs."""
    h, out = prediction["holdout"], []
    for key, p in prediction["predictions"].items():
        kind, name = key.split(":", 1)
        arms = [name] if kind == "arm" else list(study.contrasts.get(name, ("", "")))
        cs = [curves.get(a, {}) for a in arms]
        missing = [s for s in p["seeds"] if not all(h in c.get(s, {}) for c in cs)]
        obs = None if missing or not arms[0] else sum(_last_values(cs, p["seeds"], h)) / len(p["seeds"])
        out.append(Check(key, p["lo"], p["hi"], p["value"], obs, missing, sharpness(study, prediction, key)))
    return out


def extrapolation(study: StudyConfig, out: Path | None, curves: dict[str, Curves]) -> tuple[Claim, list[Check]]:
    """The gate: some prediction missed (contradicted), every one covered and sharp (supported), all covered but some
    too wide to have missed (undetermined), or why it is not tested."""
    if study.holdout is None:
        return not_tested("the ladder names no held-out budget (holdout)"), []
    prediction, why = read_prediction(out) if out is not None else (None, "no study directory")
    if prediction is None:
        return not_tested(why), []
    if prediction.get("started_before"):
        return not_tested(f"{PREDICTION} was written after held-out runs had started "
                          f"({', '.join(prediction['started_before'])})"), []  # fmt: skip
    if prediction.get("holdout") != study.holdout:
        return not_tested(
            f"{PREDICTION} predicts budget {prediction.get('holdout')}, not the holdout {study.holdout:g}"
        ), []
    checks = coverage(study, prediction, curves)
    if not checks:
        return not_tested("the fitted budgets predicted nothing (every fit failed or had one seed)"), []
    waiting = [c for c in checks if c.observed is None]
    if waiting:
        return not_tested(f"the held-out budget has not finished every predicted seed ({waiting[0].key}: seeds "
                          f"{waiting[0].missing})"), checks  # fmt: skip
    missed, wide = [c for c in checks if not c.covered], [c for c in checks if not c.sharp]
    verdict = CONTRADICTED if missed else UNDETERMINED if wide else SUPPORTED
    level = prediction["predictions"][checks[0].key]["level"]
    what = (f"{len(missed)} of {len(checks)} predictions of budget {study.holdout:g} miss their observations "
            f"({', '.join(c.key for c in missed)})" if missed else
            f"all {len(checks)} predictions of budget {study.holdout:g} cover their observations")  # fmt: skip
    if wide and not missed:
        what += (f", but {len(wide)} of them ({', '.join(c.key for c in wide)}) are wider than the change they "
                 "predict (an arm) or the margin δ (a contrast): the held-out budget could not have refuted them")  # fmt: skip
    sentence = f"extrapolation: {what} (intervals at {level:.4f} each, {FAMILY:.0%} together) — {verdict}."
    return Claim("predictions of the held-out budget covered", verdict=verdict, sentence=sentence, kind="gate"), checks


# ----------------------------------------------------------------------------- the limit claims

LIMIT_CLAIMS: Registry[ClaimSpec] = Registry("limit claim", field="claims.limit")


LimitEvaluate = Callable[[Roles, "Limits"], Claim]


def register_limit_claim(
    key: str, paper: str, evaluate: LimitEvaluate, roles: tuple[str, ...], replace: bool = False
) -> ClaimSpec:
    """A claim a ladder reads from its fits: `evaluate(roles, limits)` with `limits` a Limits (build the Claim with
    `limit_claim` over a Resampled, e.g. of `combination`); `roles` are registered roles, or new one-arm roles."""
    for role in roles:
        if role not in ROLES:
            register_role(role, f"Arm read by the limit claim `{key}`.")
    spec = ClaimSpec(key, paper, cast(Evaluate, evaluate), tuple(roles), ("val_ce",))
    return LIMIT_CLAIMS.register(key, spec, replace=replace)


def limit_claims(study: StudyConfig, limits: Limits, gate: Claim) -> list[Claim]:
    """The registered limit claims, descriptive: each number with its interval and what its rule alone would read,
    no verdict (outside Holm and the headline's counts). A fitted asymptote is the limit of one ladder's recipe under
    a three-parameter law, and a law extrapolated is evidence only of the trend it predicted (`extrapolation`)."""
    claims = evaluate_claims(study.claims, limits, registry=LIMIT_CLAIMS)  # type: ignore[arg-type]
    return [
        c
        if c.verdict == NOT_TESTED or c.n < 2  # nothing read from an interval
        else replace(
            c,
            verdict=DESCRIPTIVE,
            holm=DESCRIPTIVE,
            kind="descriptive",
            sentence=f"{c.sentence} Descriptive (extrapolation {gate.verdict}); its rule alone would read {c.verdict}.",
        )
        for c in claims
    ]


# ----------------------------------------------------------------------------- the report's section


def _interval(r: Resampled, nd: int = 4) -> str:
    if r.value is None:
        return f"— ({r.why})"
    if len(r.values) < 2:
        return f"{r.value:+.{nd}f} (no interval: {r.why})"
    return describe(estimate(r.values), nd)


def _plain(r: Resampled, nd: int = 4) -> str:
    """An arm's parameter: value [lo, hi] without signs."""
    if r.value is None:
        return "—"
    if len(r.values) < 2:
        return f"{r.value:.{nd}g}"
    e = estimate(r.values)
    return f"{r.value:.{nd}g} [{e.lo:.{nd}g}, {e.hi:.{nd}g}]"


DEFINITION = (
    "Each arm's final val/ce against the budget scale B (a multiple of the study's budget), L(B) = E + A·B^−α, "
    "fitted to the mean over seeds at each fitted budget (at least four) by least squares on log residuals with "
    "Huber's loss (δ = 1.345 × the pooled relative standard error of a budget's mean over seeds; 0.001 with one "
    "seed), from several starting points, E bounded in [H(p_T), the smallest observed L] — val/ce = H(p_T) + KL "
    "cannot go below the teacher's entropy on the validation set — and α in [0, 4]; a fit whose E or α ends on a "
    "bound has no numbers. *Lack of fit*: the F test of the residuals against the seeds' pure error (its p; bold "
    "below 0.05: the law misses the points by more than their noise). E, ΔE and the values far out are descriptive. Intervals (95%) are the delete-one jackknife over seeds with a t quantile, "
    "a seed being the unit of every arm it runs (contrasts paired). E is where the curve goes as the budget grows "
    'under this ladder\'s recipe ("Budgets", above: every stage scaled, or continued training at full depth): the '
    "limit of that recipe, not a property of the placement alone (rules: normgrow/study/engine/fits.py, limits.py)."
)


def lack_cell(f: Fit) -> str:
    """The lack-of-fit test's cell: F (dof), p, bold where it flags; why there is none."""
    if f.lack is None:
        return "— (one seed, or no degree of freedom)"
    k = f.lack
    text = f"F = {k.F:.2f} ({k.dof[0]}, {k.dof[1]}), p = {k.p:.3g}"
    return f"**{text}**" if k.flagged else text


def limits_lines(
    limits: Limits, gate: Claim, checks: list[Check], claims: list[Claim], figures: dict[str, str] | None = None
) -> list[str]:
    """The ladder report's section on the limit: the fits, each contrast's ΔE and far value, the held-out budget's
    coverage, the gate and the limit claims."""
    far = f"{limits.far_budget:g}"
    held = f"; held out: {limits.holdout:g}" if limits.holdout is not None else "; no held-out budget"
    L = ["## At the limit: fitted budget curves", "",
         f"Fitted budgets: {', '.join(f'{b:g}' for b in limits.budgets)}{held}. {DEFINITION}", "",
         f"| arm | seeds | E | A | α | L̂ at budget {far} | lack of fit | per-seed E | note |",
         "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for arm, f in limits.arms.items():
        per = ", ".join(f"{p.E:.4f}" if p.ok and p.E is not None else "—" for p in f.per_seed.values()) or "—"
        note = f.fit.why or "; ".join(f"seed {s}: {p.why}" for s, p in f.per_seed.items() if not p.ok) or ""
        L.append(f"| {arm} | {len(f.seeds)} | {_plain(f.E)} | {_plain(f.A)} | {_plain(f.alpha, 3)} | "
                 f"{_plain(f.far)} | {lack_cell(f.fit)} | {per} | {note} |")  # fmt: skip
    L += ["", f"| contrast | ΔE = E[b] − E[a] | Δ at budget {far} |", "|---|---|---|"]
    for name, cl in limits.contrasts.items():
        L.append(f"| {name} ({cl.b} − {cl.a}) | {_interval(cl.dE)} | {_interval(cl.far)} |")
    if figures:
        L += [""] + [f"![{k}]({v})" for k, v in figures.items()]
    L += ["", "### The held-out budget", ""]
    if checks:
        L += ["| prediction | predicted [interval] | half-width | could have failed below | observed (mean over the "
              "prediction's seeds) | covered |", "|---|---|---|---|---|---|"]  # fmt: skip
        for chk in checks:
            obs = "not yet run" if chk.observed is None else f"{chk.observed:+.4f}"
            cov = "—" if chk.covered is None else "yes" if chk.covered else "**no**"
            half, sharp = (chk.hi - chk.lo) / 2, "" if chk.sharp else " (too wide)"
            L.append(f"| {chk.key} | {chk.value:+.4f} [{chk.lo:+.4f}, {chk.hi:+.4f}] | {half:.4f}{sharp} | "
                     f"{chk.tolerance:.4f} | {obs} | {cov} |")  # fmt: skip
        L.append("")
    L += [f"- **extrapolation: {gate.verdict}** — {gate.sentence}", ""]
    L += ["### Claims at the limit", "",
          "Descriptive: each number with its jackknife interval and what the study's rule alone would read; no "
          "verdict, outside Holm's family and the headline (a fitted asymptote is the limit of this recipe under a "
          "three-parameter law, not a measurement).", "",
          "| claim | the paper says | verdict | Holm | reading |", "|---|---|---|---|---|"]  # fmt: skip
    for c in claims:
        L.append(f"| {c.key} | {c.paper} | **{c.verdict}** | {c.holm} | {c.sentence} |")
    return L + [""]


def limits_headline(gate: Claim, claims: list[Claim]) -> list[str]:
    """The headline's lines: the gate and every tested limit claim's verdict."""
    if gate.verdict == NOT_TESTED and all(c.verdict == NOT_TESTED for c in claims):
        return []
    read = [c.key for c in claims if c.kind == "descriptive"]
    return [f"at the limit: extrapolation {gate.verdict}" + (f"; {', '.join(read)} descriptive" if read else "")]
