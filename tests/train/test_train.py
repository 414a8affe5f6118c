"""The training run: the run directory, kill-and-resume, split invariance, divergence, bad input."""

import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from conftest import assert_same_run, cli, events, kill_and_resume, tiny_cfg
from normgrow.config import load_config
from normgrow.run.pipeline import run
from normgrow.train import checkpoint
from normgrow.train.cadence import lr_at


@pytest.mark.e2e
def test_cli_run_writes_the_run_directory(tiny_cache, tmp_path):
    out = tmp_path / "run"
    proc = cli(
        "run", "tiny", "-o", out, f"data.cache_dir={tiny_cache}", "--no-progress"
    )  # the console script: test_study
    assert "val/ce" in proc.stdout
    for name in ("config.yaml", "metrics.jsonl", "diagnostics.jsonl", "summary.json", "checkpoints"):
        assert (out / name).exists(), name
    for name in ("val_ce", "boundary_rms", "struct_content", "identity"):
        assert (out / "plots" / f"{name}.png").stat().st_size > 10_000, name
    rows = events(out)
    for r in rows:
        for key in ("step", "tokens", "active_layer_tokens", "n_layer", "stage", "event"):
            assert key in r
    evals = [r for r in rows if "val/ce" in r]
    assert evals[0]["event"] == "stage_start" and evals[-1]["event"] == "stage_end"
    assert evals[-1]["val/ce"] < evals[0]["val/ce"]  # distillation makes progress
    for r in evals:  # the logged metrics obey CE = KL + H(p_T)
        assert r["val/ce"] == pytest.approx(r["val/kl"] + r["val/teacher_entropy"], rel=1e-6)
    train = [r for r in rows if r["event"] == "train"]
    assert all(k in train[0] for k in ("train/loss", "lr", "train/grad_norm"))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["val/ce"] == evals[-1]["val/ce"]
    assert "full vocabulary" in summary["ce_source"]
    c = summary["compute"]
    assert c["tokens"] == c["step"] * 8 * 32
    n = (summary["data"]["train_tokens"] - 1) // 32  # no pool: the whole split's sequences, counted by the iterator
    epochs = math.ceil(c["step"] / (n // 8))
    assert summary["data_pool"]["sequences"] == n and summary["data_pool"]["tokens"] == n * 32
    assert summary["data_pool"]["epochs_started"] == epochs and 1 <= summary["data_pool"]["max_repeats"] <= epochs
    assert c["active_layer_tokens"] == c["tokens"] * 3  # one stage at depth 3
    assert summary["teacher"]["trimmed_rows"] == 0 and summary["teacher"]["tokenizer_size"] == 512
    saved = load_config(str(out / "config.yaml"))
    assert saved.model.vocab_size == 512  # resolved from the tokenizer
    assert checkpoint.latest(out / "checkpoints").name == f"step_{c['step']:08d}"
    # where the wall time went: each part of the loop measured, the parts and the rest add up to the whole
    t = summary["time_s"]
    assert {"train", "eval", "diagnostics", "checkpoint", "other"} <= set(t) and t["train"] > 0
    assert all(v >= 0 for v in t.values()) and "growth" not in t  # one stage: no growth event
    assert sum(t.values()) == pytest.approx(summary["wall_time_s"], abs=0.05)
    # --no-plots (what a study's runs use) leaves the figures out
    bare = tmp_path / "bare"
    cli(
        "run",
        "tiny",
        "-o",
        bare,
        f"data.cache_dir={tiny_cache}",
        "--no-progress",
        "--no-plots",
        "curriculum.stages=[{n_layer: 3, tokens: 512}]",
    )
    assert (bare / "summary.json").is_file() and not (bare / "plots").exists()


def test_a_run_on_a_training_pool_serves_a_sequence_as_often_as_planned(tiny_cache, tmp_path):
    """tiny: 20,000 tokens = 78 steps of 8 sequences; a pool of 24 = 3 batches an epoch → ceil(78 / 3) = 26 epochs
    started, and (8 divides 24: no sequence dropped) the first batch of the last epoch served in all 26."""
    over = [f"data.cache_dir={tiny_cache}", "data.train_pool_sequences=24", "--no-progress", "--no-plots"]
    refused = cli("run", "tiny", "-o", tmp_path / "refused", *over, "data.max_pool_repeats=25", check=False)
    line = refused.stderr.strip().splitlines()[-1]
    assert refused.returncode == 2 and "data.max_pool_repeats" in line and "up to 26 times" in line, refused.stderr
    assert not (tmp_path / "refused").exists()
    out = tmp_path / "run"
    cli("run", "tiny", "-o", out, *over, "data.max_pool_repeats=26")  # at the bound: allowed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["compute"]["step"] == 78
    assert summary["data_pool"] == {"sequences": 24, "tokens": 24 * 32, "epochs_started": 26, "max_repeats": 26}
    assert summary["stages"][0]["end"]["val/ce"] < summary["stages"][0]["start"]["val/ce"]


def test_lr_schedule_warmup_cosine_wsd():
    cfg = load_config("tiny", ["train.lr=1.0", "train.min_lr_ratio=0.1", "train.warmup_tokens=2560"])
    per_step = 256
    assert lr_at(0, cfg, 0, 25600) == pytest.approx(0.1)  # first step: 1/10 of warmup done
    assert lr_at(2560 - per_step, cfg, 0, 25600) == pytest.approx(1.0)
    assert lr_at(25600 - per_step, cfg, 0, 25600) == pytest.approx(0.1)  # cosine ends at min
    mid = 2560 + (25600 - 2560) / 2 - per_step
    assert lr_at(int(mid), cfg, 0, 25600) == pytest.approx(0.55, abs=1e-3)
    wsd = load_config(
        "tiny",
        [
            "train.lr=1.0",
            "train.schedule=wsd",
            "train.decay_fraction=0.5",
            "train.warmup_tokens=0",
            "train.min_lr_ratio=0",
        ],
    )
    assert lr_at(10000, wsd, 0, 25600) == 1.0
    assert lr_at(25600 - per_step, wsd, 0, 25600) == pytest.approx(0.0)


@pytest.mark.e2e
def test_killed_run_resumes_to_the_same_result(tiny_cache, tmp_path):
    """SIGKILL a real `normgrow run` after its first checkpoints; rerunning it ends exactly as an uninterrupted run."""
    args = [
        "tiny",
        f"data.cache_dir={tiny_cache}",
        "curriculum.stages=[{n_layer: 3, tokens: 24576}]",
        "train.checkpoint_every_tokens=4096",
        "train.eval_every_tokens=8192",
        "train.threads=1",
        "--no-progress",
        "train.loggers=[tensorboard]",
    ]

    def past_step_32(run_dir):
        ckpts = checkpoint.list_checkpoints(run_dir / "checkpoints")
        return bool(ckpts) and int(ckpts[-1].name.split("_")[1]) >= 32

    def stale_point(run_dir):
        # what a killed attempt may leave in TensorBoard: a point logged after its last checkpoint (flushed before
        # the kill) that the resumed run will log again
        from torch.utils.tensorboard import SummaryWriter

        with SummaryWriter(str(run_dir / "tensorboard")) as w:
            w.add_scalar("train/loss", 99.0, events(run_dir)[-1]["tokens"] + 256)

    full, killed = kill_and_resume(tmp_path, args, past_step_32, after_kill=stale_point)
    assert_same_run(full, killed)  # bitwise: floats compared exactly
    # TensorBoard holds exactly metrics.jsonl, read back by TensorBoard's own reader: nothing the killed attempt
    # logged after its last checkpoint is left twice
    for run_dir in (full, killed):
        expected = {}
        for e in events(run_dir):
            for k, v in e.items():
                if "/" in k and isinstance(v, (int, float)) and not isinstance(v, bool):
                    expected.setdefault(k, []).append((e["tokens"], float(np.float32(v))))
        assert {"train/loss", "val/ce", "val/kl"} <= set(expected)
        assert tensorboard_scalars(run_dir / "tensorboard") == expected


def tensorboard_scalars(logdir) -> dict:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    # no purging of "orphaned" steps: other readers (pandas exports, W&B's TensorBoard sync) do not purge either
    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0}, purge_orphaned_data=False)
    acc.Reload()
    return {tag: [(s.step, s.value) for s in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def run_ranks(nproc, *args) -> str:
    """`normgrow *args` under torchrun with nproc gloo ranks of one thread each; its stdout."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        "-m",
        "normgrow.cli",
        *map(str, args),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def one_step(tiny_cache, out, *extra, nproc=1):
    args = [
        "run",
        "tiny",
        "-o",
        str(out),
        f"data.cache_dir={tiny_cache}",
        "curriculum.stages=[{n_layer: 3, tokens: 256}]",
        "train.log_every_steps=1",
        "--no-progress",
        *extra,
    ]
    if nproc == 1:
        cli(*args)
    else:
        run_ranks(nproc, *args)
    train = events(out, "train")[0]
    weights = load_file(str(checkpoint.latest(out / "checkpoints") / "model.safetensors"))
    return train, events(out, "stage_end")[0], weights


@pytest.mark.e2e
def test_loss_and_gradients_are_split_invariant(tiny_cache, tmp_path):
    """One step of batch 8 = 2 gloo ranks × 2 × 2 accumulation (DDP) = 2 ranks × 4 with the weights sharded
    (FSDP2; its accumulation: test_a_run_resumed_sharded_…): same loss, gradient norm, update, eval — and the same
    curve subset (3 rows: rows 0 and 2 on rank 0, row 1 on rank 1)."""
    subset = "data.curve_tokens=96"
    base = one_step(tiny_cache, tmp_path / "b8", subset)
    ranks = one_step(tiny_cache, tmp_path / "ddp", "train.micro_batch_size=2", subset, nproc=2)
    sharded = one_step(tiny_cache, tmp_path / "fsdp", "train.sharding=fsdp", subset, nproc=2)
    for other in (ranks, sharded):
        for key in ("train/loss", "train/grad_norm"):
            assert other[0][key] == pytest.approx(base[0][key], rel=1e-5), key
        for key in ("val/ce", "val/kl", "val/nll", "curve/ce", "curve/kl", "curve/nll"):
            assert other[1][key] == pytest.approx(base[1][key], rel=1e-5), key
        for name, w in base[2].items():  # 2e-6: AdamW's first step amplifies summation-order noise in tiny gradients
            torch.testing.assert_close(other[2][name], w, atol=2e-6, rtol=1e-4)
    # and the step really moved the weights (the comparison above is not between initial weights)
    init = one_step(tiny_cache, tmp_path / "lr0", "train.lr=1e-12")[2]
    assert not torch.allclose(init["layers.0.mlp.up_proj.weight"], base[2]["layers.0.mlp.up_proj.weight"])


@pytest.mark.e2e
@pytest.mark.parametrize(
    "growth,new_blocks,steps",
    [
        ([], [2], ({6, 2}, {8, 4})),  # the appended block starts fresh: its step count is 2 behind … 4 behind
        pytest.param(  # middle duplication, moments copied: the copies carry their sources' step counts
            [
                "model.n_layer=4",
                "curriculum.growth=middle",
                "curriculum.growth_init=copy",
                "curriculum.optimizer=copy",
                "curriculum.stages=[{n_layer: 2, tokens: 1024}, {n_layer: 4, tokens: 1024}]",
            ],
            [2, 3],
            ({6}, {8}),
            marks=pytest.mark.slow,
            id="middle-copied-moments",
        ),
    ],
)
def test_a_run_resumed_sharded_grows_and_ends_as_in_one_process(tiny_cache, tmp_path, growth, new_blocks, steps):
    """A one-process run's stage-end checkpoint (ordinary full files) resumed under FSDP2 over 2 gloo ranks with
    2 × 2 micro-batches, the teacher's layers sharded too: the growth event then happens sharded (the appended block
    starts fresh, the others keep their AdamW moments and step counts; with curriculum.optimizer=copy a copied block
    takes its source's) and the run ends with the weights, moments and step counts of the uninterrupted one-process
    run, writing the same ordinary checkpoints."""
    args = [
        "run",
        "tiny",
        f"data.cache_dir={tiny_cache}",
        "curriculum.stages=[{n_layer: 2, tokens: 1024}, {n_layer: 3, tokens: 1024}]",
        *growth,
        "train.checkpoint_every_tokens=512",
        "data.val_tokens=160",
        "train.dense_eval_steps=2",
        "train.dense_eval_every=2",
        "--no-progress",
        "--no-plots",
    ]
    # 5 validation rows: 3 and 2 per rank, 2 and 1 micro-batches (each forward gathers weights collectively); the
    # dense evaluation at step 6 is a curve-only pass over all 5 (data.curve_tokens = 0), as many forwards per rank
    one, cut = tmp_path / "one", tmp_path / "cut"
    cli(*args, "-o", one)
    shutil.copytree(one, cut)
    for later in ("step_00000006", "step_00000008"):
        shutil.rmtree(cut / "checkpoints" / later)
    (cut / "summary.json").unlink()
    printed = run_ranks(2, *args, "-o", cut, "train.sharding=fsdp", "teacher.sharding=fsdp", "train.micro_batch_size=2")
    assert "resuming" in printed and printed.count(f"{cut}: val/ce") == 1  # rank 0 alone reports
    assert json.loads((cut / "summary.json").read_text())["teacher"]["sharded"] is True

    for step in ("step_00000006", "step_00000008"):
        a, b = (d / "checkpoints" / step for d in (one, cut))
        wa, wb = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
        assert sorted(wa) == sorted(wb)
        for name, w in wa.items():
            torch.testing.assert_close(wb[name], w, atol=2e-6, rtol=1e-4, msg=name)
        sa, sb = (torch.load(d / "optimizer.pt", weights_only=False)["state"] for d in (a, b))
        assert sorted(sa) == sorted(sb)
        for i, s in sa.items():
            assert s["step"].item() == sb[i]["step"].item(), i
            for k in ("exp_avg", "exp_avg_sq"):
                torch.testing.assert_close(sb[i][k], s[k], atol=1e-7, rtol=1e-3, msg=f"{i}.{k}")
        assert {s["step"].item() for s in sa.values()} == (steps[0] if step.endswith("6") else steps[1])
    end = [e["val/ce"] for e in events(one, "stage_end")]
    assert [e["val/ce"] for e in events(cut, "stage_end")] == pytest.approx(end, rel=1e-5)
    (dense,), (dense_cut,) = events(one, "dense"), events(cut, "dense")
    assert dense["step"] == dense_cut["step"] == 6 and dense_cut["curve/ce"] == pytest.approx(
        dense["curve/ce"], rel=1e-5
    )
    (grew,), (grown,) = events(one, "growth"), events(cut, "growth")
    assert grown["grow/new_blocks"] == grew["grow/new_blocks"] == new_blocks
    assert grown["grow/logit_rms"] == pytest.approx(grew["grow/logit_rms"], rel=1e-5)


@pytest.mark.e2e
def test_distillation_from_a_same_shape_teacher_drives_kl_down(tiny_cache, tmp_path):
    """Student shaped like the tiny teacher (2 blocks, d_model 48): val/kl falls by more than half."""
    cfg = tiny_cfg(
        tiny_cache,
        "model.n_layer=2",
        "model.d_model=48",
        "model.d_ff=96",
        "curriculum.stages=[{n_layer: 2, tokens: 60000}]",
        "train.lr=5e-3",
    )
    summary = run(cfg, tmp_path / "run", log=lambda *_: None, progress=False)
    start, end = summary["stages"][0]["start"]["val/kl"], summary["stages"][0]["end"]["val/kl"]
    assert end < 0.5 * start, (start, end)


def test_non_finite_loss_stops_with_the_step_and_keeps_the_last_checkpoint(tiny_cache, tmp_path):
    out = tmp_path / "nan"
    proc = cli(
        "run",
        "tiny",
        "-o",
        out,
        f"data.cache_dir={tiny_cache}",
        "train.lr=1e4",
        "train.grad_clip=0",
        "train.warmup_tokens=0",
        "train.checkpoint_every_tokens=256",
        "--no-progress",
        check=False,
    )
    assert proc.returncode == 2
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("normgrow: error: non-finite") and "at step" in line
    kept = checkpoint.latest(out / "checkpoints")
    assert kept is not None and kept.name in line
    weights = load_file(str(kept / "model.safetensors"))
    assert all(torch.isfinite(w).all() for w in weights.values())


@pytest.mark.parametrize(
    "overrides,needle",
    [
        (["teacher.path=/no/such/teacher"], "teacher.path"),
        (["model.vocab_size=999"], "model.vocab_size"),
        (["teacher.path=none", "data.tokenizer=teacher"], "data.tokenizer"),
        (["data.train_pool_sequences=1000000"], "data.train_pool_sequences"),  # more than the split holds
    ],
)
def test_bad_input_is_one_line_and_leaves_nothing(tiny_cache, tmp_path, overrides, needle):
    out = tmp_path / "run"
    proc = cli("run", "tiny", "-o", out, f"data.cache_dir={tiny_cache}", *overrides, check=False)
    assert proc.returncode == 2
    err = [line for line in proc.stderr.splitlines() if line.startswith("normgrow:")]
    assert len(err) == 1 and needle in err[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists()


@pytest.mark.e2e
def test_unwritable_output_and_a_different_config_in_the_run_dir(tiny_cache, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = cli("run", "tiny", "-o", blocker / "run", f"data.cache_dir={tiny_cache}", check=False)
    assert proc.returncode == 2 and "--output" in proc.stderr and "is not a directory" in proc.stderr
    out = tmp_path / "run"
    cli("run", "tiny", "-o", out, f"data.cache_dir={tiny_cache}", "--no-progress")
    proc = cli("run", "tiny", "-o", out, f"data.cache_dir={tiny_cache}", "model.norm=post", check=False)
    assert proc.returncode == 2 and "model.norm" in proc.stderr.strip().splitlines()[-1]
    again = cli("run", "tiny", "-o", out, f"data.cache_dir={tiny_cache}")  # same config: already finished
    assert "already finished" in again.stdout + again.stderr


def test_eval_is_exact_full_vocabulary(tiny_cache, tmp_path):
    """val/ce recomputed here from the exported student and the teacher, with plain softmaxes, matches the log."""
    from transformers import AutoModelForCausalLM

    import normgrow.run.export  # noqa: F401  (registers the normgrow model type)
    from normgrow.data import prepare, val_sequences
    from normgrow.run.pipeline import default_teacher_dir

    cfg = tiny_cfg(tiny_cache, "model.norm=post", "data.val_tokens=256")
    summary = run(cfg, tmp_path / "run", log=lambda *_: None, progress=False)
    cli("export", tmp_path / "run", "-o", tmp_path / "hf")
    student = AutoModelForCausalLM.from_pretrained(str(tmp_path / "hf")).eval()
    teacher = AutoModelForCausalLM.from_pretrained(str(default_teacher_dir(cfg))).eval()
    val = val_sequences(prepare(cfg, str(default_teacher_dir(cfg)), log=lambda *_: None), 32, 256)
    x, y = val[:, :-1], val[:, 1:]
    with torch.no_grad():
        ls = student(input_ids=x).logits.double().log_softmax(-1)
        lt = teacher(input_ids=x).logits.double().log_softmax(-1)
    ce = -(lt.exp() * ls).sum(-1).mean().item()
    nll = -ls.gather(-1, y[..., None]).mean().item()
    assert summary["val/ce"] == pytest.approx(ce, rel=1e-5)
    # the final evaluation's ce per validation sequence (what a study resamples), in val's order, their mean val/ce
    per_seq = (-(lt.exp() * ls).sum(-1)).mean(1).tolist()
    assert summary["val/ce_per_sequence"] == pytest.approx(per_seq, rel=1e-5)
    assert sum(summary["val/ce_per_sequence"]) / len(per_seq) == pytest.approx(summary["val/ce"], rel=1e-12)
    assert summary["val/nll"] == pytest.approx(nll, rel=1e-5)
    assert math.isfinite(summary["val/kl"]) and summary["val/kl"] > 0


def test_kept_teacher_log_probs_give_the_same_evaluation_bit_for_bit(tiny_cache):
    """A run keeps the teacher's log-probs on its validation set (and the probe) after the first evaluation:
    later evaluations skip the teacher and give exactly the numbers a fresh teacher pass gives."""
    import dataclasses

    from normgrow.data import val_sequences
    from normgrow.parallel.dist import DistInfo
    from normgrow.run.pipeline import build_inputs
    from normgrow.train.diagnostics import diagnose, make_probe
    from normgrow.train.evaluate import evaluate
    from normgrow.train.loop import build_student
    from normgrow.train.stages import plan_stages

    info = DistInfo(0, 1, 0, torch.device("cpu"))
    inputs = build_inputs(tiny_cfg(tiny_cache), info, log=lambda *_: None)
    cfg, teacher = inputs.cfg, inputs.teacher
    model = build_student(inputs, plan_stages(cfg)[0])
    val = val_sequences(inputs.prep, cfg.data.seq_len, cfg.data.val_tokens)
    calls = []
    real = teacher.chunks
    teacher.chunks = lambda x: calls.append(1) or real(x)  # counts the real teacher's passes
    kept: dict = {}
    assert evaluate(model, teacher, val, cfg, info, kept) == evaluate(model, teacher, val, cfg, info)
    first_calls = len(calls)
    assert kept and first_calls == 2 * len(kept)
    rows = val[:2].clone()
    probe, fresh = (
        make_probe(rows, inputs.prep.token_classes, teacher),
        make_probe(rows, inputs.prep.token_classes, teacher),
    )
    fresh.teacher.keep = False
    diagnose(model, probe, cfg.diagnostics)  # the first diagnosis fills the probe's store
    with torch.no_grad():  # the student moves (as in training); the teacher's part must not be stale
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    assert evaluate(model, teacher, val, cfg, info, kept) == evaluate(model, teacher, val, cfg, info)
    assert len(calls) == first_calls + 2 + len(kept)  # the kept pass skipped the teacher; the fresh one did not
    settings = dataclasses.replace(cfg.diagnostics, include=["skip_ce"])
    assert probe.teacher._kept and not fresh.teacher._kept
    assert diagnose(model, probe, settings) == diagnose(model, fresh, settings)


@pytest.mark.e2e
def test_bfloat16_autocast_trains_with_float32_master_weights(tiny_cache, tmp_path):
    fp32 = run(tiny_cfg(tiny_cache), tmp_path / "fp32", log=lambda *_: None, progress=False)
    bf16 = run(tiny_cfg(tiny_cache, "train.dtype=bfloat16"), tmp_path / "bf16", log=lambda *_: None, progress=False)
    a, b = fp32["final"]["val/ce"], bf16["final"]["val/ce"]
    assert a != b  # the autocast path really ran in bfloat16 …
    assert abs(a - b) < 0.05 and b < bf16["stages"][0]["start"]["val/ce"] - 0.5  # … and trains like float32
    weights = load_file(str(checkpoint.latest(tmp_path / "bf16" / "checkpoints") / "model.safetensors"))
    assert {w.dtype for w in weights.values()} == {torch.float32}


@pytest.mark.e2e
def test_compiled_run_matches_eager_across_growth(tiny_cache, tmp_path, monkeypatch):
    """Compiled blocks (inductor on the CPU), compiled again for the appended block after a growth event, give
    eager's results to rounding. The tests' cache root holds a space, which inductor's C++ build cannot take, so
    the compile cache stays torch's own (test_where_the_compile_cache_goes covers a root without one)."""
    from normgrow.nn.compiling import torch_default_cache_dir

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", torch_default_cache_dir())
    stages = "curriculum.stages=[{n_layer: 2, tokens: 4096}, {n_layer: 3, tokens: 4096}]"
    eager = run(tiny_cfg(tiny_cache, stages), tmp_path / "eager", log=lambda *_: None, progress=False)
    from torch._dynamo.utils import counters

    counters.clear()
    comp = run(
        tiny_cfg(tiny_cache, stages, "train.compile=true"), tmp_path / "comp", log=lambda *_: None, progress=False
    )
    assert [s["n_layer"] for s in comp["stages"]] == [2, 3]
    assert counters["stats"]["unique_graphs"] >= 1, dict(counters["stats"])  # it compiled
    assert " " in str(tiny_cache) and os.environ["TORCHINDUCTOR_CACHE_DIR"] == torch_default_cache_dir()
    assert not (tiny_cache / "compile").exists()
    for se, sc in zip(eager["stages"], comp["stages"], strict=True):
        assert sc["end"]["val/ce"] == pytest.approx(se["end"]["val/ce"], abs=2e-3)
    losses = [
        (e["train/loss"], c["train/loss"])
        for e, c in zip(events(tmp_path / "eager", "train"), events(tmp_path / "comp", "train"), strict=True)
    ]
    assert len(losses) > 3 and all(c == pytest.approx(e, abs=2e-3) for e, c in losses)


def test_where_the_compile_cache_goes(tmp_path, monkeypatch):
    """A cache root where `compile` cannot be a directory (a file in the way: what a read-only or foreign cache
    gives a user who is root too), or whose path holds a space (inductor's g++ command line is built unquoted),
    leaves TORCHINDUCTOR_CACHE_DIR as it was, so torch uses its own location; a writable root gets
    `<root>/compile` — also when the variable holds torch's default, which torch writes there itself once anything
    asks (importing transformers does); a user's own value wins."""
    from normgrow.nn.compiling import CACHE_ENV, torch_default_cache_dir, use_compile_cache

    monkeypatch.delenv(CACHE_ENV, raising=False)  # restored after the test, whatever use_compile_cache sets
    (tmp_path / "blocked").mkdir()
    (tmp_path / "blocked" / "compile").write_text("not a directory")
    assert use_compile_cache(tmp_path / "blocked") is None and CACHE_ENV not in os.environ
    assert use_compile_cache(tmp_path / "a space") is None and CACHE_ENV not in os.environ
    assert not (tmp_path / "a space").exists()
    monkeypatch.setenv(CACHE_ENV, torch_default_cache_dir())
    assert use_compile_cache(tmp_path / "free") == str((tmp_path / "free" / "compile").resolve())
    assert os.environ[CACHE_ENV] == str((tmp_path / "free" / "compile").resolve())
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "mine"))
    assert use_compile_cache(tmp_path / "other") == str(tmp_path / "mine")


@pytest.mark.slow  # two fresh processes that compile (≈ 1 min)
def test_a_corrupted_compile_cache_is_compiled_again_to_the_same_run(tiny_cache, tmp_path):
    """Every file of torch's compile cache cut to half its length: the next compiled run's process discards what
    it cannot load (torch logs a warning), compiles again and trains the same run: the same val/ce to rounding
    (two compilations of a graph agree to rounding, not bitwise: 1.4e-5 nats apart here, docs/LOG.md)."""
    from conftest import cli_process
    from normgrow.nn.compiling import CACHE_ENV

    cache = tmp_path / "cache"
    shutil.copytree(tiny_cache, cache, ignore=shutil.ignore_patterns("compile"))
    env = {k: v for k, v in os.environ.items() if k != CACHE_ENV}  # this process may have set it for tiny_cache
    args = ("run", "tiny", f"data.cache_dir={cache}", "train.compile=true", "--no-plots", "--no-progress")
    cli_process(*args, "-o", tmp_path / "first", env=env)
    files = [f for f in (cache / "compile").rglob("*") if f.is_file()]
    assert files
    for f in files:
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    cli_process(*args, "-o", tmp_path / "again", env=env)
    first, again = (json.loads((tmp_path / d / "summary.json").read_text()) for d in ("first", "again"))
    assert again["final"]["val/ce"] == pytest.approx(first["final"]["val/ce"], abs=1e-4)


@pytest.mark.slow  # 19 s cold (inductor); compiled = eager across growth stays in the default suite
def test_compiled_blocks_share_one_graph_across_depth_and_growth(tiny_cache):
    """Regional compile: the blocks of one placement share one training graph, so appending blocks (a growth
    event) compiles nothing new; a second placement adds exactly one."""
    from torch._dynamo.utils import counters

    from normgrow.nn.compiling import compile_blocks
    from normgrow.nn.model import Student, init_block, make_block

    cfg = tiny_cfg(tiny_cache, "model.n_layer=4", "model.block_norms=[pre, pre, pre, post]").model
    cfg.vocab_size = 64
    model = Student(cfg, depth=2, placements=["pre", "pre"])
    x = torch.randint(0, 64, (2, 16))

    def step():
        model(x, hidden_only=True).square().mean().backward()

    counters.clear()
    assert compile_blocks(model) == 2
    step()
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])
    for i in (2, 3):  # a pre block, then a post block appended
        block = make_block(cfg, i)
        init_block(block, cfg)
        model.layers.append(block)
        assert compile_blocks(model) == 1 and compile_blocks(model) == 0
        step()
        assert counters["stats"]["unique_graphs"] == i - 1, (i, dict(counters["stats"]))


def test_w_and_b_run_ids_are_stable_per_directory_and_distinct_across_studies(tmp_path):
    from normgrow.train.rundir import wandb_run_id

    a = tmp_path / "study1" / "runs" / "post-grow-s0"
    b = tmp_path / "study2" / "runs" / "post-grow-s0"
    assert wandb_run_id(a) == wandb_run_id(tmp_path / "study1" / "runs" / ".." / "runs" / "post-grow-s0")
    assert wandb_run_id(a) != wandb_run_id(b) and wandb_run_id(a).startswith("post-grow-s0-")


def test_a_missing_logger_package_is_a_one_line_error_before_the_run_dir_exists(tiny_cache, tmp_path, monkeypatch):
    from normgrow.train import rundir

    # `make setup` installs the trackers: stand for a machine without wandb by naming a package no machine has
    monkeypatch.setitem(rundir.LOGGER_PACKAGES, "wandb", "wandb_not_installed_here")
    proc = cli(
        "run",
        "tiny",
        "-o",
        tmp_path / "run",
        f"data.cache_dir={tiny_cache}",
        "train.loggers=[wandb]",
        "--no-progress",
        check=False,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .startswith("normgrow: error: train.loggers: 'wandb' needs the wandb_not_installed_here package")
    )
    assert not (tmp_path / "run").exists()


def test_new_block_lr_scales_the_appended_blocks_first_adam_step_alone(tiny_cache, tmp_path):
    """curriculum.new_block_lr = 0.25 on a 1 → 2 → 3-block curriculum: the blocks appended after the first stage
    (layers.1, layers.2) sit in groups of their own with lr_scale 0.25, every other parameter in the two usual groups.
    AdamW's first step moves a parameter without weight decay by lr · g / (|g| + eps), so with all gradients 1 a norm
    gain of an appended block moves by exactly a quarter of a prefix block's. A run with it grows and finishes."""
    from normgrow.nn.model import Student
    from normgrow.train.step import build_optimizer, set_lr

    stages = "curriculum.stages=[{n_layer: 1, tokens: 512}, {n_layer: 2, tokens: 512}, {n_layer: 3, tokens: 512}]"
    cfg = load_config("tiny", ["model.vocab_size=64", stages, "curriculum.new_block_lr=0.25"])
    model = Student(cfg.model)
    opt = build_optimizer(model, cfg, torch.device("cpu"))
    name_of = {p: n for n, p in model.named_parameters()}
    scaled = {name_of[p] for g in opt.param_groups if g.get("lr_scale") == 0.25 for p in g["params"]}
    assert scaled == {n for n, _ in model.named_parameters() if n.startswith(("layers.1.", "layers.2."))}
    assert len(opt.param_groups) == 4
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    set_lr(opt, 1e-2)
    opt.step()
    moved = {n: (before[n] - p.detach()).abs().max().item() for n, p in model.named_parameters()}
    base, new = moved["layers.0.input_layernorm.weight"], moved["layers.2.input_layernorm.weight"]
    assert base == pytest.approx(1e-2 / (1 + 1e-8), rel=1e-5) and new == pytest.approx(base / 4, rel=1e-5)
    plain = build_optimizer(model, load_config("tiny", ["model.vocab_size=64", stages]), torch.device("cpu"))
    assert len(plain.param_groups) == 2  # new_block_lr = 1: the run's groups as before
    summary = run(tiny_cfg(tiny_cache, stages, "curriculum.new_block_lr=4"), tmp_path / "run", log=lambda *_: None,
                  progress=False)  # fmt: skip
    assert summary["n_layer"] == 3 and math.isfinite(summary["val/ce"])
