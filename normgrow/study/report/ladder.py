"""Budget ladders: a study's arms and seeds at several budget scales, read as "at budget B the contrast is X, and
its trend over budget is T".

A study file may add

    budget_scale: 1          # the reference budget: its report is the study's main one
    budgets: [0.5, 1, 2]     # absolute budget scales, ascending, containing budget_scale

Every budget is a complete study of its own (`budgets/<label>/`, label `b0.5`, `b1`, …: study.yaml, configs,
runs, logs, results.csv, report.md — `normgrow report budgets/<label>` works on it), planned like the points of
a sweep over budget_scale (sweep.py, jobs.py: one launch queue for every budget's jobs). An arm may run at some
budgets only (`arms.X.budgets`, sweep.rung_study): a budget without it has none of the contrasts, pairs and claims
roles that need it, and its rows below say "not run at this budget"; ρ needs the contrast at both budgets.

Why not "doubling the budget moves no contrast beyond its half-width": a contrast between two arms that both
approach their teacher shrinks with the budget, so that check compares a drift with seed noise and fails by
design. The ladder measures the drift instead. Per contrast (a, b) and budget B, from the rung's results.csv:

    Δ(B)          b − a of final val/ce, paired over the seeds both arms finished, mean ± 95% t half-width
    KL(B)         the mean over the two arms of their mean final val/kl (nats/token): how far they are from the
                  teacher; Δ / KL is the contrast as a share of that distance
    tokens/param  arm a's mean training tokens over its finished seeds / the non-embedding parameters of its
                  full-depth student (sweep.non_embedding_params, the blocks counted on the meta device)
    ρ(B → B')     the retention ratio Δ(B') / Δ(B) between successive budgets, signed, with Fieller's 95% interval
                  over the seeds both budgets have (per-seed differences paired by seed, their covariance kept;
                  stats.fieller_ratio): 1 = the contrast keeps all of itself, 0 = it vanishes, < 0 = it reverses

Each contrast is labelled from ρ of the last pair (the two largest budgets) by `retention_label`: reversing (ρ's
upper bound < 0), fading (upper bound < 1), growing (lower bound > 1), persistent (the interval includes 1 and lies
within [1/(1+m), 1+m], m = PERSIST_MARGIN = 0.5), undetermined otherwise — an interval containing both 0 and 1, one
that includes 1 but reaches beyond that band, or none (one seed; or Δ(B) not
resolved from 0, when Fieller's interval is unbounded). The same reading compares two studies
(`normgrow report B --against A`, compare.py). Nothing here reads files: runner.py hands in each rung's rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

from normgrow.config import ModelConfig, RunConfig
from normgrow.study.config import StudyConfig
from normgrow.study.engine.stats import Contrast, fieller_ratio
from normgrow.study.engine.verdicts import MARGIN, NOT_TESTED, Claim, claim_arms, claims_reading
from normgrow.study.record import RunRecord
from normgrow.study.report.contrasts import contrast
from normgrow.study.sections import arms_at, budget_label
from normgrow.study.sweep import PAPER_TOKENS_PER_PARAM, Point, non_embedding_params

REVERSING, FADING, PERSISTENT, GROWING, UNDETERMINED = "reversing", "fading", "persistent", "growing", "undetermined"

PERSIST_MARGIN = 0.5  # persistent: ρ's whole interval within [1/(1+m), 1+m] = [0.67, 1.5] (fixed in session 8's LOG)
PERSIST_LO, PERSIST_HI = 1 / (1 + PERSIST_MARGIN), 1 + PERSIST_MARGIN
MEANING = {
    REVERSING: "the contrast reverses as the budget grows (ρ's upper bound < 0)",
    FADING: "it keeps less than all of itself as the budget grows (ρ's upper bound < 1)",
    PERSISTENT: f"it keeps about all of itself (ρ's interval includes 1 and lies within [{PERSIST_LO:.2f}, "
    f"{PERSIST_HI:.2f}])",
    GROWING: "it grows with the budget (ρ's lower bound > 1)",
    UNDETERMINED: "ρ's 95% interval contains both 0 and 1",
}
WIDE = (
    f"ρ's 95% interval includes 1 but reaches beyond [{PERSIST_LO:.2f}, {PERSIST_HI:.2f}]: fading, persistent and "
    "growing are not told apart"
)


def retention_label(lo: float | None, hi: float | None) -> str:
    """The trend of a contrast from the 95% interval [lo, hi] of its retention ratio ρ: reversing when hi < 0,
    fading when hi < 1 (and not reversing), growing when lo > 1, persistent when lo ≤ 1 ≤ hi and the whole interval
    lies within [1/(1+m), 1+m] (m = PERSIST_MARGIN: an interval that includes 1 but also ρ = 0.3 admits fading as much
    as persistence), undetermined otherwise (lo ≤ 0 and hi ≥ 1, an interval wider than that band, or no interval)."""
    if lo is None or hi is None:
        return UNDETERMINED
    if hi < 0:
        return REVERSING
    if hi < 1:
        return FADING
    if lo > 1:
        return GROWING
    if PERSIST_LO <= lo and hi <= PERSIST_HI:
        return PERSISTENT
    return UNDETERMINED


@dataclass(frozen=True)
class Retention:
    """ρ of one contrast between two budgets: Fieller's ratio and interval, the seeds, its label and why it has no
    interval where it has none."""

    ratio: float | None
    lo: float | None
    hi: float | None
    n: int
    why: str
    seeds: list[int]
    label: str


def retention(c_from: Contrast, c_to: Contrast) -> Retention:
    """ρ = Δ(to) / Δ(from) of one contrast between two budgets (or two studies), from their paired contrasts:
    Fieller's 95% interval over the seeds both have, its label, and why there is no interval where there is none."""
    seeds = sorted(set(c_from.seeds) & set(c_to.seeds))
    r = fieller_ratio([c_to.at(s) for s in seeds], [c_from.at(s) for s in seeds])
    why = r.why
    if r.ratio is None and seeds:
        why = "the denominator Δ (of the smaller budget, or the base study) is 0"
    elif why == "the denominator's 95% interval contains 0":
        why = "the denominator Δ (of the smaller budget, or the base study) is not resolved from 0: its 95% interval contains 0, so Fieller's is unbounded"
    elif why == "no seeds":
        why = "no seed finished both arms at both budgets"
    elif why == "one seed":
        why = "one seed at both budgets: no interval"
    elif r.lo is not None and retention_label(r.lo, r.hi) == UNDETERMINED:
        why = MEANING[UNDETERMINED] if r.lo <= 0 else WIDE
    return Retention(r.ratio, r.lo, r.hi, r.n, why, seeds, retention_label(r.lo, r.hi))


@dataclass
class Rung:
    """One budget of a ladder: its contrasts and the numbers read beside them, and its claims' verdicts."""

    point: Point  # label b<scale>, coords (scale,)
    arms: list[str] = field(default_factory=list)  # the arms run at this budget (ArmConfig.budgets)
    contrasts: dict[str, Contrast] = field(default_factory=dict)  # none where the contrast is not run
    kl: dict[str, float | None] = field(default_factory=dict)  # contrast → mean val/kl of its two arms
    tokens_per_param: dict[str, float | None] = field(default_factory=dict)  # contrast → arm a's tokens / N
    claims: list[Claim] = field(default_factory=list)

    @property
    def budget(self) -> float:
        return self.point.coords[0]


def arm_mean(records: list[RunRecord], arm: str, key: str) -> float | None:
    """Mean of a results.csv column over an arm's finished runs that record it (None without any)."""
    vals = [v for r in records if r.arm == arm and r.ok and (v := r.value(key)) is not None]
    return sum(vals) / len(vals) if vals else None


def ladder_rung(
    study: StudyConfig, p: Point, records: list[RunRecord], models: dict[str, ModelConfig], claims: list[Claim]
) -> Rung:
    """The numbers of one budget from its kept records (each arm's selected learning rate), the full-depth student of
    every arm (`models`) and the rung's claims."""
    rung = Rung(p, arms_at(study, p.coords[0]), claims=list(claims))
    for name, (a, b) in study.contrasts.items():
        if a not in rung.arms or b not in rung.arms:
            continue  # not run at this budget: nothing to compute
        rung.contrasts[name] = contrast(records, a, b)
        kls = [arm_mean(records, arm, "val_kl") for arm in (a, b)]
        rung.kl[name] = None if kls[0] is None or kls[1] is None else (kls[0] + kls[1]) / 2
        tokens = arm_mean(records, a, "tokens")
        rung.tokens_per_param[name] = (
            None if tokens is None or a not in models else tokens / non_embedding_params(models[a])
        )
    return rung


# ----------------------------------------------------------------------------- the ladder's report


def _delta(c: Contrast) -> str:
    e = c.est
    if e.mean is None:
        return "no paired seeds"
    return f"{e.mean:+.4f}" + (f" ± {e.half:.4f}" if e.half is not None else " (one seed, no interval)")


def _rho(r: Retention) -> str:
    if r.ratio is None:
        return "undefined"
    return f"{r.ratio:+.2f}" + (f" [{r.lo:+.2f}, {r.hi:+.2f}]" if r.lo is not None else "")


def reference(study: StudyConfig, rungs: list[Rung]) -> Rung:
    """The rung at the study's budget_scale (validation makes it one of the budgets)."""
    return next(r for r in rungs if r.budget == study.budget_scale)


def not_run(name: str, rungs: list[Rung]) -> str:
    """'not run at budget 0.5 (and 1)': the budgets among `rungs` without the contrast `name` ('' if none)."""
    missing = [f"{r.budget:g}" for r in rungs if name not in r.contrasts]
    return f"not run at budget {' and '.join(missing)}" if missing else ""


def sentence(study: StudyConfig, name: str, rungs: list[Rung]) -> str:
    """One sentence from the numbers: the contrast at the reference budget, and its retention ratio and label from
    the second-largest budget to the largest (undetermined where the contrast is not run at one of them)."""
    a, b = study.contrasts[name]
    ref, (lo, hi) = reference(study, rungs), rungs[-2:]
    c = ref.contrasts.get(name)
    ran = [
        f"{_delta(r.contrasts[name])} at budget {r.budget:g}"
        for r in rungs
        if name in r.contrasts and r.contrasts[name].est.mean is not None
    ]
    head = f"{name} ({b} − {a}) " + (
        f"is {not_run(name, [ref])}" + (f"; it is {', '.join(ran)}" if ran else "")
        if c is None
        else f"is {_delta(c)} at budget {ref.budget:g}"
        if c.est.mean is not None
        else f"has no paired seeds at budget {ref.budget:g}"
    )
    step = f"from budget {lo.budget:g} to {hi.budget:g}"
    if not_run(name, [lo, hi]):
        return f"{head}; {step} its retention ratio is not computed ({not_run(name, [lo, hi])}): undetermined."
    r = retention(lo.contrasts[name], hi.contrasts[name])
    if r.ratio is None:
        return f"{head}; {step} its retention ratio is undefined ({r.why}): undetermined."
    if r.lo is None:
        return f"{head}; {step} it keeps ρ = {r.ratio:+.2f} of itself, with no interval ({r.why}): undetermined."
    meaning = WIDE if r.label == UNDETERMINED and r.lo > 0 else MEANING[r.label]
    return f"{head}; {step} it keeps ρ = {_rho(r)} of itself (Fieller 95%, {r.n} seeds): {r.label} — {meaning}."


def ladder_headline(study: StudyConfig, rungs: list[Rung]) -> list[str]:
    """One generated sentence per contrast, each naming its label (the end of `normgrow study`, the report's top)."""
    return [sentence(study, name, rungs) for name in study.contrasts]


def interaction_section(rungs: list[Rung]) -> list[str]:
    """The `interaction` claim — (grow gap) − (joint gap), paired over seeds — at every budget of the ladder."""
    rows = [(r.budget, c) for r in rungs for c in r.claims if c.key == "interaction" and c.verdict != NOT_TESTED]
    if not rows:
        return []
    L = [
        "## The interaction at every budget",
        "",
        "(post-grow − pre-grow) − (post-joint − pre-joint) of the final val/ce, paired over seeds; the paper's finding "
        "is that it lies below −δ (post gains more under growth).",
        "",
        "| budget | interaction (mean, 95% CI) | seeds | verdict | Holm-adjusted |",
        "|---|---|---|---|---|",
    ]
    for b, c in rows:
        ci = "one seed" if c.est.lo is None or c.est.hi is None else f"[{c.est.lo:+.4f}, {c.est.hi:+.4f}]"
        L.append(f"| {b:g} | {c.est.mean:+.4f} {ci} | {c.est.n} | {c.verdict} | {c.holm} |")
    return L + [""]


def _claim(rung: Rung, key: str) -> Claim | None:
    return next((c for c in rung.claims if c.key == key and c.verdict != NOT_TESTED), None)


def _interval(c: Claim) -> str:
    e = c.est
    if e.mean is None:
        return "no paired seeds"
    return f"{e.mean:+.4f}" + ("" if e.lo is None or e.hi is None else f" [{e.lo:+.4f}, {e.hi:+.4f}]")


def coordinate_section(rungs: list[Rung], margin: float) -> list[str]:
    """The paper's coordinate: the grow gap read at the first budget where the joint gap enters ±δ — the joint_gap
    claim (an equivalence claim: its 95% interval within ±δ) supported —, the paper's own situation (a joint gap of
    about zero beside a grow gap in post's favour); and each budget's tokens per non-embedding parameter against the
    paper's. A ladder whose joint gap never enters ±δ says so, with the budget where its mean alone first does. A
    budget whose interval lies within ±δ but whose joint_gap verdict is not supported (its rates did not hold) is
    marked, and not read as the coordinate."""
    rows = [(r, j, g) for r in rungs if (j := _claim(r, "joint_gap")) and (g := _claim(r, "grow_gap"))]
    if not rows:
        return []
    L = [
        "## The paper's coordinate",
        "",
        "The paper reads its grow gap where the joint gap is about zero, at "
        f"{PAPER_TOKENS_PER_PARAM:.2f} training tokens per non-embedding parameter of its student. Here: the grow gap "
        "at the first budget whose joint gap enters ±δ (the joint_gap claim supported: its 95% interval within ±δ).",
        "",
        "| budget | tokens / parameter (joint arm) | joint gap (95% CI) | within ±δ | grow gap (95% CI) | grow_gap |",
        "|---|---|---|---|---|---|",
    ]
    for r, j, g in rows:
        tpp = r.tokens_per_param.get("joint_gap") or r.tokens_per_param.get("grow_gap")
        within = j.est.lo is not None and j.est.hi is not None and -margin < j.est.lo and j.est.hi < margin
        inside = "mean only" if not within and _mean_inside(j, margin) else "no" if not within else "yes"
        if within and j.verdict != "supported":  # e.g. "undetermined (learning rate)": not read as the coordinate
            inside += f" ({j.verdict})"
        t = "—" if tpp is None else f"{tpp:.2f}"
        L.append(f"| {r.budget:g} | {t} | {_interval(j)} | {inside} | {_interval(g)} | {g.verdict} |")
    at = next(((r, g) for r, j, g in rows if j.verdict == "supported"), None)
    if at is not None:
        r, g = at
        L += ["", f"At budget {r.budget:g}, the first where the joint gap enters ±δ, the grow gap is {_interval(g)}: "
              f"**{g.verdict}** (Holm-adjusted: {g.holm})."]  # fmt: skip
    else:
        mean_at = next((r for r, j, _ in rows if _mean_inside(j, margin)), None)
        L += ["", "The joint gap's interval enters ±δ at no budget of this ladder: the paper's coordinate is not "
              "reached, and no grow gap is read there" + ("" if mean_at is None else
              f" (its mean alone first lies within ±δ at budget {mean_at.budget:g})") + "."]  # fmt: skip
    return L + [""]


def _mean_inside(c: Claim, margin: float) -> bool:
    """Is a joint_gap claim's mean within ±δ?"""
    return c.est.mean is not None and abs(c.est.mean) < margin


def _verdicts(claims: list[Claim], keys: list[str]) -> str:
    by_key = {c.key: c for c in claims}
    out = [f"{k} **{by_key[k].verdict}**" for k in keys if k in by_key and by_key[k].verdict != NOT_TESTED]
    return ", ".join(out) or "—"


def contrast_section(study: StudyConfig, name: str, rungs: list[Rung]) -> list[str]:
    """A contrast's table over the budgets and its retention ratios between successive budgets."""
    a, b = study.contrasts[name]
    readers = claims_reading(study.claims, a, b)
    L = [
        f"## {name} ({b} − {a})",
        "",
        "| budget | Δ = b − a (mean ± 95% CI) | seeds | claims reading it | mean val/kl of a, b | Δ / KL | "
        "tokens / non-embedding parameter |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rungs:
        if name not in r.contrasts:
            L.append(f"| {r.budget:g} | not run at this budget | — | — | — | — | — |")
            continue
        c, kl, tpp = r.contrasts[name], r.kl[name], r.tokens_per_param[name]
        share = f"{c.est.mean / kl:+.1%}" if c.est.mean is not None and kl else "—"
        L.append(
            f"| {r.budget:g} | {_delta(c)} | {c.est.n} | {_verdicts(r.claims, readers)} | "
            f"{'—' if kl is None else f'{kl:.4f}'} | {share} | {'—' if tpp is None else f'{tpp:.3g}'} |"
        )
    L += ["", "| from → to | ρ = Δ(to) / Δ(from) [95% Fieller] | seeds | label |", "|---|---|---|---|"]
    for lo, hi in zip(rungs, rungs[1:], strict=False):
        if not_run(name, [lo, hi]):  # ρ needs the contrast at both budgets
            L.append(f"| {lo.budget:g} → {hi.budget:g} | not computed: {not_run(name, [lo, hi])} | — | — |")
            continue
        ret = retention(lo.contrasts[name], hi.contrasts[name])
        note = f" — no interval: {ret.why}" if ret.lo is None else ""
        L.append(f"| {lo.budget:g} → {hi.budget:g} | {_rho(ret)}{note} | {ret.n} | {ret.label} |")
    return L + [""]


def claims_by_budget(rungs: list[Rung], study=None) -> list[str]:
    """Every claim tested at some budget, its verdict at each (Holm-adjusted within the rung where that differs);
    "not run at this budget" where an arm it reads (by `study`'s roles) is not run there."""
    keys = [
        c.key
        for c in rungs[0].claims
        if any(c.key == d.key and d.verdict != NOT_TESTED for r in rungs for d in r.claims)
    ]
    if not keys:
        return ["## Claims by budget", "", "No claim is tested at any budget (the study names no claims roles).", ""]
    L = [
        "## Claims by budget",
        "",
        "Each budget's verdicts (95%; in parentheses the Holm-adjusted verdict across that budget's claims where it "
        "differs). A verdict that changes with the budget is a reading of that budget, not of the placements.",
        "",
        "| claim | " + " | ".join(f"{r.budget:g}" for r in rungs) + " |",
        "|---|" + "---|" * len(rungs),
    ]
    for k in keys:
        cells = []
        for r in rungs:
            c = next((d for d in r.claims if d.key == k), None)
            if study is not None and not claim_arms(study.claims, k) <= set(r.arms):
                cells.append("not run at this budget")
                continue
            cells.append("—" if c is None else c.verdict + (f" (Holm: {c.holm})" if c.holm != c.verdict else ""))
        L.append(f"| {k} | " + " | ".join(cells) + " |")
    return L + [""]


def reference_title(study: StudyConfig) -> str:
    """The heading of the reference budget's claims section in the ladder's report, linking that budget's report."""
    ref = budget_label(study.budget_scale)
    return f"## The reference budget's claims (budget {study.budget_scale:g}: [budgets/{ref}/report.md](budgets/{ref}/report.md))"


def restricted(study: StudyConfig) -> str:
    """' (`x` only at budget 1; …)': the arms run at some budgets only ('' when every arm runs at every budget)."""
    parts = [
        f"`{n}` only at budget{'s' if len(a.budgets) > 1 else ''} {', '.join(f'{b:g}' for b in a.budgets)}"
        for n, a in study.arms.items()
        if a.budgets
    ]
    return f" ({'; '.join(parts)})" if parts else ""


def recipe_line(study: StudyConfig) -> str:
    """How the ladder's budgets were trained (`ladder`), in words."""
    if study.ladder == "rungs":
        return (
            "Budgets: each budget scales every stage and the learning-rate warmup of every arm (`ladder: rungs`), so "
            "a grown arm spends the same share of its tokens at each depth at every budget."
        )
    how = (
        "trained once per arm × seed as a trunk (`trunks/`) that stops at the largest budget's decay start, each "
        "budget a decay branch resumed from the trunk's checkpoint at its own decay start — equal, bit for bit, to "
        "training it directly (`ladder: branches`)"
        if study.ladder == "branches"
        else "each budget trained from step 0 (`ladder: direct`)"
    )
    return (
        f"Budgets: continued training at full depth — the warmup and every stage before the last at their lengths at "
        f"the smallest budget ({study.budgets[0]:g}), the last (full-depth) stage stretched to the budget's total "
        f"tokens, a warmup–stable–decay schedule (the decay over the last train.decay_fraction of each budget); "
        f"matched arms are matched per budget in their last stage. {how[0].upper() + how[1:]}. The fits below read "
        "this curve: the limit of training the grown student at full depth for longer."
    )


def ladder_report_lines(
    study: StudyConfig,
    rungs: list[Rung],
    reference_claims: list[str],
    regime: Sequence[str] = (),
    dose: Sequence[str] = (),
    limits: Sequence[str] = (),
    multiplier: Sequence[str] = (),
    opening: Sequence[str] = (),
) -> list[str]:
    """report.md of a ladder: the regime checks (`regime`, regime.py's section, first), the headline, per contrast its
    table over the budgets and its retention ratios, the claims by budget, the dose–response section over every
    budget (`dose`: report.dose_section's lines, drawn by the runner), the fits' section (`limits`: limits.py's
    lines) and the reference budget's claims section
    (`reference_claims`, as its own report prints it, under its own heading)."""
    ref = budget_label(study.budget_scale)
    L = [
        f"# Budget ladder `{study.name}`",
        "",
        *opening,
        f"{len(study.arms)} arms{restricted(study)} × {len(study.seeds)} seeds at budget scales "
        f"{', '.join(f'{b:g}' for b in study.budgets)}; base preset `{study.base}`. Each budget is a study of its own "
        "(`budgets/<label>/report.md`); the "
        f"reference budget is {study.budget_scale:g} ([budgets/{ref}/report.md](budgets/{ref}/report.md)), the "
        "study's main report. Contrasts Δ are b − a of the final val/ce, paired over seeds, with 95% t-intervals. "
        "ρ = Δ(B') / Δ(B) is a contrast's retention ratio between successive budgets, with Fieller's 95% interval "
        "over the seeds both have; each contrast's label comes from its last pair: reversing (ρ's upper bound < 0), "
        f"fading (< 1), persistent (the interval includes 1 and lies within [{PERSIST_LO:.2f}, {PERSIST_HI:.2f}]), "
        "growing (lower bound > 1), "
        "undetermined otherwise (rules: normgrow/study/report/ladder.py).",
        "",
        recipe_line(study),
        "",
    ]
    L += list(regime)  # above every reading of the contrasts and claims
    L += ["## Headline", ""]
    L += [f"- {line}" for line in ladder_headline(study, rungs)] + [""]
    L += interaction_section(rungs)
    L += list(multiplier)  # the compute multiplier per curriculum and budget (multiplier.py)
    L += coordinate_section(rungs, float(study.claims.get("margin", MARGIN.default)))
    for name in study.contrasts:
        L += contrast_section(study, name, rungs)
    L += claims_by_budget(rungs, study)
    L += list(limits)
    L += list(dose)
    L += reference_claims
    L += [
        "## Reproduce",
        "",
        "`normgrow study DIR/study.yaml -o DIR` reruns every missing run of every budget; adding "
        + (
            "budgets to `budgets` reuses the finished ones."
            if study.ladder != "branches"
            else "budgets to a branch ladder is refused once its trunks ran (their checkpoints are fixed by the budgets)."
        ),
    ]
    return L


# ----------------------------------------------------------------------------- the curriculum's shape per budget

CONTINUED = "continued training at full depth"


def below_full_depth(cfg: RunConfig) -> float | None:
    """The share of a run's planned training tokens trained below its full depth (None: one stage, a joint run)."""
    stages = cfg.curriculum.stages
    if len(stages) < 2:
        return None
    full, total = max(s.n_layer for s in stages), sum(s.tokens for s in stages)
    return sum(s.tokens for s in stages if s.n_layer < full) / total if total > 0 else None


def continued_arms(study: StudyConfig, cfgs: dict[str, RunConfig]) -> dict[str, float]:
    """The grow arms of one budget of a branch (or direct) ladder whose curriculum lost its shape: above the ladder's
    smallest budget its stages before the last keep the smallest budget's length (jobs.continued), so the arm is
    continued training at full depth; {arm: share of its tokens below full depth}. Empty for separate rungs (every
    stage scaled: the shape kept) and at the smallest budget."""
    if study.ladder_base is None or study.budget_scale <= study.ladder_base:
        return {}
    return {arm: x for arm, cfg in cfgs.items() if (x := below_full_depth(cfg)) is not None}


def shape_gate(claims: list[Claim], section: dict, continued: dict[str, float]) -> list[Claim]:
    """The claims with every verdict that reads a continued grow arm replaced by "not tested": it is not the paper's
    curriculum at this budget (its share below full depth named)."""
    if not continued:
        return claims
    out = []
    for c in claims:
        hit = sorted(claim_arms(section, c.key) & set(continued)) if c.key else []
        if hit and c.verdict != NOT_TESTED:
            shown = ", ".join(f"{a} ({continued[a]:.1%} of tokens below full depth)" for a in hit)
            c = dataclasses.replace(
                c,
                verdict=NOT_TESTED,
                holm=NOT_TESTED,
                p=None,
                sentence=c.sentence + f" Not read as the paper's curriculum: {shown} is {CONTINUED} at this budget.",
            )
        out.append(c)
    return out


def shape_lines(study: StudyConfig, shares: list[tuple[float, dict[str, float | None]]]) -> list[str]:
    """A ladder report's table of each grow arm's share of tokens below full depth at every budget, and, in a branch
    ladder, which budgets run it as continued training at full depth (no claim reads it there)."""
    arms = list(dict.fromkeys(a for _, per in shares for a, x in per.items() if x is not None))
    if not arms:
        return []
    branch = study.ladder != "rungs"
    L = [
        "## The curriculum's shape per budget",
        "",
        "Each grow arm's planned share of training tokens below its full depth, per budget. "
        + (
            f"This is a {study.ladder} ladder: above its smallest budget the stages before the last keep that budget's "
            f"length, so a grow arm there is *{CONTINUED}* — not the curriculum the paper grows — and no claim reads "
            "it (its claims read *not tested* at those budgets)."
            if branch
            else "Separate rungs scale every stage: the curriculum keeps its proportions at every budget."
        ),
        "",
        "| arm | " + " | ".join(f"budget {b:g}" for b, _ in shares) + " |",
        "|---|" + "---|" * len(shares),
    ]
    base = study.budgets[0] if study.budgets else None
    for arm in arms:
        cells = []
        for b, per in shares:
            x = per.get(arm)
            tag = f" ({CONTINUED})" if branch and x is not None and base is not None and b > base else ""
            cells.append("—" if x is None else f"{x:.1%}{tag}")
        L.append(f"| {arm} | " + " | ".join(cells) + " |")
    return L + [""]
