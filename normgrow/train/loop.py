"""The one training loop: a student distilled from a teacher through the stages of a curriculum.

    train(inputs, out):
        run ← open_run(inputs, out)        student, optimizer, data, evaluation sets; on resume the growth
                                           events are replayed (growth.restore: the same path as in a fresh
                                           run), then the latest checkpoint is loaded
        for each remaining stage:
            start_stage(run, plan)         growth_event (every stage after the first: growth.grow_student,
                                           logged); evaluate; diagnose
            while steps remain:
                lr ← lr_at(tokens)
                train_step(…)              batch → teacher → loss → backward → clip → step
                end_step(run, …)           compute accounting; log / evaluate / diagnose / checkpoint when due:
                                           the stage's last step a full evaluation (val/… and curve/…); a
                                           step of the dense window after growth (train.dense_eval_steps,
                                           every train.dense_eval_every) curve/… and a diagnosis, event
                                           `dense`; else every train.eval_every_tokens curve/…, event `eval`
        write_summary(run)

The growth event itself (new blocks, what trains, the optimizer state carried over, its measurement) is in
train/growth.py; evaluation (validation, model selection, the diagnostics' probe) in train/evaluate.py; the step itself
(autocast, micro-batches, the optimizer, DDP and compiled blocks) in train/step.py; the lr schedule and what is due after
each step in train/cadence.py.

Everything a run writes goes into its run directory (train/rundir.py). Running again on an existing run
directory resumes from its latest checkpoint: the events logged after that checkpoint are dropped
and recomputed, so a killed-and-resumed run writes the same metrics as an uninterrupted one
(bitwise on a CPU with the same thread count). Under `torchrun` every rank trains on its slice of
each global batch (DDP; gloo on CPU, NCCL on GPU); rank 0 alone writes. The loss is a per-token
mean over the global batch, whatever the split (see `step.train_step`).

The loop consumes `RunInputs` (the resolved config, data, teacher or its cache, device), built by run/pipeline.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import transformers

from normgrow.config import RunConfig
from normgrow.data import BatchIterator, Prepared, n_sequences, train_pool
from normgrow.errors import ConfigError, NormgrowError
from normgrow.locks import DirLock
from normgrow.nn.losses import SampledTeacher, SparseTeacher, TeacherChunks
from normgrow.nn.model import Student
from normgrow.parallel import dist, sharding
from normgrow.progress import Bar, progress_bar
from normgrow.teacher.cache import TeacherCache
from normgrow.teacher.load import Teacher, copy_embeddings
from normgrow.train import checkpoint
from normgrow.train.branch import seed_branch
from normgrow.train.cadence import DENSE, INTERVAL, STAGE_END, due, lr_at, schedule_span
from normgrow.train.diagnostics import boundary_summary
from normgrow.train.evaluate import Evaluator, open_evaluator
from normgrow.train.growth import StagePlan, grow_student, restore, set_trainable, stage_student, val_jumps
from normgrow.train.rundir import MetricsWriter, RunDir, check_loggers, open_run_dir
from normgrow.train.stages import plan_stages, step_cost, tokens_per_step
from normgrow.train.step import NonFinite, build_optimizer, check_micro_batch, train_step, uses_fsdp, wrap_for_training
from normgrow.version import __version__


class TrainingDiverged(NormgrowError):
    """The loss or gradient became NaN/inf."""


@dataclass
class RunInputs:
    """Everything a run consumes besides its directory (built by pipeline.build_inputs)."""

    cfg: RunConfig  # resolved: vocabulary size and matched budgets filled in
    info: dist.DistInfo
    prep: Prepared
    teacher: Teacher | None  # the online teacher; validation always uses it
    cache: TeacherCache | None = None  # a teacher cache the training loss reads instead, when configured
    budget_match: dict | None = None

    def train_teacher(
        self, x: torch.Tensor, index: torch.Tensor
    ) -> TeacherChunks | SparseTeacher | SampledTeacher | None:
        """The teacher's distribution for training inputs x (b, T), the sequences `index` of the split."""
        if self.cache is not None:
            return self.cache.teacher_rows(index, self.info.device)
        return self.teacher.chunks(x) if self.teacher is not None else None


# ----------------------------------------------------------------------------- run state


@dataclass
class RunState:
    """Where a run stands; saved in every checkpoint's state.json and restored on resume."""

    step: int = 0
    tokens: int = 0
    active_layer_tokens: int = 0
    trainable_layer_tokens: int = 0
    flops: float = 0.0
    stage: int = 0  # the stage being trained
    stage_step: int = 0  # optimizer steps done in it
    stages: list[dict] = field(default_factory=list)  # per started stage: plan, growth record, start/end evals
    wall_time_s: float = 0.0
    data: dict = field(default_factory=dict)  # the batch iterator's position
    metrics_lines: int = 0  # events in metrics.jsonl / diagnostics.jsonl at the checkpoint
    diagnostics_lines: int = 0
    time_s: dict = field(default_factory=dict)  # wall seconds by part: train, eval, diagnostics, growth, checkpoint

    COMPUTE = ("step", "tokens", "active_layer_tokens", "trainable_layer_tokens", "flops")

    @classmethod
    def from_json(cls, d: dict) -> RunState:
        return cls(**{f.name: d[f.name] for f in dataclasses.fields(cls) if f.name in d})

    def add(self, cost: dict[str, float]) -> None:
        """Count one optimizer step of a stage costing `cost` (stages.step_cost)."""
        self.step += 1
        self.stage_step += 1
        for k, v in cost.items():
            setattr(self, k, getattr(self, k) + v)


@dataclass
class Run:
    """A run in progress: its inputs, directory, model, optimizer, data and state."""

    inputs: RunInputs
    out: Path
    plans: list[StagePlan]
    model: Student
    optimizer: torch.optim.AdamW
    step_fn: torch.nn.Module  # what the step calls: the model, wrapped for DDP and/or compiled
    batches: BatchIterator
    evals: Evaluator  # the validation, model-selection and probe sets, and the measurements on them
    writer: MetricsWriter
    state: RunState
    say: Callable[[str], None]
    t_start: float = 0.0
    lock: DirLock | None = None  # held by rank 0 while the run is open

    @property
    def cfg(self) -> RunConfig:
        return self.inputs.cfg

    def record(self, event: str, metrics: dict) -> dict:
        """Write one event to metrics.jsonl with the run's position."""
        st = self.state
        rec = {
            "step": st.step,
            "tokens": st.tokens,
            "active_layer_tokens": st.active_layer_tokens,
            "trainable_layer_tokens": st.trainable_layer_tokens,
            "flops": st.flops,
            "n_layer": self.model.depth,
            "stage": st.stage,
            "event": event,
            **metrics,
        }
        self.writer.write(rec)
        return rec

    @contextlib.contextmanager
    def timed(self, part: str):
        """Add the wall time of the block to `state.time_s[part]` (the summary's breakdown)."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.state.time_s[part] = self.state.time_s.get(part, 0.0) + time.perf_counter() - t0

    def evaluate(self, per_sequence: list[float] | None = None) -> dict[str, float]:
        """val/… on the validation set, and curve/… on its curve subset from the same pass (`per_sequence`: filled
        with each validation sequence's mean ce)."""
        with self.timed("eval"):
            return self.evals.validation(self.model, per_sequence)

    def evaluate_curve(self) -> dict[str, float]:
        """curve/… on the curve subset alone (an interval or dense evaluation)."""
        with self.timed("eval"):
            return self.evals.curve_point(self.model)

    def evaluate_selection(self) -> dict[str, float]:
        """select/… on the model-selection set."""
        with self.timed("eval"):
            return self.evals.selection(self.model)

    def diagnose(self, event: str) -> None:
        """Diagnostics on the probe batch (rank 0), appended to diagnostics.jsonl."""
        model = self.evals.probe_student(self.model, self.plans[self.state.stage])  # every rank gathers a sharded one
        if model is None:
            return
        with self.timed("diagnostics"):
            rec = self.evals.diagnostics(model)
        st = self.state
        head = {
            "step": st.step,
            "tokens": st.tokens,
            "active_layer_tokens": st.active_layer_tokens,
            "n_layer": self.model.depth,
            "stage": st.stage,
            "event": event,
        }
        RunDir(self.out).append_diagnostics({**head, **rec})
        st.diagnostics_lines += 1

    def save(self) -> None:
        """A checkpoint of the model, optimizer, RNG and state (rank 0 writes; every rank waits)."""
        with self.timed("checkpoint"):
            self._save()

    def _save(self) -> None:
        st = self.state
        st.data = self.batches.state_dict()
        st.wall_time_s = time.perf_counter() - self.t_start
        st.metrics_lines = self.writer.lines
        if sharding.is_sharded(self.model):  # full weights and an ordinary optimizer state, as an unsharded run writes
            weights = sharding.full_weights(self.model, rank0_only=True)
            optim = sharding.full_optimizer_state(self.model, self.optimizer, rank0_only=True)
        else:
            weights, optim = self.model.state_dict(), self.optimizer.state_dict()
        if self.inputs.info.is_main:
            stage_ends = frozenset(sum(p.steps for p in self.plans[: i + 1]) for i in range(len(self.plans)))
            per_step = tokens_per_step(self.cfg)
            kept = frozenset(
                n // per_step for n in (*self.cfg.train.checkpoint_tokens, self.cfg.train.stop_tokens) if n
            )
            checkpoint.save(
                RunDir(self.out).checkpoints,
                st.step,
                weights,
                optim,
                dataclasses.asdict(st),
                keep=self.cfg.train.keep_checkpoints,
                protected=stage_ends | kept,
            )
        dist.barrier()


# ----------------------------------------------------------------------------- opening and resuming


def build_student(inputs: RunInputs, plan: StagePlan) -> Student:
    """The student at the first stage's depth, initialized from the run's seed."""
    cfg = inputs.cfg
    torch.manual_seed(cfg.seed)
    model = stage_student(cfg, plan).to(inputs.info.device)
    model.activation_checkpointing = cfg.train.activation_checkpointing
    if cfg.model.init_embeddings == "teacher":
        assert inputs.teacher is not None  # validate: init_embeddings=teacher needs a teacher
        copy_embeddings(model, inputs.teacher)
    return model


def check_stops(cfg: RunConfig, plans: list[StagePlan]) -> None:
    """train.stop_tokens before the run's end, train.checkpoint_tokens within it."""
    total = sum(p.tokens for p in plans)
    if cfg.train.stop_tokens >= total:
        raise ConfigError(
            f"train.stop_tokens: {cfg.train.stop_tokens:,} is not before the run's end ({total:,} tokens)"
        )
    beyond = [n for n in cfg.train.checkpoint_tokens if n > total]
    if beyond:
        raise ConfigError(f"train.checkpoint_tokens: {beyond[0]:,} is beyond the run's end ({total:,} tokens)")


def open_run(inputs: RunInputs, out: Path, log: Callable[[str], None]) -> Run:
    """Build everything the loop needs; create the run directory, or resume the run it holds."""
    cfg, info = inputs.cfg, inputs.info
    say = log if info.is_main else (lambda *_: None)
    plans = plan_stages(cfg)
    check_stops(cfg, plans)
    model = build_student(inputs, plans[0])
    set_trainable(model, plans[0])
    pool = train_pool(n_sequences(inputs.prep.train, cfg.data.seq_len), cfg.data.train_pool_sequences)
    batches = BatchIterator(
        inputs.prep.train, cfg.data.seq_len, cfg.train.batch_size, cfg.seed, info.rank, info.world_size, pool=pool
    )
    check_micro_batch(cfg, info)
    evals = open_evaluator(inputs.prep, cfg, info, inputs.teacher)
    check_loggers(cfg)
    # everything that can fail on bad input has been checked: now the run directory may be created, and is
    # locked (rank 0) until the run ends, so no second trainer can write into it
    lock = None
    if info.is_main:
        resume = open_run_dir(out, cfg)
        lock = DirLock(out, "run").acquire()
    try:
        run = _open_locked(
            inputs, out, say, plans, model, batches, evals, dist.broadcast_object(resume if info.is_main else True)
        )
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    run.lock = lock
    return run


def _open_locked(
    inputs: RunInputs,
    out: Path,
    say: Callable[[str], None],
    plans: list[StagePlan],
    model: Student,
    batches: BatchIterator,
    evals: Evaluator,
    resume: bool,
) -> Run:
    """The rest of open_run, once the run directory is ours: resume from its newest intact checkpoint or
    start afresh."""
    cfg, info = inputs.cfg, inputs.info
    dist.barrier()
    latest = None
    if resume:  # the newest checkpoint that verifies (rank 0 checks; every rank resumes from the same one)
        found = checkpoint.latest_intact(RunDir(out).checkpoints, say) if info.is_main else None
        found = dist.broadcast_object(str(found) if found else "")
        latest = Path(found) if found else None
    if latest is None and cfg.train.init_from:  # a decay branch: its directory seeded from the trunk's checkpoint
        seeded = seed_branch(cfg.train.init_from, out, cfg, plans, say) if info.is_main else None
        latest = Path(dist.broadcast_object(str(seeded)))
    state = RunState()
    if latest is not None:
        state, optimizer = resume_from(latest, model, plans, batches, inputs, out)
        say(f"resuming {out} from {latest.name} (stage {state.stage}, {state.tokens:,} tokens)")
    else:
        if uses_fsdp(cfg, info):
            sharding.shard(model)
        optimizer = build_optimizer(model, cfg, info.device)
        if info.is_main:
            RunDir(out).clear_logs()
    writer = MetricsWriter(out, cfg, info.is_main)
    run = Run(
        inputs, out, plans, model, optimizer, wrap_for_training(model, info, cfg), batches, evals, writer, state, say
    )
    run.t_start = time.perf_counter() - state.wall_time_s
    return run


def resume_from(
    ckpt: Path, model: Student, plans: list[StagePlan], batches: BatchIterator, inputs: RunInputs, out: Path
) -> tuple[RunState, torch.optim.AdamW]:
    """Restore a checkpoint: its student and optimizer (growth.restore replays the growth events up to its
    stage, the same path as a fresh run), RNG and data position, and drop the events logged after it."""
    cfg, info = inputs.cfg, inputs.info
    model_sd, optim_sd, rng, raw = checkpoint.load(ckpt, map_location=info.device)
    state = RunState.from_json(raw)
    optimizer = restore(model, plans, state.stage, cfg, model_sd, optim_sd, info.device, uses_fsdp(cfg, info))
    checkpoint.restore_rng(rng)
    batches.load_state_dict(state.data)
    if info.is_main:
        RunDir(out).keep_events(state.metrics_lines, state.diagnostics_lines)
    return state, optimizer


# ----------------------------------------------------------------------------- stages and growth


def stage_started(state: RunState, plan: StagePlan) -> bool:
    """Has this stage begun (a resumed run continues it rather than starting it again)?"""
    return state.stage == plan.index and state.stage_step > 0


def start_stage(run: Run, plan: StagePlan) -> None:
    """Open a stage: its growth event (every stage after the first), evaluation and diagnostics."""
    st = run.state
    growth = None
    if plan.index > 0:
        with run.timed("growth"):
            growth = growth_event(run, plan)
    st.stage, st.stage_step = plan.index, 0
    measured = run.evaluate()
    start = validation_only(measured)
    if growth is not None:
        growth.update(val_jumps(start, st.stages[-1]["end"]))
        run.record("growth", growth)
    run.record("stage_start", measured)
    run.diagnose("stage_start")
    st.stages.append(
        {
            "index": plan.index,
            "n_layer": plan.n_layer,
            "steps": plan.steps,
            "tokens": plan.tokens,
            "train_blocks": list(plan.train_blocks),
            "provenance": list(plan.provenance),
            "growth": growth,
            "start": start,
        }
    )


def growth_event(run: Run, plan: StagePlan) -> dict:
    """Grow the student into this stage (growth.grow_student: new blocks, what trains, the optimizer state
    carried over, the logit change on a fixed batch) and wrap it again for DDP / compile. The model just
    before growth is the one evaluated at the end of the previous stage, so that evaluation is logged again
    as the `pre_growth` event."""
    run.record("pre_growth", run.state.stages[-1]["end"])
    run.model, run.optimizer, record = grow_student(
        run.model, run.optimizer, run.plans[plan.index - 1], plan, run.cfg, run.inputs.info.device, run.evals.val
    )
    run.step_fn = wrap_for_training(run.model, run.inputs.info, run.cfg)
    return record


# ----------------------------------------------------------------------------- the loop


def validation_only(metrics: dict[str, float]) -> dict[str, float]:
    """The val/… entries of a full evaluation: what the stage records (summary.json, growth jumps) keep."""
    return {k: v for k, v in metrics.items() if k.startswith("val/")}


class Throughput:
    """Tokens per second between two train-log events."""

    def __init__(self):
        self.t, self.tokens = time.perf_counter(), 0

    def rate(self) -> float:
        now = time.perf_counter()
        tps = self.tokens / max(now - self.t, 1e-9)
        self.t, self.tokens = now, 0
        return tps


def train_stage(run: Run, plan: StagePlan, bar: Bar) -> None:
    """The remaining steps of one stage."""
    cfg, st = run.cfg, run.state
    sched_start, sched_len = schedule_span(run.plans, plan.index, cfg)
    cost = step_cost(cfg, plan)
    speed = Throughput()
    while st.stage_step < plan.steps and not stopped(run):
        lr = lr_at(st.tokens, cfg, sched_start, sched_len)
        try:
            with run.timed("train"):
                batch, inputs = next(run.batches), run.inputs
                loss, grad_norm = train_step(
                    run.model, run.step_fn, run.optimizer, batch, cfg, inputs.info, inputs.train_teacher, lr
                )
        except NonFinite as e:
            last = checkpoint.latest(RunDir(run.out).checkpoints)
            raise TrainingDiverged(
                f"non-finite {e.what} at step {st.step + 1} (train/loss={e.loss}); last good "
                f"checkpoint: {last if last else 'none'}"
            ) from None
        st.add(cost)
        speed.tokens += cost["tokens"]
        bar.update(1)
        end_step(run, plan, {"train/loss": loss, "train/grad_norm": grad_norm.item(), "lr": lr}, speed, bar)


def stopped(run: Run) -> bool:
    """Has the run reached train.stop_tokens (a trunk: the step it stops at is checkpointed by `due`)?"""
    return bool(run.cfg.train.stop_tokens) and run.state.tokens >= run.cfg.train.stop_tokens


def end_step(run: Run, plan: StagePlan, train_metrics: dict, speed: Throughput, bar: Bar) -> None:
    """What is due after a step (cadence.due): train log, evaluation (and the stage end), diagnostics, checkpoint."""
    st = run.state
    now = due(run.cfg, plan, len(run.plans), st.stage_step, st.step, st.tokens)
    if now.log:
        tps = speed.rate()
        run.record("train", {**train_metrics, "perf/tokens_per_s": tps})
        bar.set_postfix(loss=f"{train_metrics['train/loss']:.4f}", tok_s=f"{tps:,.0f}", depth=plan.n_layer)
    if now.evaluation == STAGE_END:
        seqs: list[float] | None = [] if plan is run.plans[-1] else None  # the final evaluation: per sequence too
        measured = run.evaluate(seqs)
        run.record("stage_end", measured)
        run.diagnose("stage_end")
        st.stages[-1]["end"] = validation_only(measured)
        st.stages[-1].update({PER_SEQUENCE: seqs} if seqs else {})
    elif now.evaluation == DENSE:
        run.record("dense", run.evaluate_curve())
        run.diagnose("dense")
    elif now.evaluation == INTERVAL:
        run.record("eval", run.evaluate_curve())
    if now.select:  # the selection set, once, at the end
        sel = run.evaluate_selection()
        run.record("select", sel)
        st.stages[-1]["select"] = sel
    if now.diagnosis:
        run.diagnose("interval")
    if now.checkpoint:
        run.save()


def train(inputs: RunInputs, out_dir: str | Path, log: Callable[[str], None] = print, progress: bool = True) -> dict:
    """Train (or resume) one run into `out_dir`; returns its summary."""
    run = open_run(inputs, Path(out_dir), log)
    bar = progress_bar(
        sum(p.steps for p in run.plans),
        desc=run.cfg.name or run.out.name,
        unit="step",
        enabled=progress and inputs.info.is_main,
        initial=run.state.step,
    )
    try:
        try:
            for plan in run.plans[run.state.stage :]:
                if stopped(run):
                    break
                if not stage_started(run.state, plan):
                    start_stage(run, plan)
                train_stage(run, plan, bar)
        finally:
            bar.close()
            run.writer.close()
        if stopped(run):  # a trunk: no final evaluation, no summary; its checkpoint is what its branches start from
            log(f"{run.out}: stopped at {run.state.tokens:,} tokens (train.stop_tokens), checkpointed")
            return {
                "stopped": True,
                "compute": {k: getattr(run.state, k) for k in RunState.COMPUTE},
                "wall_time_s": 0.0,
            }
        return write_summary(run)
    finally:
        if run.lock is not None:
            run.lock.release()


# ----------------------------------------------------------------------------- summary


def versions() -> dict:
    return {
        "normgrow": __version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
    }


PER_SEQUENCE = "val/ce_per_sequence"  # the final evaluation's mean ce of each validation sequence (their mean: val/ce)


def write_summary(run: Run) -> dict:
    """summary.json: final metrics, compute totals, stages, boundaries, provenance (rank 0 writes)."""
    inputs, st, cfg = run.inputs, run.state, run.cfg
    teacher, tcache, prep = inputs.teacher, inputs.cache, inputs.prep
    final = st.stages[-1]["end"]
    summary = {
        **final,
        "final": final,
        "ce_source": (
            f"online teacher, full vocabulary ({cfg.model.vocab_size} tokens)"
            if teacher is not None
            else "no teacher (next-token training): only val/nll"
        ),
        "train_teacher": (
            tcache.describe()
            if tcache is not None
            else "online teacher, full vocabulary"
            if teacher is not None
            else None
        ),
        "select": st.stages[-1].get("select"),
        PER_SEQUENCE: st.stages[-1].get(PER_SEQUENCE),
        "compute": {k: getattr(st, k) for k in RunState.COMPUTE},
        "stages": [{k: v for k, v in s.items() if k != PER_SEQUENCE} for s in st.stages],
        "boundaries": (boundary_summary(RunDir(run.out).diagnostics(), st.stages) if inputs.info.is_main else None),
        "budget_match": inputs.budget_match,
        "n_layer": run.model.depth,
        "teacher": teacher.report if teacher is not None else None,
        "data": {
            "shards": str(prep.dir),
            "train_tokens": prep.meta["n_tokens"]["train"],
            "val_split_tokens": prep.meta["n_tokens"]["val"],
            "val_eval_tokens": int(run.evals.val.shape[0] * cfg.data.seq_len),
        },
        "data_pool": run.batches.usage(),
        "init": run.model.init_record(),
        "versions": versions(),
        "world_size": inputs.info.world_size,
        "wall_time_s": time.perf_counter() - run.t_start,
    }
    parts = {k: round(v, 2) for k, v in sorted(st.time_s.items())}
    summary["time_s"] = {**parts, "other": round(summary["wall_time_s"] - sum(st.time_s.values()), 2)}
    if inputs.info.is_main:
        RunDir(run.out).write_summary(summary)
    dist.barrier()
    return summary
