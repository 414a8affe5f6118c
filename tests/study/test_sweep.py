"""Sweep studies: points, the budget rule, per-point contrasts in the report against our own arithmetic, and
the generated sign sentences."""

import dataclasses

import pytest
from test_runner import T95_DF1, results

from conftest import cli
from normgrow.config import load_config
from normgrow.errors import ConfigError
from normgrow.study.config import load_study
from normgrow.study.engine.stats import Contrast, Estimate
from normgrow.study.jobs import sweep_plan
from normgrow.study.sections import SweepAxis, SweepConfig
from normgrow.study.sweep import points, sign_sentence


def c(mean, half):
    """A contrast with this mean and 95% half-width (over 3 seeds; None: no interval)."""
    return Contrast("a", "b", [], [], Estimate(3, mean, None, half))


def test_points_form_the_grid_with_the_keys_that_move_along():
    s = SweepConfig(
        axes=[
            SweepAxis("model.d_model", [32, 64], {"model.d_ff": [96, 192]}),
            SweepAxis("curriculum.growth", ["append", "interleave"]),
        ]
    )
    got = [(p.label, p.overrides) for p in points(s)]
    assert got == [
        ("d_model@32+growth@append", ("model.d_model=32", "model.d_ff=96", "curriculum.growth=append")),
        ("d_model@32+growth@interleave", ("model.d_model=32", "model.d_ff=96", "curriculum.growth=interleave")),
        ("d_model@64+growth@append", ("model.d_model=64", "model.d_ff=192", "curriculum.growth=append")),
        ("d_model@64+growth@interleave", ("model.d_model=64", "model.d_ff=192", "curriculum.growth=interleave")),
    ]


def test_sign_sentences_say_where_the_sign_is_resolved_and_where_it_changes():
    series = [
        (32, c(-0.20, 0.10)),
        (64, c(-0.05, 0.20)),
        (128, c(0.30, 0.10)),
        (256, c(0.40, None)),
    ]
    assert sign_sentence("grow_gap", "pre-grow", "post-grow", "d_model", series) == (
        "grow_gap (post-grow − pre-grow): negative (post-grow better) at d_model 32; positive (pre-grow better) at "
        "d_model 128; undetermined at 64, 256. The sign changes between d_model 32 and 128 (both intervals exclude 0)."
    )
    flat = [(32, c(-0.2, 0.1)), (64, c(-0.3, 0.1))]
    assert sign_sentence("g", "a", "b", "d_model", flat).endswith("No sign change is resolved along the axis.")
    none = [(32, c(0.1, 0.2))]
    assert "undetermined at every d_model" in sign_sentence("g", "a", "b", "d_model", none)


@pytest.mark.parametrize(
    "sweep,needle",
    [
        ("{axes: [{key: seeds, values: [1]}]}", "sweep.axes.0.key"),
        ("{axes: [{key: model.d_model, values: [32, 32]}]}", "sweep.axes.0.values"),
        ("{axes: [{key: model.d_model, values: [32, 64], also: {model.d_ff: [64]}}]}", "sweep.axes.0.also.model.d_ff"),
        ("{axes: [{key: model.d_model, values: [32]}], budget_rule: flops}", "sweep.budget_rule"),
    ],
)
def test_bad_sweeps_name_their_field(tmp_path, sweep, needle):
    path = tmp_path / "s.yaml"
    path.write_text(f"name: bad\nbase: tiny\narms: {{a: {{}}}}\nsweep: {sweep}\n")
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.")):
        load_study(str(path))


def block_params(d: int, d_ff: int = 64, n_head: int = 4, n_kv: int = 2) -> int:
    """Parameters of one tiny block, by hand: q, o (d × d), k, v (d × n_kv·hd), the SwiGLU MLP, two norms, q/k norms."""
    hd = d // n_head
    return 2 * d * d + 2 * d * n_kv * hd + 3 * d * d_ff + 2 * d + 2 * hd


@pytest.mark.e2e
def test_a_micro_sweep_reports_each_points_contrast_from_its_runs(tiny_cache, tmp_path):
    spec = tmp_path / "sweep.yaml"
    spec.write_text(f"""name: micro-sweep
base: tiny
overrides: [data.cache_dir={tiny_cache}, "curriculum.stages=[{{n_layer: 2, tokens: 2560}}]", model.n_layer=2]
seeds: [0, 1]
arms:
  pre: {{overrides: [model.norm=pre]}}
  post: {{overrides: [model.norm=post]}}
contrasts: {{gap: [pre, post]}}
sweep:
  axes: [{{key: model.d_model, values: [32, 48]}}]
  budget_rule: params
launcher: {{kind: inline}}
""")  # in-process runs: real processes are the micro study's to test
    out = tmp_path / "sweep"
    proc = cli("study", spec, "-o", out, "--no-progress")
    rows = results(out)
    assert sorted((r["point"], r["arm"], r["seed"]) for r in rows) == sorted(
        (p, a, s) for p in ("d_model@32", "d_model@48") for a in ("pre", "post") for s in ("0", "1")
    )
    assert all(r["status"] == "ok" for r in rows)
    # the budget rule: tokens ∝ non-embedding parameters, the first point keeps the study's budget
    tokens = {
        p: load_config(str(out / "points" / p / "configs" / "pre-s0.yaml")).curriculum.stages[0].tokens
        for p in ("d_model@32", "d_model@48")
    }
    assert tokens["d_model@32"] == 2560
    assert tokens["d_model@48"] == round(2560 * block_params(48) / block_params(32))
    report = (out / "report.md").read_text()
    for p in ("d_model@32", "d_model@48"):
        ce = {(r["arm"], r["seed"]): float(r["val_ce"]) for r in rows if r["point"] == p}
        d = [ce[("post", s)] - ce[("pre", s)] for s in ("0", "1")]
        md = sum(d) / 2
        hd = T95_DF1 * abs(d[0] - d[1]) / 2  # sd of two values / √2, times t(1)
        sign = "-" if md + hd < 0 else "+" if md - hd > 0 else "undetermined"
        assert f"| {p} | {md:+.4f} ± {hd:.4f} | 2 | {sign} |" in report
        assert (out / "points" / p / "report.md").is_file()
    assert "gap (post − pre):" in report and "plots/sweep_gap.png" in report
    assert (out / "plots" / "sweep_gap.png").is_file()
    assert "gap (post − pre):" in proc.stdout  # the sentence ends the study's output too
    # the report is rebuilt from disk alone
    (out / "report.md").unlink()
    cli("report", out)
    assert (out / "report.md").read_text() == report


def test_the_width_sweep_keeps_the_capacity_ratio_and_its_report_says_so(tmp_path):
    """cpu-width's teachers move with the width: 1.77–1.78 × the student's non-embedding parameters at every point.
    Hand-counted blocks (4 heads, 2 KV heads, SwiGLU 3 d, RMSNorm gains, q/k norms of head_dim):
    d32: 3·32² + 2·32·16 … = 12,368 per block; d64: 49,312 per block; the 4 × d128 teacher: 196,928 per block."""
    from normgrow.study.sweep import capacity, capacity_lines

    s = dataclasses.replace(load_study("cpu-width"), seeds=[0])
    cfgs = [(sub.name, jobs[0].cfg) for sub, _, jobs in sweep_plan(s, tmp_path / "w")]
    caps = [capacity(c) for _, c in cfgs]
    assert [c["student"] for c in caps][:2] == [9 * 12_368, 9 * 49_312]
    assert caps[1]["teacher"] == 4 * 196_928
    assert all(1.76 < c["ratio"] < 1.79 for c in caps)
    assert "is the same at every point" in "\n".join(capacity_lines(cfgs))
    # one teacher for every width (the sweep before session 9): 7.08 × at d32, 0.44 × at d128 — the report says so
    same = [
        (label, dataclasses.replace(c, teacher=dataclasses.replace(c.teacher, default_preset="teacher-small")))
        for label, c in cfgs
    ]
    text = "\n".join(capacity_lines(same))
    assert "moves from 7.08× to 0.44×" in text and "capacity effect" in text
