"""The validation set in a contrast's interval (normgrow/study/report/valsample.py), by hand: the seed term, the set term,
both together and the larger one named, from hand-made per-sequence ce."""

import math

import pytest
from scipy.stats import norm
from scipy.stats import t as student_t

from normgrow.study.record import RunRecord
from normgrow.study.report.valsample import split, split_lines


def rec(arm, seed, per_seq):
    summary = {
        "val/ce": sum(per_seq) / len(per_seq),
        "val/ce_per_sequence": per_seq,
        "wall_time_s": 1.0,
        "compute": {"step": 1, "tokens": 1, "active_layer_tokens": 1, "trainable_layer_tokens": 1, "flops": 1},
    }
    return RunRecord(arm, seed, 1e-3, "ok", f"runs/{arm}-s{seed}", summary=summary)


def test_the_seed_and_set_terms_by_hand():
    """a scores 0 on four sequences; b 0.1, 0.2, 0.3, 0.4 at seed 0 and 0.2 … 0.5 at seed 1. Per seed Δ 0.25, 0.35:
    the seed term var = 0.005 / 2, half-width t₁ · 0.05. Per sequence (mean over seeds) 0.15, 0.25, 0.35, 0.45:
    var 0.016667 / 4, half-width z · 0.06455. Both: t₁ · √(0.0025 + 0.0041667). The set term is the smaller."""
    rows = [rec("a", s, [0.0] * 4) for s in (0, 1)]
    rows += [rec("b", 0, [0.1, 0.2, 0.3, 0.4]), rec("b", 1, [0.2, 0.3, 0.4, 0.5])]
    sp = split(rows, "a", "b")
    t1, z = student_t.ppf(0.975, 1), norm.ppf(0.975)
    assert sp.delta == pytest.approx(0.3) and (sp.seeds, sp.sequences) == (2, 4)
    assert sp.seed_half == pytest.approx(t1 * 0.05)
    assert sp.set_half == pytest.approx(z * math.sqrt(0.05 / 3 / 4))
    assert sp.both_half == pytest.approx(t1 * math.sqrt(0.0025 + 0.05 / 3 / 4))
    assert sp.larger == "the validation set"  # 0.0042 > 0.0025
    # one seed: the set term alone; runs without per-sequence ce: no split, said in the report
    one = split(rows[:1] + rows[2:3], "a", "b")
    assert one.seed_half is None and one.both_half is None and one.larger.startswith("the validation set")
    old = [RunRecord("a", 0, 1e-3, "ok", "r", summary={}), RunRecord("b", 0, 1e-3, "ok", "s", summary={})]
    assert split(old, "a", "b") is None
    lines = split_lines({"gap": ["a", "b"], "old": ["c", "d"]}, rows)
    assert any(line.startswith("| gap | +0.3000 | 2 | 4 | ") and "the validation set |" in line for line in lines)
    assert any(line.startswith("| old | — |") for line in lines)


@pytest.mark.parametrize(
    "edit",
    [
        lambda xs: xs[:-1],  # cut: no longer averages to val/ce
        lambda xs: [xs[0] + 1.0, *xs[1:]],  # a value changed
        lambda xs: ["x", *xs[1:]],  # not a number
        lambda xs: [float("nan"), *xs[1:]],
        lambda xs: None,
        lambda xs: {"0": xs[0]},
    ],
)
def test_a_per_sequence_list_that_cannot_be_the_runs_own_is_not_read(edit):
    """Before: a summary.json whose per-sequence ce was edited by hand entered the set term as written (or crashed the
    report on a string). Now a list that is not finite numbers averaging to the run's val/ce is left out."""
    rows = [rec("a", s, [0.0] * 4) for s in (0, 1)]
    rows += [rec("b", 0, [0.1, 0.2, 0.3, 0.4]), rec("b", 1, [0.2, 0.3, 0.4, 0.5])]
    rows[2].summary["val/ce_per_sequence"] = edit(rows[2].summary["val/ce_per_sequence"])
    sp = split(rows, "a", "b")
    assert sp is not None and sp.seeds == 1  # seed 0's pair left out, seed 1's read
    assert sp.delta == pytest.approx(0.35)
