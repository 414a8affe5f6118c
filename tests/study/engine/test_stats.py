"""Statistics: the typed estimate and the study's aggregate from synthetic run records and stage records, expected
values computed here."""

import math

import numpy as np
import pytest

from normgrow.study.config import ArmConfig, StudyConfig
from normgrow.study.engine.stats import Estimate, Ratio, estimate, fieller_ratio, holm, t_quantile
from normgrow.study.record import RunRecord
from normgrow.study.report.contrasts import aggregate, contrast, phase_table


def t95(df: int) -> float:
    return t_quantile(df, 0.95)


# two-sided 95% t quantiles in closed form: df 1 is the Cauchy, df 2 has t = (2p − 1) / sqrt(2p(1 − p))
T_DF1 = math.tan(0.475 * math.pi)  # 12.7062…
T_DF2 = 0.95 / math.sqrt(2 * 0.975 * 0.025)  # 4.3027…


def row(arm, seed, ce, status="ok", stages=None, **compute) -> RunRecord:
    """A run's record as a results.csv row gives it (values as strings), its summary's stages if any."""
    base = {"tokens": 100, "active_layer_tokens": 900, "trainable_layer_tokens": 900, "flops": 1e9}
    base.update(compute)
    columns = {
        "arm": arm,
        "seed": str(seed),
        "status": status,
        "val_ce": "" if status != "ok" else str(ce),
        "val_nll": "" if status != "ok" else str(ce + 1),
        **{k: str(v) for k, v in base.items()},
    }
    return RunRecord(arm, seed, 1e-3, status, "", summary={"stages": stages or []}, columns=columns)


def study(arms, contrasts=None, gap_ratio=(), phase=()) -> StudyConfig:
    return StudyConfig(
        arms={a: ArmConfig() for a in arms}, contrasts=contrasts or {}, gap_ratio=list(gap_ratio), phase=list(phase)
    )


def test_estimate_by_hand():
    s = estimate([1.0, 2.0, 3.0])
    assert s.mean == 2.0 and s.sd == pytest.approx(1.0)
    assert s.half == pytest.approx(T_DF2 / math.sqrt(3), rel=1e-12)
    assert (s.lo, s.hi) == (s.mean - s.half, s.mean + s.half) and s.sign == 0  # [−0.48, 4.48] contains 0
    one = estimate([5.0])
    assert one == Estimate(1, 5.0) and one.lo is None and one.sign == 0  # no interval from one value
    assert estimate([]).mean is None
    assert estimate([-3.1, -3.0, -2.9]).sign == -1 and estimate([-1.0, 1.0, 0.5]).sign == 0
    assert one.as_dict() == {"n": 1, "mean": 5.0, "sd": None, "ci95": None}  # regime.json's form
    assert t95(1) == pytest.approx(T_DF1, rel=1e-12) and t95(2) == pytest.approx(T_DF2, rel=1e-12)
    assert t95(9) == pytest.approx(2.2622, abs=1e-4) and t95(11) == pytest.approx(2.2010, abs=1e-4)  # tables
    assert t95(11) < t95(10)  # not the next tabulated degrees of freedom: exact


def test_aggregate_arms_contrasts_ratio_and_failures():
    rows = [
        row("pre", 0, 5.0),
        row("pre", 1, 5.2),
        row("pre", 2, 5.4),
        row("post", 0, 4.9),
        row("post", 1, 5.0),
        row("post", 2, 0.0, status="failed"),
        row("pre-g", 0, 6.0, tokens=300),
        row("pre-g", 1, 6.1, tokens=500),
        row("post-g", 0, 5.5),
        row("post-g", 1, 5.7),
    ]
    s = study(
        ["pre", "post", "pre-g", "post-g"], {"joint": ["pre", "post"], "grow": ["pre-g", "post-g"]}, ["grow", "joint"]
    )
    agg = aggregate(s, rows)
    pre = agg.arms["pre"].val_ce
    assert pre.n == 3 and pre.mean == pytest.approx(5.2) and pre.sd == pytest.approx(0.2)
    assert agg.arms["post"].failed == [2] and agg.arms["post"].val_ce.n == 2
    assert agg.arms["pre-g"].compute["tokens"] == pytest.approx(400)  # mean over finished seeds
    joint = agg.contrasts["joint"]
    assert joint.seeds == [0, 1]  # paired over the seeds both arms finished
    assert joint.diffs == pytest.approx([-0.1, -0.2])
    assert joint.est.mean == pytest.approx(-0.15)
    sd = math.sqrt(((-0.1 + 0.15) ** 2 + (-0.2 + 0.15) ** 2) / 1)
    assert joint.est.half == pytest.approx(T_DF1 * sd / math.sqrt(2))
    grow = agg.contrasts["grow"]
    assert grow.est.mean == pytest.approx(-0.45)
    # signed ratio over the seeds both contrasts have: grow (−0.5, −0.4) over joint (−0.1, −0.2)
    assert agg.gap_ratio.ratio == pytest.approx(-0.45 / -0.15)
    assert agg.gap_ratio.lo is None and "contains 0" in agg.gap_ratio.why  # 2 seeds: t = 12.7


def test_gap_ratio_is_undefined_when_the_denominator_is_zero():
    rows = [row("a", 0, 5.0), row("b", 0, 5.0), row("c", 0, 5.0), row("d", 0, 4.0)]
    agg = aggregate(study("abcd", {"x": ["c", "d"], "y": ["a", "b"]}, ["x", "y"]), rows)
    assert agg.contrasts["y"].est.mean == 0.0 and agg.gap_ratio.ratio is None


def test_fieller_interval_is_the_set_the_definition_gives():
    """Scan R and keep those with (x̄ − Rȳ)² ≤ t²(v_xx − 2R v_xy + R² v_yy): the interval's ends, found here by
    brute force, match the closed form."""
    x, y = [-0.30, -0.36, -0.27, -0.33], [0.10, 0.13, 0.08, 0.11]
    r = fieller_ratio(x, y)
    n = 4
    mx, my = sum(x) / n, sum(y) / n
    vxx = sum((a - mx) ** 2 for a in x) / (n - 1) / n
    vyy = sum((b - my) ** 2 for b in y) / (n - 1) / n
    vxy = sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True)) / (n - 1) / n
    t2 = 3.182446305284263**2  # t(0.975, 3)
    inside = [
        k / 10000
        for k in range(-60000, 0)
        if (mx - k / 10000 * my) ** 2 <= t2 * (vxx - 2 * k / 10000 * vxy + (k / 10000) ** 2 * vyy)
    ]
    assert r.ratio == pytest.approx(mx / my)
    assert r.lo == pytest.approx(inside[0], abs=2e-4) and r.hi == pytest.approx(inside[-1], abs=2e-4)
    assert r.lo < r.ratio < r.hi
    wide = fieller_ratio(x, [0.10, -0.13, 0.08, -0.01])  # denominator's interval contains 0
    assert wide.lo is None and wide.hi is None and "contains 0" in wide.why
    assert fieller_ratio([1.0], [2.0]) == Ratio(0.5, None, None, 1, "one seed")


def stages(*pairs):
    """Stage records: (n_layer, val/ce at start, val/ce at end) per stage."""
    return [{"n_layer": n, "start": {"val/ce": s}, "end": {"val/ce": e}} for n, s, e in pairs]


def test_phase_table_rows_and_leaders():
    rows = [
        row("a", 0, 3.0, stages=stages((1, 9, 5.0), (2, 5.0, 4.0))),
        row("b", 0, 3.0, stages=stages((1, 9, 5.2), (2, 5.1, 3.8))),
        row("a", 1, 3.0, stages=stages((1, 9, 5.0), (2, 5.0, 4.0))),
        row("b", 1, 3.0, stages=stages((1, 9, 5.4), (2, 5.3, 3.6))),
    ]
    ph = phase_table("a", "b", rows)
    assert [(r.stage, r.point) for r in ph.rows] == [(0, "stage end"), (1, "after growth"), (1, "stage end")]
    end0, after, end1 = ph.rows
    assert end0.diff.mean == pytest.approx(0.3) and end0.leader == "a"
    assert after.a == pytest.approx(5.0) and after.b == pytest.approx(5.2)
    assert end1.diff.mean == pytest.approx(-0.3) and end1.leader == "b"
    assert contrast(rows, "a", "b").diffs == [0.0, 0.0]


def test_holm_step_down_by_hand():
    # sorted 0.01, 0.02, 0.03, 0.5 (m = 4): 4 × 0.01 = 0.04, max(0.04, 3 × 0.02 = 0.06), max(0.06, 2 × 0.03), 0.5
    assert holm([0.03, 0.01, 0.5, 0.02]) == pytest.approx([0.06, 0.04, 0.5, 0.06])
    # 2 × 0.8 = 1.6 is capped at 1, and the step-down keeps it monotone: 0.9 becomes max(1, 0.9) = 1
    assert holm([0.9, 0.8]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []


def test_paired_t_power_against_known_values_and_a_simulation():
    from scipy.stats import ttest_1samp

    from normgrow.study.engine.stats import detectable, sd_interval, seeds_for, t_power

    assert t_power(0.0, 1.0, 5) == pytest.approx(0.05, abs=1e-12)  # no effect: the test's own α
    # the textbook case (one-sample t, effect size d = 1, α = 0.05 two-sided, 80% power): 10 subjects, power 0.803
    assert seeds_for(0.01, 0.01) == 10 and t_power(0.01, 0.01, 10) == pytest.approx(0.8031, abs=5e-4)
    assert t_power(0.01, 0.01, 9) < 0.8
    e = detectable(0.02, 3)
    assert t_power(e, 0.02, 3) == pytest.approx(0.8, abs=1e-9) and t_power(0.99 * e, 0.02, 3) < 0.8
    # power by simulation with scipy's own t-test: 3 seeds, true contrast 2 sd
    rng = np.random.default_rng(0)
    draws = rng.normal(2.0, 1.0, size=(40_000, 3))
    simulated = float(np.mean(ttest_1samp(draws, 0.0, axis=1).pvalue < 0.05))
    assert t_power(2.0, 1.0, 3) == pytest.approx(simulated, abs=0.01)
    # chi-square interval of an sd from 3 values by hand: sd·sqrt(2 / χ²₀.₉₇₅,₂), sd·sqrt(2 / χ²₀.₀₂₅,₂)
    lo, hi = sd_interval(1.0, 3)
    assert lo == pytest.approx(math.sqrt(2 / 7.377759), rel=1e-5) and hi == pytest.approx(
        math.sqrt(2 / 0.0506356), rel=1e-5
    )
