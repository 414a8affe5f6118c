"""The rate choice as typed records (normgrow/study/choice.py): lr_choice.json read into frozen records and written
back byte for byte — files written by real studies (lr_choice/: coord's envelope ladder with its pilot, the headline
check's envelope, a default study's pilot with its confirmation), the no-pilot choice as pilot.anchor_choice writes
it, and a ladder's check written by hand in with_check's shape."""

import dataclasses
import json
from pathlib import Path

import pytest

from normgrow.study.choice import UNSET, RateChoice
from normgrow.study.config import load_study
from normgrow.study.pilot import anchor_choice

FILES = sorted((Path(__file__).parent / "lr_choice").glob("*.json"))


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_a_studys_lr_choice_reads_into_records_and_writes_back_byte_for_byte(path):
    text = path.read_text()
    choice = RateChoice.from_json(json.loads(text))
    assert json.dumps(choice.to_json(), indent=2) + "\n" == text  # pilot.write_choice's format, key order included
    with pytest.raises(dataclasses.FrozenInstanceError):
        choice.pilot = None  # type: ignore[misc]


def test_the_records_read_what_the_file_says():
    coord = RateChoice.from_json(json.loads((FILES[0].parent / "coord-envelope-ladder.json").read_text()))
    # by hand from the file: the pilot chose 0.032 for post-grow; budget 2's bracket moved it to 0.016, closed
    assert coord.arms["post-grow"].chosen == 0.032 and coord.arms["post-grow"].source == "pilot"
    b2 = coord.envelope["b2"]
    assert b2.budget_scale == 2.0 and b2.arms["post-grow"].chosen == 0.016 and b2.arms["post-grow"].closed
    assert [r.lr for r in b2.arms["post-grow"].rates] == [0.008, 0.016, 0.032, 0.064]
    assert coord.check is UNSET and coord.confirm is UNSET and coord.arms["pre-joint"].check is UNSET
    default = RateChoice.from_json(json.loads((FILES[0].parent / "default-confirm.json").read_text()))
    assert default.envelope is UNSET and default.confirm.arms["pre-joint"].chosen == default.arms["pre-joint"].chosen


def test_the_no_pilot_choice_round_trips():
    """anchor_choice (the default study: no pilot, the envelope anchored at each arm's train.lr) writes
    pilot.envelope_seeds, a key a piloted choice has not."""
    written = anchor_choice(load_study("default"))
    raw = written.to_json()
    choice = RateChoice.from_json(raw)
    assert choice == written
    assert choice.to_json() == raw and list(choice.to_json()["pilot"]) == list(raw["pilot"])
    assert choice.pilot.dir is None and choice.pilot.envelope_seeds == tuple(raw["pilot"]["envelope_seeds"])


def test_a_ladders_check_round_trips_and_an_unknown_key_is_refused():
    """with_check's shape by hand: the top-level check, and per arm its scores, the best and whether it held (None
    for an arm the check has no score of)."""
    base = json.loads((FILES[0].parent / "default-confirm.json").read_text())
    del base["confirm"]
    raw = {**base, "check": {"dir": "pilot/check", "budget_scale": 1.0, "seeds": [0]}}
    arms = list(raw["arms"])
    scores = [{"lr": 0.002, "select_ce": 3.1}, {"lr": 0.004, "select_ce": 3.0}, {"lr": 0.008, "select_ce": 3.05}]
    raw["arms"][arms[0]] = {**raw["arms"][arms[0]], "check": {"rates": scores, "chosen": 0.004, "held": False}}
    raw["arms"][arms[1]] = {**raw["arms"][arms[1]], "check": None}
    choice = RateChoice.from_json(raw)
    assert choice.to_json() == raw and json.dumps(choice.to_json()) == json.dumps(raw)
    assert choice.arms[arms[0]].check.held is False and choice.arms[arms[1]].check is None
    assert choice.check.seeds == (0,) and choice.check_skipped is UNSET
    with pytest.raises(ValueError, match="ArmChoice: unknown key"):
        RateChoice.from_json({**raw, "arms": {arms[0]: {**raw["arms"][arms[0]], "chosen_at": 1}}})
