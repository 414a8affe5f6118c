"""How fast this machine runs a run's training step: the measured probe behind `normgrow plan`.

A step's time depends on the student's shape (width, heads, vocabulary, sequence length, micro-batch), its
dtype and compile setting, the loss, the teacher's form (online: its forward; cached: k log-probs per token)
and the threads; its depth enters linearly (every block costs the same). So the probe times, in this process,
the training step of a run's shape at depth 1 and at full depth — the student's forward, the chunked
distillation loss against a teacher distribution of the run's form (random numbers: time does not depend on
their values), backward, gradient clipping and AdamW, exactly the operations `train.train_step` runs — and,
for an online teacher of known shape (teacher.teacher_shape), that teacher's forward (a pre-norm Qwen3 of its
shape in its dtype). A step at depth d is then a + b·d from the two.

What is measured and what is not, as `plan` prints it: the step rate is measured; evaluation and diagnostics
are estimated from it (their forward passes at a third of a training step's per-token time); process start-up
is measured once (importing normgrow's training modules in a fresh interpreter). Compiled blocks: the probe's
first steps include this process's compilation (from the compile cache when it is warm), printed separately.

Each shape's measurement is kept under `<cache>/hardware/speed-<machine>-<shape>.json` (best effort), so a
second `plan` reuses it; `--remeasure` measures again.

The same step, built in float32 and under bfloat16 autocast, decides `dtype: auto` on a CPU with native
bfloat16 (auto_dtypes): the student's step and an online teacher's forward, timed in turn, each bfloat16 only
where it is STEP_MIN_SPEEDUP times faster; kept under `<cache>/hardware/dtype-<machine>-<shape>.json`. A study
writes that verdict before its runs start (study.runner.resolve_auto_dtypes), and a run directory keeps the
dtypes its run started with (pipeline.keep_saved_dtypes).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from normgrow import atomic, dist
from normgrow.config import RunConfig
from normgrow.evaluate import autocast
from normgrow.growth import build_optimizer
from normgrow.hardware import cpu_info, fast_dtype, machine_key
from normgrow.losses import SparseTeacher, TeacherChunks, distill_loss, tail_logsumexp
from normgrow.model import Decoder, PreNormBlock, Student, placement_of
from normgrow.teacher import teacher_shape
from normgrow.train import crossed, wrap_for_training
from normgrow.version import __version__

WARMUP_STEPS, TIMED_STEPS = 2, 9  # the median of 9: 4 left a 30 % spread between processes (docs/LOG.md)
DTYPE_WARMUP, DTYPE_TIMED = 2, 5
STEP_MIN_SPEEDUP = 1.2  # bfloat16 must pay for its rounding: a fifth faster than float32 on the run's own work
_MEASURED: dict[str, dict] = {}  # this process's measurements by shape key


def resolved(cfg: RunConfig, device: torch.device, cache_root: Path) -> RunConfig:
    """The config with `auto` dtypes resolved as a run on this machine resolves them."""
    return resolve_auto(cfg, device, cache_root)[0]


def shape_of(cfg: RunConfig, device: torch.device) -> dict:
    """Everything a step's time depends on, but the depth and placements' order (the probe's cache key)."""

    m, t = cfg.model, cfg.teacher
    shape = teacher_shape(cfg) if not t.cache and t.path != "none" else None
    return {
        "model": {
            k: getattr(m, k)
            for k in (
                "d_model",
                "n_head",
                "n_kv_head",
                "head_dim",
                "d_ff",
                "vocab_size",
                "qk_norm",
                "final_norm",
                "tie_embeddings",
            )
        },
        "placements": sorted(set(full_placements(cfg))),
        "seq_len": cfg.data.seq_len,
        "batch": cfg.train.batch_size,
        "micro_batch": cfg.train.micro_batch_size or cfg.train.batch_size,
        "dtype": cfg.train.dtype,
        "compile": cfg.train.compile,
        "activation_checkpointing": cfg.train.activation_checkpointing,
        "loss": [cfg.distill.loss, cfg.distill.chunk_tokens, cfg.distill.nll_weight > 0],
        "teacher": (
            "none"
            if t.path == "none"
            else {"cache_k": min(t.cache_k, m.vocab_size), "cache_dtype": t.cache_dtype}
            if t.cache
            else {
                "shape": None
                if shape is None
                else {k: getattr(shape, k) for k in ("n_layer", "d_model", "n_head", "n_kv_head", "head_dim", "d_ff")},
                "dtype": t.dtype,
            }
        ),
        "threads": torch.get_num_threads(),
        "device": device.type,
        "torch": torch.__version__,
    }


def full_placements(cfg: RunConfig) -> list[str]:

    return [placement_of(cfg.model, i) for i in range(cfg.model.n_layer)]


def synthetic_teacher(cfg: RunConfig, n: int, device: torch.device):
    """A teacher distribution of the run's form for n tokens: k = V log-probs, top-k with ids and tail, or None."""

    V = cfg.model.vocab_size
    logp = torch.log_softmax(torch.randn(n, V, device=device), dim=-1)
    k = min(cfg.teacher.cache_k, V)
    if k >= V:
        return SparseTeacher(logp, None, None)
    top, ids = logp.topk(k, dim=-1)
    return SparseTeacher(top, ids, tail_logsumexp(logp, ids))


def _online_teacher(cfg: RunConfig, device: torch.device, dtype: str) -> Decoder | None:
    """A pre-norm Qwen3 of the run's online teacher's shape in `dtype` (None: no online teacher of known shape)."""

    shape = teacher_shape(cfg) if not cfg.teacher.cache and cfg.teacher.path != "none" else None
    if shape is None:
        return None
    shape = dataclasses.replace(shape, final_norm=True, vocab_size=probe_vocab(cfg))
    teacher = Decoder(shape, [PreNormBlock] * shape.n_layer, cfg.data.seq_len).to(device).eval()
    return teacher.to(getattr(torch, dtype)) if dtype in ("bfloat16", "float16") else teacher


def probe_vocab(cfg: RunConfig) -> int:
    """The vocabulary a probe uses: the resolved one, else the one the data config asks its tokenizer for."""
    return cfg.model.vocab_size or cfg.data.vocab_size


def build_step(cfg: RunConfig, depth: int, device: torch.device, online_teacher: bool = True):
    """One training step of `cfg`'s shape at `depth` blocks (the first `depth` of the full-depth placements), as a
    function of no arguments: an online teacher's forward (when `online_teacher` and its shape is known, else a
    teacher distribution of the run's form), the student's forward, the chunked loss, backward, clipping, AdamW."""

    torch.manual_seed(0)
    model = dataclasses.replace(cfg.model, vocab_size=probe_vocab(cfg))
    cfg = dataclasses.replace(cfg, model=model)
    student = Student(model, depth=depth, max_seq_len=cfg.data.seq_len, placements=full_placements(cfg)[:depth]).to(
        device
    )
    student.activation_checkpointing = cfg.train.activation_checkpointing
    optimizer = build_optimizer(student, cfg, device)
    info = dist.DistInfo(rank=0, world_size=1, local_rank=0, device=device)
    step_fn = wrap_for_training(student, info, cfg)
    teacher = _online_teacher(cfg, device, cfg.teacher.dtype) if online_teacher else None
    B, T = cfg.train.batch_size, cfg.data.seq_len
    mb = cfg.train.micro_batch_size or B
    x = torch.randint(0, model.vocab_size, (B, T + 1), device=device)
    d = cfg.distill

    def step() -> None:
        for part in x.split(mb):
            inp, tgt = part[:, :-1], part[:, 1:].reshape(-1)
            if teacher is not None:
                with torch.no_grad():
                    hidden = teacher.hidden(inp)
                t_dist = TeacherChunks(hidden.reshape(-1, hidden.shape[-1]), teacher.lm_head.weight)
            elif cfg.teacher.path != "none":
                t_dist = synthetic_teacher(cfg, inp.numel(), device)
            else:
                t_dist = None
            with autocast(cfg, device):
                h = step_fn(inp, hidden_only=True)
            loss = distill_loss(
                h.reshape(-1, h.shape[-1]),
                student.lm_head.weight,
                t_dist,
                tgt,
                n_tokens=B * T,
                kind=d.loss,
                temperature=d.temperature,
                jsd_beta=d.jsd_beta,
                nll_weight=d.nll_weight,
                chunk=d.chunk_tokens,
            )
            loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in student.parameters() if p.requires_grad], 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()

    return step


def time_steps(cfg: RunConfig, depth: int, device: torch.device) -> dict:
    """Seconds of the first WARMUP_STEPS steps (allocation, compilation) and the median of TIMED_STEPS more, of a
    student of `depth` blocks (build_step)."""

    step = build_step(cfg, depth, device)
    times = []
    for _ in range(WARMUP_STEPS + TIMED_STEPS):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return {"first_s": sum(times[:WARMUP_STEPS]), "step_s": statistics.median(times[WARMUP_STEPS:])}


def _alternate(fns: dict[str, Callable[[], object]], warmup: int, timed: int) -> dict[str, float]:
    """Median seconds of each function, called in turn (so they share the machine's noise) after `warmup` rounds."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for i in range(warmup + timed):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            if i >= warmup:
                times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def dtype_key(cfg: RunConfig, device: torch.device) -> dict:
    """What the dtype probe's verdict depends on: the step's shape without its dtypes and compile setting."""
    shape = shape_of(
        dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, vocab_size=probe_vocab(cfg))), device
    )
    shape.pop("dtype"), shape.pop("compile")
    if isinstance(shape["teacher"], dict):
        shape["teacher"].pop("dtype", None)
    return shape


def probe_dtypes(cfg: RunConfig, device: torch.device) -> dict:
    """The run's own work timed in float32 and under bfloat16 autocast, eagerly, in this process: the student's
    training step at full depth (against a teacher distribution of the run's form, so the teacher is not in it)
    and, for an online teacher of known shape, that teacher's forward over one batch; each in turn, medians."""

    def with_dtype(dtype: str) -> RunConfig:
        return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, dtype=dtype, compile=False))

    steps = {
        k: build_step(with_dtype(k), cfg.model.n_layer, device, online_teacher=False) for k in ("float32", "bfloat16")
    }
    student = _alternate(steps, DTYPE_WARMUP, DTYPE_TIMED)
    record = {"student_float32_s": student["float32"], "student_bfloat16_s": student["bfloat16"]}
    teachers = {k: _online_teacher(cfg, device, k) for k in ("float32", "bfloat16")}
    if teachers["float32"] is not None:
        x = torch.randint(0, probe_vocab(cfg), (cfg.train.batch_size, cfg.data.seq_len), device=device)

        def forward(teacher: Decoder) -> Callable[[], object]:
            def run() -> object:
                with torch.no_grad():
                    h = teacher.hidden(x)
                    return TeacherChunks(h.reshape(-1, h.shape[-1]), teacher.lm_head.weight).logits(slice(0, None))

            return run

        teacher = _alternate({k: forward(t) for k, t in teachers.items()}, DTYPE_WARMUP, DTYPE_TIMED)
        record |= {"teacher_float32_s": teacher["float32"], "teacher_bfloat16_s": teacher["bfloat16"]}
    return record


def auto_dtypes(cfg: RunConfig, device: torch.device, cache_root: Path) -> tuple[str, str, dict]:
    """(student dtype, teacher dtype, the record behind them) that `auto` resolves to for `cfg` on `device`.

    Where the machine rule (hardware.fast_dtype) says float32, or on a GPU, both follow it. On a CPU whose bare
    bfloat16 matmul is fast, the run's own work decides (probe_dtypes): the student's step and the teacher's
    forward each take bfloat16 only if it is at least STEP_MIN_SPEEDUP times faster than float32 there — attention
    and the elementwise work of a small step can be slower in bfloat16 than a matmul suggests. The verdict is kept
    per machine and shape under `<cache>/hardware/dtype-…json`, so every run of a study, and a resumed run, reads
    the same one."""
    choice, machine = fast_dtype(device, cache_root)
    if device.type != "cpu" or choice != "bfloat16":
        return choice, choice, machine
    shape = dtype_key(cfg, device)
    path = dtype_record_path(cfg, device, cache_root)
    record = _MEASURED.get(path.name)
    if record is None:
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            record = probe_dtypes(cfg, device)
            record["student"] = _verdict(record["student_float32_s"], record["student_bfloat16_s"])
            record["teacher"] = (
                _verdict(record["teacher_float32_s"], record["teacher_bfloat16_s"])
                if "teacher_float32_s" in record
                else choice
            )
            record |= {
                "rule": f"bfloat16 where it is at least {STEP_MIN_SPEEDUP}x faster than float32",
                "shape": shape,
                "cpu": cpu_info().model,
                "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"),
            }
            atomic.remember(path, json.dumps(record, indent=1, default=str))
        _MEASURED[path.name] = record
    return record["student"], record["teacher"], record


def dtype_record_path(cfg: RunConfig, device: torch.device, cache_root: Path) -> Path:
    """Where auto_dtypes keeps the verdict for `cfg`'s shape on this CPU."""
    key = hashlib.sha256(
        json.dumps([dtype_key(cfg, device), __version__], sort_keys=True, default=str).encode()
    ).hexdigest()[:16]
    return cache_root / "hardware" / f"dtype-cpu-{machine_key(cpu_info())}-{key}.json"


def _verdict(float32_s: float, bfloat16_s: float) -> str:
    return "bfloat16" if float32_s >= STEP_MIN_SPEEDUP * bfloat16_s else "float32"


def resolve_auto(cfg: RunConfig, device: torch.device, cache_root: Path) -> tuple[RunConfig, dict | None]:
    """`cfg` with its `auto` dtypes resolved (auto_dtypes), and the record behind them (None: nothing was auto)."""
    train, teacher = cfg.train, cfg.teacher
    if teacher.dtype == "auto" and teacher.path == "none":  # no teacher to load: its dtype is the student's
        teacher = dataclasses.replace(teacher, dtype=train.dtype)
        cfg = dataclasses.replace(cfg, teacher=teacher)
    if "auto" not in (train.dtype, teacher.dtype):
        return cfg, None
    student_dtype, teacher_dtype, record = auto_dtypes(cfg, device, cache_root)
    if train.dtype == "auto":
        train = dataclasses.replace(train, dtype=student_dtype)
    if teacher.dtype == "auto":
        teacher = dataclasses.replace(teacher, dtype=teacher_dtype)
    return dataclasses.replace(cfg, train=train, teacher=teacher), record


@functools.cache
def startup_seconds() -> float:
    """A fresh interpreter importing what a run process imports (measured, not assumed; once per process: it does
    not depend on the shape being probed)."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import normgrow.pipeline, normgrow.train"], check=True, capture_output=True)
    return time.perf_counter() - t0


def measure(cfg: RunConfig, device: torch.device, cache_root: Path, again: bool = False) -> dict:
    """The step probe of `cfg`'s shape (module docstring), from the cache unless `again`: a (s per step at depth
    0 extrapolated), b (s per block per step), the compile/first-step overhead and the per-process start-up."""
    cfg = resolved(cfg, device, cache_root)
    shape = shape_of(cfg, device)
    key = hashlib.sha256(json.dumps([shape, __version__], sort_keys=True, default=str).encode()).hexdigest()[:16]
    where = "cpu-" + machine_key(cpu_info()) if device.type == "cpu" else device.type
    path = cache_root / "hardware" / f"speed-{where}-{key}.json"
    if not again and key in _MEASURED:
        return {**_MEASURED[key], "cached": True}
    if not again and path.is_file():
        try:
            return {**json.loads(path.read_text()), "cached": True}
        except (OSError, ValueError):
            pass
    n = cfg.model.n_layer
    one, full = time_steps(cfg, 1, device), time_steps(cfg, n, device)
    b = max(0.0, (full["step_s"] - one["step_s"]) / max(1, n - 1))
    record = {
        "a_s": max(0.0, one["step_s"] - b),
        "b_s": b,
        "step_full_s": full["step_s"],
        "depth": n,
        # what this process paid before its steps ran at speed, both probes together: with compiled blocks the
        # depth-1 probe compiles the graph the full-depth one then reuses (cold or warm, as the cache was)
        "first_extra_s": max(0.0, one["first_s"] - WARMUP_STEPS * one["step_s"])
        + max(0.0, full["first_s"] - WARMUP_STEPS * full["step_s"]),
        "startup_s": startup_seconds(),
        "shape": shape,
        "cpu": cpu_info().model if device.type == "cpu" else "",
        "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    atomic.remember(path, json.dumps(record, indent=1, default=str))
    _MEASURED[key] = {**record, "cached": False}
    return _MEASURED[key]


def step_seconds(record: dict, depth: int) -> float:
    return record["a_s"] + record["b_s"] * depth


def evaluation_schedule(cfg: RunConfig, plans) -> list[dict]:
    """Per stage, what train.end_step and start_stage evaluate, replayed from the config: full evaluations (the
    validation set: the stage's start and end), curve evaluations (`eval` and `dense` events), diagnoses, and
    whether the selection set is scored (the last stage's end)."""
    per_step = cfg.train.batch_size * cfg.data.seq_len
    t = cfg.train
    out, tokens = [], 0
    for plan in plans:
        n = {"full": 1, "curve": 0, "diagnoses": 1, "select": 0}  # stage start: evaluate, diagnose
        for s in range(1, plan.steps + 1):
            tokens += per_step
            last = s == plan.steps
            dense = plan.index > 0 and s <= t.dense_eval_steps and s % t.dense_eval_every == 0 and not last
            if last:
                n["full"] += 1
                n["diagnoses"] += 1
                n["select"] = int(bool(cfg.data.select_tokens) and plan.index == len(plans) - 1)
            elif dense:
                n["curve"] += 1
                n["diagnoses"] += 1
            elif crossed(tokens, per_step, t.eval_every_tokens):
                n["curve"] += 1
            if (
                cfg.diagnostics.every_tokens
                and not (last or dense)
                and crossed(tokens, per_step, cfg.diagnostics.every_tokens)
            ):
                n["diagnoses"] += 1
        if not cfg.diagnostics.enabled:
            n["diagnoses"] = 0
        out.append(n)
    return out


def predict_run(cfg: RunConfig, plans, record: dict) -> dict:
    """Seconds one run should take here: its training steps at the measured rate of each stage's depth; its
    evaluations and diagnoses (evaluation_schedule) as forward passes at a third of a training token's time (a
    diagnosis: depth + 3 forward passes over the probe sequences, skip_ce's one per block dominating); the
    measured start-up; with compiled blocks the probe's first-step overhead. Checkpoints are not counted."""
    d = cfg.data
    per_step = cfg.train.batch_size * d.seq_len
    curve, probe = d.curve_tokens or d.val_tokens, d.probe_sequences * d.seq_len
    train_s = eval_s = 0.0
    for plan, n in zip(plans, evaluation_schedule(cfg, plans), strict=True):
        step = step_seconds(record, plan.n_layer)
        tokens = (
            n["full"] * d.val_tokens
            + n["curve"] * curve
            + n["select"] * d.select_tokens
            + n["diagnoses"] * probe * (plan.n_layer + 3)
        )
        train_s += plan.steps * step
        eval_s += step / per_step / 3 * tokens
    compile_s = record["first_extra_s"] if cfg.train.compile else 0.0
    total = train_s + eval_s + record["startup_s"] + compile_s
    return {
        "train_s": train_s,
        "eval_s": eval_s,
        "startup_s": record["startup_s"],
        "compile_s": compile_s,
        "total_s": total,
    }


def schedule(durations: list[float], parallel: int) -> float:
    """Wall time of jobs started in order on `parallel` slots, each as soon as one is free (the local launcher)."""
    slots = [0.0] * max(1, parallel)
    for d in durations:
        i = min(range(len(slots)), key=slots.__getitem__)
        slots[i] += d
    return max(slots)
