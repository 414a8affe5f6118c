"""Pre-registered regime checks (study section `regime:`, normgrow/study/paper/regime.py): validation, each check's outcome
from hand-made measures and rows, the report's section and its warning; arms run at some budgets of a ladder only;
the pilot's scope (lr_pilot.arms, arms.<arm>.lr_from); and a micro ladder end to end with an arm at its middle budget
only."""

import dataclasses
import json
import math

import pytest
from scipy.stats import t as student_t
from test_runner import results, write_study

from conftest import cli
from normgrow.errors import ConfigError
from normgrow.study.config import (
    ArmConfig,
    LrPilotConfig,
    StudyConfig,
    load_study,
    new_study,
    piloted_arms,
    rate_path,
    validate_study,
)
from normgrow.study.engine.measures import BoundaryEvent, RunMeasures
from normgrow.study.engine.stats import Estimate
from normgrow.study.engine.verdicts import evaluate_claims
from normgrow.study.jobs import sweep_plan, write_study_yaml
from normgrow.study.paper.regime import (
    ABSENT,
    FAIL,
    NOT_MEASURED,
    NOT_RUN,
    PASS,
    PRESENT,
    UNDETERMINED,
    Check,
    class_reading,
    collapse_check,
    combine,
    kl_check,
    plan_lines,
    regime_record,
    regime_section,
    scale_check,
)
from normgrow.study.paper.sections import RegimeConfig
from normgrow.study.pilot import choose_rates, pilot_study, rates_at, with_rates
from normgrow.study.record import from_row, values
from normgrow.study.report.ladder import claims_by_budget, contrast_section, ladder_rung, sentence
from normgrow.study.report.rates import choice_lines
from normgrow.study.sweep import ladder_points

# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "over,needle",
    [
        (["regime.max_collapse=0"], "regime.max_collapse: must be a positive finite number, got 0.0"),
        (["regime.max_collapse=1.5"], "regime.max_collapse: a collapse share is at most 1, got 1.5"),
        (["regime.min_kl=-0.1"], "regime.min_kl: must be a positive finite number, got -0.1"),
        (["regime.min_kl=.inf"], "regime.min_kl: must be a finite number, got inf"),
        (
            ["regime.scale_factor=1", "claims.pre_grow=a", "claims.post_grow=b"],
            "regime.scale_factor: must be greater than 1",
        ),
        (
            ["regime.scale_factor=2", "claims.pre_grow=a"],
            "regime.scale_factor: compares the claims roles pre_grow and post_grow",
        ),
        (["arms.a.budgets=[1]"], "arms.a.budgets: only a budget ladder (budgets: [...]) runs an arm at some budgets"),
        (["budgets=[0.5,1]", "arms.a.budgets=[2]"], "arms.a.budgets: must be among the study's budgets ['0.5', '1']"),
        (["budgets=[0.5,1]", "arms.a.budgets=[1,1]"], "arms.a.budgets: budgets must differ"),
        (["budgets=[0.5,1]", "arms.a.budgets=[1]", "arms.b.budgets=[1]"], "budgets: no arm runs at budget 0.5"),
        (
            ["budgets=[0.5,1]", "arms.a.budgets=[1]", "arms.b.match=a"],
            "arms.b.budgets: matches a, which does not run at budget 0.5",
        ),
        (
            ["budgets=[0.5,1]", "arms.a.budgets=[1]", "arms.b.budgets=[0.5]", "contrasts={ab: [a, b]}"],
            "contrasts.ab: its arms a and b never run at the same budget",
        ),
        (["arms.b.lr_from=a"], "arms.b.lr_from: takes a pilot's rate, but the study runs no pilot"),
        (["lr_pilot.arms=[a]"], "lr_pilot.arms: names the arms of a pilot that does not run"),
        (["lr_pilot.lrs=[0.001,0.002]", "lr_pilot.arms=[c]"], "lr_pilot.arms: no arm named 'c'"),
        (["lr_pilot.lrs=[0.001,0.002]", "arms.b.lr_from=c"], "arms.b.lr_from: no arm named 'c'"),
        (
            ["lr_pilot.lrs=[0.001,0.002]", "lr_pilot.arms=[a,b]", "arms.b.lr_from=a"],
            "arms.b.lr_from: b is piloted (lr_pilot.arms)",
        ),
        (
            ["lr_pilot.lrs=[0.001,0.002]", "lr_pilot.arms=[a]"],
            "arms.b.lr_from: b is not piloted (lr_pilot.arms) and takes no other arm's rate",
        ),
        (
            ["lr_pilot.lrs=[0.001,0.002]", "arms.a.lr_from=b", "arms.b.lr_from=a"],
            "arms.a.lr_from: rates form a cycle (a → b → a)",
        ),
        (["lr_pilot.lrs=[0.001,0.002]", "arms.a.lr_from=a"], "arms.a.lr_from: rates form a cycle (a → a)"),
    ],
)
def test_bad_regime_budgets_and_rate_sources_are_one_line_naming_the_field(tmp_path, over, needle):
    path = tmp_path / "s.yaml"
    path.write_text("name: bad\nbase: tiny\narms: {a: {}, b: {}}\n")
    with pytest.raises(ConfigError) as e:
        load_study(str(path), over)
    assert str(e.value).startswith(needle), str(e.value)
    assert "\n" not in str(e.value)


def test_no_regime_section_registers_nothing_and_prints_nothing(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("name: ok\nbase: tiny\narms: {a: {}}\n")
    s = load_study(str(path))
    assert s.regime == RegimeConfig() and plan_lines(s) == [] and regime_section(s, []) == []


def test_the_start_of_a_study_prints_its_registered_checks(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: ok\nbase: tiny\narms: {pg: {}, qg: {}}\nclaims: {pre_grow: pg, post_grow: qg}\n"
        "regime: {min_kl: 0.05, scale_factor: 2}\n"
    )
    assert plan_lines(load_study(str(path))) == [
        "Regime checks, registered in the study file before any run:",
        "  2. distance from the teacher: the mean over the arms of their mean final val/kl ≥ 0.05 nats/token",
        "  3. placements' boundary scales (descriptive): at the growth events the boundary stream's RMS differs between pg and qg by at "
        "least ×2 (the 95% interval of the log ratio beyond ±0.693), for all tokens and for the structural tokens",
    ]
    ladder = plan_lines(load_study(str(path), ["budgets=[0.5,1,2]"]))
    assert ladder[1].endswith("≥ 0.05 nats/token, judged at the largest budget (2)")
    assert ladder[2].endswith("for the structural tokens, at every budget")


# ----------------------------------------------------------------------------- the checks, by hand


def runs(**by_arm):
    """Measures {arm: {seed: RunMeasures}} from {arm: [collapse share per seed]} (None: not measured)."""
    return {arm: {s: RunMeasures(collapse_share=v) for s, v in enumerate(vals)} for arm, vals in by_arm.items()}


def test_check_1_passes_at_the_threshold_fails_above_it_and_is_not_measured_without_a_share():
    # a: (0.25 + 0.75) / 2 = 0.5 exactly, at the threshold: passes; b: 0.5625 > 0.5
    c = collapse_check(["a"], runs(a=[0.25, 0.75]), 0.5)
    assert c.outcome == PASS and c.values["worst"] == "a" and c.values["arms"]["a"]["mean"] == 0.5
    half = student_t.ppf(0.975, 1) * math.sqrt(0.125) / math.sqrt(2)  # sd of (0.25, 0.75) is √0.125
    assert c.measured == f"worst `a`: 0.500 ± {half:.3f}"
    c = collapse_check(["a", "b", "c"], runs(a=[0.25, 0.75], b=[0.5, 0.625], c=[None]), 0.5)
    assert c.outcome == FAIL and c.values["failing"] == ["b"] and c.detail == "`b` 0.562 above 0.5"
    c = collapse_check(["a", "c"], runs(a=[0.25, 0.75], c=[None, None]), 0.5)
    assert c.outcome == NOT_MEASURED and c.values["not_measured"] == ["c"] and "`c`" in c.detail
    assert collapse_check(["a"], {}, 0.5).outcome == NOT_MEASURED  # no finished run


def kl_row(arm, seed, kl, status="ok"):
    return from_row({"arm": arm, "seed": str(seed), "status": status, "val_kl": "" if kl is None else str(kl)})


def kls(records):
    """Each arm's final val/kl by seed, as a study reads them for check 2."""
    return {arm: values(records, arm, "val_kl") for arm in {r.arm for r in records}}


def test_check_2_is_the_mean_over_the_arms_of_their_mean_kl():
    # a: (0.125 + 0.375) / 2 = 0.25, b: (0.0625 + 0.1875) / 2 = 0.125 → 0.1875; per seed (0.09375, 0.28125)
    rows = [
        kl_row("a", 0, 0.125),
        kl_row("a", 1, 0.375),
        kl_row("b", 0, 0.0625),
        kl_row("b", 1, 0.1875),
        kl_row("b", 2, None, "failed"),
    ]
    c = kl_check(["a", "b"], kls(rows), 0.1875)
    assert c.outcome == PASS and c.values["value"] == 0.1875  # at the threshold: passes
    half = student_t.ppf(0.975, 1) * (0.28125 - 0.09375) / math.sqrt(2) / math.sqrt(2)
    assert c.measured == f"0.1875 ± {half:.4f}"
    assert kl_check(["a", "b"], kls(rows), 0.19).outcome == FAIL
    # the arms finished different seeds: the value, no interval; an arm with no val/kl is left out and named
    c = kl_check(["a", "b", "c"], kls(rows[:3] + [kl_row("c", 0, None, "failed")]), 0.1)
    assert c.values["value"] == (0.25 + 0.0625) / 2 and c.outcome == PASS
    assert c.measured == "0.1562 (arms finished different seeds: no interval) over 2 of 3 arms" and "`c`" in c.detail
    assert kl_check(["a"], kls([kl_row("a", 0, None, "failed")]), 0.1).outcome == NOT_MEASURED


@pytest.mark.parametrize(
    "mean,ci95,reading",
    [
        (1.0, 0.5, PRESENT),  # [0.5, 1.5], beyond log 1.5 = 0.405
        (-1.0, 0.5, PRESENT),  # [−1.5, −0.5]: the other side
        (0.0, 0.3, ABSENT),  # [−0.3, 0.3], inside (−0.405, 0.405)
        (0.3, 0.5, UNDETERMINED),  # [−0.2, 0.8]: crosses +0.405
        (0.0, 1.0, UNDETERMINED),  # [−1, 1]: crosses both
        (2.0, None, UNDETERMINED),  # one seed: no interval
        (None, None, NOT_MEASURED),
    ],
)
def test_check_3_reads_each_class_from_its_interval_against_log_factor(mean, ci95, reading):
    assert class_reading(Estimate(2, mean, None, ci95), math.log(1.5)) == reading


def grow_runs(all_logs, struct_logs):
    """pre (`pg`) and post (`qg`) measures, one growth event per seed: post's boundary RMS 1, pre's e^x."""

    def event(x, y):
        return BoundaryEvent(1, 1, 0, 2560, 5120, rms_at=x, rms_struct_at=y)

    return {
        "pg": {
            s: RunMeasures(events=[event(math.exp(x), None if y is None else math.exp(y))])
            for s, (x, y) in enumerate(zip(all_logs, struct_logs, strict=True))
        },
        "qg": {s: RunMeasures(events=[event(1.0, 1.0)]) for s in range(len(all_logs))},
    }


def interval(xs):
    n, m = len(xs), sum(xs) / len(xs)
    half = student_t.ppf(0.975, n - 1) * math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1)) / math.sqrt(n)
    return m - half, m + half


@pytest.mark.parametrize(
    "struct,outcome,reading",
    [
        ([-1.0, -1.2, -0.8], PASS, PRESENT),  # pre's structural tokens smaller by e^−1: present on the other side
        ([0.1, -0.1, 0.0], FAIL, ABSENT),  # [−0.248, 0.248] inside ±0.405
        ([0.5, 0.1, 0.3], UNDETERMINED, UNDETERMINED),  # [−0.197, 0.797]
        ([None, None, None], NOT_MEASURED, NOT_MEASURED),  # no structural RMS recorded
    ],
)
def test_check_3_passes_only_when_both_classes_are_present(struct, outcome, reading):
    all_logs = [1.0, 1.2, 0.8]  # [0.503, 1.497]: present
    c = scale_check(grow_runs(all_logs, struct), "pg", "qg", 1.5)
    assert c.values["all"]["reading"] == PRESENT and c.values["structural"]["reading"] == reading
    assert c.outcome == outcome
    lo, hi = interval(all_logs)
    assert c.measured.startswith(f"all: +1.000 [{lo:+.3f}, {hi:+.3f}] (×{math.e:.3g}); structural: ")
    assert c.threshold == f"beyond ±log 1.5 = ±{math.log(1.5):.3f}, both classes"
    if None not in struct:
        slo, shi = interval(struct)
        assert (slo > math.log(1.5) or shi < -math.log(1.5)) == (reading == PRESENT)


def test_check_3_with_one_seed_is_undetermined_and_without_growth_events_not_measured():
    assert scale_check(grow_runs([1.0], [1.0]), "pg", "qg", 1.5).outcome == UNDETERMINED
    joint = {"pj": {0: RunMeasures()}, "qj": {0: RunMeasures()}}
    assert scale_check(joint, "pj", "qj", 1.5).outcome == NOT_MEASURED


def test_readings_combine_fail_first_then_undetermined_then_not_measured():
    assert combine([PASS, PASS]) == PASS
    assert combine([PASS, NOT_MEASURED, UNDETERMINED, FAIL]) == FAIL
    assert combine([PASS, NOT_MEASURED, UNDETERMINED]) == UNDETERMINED
    assert combine([PASS, NOT_MEASURED]) == NOT_MEASURED
    assert combine([PASS, NOT_RUN]) == PASS and combine([NOT_RUN]) == NOT_MEASURED and combine([]) == NOT_MEASURED


def test_the_section_warns_above_the_claims_only_when_a_check_fails_or_is_undetermined():
    s = new_study(arms={"a": ArmConfig()}, regime=RegimeConfig(max_collapse=0.5, min_kl=0.1))
    ok = [Check("max_collapse", PASS, "m", "t", "d"), Check("min_kl", PASS, "m", "t", "d")]
    L = regime_section(s, ok)
    assert L[0] == "## Regime checks" and not any(line.startswith("> ") for line in L)
    assert any(x.startswith("| 1. health | worst block's collapse share") and x.endswith("| **pass** |") for x in L)
    bad = [Check("max_collapse", FAIL, "m", "t", "`a` 0.600 above 0.5"), Check("min_kl", UNDETERMINED, "m", "t", "d")]
    warn = [line for line in regime_section(s, bad) if line.startswith("> ")]
    assert warn == [
        "> **The regime does not meet checks 1 (health: fail), 2 (distance from the teacher: "
        "undetermined)**: the claims below are about a regime that does not meet them."
    ]
    assert "- Check 1 (health): **fail** — `a` 0.600 above 0.5." in regime_section(s, bad)
    unmeasured = [
        line for line in regime_section(s, [Check("min_kl", NOT_MEASURED, "—", "t", "d")]) if line.startswith("> ")
    ]
    assert unmeasured == [
        "> Check 2 (distance from the teacher) registered but not measured: the claims below are "
        "not checked against it."
    ]


@pytest.mark.parametrize("outcome", [FAIL, UNDETERMINED, PASS])
def test_a_failed_precondition_makes_the_mechanism_tests_not_informative_as_registered(outcome):
    """The rule registered with check 4 (check 3's until session 20): when it fails, boundary_update,
    boundary_renorm and the dose–response are reported as not informative (above the claims, and in regime.json);
    undetermined or passed, they stand. A failed check 3 — a comparison of post's norm gains — no longer gates."""
    s = new_study(arms={"a": ArmConfig()}, regime=RegimeConfig(scale_factor=2.0, drift_excess=0.1))
    three = [Check("scale_factor", FAIL, "m", "t", "d")]
    assert regime_record(s, three)["not_informative"] == []
    assert "not informative" not in " ".join(regime_section(s, three))
    checks = [Check("drift_excess", outcome, "m", "t", "d")]
    warn = " ".join(line for line in regime_section(s, checks) if line.startswith("> "))
    said = "not informative in this regime" in warn
    assert said == (outcome == FAIL), warn
    if said:
        assert all(name in warn for name in ("boundary_update", "boundary_renorm", "dose–response"))
    assert regime_record(s, checks)["not_informative"] == (
        ["boundary_update", "boundary_renorm", "the dose–response"] if outcome == FAIL else []
    )


# ----------------------------------------------------------------------------- arms at some budgets of a ladder


def ladder_file(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: lad\nbase: tiny\nseeds: [0, 1]\nbudgets: [0.5, 1, 2]\n"
        "arms: {pre: {}, post: {}, mid: {budgets: [1]}}\n"
        "contrasts: {gap: [pre, post], mid_gap: [post, mid]}\ngap_ratio: [mid_gap, gap]\nphase: [post, mid]\n"
        "claims: {pre_joint: pre, post_joint: mid, pre_grow: pre, post_grow: post}\n"
        "regime: {scale_factor: 2}\n"
    )
    return path


def test_an_arm_at_the_middle_budget_only_is_planned_there_and_its_pairs_are_left_out_elsewhere(tmp_path):
    study = load_study(str(ladder_file(tmp_path)))
    plan = sweep_plan(study, tmp_path / "out")
    assert [(sub.budget_scale, sorted(j.arm for j in jobs)) for sub, _, jobs in plan] == [
        (0.5, ["post", "post", "pre", "pre"]),
        (1.0, ["mid", "mid", "post", "post", "pre", "pre"]),
        (2.0, ["post", "post", "pre", "pre"]),
    ]
    small, middle = plan[0][0], plan[1][0]
    assert list(small.arms) == ["pre", "post"] and list(small.contrasts) == ["gap"]
    assert small.gap_ratio == [] and small.phase == [] and small.claims["post_joint"] is None
    assert small.claims["pre_joint"] == "pre" and small.regime.scale_factor == 2  # pre_grow and post_grow run there
    assert list(middle.contrasts) == ["gap", "mid_gap"] and middle.phase == ["post", "mid"]
    assert middle.gap_ratio == ["mid_gap", "gap"] and middle.claims["post_joint"] == "mid"
    for sub, sub_dir, _ in plan:  # each budget is a study of its own: its study.yaml loads and validates
        write_study_yaml(sub, sub_dir)
        assert load_study(str(sub_dir / "study.yaml")) == sub and all(not a.budgets for a in sub.arms.values())


def ce_row(arm, seed, ce, kl=0.5):
    row = {"arm": arm, "seed": str(seed), "status": "ok", "val_ce": str(ce), "val_kl": str(kl), "tokens": "5120"}
    return from_row(row)


def test_contrasts_claims_and_retention_that_need_an_absent_arm_are_not_computed_at_that_budget(tmp_path):
    study = load_study(str(ladder_file(tmp_path)))
    ce = {
        0.5: {"pre": (3.0, 3.1), "post": (2.9, 3.0)},
        1.0: {"pre": (2.8, 2.9), "post": (2.75, 2.8), "mid": (2.5, 2.75)},
        2.0: {"pre": (2.6, 2.7), "post": (2.58, 2.66)},
    }
    rungs = []
    for (sub, _, _), p in zip(sweep_plan(study, tmp_path / "out"), ladder_points(study.budgets), strict=True):
        rows = [ce_row(arm, s, v) for arm, vals in ce[p.coords[0]].items() for s, v in enumerate(vals)]
        measures = {
            arm: {s: RunMeasures(val_ce=v) for s, v in enumerate(vals)} for arm, vals in ce[p.coords[0]].items()
        }
        rungs.append(ladder_rung(study, p, rows, {}, evaluate_claims(sub.claims, measures)))
    assert [sorted(r.contrasts) for r in rungs] == [["gap"], ["gap", "mid_gap"], ["gap"]]
    L = contrast_section(study, "mid_gap", rungs)
    assert (
        "| 0.5 | not run at this budget | — | — | — | — | — |" in L
        and "| 2 | not run at this budget | — | — | — | — | — |" in L
    )
    assert "| 0.5 → 1 | not computed: not run at budget 0.5 | — | — |" in L
    assert "| 1 → 2 | not computed: not run at budget 2 | — | — |" in L
    d = [2.5 - 2.75, 2.75 - 2.8]  # mid − post at budget 1, seeds 0 and 1
    half = student_t.ppf(0.975, 1) * abs(d[0] - d[1]) / 2
    assert sentence(study, "mid_gap", rungs) == (
        f"mid_gap (mid − post) is {sum(d) / 2:+.4f} ± {half:.4f} at budget 1; from budget 1 to 2 its retention ratio is "
        "not computed (not run at budget 2): undetermined."
    )
    # a reference budget without the contrast: the sentence gives it where it ran
    assert sentence(dataclasses.replace(study, budget_scale=0.5), "mid_gap", rungs) == (
        f"mid_gap (mid − post) is not run at budget 0.5; it is {sum(d) / 2:+.4f} ± {half:.4f} at budget 1; from budget 1 "
        "to 2 its retention ratio is not computed (not run at budget 2): undetermined."
    )
    assert "| 0.5 → 1 | not computed" not in "\n".join(contrast_section(study, "gap", rungs))  # gap runs everywhere
    table = claims_by_budget(rungs, study)
    row = next(line for line in table if line.startswith("| joint_gap |")).split(" | ")
    joint_gap = next(c for c in rungs[1].claims if c.key == "joint_gap")
    assert row[1] == "not run at this budget" and row[3] == "not run at this budget |"
    assert row[2].startswith(joint_gap.verdict) and joint_gap.verdict != "not tested"
    grow = next(line for line in table if line.startswith("| grow_gap |"))
    assert "not run" not in grow  # pre and post run at every budget


# ----------------------------------------------------------------------------- the pilot's scope


def scoped_study(**pilot) -> StudyConfig:
    """Core arms pj (joint, pre) and pg (grow, post); pg-m matched (twin pg); single takes pg's rate, chain single's
    (so pg's); lonely is matched without a twin."""
    arms = {
        "pj": ArmConfig(preset="joint", overrides=["model.norm=pre"]),
        "pg": ArmConfig(preset="grow", overrides=["model.norm=post"]),
        "pg-m": ArmConfig(preset="grow", overrides=["model.norm=post"], match="pj"),
        "single": ArmConfig(preset="grow", overrides=["model.norm=post", "model.d_ff=96"], lr_from="pg"),
        "chain": ArmConfig(preset="grow", overrides=["model.norm=post", "model.d_ff=128"], lr_from="single"),
        "lonely": ArmConfig(preset="grow", overrides=["model.norm=pre"], match="pj"),
    }
    return StudyConfig(
        base="tiny",
        seeds=[0, 1],
        arms=arms,
        overrides=["train.lr=0.003"],
        lr_pilot=LrPilotConfig(lrs=[0.001, 0.004], seeds=[0, 1], **pilot),
    )


def pilot_row(arm, lr, seed, ce):
    row = {
        "arm": arm,
        "lr": str(lr),
        "seed": str(seed),
        "status": "ok",
        "select_ce": str(ce),
        "error": "",
        "selected": "",
    }
    return from_row(row)


def test_lr_from_follows_its_path_to_a_piloted_arm_and_the_choice_says_where_each_rate_came_from():
    s = scoped_study()
    validate_study(s)
    assert piloted_arms(s) == ["pj", "pg", "lonely"]  # no lr_from, no twin: piloted, as without lr_from
    assert {a: rate_path(s, a) for a in s.arms} == {
        "pj": [],
        "pg": [],
        "pg-m": ["pg"],
        "single": ["pg"],
        "chain": ["single", "pg"],
        "lonely": [],
    }
    assert list(pilot_study(s).arms) == ["pj", "pg", "lonely"]
    # pj: 0.001 → 3.0, 0.004 → 2.9 (chosen); pg: 0.001 → 2.5 (chosen), 0.004 → 2.6; lonely: 0.004
    rows = [
        pilot_row(arm, lr, sd, ce)
        for arm, scores in (
            ("pj", ((0.001, 3.0), (0.004, 2.9))),
            ("pg", ((0.001, 2.5), (0.004, 2.6))),
            ("lonely", ((0.001, 3.5), (0.004, 3.4))),
        )
        for lr, ce in scores
        for sd in (0, 1)
    ]
    choice = choose_rates(s, rows)
    c = choice.to_json()["arms"]  # as lr_choice.json holds it
    assert [(a, c[a]["chosen"], c[a]["from"], c[a]["via"], c[a]["piloted_as"]) for a in s.arms] == [
        ("pj", 0.004, "pilot", [], "pj"),
        ("pg", 0.001, "pilot", [], "pg"),
        ("pg-m", 0.001, "twin", ["pg"], "pg"),
        ("single", 0.001, "lr_from", ["pg"], "pg"),
        ("chain", 0.001, "lr_from", ["single", "pg"], "pg"),
        ("lonely", 0.004, "pilot", [], "lonely"),
    ]
    assert c["chain"]["shared"] == 0.003 and c["chain"]["regret"] is None  # 0.003 is not a pilot rate
    text = "\n".join(choice_lines(rates_at(choice)))
    assert "| chain | lr_from single → pg | **2.5000** ✓ | 2.6000 | 0.001 |" in text
    assert "| pg-m | twin pg |" in text and "| single | lr_from pg |" in text
    rated = with_rates(s, rates_at(choice))
    assert rated.arms["chain"].overrides[-1] == "train.lr=0.001" and rated.arms["chain"].lr_from is None
    validate_study(rated)  # the rated study runs no pilot: no arm may still name lr_from


def test_a_narrowed_pilot_runs_only_its_arms_and_the_others_need_a_source():
    s = scoped_study(arms=["pj", "pg"])
    with pytest.raises(ConfigError, match=r"^arms\.lonely\.lr_from: lonely is not piloted"):
        validate_study(s)
    s.arms["lonely"].lr_from = "pj"
    validate_study(s)
    assert piloted_arms(s) == ["pj", "pg"] and list(pilot_study(s).arms) == ["pj", "pg"]
    assert rate_path(s, "lonely") == ["pj"] and rate_path(s, "pg-m") == ["pg"]
    p = pilot_study(s)
    assert all(a.lr_from is None and a.match is None and a.lrs == [0.001, 0.004] for a in p.arms.values())
    validate_study(p)


def test_a_ladder_pilot_study_is_a_plain_study():
    """The pilot of a ladder runs once, as a study without budgets (its study.yaml reloads as one)."""
    s = scoped_study()
    s.budgets, s.arms["pg"].budgets = [0.5, 1.0], [1.0]
    validate_study(s)
    p = pilot_study(s)
    assert p.budgets == [] and all(not a.budgets for a in p.arms.values()) and p.regime == RegimeConfig()
    validate_study(p)


# ----------------------------------------------------------------------------- a micro ladder end to end


def last_stage_end(run_dir):
    return [
        json.loads(x)
        for x in (run_dir / "diagnostics.jsonl").read_text().splitlines()
        if json.loads(x)["event"] == "stage_end"
    ][-1]


@pytest.mark.e2e
def test_a_micro_ladder_with_an_arm_at_its_middle_budget_checks_its_regime_above_the_claims(tiny_cache, tmp_path):
    joint = "'curriculum.stages=[{n_layer: 2, tokens: 5120}]'"
    spec = write_study(
        tmp_path / "s.yaml",
        tiny_cache,
        {
            "pre": "{overrides: [model.norm=pre]}",
            "post": "{overrides: [model.norm=post]}",
            "mid": f"{{overrides: [model.norm=post, {joint}], budgets: [1]}}",
        },
        seeds=(0,),
        launcher="inline",
        extra="contrasts: {gap: [pre, post], mid_gap: [mid, post]}\n"
        "claims: {pre_grow: pre, post_grow: post}\nbudgets: [0.5, 1, 2]\n"
        "regime: {max_collapse: 0.9, min_kl: 0.01, scale_factor: 1.05}\n",
    )
    out = tmp_path / "ladder"
    proc = cli("study", spec, "-o", out, "--no-progress")
    lines = proc.stdout.splitlines()
    start = lines.index("Regime checks, registered in the study file before any run:")
    plan = next(
        i
        for i, x in enumerate(lines)
        if x.startswith("budget ladder micro: 3 budgets × up to 3 arms (`mid` only at budget 1) × 1 seeds = 7 runs")
    )
    assert start < plan and lines[start + 2].endswith("judged at the largest budget (2)")
    rows = results(out)
    assert sorted((r["point"], r["arm"]) for r in rows) == [
        ("b0.5", "post"),
        ("b0.5", "pre"),
        ("b1", "mid"),
        ("b1", "post"),
        ("b1", "pre"),
        ("b2", "post"),
        ("b2", "pre"),
    ]
    assert all(r["status"] == "ok" for r in rows)
    assert list(load_study(str(out / "budgets" / "b2" / "study.yaml")).contrasts) == ["gap"]

    report = (out / "report.md").read_text()
    assert report.index("## Regime checks") < report.index("## Headline") < report.index("## Claims by budget")
    assert "| 0.5 | not run at this budget |" in report and "| 1 → 2 | not computed: not run at budget 2 |" in report
    expected = {}
    for label, budget in (("b0.5", 0.5), ("b1", 1.0), ("b2", 2.0)):  # check 1 from each run's diagnostics
        shares = {
            r["arm"]: max(last_stage_end(out / r["run_dir"])["collapse_share"][1:]) for r in rows if r["point"] == label
        }
        worst = max(shares, key=shares.get)
        expected[budget] = PASS if max(shares.values()) <= 0.9 else FAIL
        assert (
            f"| 1. health | {budget:g} | worst block's collapse share at the end of training, mean over seeds, per "
            f"arm (shown: the worst arm) | worst `{worst}`: {shares[worst]:.3f} (one seed, no interval) | ≤ 0.9 for "
            f"every arm | **{expected[budget]}** |"
        ) in report
    kl = sum(float(r["val_kl"]) for r in rows if r["point"] == "b2") / 2  # check 2 at the largest budget only
    assert (
        f"| 2. distance from the teacher | 2 | mean over the arms of their mean final val/kl (nats/token) | "
        f"{kl:.4f} (one seed, no interval) | ≥ 0.01 nats/token | **{PASS if kl >= 0.01 else FAIL}** |"
    ) in report
    assert report.count("| 2. distance from the teacher |") == 1
    for label in ("b0.5", "b1", "b2"):  # check 3 at every budget: log(pre's / post's boundary RMS), one seed
        rms = {
            r["arm"]: json.loads((out / r["run_dir"] / "summary.json").read_text())["boundaries"][0]["rms_at_growth"][
                "all"
            ]
            for r in rows
            if r["point"] == label and r["arm"] != "mid"
        }
        x = math.log(rms["pre"] / rms["post"])
        assert f"all: {x:+.3f} (×{math.exp(x):.3g}), one seed: no interval; structural: " in report
    assert report.count("| 3. placements' boundary scales (descriptive) |") == 3
    regime = json.loads((out / "regime.json").read_text())
    assert regime["registered"] == {"max_collapse": 0.9, "min_kl": 0.01, "scale_factor": 1.05}
    assert regime["outcomes"]["scale_factor"] == UNDETERMINED  # one seed: no interval at any budget
    assert regime["outcomes"]["max_collapse"] == combine(list(expected.values()))
    assert (
        "> **The regime does not meet check" in report
        and "3 (placements' boundary scales (descriptive): undetermined)" in report
    )
    assert report.index("> **The regime does not meet") < report.index("## Claims by budget")

    sub = (out / "budgets" / "b1" / "report.md").read_text()  # every budget's own report, its own check 2
    assert sub.index("## Regime checks") < sub.index("## The paper's claims at this scale")
    assert json.loads((out / "budgets" / "b1" / "regime.json").read_text())["readings"][1]["values"]["arms"].keys() == {
        "pre",
        "post",
        "mid",
    }
    (out / "report.md").unlink()
    cli("report", out)  # rebuilt from disk: the same
    assert (out / "report.md").read_text() == report
