"""What this machine is and how fast it computes: its CPU (model, feature flags), a bare matmul timed in float32
and under bfloat16 autocast, a matmul peak for MFU, memory, and the figures a GPU's smoke check records.

These are measurements; the rule that turns them into `train.dtype=auto`'s choice is machine/dtypes.py's."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from normgrow import atomic

BF16_FLAGS = frozenset({"amx_bf16", "avx512_bf16"})
PROBE_SHAPE = (2048, 512, 512)  # (tokens, d_in, d_out): a projection of a CPU-sized batch


@dataclass(frozen=True)
class CpuInfo:
    model: str
    flags: frozenset


def cpu_info(text: str | None = None) -> CpuInfo:
    """The CPU's model name and feature flags, from the text of /proc/cpuinfo (read when not given;
    empty flags where there is none, e.g. macOS — bfloat16 is then never chosen on the CPU)."""
    if text is None:
        try:
            text = Path("/proc/cpuinfo").read_text()
        except OSError:
            text = ""
    flags: frozenset[str]
    model, flags = "", frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key == "model name" and not model:
            model = value.strip()
        elif key in ("flags", "features") and not flags:
            flags = frozenset(value.split())
    return CpuInfo(model or platform.processor() or platform.machine(), flags)


def _best_time(fn, reps: int) -> float:
    fn()  # warm-up (allocation, kernel selection)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def probe_cpu_bf16(reps: int = 5) -> dict:
    """Seconds of one float32 matmul and of the same under bfloat16 autocast, and their ratio."""
    m, k, n = PROBE_SHAPE
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(m, k, generator=gen), torch.randn(k, n, generator=gen)

    def bf16():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return a @ b

    f32_s, bf16_s = _best_time(lambda: a @ b, reps), _best_time(bf16, reps)
    return {
        "float32_s": f32_s,
        "bfloat16_s": bf16_s,
        "speedup": f32_s / bf16_s,
        "shape": list(PROBE_SHAPE),
        "threads": torch.get_num_threads(),
    }


def matmul_peak(
    dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu", n: int = 2048, reps: int = 5
) -> float:
    """FLOP/s of one n × n × n matmul of `dtype` tensors on `device`, best of `reps`, at this process's thread
    count: the peak a benchmark's MFU is measured against, in the same process and run."""
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)

    def mm():
        out = a @ b
        if out.device.type == "cuda":
            torch.cuda.synchronize()
        return out

    return 2 * n**3 / _best_time(mm, reps)


def native_bf16(device: torch.device | str = "cpu") -> bool:
    """bfloat16 matmul in hardware: a CUDA device that supports it, a CPU with AMX or AVX-512-BF16."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return bool(cpu_info().flags & BF16_FLAGS)


def machine_key(info: CpuInfo) -> str:
    return hashlib.sha256(json.dumps([info.model, sorted(info.flags), torch.__version__]).encode()).hexdigest()[:16]


def available_memory(device: torch.device) -> int | None:
    """Bytes free for a run on `device`: CUDA's free memory, or the kernel's MemAvailable on Linux (the
    physical memory elsewhere); None when unknown."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def gpu_smoke_path(cache_root: Path, device_name: str) -> Path:
    """Where benchmarks/gpu_smoke.py records its figures for one kind of GPU (by the name CUDA reports)."""
    slug = "".join(c if c.isalnum() else "-" for c in device_name).strip("-").lower() or "gpu"
    return cache_root / "hardware" / f"gpu-smoke-{slug}.json"


def record_gpu_smoke(
    cache_root: Path, device_name: str, student_tokens_s: float, teacher_tokens_s: float, shapes: dict
) -> Path:
    """Keep gpu_smoke.py's figures for `plan`: the student's training step and the teacher's forward in tokens/s,
    and the distillation step they make together with the teacher online (one token through both):
    3600 / (1/student + 1/teacher) tokens per device-hour."""
    per_hour = 3600 / (1 / student_tokens_s + 1 / teacher_tokens_s)
    path = gpu_smoke_path(cache_root, device_name)
    atomic.remember(
        path,
        json.dumps(
            {
                "device": device_name,
                "student_tokens_s": student_tokens_s,
                "teacher_tokens_s": teacher_tokens_s,
                "tokens_per_hour": per_hour,
                "shapes": shapes,
                "torch": torch.__version__,
                "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"),
            },
            indent=1,
        ),
    )
    return path


def recorded_gpu_rate(cache_root: Path, device_name: str) -> dict | None:
    """gpu_smoke.py's record for this kind of GPU, if one was written (None otherwise or when unreadable)."""
    try:
        record = json.loads(gpu_smoke_path(cache_root, device_name).read_text())
        return record if float(record["tokens_per_hour"]) > 0 else None
    except (OSError, ValueError, KeyError, TypeError):
        return None
