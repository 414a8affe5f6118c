"""Budget ladders: validation, the retention label's rule, the retention ratio against the definition of Fieller's
interval, and a micro ladder end to end (its budgets' sub-studies, its report, resume and extension)."""

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import t as student_t
from test_runner import T95_DF1, results, write_study
from test_sweep import block_params

from conftest import cli
from normgrow.config import load_config
from normgrow.errors import ConfigError
from normgrow.study.config import load_study
from normgrow.study.engine.stats import Contrast, Estimate
from normgrow.study.engine.verdicts import claims_reading
from normgrow.study.jobs import sweep_plan
from normgrow.study.report.ladder import retention, retention_label


@pytest.mark.parametrize(
    "over,needle",
    [
        (["budgets=[1]"], "at least two budget scales"),
        (["budgets=[1, 1]"], "must differ"),
        (["budgets=[-0.5, 1]"], "must be positive"),
        (["budgets=[2, 1]"], "ascending order"),
        (["budgets=[0.5, 2]"], "must contain the study's budget_scale (1)"),
        (["budgets=[0.5, 1]", "budget_scale=0.25"], "must contain the study's budget_scale (0.25)"),
        (["budgets=[0.5, 1]", "sweep.axes=[{key: model.d_model, values: [32, 64]}]"], "not both"),
    ],
)
def test_bad_ladders_are_one_line_naming_budgets(tmp_path, over, needle):
    path = tmp_path / "s.yaml"
    path.write_text("name: bad\nbase: tiny\narms: {a: {}}\n")
    with pytest.raises(ConfigError, match=r"^budgets: .*" + needle.replace("(", r"\(").replace(")", r"\)")) as e:
        load_study(str(path), over)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "over,needle",
    [
        (["ladder=branches"], r"^ladder: 'branches' says how a budget ladder trains its budgets: set `budgets` too$"),
        (["budgets=[0.5, 1]", "ladder_base=0.5"], r"^ladder_base: is written by a ladder into its budgets' studies"),
        (
            ["budgets=[0.5, 1]", "ladder=trunks"],
            r"ladder: Invalid value 'trunks', expected one of \['rungs', 'branches'",
        ),
    ],
)
def test_bad_ladder_kinds_are_one_line(tmp_path, over, needle):
    path = tmp_path / "s.yaml"
    path.write_text("name: bad\nbase: tiny\narms: {a: {}}\n")
    with pytest.raises(ConfigError, match=needle) as e:
        load_study(str(path), over)
    assert "\n" not in str(e.value)


def test_a_ladder_with_the_reference_among_its_budgets_loads(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("name: ok\nbase: tiny\narms: {a: {}}\nbudget_scale: 2\n")
    assert load_study(str(path), ["budgets=[0.5, 1, 2]"]).budgets == [0.5, 1.0, 2.0]


def test_a_ladder_plans_every_budget_as_a_sub_study_in_one_queue(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("name: lad\nbase: tiny\nseeds: [0, 1]\narms: {a: {}, b: {}}\n")
    plan = sweep_plan(load_study(str(path), ["budgets=[0.5, 1, 2]"]), tmp_path / "out")
    assert [(sub.budget_scale, sub.budgets, d.relative_to(tmp_path)) for sub, d, _ in plan] == [
        (0.5, [], Path("out/budgets/b0.5")),
        (1.0, [], Path("out/budgets/b1")),
        (2.0, [], Path("out/budgets/b2")),
    ]
    names = [j.name for _, _, jobs in plan for j in jobs]
    assert len(set(names)) == 12 and "b0.5/a-s0" in names and "b2/b-s1" in names
    # the tiny preset's one stage of 20000 tokens and its warmup of 2000, at each budget
    assert [
        (j.cfg.curriculum.stages[0].tokens, j.cfg.train.warmup_tokens) for _, _, jobs in plan for j in jobs[:1]
    ] == [(10000, 1000), (20000, 2000), (40000, 4000)]


def test_the_claims_that_read_a_contrast_are_the_val_ce_claims_on_exactly_its_arms():
    cfg = dict(pre_grow="pg", post_grow="qg", pre_joint="pj", post_joint="qj", matched=["qj", "qm"])
    # crossover (stage ends), boundary_scale and structural_drift (diagnostics) compare the same arms, not this contrast
    assert claims_reading(cfg, "pg", "qg") == ["grow_gap"]
    assert claims_reading(cfg, "qg", "pg") == ["grow_gap"]
    assert claims_reading(cfg, "pj", "qj") == ["joint_gap"]  # identity reads pre_joint with pre_grow: not this pair
    assert claims_reading(cfg, "qj", "qm") == ["matched", "matched_flops"]
    assert claims_reading(cfg, "pg", "pj") == []


@pytest.mark.parametrize(
    "lo,hi,label",
    [
        (-0.5, -0.1, "reversing"),
        (-0.5, -1e-9, "reversing"),
        (-0.5, 0.0, "fading"),  # the upper bound at 0 exactly: not below it
        (0.05, 0.40, "fading"),
        (-0.3, 0.9, "fading"),  # contains 0 but not 1: it keeps less than all of itself
        (0.2, 1.0 - 1e-9, "fading"),
        (2 / 3, 1.0, "persistent"),  # the upper bound at 1 exactly: includes 1; the lower at the band's edge 1/(1+0.5)
        (0.8, 1.3, "persistent"),
        (
            1.0,
            1.5,
            "persistent",
        ),  # the lower bound at 1 exactly: includes 1, not above it; the upper at the band's edge
        (0.66, 1.0, "undetermined"),  # includes 1, but reaches below 2/3: fading is as plausible
        (1.0, 1.51, "undetermined"),  # includes 1, but reaches above 1.5: growing is as plausible
        (0.18, 1.31, "undetermined"),  # the default study's grow gap in session 8, once called persistent
        (1e-9, 1.5, "undetermined"),
        (1.0 + 1e-9, 2.0, "growing"),
        (1.9, 2.3, "growing"),
        (0.0, 1.5, "undetermined"),  # the lower bound at 0 exactly: not above it
        (-0.2, 1.5, "undetermined"),
        (None, None, "undetermined"),
        (0.3, None, "undetermined"),
    ],
)
def test_retention_label_every_branch_and_boundary(lo, hi, label):
    assert retention_label(lo, hi) == label


def rec(seeds, diffs):
    """A paired contrast (only the per-seed differences are read)."""
    return Contrast("a", "b", list(seeds), list(diffs), Estimate())


def t_stat(x, y, r):
    """Student's t of the per-seed values x − r·y against 0: Fieller's interval is the set of r where |t| ≤ t95."""
    z = [a - r * b for a, b in zip(x, y, strict=True)]
    n, m = len(z), sum(z) / len(z)
    sd = math.sqrt(sum((v - m) ** 2 for v in z) / (n - 1))
    return m / (sd / math.sqrt(n))


@pytest.mark.parametrize(
    "x,ratio,label",
    [
        ([-0.02, -0.025, -0.015], 0.02 / 0.09, "fading"),
        ([0.02, 0.025, 0.03], -0.025 / 0.09, "reversing"),
        ([-0.09, -0.095, -0.085], 1.0, "persistent"),
        ([-0.2, -0.19, -0.17], 0.56 / 0.27, "growing"),
        ([-0.05, -0.15, 0.05], 0.05 / 0.09, "undetermined"),
    ],
)
def test_retention_ratio_is_fieller_over_the_seeds_both_budgets_have(x, ratio, label):
    y = [-0.10, -0.09, -0.08]  # Δ at the smaller budget, seeds 0, 1, 2: mean −0.09
    r = retention(rec([0, 1, 2], y), rec([0, 1, 2], x))
    assert r.ratio == pytest.approx(ratio, rel=1e-12) and r.n == 3 and r.label == label
    t95 = student_t.ppf(0.975, 2)
    for end in (r.lo, r.hi):  # each end is where the t-test of x − ρ·y just stops rejecting
        assert abs(t_stat(x, y, end)) == pytest.approx(t95, rel=1e-9)
    assert abs(t_stat(x, y, ratio)) < t95  # the point estimate is inside
    assert abs(t_stat(x, y, r.lo - 1e-3)) > t95 and abs(t_stat(x, y, r.hi + 1e-3)) > t95


def test_retention_pairs_by_seed_and_says_why_there_is_no_interval():
    # seeds 1 and 3 are missing at one budget each: only seeds 0 and 2 are paired, by seed, not by position
    r = retention(rec([0, 1, 2], [-0.10, -0.50, -0.08]), rec([0, 2, 3], [-0.03, -0.01, 9.0]))
    assert r.seeds == [0, 2] and r.ratio == pytest.approx(0.04 / 0.18, rel=1e-12)
    # Δ at the smaller budget straddles 0: Fieller's interval is unbounded
    r = retention(rec([0, 1, 2], [0.10, -0.08, 0.02]), rec([0, 1, 2], [-0.2, -0.17, -0.15]))
    assert r.lo is None and r.label == "undetermined" and "not resolved from 0" in r.why
    r = retention(rec([0], [-0.1]), rec([0], [-0.05]))
    assert r.ratio == pytest.approx(0.5) and r.lo is None and "one seed" in r.why
    assert retention(rec([0], [-0.1]), rec([1], [-0.05])).why.startswith("no seed finished")


def rung_contrast(rows, budget):
    """post − pre per seed at one budget, its mean and 95% half-width (two seeds: t(1) · |d0 − d1| / 2)."""
    ce = {(r["arm"], r["seed"]): float(r["val_ce"]) for r in rows if r["budget_scale"] == budget}
    d = [ce[("post", s)] - ce[("pre", s)] for s in ("0", "1")]
    return d, sum(d) / 2, T95_DF1 * abs(d[0] - d[1]) / 2


@pytest.mark.slow  # 20 s; the rung ladder also runs in test_regime's micro ladder and the pilot ladder below
def test_a_micro_ladder_reports_each_budget_and_the_retention_between_them(tiny_cache, tmp_path):
    spec = write_study(
        tmp_path / "s.yaml",
        tiny_cache,
        {"pre": "{overrides: [model.norm=pre]}", "post": "{overrides: [model.norm=post]}"},
        launcher="inline",
        extra="contrasts: {gap: [pre, post]}\nclaims: {pre_joint: pre, post_joint: post}\n",
    )
    out = tmp_path / "ladder"
    proc = cli("study", spec, "-o", out, "--no-progress", "budgets=[0.5,1]")
    rows = results(out)
    assert sorted((r["point"], r["budget_scale"], r["arm"], r["seed"]) for r in rows) == sorted(
        (f"b{b:g}", str(b), a, s) for b in (0.5, 1.0) for a in ("pre", "post") for s in ("0", "1")
    )
    assert all(r["status"] == "ok" for r in rows)
    for label, scale in (("b0.5", 0.5), ("b1", 1.0)):  # every budget is a plain study of its own
        sub = load_study(str(out / "budgets" / label / "study.yaml"))
        assert sub.budgets == [] and sub.budget_scale == scale
        cfg = load_config(str(out / "budgets" / label / "configs" / "pre-s0.yaml"))
        assert [s.tokens for s in cfg.curriculum.stages] == [round(2560 * scale)] * 2
        assert (out / "budgets" / label / "report.md").is_file()
    report = (out / "report.md").read_text()
    n_params = 2 * block_params(32)  # the full-depth student: two tiny blocks
    for budget, label in (("0.5", "b0.5"), ("1.0", "b1")):
        _, md, hd = rung_contrast(rows, budget)
        at = [r for r in rows if r["budget_scale"] == budget]
        kl = sum(float(r["val_kl"]) for r in at) / 4  # both arms have two seeds: the mean of their means
        tokens = sum(float(r["tokens"]) for r in at if r["arm"] == "pre") / 2
        sub = (out / "budgets" / label / "report.md").read_text()
        verdict = next(line for line in sub.splitlines() if line.startswith("| joint_gap |")).split("**")[1]
        assert (
            f"| {float(budget):g} | {md:+.4f} ± {hd:.4f} | 2 | joint_gap **{verdict}** | {kl:.4f} | "
            f"{md / kl:+.1%} | {tokens / n_params:.3g} |"
        ) in report
    d0, m0, _ = rung_contrast(rows, "0.5")
    d1, m1, _ = rung_contrast(rows, "1.0")
    row = next(line for line in report.splitlines() if line.startswith("| 0.5 → 1 |"))
    assert row.split(" | ")[1].startswith(f"{m1 / m0:+.2f}")  # ρ = Δ(1) / Δ(0.5)
    assert row.split(" | ")[-1].rstrip(" |") in {"reversing", "fading", "persistent", "growing", "undetermined"}
    headline = next(line for line in proc.stdout.splitlines() if line.startswith("gap (post − pre) is"))
    assert f"at budget 1; from budget 0.5 to 1 it keeps ρ = {m1 / m0:+.2f}" in headline
    assert f"- {headline}" in report  # the report's headline is the study's
    assert "## Claims by budget" in report and "| joint_gap |" in report.split("## Claims by budget")[1]
    # the reference budget's claims section, as its own report prints it
    assert "## The reference budget's claims (budget 1: [budgets/b1/report.md](budgets/b1/report.md))" in report
    ref_table = [
        line
        for line in (out / "budgets" / "b1" / "report.md").read_text().splitlines()
        if line.startswith("| joint_gap |") or line.startswith("- **joint_gap**")
    ]
    assert ref_table and all(line in report for line in ref_table)

    # rebuilt from disk: the ladder and one of its budgets
    (out / "report.md").unlink()
    cli("report", out)
    assert (out / "report.md").read_text() == report
    cli("report", out / "budgets" / "b1")
    # the ladder itself is no study to compare; its budgets are
    bad = cli("report", out / "budgets" / "b1", "--against", out, check=False)
    assert bad.returncode == 2 and "budgets/<label>" in bad.stderr.strip().splitlines()[-1]
    cmp = cli("report", out / "budgets" / "b1", "--against", out / "budgets" / "b0.5").stdout
    assert f"| {m1 - m0:+.4f} | {m1 / m0:+.2f}" in cmp
    # a study against itself, or against one with no finished run (before: a table of "—" rows), is one line
    bad = cli("report", out / "budgets" / "b1", "--against", out / "budgets" / "b1", check=False)
    assert bad.returncode == 2 and "is the study itself" in bad.stderr and bad.stderr.count("\n") == 1
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "study.yaml").write_bytes((out / "budgets" / "b1" / "study.yaml").read_bytes())
    (empty / "results.csv").write_text((out / "budgets" / "b1" / "results.csv").read_text().splitlines()[0] + "\n")
    bad = cli("report", out / "budgets" / "b1", "--against", empty, check=False)
    assert bad.returncode == 2 and f"{empty}: no finished runs to compare" in bad.stderr, bad.stderr

    # a rerun skips every finished run; an extended ladder reuses its finished budgets
    again = cli("study", spec, "-o", out, "--no-progress", "budgets=[0.5,1]")
    assert "8 of 8 runs already finished" in again.stdout + again.stderr
    longer = cli("study", spec, "-o", out, "--no-progress", "budgets=[0.25,0.5,1]")
    assert "8 of 12 runs already finished" in longer.stdout + longer.stderr
    assert [r for r in results(out) if r["budget_scale"] != "0.25"] == rows
    assert "| 0.25 → 0.5 |" in (out / "report.md").read_text()
    shorter = cli("study", spec, "-o", out, "--no-progress", "budgets=[0.5,1]", check=False)
    assert shorter.returncode == 2 and "may gain budgets, not lose them" in shorter.stderr


@pytest.mark.e2e
def test_a_ladder_runs_its_learning_rate_pilot_once_and_every_budget_trains_at_the_chosen_rates(tiny_cache, tmp_path):
    spec = write_study(
        tmp_path / "s.yaml",
        tiny_cache,
        {"pre": "{overrides: [model.norm=pre]}", "post": "{overrides: [model.norm=post]}"},
        seeds=(0,),
        launcher="inline",
        extra="contrasts: {gap: [pre, post]}\nlr_pilot: {lrs: [1.0e-4, 3.0e-3], budget_scale: 0.5}\n",
    )
    out = tmp_path / "ladder"
    cli("study", spec, "-o", out, "--no-progress", "budgets=[0.5,1]")
    pilot = results(out / "pilot")
    assert sorted((r["arm"], float(r["lr"])) for r in pilot) == [
        ("post", 1e-4),
        ("post", 3e-3),
        ("pre", 1e-4),
        ("pre", 3e-3),
    ]
    # the pilot runs once, at the reference budget (1) × 0.5: stages of 1,280 tokens
    cfg = load_config(str(out / "pilot" / "configs" / "pre-lr0.0001-s0.yaml"))
    assert [s.tokens for s in cfg.curriculum.stages] == [1280, 1280]
    choice = json.loads((out / "lr_choice.json").read_text())
    for arm in ("pre", "post"):  # the lowest select/ce of the pilot's runs, read from their summaries
        scores = {
            float(r["lr"]): json.loads((out / "pilot" / r["run_dir"] / "summary.json").read_text())["select"][
                "select/ce"
            ]
            for r in pilot
            if r["arm"] == arm
        }
        best = min(scores, key=scores.get)
        assert choice["arms"][arm]["chosen"] == best
        # the budget of the pilot (0.5) trains at its choice (budget 1's rate: below, from the check)
        assert load_config(str(out / "budgets" / "b0.5" / "configs" / f"{arm}-s0.yaml")).train.lr == best
    assert load_study(str(out / "study.yaml")).lr_pilot.lrs == [1e-4, 3e-3]  # the study as written
    # the second pilot point: the ladder's middle fitted budget (1), the pilot's seed, each arm at its chosen rate and
    # the tried rate next to it on either side — a grid step (× 30) beyond the edge where the choice is an edge
    check = results(out / "pilot" / "check")
    assert choice["check"]["budget_scale"] == 1.0 and {r["seed"] for r in check} == {"0"}
    for arm in ("pre", "post"):
        c = choice["arms"][arm]
        rates = sorted(float(r["lr"]) for r in check if r["arm"] == arm)
        lo, hi = (1e-4 / 30, 3e-3) if c["chosen"] == 1e-4 else (1e-4, 3e-3 * 30)
        assert rates == pytest.approx(sorted([lo, c["chosen"], hi]))
        scores = {
            float(r["lr"]): json.loads((out / "pilot" / "check" / r["run_dir"] / "summary.json").read_text())["select"][
                "select/ce"
            ]
            for r in check
            if r["arm"] == arm and r["status"] == "ok"
        }
        if len(scores) == 3:  # every check run finished: held is whether the best of the three is the choice
            there = min(scores, key=scores.get)
            assert c["check"]["held"] == (there == c["chosen"])
        else:
            there = c["chosen"]
            assert c["check"]["held"] is None
        # budget 1 is the check's own: it trains at the best rate there (the pilot's choice where it held)
        assert load_config(str(out / "budgets" / "b1" / "configs" / f"{arm}-s0.yaml")).train.lr == there
    assert "## Do the learning rates hold across budgets?" in (out / "report.md").read_text()
    again = cli("study", spec, "-o", out, "--no-progress", "budgets=[0.5,1]").stdout
    assert (
        again.count("4 of 4 runs already finished: skipped") == 2
    )  # the pilot's and the ladder's (2 budgets × 2 arms)
    assert cli("report", out).returncode == 0


@pytest.mark.e2e
def test_a_ladder_confirms_the_rates_at_its_largest_budget_and_gates_that_budgets_claims_only(tiny_cache, tmp_path):
    """Two grow arms (the claims' pre_grow and post_grow), budgets 0.5 and 1, a pilot of two rates: every choice sits
    at an edge of its grid, so no rate holds. The confirmation runs once, after every budget, at the largest (1):
    each arm at half and twice the rate it trained at there, on the confirmation seed, under budget 1's stages. The
    claims of budget 1 read "undetermined (learning rate)"; budget 0.5's are untouched."""
    from normgrow.study.pilot import RATE_UNDETERMINED

    spec = write_study(
        tmp_path / "s.yaml",
        tiny_cache,
        {"pre": "{overrides: [model.norm=pre]}", "post": "{overrides: [model.norm=post]}"},
        seeds=(0,),
        launcher="inline",
        extra="contrasts: {gap: [pre, post]}\nclaims: {pre_grow: pre, post_grow: post}\n"
        "lr_pilot: {lrs: [1.0e-4, 3.0e-3], budget_scale: 0.5, check: false, confirm_seeds: [0]}\n",
    )
    out = tmp_path / "ladder"
    said = cli("study", spec, "-o", out, "--no-progress", "budgets=[0.5,1]").stdout
    choice = json.loads((out / "lr_choice.json").read_text())
    assert choice["confirm"]["budget_scale"] == 1.0 and choice["confirm"]["seeds"] == [0]
    confirm = results(out / "pilot" / "confirm")
    top = load_config(str(out / "budgets" / "b1" / "configs" / "pre-s0.yaml"))
    for arm in ("pre", "post"):
        lr = load_config(str(out / "budgets" / "b1" / "configs" / f"{arm}-s0.yaml")).train.lr
        assert sorted(float(r["lr"]) for r in confirm if r["arm"] == arm) == pytest.approx([lr / 2, lr * 2])
        c = choice["confirm"]["arms"][arm]
        assert c["edge"] and c["holds"] is False  # at an edge of the pilot's grid, whatever the neighbours
        # the trained rate is scored on the model-selection set by the budget's own run (no rerun of it)
        assert [r["lr"] for r in c["rates"]] == pytest.approx([lr / 2, lr, lr * 2])
        assert all(r["select_ce"] is not None for r in c["rates"]), c
    cfg = load_config(str(next((out / "pilot" / "confirm" / "configs").glob("pre-*.yaml"))))
    assert [x.tokens for x in cfg.curriculum.stages] == [x.tokens for x in top.curriculum.stages] == [2560, 2560]
    b1, b05 = (out / "budgets" / "b1" / "report.md").read_text(), (out / "budgets" / "b0.5" / "report.md").read_text()
    assert "grow gap, val/ce post − pre" in b1 and RATE_UNDETERMINED in b1 and RATE_UNDETERMINED not in b05
    assert "## Do the rates hold at budget 1?" in b1 and "Do the rates hold" not in b05
    assert "## Do the rates hold at budget 1?" in (out / "report.md").read_text()
    assert "rate confirmation at budget 1: each core arm at half and twice its rate" in said


@pytest.mark.e2e
@pytest.mark.parametrize("envelope", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_a_ladder_with_a_holdout_predicts_it_before_its_runs_and_checks_the_prediction(tiny_cache, tmp_path, envelope):
    """Under envelope rates too (each budget's brackets r/2, r, 2r on seed 0, anchored at each arm's train.lr at the
    first): the prediction is written after every fitted budget's runs, brackets included, and before any run of the
    held-out budget, its brackets included."""
    rates = "lr_pilot: {lrs: [], envelope_seeds: [0], envelope_widen: 1}\n" if envelope else ""
    spec = write_study(
        tmp_path / "s.yaml",
        tiny_cache,
        {"pre": "{overrides: [model.norm=pre]}", "post": "{overrides: [model.norm=post]}"},
        launcher="inline",
        extra="contrasts: {gap: [pre, post]}\nclaims: {pre_joint: pre, post_joint: post}\n"
        f"budgets: [0.125, 0.25, 0.5, 1, 2]\nholdout: 2\n{rates}",
    )
    out = tmp_path / "ladder"
    proc = cli("study", spec, "-o", out, "--no-progress")
    assert all(r["status"] == "ok" for r in results(out))
    if envelope:  # the held-out budget ran its own brackets: three rates at least for each arm on seed 0
        held_rows = results(out / "budgets" / "b2")
        assert all(
            len({r["lr"] for r in held_rows if r["arm"] == a and r["seed"] == "0"}) >= 3 for a in ("pre", "post")
        )
    line = next(x for x in proc.stdout.splitlines() if x.startswith("prediction of budget 2"))
    assert "written before its runs" in line
    written = (out / "prediction.json").stat().st_mtime
    held = [p for p in (out / "budgets" / "b2" / "runs").rglob("*") if p.is_file()]
    fitted = [p for p in (out / "budgets" / "b1" / "runs").rglob("summary.json")]
    assert held and min(p.stat().st_mtime for p in held) >= written  # nothing of budget 2 before the prediction
    assert fitted and max(p.stat().st_mtime for p in fitted) <= written  # every fitted run finished before it
    record = json.loads((out / "prediction.json").read_text())
    assert record["fitted_budgets"] == [0.125, 0.25, 0.5, 1.0] and set(record["inputs"]) == {"pre", "post"}
    report = (out / "report.md").read_text()
    assert "## At the limit: fitted budget curves" in report and "**extrapolation: " in report
    assert "| joint_limit |" in report
    before = (out / "prediction.json").read_bytes()
    again = cli("study", spec, "-o", out, "--no-progress")  # a rerun: nothing trains, nothing is predicted again
    assert "kept as written" in again.stdout and (out / "prediction.json").read_bytes() == before
    assert len((out / "study.log").read_text().splitlines()) == 1
    assert cli("report", out).returncode == 0 and (out / "report.md").read_text() == report


@pytest.mark.e2e
def test_a_branch_ladder_trains_each_arm_once_and_equals_its_budgets_trained_directly(tiny_cache, tmp_path):
    """`ladder: branches` (a trunk per arm × seed, each budget a decay branch) against `ladder: direct` (the same
    continued-training recipe, every budget from step 0): every run's events, final val/ce and weights the same, for a
    grown arm and a joint arm matched per budget to it (a joint arm unmatched is tests/train/test_branch.py's)."""
    from conftest import assert_same_run
    from normgrow.train import checkpoint

    spec = write_study(
        tmp_path / "s.yaml",
        tiny_cache,
        {
            "grow": "{}",
            "matched": '{overrides: ["curriculum.stages=[{n_layer: 2, tokens: 5120}]"], match: grow}',
        },
        seeds=(0,),
        launcher="inline",
        more=["train.schedule=wsd"],
    )
    over = ["--no-progress", "budgets=[0.5,1,2]"]
    branches, direct = tmp_path / "branches", tmp_path / "direct"
    proc = cli("study", spec, "-o", branches, *over, "ladder=branches")
    cli("study", spec, "-o", direct, *over, "ladder=direct")
    assert "2 trunks (one per arm × seed" in proc.stdout + proc.stderr
    assert not (direct / "trunks").exists()
    for arm in ("grow", "matched"):
        trunk = branches / "trunks" / "runs" / f"{arm}-s0"
        assert not (trunk / "summary.json").exists()  # a trunk never decays
        for label, tokens in (("b0.5", 2560), ("b1", 5120), ("b2", 10240)):
            run_b, run_d = (d / "budgets" / label / "runs" / f"{arm}-s0" for d in (branches, direct))
            assert_same_run(run_b, run_d)
            cfg = load_config(str(run_b / "config.yaml"))
            stages = [s.tokens for s in cfg.curriculum.stages]
            if arm == "grow":  # the first stage at the smallest budget's length, the last stretched
                assert stages == [1280, tokens - 1280]
            step = int(cfg.train.init_from.rsplit("_", 1)[1])
            assert step == int(0.8 * sum(stages) / 256)  # the branch starts at its own decay start
            assert (trunk / "checkpoints" / f"step_{step:08d}").is_dir()
    # the matched joint arm takes the grown arm's active-layer tokens at every budget: 1 block for 1280 tokens and 2
    # for the rest, 2 × 10240 − 1280 = 19200 at budget 2, i.e. 9600 tokens in its 2 blocks: 37.5 steps, rounded to 38
    summary = json.loads((branches / "budgets" / "b2" / "runs" / "matched-s0" / "summary.json").read_text())
    assert summary["compute"]["active_layer_tokens"] == 2 * 38 * 256
    assert checkpoint.list_checkpoints(branches / "trunks" / "runs" / "grow-s0" / "checkpoints")[-1].name == (
        "step_00000032"  # the largest budget's decay start: 0.8 × 40 steps
    )
    assert [r["val_ce"] for r in results(branches)] == [r["val_ce"] for r in results(direct)]
    report = (branches / "report.md").read_text()
    assert "continued training at full depth" in report and "`ladder: branches`" in report
    (branches / "report.md").unlink()  # rebuilt from disk, trunks and all
    cli("report", branches)
    assert (branches / "report.md").read_text() == report
    again = cli("study", spec, "-o", branches, *over, "ladder=branches")
    assert "2 of 2 runs already finished" in again.stdout + again.stderr  # the trunks
    assert "6 of 6 runs already finished" in again.stdout + again.stderr
    # a budget gained or lost moves the trunks' stop (the largest budget's decay start): refused, nothing written
    before = {p: p.read_bytes() if p.is_file() else None for p in branches.rglob("*")}
    for budgets in ("[0.5,1,2,4]", "[0.5,1]"):
        changed = cli(
            "study", spec, "-o", branches, "--no-progress", f"budgets={budgets}", "ladder=branches", check=False
        )
        lines = changed.stderr.strip().splitlines()
        assert changed.returncode == 2 and len(lines) == 1 and "trained with another definition" in lines[0]
        assert "trunks/grow-s0" in lines[0]
        assert {p: p.read_bytes() if p.is_file() else None for p in branches.rglob("*")} == before
    cosine = cli("study", spec, "-o", tmp_path / "c", *over, "ladder=branches", "train.schedule=cosine", check=False)
    assert cosine.returncode == 2
    assert "ladder: needs train.schedule=wsd (got cosine)" in cosine.stderr.strip().splitlines()[-1]


def test_a_moved_rate_trains_each_budget_at_the_nearest_pilot_points_choice(tmp_path):
    """The rule registered before the runs (LOG, session 17): where the check moved an arm's choice, each budget trains
    at the choice of the pilot point nearest to it in log budget; an arm whose choice held keeps it everywhere."""
    from normgrow.study.choice import RateChoice
    from normgrow.study.jobs import ladder_plan
    from normgrow.study.pilot import moved, rates_at
    from normgrow.study.runner import rated_study

    path = tmp_path / "s.yaml"
    path.write_text("name: lad\nbase: tiny\narms: {a: {}, b: {}}\nbudget_scale: 1\n")
    study = load_study(str(path), ["budgets=[0.25, 0.5, 1, 2, 4]"])

    def arm(chosen, check_best):
        return {"chosen": chosen, "edge": None, "check": {"chosen": check_best, "held": check_best == chosen}}

    # the pilot at budget 0.5, its check at budget 1 (log midpoint 0.707): 0.25 and 0.5 are nearer the pilot
    raw = {
        "pilot": {"budget_scale": 0.5},
        "check": {"budget_scale": 1.0},
        "arms": {"a": arm(4e-3, 2e-3), "b": arm(8e-3, 8e-3)},
    }
    choice = RateChoice.from_json(raw)  # the file's other keys unset
    assert moved(choice) == ["a"]
    plan = ladder_plan(study, tmp_path / "out", lambda b: rated_study(study, rates_at(choice, b)))
    rates = {(j.point, j.arm): j.cfg.train.lr for _, _, jobs in plan for j in jobs}
    assert [rates[(f"b{b:g}", "a")] for b in (0.25, 0.5, 1, 2, 4)] == [4e-3, 4e-3, 2e-3, 2e-3, 2e-3]
    assert {rates[(f"b{b:g}", "b")] for b in (0.25, 0.5, 1, 2, 4)} == {8e-3}
    # in a branch ladder the moved arm has a trunk per rate, each named (and run) apart
    from normgrow.study.branches import branched

    wsd = load_study(str(path), ["budgets=[0.25, 0.5, 1, 2, 4]", "ladder=branches", "train.schedule=wsd"])
    nodes = ladder_plan(wsd, tmp_path / "out", lambda b: rated_study(wsd, rates_at(choice, b)))
    _, trunks = branched(nodes, tmp_path / "out")
    names = sorted(t.name for t in trunks)
    assert names == ["trunks/a-lr0.002-s0", "trunks/a-lr0.004-s0", "trunks/b-s0"]
    assert len({t.run_dir for t in trunks}) == 3 and all(t.run_dir.name == t.name.split("/")[1] for t in trunks)
    # a check whose run did not finish (held undetermined) moves nothing
    raw["arms"]["a"]["check"] = {"chosen": None, "held": None}
    choice = RateChoice.from_json(raw)
    assert moved(choice) == [] and rates_at(choice, 4.0).arms["a"].chosen == 4e-3


def test_a_branch_ladders_grow_arm_is_labelled_continued_and_no_paper_claim_reads_it():
    """The grow preset's three equal stages (3, 6, 9 blocks of 131,072 tokens) train 2/3 of their tokens below full
    depth. A branch ladder with smallest budget 0.5 keeps the first two stages at 0.5 × 131,072 each at budget 4 and
    stretches the last to the total 4 × 393,216: 131,072 / 1,572,864 = 1/12 = 8.3 % below full depth. At that budget
    every claim reading a grow arm reads not tested, its share named; joint_gap keeps its verdict. Separate rungs
    scale every stage (2/3 at every budget) and gate nothing; nor does the branch ladder's smallest budget."""
    from test_paper import ROLES, study

    from normgrow.config import load_config
    from normgrow.study.config import ArmConfig, StudyConfig
    from normgrow.study.engine.verdicts import NOT_TESTED, evaluate_claims
    from normgrow.study.jobs import continued, scale_budget
    from normgrow.study.report.ladder import CONTINUED, below_full_depth, continued_arms, shape_gate, shape_lines

    grow, joint = load_config("grow", ["train.schedule=wsd"]), load_config("joint", ["train.schedule=wsd"])
    assert below_full_depth(scale_budget(grow, 4)) == pytest.approx(2 / 3)
    assert below_full_depth(joint) is None
    at4 = continued(grow, 4, 0.5)
    assert below_full_depth(at4) == pytest.approx(131_072 / (4 * 393_216)) == pytest.approx(1 / 12)
    roles = dict(ROLES)
    rung = StudyConfig(
        arms={a: ArmConfig() for a in ("pj", "qj", "pg", "qg")}, claims=roles, budget_scale=4, ladder="branches",
        ladder_base=0.5,
    )  # fmt: skip
    cfgs = {"pj": joint, "qj": joint, "pg": at4, "qg": at4}
    shares = continued_arms(rung, cfgs)
    assert shares == {"pg": pytest.approx(1 / 12), "qg": pytest.approx(1 / 12)}
    claims = {c.key: c for c in shape_gate(evaluate_claims(roles, study(0.0004, -0.0328)), roles, shares)}
    for key in ("grow_gap", "interaction", "grow_vs_joint"):
        assert claims[key].verdict == claims[key].holm == NOT_TESTED, key
        assert "8.3% of tokens below full depth" in claims[key].sentence and CONTINUED in claims[key].sentence
    assert claims["joint_gap"].verdict == "supported"
    assert continued_arms(dataclasses.replace(rung, ladder="rungs", ladder_base=None), cfgs) == {}
    assert continued_arms(dataclasses.replace(rung, budget_scale=0.5), cfgs) == {}
    ladder = StudyConfig(arms=rung.arms, budgets=[0.5, 4], budget_scale=4, ladder="branches")
    small = {"pg": below_full_depth(scale_budget(grow, 0.5)), "pj": None}
    lines = shape_lines(ladder, [(0.5, small), (4, {"pg": 1 / 12, "pj": None})])
    assert f"| pg | 66.7% | 8.3% ({CONTINUED}) |" in lines


def test_the_compute_multiplier_by_hand():
    """Pre-norm's curve 3.0, 2.8, 2.6 at budgets 1, 2, 4 — linear in log2 B, 0.2 per doubling. Post-norm at 2.9 at
    budget 1 is reached by pre-norm half a doubling later: M = 2^0.5 = 1.414. Post-norm at 2.5 at budget 4 lies below
    pre's whole curve: M > 4 / 4 = 1, beyond the ladder. Two seeds with pre's curve shifted by ±0.02 (post's
    unchanged): per seed M = 2^(0.5 ∓ 0.1), geometric mean 2^0.5, its interval exp(t₁ · sd / √2) around it."""
    from normgrow.study.report.multiplier import crossing, multiplier, multiplier_lines

    pre = {0: {1.0: 3.0, 2.0: 2.8, 4.0: 2.6}}
    post = {0: {1.0: 2.9, 2.0: 2.75, 4.0: 2.5}}
    assert crossing(pre[0], 2.9) == pytest.approx(2**0.5)
    assert crossing(pre[0], 2.5) == "above" and crossing(pre[0], 3.1) == "below"
    m = multiplier(pre, post, 1.0)
    assert m.value == pytest.approx(2**0.5) and m.lo is None and "one seed" in m.why
    far = multiplier(pre, post, 4.0)
    assert far.value is None and far.why.startswith("> 1 ")
    pre2 = {s: {b: v + d for b, v in pre[0].items()} for s, d in ((0, -0.02), (1, 0.02))}
    post2 = {0: post[0], 1: post[0]}
    m2 = multiplier(pre2, post2, 1.0)
    logs = [(0.5 - 0.1) * math.log(2), (0.5 + 0.1) * math.log(2)]  # −0.02 shifts the crossing 0.1 doublings earlier
    half = student_t.ppf(0.975, 1) * np.std(logs, ddof=1) / math.sqrt(2)
    assert m2.value == pytest.approx(2**0.5) and m2.n == 2
    assert m2.lo == pytest.approx(math.exp(0.5 * math.log(2) - half))
    assert m2.hi == pytest.approx(math.exp(0.5 * math.log(2) + half))
    lines = multiplier_lines({"joint": (pre2, post2)}, [1.0, 2.0, 4.0])
    assert lines[0] == "## Compute multiplier: the budget pre-norm needs to reach post-norm"
    assert any(line.startswith("| 1 | 1.41 [") for line in lines)
