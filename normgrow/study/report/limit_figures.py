"""The figures of a ladder's fits (plots/):

limits_arms.png       per arm, on log–log axes: the mean val/ce over seeds minus the fitted E against the budget
                      (fitted budgets filled, the held-out budget open, with its prediction interval as a bar), the
                      fit A·B^−α out to FAR × the largest fitted budget, and its 95% jackknife band
limits_contrasts.png  per contrast: the observed Δ = b − a (mean and 95% t-interval over seeds) against the budget,
                      the fitted Δ̂(B) = L̂_b(B) − L̂_a(B) with its band out to FAR × the largest budget, and ΔE
                      (the asymptote) with its interval as a horizontal band
"""

from __future__ import annotations

import math
from pathlib import Path

from normgrow.run.plots import COLORS, budget_axis, pyplot, save_figure
from normgrow.study.config import StudyConfig
from normgrow.study.engine.fits import Curves, Resampled, arm_stat, at_budget, complete_seeds, contrast_stat, jackknife
from normgrow.study.engine.stats import estimate
from normgrow.study.limits import Check, Limits

GRID = 40  # points of each fitted line


def _grid(lim: Limits) -> list[float]:
    lo, hi = math.log(lim.budgets[0]), math.log(lim.far_budget)
    return [math.exp(lo + (hi - lo) * i / (GRID - 1)) for i in range(GRID)]


def _band(rs: list[Resampled]) -> tuple[list[float], list[float]]:
    """The 95% t-interval of each point's pseudo-values (its value where there is none)."""
    lo, hi = [], []
    for r in rs:
        e = estimate(r.values) if len(r.values) >= 2 else None
        v = r.value if r.value is not None else math.nan
        lo.append(e.lo if e and e.lo is not None else v)
        hi.append(e.hi if e and e.hi is not None else v)
    return lo, hi


def _means(curves: list[Curves], seeds: list[int], budget: float) -> list[float]:
    """Per seed at `budget` (those who have it): the arm's value (one curve) or b − a (two)."""
    have = [s for s in seeds if all(budget in c.get(s, {}) for c in curves)]
    if len(curves) == 1:
        return [curves[0][s][budget] for s in have]
    return [curves[1][s][budget] - curves[0][s][budget] for s in have]


def _panels(n: int):
    """A figure of n panels, three to a row, the unused ones blank; (figure, the n axes in order)."""
    cols = min(3, n)
    rows = math.ceil(n / cols)
    fig, axes = pyplot().subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax in flat[n:]:
        ax.axis("off")
    return fig, flat[:n]


def _held(checks: list[Check], key: str) -> Check | None:
    return next((c for c in checks if c.key == key), None)


def plot_arms(study: StudyConfig, lim: Limits, checks: list[Check], out: Path) -> Path | None:
    arms = [a for a, f in lim.arms.items() if f.fit.ok]
    if not arms:
        return None
    fig, panels = _panels(len(arms))
    xs = _grid(lim)
    for i, arm in enumerate(arms):
        ax, f, c = panels[i], lim.arms[arm], lim.curves.get(arm, {})
        E = f.fit.E
        assert E is not None
        line = [jackknife(f.seeds, arm_stat(c, lim.budgets, at_budget(x))) for x in xs]
        lo, hi = _band(line)
        fitted = [(r.value or math.nan) - E for r in line]
        floor = 0.3 * min(v for v in fitted if v > 0)  # a band reaching E (or below) is drawn to here, not to 0
        ax.plot(xs, fitted, color=COLORS[i % 10], lw=1.2, label="fit")
        ax.fill_between(xs, [max(v - E, floor) for v in lo], [max(v - E, floor) for v in hi], color=COLORS[i % 10],
                        alpha=0.2, lw=0, label="95% band (clipped at the bottom)")  # fmt: skip
        for b in lim.budgets:
            m = _means([c], f.seeds, b)
            if m and sum(m) / len(m) - E > 0:
                ax.plot([b], [sum(m) / len(m) - E], "o", color=COLORS[i % 10], ms=4)
        chk = _held(checks, f"arm:{arm}")
        if lim.holdout is not None and chk is not None:
            ax.errorbar([lim.holdout], [chk.value - E], yerr=[[chk.value - max(chk.lo, E + floor)], [chk.hi - chk.value]],
                        fmt="none", color="black", capsize=3, label="prediction")  # fmt: skip
            if chk.observed is not None and chk.observed - E > 0:
                ax.plot([lim.holdout], [chk.observed - E], "o", mfc="white", color="black", ms=5, label="held out")
        budget_axis(ax, lim.budgets + ([lim.holdout] if lim.holdout is not None else []))
        ax.set_yscale("log")
        ax.set_title(f"{arm}: E = {E:.3f}, α = {f.fit.alpha:.2f}", fontsize=9)
        ax.set_ylabel("val/ce − E")
        ax.grid(alpha=0.3, which="both")
        if i == 0:
            ax.legend(fontsize=7)
    return save_figure(fig, out / "limits_arms.png")


def plot_contrasts(study: StudyConfig, lim: Limits, checks: list[Check], out: Path) -> Path | None:
    names = [n for n, c in lim.contrasts.items() if c.dE.value is not None]
    if not names:
        return None
    fig, panels = _panels(len(names))
    xs = _grid(lim)
    for i, name in enumerate(names):
        ax, cl = panels[i], lim.contrasts[name]
        ca, cb = lim.curves.get(cl.a, {}), lim.curves.get(cl.b, {})
        seeds = complete_seeds([ca, cb], lim.budgets)
        line = [jackknife(seeds, contrast_stat(ca, cb, lim.budgets, at_budget(x))) for x in xs]
        lo, hi = _band(line)
        ax.plot(xs, [r.value if r.value is not None else math.nan for r in line], color=COLORS[0], label="fit")
        ax.fill_between(xs, lo, hi, color=COLORS[0], alpha=0.2, lw=0)
        dlo, dhi = _band([cl.dE])
        ax.axhspan(dlo[0], dhi[0], color=COLORS[1], alpha=0.15, lw=0)
        ax.axhline(cl.dE.value, color=COLORS[1], ls="--", lw=1, label=f"ΔE = {cl.dE.value:+.3f}")
        ax.axhline(0, color="black", lw=0.6)
        budgets = lim.budgets + ([lim.holdout] if lim.holdout is not None else [])
        for b in budgets:
            d = _means([ca, cb], seeds, b)
            if len(d) >= 1:
                e = estimate(d)
                fmt = "o" if b in lim.budgets else "s"
                ax.errorbar([b], [e.mean], yerr=[[e.half or 0.0]], fmt=fmt, color="black", ms=4, capsize=3,
                            mfc="black" if b in lim.budgets else "white")  # fmt: skip
        chk = _held(checks, f"contrast:{name}")
        if lim.holdout is not None and chk is not None:
            ax.errorbar([lim.holdout * 1.08], [chk.value], yerr=[[chk.value - chk.lo], [chk.hi - chk.value]],
                        fmt="x", color=COLORS[3], capsize=3, label="prediction")  # fmt: skip
        budget_axis(ax, budgets)
        ax.set_title(f"{name}: {cl.b} − {cl.a}", fontsize=9)
        ax.set_ylabel("Δ val/ce (nats/token)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return save_figure(fig, out / "limits_contrasts.png")


def limit_figures(study: StudyConfig, lim: Limits, checks: list[Check], plots: Path) -> dict[str, str]:
    """The two figures drawn into `plots`; {title: path relative to the study directory}."""
    out = {}
    if plot_arms(study, lim, checks, plots):
        out["each arm's fit"] = "plots/limits_arms.png"
    if plot_contrasts(study, lim, checks, plots):
        out["each contrast at the limit"] = "plots/limits_contrasts.png"
    return out
