"""`dtype: auto` — what `train.dtype` and `teacher.dtype` resolve to, decided here and nowhere else.

The rule (bfloat16 autocast with float32 master weights only where bfloat16 is native *and* faster for the run's
own work; float32 everywhere else):

1. The machine (`machine_dtype`). CUDA: bfloat16 if the device supports it. A CPU without the `amx_bf16` or
   `avx512_bf16` flag: float32, no probe (torch emulates bfloat16 there; the student's step ran 25× slower in it,
   docs/LOG.md). A CPU with one: the same matmul timed in float32 and under bfloat16 autocast
   (hardware.probe_cpu_bf16), bfloat16 only if at least MIN_SPEEDUP (1.5×) faster; the record is cached per
   machine under `<cache>/hardware/cpu-<machine>.json`. Other devices: float32.
2. The run's own work (`auto_dtypes`), where rule 1 says bfloat16 on a CPU: a fast bare matmul is necessary, not
   sufficient (at the default study's shape on an AVX-512-BF16 CPU the student's step ran 1.4× slower under
   autocast: attention's backward, casts). The student's training step at full depth (speed.build_step, the
   training loop's own `step.train_step`) and an online teacher's forward are timed in both dtypes, in turn, each
   part bfloat16 only if at least STEP_MIN_SPEEDUP (1.2×) faster — the student and the teacher can differ. The
   verdict is cached per machine and shape under `<cache>/hardware/dtype-cpu-<machine>-<shape>.json`.
3. A run with no teacher to load takes the student's dtype for its teacher; the default teacher's own training run
   takes rule 1's (`machine_dtype`: its recipe's key names the dtype it was trained in).
4. A study writes each shape's verdict before its first run (`resolve_for_jobs`), so its runs cannot split between
   dtypes on one machine, and where its shapes' verdicts disagree every shape takes float32 (`one_verdict`), so its
   arms cannot either; a run directory keeps the dtypes its run started with (`keep_saved`); rank 0 decides
   for every rank of a torchrun job (`resolve_run`). The resolved config.yaml names the dtype used.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import statistics
import time
import typing
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Literal

import torch

from normgrow import atomic
from normgrow.config import RunConfig
from normgrow.errors import ConfigError
from normgrow.machine.hardware import BF16_FLAGS, cpu_info, machine_key, probe_cpu_bf16
from normgrow.machine.speed import build_step, online_teacher, probe_vocab, shape_of
from normgrow.nn.losses import TeacherChunks
from normgrow.nn.model import Decoder
from normgrow.parallel import dist
from normgrow.train.rundir import RunDir
from normgrow.version import __version__

MIN_SPEEDUP = 1.5  # rule 1: margin over 1.0, autocast adds casts the probe's bare matmul does not pay
STEP_MIN_SPEEDUP = 1.2  # rule 2: bfloat16 must pay for its rounding, a fifth faster on the run's own work
DTYPE_WARMUP, DTYPE_TIMED = 2, 5
_VERDICTS: dict[str, dict] = {}  # this process's rule-2 verdicts by record file name


def machine_dtype(device: torch.device, cache_root: Path) -> tuple[Literal["float32", "bfloat16"], dict]:
    """Rule 1: ('bfloat16' or 'float32', the record behind the choice) for this device."""
    if device.type == "cuda":
        ok = torch.cuda.is_bf16_supported()
        return ("bfloat16" if ok else "float32"), {"device": torch.cuda.get_device_name(device), "bf16_supported": ok}
    if device.type != "cpu":
        return "float32", {"device": device.type, "reason": "only CUDA and CPU are probed"}
    info = cpu_info()
    have = sorted(info.flags & BF16_FLAGS)
    if not have:
        return "float32", {"cpu": info.model, "reason": "no amx_bf16 / avx512_bf16 flag: bfloat16 is emulated"}
    path = cache_root / "hardware" / f"cpu-{machine_key(info)}.json"
    record = read_record(path, ("choice",))
    if record is None:
        record = {"cpu": info.model, "bf16_flags": have, "torch": torch.__version__, **probe_cpu_bf16()}
        record["choice"] = "bfloat16" if record["speedup"] >= MIN_SPEEDUP else "float32"
        # concurrent runs of a study write the same verdict; a read-only cache keeps none (measured per run)
        atomic.remember(path, json.dumps(record, indent=1))
    return record["choice"], record


def read_record(path: Path, verdicts: tuple[str, ...]) -> dict | None:
    """A cached probe record, or None (measure again) where it is missing, unreadable, not JSON, or any of its
    `verdicts` is not a dtype `auto` can resolve to: an edited or damaged record is never what a run trains in."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or any(record.get(k) not in ("float32", "bfloat16") for k in verdicts):
        return None
    return record


def _alternate(fns: Mapping[str, Callable[[], object]], warmup: int, timed: int) -> dict[str, float]:
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
    """What rule 2's verdict depends on: the step's shape without its dtypes and compile setting."""
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
        return dataclasses.replace(
            cfg,
            train=dataclasses.replace(
                cfg.train, dtype=typing.cast(Literal["float32", "bfloat16"], dtype), compile=False
            ),
        )

    steps = {k: build_step(with_dtype(k), cfg.model.n_layer, device, online=False) for k in ("float32", "bfloat16")}
    student = _alternate(steps, DTYPE_WARMUP, DTYPE_TIMED)
    record = {"student_float32_s": student["float32"], "student_bfloat16_s": student["bfloat16"]}
    teachers = {k: online_teacher(cfg, device, k) for k in ("float32", "bfloat16")}
    if teachers["float32"] is not None:
        x = torch.randint(0, probe_vocab(cfg), (cfg.train.batch_size, cfg.data.seq_len), device=device)

        def forward(teacher: Decoder) -> Callable[[], object]:
            def run() -> object:
                with torch.no_grad():
                    h = teacher.hidden(x)
                    return TeacherChunks(h.reshape(-1, h.shape[-1]), teacher.lm_head.weight).logits(slice(0, None))

            return run

        timed = _alternate({k: forward(t) for k, t in teachers.items() if t is not None}, DTYPE_WARMUP, DTYPE_TIMED)
        record |= {"teacher_float32_s": timed["float32"], "teacher_bfloat16_s": timed["bfloat16"]}
    return record


def step_verdict(float32_s: float, bfloat16_s: float) -> Literal["float32", "bfloat16"]:
    """Rule 2 for one part of the run's work, from its two timings."""
    return "bfloat16" if float32_s >= STEP_MIN_SPEEDUP * bfloat16_s else "float32"


def auto_dtypes(
    cfg: RunConfig, device: torch.device, cache_root: Path
) -> tuple[Literal["float32", "bfloat16"], Literal["float32", "bfloat16"], dict]:
    """(student dtype, teacher dtype, the record behind them) that `auto` resolves to for `cfg` on `device`: rule 1,
    then on a CPU whose bare bfloat16 matmul is fast rule 2 (read from its cached record, or measured and kept)."""
    choice, machine = machine_dtype(device, cache_root)
    if device.type != "cpu" or choice != "bfloat16":
        return choice, choice, machine
    path = dtype_record_path(cfg, device, cache_root)
    record = _VERDICTS.get(path.name)
    if record is None:
        record = read_record(path, ("student", "teacher"))
        if record is None:
            record = probe_dtypes(cfg, device)
            record["student"] = step_verdict(record["student_float32_s"], record["student_bfloat16_s"])
            record["teacher"] = (
                step_verdict(record["teacher_float32_s"], record["teacher_bfloat16_s"])
                if "teacher_float32_s" in record
                else choice
            )
            record |= {
                "rule": f"bfloat16 where it is at least {STEP_MIN_SPEEDUP}x faster than float32",
                "shape": dtype_key(cfg, device),
                "cpu": cpu_info().model,
                "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"),
            }
            atomic.remember(path, json.dumps(record, indent=1, default=str))
        _VERDICTS[path.name] = record
    return record["student"], record["teacher"], record


def dtype_record_path(cfg: RunConfig, device: torch.device, cache_root: Path) -> Path:
    """Where auto_dtypes keeps rule 2's verdict for `cfg`'s shape on this CPU."""
    key = hashlib.sha256(
        json.dumps([dtype_key(cfg, device), __version__], sort_keys=True, default=str).encode()
    ).hexdigest()[:16]
    return cache_root / "hardware" / f"dtype-cpu-{machine_key(cpu_info())}-{key}.json"


def resolve_auto(cfg: RunConfig, device: torch.device, cache_root: Path) -> tuple[RunConfig, dict | None]:
    """`cfg` with its `auto` dtypes resolved (auto_dtypes; rule 3 for an absent teacher), and the record behind them
    (None: nothing was auto)."""
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


def resolved(cfg: RunConfig, device: torch.device, cache_root: Path) -> RunConfig:
    """The config with `auto` dtypes resolved as a run on this machine resolves them."""
    return resolve_auto(cfg, device, cache_root)[0]


def evidence(cfg: RunConfig, resolved: RunConfig, record: dict) -> str:
    """What `auto` resolved to (only the parts that were `auto`) and the probe's timings behind it, as one phrase."""
    parts = []
    if cfg.train.dtype == "auto":
        parts.append(
            f"student {resolved.train.dtype} (step {record['student_float32_s'] * 1e3:.0f} ms float32 / "
            f"{record['student_bfloat16_s'] * 1e3:.0f} ms bfloat16)"
        )
    if cfg.teacher.dtype == "auto":
        timed = (
            f" (forward {record['teacher_float32_s'] * 1e3:.0f} / {record['teacher_bfloat16_s'] * 1e3:.0f} ms)"
            if "teacher_float32_s" in record
            else ""
        )
        parts.append(f"teacher {resolved.teacher.dtype}{timed}")
    return ", ".join(parts) + f"; {record['rule']}"


def resolve_run(cfg: RunConfig, info: dist.DistInfo, cache_root: Path, log: Callable[[str], None] = print) -> RunConfig:
    """A run's `auto` dtypes resolved on this device, so its resolved config.yaml says which were used; under
    torchrun rank 0 decides for every rank."""
    if "auto" not in (cfg.train.dtype, cfg.teacher.dtype):
        return cfg
    resolved, record = resolve_auto(cfg, info.device, cache_root) if info.is_main else (None, None)
    resolved = dist.broadcast_object(resolved)
    if record is not None and "student_float32_s" in record:
        log(f"dtype auto: {evidence(cfg, resolved, record)}")
    return resolved


def keep_saved(cfg: RunConfig, out: Path) -> RunConfig:
    """A run directory that holds a run keeps the dtypes it started with: `auto` takes the saved config's."""
    run = RunDir(out)
    if "auto" not in (cfg.train.dtype, cfg.teacher.dtype) or not run.is_run():
        return cfg
    try:
        saved = run.config()
    except ConfigError:
        return cfg  # check_same_run names what is wrong with it
    train = dataclasses.replace(cfg.train, dtype=saved.train.dtype) if cfg.train.dtype == "auto" else cfg.train
    teacher = (
        dataclasses.replace(cfg.teacher, dtype=saved.teacher.dtype) if cfg.teacher.dtype == "auto" else cfg.teacher
    )
    return dataclasses.replace(cfg, train=train, teacher=teacher)


def resolve_for_jobs(
    jobs: Iterable[tuple[str, RunConfig, torch.device, Path]], log: Callable[[str], None], threads: int | None
) -> None:
    """Rule 4: where a CPU's probe decides `auto`, probe each distinct shape of a study's jobs ((arm, config, device,
    cache root) each) once, at the runs' thread count, before any run starts: the runs then read one cached verdict
    instead of racing to write their own. Then one verdict for the whole study (`one_verdict`)."""
    seen = set()
    probed: dict[Path, tuple[str, RunConfig, dict]] = {}
    old = torch.get_num_threads()
    try:
        if threads:
            torch.set_num_threads(threads)
        for arm, cfg, device, root in jobs:
            if "auto" not in (cfg.train.dtype, cfg.teacher.dtype):
                continue
            path = dtype_record_path(cfg, device, root) if device.type == "cpu" else None
            if path in seen:
                continue
            seen.add(path)
            out, record = resolve_auto(cfg, device, root)
            if path is not None and record is not None and "student_float32_s" in record:
                log(f"dtype auto for {arm}'s shape: {evidence(cfg, out, record)}")
                probed[path] = (arm, cfg, record)
    finally:
        torch.set_num_threads(old)
    one_verdict(probed, log)


def one_verdict(probed: Mapping[Path, tuple[str, RunConfig, dict]], log: Callable[[str], None]) -> None:
    """A study's arms are compared, so `auto` must not put them in different precisions: where the shapes' verdicts
    for a part (student, teacher) disagree — probes near STEP_MIN_SPEEDUP, e.g. a pre-norm step 1.23× and a post-norm
    step 1.17× faster in bfloat16 —, every shape of the study takes float32 for it, and each rewritten record says why
    (`study_wide`)."""
    for part, field in (("student", "train"), ("teacher", "teacher")):
        auto = {p: (arm, rec) for p, (arm, cfg, rec) in probed.items() if getattr(cfg, field).dtype == "auto"}
        if len({rec[part] for _, rec in auto.values()}) < 2:
            continue
        said = ", ".join(f"{arm} {rec[part]}" for arm, rec in auto.values())
        why = f"float32 for every arm of the study: their shapes' verdicts disagreed ({said})"
        for path, (_, rec) in auto.items():
            if rec[part] != "float32":
                rec[part] = "float32"
                rec["study_wide"] = {**rec.get("study_wide", {}), part: why}
                atomic.remember(path, json.dumps(rec, indent=1, default=str))
                _VERDICTS[path.name] = rec
        log(f"dtype auto, {part}: {why}")
