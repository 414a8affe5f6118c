"""The picture a report opens with: one figure of the four core arms (the claims' pre_joint, post_joint, pre_grow,
post_grow) — final val/ce, mean over seeds with its 95% t-interval; a study's at its budget, a ladder's per budget —
and at most six generated lines of what the study says, each from its numbers (the interaction first: the paper's
estimand). The per-claim paragraphs follow in the report.

    plots/overview.png   a study: val/ce against the curriculum (joint, grow), one line per placement, so the
                         interaction is the lines' difference in slope; a ladder: val/ce against the budget (log
                         axis), one line per core arm
"""

from __future__ import annotations

from pathlib import Path

from normgrow.run.plots import COLORS, budget_axis, pyplot, save_figure
from normgrow.study.choice import RatesAt
from normgrow.study.engine.stats import Estimate, estimate
from normgrow.study.engine.verdicts import NOT_TESTED, Claim, describe
from normgrow.study.record import RunRecord, values

CORE = (("pre_joint", "joint", "pre"), ("post_joint", "joint", "post"), ("pre_grow", "grow", "pre"),
        ("post_grow", "grow", "post"))  # fmt: skip
MAX_LINES = 6


def core_arms(roles: dict) -> dict[str, str]:
    """{role: arm} of the core roles the study names."""
    return {role: arm for role, _, _ in CORE if isinstance(arm := roles.get(role), str)}


def _est(records: list[RunRecord], arm: str) -> Estimate:
    return estimate(list(values(records, arm, "val_ce").values()))


def _bar(ax, x, e: Estimate, color, label=None, marker="o"):
    if e.mean is None:
        return
    ax.errorbar([x], [e.mean], yerr=None if e.half is None else [[e.half], [e.half]], fmt=marker, color=color,
                capsize=4, label=label)  # fmt: skip


def overview_figure(roles: dict, by_budget: list[tuple[float, list[RunRecord]]], plots: Path) -> Path | None:
    """plots/overview.png from each budget's kept records (one budget: a study), or None when the study names no
    core arm or no core arm finished."""
    arms = core_arms(roles)
    if not arms or not any(_est(rs, a).mean is not None for _, rs in by_budget for a in arms.values()):
        return None
    fig, ax = pyplot().subplots(figsize=(6.0, 4.0))
    color = {"pre": COLORS[0], "post": COLORS[1]}
    if len(by_budget) == 1:
        records = by_budget[0][1]
        for placement in ("pre", "post"):
            pts = [
                (
                    (0 if curriculum == "joint" else 1) + (-0.04 if placement == "pre" else 0.04),
                    _est(records, arms[role]),
                )
                for role, curriculum, p in CORE
                if p == placement and role in arms
            ]
            xs: list[float] = [i for i, e in pts if e.mean is not None]
            ys = [e.mean for _, e in pts if e.mean is not None]
            ax.plot(xs, ys, "-", color=color[placement], alpha=0.6)
            for i, e in pts:
                _bar(ax, i, e, color[placement], label=placement if xs and i == xs[0] else None)
        ax.set_xticks([0, 1], ["joint", "grow"])
        ax.set_xlim(-0.5, 1.5)
        ax.set_xlabel("curriculum")
    else:
        for role, curriculum, placement in CORE:
            if role not in arms:
                continue
            line = [(b, e) for b, rs in by_budget if (e := _est(rs, arms[role])).mean is not None]
            ls = "-" if curriculum == "joint" else "--"
            ax.plot([b for b, _ in line], [e.mean for _, e in line], ls, color=color[placement], alpha=0.6)
            for j, (b, e) in enumerate(line):
                _bar(ax, b, e, color[placement], label=f"{arms[role]} ({placement}, {curriculum})" if j == 0 else None,
                     marker="o" if curriculum == "joint" else "s")  # fmt: skip
        budget_axis(ax, [b for b, _ in by_budget])
    ax.set_ylabel("final val/ce (nats/token), mean ± 95% CI")
    ax.legend(fontsize=8)
    ax.set_title("The four core arms")
    path = plots / "overview.png"
    save_figure(fig, path)
    return path


def _verdict(c: Claim) -> str:
    return f"{describe(c.est)} — {c.verdict}" if c.est.mean is not None else c.verdict


def study_lines(claims: list[Claim], counts: str, rates: str, cautions: list[str]) -> list[str]:
    """A study's opening lines: the interaction, the two gaps, the claims counted, the rates, the cautions (≤ 6)."""
    by = {c.key: c for c in claims if c.key and c.verdict != NOT_TESTED}
    L = []
    if "interaction" in by:
        L.append(
            f"**Interaction** (post-grow − pre-grow) − (post-joint − pre-joint), val/ce: {_verdict(by['interaction'])}."
        )
    gaps = [f"{name} {_verdict(by[key])}" for key, name in (("joint_gap", "joint gap"), ("grow_gap", "grow gap"))
            if key in by]  # fmt: skip
    if gaps:
        L.append("Descriptive beside it: " + "; ".join(gaps) + ".")
    return _closing(L, counts, rates, cautions)


def _closing(L: list[str], counts: str, rates: str, cautions: list[str]) -> list[str]:
    """The lines every opening ends with: the claims counted, the rates, the cautions; at most MAX_LINES in all."""
    if counts:
        L.append(counts[0].upper() + counts[1:] + ".")
    if rates:
        L.append(rates)
    return (L + cautions)[:MAX_LINES]


def opening(figure: Path | None, lines: list[str], rel: str = "plots") -> list[str]:
    """The report's opening: the figure and the lines, as markdown."""
    out = [f"![overview]({rel}/{figure.name})", ""] if figure is not None else []
    return out + [f"- {line}" for line in lines[:MAX_LINES]] + ([""] if lines else [])


def ladder_opening(
    rungs_claims: list[tuple[float, list[Claim]]], multiplier: str, counts: str, rates: str, cautions: list[str]
) -> list[str]:
    """A ladder's opening lines: the interaction at every budget, the compute multiplier at the reference budget, the
    reference budget's claims counted, the rates, the cautions (≤ 6)."""
    parts = []
    for b, claims in rungs_claims:
        c = next((c for c in claims if c.key == "interaction" and c.verdict != NOT_TESTED), None)
        if c is not None and c.est.mean is not None:
            parts.append(f"at {b:g} {_verdict(c)}")
    L = []
    if parts:
        L.append("**Interaction** (post-grow − pre-grow) − (post-joint − pre-joint), val/ce: " + "; ".join(parts) + ".")
    if multiplier:
        L.append(multiplier)
    return _closing(L, counts, rates, cautions)


def rates_line(lr_choice: RatesAt | None) -> str:
    """One line on the rates the claims read: envelope (and the brackets that did not close), the pilot's, or none."""
    if not lr_choice:
        return "Rates: every arm at its own `train.lr` (no pilot): a verdict here may be about rates."
    env = lr_choice.envelope
    if env:
        open_ = [arm for arm, a in env.arms.items() if not a.closed]
        return "Rates: every core arm at its own best rate at this budget (envelope)" + (
            f"; brackets not closed: {', '.join(open_)} (their claims read undetermined)." if open_ else
            "; every bracket closed."
        )  # fmt: skip
    return "Rates: the pilot's choice, made at a smaller budget than this one (no envelope)."
