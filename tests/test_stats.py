"""Statistics on the aggregate itself: synthetic results rows and stage records, expected values computed here."""

import math

import pytest

from normgrow.stats import aggregate, mean_ci, paired, phase_table, t95


def row(arm, seed, ce, status="ok", **compute):
    base = {"tokens": 100, "active_layer_tokens": 900, "trainable_layer_tokens": 900, "flops": 1e9}
    base.update(compute)
    return {"arm": arm, "seed": str(seed), "status": status, "val_ce": "" if status != "ok" else str(ce),
            "val_nll": "" if status != "ok" else str(ce + 1), **{k: str(v) for k, v in base.items()}}


def test_mean_ci_by_hand():
    s = mean_ci([1.0, 2.0, 3.0])
    assert s["mean"] == 2.0 and s["sd"] == pytest.approx(1.0)
    assert s["ci95"] == pytest.approx(4.303 / math.sqrt(3))  # t(0.975, df=2) = 4.303
    one = mean_ci([5.0])
    assert one == {"n": 1, "mean": 5.0, "sd": None, "ci95": None}  # no interval from one value
    assert mean_ci([])["mean"] is None
    assert t95(1) == pytest.approx(12.706) and t95(9) == pytest.approx(2.262)


def test_aggregate_arms_contrasts_ratio_and_failures():
    rows = [row("pre", 0, 5.0), row("pre", 1, 5.2), row("pre", 2, 5.4),
            row("post", 0, 4.9), row("post", 1, 5.0), row("post", 2, 0.0, status="failed"),
            row("pre-g", 0, 6.0, tokens=300), row("pre-g", 1, 6.1, tokens=500),
            row("post-g", 0, 5.5), row("post-g", 1, 5.7)]
    agg = aggregate(["pre", "post", "pre-g", "post-g"], {"joint": ["pre", "post"], "grow": ["pre-g", "post-g"]},
                    ["grow", "joint"], [], rows, {})
    pre = agg["arms"]["pre"]["val_ce"]
    assert pre["n"] == 3 and pre["mean"] == pytest.approx(5.2) and pre["sd"] == pytest.approx(0.2)
    assert agg["arms"]["post"]["failed"] == [2] and agg["arms"]["post"]["val_ce"]["n"] == 2
    assert agg["arms"]["pre-g"]["compute"]["tokens"] == pytest.approx(400)  # mean over finished seeds
    joint = agg["contrasts"]["joint"]
    assert joint["seeds"] == [0, 1]  # paired over the seeds both arms finished
    assert joint["diffs"] == pytest.approx([-0.1, -0.2])
    assert joint["mean"] == pytest.approx(-0.15)
    sd = math.sqrt(((-0.1 + 0.15) ** 2 + (-0.2 + 0.15) ** 2) / 1)
    assert joint["ci95"] == pytest.approx(12.706 * sd / math.sqrt(2))
    grow = agg["contrasts"]["grow"]
    assert grow["mean"] == pytest.approx(-0.45)
    assert agg["gap_ratio"] == pytest.approx(0.45 / 0.15)


def test_gap_ratio_is_none_when_the_denominator_is_zero():
    rows = [row("a", 0, 5.0), row("b", 0, 5.0), row("c", 0, 5.0), row("d", 0, 4.0)]
    agg = aggregate(list("abcd"), {"x": ["c", "d"], "y": ["a", "b"]}, ["x", "y"], [], rows, {})
    assert agg["contrasts"]["y"]["mean"] == 0.0 and agg["gap_ratio"] is None


def stages(*pairs):
    """Stage records: (n_layer, val/ce at start, val/ce at end) per stage."""
    return [{"n_layer": n, "start": {"val/ce": s}, "end": {"val/ce": e}} for n, s, e in pairs]


def test_phase_table_rows_and_crossover():
    rows = [row("a", 0, 3.0), row("b", 0, 3.0), row("a", 1, 3.0), row("b", 1, 3.0)]
    recs = {"a-s0": stages((1, 9, 5.0), (2, 5.0, 4.0)), "b-s0": stages((1, 9, 5.2), (2, 5.1, 3.8)),
            "a-s1": stages((1, 9, 5.0), (2, 5.0, 4.0)), "b-s1": stages((1, 9, 5.4), (2, 5.3, 3.6))}
    ph = phase_table("a", "b", rows, recs)
    assert [(r["stage"], r["point"]) for r in ph["rows"]] == [(0, "stage end"), (1, "after growth"), (1, "stage end")]
    end0, after, end1 = ph["rows"]
    assert end0["diff"]["mean"] == pytest.approx(0.3) and end0["leader"] == "a"
    assert after["a"] == pytest.approx(5.0) and after["b"] == pytest.approx(5.2)
    assert end1["diff"]["mean"] == pytest.approx(-0.3) and end1["leader"] == "b"
    assert ph["crossover"] == {"stage": 1, "n_layer": 2, "from": "a", "to": "b"}
    assert paired(rows, "a", "b")["diffs"] == [0.0, 0.0]
