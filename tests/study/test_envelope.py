"""Envelope rates (normgrow/study/envelope.py): each arm's own best rate chosen at the budget it is read at, from
hand-made runs — the choice, when a bracket is closed, what a diverged rate means, the widening step, the parabola's
vertex by hand, the shared-rate reading, the marks the statistics keep, and the claims a bracket that did not close
leaves undetermined; the study fields' one-line errors; the check a ladder no longer runs at its pilot's budget."""

import math
import shutil
from dataclasses import replace

import pytest
from test_pilot import _rec

from conftest import cli
from normgrow.study.choice import UNSET, ArmChoice, ArmEnvelope, BudgetEnvelope, EnvelopeScore, RateChoice, Score
from normgrow.study.config import ArmConfig, LrPilotConfig, StudyConfig
from normgrow.study.envelope import (
    arm_envelope,
    bracket,
    budget_envelope,
    filled_study,
    mark,
    scores,
    shared_rate,
    vertex,
    widen_rates,
)
from normgrow.study.record import from_row

DELTA = 0.01


def failed(arm, seed, lr):
    return from_row({"arm": arm, "seed": str(seed), "lr": str(lr), "status": "failed", "error": "nan"}, runs=False)


def four_arm_study(seeds=(0, 1, 2), env=(0, 1)) -> StudyConfig:
    from test_paper import ROLES

    return StudyConfig(
        arms={a: ArmConfig() for a in ("pj", "qj", "pg", "qg")},
        seeds=list(seeds),
        claims=dict(ROLES),
        lr_pilot=LrPilotConfig(lrs=[2e-3, 4e-3, 8e-3], envelope_seeds=list(env)),
    )


def envelope(arms: dict[str, ArmEnvelope]) -> BudgetEnvelope:
    """One budget's envelope of the given arms (the other fields as a study of seeds 0, 1 would write them)."""
    return BudgetEnvelope(1.0, (0, 1), 1, arms, Score(None, None))


def test_the_bracket_is_half_one_and_twice_the_anchor():
    assert bracket(4e-3) == [2e-3, 4e-3, 8e-3]
    assert bracket(3e-4) == [1.5e-4, 3e-4, 6e-4]


def test_a_pilot_rate_beaten_by_a_neighbour_by_2_delta_at_the_budget_reads_the_neighbour():
    """The pilot chose 4e-3 (the anchor); at this budget 2e-3 is better by 2δ on both envelope seeds, and the widened
    1e-3 worse: the envelope trains every seed at 2e-3, its bracket closed, and the statistics keep 2e-3's runs."""
    s = four_arm_study()
    runs = []
    for seed in (0, 1):
        runs += [_rec("pg", seed, 1e-3, 3.55), _rec("pg", seed, 2e-3, 3.48), _rec("pg", seed, 4e-3, 3.50)]
        runs += [_rec("pg", seed, 8e-3, 3.60)]
    a = arm_envelope(4e-3, scores(runs, "pg", [0, 1]), rounds=1)
    assert a.chosen == 2e-3 and a.closed and a.edge is None
    assert [r.select_ce for r in a.rates] == pytest.approx([3.55, 3.48, 3.50, 3.60])
    assert a.rates[1].select_ce + 2 * DELTA == pytest.approx(a.rates[2].select_ce)
    fill = [_rec("pg", 2, 2e-3, 3.47)]
    kept = [r for r in mark(runs + fill, envelope({"pg": a})) if r.kept]
    assert sorted((r.seed, r.lr) for r in kept) == [(0, 2e-3), (1, 2e-3), (2, 2e-3)]
    # filled: the arm sweeps its chosen rate alone (the envelope seeds' runs keep the bracket's names)
    env = envelope({"pg": a, "pj": replace(a, chosen=8e-3), "qj": replace(a, chosen=None), "qg": a})
    f = filled_study(s, env)
    assert f.arms["pg"].lrs == [2e-3] and f.arms["pj"].lrs == [8e-3] and f.arms["qj"].lrs == []


def test_a_best_rate_at_an_edge_is_widened_a_factor_2_and_left_open_if_it_stays_there():
    runs = [_rec("qj", 0, lr, ce) for lr, ce in ((4e-3, 3.6), (8e-3, 3.5), (1.6e-2, 3.4))]
    a = arm_envelope(8e-3, scores(runs, "qj", [0]), rounds=0)
    assert a.chosen == 1.6e-2 and a.edge == "highest" and not a.closed
    assert widen_rates(envelope({"qj": a})) == {"qj": 3.2e-2}
    low = arm_envelope(8e-3, scores([_rec("qj", 0, 4e-3, 3.0), _rec("qj", 0, 8e-3, 3.5)], "qj", [0]), rounds=0)
    assert low.edge == "lowest" and widen_rates(envelope({"qj": low})) == {"qj": 2e-3}
    # widened once, still the highest: not closed
    a = arm_envelope(8e-3, scores(runs + [_rec("qj", 0, 3.2e-2, 3.3)], "qj", [0]), rounds=1)
    assert a.chosen == 3.2e-2 and not a.closed


def test_a_diverged_rate_bounds_the_bracket_and_a_missing_one_does_not():
    ok = [_rec("qg", 0, 4e-3, 3.6), _rec("qg", 0, 8e-3, 3.5)]
    a = arm_envelope(8e-3, scores([*ok, failed("qg", 0, 1.6e-2)], "qg", [0]), rounds=0)
    assert a.chosen == 8e-3 and a.closed and a.rates[-1].failed
    assert widen_rates(envelope({"qg": a})) == {}
    # a neighbour whose runs are missing (one envelope seed of two finished, none failed) bounds nothing
    two = [_rec("qg", s, lr, ce) for s in (0, 1) for lr, ce in ((4e-3, 3.6), (8e-3, 3.5))]
    open_ = arm_envelope(8e-3, scores([*two, _rec("qg", 0, 1.6e-2, 3.0)], "qg", [0, 1]), rounds=0)
    assert open_.chosen == 8e-3 and open_.edge is None and not open_.closed
    # a rate that finished on one envelope seed of two is not scored
    half = [*ok, _rec("qg", 0, 1.6e-2, 3.0)]
    sc = scores(half, "qg", [0, 1])
    assert all(v["mean"] is None for v in sc.values())
    assert arm_envelope(8e-3, sc, rounds=0).chosen is None


def test_the_vertex_of_the_parabola_in_log2_lr_by_hand():
    # symmetric about 2e-3: the vertex is 2e-3
    assert vertex([(1e-3, 3.0), (2e-3, 2.9), (4e-3, 3.0)]) == pytest.approx(2e-3)
    # at x = log2(lr / 2e-3) = −1, 0, 1 the values 1, 0, 0.5: a = 0.75, b = −0.25, vertex at x = 1/6
    assert vertex([(1e-3, 1.0), (2e-3, 0.0), (4e-3, 0.5)]) == pytest.approx(2e-3 * 2 ** (1 / 6), rel=1e-5)
    assert vertex([(1e-3, 1.0), (2e-3, 2.0), (4e-3, 3.0)]) is None  # no minimum


def test_the_shared_rate_is_the_lowest_mean_over_the_rates_every_arm_scored():
    def arm(*scored):
        return ArmEnvelope(
            None, tuple(EnvelopeScore(lr, ce, 1, False) for lr, ce in scored), None, None, False, None, 0
        )

    arms = {"pj": arm((2e-3, 3.0), (4e-3, 3.1)), "qj": arm((4e-3, 2.8), (8e-3, 2.7))}
    shared = shared_rate(arms)
    assert shared.lr == 4e-3 and shared.select_ce == pytest.approx(2.95)
    arms["qj"] = arm((8e-3, 2.7))
    assert shared_rate(arms).lr is None


def test_an_open_bracket_leaves_the_claims_that_read_its_arm_undetermined_by_rate():
    """pre-grow's best rate sits at the top of its widened bracket; every other arm's closed. Claims reading pre-grow
    read "undetermined (learning rate)"; joint_gap, which does not, keeps its verdict."""
    from test_paper import ROLES, study

    from normgrow.study.engine.verdicts import evaluate_claims
    from normgrow.study.pilot import RATE_UNDETERMINED, rate_gate, rates_at

    s = four_arm_study(env=(0,))
    runs = []
    for arm in ("pj", "qj", "qg"):
        runs += [_rec(arm, 0, lr, ce) for lr, ce in ((2e-3, 3.6), (4e-3, 3.5), (8e-3, 3.55))]
    runs += [_rec("pg", 0, lr, ce) for lr, ce in ((2e-3, 3.6), (4e-3, 3.5), (8e-3, 3.45), (1.6e-2, 3.40))]
    anchors = {a: 4e-3 for a in s.arms}
    env = budget_envelope(s, runs, anchors, {"pg": 1})
    assert {a: e.closed for a, e in env.arms.items()} == {"pj": True, "qj": True, "pg": False, "qg": True}
    arms = {a: ArmChoice.from_json({"chosen": 4e-3, "piloted_as": a}) for a in s.arms}  # the rest of its keys unset
    at = rates_at(RateChoice(UNSET, arms, UNSET, UNSET, UNSET, {"b1": env}), 1.0)
    assert at.arms["pg"].chosen == 1.6e-2 and at.arms["pg"].record.chosen == 4e-3 and at.enveloped
    roles = dict(ROLES)
    claims = {c.key: c for c in rate_gate(evaluate_claims(roles, study(0.0004, -0.0328)), roles, at, s)}
    for key in ("grow_gap", "interaction"):
        assert claims[key].verdict == claims[key].holm == RATE_UNDETERMINED, key
        assert "its bracket did not close" in claims[key].sentence
    assert claims["joint_gap"].verdict == "supported"
    # the shared-rate reading: 4e-3 is the lowest mean among the rates all four scored
    assert env.shared.lr == 4e-3 and math.isclose(env.shared.select_ce, 3.5)


@pytest.mark.parametrize(
    "over,needle",
    [
        (["lr_pilot.envelope_seeds=[7]"], "lr_pilot.envelope_seeds: need distinct seeds of the study's own seeds"),
        (["lr_pilot.envelope_seeds=[0,0]"], "lr_pilot.envelope_seeds: need distinct seeds of the study's own seeds"),
        (["lr_pilot.envelope_widen=-1"], "lr_pilot.envelope_widen: must be between 0 and 4 rounds, got -1"),
        (["lr_pilot.envelope_widen=99"], "lr_pilot.envelope_widen: must be between 0 and 4 rounds, got 99"),
        (["lr_pilot.confirm_seeds=[0]"], "lr_pilot.confirm_seeds: the envelope chooses every arm's rate"),
    ],
)
def test_bad_envelope_input_is_one_line_naming_the_field(tmp_path, over, needle):
    proc = cli("study", "default", "-o", tmp_path / "s", *over, check=False)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(err) == 1 and err[0].startswith("normgrow: error:"), proc.stderr
    assert needle in err[0], err[0]
    assert not (tmp_path / "s").exists()


def test_a_ladders_check_at_the_pilots_own_budget_is_skipped_with_its_note():
    import dataclasses

    from normgrow.study.config import load_study
    from normgrow.study.pilot import check_budget, check_skipped
    from normgrow.study.report.rates import check_lines

    # session 21's coord: budgets 0.25, 0.5, 1 fitted, 2 held out, the pilot at half the reference budget 1
    coord = dataclasses.replace(load_study("coord"), budgets=[0.25, 0.5, 1, 2], holdout=2, budget_scale=1)
    coord = dataclasses.replace(coord, lr_pilot=dataclasses.replace(coord.lr_pilot, budget_scale=0.5))
    assert check_budget(coord) == coord.budget_scale * coord.lr_pilot.budget_scale == 0.5
    note = check_skipped(coord)
    assert note is not None and "the pilot's own (0.5)" in note
    assert any(note in line for line in check_lines(RateChoice.from_json({"check_skipped": note}), coord.budgets))
    gap = load_study("gap")  # its check (budget 1) is not the pilot's point (0.25): it runs
    assert check_budget(gap) == 1.0 and check_skipped(gap) is None


@pytest.mark.e2e
def test_a_two_budget_ladder_under_envelope_rates_end_to_end(tiny_cache, tmp_path):
    """A micro ladder (budgets 0.5 and 1, one arm, seeds 0 and 1, envelope seed 0) through the CLI. Read back from
    results.csv alone: at each budget each arm's seed-0 runs are r/2, r, 2r around its choice at the budget before (the
    pilot's at the first) plus at most one widened rate; its kept rate is the lowest seed-0 select/ce among them; seed 1
    ran that rate alone; the choice of budget 0.5 anchors budget 1. `normgrow report` rebuilds the same files."""
    from test_runner import results, write_study

    spec = write_study(
        tmp_path / "s.yaml",
        tiny_cache,
        {"pre": "{overrides: [model.norm=pre]}"},
        extra="budget_scale: 1\nbudgets: [0.5, 1]\n"
        "lr_pilot: {lrs: [0.002, 0.008], budget_scale: 0.5, envelope_seeds: [0]}\n",
        parallel=2,
    )
    out = tmp_path / "study"
    cli("study", spec, "-o", out)
    pilot = {r["arm"]: r for r in results(out / "pilot") if r["selected"] == "yes"}
    anchor = {arm: float(r["lr"]) for arm, r in pilot.items()}
    for label in ("b0.5", "b1"):
        rows = results(out / "budgets" / label)
        for arm in ("pre",):
            s0 = {float(r["lr"]): float(r["select_ce"]) for r in rows if r["arm"] == arm and r["seed"] == "0"}
            a = anchor[arm]
            third = set(s0) - {a / 2, a, a * 2}
            assert {a / 2, a, a * 2} <= set(s0) and len(third) <= 1, (label, arm, s0)
            best = min(s0, key=s0.get)
            if third:  # widened one step beyond the edge the bracket's best sat at
                (x,) = third
                assert x in (a / 4, a * 4)
            kept = {(r["seed"], float(r["lr"])) for r in rows if r["arm"] == arm and r["selected"] == "yes"}
            assert kept == {("0", best), ("1", best)}
            assert [float(r["lr"]) for r in rows if r["arm"] == arm and r["seed"] == "1"] == [best]
            anchor[arm] = best
    report = (out / "report.md").read_text()
    assert "## Learning rates per budget (envelope)" in report
    before = {p: (out / p).read_text() for p in ("report.md", "results.csv", "lr_choice.json", "budgets/b1/report.md")}
    cli("report", out)
    assert {p: (out / p).read_text() for p in before} == before
    # the choice is an output, never an input: cut, edited or deleted between reruns, the rebuild writes it again
    (out / "lr_choice.json").write_text(before["lr_choice.json"][:100])
    (out / "budgets" / "b1" / "report.md").unlink()
    cli("report", out)
    assert {p: (out / p).read_text() for p in before} == before
    (out / "lr_choice.json").unlink()
    cli("study", spec, "-o", out, "--no-progress")  # the study rerun: nothing trains again, the same files
    assert {p: (out / p).read_text() for p in before} == before
    # a bracket's run deleted, another's summary cut, between reruns: exactly those two train again, to the same
    # numbers and the same choice (the wall times aside)
    rows = results(out / "budgets" / "b1")
    gone, cut = [r["run_dir"] for r in rows if r["seed"] == "0" and r["selected"] == "no"][:2]
    shutil.rmtree(out / "budgets" / "b1" / gone)
    summary = out / "budgets" / "b1" / cut / "summary.json"
    summary.write_text(summary.read_text()[:50])
    again = cli("study", spec, "-o", out, "--no-progress")
    assert "1 of 3 runs already finished" in again.stdout  # the bracket at budget 1: its two harmed runs train
    timeless = [{k: v for k, v in r.items() if k != "wall_time_s"} for r in results(out / "budgets" / "b1")]
    assert timeless == [{k: v for k, v in r.items() if k != "wall_time_s"} for r in rows]
    assert (out / "lr_choice.json").read_text() == before["lr_choice.json"]


@pytest.mark.e2e
def test_without_a_pilot_the_envelope_anchors_at_each_arms_own_rate():
    """The default study has no pilot (session 23): its envelope anchors at each core arm's own train.lr, and its
    plan holds the study's runs and the brackets' r/2 and 2r on seed 0 (6 arms × 3 seeds + 4 arms × 2), with no
    pilot phase; the anchors are the shared rate 4e-3 for every arm, matched arms at their twin's; turning the
    envelope off too (envelope_seeds=[]) leaves the study's own runs alone."""
    from normgrow.study.config import load_study
    from normgrow.study.pilot import anchor_choice
    from normgrow.study.plan import study_plan

    assert "plan of study default: 26 runs" in cli("plan", "default", "--no-measure").stdout
    assert (
        "plan of study default: 18 runs" in cli("plan", "default", "lr_pilot.envelope_seeds=[]", "--no-measure").stdout
    )
    study = load_study("default")
    assert study.lr_pilot.lrs == [] and study.lr_pilot.envelope_widen == 3
    assert {j.phase for j in study_plan(study, None, False)[0]} == {"main"}
    choice = anchor_choice(study)
    assert {a: c.chosen for a, c in choice.arms.items()} == dict.fromkeys(study.arms, 4e-3)
    assert choice.arms["post-grow-matched"].piloted_as == "post-grow" and choice.pilot.dir is None
