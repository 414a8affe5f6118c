"""`normgrow report STUDY_DIR` rebuilds results.csv, report.md and the figures from a saved study directory
alone (here one written by hand: no training), with every number traceable to the runs' files."""

import csv
import json
import math

import pytest

from conftest import cli
from normgrow.config import load_config, save_config
from normgrow.study.engine.measures import BoundaryEvent, RunMeasures
from normgrow.study.report.figures import dose_points, dose_response, dose_sentence

T_DF1 = math.tan(0.475 * math.pi)  # two-sided 95% t quantile, 1 degree of freedom (Cauchy)
CE = {("pre", 0): 5.10, ("pre", 1): 5.30, ("post", 0): 4.90, ("post", 1): 5.00}


def write_run(run_dir, arm, seed, ce, norm, dtype="float32", rms=None):
    """A finished tiny run of two stages (1 → 2 blocks) written by hand; `rms`: its boundary stream's RMS at the
    growth event (and at the end of the next stage) in summary.json's boundary record."""
    run_dir.mkdir(parents=True)
    save_config(
        load_config(
            "tiny",
            [f"model.norm={norm}", f"seed={seed}", f"name={arm}", "model.vocab_size=512", f"train.dtype={dtype}"],
        ),
        run_dir / "config.yaml",
    )
    stages = [
        {"index": 0, "n_layer": 1, "steps": 4, "tokens": 1024, "start": {"val/ce": 8.0}, "end": {"val/ce": ce + 0.5}},
        {
            "index": 1,
            "n_layer": 2,
            "steps": 4,
            "tokens": 1024,
            "growth": {
                "grow/from": 1,
                "grow/to": 2,
                "grow/init": "zero",
                "grow/boundaries": [1],
                "grow/logit_max_abs_diff": 0.0,
                "grow/val_ce_jump": 0.0,
            },
            "start": {"val/ce": ce + 0.5},
            "end": {"val/ce": ce},
        },
    ]
    summary = {
        "val/ce": ce,
        "val/kl": ce - 2,
        "val/nll": ce + 1,
        "val/teacher_entropy": 2.0,
        "wall_time_s": 1.0,
        "compute": {
            "step": 8,
            "tokens": 2048,
            "active_layer_tokens": 3072,
            "trainable_layer_tokens": 3072,
            "flops": 1.5e9,
        },
        "stages": stages,
        "train_teacher": "online teacher, full vocabulary",
    }
    if rms is not None:
        summary["boundaries"] = [
            {
                "stage": 1,
                "boundary": 1,
                "rms_at_growth": {"all": rms, "structural": rms},
                "rms_end_of_next_stage": {"all": rms, "structural": rms},
            }
        ]
    (run_dir / "summary.json").write_text(json.dumps(summary))
    events = [
        {
            "step": 0,
            "tokens": 0,
            "active_layer_tokens": 0,
            "n_layer": 1,
            "stage": 0,
            "event": "stage_start",
            "val/ce": 8.0,
        },
        {
            "step": 4,
            "tokens": 1024,
            "active_layer_tokens": 1024,
            "n_layer": 1,
            "stage": 0,
            "event": "stage_end",
            "val/ce": ce + 0.5,
        },
        {
            "step": 4,
            "tokens": 1024,
            "active_layer_tokens": 1024,
            "n_layer": 2,
            "stage": 1,
            "event": "growth",
            "grow/from": 1,
            "grow/to": 2,
            "grow/boundaries": [1],
        },
        {
            "step": 4,
            "tokens": 1024,
            "active_layer_tokens": 1024,
            "n_layer": 2,
            "stage": 1,
            "event": "stage_start",
            "val/ce": ce + 0.5,
            "curve/ce": ce + 0.6,
        },
        {
            "step": 6,
            "tokens": 1536,
            "active_layer_tokens": 2048,
            "n_layer": 2,
            "stage": 1,
            "event": "dense",
            "curve/ce": ce + 0.3,
        },
        {
            "step": 8,
            "tokens": 2048,
            "active_layer_tokens": 3072,
            "n_layer": 2,
            "stage": 1,
            "event": "stage_end",
            "val/ce": ce,
            "curve/ce": ce + 0.1,
        },
    ]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    rms = {c: 1.0 for c in ("all", "structural", "content", "bos", "first", "whitespace", "punct")}
    diag = [
        {
            "step": 8,
            "tokens": 2048,
            "active_layer_tokens": 3072,
            "n_layer": 2,
            "stage": 1,
            "event": "stage_end",
            "residual_rms": [rms, rms, rms],
            "struct_content_ratio": [1.0, 1.0, 1.0],
            "rel_update": [0.5, 0.1],
            "cos": [0.9, 0.99],
            "sink_share": 0.25 if norm == "pre" else 0.75,
            "probe_ce": ce,
            # pre ends collapsed at its last block (worst share 0.9 > 0.5), post does not (worst 0.3)
            "collapse_share": [0.01, 0.3, 0.9] if norm == "pre" else [0.01, 0.2, 0.3],
            "collapse_cos": [0.01, 0.3, 0.92] if norm == "pre" else [0.01, 0.2, 0.3],
        }
    ]
    (run_dir / "diagnostics.jsonl").write_text("".join(json.dumps(d) + "\n" for d in diag))


@pytest.mark.e2e
def test_report_is_rebuilt_from_a_saved_study_directory(tmp_path):
    out = tmp_path / "study"
    out.mkdir()
    (out / "study.yaml").write_text("""name: saved
base: tiny
seeds: [0, 1, 2]
arms:
  pre: {overrides: [model.norm=pre]}
  post: {overrides: [model.norm=post]}
contrasts: {gap: [pre, post]}
phase: [pre, post]
claims: {pre_grow: pre, post_grow: post}
""")
    for (arm, seed), ce in CE.items():
        write_run(out / "runs" / f"{arm}-s{seed}", arm, seed, ce, arm)
    proc = cli("report", out)
    assert f"report: {out / 'report.md'}" in proc.stdout

    with open(out / "results.csv", newline="") as f:
        rows = {(r["arm"], int(r["seed"])): r for r in csv.DictReader(f)}
    assert {k: float(r["val_ce"]) for k, r in rows.items() if r["status"] == "ok"} == CE
    assert rows[("pre", 2)]["status"] == "missing" and rows[("post", 2)]["status"] == "missing"
    assert int(rows[("pre", 0)]["active_layer_tokens"]) == 3072

    report = (out / "report.md").read_text()
    for arm in ("pre", "post"):
        v = [CE[(arm, 0)], CE[(arm, 1)]]
        mean = sum(v) / 2
        half = T_DF1 * abs(v[0] - v[1]) / math.sqrt(2) / math.sqrt(2)  # t(df=1) · sd / √n, sd = |Δ|/√2
        assert f"| {arm} | {arm} | 3 | 0.003 | {mean:.4f} ± {half:.4f} |" in report
    d = [CE[("post", s)] - CE[("pre", s)] for s in (0, 1)]
    assert f"| gap | pre | post | {sum(d) / 2:.4f} ± {T_DF1 * abs(d[0] - d[1]) / 2:.4f} |" in report
    assert "Runs that did not finish" in report and "`pre` seed 2: missing" in report
    # the claims section: grow gap −0.2, −0.1 over two seeds → its interval (t = 12.7) includes 0
    assert "| grow_gap | **undetermined** |" in report and "undetermined at 2 seeds" in report
    assert "| joint_gap | **not tested** |" in report
    # growth preserved the function in both runs: no repeated after-growth rows, and the report says why
    assert "after growth" not in report.split("## Phase-wise")[1].split("##")[0].split("|---|")[1]
    assert "preserved the function" in report
    assert "| sink_share | 0.2500 | 0.7500 |" in report  # the diagnostics table, read from diagnostics.jsonl
    # collapse: the table, the warning for `pre` only, and the caution above the claims naming it
    assert "| pre | 0.900 | 0.920 |" in report and "| post | 0.300 | 0.300 |" in report
    assert "**Warning: `pre` is collapsed**" in report and "`post` is collapsed" not in report
    claims = report.split("## The paper's claims")[1].split("\n## ")[0]
    assert "**Caution: 1 arm(s) end collapsed** (`pre`;" in claims
    for fig in ("val_ce_vs_compute", "phase_gap", "after_growth", "boundary_rms", "identity"):
        assert (out / "plots" / f"{fig}.png").stat().st_size > 5_000, fig
        assert f"plots/{fig}.png" in report
    assert "after_growth: per growth event, curve/ce minus its value at the event" in report
    assert "Computed in float32/float32 (student/teacher" in report and "different compute dtypes" not in report
    again = (out / "report.md").read_text()
    cli("report", out)
    assert (out / "report.md").read_text() == again  # deterministic
    # one run recomputed on a machine where `auto` chose bfloat16: the report says the study mixes precisions
    run = out / "runs" / "post-s1"
    save_config(
        load_config("tiny", ["model.norm=post", "seed=1", "name=post", "model.vocab_size=512", "train.dtype=bfloat16"]),
        run / "config.yaml",
    )
    cli("report", out)
    assert (
        "**Caution: the runs used different compute dtypes** (bfloat16/float32, float32/float32"
        in (out / "report.md").read_text()
    )


# ----------------------------------------------------------------------------- the dose–response figure


def dose_run(ce, *rms):
    """A grow run's measures: final val/ce and its boundary stream's RMS at each growth event (stages 1, 2, …)."""
    return RunMeasures(
        val_ce=ce,
        events=[BoundaryEvent(k + 1, 3 * (k + 1), 3 * k + 2, None, None, rms_at=r) for k, r in enumerate(rms)],
    )


def test_dose_response_points_sentence_and_figure_against_scipy(tmp_path):
    from scipy.stats import linregress, spearmanr
    from scipy.stats import t as student_t

    claims = dict(pre_grow="pg", post_grow="qg", pre_grow_renorm="pgr")
    budgets, expected = [], []
    for b, shift in ((0.5, 0.02), (1.0, 0.0)):
        m = {"pg": {}, "pgr": {}, "qg": {}}
        for s in range(3):
            m["qg"][s] = dose_run(5.0 + 0.01 * s, 1.0, 2.0)
            # pg's boundary is (3 + s)× post's at event 1 and 3× at event 2: x = (log(3 + s) + log 3) / 2
            m["pg"][s] = dose_run(5.04 + 0.01 * s + shift + 0.003 * s * s, 3.0 + s, 6.0)
            # pgr's is post's at event 1 and (1 + s/10)× at event 2: x = log(1 + s/10) / 2
            m["pgr"][s] = dose_run(5.005 + 0.01 * s + shift / 4 - 0.002 * s, 1.0, 2.0 * (1 + s / 10))
            expected += [
                ("pg", s, b, (math.log(3 + s) + math.log(3)) / 2, 0.04 + shift + 0.003 * s * s),
                ("pgr", s, b, math.log(1 + s / 10) / 2, 0.005 + shift / 4 - 0.002 * s),
            ]
        budgets.append((b, m))
    points = dose_points(claims, budgets)
    assert sorted((p.arm, p.seed, p.budget) for p in points) == sorted((a, s, b) for a, s, b, _, _ in expected)
    got = {(p.arm, p.seed, p.budget): (p.x, p.y) for p in points}
    for a, s, b, x, y in expected:
        assert got[(a, s, b)] == pytest.approx((x, y), abs=1e-12), (a, s, b)

    xs, ys = [got[(a, s, b)][0] for a, s, b, _, _ in expected], [got[(a, s, b)][1] for a, s, b, _, _ in expected]
    fit, rho = linregress(xs, ys), spearmanr(xs, ys)[0]
    half = student_t.ppf(0.975, 10) * fit.stderr
    sentence = dose_sentence(points, "qg")
    assert sentence.startswith("Dose–response over n = 12 points (pg, pgr against qg; 3 seeds × 2 budgets)")
    assert (
        f"OLS slope {fit.slope:+.4f} nats/token per unit log ratio, 95% interval [{fit.slope - half:+.4f}, "
        f"{fit.slope + half:+.4f}] (t with 10 df); Spearman's rank correlation {rho:+.2f}."
    ) in sentence
    assert (
        "The points are not independent (those of one seed at different budgets share the seed and a seed's "
        "arms share its qg run)"
    ) in sentence
    one = dose_sentence([p for p in points if p.budget == 1.0 and p.arm == "pg"], "qg")
    assert "3 seeds × 1 budget" in one and "(t with 1 df)" in one and "not independent" not in one
    assert "too few points" in dose_sentence(points[:2], "qg")

    path, text = dose_response(claims, budgets, tmp_path / "plots")
    assert path == tmp_path / "plots" / "dose_response.png" and text == sentence
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5_000
    # a study that names no renormalized arm draws none
    assert dose_response(dict(pre_grow="pg", post_grow="qg"), budgets, tmp_path / "none") is None
    assert not (tmp_path / "none").exists()


def test_a_ladder_and_each_budget_report_the_dose_response(tmp_path):
    """A budget ladder written by hand (two budgets × three grow arms × two seeds): `normgrow report` draws the
    figure over every budget in the ladder's report and over its own points in each budget's."""
    from scipy.stats import linregress

    out = tmp_path / "ladder"
    out.mkdir()
    (out / "study.yaml").write_text("""name: dose
base: tiny
seeds: [0, 1]
budgets: [0.5, 1]
arms:
  pre: {overrides: [model.norm=pre]}
  renorm: {overrides: [model.norm=pre]}
  post: {overrides: [model.norm=post]}
contrasts: {gap: [post, pre]}
claims: {pre_grow: pre, post_grow: post, pre_grow_renorm: renorm}
""")
    ce = {"pre": 5.10, "renorm": 5.03, "post": 5.00}
    rms = {"pre": 4.0, "renorm": 1.5, "post": 1.0}
    points = {}
    for label, b in (("b0.5", 0), ("b1", 1)):
        for arm in ce:
            for seed in (0, 1):
                c, r = ce[arm] + 0.01 * seed - 0.02 * b * (arm != "post"), rms[arm] * (1 + 0.1 * seed + 0.2 * b)
                write_run(
                    out / "budgets" / label / "runs" / f"{arm}-s{seed}",
                    arm,
                    seed,
                    c,
                    "post" if arm == "post" else "pre",
                    rms=r,
                )
                points[(label, arm, seed)] = (r, c)
    cli("report", out)

    def xy(labels):
        keys = [(lab, arm, s) for lab in labels for arm in ("pre", "renorm") for s in (0, 1)]
        return (
            [math.log(points[k][0] / points[(k[0], "post", k[2])][0]) for k in keys],
            [points[k][1] - points[(k[0], "post", k[2])][1] for k in keys],
        )

    for where, labels in ((out, ("b0.5", "b1")), (out / "budgets" / "b1", ("b1",))):
        report = (where / "report.md").read_text()
        section = report.split("## Dose–response: boundary scale at growth against the grow gap")[1].split("\n## ")[0]
        slope = linregress(*xy(labels)).slope
        assert (
            f"over n = {4 * len(labels)} points (pre, renorm against post; 2 seeds × {len(labels)} budget{'s' if len(labels) > 1 else ''})"
            in section
        )
        assert f"OLS slope {slope:+.4f} nats/token per unit log ratio" in section
        assert "![dose_response](plots/dose_response.png)" in section
        assert "Descriptive: the boundary-scale ratio on the x axis is measured, not set" in section
        assert (where / "plots" / "dose_response.png").stat().st_size > 5_000


@pytest.mark.e2e
def test_a_two_budget_ladder_reports_the_interaction_and_the_compute_multiplier_per_budget(tmp_path):
    """A two-budget ladder written by hand (four core arms × two seeds): `normgrow report` prints, per budget, the
    interaction (post-grow − pre-grow) − (post-joint − pre-joint) and each curriculum's compute multiplier, both read
    back from report.md and checked by hand. val/ce: pre-joint 5.10 / 5.00 at budgets 1 / 2, post-joint 0.02 lower at
    both; pre-grow 5.20 / 5.10, post-grow 0.06 lower; seed 1 adds 0.01 to every arm. Interaction −0.04 at both
    budgets. Multiplier at budget 1, linear in log2 B: joint 2^(0.02 / 0.10) = 1.149, grow 2^(0.06 / 0.10) = 1.516;
    at budget 2 post is below pre's whole curve: beyond the ladder (> 1)."""
    out = tmp_path / "ladder"
    out.mkdir()
    (out / "study.yaml").write_text("""name: mult
base: tiny
seeds: [0, 1]
budgets: [1, 2]
arms: {pj: {}, qj: {}, pg: {}, qg: {}}
contrasts: {joint_gap: [pj, qj], grow_gap: [pg, qg]}
claims: {pre_joint: pj, post_joint: qj, pre_grow: pg, post_grow: qg}
""")
    base = {"pj": 5.10, "qj": 5.08, "pg": 5.20, "qg": 5.14}
    for label, drop in (("b1", 0.0), ("b2", 0.10)):
        for arm, ce in base.items():
            for seed in (0, 1):
                norm = "post" if arm.startswith("q") else "pre"
                write_run(out / "budgets" / label / "runs" / f"{arm}-s{seed}", arm, seed, ce - drop + 0.01 * seed, norm)
    cli("report", out)
    report = (out / "report.md").read_text()
    inter = report.split("## The interaction at every budget")[1].split("\n## ")[0]
    for b in ("1", "2"):
        row = next(line for line in inter.splitlines() if line.startswith(f"| {b} |"))
        assert "-0.0400" in row, row
    mult = report.split("## Compute multiplier: the budget pre-norm needs to reach post-norm")[1].split("\n## ")[0]
    row1 = next(line for line in mult.splitlines() if line.startswith("| 1 |"))
    assert f"{2**0.2:.3g} [" in row1 and f"{2**0.6:.3g} [" in row1, row1
    row2 = next(line for line in mult.splitlines() if line.startswith("| 2 |"))
    assert row2.count("> 1 (pre-norm does not reach post-norm's val/ce within the ladder)") == 2, row2
    # item 7: both reports open with the four core arms' figure and at most six generated lines, the interaction first
    for where in (out, out / "budgets" / "b1"):
        lines = (where / "report.md").read_text().splitlines()
        assert lines[2] == "![overview](plots/overview.png)", lines[:4]
        assert (where / "plots" / "overview.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        said = lines[4 : lines.index("", 4)]
        assert 1 <= len(said) <= 6 and all(line.startswith("- ") for line in said), said
        assert said[0].startswith("- **Interaction** (post-grow − pre-grow) − (post-joint − pre-joint), val/ce:")
        assert "-0.0400" in said[0]


def test_a_budget_axis_labels_each_budget_as_written():
    """Publishable ticks on the ladder figures' log axis: one per budget, labelled "0.5", "1", "2", "4" (matplotlib's
    own log axis labels 2 and 4 as 2×10⁰ and 4×10⁰ and adds unlabelled minor ticks)."""
    from normgrow.run.plots import budget_axis, pyplot

    plt = pyplot()
    fig, ax = plt.subplots()
    ax.plot([0.5, 1, 2, 4], [4.0, 3.5, 3.0, 2.8])
    budget_axis(ax, [4, 1, 0.5, 2, 2])
    fig.canvas.draw()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0.5", "1", "2", "4"]
    assert list(ax.get_xticks()) == [0.5, 1, 2, 4] and len(ax.get_xticks(minor=True)) == 0
    assert ax.get_xscale() == "log" and ax.get_xlabel() == "budget scale"
    plt.close(fig)
