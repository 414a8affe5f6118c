"""Summarizing a study from what its run directories hold: every run read once into a record (record.py), then
results.csv, the statistics, the claims, the regime checks and report.md with its figures — for one study directory
(`summarize`) and for a sweep's points or a ladder's budgets together (`summarize_sweep`: each point's own, then the
sweep's results.csv and report.md). Running a study and rebuilding its report both end here (runner.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from normgrow import atomic
from normgrow.study.choice import RateChoice, RatesAt, given
from normgrow.study.config import StudyConfig
from normgrow.study.engine.fits import MIN_BUDGETS
from normgrow.study.engine.measures import Measures
from normgrow.study.engine.verdicts import Claim, evaluate_claims
from normgrow.study.envelope import envelopes, ladder_lines, mark
from normgrow.study.jobs import Job
from normgrow.study.limits import (
    curves_of,
    extrapolation,
    fit_limits,
    fitted_budgets,
    limit_claims,
    limits_headline,
    limits_lines,
)
from normgrow.study.pilot import rate_gate, rates_at
from normgrow.study.record import FIELDS, RunRecord, read_runs, select_lrs, study_measures, write_results
from normgrow.study.report.contrasts import Aggregate, aggregate, contrast
from normgrow.study.report.figures import dose_response
from normgrow.study.report.ladder import (
    below_full_depth,
    continued_arms,
    ladder_headline,
    ladder_report_lines,
    ladder_rung,
    reference_title,
    shape_gate,
    shape_lines,
)
from normgrow.study.report.limit_figures import limit_figures
from normgrow.study.report.multiplier import multiplier_lines, multiplier_sentence
from normgrow.study.report.overview import ladder_opening, opening, overview_figure
from normgrow.study.report.parts import (
    LadderView,
    Rung,
    StudyView,
    cautions,
    headlines,
    ladder_parts,
    slot,
    study_parts,
)
from normgrow.study.report.rates import check_lines, confirm_lines
from normgrow.study.report.study import (
    claims_section,
    collapsed_arms,
    dose_section,
    headline,
    verdict_counts,
    write_report,
)
from normgrow.study.sweep import Point, axis_keys, plot_contrast, sentences, sub_points, sub_root, sweep_report_lines
from normgrow.train.rundir import log_once


class Summary(NamedTuple):
    """What summarizing a study leaves beside its files: report.md's path, the headline lines, the claims'
    verdicts, every run's record, the runs the statistics use (each arm's selected learning rate) and their
    measures."""

    path: Path
    headline: list[str]
    claims: list[Claim]
    records: list[RunRecord]
    kept: list[RunRecord]
    measures: Measures


def summarize(
    study: StudyConfig, jobs: list[Job], status: dict[str, str], out: Path, lr_choice: RatesAt | None = None
) -> Summary:
    """results.csv, the statistics, the claims and report.md (with its figures) from what the run directories hold;
    `status` the launcher's word on runs that did not finish; `lr_choice` the learning-rate choice at this study's
    budget (pilot.rates_at), if the study chose its rates."""
    records, selection = select_lrs(study, read_runs(study, jobs, status))
    if lr_choice and lr_choice.envelope:  # under envelope rates: each bracket's chosen rate kept
        records = mark(records, lr_choice.envelope)
    write_results([r.row() for r in records], out / "results.csv")
    kept = [r for r in records if r.kept]  # an arm's chosen learning rate only
    agg = aggregate(study, kept)
    measures = study_measures(kept)
    claims = rate_gate(evaluate_claims(study.claims, measures), study.claims, lr_choice, study)
    claims = shape_gate(claims, study.claims, continued_arms(study, {j.arm: j.cfg for j in jobs}))
    view = StudyView(study, out, {j.arm: j.cfg for j in jobs}, kept, measures, claims)
    parts = study_parts(view)  # the registered parts (the paper's: paper/plugin.py), regime.json written by its own
    path = write_report(
        study,
        kept,
        agg,
        out,
        claims=claims,
        measures=measures,
        selection=selection,
        all_rows=records,
        lr_choice=lr_choice,
        parts=parts,
    )
    heads = headline(study, agg, claims, collapsed_arms(study, measures)) + headlines(parts)
    loggers = sorted({n for r in kept if r.config is not None for n in r.config.train.loggers} & {"wandb", "trackio"})
    if loggers:
        log_once(out, loggers, study.name, *tracker_summary(agg, claims))
    return Summary(path, heads, claims, records, kept, measures)


def tracker_summary(agg: Aggregate, claims: list[Claim]) -> tuple[dict, dict]:
    """What a study logs once to its runs' trackers: each arm's mean val/ce and each contrast's mean and 95% interval
    (numbers), and each claim's verdict after Holm's adjustment (text, in the run's config)."""
    values: dict[str, float] = {}
    for arm, st in agg.arms.items():
        if st.val_ce.mean is not None:
            values[f"arm/{arm}/val_ce"] = st.val_ce.mean
    for name, c in agg.contrasts.items():
        for key, v in (("", c.est.mean), ("/lo", c.est.lo), ("/hi", c.est.hi)):
            if v is not None:
                values[f"contrast/{name}{key}"] = v
    return values, {f"claim/{c.key}": c.holm for c in claims if c.key}


Sub = tuple[Point, StudyConfig, list[Job], Summary]  # one point of a sweep (budget of a ladder), summarized


def summarize_sweep(
    study: StudyConfig,
    plan: list[tuple[StudyConfig, Path, list[Job]]],
    status: dict,
    out: Path,
    log: Callable[[str], None] = print,
    plots: bool = True,
    lr_choice: RateChoice | None = None,
) -> Path:
    """Each point's (budget's) results.csv and report.md, the sweep's results.csv (every run, with its point and
    axis values; a ladder's with its budget label and budget_scale), its report.md (a sweep's with one figure per
    contrast) and headline, logged. Returns the sweep's (ladder's) report path."""
    subs: list[Sub] = []
    rows, keys, root = [], axis_keys(study), sub_root(study)
    for (sub, sub_dir, jobs), p in zip(plan, sub_points(study), strict=True):
        at = rates_at(lr_choice, sub.budget_scale if study.budgets else None) if lr_choice else None
        done = summarize(sub, jobs, {j.name: v for j in jobs if (v := status.get(j.name))}, sub_dir, at)
        subs.append((p, sub, jobs, done))
        axes = dict(zip(keys, p.coords, strict=True))
        rows += [
            {"point": p.label, **axes, **r.row(), "run_dir": f"{root}/{p.label}/{r.run_dir}"} for r in done.records
        ]
    write_results(rows, out / "results.csv", fields=["point", *keys, *FIELDS])
    if study.budgets:
        lines, heads = _ladder_report(study, subs, out, plots, lr_choice)
        at_end = lines.index("## Reproduce") if "## Reproduce" in lines else len(lines)
        shares = [(sub.budget_scale, {j.arm: below_full_depth(j.cfg) for j in jobs}) for sub, _, jobs in plan]
        lines[at_end:at_end] = (
            shape_lines(study, shares)
            + ladder_lines(lr_choice)
            + check_lines(lr_choice, study.budgets)
            + confirm_lines(given(lr_choice.confirm) if lr_choice else None)
        )
    else:
        lines, heads = _sweep_report(study, subs, out, plots)
    atomic.write_text(out / "report.md", "\n".join(lines) + "\n")
    for line in heads:
        log(line)
    return out / "report.md"


def _sweep_report(study: StudyConfig, subs: list[Sub], out: Path, plots: bool) -> tuple[list[str], list[str]]:
    """A sweep's report lines (its figures drawn) and its sign sentences."""
    table = {
        name: [(p, contrast(done.kept, a, b)) for p, _, _, done in subs] for name, (a, b) in study.contrasts.items()
    }
    figures = {}
    if plots:
        for name, entries in table.items():
            if any(c.est.mean is not None for _, c in entries):
                plot_contrast(study, name, entries, out / "plots" / f"sweep_{name}.png")
                figures[name] = f"plots/sweep_{name}.png"
    configs = [(p.label, jobs[0].cfg) for p, _, jobs, _ in subs if jobs]
    return sweep_report_lines(study, table, figures, configs), [
        line for name, entries in table.items() for line in sentences(study, name, entries)
    ]


def ladder_rates_line(lr_choice: RateChoice | None) -> str:
    """One line on a ladder's rates: envelope at every budget (and the brackets that did not close), or not."""
    envs = envelopes(lr_choice)
    if not envs:
        return "Rates: the pilot's choice at every budget (no envelope): a verdict may be about rates." if lr_choice else (
            "Rates: every arm at its own `train.lr` (no pilot): a verdict may be about rates."
        )  # fmt: skip
    open_ = [f"{env.budget_scale:g} {arm}" for env in envs.values() for arm, a in env.arms.items() if not a.closed]
    return "Rates: every core arm at its own best rate at every budget (envelope); " + (
        f"brackets not closed: {', '.join(open_)} (their claims there read undetermined)." if open_ else
        "every bracket closed."
    )  # fmt: skip


def _ladder_report(
    study: StudyConfig, subs: list[Sub], out: Path, plots: bool, lr_choice: RateChoice | None = None
) -> tuple[list[str], list[str]]:
    """A ladder's report lines and its headline: every budget's numbers, its regime checks (regime.json written),
    the dose–response figure over every budget (drawn into out/plots/), and the reference budget's claims section."""
    rungs = [
        ladder_rung(study, p, done.kept, {j.arm: j.cfg.model for j in jobs}, done.claims) for p, _, jobs, done in subs
    ]
    sub, done = next((sub, done) for p, sub, _, done in subs if p.coords[0] == study.budget_scale)
    reference_claims = claims_section(sub, done.kept, done.claims, done.measures, title=reference_title(study))
    readings = [Rung(p.coords[0], list(sub.arms), done.kept, done.measures) for p, sub, _, done in subs]
    parts = ladder_parts(LadderView(study, out, readings))  # the paper's: regime.json written by its own
    by_budget = [(p.coords[0], d.measures) for p, _, _, d in subs]
    dose = dose_section(dose_response(study.claims, by_budget, out / "plots") if plots else None)
    by_kept = [(p.coords[0], d.kept) for p, _, _, d in subs]
    limit_lines, limit_heads = _limits(study, by_kept, out, plots)
    curves, roles = curves_of(by_kept), study.claims
    pairs = {
        name: (curves.get(roles[f"pre_{name}"], {}), curves.get(roles[f"post_{name}"], {}))
        for name in ("joint", "grow")
        if isinstance(roles.get(f"pre_{name}"), str) and isinstance(roles.get(f"post_{name}"), str)
    }
    multiplier = multiplier_lines(pairs, [p.coords[0] for p, _, _, _ in subs])
    figure = overview_figure(study.claims, by_kept, out / "plots") if plots else None
    lines = ladder_opening(
        [(r.budget, r.claims) for r in rungs],
        multiplier_sentence(pairs, study.budget_scale),
        verdict_counts(f"the paper's claims at budget {study.budget_scale:g}", done.claims) if done.claims else "",
        ladder_rates_line(lr_choice),
        cautions(parts),
    )
    return (
        ladder_report_lines(
            study,
            rungs,
            reference_claims,
            slot(parts, "above_headline"),
            dose + slot(parts, "after_limits"),
            limit_lines,
            multiplier,
            opening(figure, lines),
        ),
        ladder_headline(study, rungs) + limit_heads + headlines(parts),
    )


def _limits(
    study: StudyConfig, by_budget: list[tuple[float, list[RunRecord]]], out: Path, plots: bool
) -> tuple[list[str], list[str]]:
    """The ladder's fits, its held-out check and its limit claims (limits.py), with their figures drawn; a ladder of
    fewer than three fitted budgets has one line instead."""
    budgets = fitted_budgets(study)
    if len(budgets) < MIN_BUDGETS:
        return [
            "## At the limit: fitted budget curves",
            "",
            f"Not fitted: {len(budgets)} fitted budgets, and the curve L(B) = E + A·B^−α has three parameters "
            f"(a ladder of at least {MIN_BUDGETS} budgets is fitted; limits.py).",
            "",
        ], []
    curves = curves_of(by_budget)
    lim = fit_limits(study, curves)
    gate, checks = extrapolation(study, out, curves)
    claims = limit_claims(study, lim, gate)
    figures = limit_figures(study, lim, checks, out / "plots") if plots else {}
    return limits_lines(lim, gate, checks, claims, figures), limits_headline(gate, claims)
