"""A study's tree as a value (normgrow/study/tree.py): the shipped presets' shapes, read by hand from their files."""

from normgrow.study.config import load_study
from normgrow.study.tree import Shape, shape


def test_the_shipped_studies_shapes_by_hand():
    # tiny: nine arms, no rates chosen: its own runs alone
    assert shape(load_study("tiny")) == Shape(False, 0, "none", None, False, False, "plain", False, None)
    # default: no pilot, envelope seeds [0] anchored at each arm's train.lr, one budget
    default = shape(load_study("default"))
    assert (default.pilot, default.envelope, default.chooses_rates, default.leaves) == (False, True, True, "plain")
    # coord: a pilot, the envelope at each of budgets 1, 2, 4 (a ladder of rungs, no check, no holdout)
    coord = shape(load_study("coord"))
    assert (coord.pilot, coord.envelope, coord.check, coord.leaves, coord.trunks) == (
        True,
        True,
        "none",
        "ladder",
        False,
    )
    # the default study as a branch ladder without the envelope, a pilot and a held-out budget: trunks, a check that
    # runs (budget 1 is not the pilot's 0.5), the holdout last
    ladder = load_study(
        "default",
        ["budgets=[0.25,0.5,1,2,4]", "holdout=4", "ladder=branches", "train.schedule=wsd",
         "lr_pilot.envelope_seeds=[]", "lr_pilot.lrs=[0.002,0.004]"],
    )  # fmt: skip
    tree = shape(ladder)
    assert (tree.pilot, tree.envelope, tree.check, tree.trunks, tree.holdout) == (True, False, "run", True, 4.0)
    # rungs 0.25, 0.5, 1 with the pilot at the full budget (0.5, the study's): the check (the middle budget, 0.5)
    # would re-run the pilot's point: skipped, with its note
    at_pilot = load_study(
        "default", ["budgets=[0.25,0.5,1]", "lr_pilot.envelope_seeds=[]", "lr_pilot.lrs=[0.002,0.004]",
                    "lr_pilot.budget_scale=1"],
    )  # fmt: skip
    assert shape(at_pilot).check == "skipped" and "the pilot's own" in shape(at_pilot).check_note
