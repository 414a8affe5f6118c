"""Learning curves: the curve subset (data.curve_tokens) measured at every evaluation, the dense window after
each growth event (train.dense_eval_steps / train.dense_eval_every), a resume inside it, and the after-growth
curves the study figure draws."""

import json

import pytest
import torch

from conftest import assert_same_run, events, kill_and_resume, tiny_cfg
from normgrow.config import load_config
from normgrow.data import val_sequences
from normgrow.errors import ConfigError
from normgrow.parallel.dist import DistInfo
from normgrow.run.pipeline import build_inputs, run
from normgrow.study.report.figures import after_growth_curves
from normgrow.train import checkpoint
from normgrow.train.evaluate import evaluate
from normgrow.train.loop import build_student
from normgrow.train.stages import plan_stages, student_at_stage

CPU = DistInfo(0, 1, 0, torch.device("cpu"))


def curve_part(metrics: dict) -> dict:
    """The curve/… entries of an evaluation, named as val/… (to compare with an evaluation of the subset alone)."""
    return {k.replace("curve/", "val/"): v for k, v in metrics.items() if k.startswith("curve/")}


def val_part(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if k.startswith("val/")}


def without_curve(record: dict) -> dict:
    return {k: v for k, v in record.items() if not k.startswith("curve/")}


@pytest.fixture(scope="module")
def student(tiny_cache):
    """The tiny preset's inputs, its initial student and its 64 validation rows (2,048 tokens / 32)."""
    inputs = build_inputs(tiny_cfg(tiny_cache), CPU, log=lambda *_: None)
    val = val_sequences(inputs.prep, inputs.cfg.data.seq_len, inputs.cfg.data.val_tokens)
    assert val.shape == (64, 33)
    return inputs, build_student(inputs, plan_stages(inputs.cfg)[0]), val


def test_the_curve_subset_is_summed_apart_in_the_full_pass(student):
    """Micro-batches are 8 rows (train.batch_size) = 256 tokens = one loss chunk. A subset of 16 rows is two whole
    micro-batches: its curve/… from the full pass is exactly an evaluation of those rows alone, and the val/… of
    that pass is exactly the evaluation without a subset. A curve-only pass gives the full pass's curve/…."""
    inputs, model, val = student
    cfg, teacher = inputs.cfg, inputs.teacher
    plain = evaluate(model, teacher, val, cfg, CPU)
    both = evaluate(model, teacher, val, cfg, CPU, curve=16)
    assert val_part(both) == plain  # bit for bit
    assert curve_part(both) == evaluate(model, teacher, val[:16], cfg, CPU)
    only = evaluate(model, teacher, val, cfg, CPU, curve=16, full=False)
    assert set(only) == {"curve/ce", "curve/kl", "curve/teacher_entropy", "curve/nll"} and curve_part(
        only
    ) == curve_part(both)
    # 10 rows end inside the second micro-batch (2 of its 8 rows): the full pass's curve/… are those of a curve-only
    # pass exactly (the same micro-batches); against 10 rows evaluated alone (a forward on 2 rows, not 8) to
    # float32 round-off
    straddle = evaluate(model, teacher, val, cfg, CPU, curve=10)
    assert val_part(straddle) == plain
    assert curve_part(evaluate(model, teacher, val, cfg, CPU, curve=10, full=False)) == curve_part(straddle)
    alone = evaluate(model, teacher, val[:10], cfg, CPU)
    assert curve_part(straddle) == pytest.approx(alone, rel=1e-6)
    assert curve_part(straddle) != curve_part(both)  # a different subset, a different number
    # the whole set as the subset (data.curve_tokens = 0): curve/… is val/…
    assert curve_part(evaluate(model, teacher, val, cfg, CPU, curve=64)) == plain


def test_each_rank_takes_its_stride_of_the_curve_subset(student):
    """Ranks hold val's rows by stride (rank, rank + world, …), and the subset likewise: with 5 subset rows over 2
    ranks, rank 0 measures rows 0, 2, 4 and rank 1 rows 1, 3 (no process group here: each returns its own means),
    and their token-weighted mean (96 and 64 tokens) is the subset's mean in one process."""
    inputs, model, val = student
    cfg, teacher = inputs.cfg, inputs.teacher
    ranks = [
        evaluate(model, teacher, val, cfg, DistInfo(r, 2, r, torch.device("cpu")), curve=5, full=False) for r in (0, 1)
    ]
    assert curve_part(ranks[0]) == pytest.approx(evaluate(model, teacher, val[0:5:2], cfg, CPU), rel=1e-6)
    assert curve_part(ranks[1]) == pytest.approx(evaluate(model, teacher, val[1:5:2], cfg, CPU), rel=1e-6)
    whole = evaluate(model, teacher, val[:5], cfg, CPU)
    for key in ("ce", "kl", "nll"):
        assert (96 * ranks[0][f"curve/{key}"] + 64 * ranks[1][f"curve/{key}"]) / 160 == pytest.approx(
            whole[f"val/{key}"], rel=1e-6
        )


# Two stages of 10 and 20 steps (256 tokens a step): an interval evaluation every 1,024 tokens (4 steps), a dense
# window of 8 steps every 2 in the second stage; a subset of 512 tokens (16 rows).
STAGES = "curriculum.stages=[{n_layer: 2, tokens: 2560}, {n_layer: 3, tokens: 5120}]"
CURVES = [
    "train.eval_every_tokens=1024",
    "train.dense_eval_steps=8",
    "train.dense_eval_every=2",
    "data.curve_tokens=512",
]


def test_curve_points_at_every_evaluation_and_a_dense_window_after_growth(tiny_cache, tmp_path):
    """The hand-computed schedule: stage 0 evaluates at steps 0 (start), 4, 8 (interval) and 10 (end); stage 1 at 10
    (start), 12, 14, 16, 18 (dense: stage steps 2, 4, 6, 8; steps 12 and 16 also cross an interval and are logged
    once, as dense), 20, 24, 28 (interval) and 30 (end): 13 curve points. Interval and dense records carry curve/…
    alone; the stage records are those of a run without the subset, bit for bit, and their curve/… is an evaluation
    of the subset's rows alone."""
    quiet = dict(log=lambda *_: None, progress=False)
    cfg = tiny_cfg(tiny_cache, STAGES, *CURVES)
    run(cfg, tmp_path / "curves", **quiet)
    run(tiny_cfg(tiny_cache, STAGES), tmp_path / "plain", **quiet)  # no subset, no window, tiny's interval
    rows = events(tmp_path / "curves")
    points = [(r["step"], r["event"]) for r in rows if "curve/ce" in r]
    assert points == [
        (0, "stage_start"),
        (4, "eval"),
        (8, "eval"),
        (10, "stage_end"),
        (10, "stage_start"),
        (12, "dense"),
        (14, "dense"),
        (16, "dense"),
        (18, "dense"),
        (20, "eval"),
        (24, "eval"),
        (28, "eval"),
        (30, "stage_end"),
    ]
    for r in rows:
        if r["event"] in ("eval", "dense"):
            assert not any(k.startswith("val/") for k in r), r
    diag = [
        (d["step"], d["event"])
        for d in map(json.loads, (tmp_path / "curves" / "diagnostics.jsonl").read_text().splitlines())
    ]
    assert [s for s, e in diag if e == "dense"] == [12, 14, 16, 18]
    plain = events(tmp_path / "plain")
    for kind in ("stage_start", "stage_end", "growth", "pre_growth"):
        a, b = ([without_curve(r) for r in events(tmp_path / d, kind)] for d in ("curves", "plain"))
        assert a == b and a, kind  # the full evaluations' numbers: unchanged, bit for bit
    assert all(
        r["curve/ce"] == r["val/ce"] for r in plain if r["event"] in ("stage_start", "stage_end")
    )  # subset = all
    summary = json.loads((tmp_path / "curves" / "summary.json").read_text())
    assert "curve/ce" not in summary and summary["final"] == val_part(events(tmp_path / "curves", "stage_end")[-1])
    # the stage-end curve/ce is the final student evaluated on the first 16 validation rows alone
    inputs = build_inputs(cfg, CPU, log=lambda *_: None)
    model = student_at_stage(inputs.cfg, 1)
    weights, _, _, _ = checkpoint.load(checkpoint.latest(tmp_path / "curves" / "checkpoints"))
    model.load_state_dict(weights)
    val = val_sequences(inputs.prep, 32, 2048)
    end = events(tmp_path / "curves", "stage_end")[-1]
    assert curve_part(end) == evaluate(model, inputs.teacher, val[:16], inputs.cfg, CPU)


@pytest.mark.e2e
def test_a_run_killed_inside_the_dense_window_resumes_to_the_same_curve(tiny_cache, tmp_path):
    """Stage 1 of 60 steps with a dense window of its first 40 (every 2), checkpoints every 4 steps: the run is
    killed once a checkpoint inside the window exists, resumes from one inside it (its first evaluation then a
    curve-only pass on a fresh teacher view) and writes the same events and diagnostics as an uninterrupted run."""
    args = [
        "tiny",
        f"data.cache_dir={tiny_cache}",
        "curriculum.stages=[{n_layer: 2, tokens: 2560}, {n_layer: 3, tokens: 15360}]",
        "train.checkpoint_every_tokens=1024",
        "train.eval_every_tokens=2048",
        "train.dense_eval_steps=40",
        "train.dense_eval_every=2",
        "data.curve_tokens=320",
        "train.threads=1",
        "--no-progress",
    ]
    resumed_from = []

    def in_window(run_dir):
        ckpts = checkpoint.list_checkpoints(run_dir / "checkpoints")
        return bool(ckpts) and int(ckpts[-1].name.split("_")[1]) >= 16

    def note(run_dir):
        resumed_from.append(int(checkpoint.latest(run_dir / "checkpoints").name.split("_")[1]))

    full, killed = kill_and_resume(tmp_path, args, in_window, after_kill=note)
    assert 10 < resumed_from[0] < 50  # the window is steps 11–50 (stage 1 starts after step 10)
    assert_same_run(full, killed)
    dense = [r for r in events(full) if r["event"] == "dense"]
    assert [r["step"] for r in dense] == list(range(12, 51, 2)) and all("curve/ce" in r for r in dense)
    assert (full / "diagnostics.jsonl").read_text() == (killed / "diagnostics.jsonl").read_text()


def record(step, event, ce, stage=1):
    return {"step": step, "stage": stage, "event": event, "curve/ce": ce}


def test_after_growth_curves_are_differences_from_the_event_over_seeds():
    """Two seeds of one arm, written by hand: each curve minus its value at the stage_start record after growth,
    at the steps both measured (seed 1's extra point at step 13 is left out), mean and min / max over seeds."""
    seed0 = [
        record(0, "stage_start", 7.0, 0),
        record(10, "stage_end", 5.0, 0),
        record(10, "pre_growth", 5.0, 0),
        record(10, "stage_start", 5.0),
        record(12, "dense", 4.75),
        record(14, "eval", 4.5),
        record(20, "stage_end", 4.5),
    ]
    seed1 = [
        record(0, "stage_start", 8.0, 0),
        record(10, "stage_start", 6.0),
        record(12, "dense", 5.5),
        record(13, "dense", 5.25),
        record(14, "eval", 5.5),
        record(20, "stage_end", 5.0),
    ]
    curves = after_growth_curves([seed0, seed1])
    assert list(curves) == [1]  # one growth event: into stage 1
    c = curves[1]
    assert c["key"] == "curve/ce" and c["runs"] == 2 and c["steps"] == [0, 2, 4, 10]
    assert c["mean"] == [0.0, -0.375, -0.5, -0.75]
    assert c["lo"] == [0.0, -0.5, -0.5, -1.0] and c["hi"] == [0.0, -0.25, -0.5, -0.5]
    # a run written before curve/… existed: its val/ce records (stage start and end only here)
    old = [
        {"step": 10, "stage": 1, "event": "stage_start", "val/ce": 6.0},
        {"step": 20, "stage": 1, "event": "stage_end", "val/ce": 5.5},
    ]
    assert after_growth_curves([old])[1] == {
        "key": "val/ce",
        "steps": [0, 10],
        "runs": 1,
        "mean": [0.0, -0.5],
        "lo": [0.0, -0.5],
        "hi": [0.0, -0.5],
    }


@pytest.mark.parametrize(
    "override,needle",
    [
        ("data.curve_tokens=-1", "data.curve_tokens: must be in [0, data.val_tokens=2048]"),
        ("data.curve_tokens=4096", "data.curve_tokens: must be in [0, data.val_tokens=2048]"),
        ("train.dense_eval_steps=-1", "train.dense_eval_steps: must be non-negative"),
        ("train.dense_eval_every=0", "train.dense_eval_every: must be at least 1"),
    ],
)
def test_bad_curve_settings_are_one_line_errors_naming_the_field(override, needle):
    with pytest.raises(ConfigError) as e:
        load_config("tiny", [override])
    assert needle in str(e.value) and "\n" not in str(e.value)
