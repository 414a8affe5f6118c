"""`auto` dtypes: bfloat16 only where the CPU has native bfloat16 and a timed probe confirms it."""

import json
import os

import pytest
import torch

from normgrow.config import load_config
from normgrow.hardware import BF16_FLAGS, MIN_SPEEDUP, cpu_info, fast_dtype
from normgrow.pipeline import resolve_dtypes

AVX2 = """processor\t: 0
model name\t: AMD EPYC 7B13
flags\t\t: fpu vme sse sse2 avx avx2 fma
processor\t: 1
model name\t: AMD EPYC 7B13
flags\t\t: fpu vme sse sse2 avx avx2 fma
"""
AMX = """processor\t: 0
model name\t: Intel(R) Xeon(R) Platinum 8488C
flags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8
"""
ARM = """processor\t: 0
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 bf16
CPU implementer\t: 0x41
"""


def test_cpu_flags_are_read_from_cpuinfo():
    avx2, amx, arm = cpu_info(AVX2), cpu_info(AMX), cpu_info(ARM)
    assert avx2.model == "AMD EPYC 7B13" and "avx2" in avx2.flags and not avx2.flags & BF16_FLAGS
    assert amx.flags & BF16_FLAGS == {"amx_bf16", "avx512_bf16"}
    assert "asimd" in arm.flags and not arm.flags & BF16_FLAGS  # arm's `bf16` is not an x86 AMX/AVX-512 path


def test_auto_on_this_cpu_follows_its_flags_and_caches_the_probe(tmp_path):
    dtype, record = fast_dtype(torch.device("cpu"), tmp_path)
    probes = list((tmp_path / "hardware").glob("*.json")) if (tmp_path / "hardware").exists() else []
    if not cpu_info().flags & BF16_FLAGS:
        # no native bfloat16: float32, and no probe is run or written
        assert dtype == "float32" and "emulated" in record["reason"] and probes == []
        return
    # native bfloat16: one probe, cached, and the verdict is the threshold applied to its timings
    assert len(probes) == 1
    saved = json.loads(probes[0].read_text())
    assert saved["speedup"] == saved["float32_s"] / saved["bfloat16_s"]
    assert dtype == ("bfloat16" if saved["speedup"] >= MIN_SPEEDUP else "float32") == saved["choice"]
    mtime = probes[0].stat().st_mtime_ns
    assert fast_dtype(torch.device("cpu"), tmp_path) == (dtype, saved) and probes[0].stat().st_mtime_ns == mtime


def test_resolved_config_names_a_concrete_dtype(tmp_path):
    cfg = load_config("default", [f"data.cache_dir={tmp_path}"])
    assert cfg.train.dtype == "auto" and cfg.teacher.dtype == "auto"
    out = resolve_dtypes(cfg, torch.device("cpu"))
    assert out.train.dtype in ("float32", "bfloat16") and out.teacher.dtype == out.train.dtype
    assert out.train.dtype == fast_dtype(torch.device("cpu"), tmp_path)[0]
    pinned = resolve_dtypes(load_config("tiny"), torch.device("cpu"))  # the tests' preset pins float32
    assert (pinned.train.dtype, pinned.teacher.dtype) == ("float32", "float32")
    explicit = resolve_dtypes(load_config("default", ["train.dtype=float32", "teacher.dtype=bfloat16"]), torch.device("cpu"))
    assert (explicit.train.dtype, explicit.teacher.dtype) == ("float32", "bfloat16")


@pytest.mark.slow  # 25 s; starts interpreters to read their environment
def test_normgrow_processes_wait_passively_unless_told_otherwise():
    """OpenMP reads OMP_WAIT_POLICY when torch loads: importing normgrow first sets it to PASSIVE (a run sharing
    the CPU keeps its share, docs/LOG.md); a value in the environment wins; after torch it changes nothing."""
    import subprocess
    import sys

    def policy(code, env_value=None):
        env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
        if env_value:
            env["OMP_WAIT_POLICY"] = env_value
        out = subprocess.run([sys.executable, "-c", code + "; import os; print(os.environ.get('OMP_WAIT_POLICY'))"],
                             capture_output=True, text=True, env=env, check=True)
        return out.stdout.strip()

    assert policy("import normgrow") == "PASSIVE"
    assert policy("import normgrow", "ACTIVE") == "ACTIVE"
    assert policy("import torch, normgrow") == "None"
