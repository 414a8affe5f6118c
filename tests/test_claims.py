"""The paper's claims get their verdicts from the numbers: synthetic studies that support, contradict and
leave undetermined different claims, with the expected verdicts worked out here by hand."""

import pytest

from normgrow.study.claims import (
    CONTRADICTED,
    NOT_TESTED,
    SUPPORTED,
    UNDETERMINED,
    ClaimsConfig,
    evaluate_claims,
    sign_verdict,
)
from normgrow.study.measures import RunMeasures

ROLES = ClaimsConfig(pre_joint="pj", post_joint="qj", pre_grow="pg", post_grow="qg", matched=["mj", "qg"],
                     pre_single="ps", post_single="qs", pre_freeze="pf", post_freeze="qf", pre_shallow="pp",
                     post_shallow="qp", margin=0.01)


def run(ce, stages=None, **extra):
    return RunMeasures(val_ce=ce, stage_ce=stages or [ce], **extra)


def study(joint_gap, grow_gap, seeds=(0, 1, 2), jitter=0.001, crossing=True, matched_scale=1.5):
    """Per-seed measures: every post-arm is its pre-arm plus a gap (with a little seed-to-seed jitter)."""
    m = {arm: {} for arm in ("pj", "qj", "pg", "qg", "mj", "ps", "qs", "pf", "qf", "pp", "qp")}
    for i, s in enumerate(seeds):
        j = jitter * (i - 1)
        m["pj"][s] = run(5.0 + j, block_updates=[0.5, 0.4, 0.3, 0.2])
        m["qj"][s] = run(5.0 + j + joint_gap + j)
        pre_stages = [6.0 + j, 5.5 + j, 5.0 + j]
        lead0 = 0.05 if crossing else -0.05  # post − pre at the first stage end
        post_stages = [6.0 + j + lead0 + j, 5.5 + j + grow_gap + j, 5.0 + j + grow_gap + j]
        m["pg"][s] = run(pre_stages[-1], pre_stages, boundary_drift=0.30 + j, struct_drift=0.20 + j,
                         first_new_update=0.2, last_prefix_update=0.05 + j, last_prefix_index=2,
                         last_prefix_provenance="initial")
        m["qg"][s] = run(post_stages[-1], post_stages, boundary_drift=0.01 + j, struct_drift=0.01, first_new_update=0.3,
                         match_scale=None)
        m["mj"][s] = run(5.0 + j + 0.02, match_scale=matched_scale)
        m["ps"][s], m["qs"][s] = run(5.1 + j), run(5.1 + j + grow_gap)
        m["pf"][s], m["qf"][s] = run(5.2 + j), run(5.2 + j + 0.03 + j)
        m["pp"][s], m["qp"][s] = run(5.3 + j), run(5.3 + j + 0.002)
    return m


def verdicts(measures, roles=ROLES):
    return {c.key: c for c in evaluate_claims(roles, measures)}


def test_a_study_like_the_paper_supports_its_claims():
    c = verdicts(study(joint_gap=0.0004, grow_gap=-0.0328))
    for key in ("joint_gap", "grow_gap", "grow_vs_joint", "matched", "crossover", "single_block", "shallow",
                "boundary_scale", "structural_drift", "identity"):
        assert c[key].verdict == SUPPORTED, (key, c[key].sentence)
    assert c["freeze"].verdict == CONTRADICTED  # this synthetic study has post worse under freeze (+0.03)
    assert c["grow_gap"].n == 3 and c["grow_gap"].hi < 0
    assert "[-0.0" in c["grow_gap"].sentence and "over 3 seeds" in c["grow_gap"].sentence
    assert "Provenance of that block: initial" in c["identity"].sentence
    assert "scaled upward" in c["matched"].sentence


def test_a_contrary_study_contradicts_them():
    c = verdicts(study(joint_gap=0.5, grow_gap=+0.2, crossing=False))
    assert c["joint_gap"].verdict == CONTRADICTED  # |gap| far outside the ±0.01 margin
    assert c["grow_gap"].verdict == CONTRADICTED
    # growth narrows pre's lead (0.2 − 0.5 < 0) but the grow gap itself favours pre: not the paper's claim
    assert c["grow_vs_joint"].verdict == CONTRADICTED
    # post leads at stage 0, pre from stage 1 on: a lead change, the wrong way round
    assert c["crossover"].verdict == CONTRADICTED and "pre still leads at the last stage end" in c["crossover"].sentence
    already = verdicts(study(joint_gap=0.0, grow_gap=-0.2, crossing=False))["crossover"]
    assert already.verdict == CONTRADICTED and "post already leads before any block is appended" in already.sentence


def test_interaction_sign_by_hand():
    # grow gap −0.2, joint gap +0.1 → grow − joint = −0.3 < 0: growth favours post more than joint training does
    c = verdicts(study(joint_gap=0.1, grow_gap=-0.2))
    assert c["grow_vs_joint"].verdict == SUPPORTED
    assert c["grow_vs_joint"].mean == pytest.approx(-0.3, abs=1e-9)
    assert "Ratio grow gap / joint gap: -2.0" in c["grow_vs_joint"].sentence


def test_one_seed_leaves_everything_undetermined():
    c = verdicts(study(joint_gap=0.0004, grow_gap=-0.0328, seeds=(0,)))
    for key, claim in c.items():
        assert claim.verdict == UNDETERMINED, key
    assert "undetermined at one seed" in c["grow_gap"].sentence
    assert "one seed: no interval" in c["grow_gap"].sentence
    assert "a crossover needs intervals" in c["crossover"].sentence


def test_crossover_wording_two_seeds_overlapping_vs_clear():
    # two seeds whose stage-end differences disagree in sign: intervals include 0 everywhere
    m = study(joint_gap=0.0, grow_gap=-0.03, seeds=(0, 1), jitter=0.2)
    c = verdicts(m)["crossover"]
    assert c.verdict == UNDETERMINED and "no lead change with intervals excluding 0" in c.sentence
    clear = verdicts(study(joint_gap=0.0, grow_gap=-0.03, seeds=(0, 1), jitter=0.001))["crossover"]
    assert clear.verdict == SUPPORTED and "pre leads at stage 0 and post at stage 1" in clear.sentence


def test_matched_downward_cannot_test_the_compute_explanation():
    c = verdicts(study(joint_gap=0.0, grow_gap=-0.03, matched_scale=0.67))["matched"]
    assert c.verdict == UNDETERMINED and "matched downward" in c.sentence


def test_missing_arms_are_not_tested():
    c = verdicts(study(joint_gap=0.0, grow_gap=-0.03), ClaimsConfig(pre_grow="pg", post_grow="qg"))
    assert c["joint_gap"].verdict == NOT_TESTED and "pre_joint" in c["joint_gap"].sentence
    assert c["matched"].verdict == NOT_TESTED
    assert c["grow_gap"].verdict == SUPPORTED


def test_sign_verdict_rules():
    assert sign_verdict(3, -0.3, -0.1, -1) == SUPPORTED
    assert sign_verdict(3, 0.1, 0.3, -1) == CONTRADICTED
    assert sign_verdict(3, -0.1, 0.3, -1) == UNDETERMINED
    assert sign_verdict(1, None, None, -1) == UNDETERMINED
