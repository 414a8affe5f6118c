"""A study's figures (plots/): the learning curve against compute for every arm, the phase-wise gap at every
stage boundary, the curve just after each growth event of the phase arms, and the per-run diagnostics figures
of two arms side by side (drawn by normgrow.plots, the run-level figures, so `normgrow report RUN_DIR …` and
a study draw them alike).

    val_ce_vs_compute.png   curve/ce at every evaluation (val/ce for runs written before curve/…) against
                            active-layer tokens, one seed per arm, growth events dotted
    phase_gap.png           b − a of val/ce at every stage boundary of the phase arms
    after_growth.png        per growth event: curve/ce minus its value at the event (the stage_start record
                            right after it) against optimizer steps since the event, per phase arm: the mean
                            over seeds and the min–max band (after_growth_curves)
    dose_response.png       one point per pre-like grow arm (roles pre_grow, pre_grow_renorm), seed and budget:
                            its log boundary-scale ratio against post_grow (measures.scale_ratios) and its grow gap
                            CE[arm] − CE[post_grow], with a generated sentence (OLS slope, Spearman's ρ); drawn for
                            a study or a budget ladder whose claims name the three roles (dose_response)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from normgrow.run.plots import COLORS, CURVE_KEYS, LINE_STYLES, curve_records, legend, plot_runs, pyplot, save_figure
from normgrow.study.config import StudyConfig
from normgrow.study.engine.measures import Measures, scale_ratios
from normgrow.study.engine.verdicts import gap_by_seed, study_roles
from normgrow.study.record import RunRecord
from normgrow.study.report.contrasts import Aggregate, Phase


def plot_study_val_ce(study: StudyConfig, records: list[RunRecord], out: Path) -> Path:
    """The learning curve (report.curve_records: curve/ce at every evaluation, val/ce for older runs) against
    active-layer tokens for every arm (first finished seed), stage boundaries marked."""
    fig, ax = pyplot().subplots(figsize=(7.5, 4.5))
    norms = sorted({r.norm for r in records})  # one line style per placement, one colour per arm
    keys: set[str] = set()
    for i, arm in enumerate(study.arms):
        ok = _finished(records, arm)
        if not ok:
            continue
        m = ok[0].metrics
        key, ev = curve_records(m)
        keys.add(key)
        ls = LINE_STYLES[norms.index(ok[0].norm) % len(LINE_STYLES)]
        ax.plot(
            [r["active_layer_tokens"] for r in ev],
            [r[key] for r in ev],
            ls,
            marker="o",
            ms=2.5,
            color=COLORS[i % 10],
            label=f"{arm} (seed {ok[0].seed})",
        )
        for r in m:
            if r["event"] == "stage_start" and r["stage"] > 0:
                ax.axvline(r["active_layer_tokens"], color=COLORS[i % 10], ls=":", lw=0.7, alpha=0.5)
    shown = sorted(keys, key=CURVE_KEYS.index) or ["val/ce"]
    ax.set_xlabel("active-layer tokens (tokens × blocks)")
    ax.set_ylabel(f"{' | '.join(shown)} (nats/token)")
    what = "CE on the curve subset (every evaluation)" if shown == ["curve/ce"] else "validation CE"
    ax.set_title(f"{what} against the teacher; dotted: growth", fontsize=10)
    legend(ax, fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    return save_figure(fig, out / "val_ce_vs_compute.png")


def plot_phase_gap(phase: Phase, out: Path) -> Path:
    """b − a at every stage boundary, with 95% intervals when there are several seeds."""
    fig, ax = pyplot().subplots(figsize=(6.4, 4))
    rows = phase.rows
    labels = [f"s{r.stage} ({r.n_layer}b)\n{r.point}" for r in rows]
    means = [r.diff.mean for r in rows]
    errs = [r.diff.half or 0.0 for r in rows]
    colors = [COLORS[0] if m is not None and m < 0 else COLORS[3] for m in means]  # a phase row always has a mean
    ax.bar(range(len(rows)), means, yerr=errs, capsize=3, color=colors)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(range(len(rows)), labels, fontsize=7)
    ax.set_ylabel(f"val/ce: {phase.b} − {phase.a}")
    ax.set_title(f"phase-wise gap (below 0: {phase.b} leads)")
    ax.grid(alpha=0.3, axis="y")
    return save_figure(fig, out / "phase_gap.png")


AFTER_GROWTH_EVENTS = ("stage_start", "dense", "eval", "stage_end")  # the records an after-growth curve reads


def after_growth_curves(runs: list[list[dict]]) -> dict[int, dict]:
    """The curve after each growth event, over the runs (seeds) of one arm, from their metrics.jsonl records.

    For the event opening stage s of a run: its stage's records (stage_start, dense, eval, stage_end) holding the
    run's curve key (report.curve_records), as steps since the event (the stage_start record's step) → curve
    value minus the value at the event (that stage_start record's; 0 at step 0). Over the runs: {s: {"key",
    "steps", "mean", "lo", "hi", "runs"}}, at the steps every run measured (the seeds of an arm share a schedule),
    mean and min / max over the runs; an event some run lacks is left out."""
    per_event: dict[int, list[dict[int, float]]] = {}
    keys = set()
    for m in runs:
        key, recs = curve_records(m)
        keys.add(key)
        starts = {r["stage"]: r for r in recs if r["event"] == "stage_start" and r["stage"] > 0}
        for s, start in starts.items():
            pts = {
                r["step"] - start["step"]: r[key] - start[key]
                for r in recs
                if r["stage"] == s and r["event"] in AFTER_GROWTH_EVENTS
            }
            per_event.setdefault(s, []).append(pts)
    out = {}
    for s, curves in sorted(per_event.items()):
        if len(curves) < len(runs):
            continue
        steps = sorted(set.intersection(*(set(c) for c in curves)))
        vals = [[c[k] for c in curves] for k in steps]
        out[s] = {
            "key": " | ".join(sorted(keys, key=CURVE_KEYS.index)),
            "steps": steps,
            "runs": len(curves),
            "mean": [sum(v) / len(v) for v in vals],
            "lo": [min(v) for v in vals],
            "hi": [max(v) for v in vals],
        }
    return out


def plot_after_growth(study: StudyConfig, records: list[RunRecord], out: Path) -> Path | None:
    """after_growth.png: one panel per growth event, for each arm of the study's phase pair the curve minus its
    value at the event against steps since it (after_growth_curves: mean over seeds, min–max band). None when
    neither arm has a growth event."""
    curves = {}
    for arm in study.phase:
        ok = _finished(records, arm)
        if ok:
            curves[arm] = after_growth_curves([r.metrics for r in ok])
    events = sorted({s for c in curves.values() for s in c})
    if not events:
        return None
    fig, axes = pyplot().subplots(1, len(events), figsize=(max(6.4, 3.6 * len(events) + 1), 4), squeeze=False)
    for ax, s in zip(axes[0], events, strict=True):
        for i, (arm, c) in enumerate(curves.items()):
            if s not in c:
                continue
            e = c[s]
            ax.plot(
                e["steps"],
                e["mean"],
                LINE_STYLES[i % len(LINE_STYLES)],
                marker="o",
                ms=2.5,
                color=COLORS[i % 10],
                label=f"{arm} ({e['runs']} seeds)",
            )
            ax.fill_between(e["steps"], e["lo"], e["hi"], color=COLORS[i % 10], alpha=0.2, lw=0)
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_title(f"growth into stage {s}", fontsize=9)
        ax.set_xlabel("optimizer steps since the growth event")
        ax.grid(alpha=0.3)
        legend(ax, fontsize=7)
    key = next(e["key"] for c in curves.values() for e in c.values())
    axes[0][0].set_ylabel(f"{key} − its value at the event")
    fig.suptitle(f"{key} after each growth event\nline: mean over seeds; band: min–max over seeds", fontsize=10)
    return save_figure(fig, out / "after_growth.png")


def _finished(records: list[RunRecord], arm: str) -> list[RunRecord]:
    """An arm's finished runs, lowest seed first."""
    return sorted((r for r in records if r.arm == arm and r.ok), key=lambda r: r.seed)


def study_figures(study: StudyConfig, records: list[RunRecord], agg: Aggregate, study_dir: Path) -> list[Path]:
    """The study's figures: val/ce against compute, the phase-wise gap, and the diagnostics figures of the
    diagnostics pair (or the phase arms) side by side."""
    plots = study_dir / "plots"
    figs = [plot_study_val_ce(study, records, plots)]
    if agg.phase and agg.phase.rows:
        figs.append(plot_phase_gap(agg.phase, plots))
    if (after := plot_after_growth(study, records, plots)) is not None:
        figs.append(after)
    pair = study.diagnostics_pair or study.phase
    runs: list[str | Path] = [
        path for arm in pair if (ok := _finished(records, arm)) and (path := ok[0].path) is not None
    ]
    if runs:
        made = plot_runs(runs, plots)
        figs += [made[k] for k in ("boundary_rms", "struct_content", "identity", "collapse") if k in made]
    return figs


# ----------------------------------------------------------------------------- dose–response

DOSE_ROLES = ("pre_grow", "pre_grow_renorm")  # the pre-like grow arms, each read against post_grow
DOSE_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")  # one marker shape per budget


@dataclass(frozen=True)
class DosePoint:
    """One (pre-like grow arm, seed, budget) of the dose–response figure."""

    arm: str
    seed: int
    budget: float
    x: float  # log(RMS of the arm's boundary stream at growth / post_grow's), mean over growth events
    y: float  # the grow gap CE[arm] − CE[post_grow] of final val/ce (nats/token)


def dose_points(claims: dict, budgets: list[tuple[float, Measures]]) -> list[DosePoint]:
    """The points of every budget's measures ({arm: {seed: RunMeasures}}), for the pre-like grow arms the study names:
    none unless its claims name post_grow, pre_grow and pre_grow_renorm. A seed lacking the boundary RMS at some
    event of either run, or a finished run of either arm, gives no point."""
    r = study_roles(claims)
    if not (r.post_grow and all(getattr(r, role) for role in DOSE_ROLES)):
        return []
    out = []
    for budget, m in budgets:
        for arm in (getattr(r, role) for role in DOSE_ROLES):
            x, y = scale_ratios(m, arm, r.post_grow), gap_by_seed(m, r.post_grow, arm)
            out += [DosePoint(arm, s, budget, x[s], y[s]) for s in sorted(set(x) & set(y))]
    return out


def _dependence(points: list[DosePoint], ref: str) -> str:
    """What makes the points dependent, from which of them there are."""
    parts = []
    if len({p.budget for p in points}) > 1:
        parts.append("those of one seed at different budgets share the seed")
    if len({p.arm for p in points}) > 1:
        parts.append(f"a seed's arms share its {ref} run")
    if not parts:
        return ""
    return (
        f" The points are not independent ({' and '.join(parts)}), so the interval is narrower than the evidence "
        "warrants."
    )


def dose_sentence(points: list[DosePoint], ref: str) -> str:
    """The OLS slope of the grow gap y on the log boundary-scale ratio x with its 95% interval (scipy's linregress,
    t with n − 2 degrees of freedom) and Spearman's rank correlation, over n points."""
    from scipy.stats import linregress, spearmanr
    from scipy.stats import t as student_t

    n, xs, ys = len(points), [p.x for p in points], [p.y for p in points]
    arms = list(dict.fromkeys(p.arm for p in points))
    seeds, budgets = len({p.seed for p in points}), len({p.budget for p in points})
    what = (
        f"over n = {n} points ({', '.join(arms)} against {ref}; {seeds} seed{'s' if seeds > 1 else ''} × "
        f"{budgets} budget{'s' if budgets > 1 else ''})"
    )
    if n < 3 or len(set(xs)) < 2:
        return (
            f"Dose–response {what}: too few points, or no spread in the boundary-scale ratio, for a slope's interval."
        )
    fit = linregress(xs, ys)
    half = float(student_t.ppf(0.975, n - 2)) * fit.stderr
    rho = float(spearmanr(xs, ys)[0])
    corr = "undefined (one variable is constant)" if math.isnan(rho) else f"{rho:+.2f}"
    return (
        f"Dose–response {what}: the grow gap CE[arm] − CE[{ref}] against the log boundary-scale ratio "
        f"log(RMS[arm] / RMS[{ref}]) at growth has OLS slope {fit.slope:+.4f} nats/token per unit log ratio, 95% "
        f"interval [{fit.slope - half:+.4f}, {fit.slope + half:+.4f}] (t with {n - 2} df); Spearman's rank "
        f"correlation {corr}.{_dependence(points, ref)}"
    )


def plot_dose_response(points: list[DosePoint], ref: str, out: Path) -> Path:
    """dose_response.png: the points, one colour per arm, one marker shape per budget."""
    fig, ax = pyplot().subplots(figsize=(6.4, 4.5))
    arms = list(dict.fromkeys(p.arm for p in points))
    budgets = sorted({p.budget for p in points})
    for i, arm in enumerate(arms):
        for j, b in enumerate(budgets):
            pts = [p for p in points if p.arm == arm and p.budget == b]
            if pts:
                ax.scatter(
                    [p.x for p in pts],
                    [p.y for p in pts],
                    color=COLORS[i % 10],
                    marker=DOSE_MARKERS[j % len(DOSE_MARKERS)],
                    label=f"{arm}, budget {b:g}",
                )
    xs = [p.x for p in points]
    if len(points) >= 3 and len(set(xs)) > 1:  # the OLS line the sentence reports
        from scipy.stats import linregress

        fit, ends = linregress(xs, [p.y for p in points]), [min(xs), max(xs)]
        ax.plot(ends, [fit.intercept + fit.slope * x for x in ends], "--", color="black", lw=0.8, label="OLS fit")
    ax.axhline(0, color="grey", lw=0.8)
    ax.axvline(0, color="grey", lw=0.8)
    ax.set_xlabel(f"log(boundary RMS of the arm / of {ref}) at growth, mean over events (natural log)")
    ax.set_ylabel(f"grow gap: val/ce of the arm − {ref} (nats/token)")
    ax.set_title(
        "dose–response: boundary scale at growth against the grow gap\none point per arm, seed and budget", fontsize=10
    )
    legend(ax, fontsize=7)
    ax.grid(alpha=0.3)
    return save_figure(fig, out / "dose_response.png")


def dose_response(claims: dict, budgets: list[tuple[float, Measures]], plots: Path) -> tuple[Path, str] | None:
    """The dose–response figure (under `plots`) and its sentence for a study (one budget) or a budget ladder (every
    budget's measures); None where the study names none of its roles' points."""
    points = dose_points(claims, budgets)
    if not points:
        return None
    ref = study_roles(claims).post_grow
    return plot_dose_response(points, ref, plots), dose_sentence(points, ref)
