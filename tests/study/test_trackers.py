"""Trackers: a micro study's runs in W&B (offline) and Trackio (local), grouped by study and arm, job type = the
arm's part in the claims, tags = seed, budget, placement and curriculum, and the study's summary logged once. The
W&B run files are read back with W&B's own record schema; Trackio's database with Trackio's own reader."""

import csv
import glob
import json
import os
import struct
import subprocess
import sys

import pytest
from test_runner import write_study

from conftest import cli_process

wandb_pb = pytest.importorskip("wandb.proto.wandb_internal_pb2")
pytest.importorskip("trackio")  # both installed by `make setup` (the `loggers` extra)


def wandb_records(path: str) -> list:
    """The records of a W&B transaction log (.wandb): a 7-byte header, then LevelDB-log framing (32 KiB blocks, each
    chunk a 7-byte header — crc32, length, type: 1 full, 2 first, 3 middle, 4 last) around protobuf Records."""
    data = open(path, "rb").read()
    assert data[:4] == b":W&B", path
    pos, block, pending, out = 7, 32768, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if length == 0 and kind == 0:
            pos += left
            continue
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            r = wandb_pb.Record()
            r.ParseFromString(pending)
            out.append(r)
            pending = b""
    return out


def run_record(folder) -> tuple:
    (path,) = glob.glob(str(folder / "wandb" / "offline-run-*" / "run-*.wandb"))
    runs = [r.run for r in wandb_records(path) if r.WhichOneof("record_type") == "run"]
    return runs[0].run_group, runs[0].job_type, list(runs[0].tags), wandb_records(path)


READ_TRACKIO = """
import json
from trackio.sqlite_storage import SQLiteStorage as S
runs = S.get_runs("normgrow")
print(json.dumps({r: {"config": S.get_run_config("normgrow", r), "logs": S.get_logs("normgrow", r)} for r in runs},
                 default=str))
"""


@pytest.mark.slow  # 68 s (a micro study with both trackers in fresh processes): `make test-slow`
def test_a_studys_runs_are_grouped_typed_and_tagged_and_its_summary_is_logged_once(tiny_cache, tmp_path):
    spec = write_study(
        tmp_path / "s.yaml",
        tiny_cache,
        {"pre": "{overrides: [model.norm=pre]}", "post": "{overrides: [model.norm=post]}"},
        extra="contrasts: {gap: [pre, post]}\nclaims: {pre_grow: pre, post_grow: post}\n",
        more=('"train.loggers=[wandb, trackio]"',),
    )
    env = {**os.environ, "WANDB_MODE": "offline", "TRACKIO_DIR": str(tmp_path / "trackio"), "WANDB_SILENT": "true"}
    out = tmp_path / "study"
    cli_process("study", spec, "-o", out, env=env)
    for arm, role in (("pre", "pre_grow"), ("post", "post_grow")):
        for seed in (0, 1):
            group, job_type, tags, _ = run_record(out / "runs" / f"{arm}-s{seed}")
            assert (group, job_type) == (f"micro/{arm}", role)
            assert tags == [f"seed-{seed}", "budget-1", f"placement-{arm}", "curriculum-grow"]
    # the study's summary: one W&B run in the study directory, its contrast b − a by hand from results.csv
    group, job_type, tags, records = run_record(out)
    assert (group, job_type, tags) == ("micro", "study-summary", ["study-summary"])
    with open(out / "results.csv", newline="") as f:
        ce = {(r["arm"], int(r["seed"])): float(r["val_ce"]) for r in csv.DictReader(f)}
    gap = sum(ce[("post", s)] - ce[("pre", s)] for s in (0, 1)) / 2
    history = [r.history for r in records if r.WhichOneof("record_type") == "history"]
    logged = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for h in history for item in h.item}
    assert logged["contrast/gap"] == pytest.approx(gap, abs=1e-12)
    # Trackio: the four runs and the summary, grouped; the runs' metrics logged at their steps
    proc = subprocess.run([sys.executable, "-c", READ_TRACKIO], capture_output=True, text=True, env=env, check=True)
    runs = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(runs) == 5
    groups = sorted(r["config"].get("_Group") or r["config"].get("group") or "" for r in runs.values())
    assert groups == ["micro", "micro/post", "micro/post", "micro/pre", "micro/pre"], groups
    summary = next(r for r in runs.values() if r["config"]["job_type"] == "study-summary")
    assert summary["logs"][0]["contrast/gap"] == pytest.approx(gap, abs=1e-12)
    run_logs = [r["logs"] for r in runs.values() if r["config"]["job_type"] != "study-summary"]
    assert all(any("val/ce" in row for row in logs) for logs in run_logs)
