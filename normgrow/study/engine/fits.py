"""Budget curves fitted: each arm's final val/ce against the budget, L(B) = E + A·B^−α, and what the fit says at the
limit (B → ∞: E) and beyond the data (B = 10 × the largest fitted budget, a held-out budget). Plain numbers in and
out: nothing here reads files or writes text (limits.py turns these into a ladder's claims and report section).

    fit_power_law(budgets, losses) → Fit
        least squares on log residuals, log L̂(B) − log L(B), with Huber's loss (δ = HUBER: a point far off the
        curve weighs linearly, not quadratically), from several starting points (`starts`: E on a grid below the
        smallest observed L, A and α at each E from the straight line through log(L − E) against log B; the
        REFINED best of the grid by the robust loss are refined); the lowest cost wins. E is
        bounded in [0, min observed L], α in [0, ALPHA_MAX]. A fit that does not converge, or whose E or α ends on
        a bound, has no numbers: its `why` says which (E on its upper bound = the curve has not bent: the data
        show no asymptote below themselves; E on 0 = nothing above zero is resolved).

    Curves = {seed: {budget: final val/ce}}: one arm's runs over a ladder. Across seeds the fit is of the mean curve
    (the mean over the seeds at each budget); its uncertainty comes from resampling the seeds: the delete-one
    jackknife, each seed left out in turn and the fit redone on the others' mean. A seed is the unit: a contrast's
    two arms are resampled together (`paired_seeds`). `jackknife` returns centred pseudo-values — the full fit's
    value plus (n − 1) × (mean of the leave-one-out values − each one): their mean is the full fit's value and their
    t-interval over n − 1 degrees of freedom is the jackknife's (SE² = (n − 1)/n · Σ (θ₋ᵢ − θ̄)²), so the verdict
    engine reads them like any per-seed values (tests/study/engine/test_fits.py simulates its coverage).

Why the jackknife and not the bootstrap: with three seeds a bootstrap has ten distinct resamples and its percentile
interval under-covers (its variance carries the factor (n − 1)/n and ignores the t quantile); the jackknife-t is the
paired t-interval exactly when the statistic is a mean, and close to it for a smooth fit.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from normgrow.study.engine.stats import t_quantile

HUBER = 1e-3  # Huber's δ on log residuals (a relative error of 0.1% of L) where no seed noise sets it
HUBER_K = 1.345  # with seed noise: Huber's δ = HUBER_K × the pooled relative SE of a point (95% efficient if normal)
LACK_ALPHA = 0.05  # a lack-of-fit F test below this p flags the fit
ALPHA_MAX = 4.0  # α beyond 4 is a step, not a power law
E_GRID = 60  # starting points: E on a grid from 0 to just below the smallest observed L ...
REFINED = 3  # ... of which the best few are refined
BOUND_TOL = 1e-6
ALPHA_FLAT = 1e-3  # below it the fitted curve is a constant: E + A is resolved, E alone is not  # a parameter within this relative distance of a bound is on it
MIN_BUDGETS = 4  # three parameters, and a degree of freedom left to see the curve miss


@dataclass(frozen=True)
class Lack:
    """The lack-of-fit F test of a mean curve: F = (Σ r² / (k − 3)) / s², r the log residuals at the k budgets and s²
    the pooled variance of a budget's mean over seeds (relative, k(n − 1) degrees of freedom); p its upper tail. A
    small p: the three-parameter law misses the points by more than their seed noise."""

    F: float
    dof: tuple[int, int]
    p: float

    @property
    def flagged(self) -> bool:
        return self.p < LACK_ALPHA


@dataclass(frozen=True)
class Fit:
    """A fitted curve L(B) = E + A·B^−α, or why there is none (`why` non-empty: E, A, α are None)."""

    E: float | None = None
    A: float | None = None
    alpha: float | None = None
    why: str = ""
    cost: float | None = None  # the robust loss at the optimum (0 for a curve through every point)
    floor: float = 0.0  # E's lower bound: the teacher's entropy on the validation set (val/ce ≥ H(p_T))
    lack: Lack | None = None  # the lack-of-fit F test, where seed noise gives a pure error

    @property
    def ok(self) -> bool:
        return not self.why

    def at(self, budget: float) -> float | None:
        """L̂(budget), None without a fit."""
        if not self.ok or self.E is None or self.A is None or self.alpha is None:
            return None
        return self.E + self.A * budget**-self.alpha


def power_law(budget: float, E: float, A: float, alpha: float) -> float:
    return E + A * budget**-alpha


def fit_power_law(
    budgets: Sequence[float], losses: Sequence[float], floor: float = 0.0, noise: tuple[float, int] | None = None
) -> Fit:
    """The robust fit of L(B) = E + A·B^−α to (budget, loss) points (module docstring), or why there is none. E lies
    in [floor, min L] (`floor`: the teacher's entropy, below which no val/ce can go). `noise` = (s, dof): the pooled
    relative SE of a point and its degrees of freedom, which sets Huber's scale (HUBER_K · s) and gives the
    lack-of-fit F test; None: Huber's scale HUBER, no test. A pure function of its numbers, remembered: a jackknife
    asks for the same fits once per statistic."""
    return _fit(tuple(float(b) for b in budgets), tuple(float(v) for v in losses), float(floor), noise)


@functools.lru_cache(maxsize=4096)
def _fit(budgets: tuple[float, ...], losses: tuple[float, ...], floor: float, noise: tuple[float, int] | None) -> Fit:
    import numpy as np
    from scipy.optimize import least_squares  # imported here: run processes never need scipy

    if len(budgets) != len(losses):
        raise ValueError(f"{len(budgets)} budgets but {len(losses)} losses")
    if len(budgets) < MIN_BUDGETS:
        return Fit(why=f"{len(budgets)} budget(s): the curve has three parameters, a fit needs at least {MIN_BUDGETS}")
    B, L = np.asarray(budgets, dtype=float), np.asarray(losses, dtype=float)
    if not (np.all(np.isfinite(L)) and np.all(L > 0) and np.all(B > 0)):
        return Fit(why="a budget or loss is not a positive finite number")
    lmin, logB, logL = float(L.min()), np.log(B), np.log(L)
    if floor >= lmin:
        return Fit(why=f"the smallest val/ce {lmin:.4f} is not above the floor {floor:.4f} (the teacher's entropy)")
    scale = HUBER if noise is None or noise[0] <= 0 else HUBER_K * noise[0]

    def residuals(x):
        return np.log(x[0] + np.exp(x[1]) * B ** -x[2]) - logL

    def jacobian(x):
        p = np.exp(x[1]) * B ** -x[2]
        d = x[0] + p
        return np.stack([1 / d, p / d, -p * logB / d], axis=1)

    lo, hi = np.array([floor, -50.0, 0.0]), np.array([lmin, 50.0, ALPHA_MAX])
    best = None
    for x0 in starts(B, L, floor, scale):
        try:
            r = least_squares(
                residuals, np.clip(x0, lo + 1e-12, hi - 1e-12), jac=jacobian, bounds=(lo, hi), loss="huber",
                f_scale=scale, xtol=1e-12, ftol=1e-12, gtol=1e-12, max_nfev=2000,
            )  # fmt: skip
        except (ValueError, FloatingPointError):
            continue
        if r.status > 0 and np.all(np.isfinite(r.x)) and (best is None or r.cost < best.cost):
            best = r
    if best is None:
        return Fit(why="the fit did not converge from any starting point")
    E, logA, alpha = (float(v) for v in best.x)
    cost, lack = float(best.cost), lack_of_fit(best.fun, noise)
    why = ""
    if E >= lmin * (1 - BOUND_TOL):
        why = ("E sits on its upper bound, the smallest observed val/ce: the curve has not bent enough to show an "
               "asymptote below the data")  # fmt: skip
    elif E - floor <= lmin * BOUND_TOL:
        why = (
            f"E sits on its floor {floor:.4f}, the teacher's entropy: the law would put the asymptote below what any "
            "student can reach"
            if floor > 0
            else "E sits on its lower bound 0: no asymptote above zero is resolved"
        )
    elif alpha >= ALPHA_MAX * (1 - BOUND_TOL):
        why = f"α sits on its upper bound {ALPHA_MAX:g}"
    elif alpha <= ALPHA_FLAT:
        why = f"α ≤ {ALPHA_FLAT:g}: the curve is flat over the data, E and A are not told apart"
    if why:
        return Fit(why=why, cost=cost, floor=floor, lack=lack)
    return Fit(E, math.exp(logA), alpha, cost=cost, floor=floor, lack=lack)


def lack_of_fit(residuals, noise: tuple[float, int] | None) -> Lack | None:
    """The lack-of-fit F test (Lack) from the fit's log residuals and the pooled noise (s, its dof); None without
    noise or without a degree of freedom beyond the three parameters."""
    k = len(residuals)
    if noise is None or noise[0] <= 0 or noise[1] < 1 or k <= 3:
        return None
    from scipy.stats import f as f_dist

    F = float(sum(float(r) ** 2 for r in residuals) / (k - 3) / noise[0] ** 2)
    return Lack(F, (k - 3, noise[1]), float(f_dist.sf(F, k - 3, noise[1])))


def starts(B, L, floor: float = 0.0, scale: float = HUBER) -> list:
    """Starting points (E, log A, α) for the fit: at each E of a grid from the floor to 0.9999 of the way to min L
    (denser near min L, where a curve that barely bends puts it), log A and α from the ordinary least-squares line
    through log(L − E) = log A − α log B; the REFINED of them with the lowest robust loss (Huber's scale `scale`)."""
    import numpy as np

    lmin, logB, logL = float(L.min()), np.log(B), np.log(L)
    Es = floor + (lmin - floor) * (1 - np.geomspace(1, 1e-4, E_GRID))
    X = np.stack([np.ones_like(logB), -logB], axis=1)
    coef = np.linalg.lstsq(X, np.log(L[None, :] - Es[:, None]).T, rcond=None)[0].T  # (grid, 2): log A, α
    alpha = np.clip(coef[:, 1], 1e-3, ALPHA_MAX - 1e-3)
    r = np.abs(np.log(Es[:, None] + np.exp(coef[:, :1]) * B[None, :] ** -alpha[:, None]) - logL)
    cost = np.where(r <= scale, 0.5 * r * r, scale * r - 0.5 * scale**2).sum(axis=1)
    return [np.array([Es[i], coef[i, 0], alpha[i]]) for i in np.argsort(cost)[:REFINED]]


# ----------------------------------------------------------------------------- across seeds


Curves = dict[int, dict[float, float]]  # seed → budget → final val/ce of one arm


class Floored(dict[int, dict[float, float]]):
    """Curves that carry the floor their fits respect (`floor`: the teacher's entropy on the validation set; plain
    Curves have none, 0)."""

    floor: float = 0.0


def with_floor(curves: Curves, floor: float) -> Curves:
    out = Floored(curves)
    out.floor = floor
    return out


def noise(
    curves: dict[int, dict[float, float]], seeds: Sequence[int], budgets: Sequence[float]
) -> tuple[float, int] | None:
    """The pooled relative standard error of a budget's mean over `seeds` (each budget's sample variance of
    log val/ce over the seeds, pooled, over n), with its k(n − 1) degrees of freedom; None with one seed."""
    n = len(seeds)
    if n < 2:
        return None
    ss = 0.0
    for b in budgets:
        logs = [math.log(curves[s][b]) for s in seeds]
        m = sum(logs) / n
        ss += sum((v - m) ** 2 for v in logs)
    dof = len(budgets) * (n - 1)
    return math.sqrt(ss / dof / n), dof


def complete_seeds(curves: Sequence[Curves], budgets: Sequence[float]) -> list[int]:
    """The seeds every one of `curves` has at every budget (a contrast's arms: the seeds paired across them)."""
    if not curves:
        return []
    seeds = set.intersection(*(set(c) for c in curves))
    return sorted(s for s in seeds if all(b in c[s] for c in curves for b in budgets))


def mean_fit(curves: Curves, seeds: Sequence[int], budgets: Sequence[float]) -> Fit:
    """The fit of the mean over `seeds` at each budget, above the curves' floor, Huber's scale and the lack-of-fit
    test from the seeds' noise."""
    means = [sum(curves[s][b] for s in seeds) / len(seeds) for b in budgets]
    return fit_power_law(list(budgets), means, getattr(curves, "floor", 0.0), noise(curves, seeds, budgets))


@dataclass(frozen=True)
class Resampled:
    """A statistic of the seeds' mean curve(s): its value on all seeds and its centred jackknife pseudo-values (one
    per seed; the engine's t-interval over them is the jackknife's), or why there is none."""

    value: float | None
    values: list[float]  # the centred pseudo-values; [] when value is None or there is one seed
    seeds: list[int]
    why: str = ""


def jackknife(seeds: Sequence[int], stat: Callable[[list[int]], float | None]) -> Resampled:
    """`stat` of all `seeds` and its centred delete-one pseudo-values (module docstring); a leave-one-out fit that
    fails leaves no interval (why says so)."""
    seeds = list(seeds)
    if not seeds:
        return Resampled(None, [], [], "no seed has every budget")
    full = stat(seeds)
    if full is None:
        return Resampled(None, [], seeds, "the fit on every seed has no numbers")
    if len(seeds) < 2:
        return Resampled(full, [full], seeds, "one seed: no interval")
    loo = [stat([s for s in seeds if s != left]) for left in seeds]
    if any(v is None for v in loo):
        missing = [s for s, v in zip(seeds, loo, strict=True) if v is None]
        return Resampled(full, [], seeds, f"the fit without seed {missing[0]} has no numbers: no interval")
    n, mean = len(seeds), sum(loo) / len(seeds)  # type: ignore[arg-type]
    return Resampled(full, [full + (n - 1) * (mean - v) for v in loo], seeds)  # type: ignore[operator]


def arm_stat(curves: Curves, budgets: Sequence[float], what: Callable[[Fit], float | None]) -> Callable:
    """A statistic of one arm's mean-curve fit over a set of seeds: `what(fit)` (E, a prediction, …)."""

    def stat(seeds: list[int]) -> float | None:
        f = mean_fit(curves, seeds, budgets)
        return what(f) if f.ok else None

    return stat


def contrast_stat(a: Curves, b: Curves, budgets: Sequence[float], what: Callable[[Fit], float | None]) -> Callable:
    """b − a of `what` of the two arms' mean-curve fits over the same seeds (a seed is a unit of both)."""
    sa, sb = arm_stat(a, budgets, what), arm_stat(b, budgets, what)

    def stat(seeds: list[int]) -> float | None:
        va, vb = sa(seeds), sb(seeds)
        return None if va is None or vb is None else vb - va

    return stat


def asymptote(f: Fit) -> float | None:
    return f.E


def at_budget(budget: float) -> Callable[[Fit], float | None]:
    return lambda f: f.at(budget)


# ----------------------------------------------------------------------------- predictions of a held-out budget


@dataclass(frozen=True)
class Prediction:
    """A predicted mean over seeds at a held-out budget with its prediction interval (at the stated level)."""

    value: float
    half: float  # t_{n−1} at the Bonferroni-adjusted level × √(SE_jackknife² + s²/n)
    se_fit: float  # the jackknife SE of the predicted mean
    sd_seed: float  # s: the sd over seeds at the largest fitted budget (the held-out mean's own noise, stood in)
    n: int
    level: float  # each interval's level: 1 − 0.05 / (the number of predictions), so all hold together at 95%

    @property
    def lo(self) -> float:
        return self.value - self.half

    @property
    def hi(self) -> float:
        return self.value + self.half

    def covers(self, observed: float) -> bool:
        return self.lo <= observed <= self.hi


def predict(r: Resampled, last_values: Sequence[float], level: float) -> Prediction | None:
    """The prediction interval of a mean over the same seeds at a budget not yet run, from its jackknife (`r`) and
    the spread of the per-seed values at the largest fitted budget (`last_values`: the mean to come has its own seed
    noise, s/√n, added to the fit's). Conservative where a seed's runs are correlated across budgets (the shared part
    of the noise counts twice). None without an interval (fewer than two seeds, or a failed fit)."""
    n = len(r.values)
    if r.value is None or n < 2 or len(last_values) < 2:
        return None
    se = math.sqrt(sum((v - r.value) ** 2 for v in r.values) / (n - 1) / n)
    m = sum(last_values) / len(last_values)
    sd = math.sqrt(sum((v - m) ** 2 for v in last_values) / (len(last_values) - 1))
    half = t_quantile(n - 1, level) * math.sqrt(se**2 + sd**2 / n)
    return Prediction(r.value, half, se, sd, n, level)
