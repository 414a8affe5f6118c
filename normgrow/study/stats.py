"""Statistics of a study, computed from plain numbers: results.csv rows and the runs' per-stage evaluations.

- Per arm: mean, sd and a 95% t-interval of the final val/ce over seeds.
- Per contrast (a, b): the paired difference b − a over the seeds both finished, with its t-interval.
- A ratio of two paired contrasts (the grow gap over the joint gap) with Fieller's 95% interval,
  which is undefined — not infinite, not bold — when the denominator's own interval contains 0.
- Phase-wise (two curriculum arms): their val/ce at every stage end (and just after each growth),
  per seed, and the paired difference with its interval.
With one seed there is no interval: `ci95` is None and the report says so instead of printing a
zero-width interval. t quantiles are exact (scipy). Nothing here reads files or writes text
(report.py and claims.py turn these into words).
"""

from __future__ import annotations

import math


def t_quantile(df: int, level: float = 0.95) -> float:
    """Two-sided Student-t quantile for a `level` interval with `df` degrees of freedom (exact: scipy)."""
    from scipy.stats import t as student_t  # imported here: run processes never need scipy

    return float(student_t.ppf((1 + level) / 2, df))


def t95(df: int) -> float:
    """Two-sided 95% Student-t quantile with `df` degrees of freedom."""
    return t_quantile(df, 0.95)


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


def mean_ci(values: list[float], level: float = 0.95) -> dict:
    """mean, sd, and the half-width `ci95` of a t-interval at `level` (95% unless asked; None with fewer than two
    values)."""
    n = len(values)
    if n == 0:
        return {"n": 0, "mean": None, "sd": None, "ci95": None}
    mean = sum(values) / n
    if n < 2:
        return {"n": 1, "mean": mean, "sd": None, "ci95": None}
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return {"n": n, "mean": mean, "sd": sd, "ci95": t_quantile(n - 1, level) * sd / math.sqrt(n)}


COMPUTE = ("tokens", "active_layer_tokens", "trainable_layer_tokens", "flops")


def finished(rows: list[dict], arm: str) -> dict[int, dict]:
    """The rows of an arm's finished runs, by seed."""
    return {int(r["seed"]): r for r in rows if r["arm"] == arm and r["status"] == "ok"}


def aggregate(
    arms: list[str],
    contrasts: dict[str, list[str]],
    gap_ratio: list[str],
    phase: list[str],
    rows: list[dict],
    stages: dict[tuple[str, int], list[dict]],
) -> dict:
    """Every number the report shows. `rows` are results.csv's; `stages` maps a run, (arm, seed), to its
    summary's per-stage records (only the phase arms' are read)."""
    per_arm = {}
    for arm in arms:
        ok = finished(rows, arm)
        per_arm[arm] = {
            "val_ce": mean_ci([float(r["val_ce"]) for r in ok.values() if r["val_ce"] != ""]),
            "val_nll": mean_ci([float(r["val_nll"]) for r in ok.values() if r["val_nll"] != ""]),
            "failed": sorted(int(r["seed"]) for r in rows if r["arm"] == arm and r["status"] != "ok"),
            "compute": {k: (sum(float(r[k]) for r in ok.values()) / len(ok) if ok else None) for k in COMPUTE},
        }
    per_contrast = {name: paired(rows, a, b) for name, (a, b) in contrasts.items()}
    ratio = None
    if gap_ratio:
        x, y = (per_contrast[c] for c in gap_ratio)
        seeds = sorted(set(x["seeds"]) & set(y["seeds"]))
        ratio = fieller_ratio(
            [x["diffs"][x["seeds"].index(s)] for s in seeds], [y["diffs"][y["seeds"].index(s)] for s in seeds]
        )
    return {
        "arms": per_arm,
        "contrasts": per_contrast,
        "gap_ratio": ratio,
        "phase": phase_table(phase[0], phase[1], rows, stages) if phase else None,
    }


def paired(rows: list[dict], a: str, b: str) -> dict:
    """b − a of final val/ce over the seeds both arms finished, with its t-interval."""
    ra, rb = finished(rows, a), finished(rows, b)
    seeds = sorted(set(ra) & set(rb))
    diffs = [float(rb[s]["val_ce"]) - float(ra[s]["val_ce"]) for s in seeds]
    return {"a": a, "b": b, "seeds": seeds, "diffs": diffs, **mean_ci(diffs)}


def phase_table(a: str, b: str, rows: list[dict], stages: dict[tuple[str, int], list[dict]]) -> dict | None:
    """val/ce of the two phase arms at the end of every stage (and just after each growth), per seed,
    their paired differences b − a, and the stage where the leader changes (the crossover)."""
    ra, rb = finished(rows, a), finished(rows, b)
    seeds = sorted(set(ra) & set(rb))
    if not seeds:
        return {"a": a, "b": b, "rows": [], "crossover": None, "seeds": []}
    per_seed = {s: (stages[(a, s)], stages[(b, s)]) for s in seeds}
    n_stages = min(len(x) for pair in per_seed.values() for x in pair)
    out = []
    for k in range(n_stages):
        for point in ["start", "end"] if k > 0 else ["end"]:
            va = [per_seed[s][0][k][point]["val/ce"] for s in seeds]
            vb = [per_seed[s][1][k][point]["val/ce"] for s in seeds]
            diff = mean_ci([y - x for x, y in zip(va, vb, strict=True)])
            out.append(
                {
                    "stage": k,
                    "point": "after growth" if point == "start" else "stage end",
                    "n_layer": per_seed[seeds[0]][0][k]["n_layer"],
                    "a": sum(va) / len(va),
                    "b": sum(vb) / len(vb),
                    "diff": diff,
                    "leader": b if diff["mean"] < 0 else a,
                }
            )
    ends = [r for r in out if r["point"] == "stage end"]
    crossover = None
    for prev, cur in zip(ends, ends[1:], strict=False):
        if cur["leader"] != prev["leader"]:
            crossover = {"stage": cur["stage"], "n_layer": cur["n_layer"], "from": prev["leader"], "to": cur["leader"]}
            break
    return {"a": a, "b": b, "rows": out, "crossover": crossover, "seeds": seeds}


def fieller_ratio(x: list[float], y: list[float]) -> dict:
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
        return {"ratio": None, "lo": None, "hi": None, "n": 0, "why": "no seeds"}
    mx, my = sum(x) / n, sum(y) / n
    ratio = mx / my if my != 0 else None
    if n < 2:
        return {"ratio": ratio, "lo": None, "hi": None, "n": n, "why": "one seed"}
    vxx = sum((a - mx) ** 2 for a in x) / (n - 1) / n
    vyy = sum((b - my) ** 2 for b in y) / (n - 1) / n
    vxy = sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True)) / (n - 1) / n
    t2 = t95(n - 1) ** 2
    a = my * my - t2 * vyy
    if a <= 0:
        return {"ratio": ratio, "lo": None, "hi": None, "n": n, "why": "the denominator's 95% interval contains 0"}
    b = -2 * (mx * my - t2 * vxy)
    c = mx * mx - t2 * vxx
    disc = max(b * b - 4 * a * c, 0.0)
    lo, hi = sorted(((-b - math.sqrt(disc)) / (2 * a), (-b + math.sqrt(disc)) / (2 * a)))
    return {"ratio": ratio, "lo": lo, "hi": hi, "n": n, "why": ""}


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


def contrast_sign(c: dict) -> int:
    """interval_sign of a `mean_ci`-style record ({mean, ci95}): 0 without a mean or an interval."""
    if c.get("mean") is None or c.get("ci95") is None:
        return 0
    return interval_sign(c["mean"] - c["ci95"], c["mean"] + c["ci95"])
