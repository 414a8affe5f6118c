"""The paper's joint and grow gap claims read for rival arms (study/paper/rivals.py): verdicts worked out here by hand from
synthetic per-seed numbers, the roles' remapping, the pairs not read twice, Holm across the rivals, the study file's
section and its one-line errors."""

import pytest
from scipy import stats

from normgrow.errors import ConfigError
from normgrow.study.config import load_study
from normgrow.study.engine.measures import RunMeasures
from normgrow.study.engine.verdicts import CONTRADICTED, SUPPORTED, UNDETERMINED
from normgrow.study.paper.rivals import rival_claims
from normgrow.study.paper.sections import RivalConfig

SECTION = {"pre_joint": "pj", "post_joint": "qj", "pre_grow": "pg", "post_grow": "qg", "margin": 0.01}


def arm(values):
    return {s: RunMeasures(val_ce=v, stage_ce=[v]) for s, v in enumerate(values)}


def test_each_rival_gets_the_papers_verdicts_against_its_reference():
    measures = {
        "pj": arm([3.00, 3.01, 3.02]),
        "pg": arm([3.10, 3.11, 3.12]),
        "qj": arm([2.90, 2.91, 2.92]),
        "qg": arm([2.95, 2.96, 2.97]),
        # x: the same as pre under joint (differences 0.001, 0.000, −0.001), far better under growth (−0.2 each)
        "xj": arm([3.001, 3.010, 3.019]),
        "xg": arm([2.90, 2.91, 2.92]),
        # y: worse than pre under growth by 0.05 ± 0.001
        "yg": arm([3.149, 3.160, 3.171]),
        "mg": arm([3.00, 3.02, 3.04]),  # pre under another operator, post's arm qg read against it
    }
    rivals = {
        "x": RivalConfig(against=["xj", "xg"]),
        "y": RivalConfig(against=["xj", "yg"]),  # its joint pair is x's: read once
        "post-m": RivalConfig(against=["qj", "qg"], reference=["pj", "mg"]),  # its joint pair is the paper's
    }
    claims = {c.key: c for c in rival_claims(rivals, SECTION, measures)}
    assert list(claims) == ["joint_gap[x]", "grow_gap[x]", "grow_gap[y]", "grow_gap[post-m]"]
    joint = claims["joint_gap[x]"]  # mean 0, sd 0.001: inside ±0.01 with room to spare
    assert joint.est.mean == pytest.approx(0.0, abs=1e-12) and joint.verdict == SUPPORTED
    assert "xj − pj" in joint.sentence
    assert claims["grow_gap[x]"].est.mean == pytest.approx(-0.2) and claims["grow_gap[x]"].verdict == SUPPORTED
    assert claims["grow_gap[y]"].est.mean == pytest.approx(0.05) and claims["grow_gap[y]"].verdict == CONTRADICTED
    # post-m: qg − mg = −0.05, −0.06, −0.07: mean −0.06, sd 0.01, half-width t(0.975, 2)·0.01/√3
    m = claims["grow_gap[post-m]"]
    half = stats.t.ppf(0.975, 2) * 0.01 / 3**0.5
    assert m.est.mean == pytest.approx(-0.06) and m.est.half == pytest.approx(half)
    assert m.verdict == SUPPORTED and "qg − mg" in m.sentence  # −0.06 + 0.0248 < −0.01
    assert "post-m" in m.paper and "post-norm's part" in m.paper
    # every decided claim has a p-value and a Holm verdict across the four
    assert all(c.p is not None and c.holm in (SUPPORTED, CONTRADICTED, UNDETERMINED) for c in claims.values())


def test_one_seed_is_undetermined_and_missing_arms_are_not_tested():
    measures = {"pj": arm([3.0]), "pg": arm([3.1]), "xj": arm([3.0]), "xg": arm([2.9])}
    claims = rival_claims({"x": RivalConfig(against=["xj", "xg"])}, SECTION, measures)
    assert [c.verdict for c in claims] == [UNDETERMINED, UNDETERMINED]
    missing = rival_claims({"x": RivalConfig(against=["xj", "xg"])}, {**SECTION, "pre_grow": None}, measures)
    assert missing[1].verdict == "not tested" and "pre_grow" in missing[1].sentence


def test_the_rivals_section_of_a_study_file_is_checked(tmp_path):
    assert set(load_study("rivals").rivals) == {
        "reordered",
        "hybrid",
        "lnscale",
        "keel",
        "sandwich-ds",
        "post-middle",
        "post-late",
    }
    for override, needle in (
        ("rivals.keel.against=[keel-joint]", "rivals.keel.against: expected two arm names [joint, grow]"),
        ("rivals.keel.against=[keel-joint, nope]", "rivals.keel.against: expected two arm names"),
        ("rivals.keel.reference=[pre-joint]", "rivals.keel.reference: expected two arm names"),
    ):
        with pytest.raises(ConfigError, match=needle.replace("[", r"\[").replace("]", r"\]")):
            load_study("rivals", [override])
    with pytest.raises(ConfigError, match="rivals.reordered.reference: not given, and the study's claims name no"):
        load_study("rivals", ["claims.pre_grow=null"])
