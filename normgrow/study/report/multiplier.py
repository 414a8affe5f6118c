"""The compute multiplier of a budget ladder: per curriculum and budget B, how much budget pre-norm needs to reach
post-norm's val/ce at B — the form in which the field states one architecture against another across compute.

Per seed s and curriculum (the claims' pre_X / post_X pair), with pre's final val/ce at the ladder's budgets read as a
curve piecewise linear in log B: B'ₛ is where that curve reaches post's val/ce at B (the first crossing, walking up
the budgets), and Mₛ = B'ₛ / B. M > 1: pre-norm needs M times the budget (post-norm ahead); M < 1: pre-norm ahead.
Over the seeds both arms finished at every budget, M is reported as the geometric mean with the 95% t-interval of
log M. Where post's value at B lies outside the range pre's curve covers for some seed, M is not interpolated: the
report says in which direction it lies beyond the ladder (pre never gets that low within it: M > B_max / B; pre is
already lower at the smallest budget: M < B_min / B).

Nothing here reads files: the ladder hands in {arm: {seed: {budget: val/ce}}} (limits.curves_of of the kept runs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from normgrow.study.engine.stats import estimate

Curves = dict[int, dict[float, float]]  # seed → budget → final val/ce of one arm


def crossing(curve: dict[float, float], target: float) -> float | str:
    """The budget where `curve` (budget → val/ce), linear in log budget between its points, first reaches `target`
    walking up the budgets; "above" when every point lies above the target (never reached within the ladder),
    "below" when the smallest budget's already lies at or below it (reached before the ladder starts)."""
    pts = sorted(curve.items())
    if pts[0][1] <= target:
        return pts[0][0] if pts[0][1] == target else "below"
    for (b0, y0), (b1, y1) in zip(pts, pts[1:], strict=False):
        if y1 <= target:
            t = (y0 - target) / (y0 - y1)
            return math.exp(math.log(b0) + t * (math.log(b1) - math.log(b0)))
    return "above"


@dataclass(frozen=True)
class Multiplier:
    """M at one budget for one curriculum: the geometric mean over seeds and its 95% interval, or why there is none."""

    budget: float
    value: float | None
    lo: float | None
    hi: float | None
    n: int
    why: str = ""


def multiplier(pre: Curves, post: Curves, budget: float) -> Multiplier:
    """M at `budget` over the seeds both arms have at every budget of pre's curve (module docstring)."""
    budgets = sorted({b for c in pre.values() for b in c})
    seeds = sorted(s for s in set(pre) & set(post) if all(b in pre[s] for b in budgets) and budget in post[s])
    if not seeds:
        return Multiplier(budget, None, None, None, 0, "no seed has both arms at every budget")
    logs, beyond = [], set()
    for s in seeds:
        x = crossing(pre[s], post[s][budget])
        if isinstance(x, str):
            beyond.add(x)
        else:
            logs.append(math.log(x / budget))
    if beyond:
        words = {
            "above": f"> {budgets[-1] / budget:.3g} (pre-norm does not reach post-norm's val/ce within the ladder)",
            "below": f"< {budgets[0] / budget:.3g} (pre-norm is already lower at the ladder's smallest budget)",
        }
        return Multiplier(budget, None, None, None, len(seeds), "; ".join(words[w] for w in sorted(beyond)))
    e = estimate(logs)
    assert e.mean is not None
    if e.half is None:
        return Multiplier(budget, math.exp(e.mean), None, None, len(logs), "one seed: no interval")
    return Multiplier(budget, math.exp(e.mean), math.exp(e.mean - e.half), math.exp(e.mean + e.half), len(logs))


def multiplier_lines(pairs: dict[str, tuple[Curves, Curves]], budgets: list[float]) -> list[str]:
    """The ladder report's section: per budget, for each curriculum (`pairs`: {"joint": (pre, post), …}), M."""
    if not pairs:
        return []

    def cell(m: Multiplier) -> str:
        if m.value is None:
            return m.why
        ci = f" [{m.lo:.3g}, {m.hi:.3g}]" if m.lo is not None and m.hi is not None else f" ({m.why})"
        return f"{m.value:.3g}{ci}"

    L = [
        "## Compute multiplier: the budget pre-norm needs to reach post-norm",
        "",
        "Per curriculum and budget B: M = B′ / B, B′ the budget at which pre-norm's val/ce (per seed, linear in log B "
        "between the ladder's budgets) reaches post-norm's val/ce at B; geometric mean over seeds with the 95% "
        "t-interval of log M. M > 1: pre-norm needs M times the compute (post-norm ahead); M < 1: pre-norm ahead. "
        "Read at each arm's own rate at that budget.",
        "",
        "| budget | " + " | ".join(f"{name} M [95% CI]" for name in pairs) + " |",
        "|---|" + "---|" * len(pairs),
    ]
    for b in budgets:
        L.append(f"| {b:g} | " + " | ".join(cell(multiplier(pre, post, b)) for pre, post in pairs.values()) + " |")
    return L + [""]


def multiplier_sentence(pairs: dict[str, tuple[Curves, Curves]], budget: float) -> str:
    """One line: each curriculum's M at `budget` (the reference budget of a ladder)."""
    if not pairs:
        return ""
    cells = []
    for name, (pre, post) in pairs.items():
        m = multiplier(pre, post, budget)
        if m.value is None:
            cells.append(f"{name} {m.why}")
        else:
            ci = f" [{m.lo:.3g}, {m.hi:.3g}]" if m.lo is not None and m.hi is not None else ""
            cells.append(f"{name} {m.value:.3g}{ci}")
    return (
        f"Compute multiplier at budget {budget:g} (the budget pre-norm needs to reach post-norm's val/ce, × B; > 1: "
        "post ahead): " + "; ".join(cells) + "."
    )
