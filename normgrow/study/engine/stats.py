"""Statistics from plain numbers: one typed interval estimate, paired differences, Fieller's ratio, Holm's
adjustment and the paired t-test's power. Nothing here reads files or writes text.

    Estimate        n, mean, sd and the half-width of a t-interval at `level` (95% unless asked); `lo`, `hi` the
                    interval's ends. With one value there is no interval: `half` is None and a report says so
                    instead of printing a zero-width interval. What every statistic returns and every sentence reads.
    Contrast        b − a of one measure, paired by seed over the seeds both have: the seeds, the per-seed
                    differences and their Estimate
    Ratio           the signed ratio of two paired samples' means with Fieller's 95% interval, undefined — not
                    infinite, not bold — when the denominator's own interval contains 0

t quantiles are exact (scipy).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def t_quantile(df: int, level: float = 0.95) -> float:
    """Two-sided Student-t quantile for a `level` interval with `df` degrees of freedom (exact: scipy)."""
    from scipy.stats import t as student_t  # imported here: run processes never need scipy

    return float(student_t.ppf((1 + level) / 2, df))


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given: the i-th smallest p becomes
    max over j ≤ i of min(1, (m − j + 1) · p_(j)). Rejecting where the adjusted p ≤ α keeps the chance of any false
    rejection among the m at most α, whatever their dependence."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def t_power(effect: float, sd: float, n: int, level: float = 0.95) -> float:
    """Power of the two-sided paired t-test at `level` over n seeds against a true contrast `effect` with per-seed sd
    `sd`: P(|T| > t_c) for T noncentral t with n − 1 degrees of freedom and noncentrality effect·√n / sd (exact:
    scipy)."""
    from scipy.stats import nct  # imported here: run processes never need scipy

    tc, nc = t_quantile(n - 1, level), effect * math.sqrt(n) / sd
    return float(nct.sf(tc, n - 1, nc) + nct.cdf(-tc, n - 1, nc))


def detectable(sd: float, n: int, power: float = 0.8, level: float = 0.95) -> float:
    """The smallest true contrast the paired t-test over n seeds resolves from 0 with this power."""
    from scipy.optimize import brentq

    hi = sd
    while t_power(hi, sd, n, level) < power:
        hi *= 2
    return float(brentq(lambda e: t_power(e, sd, n, level) - power, 0.0, hi, xtol=sd * 1e-9))


def seeds_for(effect: float, sd: float, power: float = 0.8, level: float = 0.95, most: int = 10_000) -> int | None:
    """The fewest seeds (≥ 2) whose paired t-test resolves a true contrast `effect` from 0 with this power (None past
    `most`)."""
    n = 2
    while t_power(abs(effect), sd, n, level) < power:
        n += 1
        if n > most:
            return None
    return n


def sd_interval(sd: float, n: int, level: float = 0.95) -> tuple[float, float]:
    """The chi-square `level` interval of a standard deviation estimated from n values."""
    from scipy.stats import chi2

    df = n - 1
    return (sd * math.sqrt(df / chi2.ppf((1 + level) / 2, df)), sd * math.sqrt(df / chi2.ppf((1 - level) / 2, df)))


@dataclass(frozen=True)
class Estimate:
    """A mean over seeds with its t-interval: n values, their mean and sd, and the interval's half-width."""

    n: int = 0
    mean: float | None = None
    sd: float | None = None
    half: float | None = None  # t_{level, n−1} · sd / √n; None with fewer than two values
    level: float = 0.95

    @property
    def lo(self) -> float | None:
        return None if self.mean is None or self.half is None else self.mean - self.half

    @property
    def hi(self) -> float | None:
        return None if self.mean is None or self.half is None else self.mean + self.half

    @property
    def sign(self) -> int:
        """−1 / +1 when the interval lies below / above 0; 0 when it contains 0 or there is none."""
        return interval_sign(self.lo, self.hi)

    def as_dict(self) -> dict:
        """{n, mean, sd, ci95}: the form regime.json records."""
        return {"n": self.n, "mean": self.mean, "sd": self.sd, "ci95": self.half}


def estimate(values: list[float], level: float = 0.95) -> Estimate:
    """mean, sd, and the half-width of a t-interval at `level` (95% unless asked; none with fewer than two values)."""
    n = len(values)
    if n == 0:
        return Estimate(level=level)
    mean = sum(values) / n
    if n < 2:
        return Estimate(1, mean, level=level)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return Estimate(n, mean, sd, t_quantile(n - 1, level) * sd / math.sqrt(n), level)


@dataclass(frozen=True)
class Contrast:
    """b − a of a measure over the seeds both arms have, per seed and as an Estimate."""

    a: str
    b: str
    seeds: list[int]
    diffs: list[float]
    est: Estimate

    def at(self, seed: int) -> float:
        return self.diffs[self.seeds.index(seed)]


def paired(a: str, b: str, va: dict[int, float], vb: dict[int, float]) -> Contrast:
    """b − a over the seeds both value maps ({seed: value}) have."""
    seeds = sorted(set(va) & set(vb))
    diffs = [vb[s] - va[s] for s in seeds]
    return Contrast(a, b, seeds, diffs, estimate(diffs))


@dataclass(frozen=True)
class Ratio:
    """mean(x) / mean(y) with Fieller's 95% interval (lo, hi None where it is undefined, with the reason)."""

    ratio: float | None
    lo: float | None
    hi: float | None
    n: int
    why: str = ""


def fieller_ratio(x: list[float], y: list[float]) -> Ratio:
    """The signed ratio mean(x) / mean(y) of two paired samples (one value of each per seed) and its
    Fieller 95% interval, which accounts for the uncertainty of the denominator and for the
    covariance of the two over seeds.

    With x̄, ȳ the means, v_xx, v_yy, v_xy the (co)variances of the means and t the 95% t quantile,
    the interval is the set of R with (x̄ − R·ȳ)² ≤ t²·(v_xx − 2R·v_xy + R²·v_yy), bounded exactly when
    ȳ² > t²·v_yy — when the denominator's own t-interval excludes 0. Otherwise the interval is
    undefined (`lo`, `hi` None, with the reason), and so is the ratio when ȳ = 0."""
    n = min(len(x), len(y))
    x, y = x[:n], y[:n]
    if n == 0:
        return Ratio(None, None, None, 0, "no seeds")
    mx, my = sum(x) / n, sum(y) / n
    ratio = mx / my if my != 0 else None
    if n < 2:
        return Ratio(ratio, None, None, n, "one seed")
    vxx = sum((a - mx) ** 2 for a in x) / (n - 1) / n
    vyy = sum((b - my) ** 2 for b in y) / (n - 1) / n
    vxy = sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True)) / (n - 1) / n
    t2 = t_quantile(n - 1) ** 2
    a = my * my - t2 * vyy
    if a <= 0:
        return Ratio(ratio, None, None, n, "the denominator's 95% interval contains 0")
    b = -2 * (mx * my - t2 * vxy)
    c = mx * mx - t2 * vxx
    disc = max(b * b - 4 * a * c, 0.0)
    lo, hi = sorted(((-b - math.sqrt(disc)) / (2 * a), (-b + math.sqrt(disc)) / (2 * a)))
    return Ratio(ratio, lo, hi, n)


def interval_sign(lo: float | None, hi: float | None) -> int:
    """−1 / +1 when the interval [lo, hi] lies entirely below / above 0; 0 when it contains 0 or is unknown.
    The one reading of "the sign is resolved" that claims, sweeps and study comparisons share."""
    if lo is None or hi is None:
        return 0
    if hi < 0:
        return -1
    if lo > 0:
        return 1
    return 0
