"""`normgrow plan STUDY|CONFIG`: memory per device and device-hours of a study (or one run), computed from
its configs before anything runs — no model is built, no data is read, no teacher is loaded.

Memory per device of one job: the cost model of normgrow.machine.costs, every term printed. Device-hours: each job's FLOPs — the student's training FLOPs (stages.flops_per_token, 6·N per token
plus attention, per stage) and the teacher's forward (2·N_teacher per token plus attention) — divided by
a throughput: `--tokens-per-hour` measured by the GPU smoke check (benchmarks/gpu_smoke.sh) when given,
else peak FLOP/s × an assumed utilization (`--peak-tflops`, `--mfu`; both printed as assumptions).
`--pilot DIR` adds, from a finished pilot study's per-seed spread of each contrast (same arm names), what the planned
seeds can resolve: the 95% half-width at the planned seeds, the smallest true contrast the paired t-test resolves
from 0 with 80% power, and the seeds that power needs for a contrast of the claims' margin δ (`claims.margin`) —
each also at the upper end of the sd's own 95% interval, since a pilot of few seeds estimates its sd loosely.

With the teacher cache (`teacher.cache=true`) the teacher runs once over the tokens the runs read (the
training pool's, `data.train_pool_sequences`; without a pool the largest run's tokens, a lower bound on the
training split the cache covers), and every run reads the cache instead: top-k k·(s + id bytes) + s bytes per
token on disk (s = 2 or 4 by teacher.cache_dtype), V·s at k = V (no ids, no tail); sampled n·(id bytes) + s. Both
kinds are sized, whichever the config uses. A run with a pool is refused
here when it would start more epochs over it than data.max_pool_repeats allows.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path

from normgrow.config import RunConfig
from normgrow.config.schema import read_yaml
from normgrow.data import cache_root
from normgrow.errors import ConfigError, NormgrowError
from normgrow.machine import dtypes, speed
from normgrow.machine.costs import job_memory, teacher_flops_per_token, vocab_of, with_vocab
from normgrow.machine.hardware import cpu_info, recorded_gpu_rate
from normgrow.parallel.dist import pick_device
from normgrow.run.budget import match_budget
from normgrow.study.branches import branched
from normgrow.study.config import StudyConfig, load_study, study_preset_names
from normgrow.study.engine.stats import detectable, estimate, sd_interval, seeds_for, t_quantile
from normgrow.study.engine.verdicts import study_roles
from normgrow.study.envelope import bracket, bracket_jobs, bracketed
from normgrow.study.jobs import Job, plan_jobs, sweep_plan
from normgrow.study.launch import fork_seconds
from normgrow.study.pilot import (
    CHECK_DIR,
    CONFIRM_DIR,
    PILOT_DIR,
    check_round,
    confirm_round,
    core_arms,
    pilot_study,
)
from normgrow.study.record import read_results
from normgrow.study.report.contrasts import contrast
from normgrow.study.sections import budget_label
from normgrow.study.sweep import PAPER_TOKENS_PER_PARAM, non_embedding_params
from normgrow.study.tree import shape
from normgrow.train.stages import check_pool_repeats, plan_stages, planned_totals, step_cost

GIB = 2**30


@dataclass
class JobPlan:
    name: str
    world: int  # data-parallel ranks of the job
    tokens: int
    student_flops: float
    teacher_flops: float
    memory: dict  # term → bytes per device
    phase: str = "main"  # launched in this order, each phase once the one before has finished: "pilot" (the
    # learning-rate pilot, its rounds and check), "trunk" (a branch ladder's trunks), "main", "held" (the held-out
    # budget's runs, after the prediction), "confirm" (the rate confirmation, once the study has trained)
    start: int = 0  # a decay branch: the trunk's step it starts from
    stop: int = 0  # a trunk: the step it stops at (0: the run's end)


PHASES = ("pilot", "trunk", "main", "held", "confirm")


def window_steps(plans: list, start: int, stop: int) -> list[int]:
    """Per stage, its steps within start + 1 … stop (stop 0: the run's end)."""
    out, before = [], 0
    stop = stop or sum(p.steps for p in plans)
    for p in plans:
        out.append(max(0, min(before + p.steps, stop) - max(before, start)))
        before += p.steps
    return out


def job_plan(name: str, cfg: RunConfig, world: int, fsdp: bool = False, start: int = 0, stop: int = 0) -> JobPlan:
    """What a job trains and holds: its tokens and FLOPs (a branch's from `start`, a trunk's up to `stop`), memory."""
    cfg = with_vocab(cfg)
    if cfg.train.batch_size % world:  # what the run itself refuses (data/batches.py), said before it is planned
        raise ConfigError(f"train.batch_size: {cfg.train.batch_size} is not divisible by the world size {world}")
    plans = plan_stages(cfg)
    if cfg.data.train_pool_sequences:  # the pool's size is the config's (the whole split's is known once it is read)
        check_pool_repeats(cfg, cfg.data.train_pool_sequences, plans)
    totals = {"tokens": 0.0, "flops": 0.0}
    for p, n in zip(plans, window_steps(plans, start, stop), strict=True):
        cost = step_cost(cfg, p)
        totals = {k: totals[k] + cost[k] * n for k in totals}
    teacher = float(teacher_flops_per_token(cfg) * totals["tokens"])
    memory = job_memory(cfg, world, fsdp)
    return JobPlan(name, world, int(totals["tokens"]), totals["flops"], teacher, memory, start=start, stop=stop)


def cache_bytes_per_token(cfg: RunConfig, kind: str | None = None) -> int:
    """What teacher/cache.py stores per token for `kind` (default: the config's): top-k log-probs, ids and the tail, or at
    k = V the V log-probs alone; sampled, n ids and the entropy."""
    v = vocab_of(cfg)
    k, s, i = min(cfg.teacher.cache_k, v), 4 if cfg.teacher.cache_dtype == "float32" else 2, 2 if v <= 65536 else 4
    if (kind or cfg.teacher.cache_kind) == "sampled":
        return i * cfg.teacher.cache_samples + s
    return v * s if k == v else s * k + i * k + s


def cache_size_lines(cfg: RunConfig, tokens: int) -> list[str]:
    """Both kinds' size on disk for `tokens` cached tokens, the config's kind first."""
    k, n = min(cfg.teacher.cache_k, vocab_of(cfg)), cfg.teacher.cache_samples
    what = {"topk": f"top-{k} + tail" if k < vocab_of(cfg) else f"full (k = V = {k})", "sampled": f"sampled (n = {n})"}
    kinds = sorted(what, key=lambda kind: kind != cfg.teacher.cache_kind)
    return [
        f"teacher cache on disk, {what[kind]}{' (this config)' if j == 0 else ''}: "
        f"{cache_bytes_per_token(cfg, kind) * tokens / GIB:,.1f} GiB ({cache_bytes_per_token(cfg, kind)} bytes per token)"
        for j, kind in enumerate(kinds)
    ]


def amount(x: float, digits: int = 1) -> str:
    """A count for a person: grouped digits, or 3 significant ones where those would run to dozens of digits or
    round to nothing (a rate of 1e-300 tokens per hour gives 10^302 device-hours)."""
    return f"{x:,.{digits}f}" if x == 0 or 10**-digits <= abs(x) < 1e12 else f"{x:.3g}"


def flop_rate(jobs: list[JobPlan], rate: dict) -> float:
    """FLOP/s per device: the assumed peak × utilization, or what the measured tokens per device-hour of a
    distillation step (student and teacher together) imply at the study's FLOPs per token."""
    if rate.get("tokens_per_hour"):
        per_token = sum(j.student_flops + j.teacher_flops for j in jobs) / sum(j.tokens for j in jobs)
        return per_token * rate["tokens_per_hour"] / 3600
    return rate["peak_tflops"] * 1e12 * rate["mfu"]


def describe(jobs: list[JobPlan], cfgs: list[RunConfig], rate: dict, title: str) -> list[str]:
    """The plan as lines: memory of the largest job per device, device-hours online and with the teacher cache."""
    L = [title, ""]
    big = max(jobs, key=lambda j: sum(j.memory.values()))
    L.append(f"memory per device of the largest job ({big.name}, {big.world} data-parallel rank(s)):")
    for term, b in big.memory.items():
        L.append(f"  {term:40s} {b / GIB:9.2f} GiB")
    L.append(f"  {'total (lower bound: no allocator slack)':40s} {sum(big.memory.values()) / GIB:9.2f} GiB")
    L.append("")
    if rate.get("tokens_per_hour"):
        L.append(
            f"throughput: {amount(rate['tokens_per_hour'], 0)} tokens per device-hour ({rate.get('source', 'measured')})"
        )
    else:
        L.append(
            f"throughput: assumed {rate['mfu']:.0%} of {rate['peak_tflops']:g} TFLOP/s per device "
            "(not measured; pass --tokens-per-hour from benchmarks/gpu_smoke.sh)"
        )
    per_hour = flop_rate(jobs, rate) * 3600
    online = sum(j.student_flops + j.teacher_flops for j in jobs) / per_hour
    student_only = sum(j.student_flops for j in jobs) / per_hour
    biggest = max(jobs, key=lambda j: j.tokens)
    cache_tokens, teacher_once = biggest.tokens, biggest.teacher_flops
    pool = cfgs[0].data.train_pool_sequences
    if pool:  # the cache covers the pool, however long the runs train on it
        cache_tokens = pool * cfgs[0].data.seq_len
        teacher_once = teacher_flops_per_token(cfgs[0]) * cache_tokens
    with_cache = student_only + teacher_once / per_hour
    tokens = sum(j.tokens for j in jobs)
    L.append(f"{len(jobs)} run(s), {tokens:,} training tokens in all")
    L += tokens_per_param_lines(jobs, cfgs)
    L.append(f"device-hours, teacher online in every run: {amount(online)}")
    if teacher_once:
        L.append(
            f"device-hours with the teacher cache (one teacher pass over {cache_tokens:,} tokens, then the "
            f"students alone): {amount(with_cache)}"
        )
        L += cache_size_lines(cfgs[0], cache_tokens)
    L.append(
        "(device-hours are FLOPs over the rate above"
        + (
            ", the measured step split between student and teacher by their FLOPs"
            if rate.get("tokens_per_hour")
            else ""
        )
        + "; the teacher's forward counts 2 FLOPs per weight)"
    )
    return L


def arm_of(job: str) -> str:
    """'b2/pre-joint-s0' → 'b2/pre-joint': a job's name without its seed (and a pilot's rate)."""
    return re.sub(r"(-lr[0-9.e+-]+)?-s\d+$", "", job)


def tokens_per_param_lines(jobs: list[JobPlan], cfgs: list[RunConfig]) -> list[str]:
    """Each arm's training tokens per non-embedding parameter of its full-depth student (the pilot's runs left out;
    an arm's largest over its seeds), arms of equal ratio on one line, beside the paper's setting: how far a study
    trains its students, in the coordinate that compares a CPU study with the paper."""
    ratio: dict[str, float] = {}
    for j, cfg in zip(jobs, cfgs, strict=True):
        if j.phase not in ("pilot", "confirm"):
            arm = arm_of(j.name)
            ratio[arm] = max(ratio.get(arm, 0.0), j.tokens / non_embedding_params(cfg.model))
    if not ratio:
        return []
    groups: dict[str, list[str]] = {}
    for arm, r in sorted(ratio.items(), key=lambda kv: -kv[1]):
        groups.setdefault(f"{r:.2f}", []).append(arm)
    L = [
        f"training tokens per non-embedding parameter of the full-depth student (the paper's setting: "
        f"{PAPER_TOKENS_PER_PARAM:.2f}):"
    ]
    return L + [f"  {r}: {', '.join(arms)}" for r, arms in groups.items()]


def fit_micro_batch(cfg: RunConfig, world: int, fsdp: bool, limit_bytes: float) -> int | None:
    """The largest micro-batch (a divisor of the sequences one rank holds per step) whose memory estimate fits
    `limit_bytes` per device; None when not even one sequence fits."""
    local = max(1, cfg.train.batch_size // world)
    for m in sorted((d for d in range(1, local + 1) if local % d == 0), reverse=True):
        trial = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, micro_batch_size=m))
        if sum(job_memory(trial, world, fsdp).values()) <= limit_bytes:
            return m
    return None


def describe_fit(jobs: list[JobPlan], cfgs: list[RunConfig], fsdp: bool, device_gib: float) -> list[str]:
    """Gradient accumulation sized for a device: the micro-batch that fits every job, and its steps."""
    fits = [(fit_micro_batch(c, j.world, fsdp, device_gib * GIB), j, c) for j, c in zip(jobs, cfgs, strict=True)]
    worst = min(fits, key=lambda f: -1 if f[0] is None else f[0])
    micro, job, cfg = worst
    if micro is None:
        return [
            f"micro-batch for {device_gib:g} GiB per device: none fits ({job.name} needs more even at one "
            "sequence; try train.activation_checkpointing=true, --fsdp or a smaller distill.chunk_tokens)"
        ]
    local = cfg.train.batch_size // job.world
    return [
        f"micro-batch for {device_gib:g} GiB per device: {micro} sequence(s) of {cfg.data.seq_len} tokens per "
        f"rank (fits every job; {job.name} is the tightest) → {local // micro} accumulation step(s) per "
        f"optimizer step of {cfg.train.batch_size * cfg.data.seq_len:,} tokens: train.micro_batch_size={micro}"
    ]


def rate_of(tokens_per_hour: float | None, peak_tflops: float, mfu: float, source: str = "measured") -> dict:
    return {"tokens_per_hour": tokens_per_hour, "peak_tflops": peak_tflops, "mfu": mfu, "source": source}


def teacher_dtype(shape: dict) -> str:
    """ ", teacher <dtype>" for a probe shape with an online teacher (its forward is in the step), else ""."""
    t = shape.get("teacher")
    return f", teacher {t['dtype']}" if isinstance(t, dict) and t.get("dtype") else ""


def recorded_rate(rate: dict, cache_root: Path) -> dict:
    """`rate` unless it assumes a utilization on a machine whose GPU has a gpu_smoke.py record: then that record's
    distillation-step throughput (hardware.record_gpu_smoke), named as its source."""
    import torch

    if rate.get("tokens_per_hour") or not torch.cuda.is_available():
        return rate
    name = torch.cuda.get_device_name()
    record = recorded_gpu_rate(cache_root, name)
    if record is None:
        return rate
    return rate_of(
        record["tokens_per_hour"],
        rate["peak_tflops"],
        rate["mfu"],
        f"measured by benchmarks/gpu_smoke.sh on {record['device']}, {record['measured_at']}",
    )


def study_plan(study: StudyConfig, world: int | None, fsdp: bool) -> tuple[list[JobPlan], list[RunConfig]]:
    """Every job of a study (every point of a sweep, every budget of a ladder, the learning-rate pilot's runs), budgets
    matched as the runs will match them. Priced in memory: nothing is written (the directory named is notional)."""
    world = world or study.launcher.torchrun_nproc
    plans, cfgs = [], []
    root, tree = Path(study.name), shape(study)
    phased: list[tuple[str, Job]] = []
    written: dict[str, RunConfig] = {}  # config file → the config a study would write there
    if tree.pilot:  # the pilot's runs too (a rate changes no budget: the main runs cost the same)
        for sub, sub_dir in pilot_studies(study, root):
            sub_jobs = plan_jobs(sub, sub_dir)
            written |= {str(j.config_path): j.cfg for j in sub_jobs}
            phased += [("confirm" if sub_dir.name == "confirm" else "pilot", j) for j in sub_jobs]
    if tree.leaves != "plain":
        groups = sweep_plan(study, root)
        written |= {str(j.config_path): j.cfg for _, _, js in groups for j in js}
        trunks: list[Job] = []
        if tree.trunks:
            groups, trunks = branched(groups, root)
        held = budget_label(tree.holdout) if tree.holdout is not None else None
        phased += [("trunk", j) for j in trunks]
        if tree.envelope:
            groups = [(sub, sub_dir, [*jobs, *envelope_extra(sub, sub_dir)]) for sub, sub_dir, jobs in groups]
        phased += [("held" if j.point == held else "main", j) for _, _, js in groups for j in js]
    else:
        jobs = plan_jobs(study, root)
        written |= {str(j.config_path): j.cfg for j in jobs}
        if tree.envelope:
            jobs += envelope_extra(study, root)
        phased += [("main", j) for j in jobs]
    for phase, job in phased:
        cfg = priced_config(job, written)
        try:
            plans.append(job_plan(job.name, cfg, world, fsdp, job.start_step, job.stop_step))
            plans[-1].phase = phase
        except ConfigError as e:  # a run refused at planning (data.max_pool_repeats): name the job
            raise ConfigError(f"{job.name}: {e}") from None
        cfgs.append(cfg)
    return plans, cfgs


def priced_config(job: Job, written: dict[str, RunConfig]) -> RunConfig:
    """The job's config as its run resolves it: its vocabulary, and a budget matched to another job of the study from
    that job's config (the file its run reads, here found among the planned jobs); a match to anything else (a run
    or preset of the user's) is read as the run reads it."""
    cfg = with_vocab(job.cfg)
    ref = cfg.curriculum.match_budget
    if ref not in written:
        return match_budget(cfg)[0]
    ref_cfg = written[ref]
    if ref_cfg.model.vocab_size is None:  # as run.budget.reference_totals fills it
        ref_cfg = dataclasses.replace(
            ref_cfg, model=dataclasses.replace(ref_cfg.model, vocab_size=cfg.model.vocab_size)
        )
    return match_budget(cfg, planned_totals(ref_cfg))[0]


def envelope_extra(study: StudyConfig, out: Path) -> list[Job]:
    """The runs an envelope adds at one budget to those the study plans: each bracketed arm at r/2 and 2r on the
    envelope seeds (its run at r is the seed's own), at a placeholder rate (a rate changes no budget); its widening
    rounds follow from the runs and are not priced."""
    lrs = sorted(study.lr_pilot.lrs) or [1e-3]  # a placeholder without a pilot too
    lo, _, hi = bracket(lrs[len(lrs) // 2])
    point = study.name.rsplit("@", 1)[1] if "@" in study.name else ""
    return bracket_jobs(study, out, {arm: [lo, hi] for arm in bracketed(study)}, point)


def pilot_studies(study: StudyConfig, root: Path) -> list[tuple[StudyConfig, Path]]:
    """The pilot's studies whose runs are known before it runs: its first round, a ladder's check and the rate
    confirmation. The check's and the confirmation's rates follow from the pilot's choice; they are priced at the
    grid's middle rate and its neighbours (a rate changes no run's cost). Extension rounds follow from the pilot's
    outcome and are not priced."""
    out, tree = [(pilot_study(study), root / PILOT_DIR)], shape(study)
    grid = sorted(study.lr_pilot.lrs)
    mid = grid[len(grid) // 2]
    if tree.check == "run":
        three = [mid / 2, mid, mid * 2]
        out.append((check_round(study, {arm: three for arm in pilot_study(study).arms}), root / CHECK_DIR))
    if tree.confirm:
        out.append((confirm_round(study, dict.fromkeys(core_arms(study), mid)), root / CONFIRM_DIR))
    return out


def is_study(name: str) -> bool:
    """A study preset name (these take precedence over run presets of the same name) or a study YAML (has `arms`)."""
    if name in study_preset_names():
        return True
    path = Path(name)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        data = read_yaml(path)
        return isinstance(data, dict) and "arms" in data
    return False


def pilot_lines(study: StudyConfig, pilot_dir: Path, power: float = 0.8) -> list[str]:
    """What the study's seeds can resolve, from the per-seed sd of each of its contrasts in a finished pilot study."""
    if not (pilot_dir / "study.yaml").is_file() or not (pilot_dir / "results.csv").is_file():
        raise NormgrowError(f"{pilot_dir}: --pilot needs a finished study directory (study.yaml and results.csv)")
    pilot = load_study(str(pilot_dir / "study.yaml"))
    if pilot.sweep.axes:
        raise NormgrowError(f"{pilot_dir}: is a sweep study; pass one of its points (DIR/points/<label>) as --pilot")
    rows = [r for r in read_results(pilot_dir / "results.csv", runs=False) if r.kept]
    n, delta = len(study.seeds), study_roles(study.claims).margin
    have = {r.arm for r in rows}
    if not any(a in have and b in have for a, b in study.contrasts.values()):
        raise NormgrowError(
            f"--pilot {pilot_dir}: has none of this study's contrasts (its arms: {', '.join(sorted(have)) or 'none'}; "
            f"the contrasts read {', '.join(sorted({x for pair in study.contrasts.values() for x in pair}))})"
        )
    L = [
        f"Power from the pilot {pilot_dir} (budget scale {pilot.budget_scale}; this study: {study.budget_scale}), "
        f"paired over seeds, two-sided 95%, {power:.0%} power; this study plans {n} seeds, margin δ = {delta:g}:",
        "",
        "| contrast | pilot Δ (seeds) | per-seed sd [95%] | half-width at "
        f"{n} seeds | resolvable at {power:.0%} power | seeds for δ (sd at its upper end) |",
        "|---|---|---|---|---|---|",
    ]
    for name, (a, b) in study.contrasts.items():
        if a not in have or b not in have:
            missing = ", ".join(x for x in (a, b) if x not in have)
            L.append(f"| {name} | — | not in the pilot: no arm {missing} | — | — | — |")
            continue
        L.append(power_row(name, contrast(rows, a, b).diffs, n, delta, power))
    r = study_roles(study.claims)
    core = (r.pre_joint, r.post_joint, r.pre_grow, r.post_grow)
    if all(core) and all(x in have for x in core):
        joint, grow = contrast(rows, r.pre_joint, r.post_joint), contrast(rows, r.pre_grow, r.post_grow)
        both = sorted(set(joint.seeds) & set(grow.seeds))
        name = "interaction (grow gap − joint gap)"
        L.append(power_row(name, [grow.at(s) - joint.at(s) for s in both], n, delta, power))
    L += [
        "",
        "A sign claim is supported only when its interval lies beyond δ: a true contrast needs about δ + the "
        "half-width to be supported at the planned seeds.",
    ]
    return L


def power_row(name: str, diffs: list[float], n: int, delta: float, power: float) -> str:
    """One row of `plan --pilot`'s table: a contrast's per-seed differences in the pilot, and what `n` seeds resolve."""
    c = estimate(diffs)
    if c.n < 2 or not c.sd:
        mean = "—" if c.mean is None else f"{c.mean:+.4f}"
        return f"| {name} | {mean} ({c.n}) | unknown: fewer than two paired seeds | — | — | — |"
    sd, (sd_lo, sd_hi) = c.sd, sd_interval(c.sd, c.n)
    half = t_quantile(n - 1) * sd / n**0.5 if n >= 2 else None
    need, need_hi = seeds_for(delta, sd, power), seeds_for(delta, sd_hi, power)
    return (
        f"| {name} | {c.mean:+.4f} ({c.n}) | {sd:.4f} [{sd_lo:.4f}, {sd_hi:.4f}] | "
        f"{'— (one seed)' if half is None else f'{half:.4f}'} | "
        f"{'—' if n < 2 else f'{detectable(sd, n, power):.4f}'} | {need or '> 10000'} ({need_hi or '> 10000'}) |"
    )


def wall_lines(
    jobs: list[JobPlan], cfgs: list[RunConfig], parallel: int, threads: int, again: bool = False, forked: bool = False
) -> list[str]:
    """Wall time on this machine from measured step rates (normgrow.speed): each shape's probe, each arm's run,
    the study (its pilot, then its runs, `parallel` at a time), and which figures are measured or estimated.
    `forked`: the launcher forks each job from a preloaded server (launch.forks): the fresh interpreter's start-up
    once, each run the measured fork's."""
    import torch

    if any(j.world > 1 for j in jobs):
        return [
            "wall time: not measured (jobs of several ranks; measure one with benchmarks/gpu_smoke.sh and pass "
            "--tokens-per-hour)"
        ]
    device = pick_device(cfgs[0].train.device)
    step_flops = max(j.student_flops / max(1, j.tokens) for j in jobs) * cfgs[0].train.batch_size * cfgs[0].data.seq_len
    if device.type == "cpu" and step_flops > ASSUMED_CPU_FLOPS * MAX_PROBE_STEP_S:
        return [
            f"wall time: not measured (one step of the largest job is {step_flops / 1e12:,.1f} TFLOP, over "
            f"{MAX_PROBE_STEP_S} s at {ASSUMED_CPU_FLOPS / 1e9:.0f} GFLOP/s on this CPU; device-hours above are "
            "assumed)"
        ]
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        records = [
            speed.measure(dtypes.resolved(c, device, cache_root(c.data)), device, cache_root(c.data), again)
            for c in cfgs
        ]
    finally:
        torch.set_num_threads(old)
    machine = cpu_info().model if device.type == "cpu" else torch.cuda.get_device_name(device)
    L = [
        f"wall time on this machine ({machine}; {threads} thread(s) per run, {parallel} run(s) at a time):",
        "  measured here, training step (student forward/backward, loss, AdamW, and an online teacher's forward) "
        "at depth d = a + b·d:",
    ]
    L += _probe_lines(records)
    server = records[0]["startup_s"]
    if forked:
        fork = fork_seconds()
        records = [{**r, "startup_s": fork} for r in records]
        L.append(
            f"  measured here: start-up {server:.1f} s once (the launcher's server importing normgrow's training "
            f"modules, launcher.preload), then {fork:.2f} s per run (a process forked from it)"
        )
    else:
        L.append(
            f"  measured here: start-up {server:.1f} s per run (a fresh interpreter importing normgrow's training "
            "modules)"
        )
    L.append(
        "  estimated from the step rate: evaluation and diagnostics (forward passes at a third of a training "
        "token's time); not counted: checkpoints, data loading, runs slowing each other when side by side"
    )
    return L + _prediction_lines(jobs, cfgs, records, parallel, server if forked else 0.0)


def _probe_lines(records: list[dict]) -> list[str]:
    """One line per distinct shape probed: a + b·d and where the figures come from."""
    L, shown = [], set()
    for rec in records:
        key = json.dumps(rec["shape"], sort_keys=True, default=str)
        if key in shown:
            continue
        shown.add(key)
        s = rec["shape"]
        extra = (
            f"; compiled: first steps +{rec['first_extra_s']:.1f} s in the probe's process, charged to every run "
            "(a run loading a warm compile cache pays less)"
            if s["compile"]
            else ""
        )
        L.append(
            f"    {'+'.join(s['placements'])} d_model {s['model']['d_model']}, batch {s['batch']}x{s['seq_len']}, "
            f"student {s['dtype']}{teacher_dtype(s)}: a {rec['a_s'] * 1e3:.1f} ms + b {rec['b_s'] * 1e3:.1f} ms/block "
            f"({rec['step_full_s'] * 1e3:.1f} ms at {rec['depth']} blocks{extra}; "
            f"{'cached ' + rec['measured_at'] if rec['cached'] else 'measured now'})"
        )
    return L


def _prediction_lines(
    jobs: list[JobPlan], cfgs: list[RunConfig], records: list[dict], parallel: int, once: float = 0.0
) -> list[str]:
    """Each arm's predicted run time and the study's wall time (the pilot first, then the runs; `once` seconds
    before them all: a fork server's start-up)."""
    per_job = [
        speed.predict_run(c, plan_stages(c), r, j.start, j.stop)["total_s"]
        for j, c, r in zip(jobs, cfgs, records, strict=True)
    ]
    by_phase = {ph: [s for j, s in zip(jobs, per_job, strict=True) if j.phase == ph] for ph in PHASES}
    pilot, trunks = by_phase["pilot"], by_phase["trunk"]
    by_arm: dict[str, list[float]] = {}
    for j, sec in zip(jobs, per_job, strict=True):
        if j.phase in ("main", "held"):
            by_arm.setdefault(arm_of(j.name), []).append(sec)
    runs = [
        *([f"pilot {min(pilot):,.0f}–{max(pilot):,.0f} s ({len(pilot)} runs)"] if pilot else []),
        *([f"trunks {min(trunks):,.0f}–{max(trunks):,.0f} s ({len(trunks)})"] if trunks else []),
        *(f"{arm} {sum(v) / len(v):,.0f} s" for arm, v in by_arm.items()),
    ]
    wall = {ph: speed.schedule(v, parallel) if v else 0.0 for ph, v in by_phase.items()}  # phase after phase
    parts = [f"{ph} {wall[ph] / 60:,.1f} min" for ph in PHASES if by_phase[ph]]
    return [
        "  per run (mean over the arm's runs): " + "; ".join(runs),
        f"  predicted wall time: {(once + sum(wall.values())) / 60:,.1f} min"
        + (f" ({', then '.join(parts)})" if len(parts) > 1 else "")
        + "; the teacher and its cache, when not built yet, come on top",
    ]


ASSUMED_CPU_FLOPS = 20e9  # only to decide whether a probe step is affordable here
MAX_PROBE_STEP_S = 20
