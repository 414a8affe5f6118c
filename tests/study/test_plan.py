"""`normgrow plan`: memory terms and device-hours against arithmetic done here by hand."""

import dataclasses
import json
import math
import re
from pathlib import Path

import pytest

import normgrow
from conftest import cli
from normgrow.config import load_config
from normgrow.machine.costs import job_memory
from normgrow.study.plan import fit_micro_batch, job_plan


def tiny_block(d=32, d_ff=64, n_head=4, n_kv=2) -> int:
    hd = d // n_head
    return 2 * d * d + 2 * d * n_kv * hd + 3 * d * d_ff + 2 * d + 2 * hd


def test_memory_terms_of_a_tiny_run_by_hand():
    cfg = load_config("tiny", ["model.vocab_size=512"])
    n = 512 * 32 * 2 + 32 + 3 * tiny_block()  # embedding, head, final norm, three blocks
    mem = job_memory(cfg, world=1)
    assert mem["student weights (fp32)"] == 4 * n and mem["gradients (fp32)"] == 4 * n
    assert mem["AdamW moments (fp32)"] == 8 * n
    per_token_block = 4 * 32 + 3 * 4 * 8 + 2 * 2 * 8 + 4 * 64  # norms, q, k, v, attention out, MLP
    tokens = 8 * 32  # micro-batch 8 sequences of 32 (float32: 4 bytes)
    assert mem["activations (8 × 32 tokens)"] == tokens * 3 * per_token_block * 4
    ckpt = job_memory(dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, activation_checkpointing=True)), 1)
    assert ckpt["activations (8 × 32 tokens)"] == tokens * (3 * 32 + per_token_block) * 4
    sharded = job_memory(cfg, world=4, fsdp=True)
    assert sharded["AdamW moments (fp32)"] == 8 * n / 4
    both = job_memory(
        load_config("tiny", ["model.vocab_size=512", "train.sharding=fsdp", "teacher.sharding=fsdp"]), world=4
    )
    assert both["AdamW moments (fp32)"] == 8 * n / 4  # the config's sharding counts as --fsdp does
    assert mem["teacher weights"] > 0 and both["teacher weights"] == mem["teacher weights"] / 4
    assert mem["loss chunk"] == 6 * 256 * 512 * 4  # chunk_tokens 256 ≤ the micro-batch's 256 tokens


def test_the_micro_batch_that_fits_a_device_and_its_accumulation_steps(tmp_path):
    cfg = load_config("tiny", ["model.vocab_size=512", "train.batch_size=16"])

    def total(micro):
        return sum(
            job_memory(
                dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, micro_batch_size=micro)), 1
            ).values()
        )

    assert total(8) > total(4) > total(2)  # activations grow with the micro-batch
    assert fit_micro_batch(cfg, 1, False, total(4)) == 4  # exactly enough for 4 sequences, not for 8
    assert fit_micro_batch(cfg, 1, False, total(4) - 1) == 2
    assert fit_micro_batch(cfg, 1, False, total(1) - 1) is None
    assert fit_micro_batch(cfg, 2, False, 1e15) == 8  # two ranks hold 8 sequences each
    tiny_yaml = Path(normgrow.__file__).parent.parent / "configs" / "tiny.yaml"
    out = cli(
        "plan",
        "--no-measure",
        tiny_yaml,
        "model.vocab_size=512",
        "train.tokens_per_step=512",
        "--device-memory",
        str(total(4) / 2**30),
    ).stdout
    assert "4 sequence(s) of 32 tokens per rank" in out and "4 accumulation step(s)" in out
    assert "train.micro_batch_size=4" in out


def test_device_hours_from_measured_throughput():
    cfg = load_config("tiny", ["model.vocab_size=512"])
    plan = job_plan("tiny", cfg, world=1)
    assert plan.tokens == 78 * 8 * 32  # 20,000 tokens in whole steps of 8 × 32
    tiny_yaml = Path(normgrow.__file__).parent.parent / "configs" / "tiny.yaml"  # a run preset (`tiny` names a study)
    out = cli("plan", "--no-measure", tiny_yaml, "model.vocab_size=512", "--tokens-per-hour", str(78 * 8 * 32)).stdout
    assert "1 run(s), 19,968 training tokens" in out
    assert "device-hours, teacher online in every run: 1.0" in out
    # from the cache, the step's teacher share is spent once (one run: the same tokens), so the total is the same
    assert "then the students alone): 1.0" in out
    # an absurd rate gives a readable number (before: 306 digits): 19,968 tokens at 1e-300 and 1e-9 per hour
    out = cli("plan", "--no-measure", tiny_yaml, "model.vocab_size=512", "--tokens-per-hour", "1e-300").stdout
    assert "throughput: 1e-300 tokens per device-hour" in out and "in every run: 2e+304\n" in out
    out = cli("plan", "--no-measure", tiny_yaml, "model.vocab_size=512", "--tokens-per-hour", "1e-9").stdout
    assert "in every run: 2e+13\n" in out


@pytest.mark.e2e
def test_plan_of_the_coord_study_prints_each_budgets_tokens_per_parameter_and_not_the_pilots():
    """coord's student by hand: nine blocks of d_model 32 — q, o 32 × 32, k, v 32 × 16 (4 heads of 8, 2 KV heads),
    q/k norms of 8, SwiGLU 3 × 32 × 96, two norms of 32 — 111,312 parameters; a joint run trains 393,216 tokens at
    budget 1. The pilot's runs, at other budgets, are not listed."""
    student = 9 * (2 * 32 * 32 + 2 * 32 * 16 + 2 * 8 + 3 * 32 * 96 + 2 * 32)
    assert student == 111_312
    out = cli("plan", "coord", "--no-measure").stdout
    lines = out.split("training tokens per non-embedding parameter")[1].split("\ndevice-hours")[0].splitlines()[1:]
    expect = [(4, "b4"), (2, "b2"), (1, "b1")]
    assert lines == [
        f"  {b * 393_216 / student:.2f}: "
        + ", ".join(f"{lab}/{a}" for a in ("pre-joint", "post-joint", "pre-grow", "post-grow"))
        for b, lab in expect
    ]
    assert lines[1].startswith("  7.07: ")  # the paper's coordinate at budget 2
    # the runs by hand: the pilot 4 arms × 3 rates, 3 budgets × 4 arms × 8 seeds, and the envelope's r/2 and 2r of the
    # 4 arms on its 2 seeds at each of the 3 budgets (its r is the seed's own run)
    assert f"plan of study coord: {4 * 3 + 3 * 4 * 8 + 3 * 4 * 2 * 2} runs" in out and "confirm" not in out


def test_plan_of_a_pool_sizes_its_cache_and_refuses_too_many_repeats():
    """tiny over a pool of 24 sequences of 32: the cache covers 768 tokens; at k = V = 512 in float32 a token is
    4 × 512 = 2,048 bytes; 78 steps of 8 over 3 batches an epoch start ceil(78 / 3) = 26 epochs."""
    tiny_yaml = Path(normgrow.__file__).parent.parent / "configs" / "tiny.yaml"
    pool = ["model.vocab_size=512", "data.train_pool_sequences=24", "teacher.cache=true"]
    out = cli("plan", "--no-measure", tiny_yaml, *pool, "teacher.cache_k=512", "teacher.cache_dtype=float32").stdout
    assert "one teacher pass over 768 tokens" in out
    assert "full (k = V = 512) (this config): 0.0 GiB (2048 bytes per token)" in out
    top = cli("plan", "--no-measure", tiny_yaml, *pool).stdout  # top-64, float16, uint16 ids: 64·2 + 64·2 + 2 bytes
    assert "top-64 + tail (this config): 0.0 GiB (258 bytes per token)" in top
    assert "sampled (n = 12): 0.0 GiB (26 bytes per token)" in top  # 12 uint16 ids and a float16 entropy
    cli("plan", "--no-measure", tiny_yaml, *pool, "data.max_pool_repeats=26")  # at the bound
    refused = cli("plan", "--no-measure", tiny_yaml, *pool, "data.max_pool_repeats=25", check=False)
    line = refused.stderr.strip().splitlines()[-1]
    assert refused.returncode == 2 and "data.max_pool_repeats" in line and "up to 26 times" in line


@pytest.mark.e2e
def test_plan_of_the_paper_study_offline():
    """The paper preset names a hub teacher that is unreachable here: its shape is known, so the plan runs."""
    out = cli("plan", "paper").stdout
    # Qwen3-8B by hand: embedding and head 151,936 × 4,096 each, 36 blocks of attention (q, o 4,096²; k, v
    # 4,096 × 1,024) + SwiGLU 3 × 4,096 × 12,288 + norms, final norm; bf16 weights
    block = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 12288 + 2 * 4096 + 2 * 128
    params = 2 * 151936 * 4096 + 36 * block + 4096
    assert re.search(rf"teacher weights\s+{params * 2 / 2**30:.2f} GiB", out), out
    assert (
        "64 run(s)" in out and "8 data-parallel rank(s)" in out
    )  # 36 + the pilot's 12 + the brackets' r/2, 2r: 4 × 2 × 2
    assert re.search(r"device-hours, teacher online in every run: [\d,.]+", out)
    assert re.search(r"device-hours with the teacher cache .*: [\d,.]+", out)
    # both kinds by hand, vocabulary 151,936 > 65,536 (uint32 ids), float16 values: top-64 2·64 + 4·64 + 2 = 386
    # bytes a token, sampled n = 12: 4·12 + 2 = 50, over the tokens of the teacher's one pass
    cached = int(re.search(r"one teacher pass over ([\d,]+) tokens", out).group(1).replace(",", ""))
    for what, per in ((r"top-64 \+ tail \(this config\)", 386), (r"sampled \(n = 12\)", 50)):
        assert re.search(rf"teacher cache on disk, {what}: {per * cached / 2**30:,.1f} GiB \({per} bytes", out), out
    sampled = cli("plan", "paper", "teacher.cache_kind=sampled", "teacher.cache_samples=32").stdout
    assert "teacher cache on disk, sampled (n = 32) (this config)" in sampled and "(130 bytes per token)" in sampled
    assert "wall time: not measured (jobs of several ranks" in out  # nothing timed for a cluster's jobs here
    # tokens per non-embedding parameter by hand: the student's nine blocks of q, o 1,024 × 2,048, k, v 1,024 × 1,024,
    # SwiGLU 3 × 1,024 × 3,072, two norms of 1,024 and q/k norms of 128; a joint run trains 1,000,341,504 tokens
    student = 9 * (2 * 1024 * 2048 + 2 * 1024 * 1024 + 3 * 1024 * 3072 + 2 * 1024 + 2 * 128)
    assert student == 141_578_496
    assert f"  {1_000_341_504 / student:.2f}: pre-joint, post-joint, pre-grow, post-grow," in out  # 7.07
    assert "(the paper's setting: 7.07)" in out


@pytest.mark.e2e
def test_plan_with_a_pilot_says_what_the_seeds_resolve(tmp_path):
    """A pilot study directory written by hand: two arms, three seeds, differences 0.01, 0.03, 0.05 (mean 0.03,
    sd 0.02). The default study plans 3 seeds at δ = 0.01: half-width t(2, 0.975)·0.02/√3 = 4.302653·0.011547."""
    from normgrow.study.record import FIELDS, write_results

    pilot = tmp_path / "pilot"
    pilot.mkdir()
    (pilot / "study.yaml").write_text(
        "name: pilot\nbase: tiny\nseeds: [0, 1, 2]\narms:\n  pre-joint: {}\n  post-joint: {}\n"
        "contrasts:\n  joint_gap: [pre-joint, post-joint]\n"
    )
    rows = [
        dict.fromkeys(FIELDS, "") | {"arm": arm, "seed": s, "status": "ok", "val_ce": 5.0 + (0.01 + 0.02 * s) * k}
        for s in range(3)
        for arm, k in (("pre-joint", 0), ("post-joint", 1))
    ]
    write_results(rows, pilot / "results.csv")
    out = cli("plan", "default", "--no-measure", "--pilot", pilot).stdout
    line = next(x for x in out.splitlines() if x.startswith("| joint_gap"))
    assert "+0.0300 (3)" in line and "| 0.0200 [" in line
    assert f"| {4.302653 * 0.02 / 3**0.5:.4f} |" in line
    # the pilot has no grow arms: said so (before: "— (0) unknown: fewer than two paired seeds")
    assert "| grow_gap | — | not in the pilot: no arm pre-grow, post-grow |" in out
    # seeds for δ = 0.01 at sd 0.02 (effect size 0.5): 34 by the noncentral t (the textbook table's 34)
    assert "| 34 (" in line
    bad = cli("plan", "default", "--pilot", tmp_path, check=False)
    assert bad.returncode == 2 and "--pilot" in bad.stderr and "not a finished study directory" in bad.stderr
    (pilot / "study.yaml").write_text((pilot / "study.yaml").read_text().replace("joint", "shallow"))
    write_results([r | {"arm": r["arm"].replace("joint", "shallow")} for r in rows], pilot / "results.csv")
    bad = cli("plan", "default", "--no-measure", "--pilot", pilot, check=False)  # a pilot of none of its contrasts
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
    assert "has none of this study's contrasts (its arms: post-shallow, pre-shallow;" in bad.stderr


@pytest.mark.e2e
def test_plan_with_a_pilot_prices_the_interaction(tmp_path):
    """The registered estimand has its own row: four arms, three seeds; joint gap 0.01 + 0.02·s and grow gap
    −0.03 + 0.04·s by hand, so the interaction (grow gap − joint gap) per seed is −0.04, −0.02, 0.00: mean −0.02,
    sd 0.02, and at the default study's 3 seeds the half-width 4.302653·0.02/√3."""
    from normgrow.study.record import FIELDS, write_results

    pilot = tmp_path / "pilot"
    pilot.mkdir()
    arms = {"pre-joint": 0.0, "post-joint": 0.01, "pre-grow": 0.0, "post-grow": -0.03}
    slope = {"pre-joint": 0.0, "post-joint": 0.02, "pre-grow": 0.0, "post-grow": 0.04}
    (pilot / "study.yaml").write_text(
        "name: pilot\nbase: tiny\nseeds: [0, 1, 2]\narms:\n" + "".join(f"  {a}: {{}}\n" for a in arms)
    )
    rows = [
        dict.fromkeys(FIELDS, "") | {"arm": a, "seed": s, "status": "ok", "val_ce": 5.0 + arms[a] + slope[a] * s}
        for s in range(3)
        for a in arms
    ]
    write_results(rows, pilot / "results.csv")
    out = cli("plan", "default", "--no-measure", "--pilot", pilot).stdout
    line = next(x for x in out.splitlines() if x.startswith("| interaction (grow gap − joint gap)"))
    assert "| -0.0200 (3) |" in line and "| 0.0200 [" in line, line
    assert f"| {4.302653 * 0.02 / 3**0.5:.4f} |" in line and "| 34 (" in line, line


# ----------------------------------------------------------------------------- wall time from measured speed


def test_the_local_launchers_schedule_by_hand():
    from normgrow.machine.speed import schedule

    assert schedule([3, 1, 1, 1], 2) == 3  # one slot takes the 3, the other the three 1s
    assert schedule([2, 2, 2], 2) == 4 and schedule([2, 2, 2], 1) == 6 and schedule([5], 4) == 5
    assert schedule([1, 1, 4], 2) == 5  # in order: the 4 starts when the first slot frees, at 1


def test_the_evaluation_schedule_is_the_one_a_run_logs(tiny_cache, tmp_path):
    """What plan counts per stage (full evaluations, curve evaluations, diagnoses, the selection set) against the
    events a real growth run writes, with a dense window, interval evaluations and interval diagnoses."""
    from conftest import events, tiny_cfg
    from normgrow.run.pipeline import run
    from normgrow.train.cadence import evaluation_counts
    from normgrow.train.stages import plan_stages

    cfg = tiny_cfg(
        tiny_cache,
        "curriculum.stages=[{n_layer: 2, tokens: 2048}, {n_layer: 3, tokens: 2560}]",
        "train.eval_every_tokens=768",
        "train.dense_eval_steps=4",
        "train.dense_eval_every=2",
        "diagnostics.every_tokens=1024",
        "data.select_tokens=256",
        "data.curve_tokens=512",
    )
    run(cfg, tmp_path / "r", log=lambda *_: None, progress=False)
    plans = plan_stages(cfg)
    counted = evaluation_counts(cfg, plans)
    diags = [json.loads(line) for line in (tmp_path / "r" / "diagnostics.jsonl").read_text().splitlines()]
    for plan, n in zip(plans, counted, strict=True):
        logged = [e for e in events(tmp_path / "r") if e.get("stage") == plan.index]
        kinds = [e["event"] for e in logged]
        assert n["full"] == kinds.count("stage_start") + kinds.count("stage_end"), (plan.index, kinds)
        assert n["curve"] == kinds.count("eval") + kinds.count("dense"), (plan.index, kinds)
        assert n["select"] == kinds.count("select")
        assert n["diagnoses"] == sum(1 for d in diags if d["stage"] == plan.index)
    assert counted[1]["curve"] >= 2 and counted[0]["diagnoses"] >= 3 and counted[1]["select"] == 1  # all kinds ran


@pytest.mark.slow  # 17 s (a measured step probe); plan's arithmetic is tested with --no-measure
def test_plan_measures_this_machines_step_and_reuses_the_measurement(tmp_path):
    args = ("plan", "tiny", f"data.cache_dir={tmp_path}", "train.threads=1")
    first = cli(*args).stdout
    assert "measured now" in first and "start-up" in first, first
    saved = sorted((tmp_path / "hardware").glob("speed-*.json"))
    records = [json.loads(p.read_text()) for p in saved]
    assert sorted(r["shape"]["placements"][0] for r in records) == ["post", "pre"]  # the tiny study's two shapes
    assert all(0 < r["step_full_s"] < 60 and r["b_s"] >= 0 and r["depth"] == 3 for r in records)
    minutes = float(re.search(r"predicted wall time: ([\d.]+) min", first).group(1))
    assert minutes > 0
    again = cli(*args).stdout
    assert "cached" in again and "measured now" not in again
    assert re.search(r"predicted wall time: ([\d.]+) min", again).group(1) == f"{minutes:.1f}"
    assert "measured now" in cli(*args, "--remeasure").stdout
    assert "wall time" not in cli(*args, "--no-measure").stdout
    from normgrow.machine import speed

    speed._MEASURED.clear()  # a new process: what the cache holds is all it knows
    saved[0].write_text("{}")  # damaged records: measured again, never predicted from
    saved[1].write_text(json.dumps({**records[1], "b_s": float("nan")}))  # json writes NaN, which it reads back
    assert cli(*args).stdout.count("measured now") == 2
    assert all(math.isfinite(json.loads(p.read_text())["b_s"]) for p in saved)


def test_a_gpu_smoke_record_is_read_back_for_its_kind_of_gpu(tmp_path):
    """gpu_smoke.py's figures, recorded per kind of GPU: the distillation step with the teacher online takes
    1/student + 1/teacher seconds per token (here 1/1000 + 1/3000 s, so 750 tokens/s = 2,700,000 an hour), read
    back for that device name only; a damaged record is none."""
    from normgrow.machine.hardware import gpu_smoke_path, record_gpu_smoke, recorded_gpu_rate

    path = record_gpu_smoke(tmp_path, "NVIDIA H200", 1000.0, 3000.0, {"student": {"n_layer": 9}})
    got = recorded_gpu_rate(tmp_path, "NVIDIA H200")
    assert path == gpu_smoke_path(tmp_path, "NVIDIA H200") and path.name == "gpu-smoke-nvidia-h200.json"
    assert abs(got["tokens_per_hour"] - 2_700_000) < 1e-6 and got["device"] == "NVIDIA H200"
    assert recorded_gpu_rate(tmp_path, "NVIDIA A100-SXM4-80GB") is None
    path.write_text("{cut")
    assert recorded_gpu_rate(tmp_path, "NVIDIA H200") is None


def test_plan_of_a_branch_ladder_counts_each_trunk_once_and_each_branch_from_its_start(tmp_path):
    """A branch ladder's plan: per arm × seed one trunk to the largest budget's decay start, then every budget's
    branch from its own decay start — tokens by hand from the recipe (tiny: 256 tokens per step, one stage of 20,000
    tokens at budget 1, decay over the last 20%)."""
    from normgrow.study.config import load_study
    from normgrow.study.plan import study_plan

    path = tmp_path / "s.yaml"
    path.write_text("name: lad\nbase: tiny\narms: {a: {}}\nseeds: [0, 1]\n")
    study = load_study(str(path), ["budgets=[0.5, 1, 2]", "ladder=branches", "train.schedule=wsd"])
    plans, _ = study_plan(study, None, False)
    steps = {0.5: round(10000 / 256), 1: round(20000 / 256), 2: round(40000 / 256)}  # 39, 78, 156
    starts = {b: int(0.8 * n * 256) // 256 for b, n in steps.items()}  # 31, 62, 124
    trunks = [p for p in plans if p.phase == "trunk"]
    assert [(p.name, p.tokens, p.stop) for p in trunks] == [
        (f"trunks/a-s{s}", starts[2] * 256, starts[2]) for s in (0, 1)
    ]
    branches = {p.name: p for p in plans if p.phase == "main"}
    for b, label in ((0.5, "b0.5"), (1, "b1"), (2, "b2")):
        p = branches[f"{label}/a-s0"]
        assert (p.start, p.tokens) == (starts[b], (steps[b] - starts[b]) * 256)
    # against training every budget from step 0: B_max(1 − f) + f·Σ B_i of Σ B_i, to the step
    direct, _ = study_plan(
        load_study(str(path), ["budgets=[0.5, 1, 2]", "ladder=direct", "train.schedule=wsd"]), None, False
    )
    assert sum(p.tokens for p in direct) == 2 * 256 * sum(steps.values())
    assert sum(p.tokens for p in plans) == 2 * 256 * (starts[2] + sum(n - starts[b] for b, n in steps.items()))


def test_the_probes_step_line_adds_up_at_full_depth():
    """Before: `plan tiny` printed "a 11.1 ms + b 0.0 ms/block (9.3 ms at 3 blocks)": a full-depth step faster than
    one block's (noise) clipped b to 0 and kept a at the one-block step. By hand, a + b·n is the full step always."""
    from normgrow.machine.speed import depth_fit

    assert depth_fit(0.0111, 0.0093, 3) == (0.0093, 0.0)  # noise: every depth at the full step's rate
    a, b = depth_fit(0.010, 0.050, 5)  # b = 0.04 / 4 = 0.01, a = 0.010 − 0.01 = 0
    assert a == pytest.approx(0.0, abs=1e-15) and b == pytest.approx(0.01) and a + 5 * b == pytest.approx(0.050)
    a, b = depth_fit(0.020, 0.100, 9)  # b = 0.08 / 8 = 0.01, a = 0.01
    assert a == pytest.approx(0.010) and b == pytest.approx(0.010) and a + 9 * b == pytest.approx(0.100)
    a, b = depth_fit(0.001, 0.100, 2)  # b = 0.099 > one step: a would be negative, so a = 0 and b = 0.100 / 2
    assert (a, b) == (0.0, 0.05)


def test_plan_prices_a_matched_arm_in_memory_as_its_run_resolves_it_and_writes_nothing(tmp_path, monkeypatch):
    """The tiny study's matched arm (post-matched, matched to post-grow) priced without writing a study folder: its
    stages equal those its run resolves from the reference's config file in a real study directory, and planning
    creates no file, here or in a temporary folder (before, plan wrote every sub-study into a temporary folder to read the reference's config back)."""
    import tempfile

    from normgrow.machine.costs import with_vocab
    from normgrow.run.budget import match_budget
    from normgrow.study.config import load_study
    from normgrow.study.jobs import plan_jobs, write_study_dir
    from normgrow.study.plan import study_plan

    study = load_study("tiny")
    real = tmp_path / "real"
    jobs = plan_jobs(study, real)
    write_study_dir(study, jobs, real)
    matched = next(j for j in jobs if j.arm == "post-matched")
    from_file = match_budget(with_vocab(matched.cfg))[0].curriculum.stages

    empty = tmp_path / "cwd"
    empty.mkdir()
    monkeypatch.chdir(empty)

    def no_temp(*args, **kwargs):
        raise AssertionError("plan made a temporary folder")

    monkeypatch.setattr(tempfile, "mkdtemp", no_temp)
    plans, cfgs = study_plan(study, None, False)
    priced = next(c for p, c in zip(plans, cfgs, strict=True) if p.name == "post-matched-s0").curriculum.stages
    assert [s.tokens for s in priced] == [s.tokens for s in from_file] and from_file[0].tokens > 0
    # by hand: post-grow's active-layer tokens 6656 · (1 + 2 + 3) = 39,936 over 3 layers = 13,312 (52 steps of 256)
    assert [s.tokens for s in from_file] == [13312]
    assert list(empty.iterdir()) == []
