"""How fast this machine runs a run's training step: the measured probe behind `normgrow plan`.

A step's time depends on the student's shape (width, heads, vocabulary, sequence length, micro-batch), its
dtype and compile setting, the loss, the teacher's form (online: its forward; cached: k log-probs per token)
and the threads; its depth enters linearly (every block costs the same). So the probe times, in this process,
the training step of a run's shape at depth 1 and at full depth — the student's forward, the chunked
distillation loss against a teacher distribution of the run's form (random numbers: time does not depend on
their values), backward, gradient clipping and AdamW, the training loop's own `step.train_step` on a synthetic batch — and,
for an online teacher of known shape (teacher.teacher_shape), that teacher's forward (a pre-norm Qwen3 of its
shape in its dtype). A step at depth d is then a + b·d from the two.

What is measured and what is not, as `plan` prints it: the step rate is measured; evaluation and diagnostics
are estimated from it (their forward passes at a third of a training step's per-token time); process start-up
is measured once (importing normgrow's training modules in a fresh interpreter). Compiled blocks: the probe's
first steps include this process's compilation (from the compile cache when it is warm), printed separately.

Each shape's measurement is kept under `<cache>/hardware/speed-<machine>-<shape>.json` (best effort), so a
second `plan` reuses it; `--remeasure` measures again.

The same step decides `dtype: auto` on a CPU with native bfloat16 (machine/dtypes.py), timed in both dtypes.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import statistics
import subprocess
import sys
import time
import typing
from collections.abc import Callable
from pathlib import Path

import torch

from normgrow import atomic
from normgrow.config import RunConfig
from normgrow.data import Batch
from normgrow.machine.hardware import cpu_info, machine_key
from normgrow.nn.losses import SampledTeacher, SparseTeacher, TeacherChunks, draw_samples, tail_logsumexp
from normgrow.nn.model import Decoder, PreNormBlock, Student, placement_of
from normgrow.parallel import dist
from normgrow.teacher.load import teacher_shape
from normgrow.train.cadence import evaluation_counts
from normgrow.train.step import build_optimizer, train_step, wrap_for_training
from normgrow.version import __version__

WARMUP_STEPS, TIMED_STEPS = 2, 9  # the median of 9: 4 left a 30 % spread between processes (docs/LOG.md)
_MEASURED: dict[str, dict] = {}  # this process's measurements by shape key


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
        **({"norm_kind": m.norm_kind} if m.norm_kind != "rmsnorm" else {}),  # (absent for rmsnorm: older records hold)
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
            else {"cache_samples": t.cache_samples}
            if t.cache and t.cache_kind == "sampled"
            else {"cache_k": min(t.cache_k, typing.cast(int, m.vocab_size)), "cache_dtype": t.cache_dtype}
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
    assert V is not None  # build_step resolved it (probe_vocab)
    logp = torch.log_softmax(torch.randn(n, V, device=device), dim=-1)
    if cfg.teacher.cache_kind == "sampled":
        ids, weights = draw_samples(logp, cfg.teacher.cache_samples, torch.Generator().manual_seed(0))
        return SampledTeacher(ids.to(device), weights.to(device), torch.special.entr(logp.exp()).sum(-1))
    k = min(cfg.teacher.cache_k, V)
    if k >= V:
        return SparseTeacher(logp, None, None)
    top, ids = logp.topk(k, dim=-1)
    return SparseTeacher(top, ids, tail_logsumexp(logp, ids))


def online_teacher(cfg: RunConfig, device: torch.device, dtype: str) -> Decoder | None:
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


def build_step(cfg: RunConfig, depth: int, device: torch.device, online: bool = True) -> Callable[[], None]:
    """One training step of `cfg`'s shape at `depth` blocks (the first `depth` of the full-depth placements), as a
    function of no arguments: `step.train_step` — the loop's own step — on a fixed random batch, the teacher's
    distribution from an online teacher's forward (when `online` and its shape is known) or of the run's form
    (synthetic_teacher)."""
    torch.manual_seed(0)
    model = dataclasses.replace(cfg.model, vocab_size=probe_vocab(cfg))
    assert model.vocab_size is not None  # probe_vocab is an int
    cfg = dataclasses.replace(cfg, model=model)
    student = Student(model, depth=depth, max_seq_len=cfg.data.seq_len, placements=full_placements(cfg)[:depth])
    student = student.to(device)
    student.activation_checkpointing = cfg.train.activation_checkpointing
    optimizer = build_optimizer(student, cfg, device)
    info = dist.DistInfo(rank=0, world_size=1, local_rank=0, device=device)
    step_fn = wrap_for_training(student, info, cfg)
    teacher = online_teacher(cfg, device, cfg.teacher.dtype) if online else None
    B, T = cfg.train.batch_size, cfg.data.seq_len
    batch = Batch(torch.randint(0, model.vocab_size, (B, T + 1), device=device), torch.arange(B))

    def teacher_of(x: torch.Tensor, index: torch.Tensor) -> TeacherChunks | SparseTeacher | None:
        if teacher is not None:
            with torch.no_grad():
                hidden = teacher.hidden(x)
            return TeacherChunks(hidden.reshape(-1, hidden.shape[-1]), teacher.lm_head.weight)
        return synthetic_teacher(cfg, x.numel(), device) if cfg.teacher.path != "none" else None

    def step() -> None:
        train_step(student, step_fn, optimizer, batch, cfg, info, teacher_of, cfg.train.lr)
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


@functools.cache
def startup_seconds() -> float:
    """A fresh interpreter importing what a run process imports (measured, not assumed; once per process: it does
    not depend on the shape being probed)."""
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", "import normgrow.run.pipeline, normgrow.train.loop"], check=True, capture_output=True
    )
    return time.perf_counter() - t0


PROBE_TIMES = ("a_s", "b_s", "first_extra_s", "startup_s")
PROBE_FORMAT = 2  # 2: a + b·n is the full-depth step (depth_fit); probes cached before are measured again


def read_probe(path: Path) -> dict | None:
    """A cached step probe, or None (measure again) where it is missing, unreadable, not JSON, or any of its times
    is not a finite number ≥ 0: a damaged record is measured again, never predicted from."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(record, dict) and all(
        isinstance(v := record.get(k), int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
        for k in PROBE_TIMES
    )
    return record if ok else None


def depth_fit(one: float, full: float, n: int) -> tuple[float, float]:
    """a and b of a + b·d through the step at depth 1 and at depth n, both ≥ 0, and a + b·n the full-depth step
    always (what the runs mostly train at): a full step no slower than one block's (noise, at tiny shapes) puts
    every depth at the full step's rate; a block costing more than one step at depth 1 puts a at 0."""
    b = (full - one) / max(1, n - 1)
    if b <= 0:
        return full, 0.0
    if one - b < 0:
        return 0.0, full / n
    return one - b, b


def measure(cfg: RunConfig, device: torch.device, cache_root: Path, again: bool = False) -> dict:
    """The step probe of `cfg`'s shape (module docstring), from the cache unless `again`: a (s per step at depth
    0 extrapolated), b (s per block per step), the compile/first-step overhead and the per-process start-up."""
    shape = shape_of(cfg, device)
    key = hashlib.sha256(
        json.dumps([shape, __version__, PROBE_FORMAT], sort_keys=True, default=str).encode()
    ).hexdigest()[:16]
    where = "cpu-" + machine_key(cpu_info()) if device.type == "cpu" else device.type
    path = cache_root / "hardware" / f"speed-{where}-{key}.json"
    if not again and key in _MEASURED:
        return {**_MEASURED[key], "cached": True}
    cached = None if again else read_probe(path)
    if cached is not None:
        return {**cached, "cached": True}
    n = cfg.model.n_layer
    one, full = time_steps(cfg, 1, device), time_steps(cfg, n, device)
    a, b = depth_fit(one["step_s"], full["step_s"], n)
    record = {
        "a_s": a,
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


def predict_run(cfg: RunConfig, plans, record: dict, start: int = 0, stop: int = 0) -> dict:
    """Seconds one run should take here: its training steps at the measured rate of each stage's depth; its
    evaluations and diagnoses (cadence.evaluation_counts) as forward passes at a third of a training token's time (a
    diagnosis: depth + 3 forward passes over the probe sequences, skip_ce's one per block dominating); the
    measured start-up; with compiled blocks the probe's first-step overhead. Checkpoints are not counted. A decay
    branch counts its steps after `start`, a trunk those up to `stop` (cadence.evaluation_counts)."""
    d = cfg.data
    per_step = cfg.train.batch_size * d.seq_len
    curve, probe = d.curve_tokens or d.val_tokens, d.probe_sequences * d.seq_len
    train_s = eval_s = 0.0
    for plan, n in zip(plans, evaluation_counts(cfg, plans, start, stop), strict=True):
        step = step_seconds(record, plan.n_layer)
        tokens = (
            n["full"] * d.val_tokens
            + n["curve"] * curve
            + n["select"] * d.select_tokens
            + n["diagnoses"] * probe * (plan.n_layer + 3)
        )
        train_s += n["steps"] * step
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
