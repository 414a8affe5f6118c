"""`auto` dtypes: bfloat16 only where the CPU has native bfloat16 and timed probes (a matmul, then the run's own
step) confirm it."""

import json
import os

import pytest
import torch

from conftest import cli
from normgrow.config import load_config, save_config
from normgrow.machine import dtypes
from normgrow.machine.dtypes import MIN_SPEEDUP, keep_saved, machine_dtype
from normgrow.machine.hardware import BF16_FLAGS, cpu_info, machine_key
from normgrow.parallel import dist

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
    dtype, record = machine_dtype(torch.device("cpu"), tmp_path)
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
    assert machine_dtype(torch.device("cpu"), tmp_path) == (dtype, saved) and probes[0].stat().st_mtime_ns == mtime


def _on_cpu():
    return dist.DistInfo(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))


def test_resolved_config_names_a_concrete_dtype(tmp_path):
    """`auto` resolves to a dtype; explicit dtypes are kept as they are."""
    cfg = load_config("tiny", [f"data.cache_dir={tmp_path}", "train.dtype=auto", "teacher.dtype=auto"])
    out = dtypes.resolve_run(cfg, _on_cpu(), tmp_path, log=lambda *_: None)
    assert out.train.dtype in ("float32", "bfloat16") and out.teacher.dtype in ("float32", "bfloat16")
    pinned = dtypes.resolve_run(load_config("tiny"), _on_cpu(), tmp_path)  # the tests' preset pins float32
    assert (pinned.train.dtype, pinned.teacher.dtype) == ("float32", "float32")
    explicit = dtypes.resolve_run(
        load_config("default", ["train.dtype=float32", "teacher.dtype=bfloat16"]), _on_cpu(), tmp_path
    )
    assert (explicit.train.dtype, explicit.teacher.dtype) == ("float32", "bfloat16")


def test_auto_follows_the_runs_own_step_where_bfloat16_is_native(tmp_path):
    """Without native bfloat16: float32 for both and no step probe. With it: the student's step and the teacher's
    forward of this run's shape are timed in both dtypes, each takes bfloat16 only at ≥ STEP_MIN_SPEEDUP, and the
    verdict is cached per shape: read back, not measured again, and a changed shape has its own."""
    cfg = load_config("tiny", [f"data.cache_dir={tmp_path}", "train.dtype=auto", "teacher.dtype=auto"])
    cpu = torch.device("cpu")
    dtypes._VERDICTS.clear()
    student, teacher, record = dtypes.auto_dtypes(cfg, cpu, tmp_path)
    records = sorted((tmp_path / "hardware").glob("dtype-*.json")) if (tmp_path / "hardware").exists() else []
    if machine_dtype(cpu, tmp_path)[0] == "float32":
        assert (student, teacher) == ("float32", "float32") and records == []
        return
    assert len(records) == 1 and records[0] == dtypes.dtype_record_path(cfg, cpu, tmp_path)
    saved = json.loads(records[0].read_text())
    for part, got in (("student", student), ("teacher", teacher)):
        f32, bf16 = saved[f"{part}_float32_s"], saved[f"{part}_bfloat16_s"]
        assert f32 > 0 and bf16 > 0
        assert got == saved[part] == ("bfloat16" if f32 >= dtypes.STEP_MIN_SPEEDUP * bf16 else "float32")
    mtime = records[0].stat().st_mtime_ns
    dtypes._VERDICTS.clear()
    assert dtypes.auto_dtypes(cfg, cpu, tmp_path)[:2] == (student, teacher)
    assert records[0].stat().st_mtime_ns == mtime
    wider = load_config("tiny", [f"data.cache_dir={tmp_path}", "train.dtype=auto", "model.d_model=64"])
    assert dtypes.dtype_record_path(wider, cpu, tmp_path) != records[0]
    # explicit dtypes and compile do not change which verdict a shape reads
    other = load_config("tiny", [f"data.cache_dir={tmp_path}", "train.dtype=bfloat16", "train.compile=true"])
    assert dtypes.dtype_record_path(other, cpu, tmp_path) == records[0]


def test_a_cached_verdict_is_what_every_run_of_the_shape_uses(tmp_path):
    """What the record file says is what `auto` resolves to (here written by hand: a bfloat16 student beside a
    float32 teacher), so the runs of a study read the one verdict the study wrote before them."""
    cpu = torch.device("cpu")
    if machine_dtype(cpu, tmp_path)[0] == "float32":
        pytest.skip("no native bfloat16 on this CPU: `auto` is float32 without a step probe")
    cfg = load_config("tiny", [f"data.cache_dir={tmp_path}", "train.dtype=auto", "teacher.dtype=auto"])
    path = dtypes.dtype_record_path(cfg, cpu, tmp_path)
    path.write_text(
        json.dumps(
            {
                "student": "bfloat16",
                "teacher": "float32",
                "student_float32_s": 2.0,
                "student_bfloat16_s": 1.0,
                "rule": "by hand",
            }
        )
    )
    dtypes._VERDICTS.clear()
    out = dtypes.resolve_run(cfg, _on_cpu(), tmp_path, log=lambda *_: None)
    assert (out.train.dtype, out.teacher.dtype) == ("bfloat16", "float32")


def test_a_run_directory_keeps_the_dtypes_it_started_with(tmp_path):
    """`auto` against a run directory that holds a run takes the saved config's dtypes (a finished run is
    recognised, a resumed one cannot switch dtype); explicit dtypes are left to check_same_run."""
    save_config(load_config("tiny", ["train.dtype=bfloat16", "teacher.dtype=float32"]), tmp_path / "config.yaml")
    auto = load_config("tiny", ["train.dtype=auto", "teacher.dtype=auto"])
    kept = keep_saved(auto, tmp_path)
    assert (kept.train.dtype, kept.teacher.dtype) == ("bfloat16", "float32")
    assert keep_saved(load_config("tiny"), tmp_path).train.dtype == "float32"
    assert keep_saved(auto, tmp_path / "new").train.dtype == "auto"


def test_a_finished_auto_run_is_recognised_when_run_again(tmp_path, tiny_cache):
    """`normgrow run` of a finished run whose config says `auto` reports it finished (it was refused as a different
    config: the saved config names the resolved dtype)."""
    args = [
        "run",
        "tiny",
        "-o",
        tmp_path / "r",
        f"data.cache_dir={tiny_cache}",
        "train.dtype=auto",
        "teacher.dtype=auto",
        "curriculum.stages.0.tokens=4096",
        "--no-progress",
        "--no-plots",
    ]
    cli(*args)
    again = cli(*args)
    assert "already finished" in again.stdout + again.stderr


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
        out = subprocess.run(
            [sys.executable, "-c", code + "; import os; print(os.environ.get('OMP_WAIT_POLICY'))"],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        return out.stdout.strip()

    assert policy("import normgrow") == "PASSIVE"
    assert policy("import normgrow", "ACTIVE") == "ACTIVE"
    assert policy("import torch, normgrow") == "None"


def test_no_teacher_means_no_probe_for_the_teachers_dtype(tmp_path):
    """A run without a teacher (the default teacher's own run) takes the student's dtype for `teacher.dtype: auto`
    and measures nothing for it."""
    cfg = load_config(
        "tiny", [f"data.cache_dir={tmp_path}", "teacher.path=none", "train.dtype=bfloat16", "teacher.dtype=auto"]
    )
    out, record = dtypes.resolve_auto(cfg, torch.device("cpu"), tmp_path)
    assert (out.train.dtype, out.teacher.dtype, record) == ("bfloat16", "bfloat16", None)
    assert not list(tmp_path.glob("hardware/dtype-*.json"))


DAMAGED = [
    b"",
    b'{"student": "bfl',
    b"\xff\xfe\x00",
    b"[]",
    b"null",
    b"{}",
    b'{"student": "float16", "teacher": "float32"}',
    b'{"student": "bfloat16", "teacher": 32}',
    b'{"choice": "float64"}',
]


def test_a_damaged_probe_record_is_measured_again_never_used(tmp_path):
    """A cached verdict that is empty, cut, not JSON, not an object, or names a dtype `auto` cannot resolve to reads
    as absent (so it is measured again and rewritten), never as a verdict; an intact one reads back as written."""
    path = tmp_path / "record.json"
    for text in DAMAGED:
        path.write_bytes(text)
        assert dtypes.read_record(path, ("student", "teacher")) is None, text
        assert dtypes.read_record(path, ("choice",)) is None, text
    assert dtypes.read_record(tmp_path / "absent.json", ("choice",)) is None
    path.write_text('{"student": "bfloat16", "teacher": "float32", "note": 1}')
    assert dtypes.read_record(path, ("student", "teacher")) == {"student": "bfloat16", "teacher": "float32", "note": 1}


def test_a_damaged_verdict_in_the_cache_is_rewritten_by_the_next_run(tmp_path):
    cpu = torch.device("cpu")
    if machine_dtype(cpu, tmp_path)[0] == "float32":
        pytest.skip("no native bfloat16 on this CPU: `auto` is float32 without a step probe or its record")
    cfg = load_config("tiny", [f"data.cache_dir={tmp_path}", "train.dtype=auto", "teacher.dtype=auto"])
    path = dtypes.dtype_record_path(cfg, cpu, tmp_path)
    path.write_text('{"student": "float16", "teacher": "float32"}')  # edited by hand into a dtype auto never picks
    dtypes._VERDICTS.clear()
    student, teacher, record = dtypes.auto_dtypes(cfg, cpu, tmp_path)
    assert {student, teacher} <= {"float32", "bfloat16"} and "student_float32_s" in record
    assert json.loads(path.read_text())["student"] == student  # measured again and kept


def test_a_study_whose_shapes_disagree_puts_every_arm_in_float32(tmp_path):
    """Two arms whose probes straddle STEP_MIN_SPEEDUP (records by hand: pre-norm's step 1.23× faster in bfloat16,
    post-norm's 1.17×) resolve to one precision: float32 for both students; the teachers, which agree, keep theirs.
    Rule 1's record is planted too (bfloat16 native and fast), so that the test does not hang on the machine's noise."""
    cpu, info = torch.device("cpu"), cpu_info()
    if not info.flags & BF16_FLAGS:
        pytest.skip("no native bfloat16 on this CPU: `auto` is float32 without a step probe")
    (tmp_path / "hardware").mkdir()
    rule1 = {"choice": "bfloat16", "speedup": 2.0, "rule": "by hand"}
    (tmp_path / "hardware" / f"cpu-{machine_key(info)}.json").write_text(json.dumps(rule1))
    jobs, paths = [], {}
    for norm, student_f32 in (("pre", 1.23), ("post", 1.17)):
        cfg = load_config(
            "tiny", [f"data.cache_dir={tmp_path}", "train.dtype=auto", "teacher.dtype=auto", f"model.norm={norm}"]
        )
        paths[norm] = dtypes.dtype_record_path(cfg, cpu, tmp_path)
        record = {
            "student": dtypes.step_verdict(student_f32, 1.0),
            "teacher": "bfloat16",
            "student_float32_s": student_f32,
            "student_bfloat16_s": 1.0,
            "teacher_float32_s": 2.0,
            "teacher_bfloat16_s": 1.0,
            "rule": "by hand",
        }
        paths[norm].write_text(json.dumps(record))
        jobs.append((f"{norm}-joint", cfg, cpu, tmp_path))
    assert paths["pre"] != paths["post"]
    assert json.loads(paths["pre"].read_text())["student"] == "bfloat16"  # the split this guards against
    dtypes._VERDICTS.clear()
    lines: list[str] = []
    dtypes.resolve_for_jobs(jobs, lines.append, threads=None)
    dtypes._VERDICTS.clear()  # what a run in another process reads: the files
    for _, cfg, _, _ in jobs:
        out = dtypes.resolve_run(cfg, _on_cpu(), tmp_path, log=lambda *_: None)
        assert (out.train.dtype, out.teacher.dtype) == ("float32", "bfloat16")
    saved = json.loads(paths["pre"].read_text())
    assert (
        "pre-joint bfloat16, post-joint float32" in saved["study_wide"]["student"]
        and "teacher" not in saved["study_wide"]
    )
    assert any("every arm of the study" in line for line in lines)
