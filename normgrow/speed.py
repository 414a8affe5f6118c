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
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import statistics
import subprocess
import sys
import time
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

WARMUP_STEPS, TIMED_STEPS = 2, 4
_MEASURED: dict[str, dict] = {}  # this process's measurements by shape key


def resolved(cfg: RunConfig, device: torch.device, cache_root: Path) -> RunConfig:
    """The config with `auto` dtypes resolved as a run on this machine resolves them."""
    train, teacher = cfg.train, cfg.teacher
    if train.dtype == "auto":
        train = dataclasses.replace(train, dtype=fast_dtype(device, cache_root)[0])
    if teacher.dtype == "auto":
        teacher = dataclasses.replace(teacher, dtype=fast_dtype(device, cache_root)[0])
    return dataclasses.replace(cfg, train=train, teacher=teacher)


def shape_of(cfg: RunConfig, device: torch.device) -> dict:
    """Everything a step's time depends on, but the depth and placements' order (the probe's cache key)."""

    m, t = cfg.model, cfg.teacher
    shape = teacher_shape(cfg) if not t.cache and t.path != "none" else None
    return {"model": {k: getattr(m, k) for k in ("d_model", "n_head", "n_kv_head", "head_dim", "d_ff", "vocab_size",
                                                  "qk_norm", "final_norm", "tie_embeddings")},
            "placements": sorted(set(full_placements(cfg))), "seq_len": cfg.data.seq_len,
            "batch": cfg.train.batch_size, "micro_batch": cfg.train.micro_batch_size or cfg.train.batch_size,
            "dtype": cfg.train.dtype, "compile": cfg.train.compile,
            "activation_checkpointing": cfg.train.activation_checkpointing,
            "loss": [cfg.distill.loss, cfg.distill.chunk_tokens, cfg.distill.nll_weight > 0],
            "teacher": ("none" if t.path == "none" else
                        {"cache_k": min(t.cache_k, m.vocab_size), "cache_dtype": t.cache_dtype} if t.cache else
                        {"shape": None if shape is None else {k: getattr(shape, k) for k in (
                            "n_layer", "d_model", "n_head", "n_kv_head", "head_dim", "d_ff")}, "dtype": t.dtype}),
            "threads": torch.get_num_threads(), "device": device.type, "torch": torch.__version__}


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


def time_steps(cfg: RunConfig, depth: int, device: torch.device) -> dict:
    """Seconds of the first WARMUP_STEPS steps (allocation, compilation) and the median of TIMED_STEPS more, of a
    student of `depth` blocks (the first `depth` of the full-depth placements)."""

    torch.manual_seed(0)
    student = Student(cfg.model, depth=depth, max_seq_len=cfg.data.seq_len,
                      placements=full_placements(cfg)[:depth]).to(device)
    student.activation_checkpointing = cfg.train.activation_checkpointing
    optimizer = build_optimizer(student, cfg, device)
    info = dist.DistInfo(rank=0, world_size=1, local_rank=0, device=device)
    step_fn = wrap_for_training(student, info, cfg)
    teacher = None
    shape = teacher_shape(cfg) if not cfg.teacher.cache and cfg.teacher.path != "none" else None
    if shape is not None:
        shape = dataclasses.replace(shape, final_norm=True, vocab_size=cfg.model.vocab_size)
        teacher = Decoder(shape, [PreNormBlock] * shape.n_layer, cfg.data.seq_len).to(device).eval()
        if cfg.teacher.dtype in ("bfloat16", "float16"):
            teacher = teacher.to(getattr(torch, cfg.teacher.dtype))
    B, T = cfg.train.batch_size, cfg.data.seq_len
    mb = cfg.train.micro_batch_size or B
    x = torch.randint(0, cfg.model.vocab_size, (B, T + 1), device=device)
    d = cfg.distill
    times = []
    for _ in range(WARMUP_STEPS + TIMED_STEPS):
        t0 = time.perf_counter()
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
            loss = distill_loss(h.reshape(-1, h.shape[-1]), student.lm_head.weight, t_dist, tgt, n_tokens=B * T,
                                kind=d.loss, temperature=d.temperature, jsd_beta=d.jsd_beta,
                                nll_weight=d.nll_weight, chunk=d.chunk_tokens)
            loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in student.parameters() if p.requires_grad], 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return {"first_s": sum(times[:WARMUP_STEPS]), "step_s": statistics.median(times[WARMUP_STEPS:])}


def startup_seconds() -> float:
    """A fresh interpreter importing what a run process imports (measured, not assumed)."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import normgrow.pipeline, normgrow.train"], check=True,
                   capture_output=True)
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
    record = {"a_s": max(0.0, one["step_s"] - b), "b_s": b, "step_full_s": full["step_s"], "depth": n,
              "first_extra_s": max(0.0, full["first_s"] - WARMUP_STEPS * full["step_s"]),
              "startup_s": startup_seconds(), "shape": shape, "cpu": cpu_info().model if device.type == "cpu" else "",
              "measured_at": time.strftime("%Y-%m-%d %H:%M:%S")}
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
            if cfg.diagnostics.every_tokens and not (last or dense) and crossed(tokens, per_step,
                                                                                cfg.diagnostics.every_tokens):
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
        tokens = (n["full"] * d.val_tokens + n["curve"] * curve + n["select"] * d.select_tokens
                  + n["diagnoses"] * probe * (plan.n_layer + 3))
        train_s += plan.steps * step
        eval_s += step / per_step / 3 * tokens
    compile_s = record["first_extra_s"] if cfg.train.compile else 0.0
    total = train_s + eval_s + record["startup_s"] + compile_s
    return {"train_s": train_s, "eval_s": eval_s, "startup_s": record["startup_s"], "compile_s": compile_s,
            "total_s": total}


def schedule(durations: list[float], parallel: int) -> float:
    """Wall time of jobs started in order on `parallel` slots, each as soon as one is free (the local launcher)."""
    slots = [0.0] * max(1, parallel)
    for d in durations:
        i = min(range(len(slots)), key=slots.__getitem__)
        slots[i] += d
    return max(slots)
