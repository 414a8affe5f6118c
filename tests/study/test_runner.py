"""Studies through the CLI: results, statistics checked against our own arithmetic, resume, failures, launchers."""

import csv
import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import cli, cli_process
from normgrow.config import load_config
from normgrow.study.config import ArmConfig, StudyConfig, load_study, study_preset_names
from normgrow.study.jobs import plan_jobs, sweep_plan
from normgrow.study.record import RunRecord, select_lrs

T95_DF1 = math.tan(0.475 * math.pi)  # two-sided 95% Student-t quantile, 1 degree of freedom (Cauchy)


def write_study(path, cache, arms, seeds=(0, 1), launcher="local", extra="", parallel=1, more=()):
    arm_lines = "\n".join(f"  {name}: {spec}" for name, spec in arms.items())
    path.write_text(f"""name: micro
base: tiny
overrides: [data.cache_dir={cache}, "curriculum.stages=[{{n_layer: 1, tokens: 2560}}, {{n_layer: 2, tokens: 2560}}]", model.n_layer=2{"".join(", " + m for m in more)}]
seeds: [{", ".join(map(str, seeds))}]
arms:
{arm_lines}
launcher: {{kind: {launcher}, parallel: {parallel}}}
{extra}""")
    return path


def results(study_dir):
    with open(study_dir / "results.csv", newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.e2e
def test_micro_study_results_and_statistics(tiny_cache, tmp_path):
    spec = write_study(
        tmp_path / "s.yaml",
        tiny_cache,
        {"pre": "{overrides: [model.norm=pre]}", "post": "{overrides: [model.norm=post]}"},
        extra="contrasts: {gap: [pre, post]}\nphase: [pre, post]\n"
        "rivals: {post: {against: [post, post], reference: [pre, pre]}}\n",  # one rival claim: its grow pair repeats
        parallel=2,
    )
    out = tmp_path / "study"
    proc = cli_process(
        "study", spec, "-o", out
    )  # two runs at a time, one thread each  # the console script, end to end, progress into a pipe
    assert f"report: {out / 'report.md'}" in proc.stdout
    # not a terminal: the study's bar is written once per finished run (and at start), not a few times a second
    assert 2 <= proc.stderr.count("study:") <= 10, proc.stderr[-500:]  # 4 runs; polled every 0.5 s for ~20 s
    rows = results(out)
    assert sorted((r["arm"], r["seed"]) for r in rows) == [("post", "0"), ("post", "1"), ("pre", "0"), ("pre", "1")]
    assert all(r["status"] == "ok" and float(r["val_ce"]) > 0 for r in rows)
    report = (out / "report.md").read_text()
    ce = {(r["arm"], int(r["seed"])): float(r["val_ce"]) for r in rows}
    # per-arm mean ± CI, computed here from results.csv
    for arm in ("pre", "post"):
        v = [ce[(arm, 0)], ce[(arm, 1)]]
        mean = sum(v) / 2
        half = T95_DF1 * math.sqrt(sum((x - mean) ** 2 for x in v)) / math.sqrt(2)  # sd (n−1 = 1) / √n
        assert f"| {arm} | {arm} | 1-2 | 0.003 | {mean:.4f} ± {half:.4f} |" in report
    # the paired contrast post − pre
    d = [ce[("post", s)] - ce[("pre", s)] for s in (0, 1)]
    md = sum(d) / 2
    hd = T95_DF1 * abs(d[0] - d[1]) / math.sqrt(2) / math.sqrt(2)
    assert f"| gap | pre | post | {md:.4f} ± {hd:.4f} |" in report
    # the study ends with its headline numbers, then the report's path
    tail = proc.stdout.strip().splitlines()[-5:]
    assert tail[-1] == f"report: {out / 'report.md'}"
    assert f"gap (post − pre, val/ce): {md:+.4f} ± {hd:.4f} (95% CI, 2 seeds)" in tail[:-1], tail
    # the rival's claim reads the same pair, through the paper's joint-gap function (its grow pair is not read twice)
    assert "## Rivals against the reference" in report and "- `post`: post − pre (joint), post − pre (grow)" in report
    row = next(line for line in report.splitlines() if line.startswith("| joint_gap[post] |"))
    assert f"| {md:+.4f} [" in row and "| grow_gap[post] |" not in report
    assert any(line.startswith("rivals' claims (Holm-adjusted): 1 ") for line in tail[:-1]), tail
    assert "Phase-wise" in report and ("Crossover" in report or "No crossover" in report)
    assert "teacher cache" not in report  # trained online: no cache warning
    for fig in ("val_ce_vs_compute", "phase_gap", "boundary_rms", "identity"):
        assert (out / "plots" / f"{fig}.png").is_file(), fig
        assert f"plots/{fig}.png" in report
    assert (out / "study.yaml").is_file() and len(list((out / "configs").glob("*.yaml"))) == 4

    # a second invocation skips every finished run and rebuilds the same numbers
    again = cli("study", spec, "-o", out)
    assert "4 of 4 runs already finished" in again.stdout + again.stderr
    assert results(out) == rows
    # and `normgrow report` rebuilds the report from disk alone
    (out / "report.md").unlink()
    cli("report", out)
    assert (out / "report.md").read_text() == report


def test_one_seed_says_no_interval_and_matched_arms_get_their_budget(tiny_cache, tmp_path):
    spec = write_study(
        tmp_path / "s.yaml",
        tiny_cache,
        {
            "grow": "{overrides: [model.norm=post]}",
            "matched": "{overrides: [model.norm=post, 'curriculum.stages=[{n_layer: 2, tokens: 256}]'], match: grow}",
        },
        seeds=(0,),
        launcher="inline",
        extra="contrasts: {m: [matched, grow]}\n",
    )
    out = tmp_path / "study"
    cli("study", spec, "-o", out, "--no-progress")
    report = (out / "report.md").read_text()
    assert "no confidence intervals are available" in report
    rows = {r["arm"]: r for r in results(out)}
    grow_alt = int(rows["grow"]["active_layer_tokens"])
    assert grow_alt == 2560 * 1 + 2560 * 2
    assert abs(int(rows["matched"]["active_layer_tokens"]) - grow_alt) <= 256 * 2  # within one step at depth 2


@pytest.mark.e2e
def test_a_failing_arm_is_reported_and_the_others_finish(tiny_cache, tmp_path):
    spec = write_study(
        tmp_path / "s.yaml",
        tiny_cache,
        {
            "good": "{overrides: [model.norm=pre]}",
            "bad": "{overrides: [train.lr=1e4, train.grad_clip=0, train.warmup_tokens=0]}",
        },
        seeds=(0,),
        parallel=2,
    )
    out = tmp_path / "study"
    proc = cli("study", spec, "-o", out, "--no-progress", check=False)
    rows = {r["arm"]: r for r in results(out)}
    assert rows["good"]["status"] == "ok"
    assert rows["bad"]["status"] == "failed" and "non-finite" in rows["bad"]["error"]
    assert "run bad-s0 failed" in proc.stdout + proc.stderr
    # the study exits 1 (not 0, not a usage error's 2), naming the run that did not finish, after its report
    assert proc.returncode == 1 and proc.stdout.strip().splitlines()[-1] == f"report: {out / 'report.md'}"
    assert (
        proc.stderr.strip().splitlines()[-1].startswith("normgrow: error: 1 run of the study did not finish: bad-s0 (")
    )
    report = (out / "report.md").read_text()
    assert "Runs that did not finish" in report and "`bad` seed 0: failed" in report


@pytest.mark.e2e
def test_runs_forked_from_the_preloaded_server_train_exactly_as_fresh_interpreters(tiny_cache, tmp_path):
    """launcher.preload (the default) forks each run from a server that imported the training modules once; a run
    trained that way equals, number for number, the same run in a fresh interpreter (preload off), and each forked
    run is its own process (its run lock names a pid that is neither this process nor another run's)."""
    arms = {"pre": "{overrides: [model.norm=pre]}", "post": "{overrides: [model.norm=post]}"}
    outs = {}
    for preload in ("true", "false"):
        spec = write_study(tmp_path / f"{preload}.yaml", tiny_cache, arms, seeds=(0,), parallel=2)
        outs[preload] = tmp_path / preload
        cli("study", spec, "-o", outs[preload], "--no-progress", f"launcher.preload={preload}")
    rows = {p: {r["arm"]: r for r in results(o)} for p, o in outs.items()}
    for arm in arms:
        a, b = rows["true"][arm], rows["false"][arm]
        assert a["status"] == b["status"] == "ok"
        assert {k: v for k, v in a.items() if k != "wall_time_s"} == {k: v for k, v in b.items() if k != "wall_time_s"}
        forked = outs["true"] / "runs" / f"{arm}-s0"
        assert (forked / "metrics.jsonl").read_text().count("val/ce") == (
            outs["false"] / "runs" / f"{arm}-s0" / "metrics.jsonl"
        ).read_text().count("val/ce")
    logs = [(outs["true"] / "logs" / f"{arm}-s0.log").read_text() for arm in arms]
    assert all("val/ce" in log for log in logs)  # each forked run wrote its own log
    pids = {int((outs["true"] / "runs" / f"{arm}-s0" / ".lock").read_text().split()[0]) for arm in arms}
    assert len(pids) == 2 and os.getpid() not in pids  # two processes of their own


@pytest.mark.e2e
def test_boundary_update_in_the_report_is_read_from_the_runs_diagnostics(tiny_cache, tmp_path):
    joint = "'curriculum.stages=[{n_layer: 2, tokens: 5120}]'"
    spec = write_study(
        tmp_path / "s.yaml",
        tiny_cache,
        {
            "pg": "{overrides: [model.norm=pre]}",
            "qg": "{overrides: [model.norm=post]}",
            "pj": f"{{overrides: [model.norm=pre, {joint}]}}",
            "qj": f"{{overrides: [model.norm=post, {joint}]}}",
        },
        seeds=(0,),
        launcher="inline",
        extra="claims: {pre_grow: pg, post_grow: qg, pre_joint: pj, post_joint: qj}\n",
    )
    out = tmp_path / "study"
    # the joint runs snapshot their diagnostics every 2,560 tokens: at the grow runs' event (2,560) and stage end (5,120)
    cli("study", spec, "-o", out, "--no-progress", "diagnostics.every_tokens=2560")
    rows = {r["arm"]: r for r in results(out)}

    def records(arm):
        return [
            json.loads(line) for line in (out / rows[arm]["run_dir"] / "diagnostics.jsonl").read_text().splitlines()
        ]

    # one growth event, 1 → 2 blocks: boundary b = 1, the first appended block is block 1; its ‖F(h)‖/‖h‖ at the end
    # of its stage (5,120 tokens) in each grow run, and block 1's in each joint run at the same tokens
    u = {
        arm: next(r for r in records(arm) if r["tokens"] == 5120 and r["event"] == "stage_end")["branch_update"][1]
        for arm in ("pg", "qg", "pj", "qj")
    }
    d = (math.log(u["qg"]) - math.log(u["pg"])) - (math.log(u["qj"]) - math.log(u["pj"]))
    report = (out / "report.md").read_text()
    assert f"| boundary_update | **undetermined** | undetermined | — | {d:+.4f} |" in report
    assert "| boundary_scale | *descriptive* | — | — |" in report
    assert all(r["counts"]["bos"] >= 4 for r in records("pg"))  # every probe row's interior BOS (4 rows)
    # without the joint runs' snapshot at the event tokens the claim is not tested, and says what to set
    path = out / rows["pj"]["run_dir"] / "diagnostics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records("pj") if r["event"] != "interval"))
    cli("report", out)
    line = next(x for x in (out / "report.md").read_text().splitlines() if x.startswith("- **boundary_update**"))
    assert "not tested: the joint runs have no diagnostics record" in line and "pj seed 0 at 2,560 tokens" in line
    assert "diagnostics.every_tokens" in line


@pytest.mark.slow  # the default run covers this in test_faults.py (the study killed, its run resumed)
def test_a_killed_study_resumes_its_runs(tiny_cache, tmp_path):
    spec = write_study(
        tmp_path / "s.yaml", tiny_cache, {"long": "{overrides: [model.norm=post]}"}, seeds=(0,), extra=""
    )
    text = (
        spec.read_text()
        .replace("tokens: 2560}]", "tokens: 30000}]")
        .replace(
            "overrides: [data.cache_dir",
            "overrides: [train.checkpoint_every_tokens=2048, train.threads=1, data.cache_dir",
        )
    )
    spec.write_text(text)
    out = tmp_path / "study"
    proc = subprocess.Popen(
        [sys.executable, "-m", "normgrow.cli", "study", str(spec), "-o", str(out), "--no-progress"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    ckpts = out / "runs" / "long-s0" / "checkpoints"
    deadline = time.time() + 120
    while time.time() < deadline and not (ckpts.is_dir() and any(p.name.startswith("step_") for p in ckpts.iterdir())):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the study process and its run subprocess
    proc.wait()
    assert not (out / "runs" / "long-s0" / "summary.json").exists()
    cli("study", spec, "-o", out, "--no-progress")
    log = (out / "logs" / "long-s0.log").read_text()
    assert "resuming" in log
    assert results(out)[0]["status"] == "ok"


@pytest.mark.slow  # 26 s; the local launcher runs every other study test
def test_submitit_local_executor_runs_a_study(tiny_cache, tmp_path):
    spec = write_study(
        tmp_path / "s.yaml", tiny_cache, {"pre": "{overrides: [model.norm=pre]}"}, seeds=(0,), launcher="submitit"
    )
    text = spec.read_text().replace(
        "launcher: {kind: submitit, parallel: 1}",
        "launcher: {kind: submitit, cluster: local, parameters: {timeout_min: 10}}",
    )
    spec.write_text(text)
    out = tmp_path / "study"
    cli("study", spec, "-o", out, "--no-progress")
    assert results(out)[0]["status"] == "ok"
    assert any((out / "submitit").iterdir())


@pytest.mark.e2e
def test_every_study_preset_loads_and_validates(tmp_path):
    names = study_preset_names()
    assert {"default", "paper", "tiny", "gap", "variants", "cpu-width", "paper-width"} <= set(names)
    assert "cpu3" not in names  # folded into gap (its numbers were measured with a teacher that no longer exists)
    for name in names:
        s = load_study(name)
        assert s.arms
        # every arm's run config resolves and validates, at every sweep point (one seed; nothing is written)
        s = dataclasses.replace(s, seeds=s.seeds[:1])
        jobs = (
            [j for _, _, js in sweep_plan(s, tmp_path / name) for j in js] if s.sweep.axes else plan_jobs(s, tmp_path)
        )
        assert len(jobs) >= len(s.arms) and not (tmp_path / name).exists()
    default = load_study("default")
    claims_arms = {"pre-joint", "post-joint", "pre-grow", "post-grow", "post-grow-matched", "post-joint-matched"}
    assert set(default.arms) == claims_arms and len(default.seeds) == 3  # the claims' arms, with intervals
    controls = {"post-matched", "pre-single", "post-single", "pre-freeze", "post-freeze"}
    upward = claims_arms - {"post-joint-matched"}  # paper names the paper's direction post-matched
    gap = load_study("gap")
    renorm = {"pre-renorm-grow", "pre-renorm-joint"}
    gap_controls = {"pre-single", "post-single", "pre-freeze", "post-freeze", "pre-shallow", "post-shallow"}
    assert (
        set(gap.arms) == claims_arms | renorm | gap_controls and gap.seeds == [0, 1, 2] and gap.budgets == [0.5, 1, 2]
    )
    assert all(gap.arms[a].budgets == [1] for a in gap_controls) and not any(
        gap.arms[a].budgets for a in claims_arms | renorm
    )
    assert gap.regime.max_collapse == 0.5 and gap.regime.min_kl == 0.5 and gap.regime.scale_factor == 2.0
    assert gap.claims["pre_grow_renorm"] == "pre-renorm-grow" and gap.claims["pre_joint_renorm"] == "pre-renorm-joint"
    assert set(load_study("paper").arms) == upward | controls | {"pre-shallow", "post-shallow"}
    for name in ("default", "gap", "paper"):  # both matched directions are claims of every shipped claims study
        c = load_study(name).claims
        assert c["matched"] and c["joint_matched"] and c["joint_matched"][1] == c["post_grow"]
    assert all(len(a.lrs) >= 2 for a in load_study("lr-sweep").arms.values())


@pytest.mark.parametrize("name", ["default", "gap", "paper"])
def test_the_shipped_studies_match_compute_in_the_direction_that_tests_it(name):
    """The claims' matched pair is [joint, grow] with the grow arm given the joint arm's active-layer
    tokens (matched upward): a joint run shortened to grow's compute only repeats the joint contrast."""
    s = load_study(name)
    joint, grow = s.claims["matched"]
    assert s.arms[grow].match == joint and s.arms[joint].match is None
    base = s.arms[grow].preset
    assert (
        len(load_config(base).curriculum.stages) > 1 and len(load_config(s.arms[joint].preset).curriculum.stages) == 1
    )
    for role in ("pre_joint", "post_joint", "pre_grow", "post_grow") + (
        ("pre_freeze", "post_freeze") if name != "default" else ()
    ):
        assert s.claims[role] in s.arms
    if name != "default":
        assert load_config(s.arms[s.claims["post_single"]].preset).curriculum.stages[1].n_layer == 4


@pytest.mark.parametrize(
    "over,needle",
    [
        (["seeds=[]"], "seeds"),
        (["launcher.parallel=0"], "launcher.parallel"),
        (["arms.post-grow-matched.match=nobody"], "arms.post-grow-matched.match"),
        (["model.norm=diagonal"], "model.norm"),
        (["model.norm=post"], "every arm of the study sets model.norm"),
        (["claims.roles={nope: pre-joint}"], "claims.roles.nope: no registered claim"),
        (["claims.roles={post_grow: nobody}"], "claims.roles.post_grow: no arm"),
        (["claims.magnitude=0.5"], "claims.magnitude: must be at least 1"),
        # lists a user can type, refused before any work (before: 5,000 pilot rates stalled `plan` past a minute)
        ([f"lr_pilot.lrs={[0.001 * (1 + i / 1000) for i in range(65)]}"], "lr_pilot.lrs: 65 entries: at most 64"),
        ([f"seeds={list(range(1001))}"], "seeds: 1,001 entries: at most 1,000"),
        ([f"budgets={[0.5 * (i + 1) for i in range(65)]}"], "budgets: 65 entries: at most 64"),
        (
            [f"seeds={list(range(900))}"],
            "seeds: the study would plan about 5,400 runs (arms × seeds × budgets × rates)",
        ),
        # a list longer than YAML's expansion limit: the error quotes the override's start and its length, not all of it
        ([f"seeds={list(range(20000))}"], "… (128,896 characters)': seeds: the value is not plain YAML"),
    ],
)
def test_bad_study_input_is_one_line(tmp_path, over, needle):
    proc = cli("study", "default", "-o", tmp_path / "s", *over, check=False)
    assert proc.returncode == 2
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and needle in err[0] and err[0].startswith("normgrow: error:")
    assert len(err[0]) < 500  # one readable line
    assert not (tmp_path / "s").exists()


def test_a_study_over_a_pool_is_refused_before_anything_runs_when_a_matched_arm_repeats_too_often(tiny_cache, tmp_path):
    """A pool of 16 = 2 batches of 8 an epoch. joint: 2560 tokens = 10 steps → 5 epochs. grow (1 → 2 blocks, 2560
    tokens each) matched to joint's 5,120 active-layer tokens: stage 1 round(2560 · 2/3 / 256) = 7 steps (1,792),
    stage 2 round((5120 − 1792) / 512) = round(6.5) = 6 steps: 13 steps → ceil(13 / 2) = 7 epochs (unmatched: 10)."""
    spec = write_study(
        tmp_path / "s.yaml",
        tiny_cache,
        {"joint": '{overrides: ["curriculum.stages=[{n_layer: 2, tokens: 2560}]"]}', "grow": "{match: joint}"},
        seeds=(0,),
        launcher="inline",
        more=("data.train_pool_sequences=16", "data.max_pool_repeats=6"),
    )
    proc = cli("study", spec, "-o", tmp_path / "s", check=False)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(err) == 1, proc.stderr
    assert "grow" in err[0] and "data.max_pool_repeats" in err[0] and "up to 7 times" in err[0], err[0]
    assert not (tmp_path / "s").exists()


@pytest.mark.e2e
def test_a_study_asking_for_a_cache_runs_the_teacher_once(tiny_cache, tmp_path):
    # k = 6: no other test builds this cache, so this study must build it
    small = (
        "data.max_documents=12, data.val_fraction=0.2, data.probe_sequences=2, teacher.cache=true, teacher.cache_k=6"
    )
    spec = write_study(
        tmp_path / "s.yaml",
        tiny_cache,
        {"pre": "{overrides: [model.norm=pre]}", "post": "{overrides: [model.norm=post]}"},
        seeds=(0,),
        launcher="inline",
    )
    spec.write_text(spec.read_text().replace("overrides: [data.cache_dir", f"overrides: [{small}, data.cache_dir"))
    out = tmp_path / "study"
    proc = cli("study", spec, "-o", out, "--no-progress")
    built = [line for line in proc.stdout.splitlines() if line.startswith("teacher cache: ") and "bytes/token" in line]
    assert len(built) == 1  # built once, by the study process, before the runs
    caches = [d for d in (tiny_cache / "teacher-cache").iterdir() if (d / "meta.json").is_file()]
    for row in results(out):
        s = json.loads((out / row["run_dir"] / "summary.json").read_text())
        assert row["status"] == "ok" and "top-6 teacher cache" in s["train_teacher"]
        assert any(str(c) in s["train_teacher"] for c in caches)
    report = (out / "report.md").read_text()
    assert "Trained from a top-k teacher cache" in report and s["train_teacher"] in report


def test_budget_scale_shrinks_stages_and_warmup_together(tmp_path):
    from normgrow.study.jobs import plan_jobs

    study = load_study("default")
    assert study.budget_scale == 0.5
    jobs = {j.arm: j.cfg for j in plan_jobs(study, tmp_path) if j.seed == 0}
    assert [s.tokens for s in jobs["pre-grow"].curriculum.stages] == [65536, 65536, 65536]
    assert [s.tokens for s in jobs["pre-joint"].curriculum.stages] == [196608]
    assert jobs["pre-joint"].train.warmup_tokens == 20000  # 40,000 × 0.5
    assert jobs["post-grow-matched"].curriculum.match_budget == str(tmp_path / "configs" / "post-joint-s0.yaml")


def test_progress_weighs_each_step_by_its_student_and_teacher_flops(tmp_path):
    import torch

    from normgrow.nn.model import Student, count_parameters
    from normgrow.study.jobs import plan_jobs
    from normgrow.study.launch import cost_of_steps, job_costs
    from normgrow.train.stages import plan_stages, step_cost, tokens_per_step

    jobs = {j.arm: j for j in plan_jobs(load_study("default"), tmp_path)}
    grow, joint = job_costs(jobs["pre-grow"]), job_costs(jobs["pre-joint"])
    # a 3-block stage costs less per step than a 6-block one, the 9-block stage what a joint step costs
    assert grow[0][1] < grow[1][1] < grow[2][1] == joint[0][1]
    # every step carries the default teacher's forward: 2 FLOPs per weight of its matmuls (all but the
    # embedding table; its norm gains are noise here) plus causal attention, counted on a real teacher model
    cfg = jobs["pre-grow"].cfg
    tm = load_config(cfg.teacher.default_preset).model
    with torch.device("meta"):
        counts = count_parameters(Student(dataclasses.replace(tm, vocab_size=cfg.data.vocab_size)))
    T = cfg.data.seq_len
    teacher = 2 * (counts["total"] - counts["embedding"]) + tm.n_layer * 2 * T * tm.n_head * (tm.d_model // tm.n_head)
    student = step_cost(
        dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, vocab_size=cfg.data.vocab_size)),
        plan_stages(cfg)[0],
    )["flops"]
    assert grow[0][1] - student == pytest.approx(teacher * tokens_per_step(cfg), rel=1e-3)
    # progress after k steps sums the stages' steps at their own cost
    n0 = grow[0][0]
    assert cost_of_steps(grow, 0) == 0
    assert cost_of_steps(grow, n0 + 1) == n0 * grow[0][1] + grow[1][1]
    assert cost_of_steps(grow, 10**9) == sum(n * c for n, c in grow)


def test_report_against_another_budget_reads_each_contrasts_retention_ratio(tmp_path):
    from scipy.stats import t as student_t

    ce = {  # (budget scale, arm) → val/ce of seeds 0, 1, 2
        (0.5, "pre"): [5.0, 5.1, 5.2],
        (0.5, "post"): [4.90, 5.02, 5.08],
        (0.5, "big"): [4.5, 4.6, 4.7],
        (1.0, "pre"): [4.0, 4.1, 4.2],
        (1.0, "post"): [3.93, 4.05, 4.07],
        (1.0, "big"): [4.5, 4.6, 4.7],
    }
    dirs = {}
    for scale in (0.5, 1.0):
        d = tmp_path / f"s{scale}"
        d.mkdir()
        (d / "study.yaml").write_text(
            f"name: conv\nbase: tiny\nbudget_scale: {scale}\nseeds: [0, 1, 2]\narms:\n"
            "  pre: {overrides: [model.norm=pre]}\n  post: {overrides: [model.norm=post]}\n"
            "  big: {overrides: [model.norm=post]}\n"
            "contrasts: {gap: [pre, post], far: [pre, big]}\n"
            "claims: {pre_joint: pre, post_joint: post}\n"
        )
        with open(d / "results.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=["arm", "seed", "status", "val_ce", "selected"])
            w.writeheader()
            for arm in ("pre", "post", "big"):
                for seed, v in enumerate(ce[(scale, arm)]):
                    w.writerow({"arm": arm, "seed": seed, "status": "ok", "val_ce": v, "selected": ""})
            for seed in range(3):  # a learning rate the study did not select: left out of every comparison
                w.writerow({"arm": "pre", "seed": seed, "status": "ok", "val_ce": 99.0, "selected": "no"})
        dirs[scale] = d

    def contrast(scale, b):
        diffs = [y - x for x, y in zip(ce[(scale, "pre")], ce[(scale, b)], strict=True)]
        m = sum(diffs) / 3
        sd = math.sqrt(sum((x - m) ** 2 for x in diffs) / 2)
        return m, student_t.ppf(0.975, 2) * sd / math.sqrt(3)

    out = cli("report", dirs[1.0], "--against", dirs[0.5]).stdout
    (ga, ha), (gb, hb) = contrast(0.5, "post"), contrast(1.0, "post")
    assert "within other's interval" not in out and "Convergence:" not in out  # the strict check is gone

    def fieller(b):  # ρ = Δ(1) / Δ(0.5) and the roots in R of (x̄ − R·ȳ)² = t²·var(mean of x − R·y), by hand
        y = [q - p for p, q in zip(ce[(0.5, "pre")], ce[(0.5, b)], strict=True)]
        x = [q - p for p, q in zip(ce[(1.0, "pre")], ce[(1.0, b)], strict=True)]
        mx, my = sum(x) / 3, sum(y) / 3
        sxx, syy = (sum((v - m) ** 2 for v in w) / 2 / 3 for w, m in ((x, mx), (y, my)))
        sxy = sum((u - mx) * (v - my) for u, v in zip(x, y, strict=True)) / 2 / 3
        t2 = student_t.ppf(0.975, 2) ** 2
        qa, qb, qc = my * my - t2 * syy, -2 * (mx * my - t2 * sxy), mx * mx - t2 * sxx
        root = math.sqrt(max(qb * qb - 4 * qa * qc, 0.0))
        return mx / my, (-qb - root) / (2 * qa), (-qb + root) / (2 * qa)

    rho, lo, hi = fieller("post")
    assert lo < 0 < 1 < hi  # the gap's retention interval contains both 0 and 1: undetermined
    assert (
        f"| gap | {ga:+.4f} ± {ha:.4f} | {gb:+.4f} ± {hb:.4f} | {gb - ga:+.4f} | {rho:+.2f} [{lo:+.2f}, {hi:+.2f}] | "
        "undetermined |" in out
    )
    (fa, _), (fb, _) = contrast(0.5, "big"), contrast(1.0, "big")
    rho, lo, hi = fieller("big")  # the same per-seed difference at every seed: a zero-width interval at −1
    assert rho == pytest.approx(-1) and hi < 0
    assert (
        f"| far | {fa:+.4f} ± 0.0000 | {fb:+.4f} ± 0.0000 | {fb - fa:+.4f} | {rho:+.2f} [{lo:+.2f}, {hi:+.2f}] | "
        "reversing |" in out
    )

    def sign(m, h):  # the interval below 0, above it, or containing it
        return "−" if m + h < 0 else "+" if m - h > 0 else "?"

    assert (sign(ga, ha), sign(gb, hb)) == ("−", "?")  # the gap's interval came to contain 0
    assert "| undetermined | − → ? |" in out
    assert "| reversing | − → + |" in out  # `far` changed sign
    assert abs(gb - ga) > 0.01  # the gap moved by more than the claims' default margin
    assert (
        "Retention from budget scale 0.5 to 1.0: 1 reversing, 1 undetermined of 2 contrasts; 0 of 2 moved by no "
        "more than the claims' margin of 0.01 nats (their 'about zero'). Signs: 0 of 2 unchanged. "
        "Claims: 0 of 1 verdicts unchanged." in out
    )
    # the joint-gap claim (a tie within ±0.01): [−0.150, −0.050] excludes the margin, [−0.187, +0.020] straddles it
    assert "| joint_gap | contradicted | undetermined | **no** |" in out
    assert "Left out" not in out  # both define both contrasts on the same arms
    # a study with no contrast in common: the table says none, and why (before: an empty table, "none of 0")
    other = dirs[1.0].parent / "renamed"
    import shutil

    shutil.copytree(dirs[1.0], other)
    spec = (other / "study.yaml").read_text()
    (other / "study.yaml").write_text(
        spec.replace(
            "contrasts: {gap: [pre, post], far: [pre, big]}", "contrasts: {gap: [pre, big], wide: [post, big]}"
        )
    )
    out = cli("report", other, "--against", dirs[0.5]).stdout
    assert "| (none in common) |" in out and "none of 0 contrasts" in out
    assert (
        "Left out (a contrast is compared where both studies define it on the same arms): only the base defines far; "
        "only the other defines wide; defined on other arms: gap (base ['pre', 'post'], other ['pre', 'big'])." in out
    )
    bad = cli("report", dirs[1.0], "--against", tmp_path / "nowhere", check=False)
    line = bad.stderr.strip().splitlines()[-1]
    assert bad.returncode == 2 and "--against" in line and "nowhere: no such directory" in line
    (tmp_path / "empty").mkdir()
    bad = cli("report", dirs[1.0], "--against", tmp_path / "empty", check=False)
    assert bad.returncode == 2 and "not a finished study directory" in bad.stderr.strip().splitlines()[-1]


@pytest.mark.e2e
def test_an_lr_sweep_keeps_the_rate_with_the_best_selection_ce(tiny_cache, tmp_path):
    spec = write_study(
        tmp_path / "s.yaml",
        tiny_cache,
        {"pre": "{overrides: [model.norm=pre], lrs: [0.0001, 0.003]}", "post": "{overrides: [model.norm=post]}"},
        launcher="inline",
        extra="select_tokens: 1024\ncontrasts: {gap: [pre, post]}\n",
    )
    out = tmp_path / "study"
    cli("study", spec, "-o", out, "--no-progress")
    rows = results(out)
    sweep = [r for r in rows if r["arm"] == "pre"]
    assert sorted((float(r["lr"]), r["seed"]) for r in sweep) == [
        (0.0001, "0"),
        (0.0001, "1"),
        (0.003, "0"),
        (0.003, "1"),
    ]
    assert all(r["select_ce"] != "" for r in sweep) and all(r["select_ce"] == "" for r in rows if r["arm"] == "post")
    mean_sel = {lr: sum(float(r["select_ce"]) for r in sweep if float(r["lr"]) == lr) / 2 for lr in (0.0001, 0.003)}
    best = min(mean_sel, key=mean_sel.get)
    assert {float(r["lr"]) for r in sweep if r["selected"] == "yes"} == {best}
    # selection used the selection set, not the validation set it reports
    for r in sweep:
        s = json.loads((out / r["run_dir"] / "summary.json").read_text())
        assert (
            s["select"]["select/ce"] == pytest.approx(float(r["select_ce"])) and s["select"]["select/ce"] != s["val/ce"]
        )
    report = (out / "report.md").read_text()
    kept = [float(r["val_ce"]) for r in sweep if r["selected"] == "yes"]
    assert f"| pre | pre | 1-2 | {best:g} (selected) | {sum(kept) / 2:.4f} ±" in report
    assert "## Learning-rate selection" in report
    post = {int(r["seed"]): float(r["val_ce"]) for r in rows if r["arm"] == "post"}
    pre = {int(r["seed"]): float(r["val_ce"]) for r in sweep if r["selected"] == "yes"}
    assert f"| gap | pre | post | {sum(post[s] - pre[s] for s in (0, 1)) / 2:.4f} ±" in report


def test_an_lr_sweep_selects_a_rate_only_on_every_seed():
    """select_lrs: a rate whose second seed failed is not chosen on the one seed it survived (the old rule averaged
    the finished seeds, so 0.01's 2.0 beat 0.001's 3.0)."""
    s = StudyConfig(arms={"a": ArmConfig(lrs=[0.01, 0.001])}, seeds=[0, 1])
    rows = [
        RunRecord("a", seed, lr, "ok" if ce else "failed", "", columns={"select_ce": str(ce or "")})
        for lr, seed, ce in ((0.01, 0, 2.0), (0.01, 1, None), (0.001, 0, 3.0), (0.001, 1, 3.0))
    ]
    rows, selection = select_lrs(s, rows)
    sel = selection["a"]
    assert sel["chosen"] == 0.001 and sel["lrs"][0.01] == {"mean": None, "n": 1} and sel["lrs"][0.001]["mean"] == 3.0
    assert [r.selected for r in rows] == ["no", "no", "yes", "yes"]


def test_report_rebuilt_from_disk_keeps_a_failed_lr_sweep_run_failed(tiny_cache, tmp_path):
    """`normgrow report` on a learning-rate-sweep study: a run that failed stays `failed` with its error (it was
    listed as "missing … not run": the rebuild looked failures up under `<arm>-s<seed>`, while a sweep's jobs are
    `<arm>-lr<lr>-s<seed>`)."""
    spec = write_study(
        tmp_path / "s.yaml",
        tiny_cache,
        {"pre": "{overrides: [model.norm=pre, train.grad_clip=0, train.warmup_tokens=0], lrs: [10000, 0.003]}"},
        seeds=(0,),
        launcher="inline",
        extra="select_tokens: 1024\n",
    )
    out = tmp_path / "study"
    cli("study", spec, "-o", out, "--no-progress")
    before = {float(r["lr"]): r for r in results(out)}
    assert before[10000.0]["status"] == "failed" and "non-finite" in before[10000.0]["error"]
    cli("report", out)
    after = {float(r["lr"]): r for r in results(out)}
    assert after[10000.0]["status"] == "failed" and after[10000.0]["error"] == before[10000.0]["error"]
    assert after[0.003]["status"] == "ok" and after[0.003]["selected"] == "yes"
    assert "`pre` seed 0 lr 10000.0: failed — TrainingDiverged" in (out / "report.md").read_text()


def test_the_gap_studys_renormalized_arms_put_post_norm_exactly_above_each_growth_boundary(tmp_path):
    """The intervention arms: post-norm at the first block above each boundary of the grow arms' schedule, pre-norm
    elsewhere, the same list under growth and under joint training; everything else as their pre-norm twins."""
    s = dataclasses.replace(load_study("gap"), seeds=[0])
    jobs = {j.arm: j for j in plan_jobs(dataclasses.replace(s, budgets=[]), tmp_path)}
    stages = jobs["pre-grow"].cfg.curriculum.stages
    boundaries = {st.n_layer for st in stages[:-1]}  # append: the first new block of each stage sits at the old depth
    assert boundaries == {3, 6}
    for arm, twin in (("pre-renorm-grow", "pre-grow"), ("pre-renorm-joint", "pre-joint")):
        norms = jobs[arm].cfg.model.block_norms
        assert [i for i, n in enumerate(norms) if n == "post"] == sorted(boundaries) and set(norms) == {"pre", "post"}
        assert dataclasses.replace(jobs[arm].cfg.model, block_norms=[]) == jobs[twin].cfg.model
        assert jobs[arm].cfg.curriculum == jobs[twin].cfg.curriculum


@pytest.mark.e2e
@pytest.mark.parametrize("name", ["default", "gap"])
def test_a_jobs_config_is_what_loading_it_with_its_seed_gives(name, tmp_path):
    """plan_jobs resolves each arm once and sets the seed on its copies (the seed changes no other field): every job's
    config equals the one load_config gives with that seed, field for field."""
    from normgrow.study.jobs import budget_recipe

    study = load_study(name)
    for job in plan_jobs(study, tmp_path):
        a = study.arms[job.arm]
        over = [*study.overrides, *a.overrides, f"seed={job.seed}", f"name={job.arm}"]
        full = budget_recipe(load_config(a.preset or study.base, over), study)
        # the job's own fields set after loading (its tracker identity, a matched arm's reference) taken from `full`
        assert dataclasses.replace(job.cfg, train=dataclasses.replace(job.cfg.train, **{
            k: getattr(full.train, k) for k in ("track_group", "track_job_type", "track_tags")
        }), curriculum=dataclasses.replace(job.cfg.curriculum, match_budget=full.curriculum.match_budget,
                                           match_stages=full.curriculum.match_stages)) == full  # fmt: skip
