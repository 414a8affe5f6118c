"""`normgrow evaluate`: lm-evaluation-harness on a micro study's exports — per-arm scores, a contrast table in the
report, per-item results kept, numbers equal to a direct `lm_eval` call on one export, the local task by hand."""

import csv
import json
import os
import subprocess
import sys

import pytest
from test_runner import write_study

from conftest import cli, cli_process
from normgrow.study.report.downstream import CHOICES, CONTEXT, CONTINUATION, ITEMS, LOCAL_TASK

pytestmark = pytest.mark.e2e  # every test here reads one micro study trained and evaluated end to end

pytest.importorskip("lm_eval")  # installed by `make setup` (the `eval` extra)

LIMIT = 60  # items of the local task per export (of 200): enough for a contrast table, a few seconds each


@pytest.fixture(scope="module")
def evaluated(tiny_cache, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("downstream")
    spec = write_study(
        tmp / "s.yaml",
        tiny_cache,
        {"pre": "{overrides: [model.norm=pre]}", "post": "{overrides: [model.norm=post]}"},
        extra=f"contrasts: {{gap: [pre, post]}}\nevaluate: {{tasks: [{LOCAL_TASK}], limit: {LIMIT}}}\n",
    )
    out = tmp / "study"
    proc = cli("study", spec, "-o", out)  # the study field: evaluated after training, into the report
    return out, proc


def test_a_study_with_evaluate_scores_every_run_and_reports_the_contrast(evaluated):
    out, proc = evaluated
    with open(out / "evaluate" / "summary.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert sorted((r["arm"], r["seed"]) for r in rows) == [("post", "0"), ("post", "1"), ("pre", "0"), ("pre", "1")]
    assert all(r["task"] == LOCAL_TASK and r["metric"] == "acc" for r in rows)
    acc = {(r["arm"], int(r["seed"])): float(r["value"]) for r in rows}
    # each score is the mean of its per-item records, kept beside it
    for (arm, seed), value in acc.items():
        items = (out / "evaluate" / "runs" / f"{arm}-s{seed}" / f"{LOCAL_TASK}.samples.jsonl").read_text().splitlines()
        assert len(items) == LIMIT
        assert value == pytest.approx(sum(json.loads(i)["acc"] for i in items) / LIMIT, abs=1e-12)
    # the report's contrast: post − pre paired over seeds 0 and 1, by hand: sd = |d0 − d1| / √2, half-width
    # t(1, .975) · sd / √2 = 12.706 · |d0 − d1| / 2
    diffs = [acc[("post", s)] - acc[("pre", s)] for s in (0, 1)]
    mean, half = sum(diffs) / 2, 12.7062047 * abs(diffs[0] - diffs[1]) / 2
    report = (out / "report.md").read_text()
    assert "## Downstream tasks (lm-evaluation-harness)" in report
    line = next(x for x in report.splitlines() if x.startswith("| gap (post − pre) |"))
    assert f"{mean:+.4f}" in line
    if half > 0:
        assert f"[{mean - half:+.4f}, {mean + half:+.4f}]" in line


@pytest.mark.slow  # 15 s (lm_eval's own command line in a fresh interpreter): `make test-slow`
def test_evaluate_equals_a_direct_lm_eval_call_on_one_export(evaluated, tmp_path):
    out, _ = evaluated
    export, tasks = out / "evaluate" / "exports" / "post-s1", out / "evaluate" / "tasks"
    assert json.loads((export / "config.json").read_text())["model_type"] == "normgrow"
    proc = subprocess.run(
        [
            sys.executable, "-m", "lm_eval", "--model", "hf",
            "--model_args", f"pretrained={export},dtype=float32,trust_remote_code=True",
            "--tasks", LOCAL_TASK, "--include_path", str(tasks), "--device", "cpu", "--batch_size", "8",
            "--limit", str(LIMIT), "--output_path", str(tmp_path / "direct"), "--log_samples",
        ],
        capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(next((tmp_path / "direct").rglob("results_*.json")).read_text())
    ours = json.loads((out / "evaluate" / "runs" / "post-s1" / f"{LOCAL_TASK}.json").read_text())["metrics"]
    assert result["results"][LOCAL_TASK]["acc,none"] == ours["acc,none"]
    direct = [json.loads(x) for x in next((tmp_path / "direct").rglob("samples_*.jsonl")).read_text().splitlines()]
    kept = [json.loads(x) for x in (out / "evaluate" / "runs" / "post-s1" / f"{LOCAL_TASK}.samples.jsonl").open()]
    by_doc = {s["doc_id"]: s for s in kept}
    assert len(direct) == LIMIT
    for s in direct:  # the harness writes its log-likelihoods as strings: the same floats, printed
        ours_item = [float(ll) for ll, _ in by_doc[s["doc_id"]]["filtered_resps"]]
        assert ours_item == [float(ll) for ll, _ in s["filtered_resps"]]


def test_the_local_task_by_hand_and_a_rerun_reads_back(evaluated):
    out, _ = evaluated
    items = [json.loads(x) for x in (out / "evaluate" / "tasks" / f"{LOCAL_TASK}.jsonl").read_text().splitlines()]
    assert len(items) == ITEMS and all(len(i["choices"]) == CHOICES for i in items)
    # item i's true continuation is its own; the others are items i+1 … i+3's, in order around its label
    for i, item in enumerate(items):
        own = item["choices"][item["label"]]
        others = [c for j, c in enumerate(item["choices"]) if j != item["label"]]
        nxt = [items[(i + j) % ITEMS] for j in range(1, CHOICES)]
        assert others == [n["choices"][n["label"]] for n in nxt]
        assert own and item["context"]
    assert len({i["label"] for i in items}) == CHOICES  # labels spread over the positions
    before = (out / "evaluate" / "summary.csv").read_bytes()
    again = cli("evaluate", out)  # every key matches: read back, nothing evaluated again
    assert "evaluate: " in again.stdout and "post-s0 (" not in again.stdout
    assert (out / "evaluate" / "summary.csv").read_bytes() == before
    assert CONTEXT + CONTINUATION == 40


def _copy(out, tmp_path):
    import shutil

    shutil.copytree(out, tmp_path / "study")
    return tmp_path / "study"


@pytest.mark.parametrize("harm", ["flipped", "cut", "retrained"])
def test_an_export_that_is_not_its_runs_current_checkpoint_is_set_aside_and_made_again(evaluated, tmp_path, harm):
    """Before: `evaluate` reused any export whose config.json existed and any score whose task key matched — a
    retrained run kept its old export and scores, and an export with 64 bytes overwritten was scored (0.111 against
    0.222). Now an export is checked against its recorded hashes and its run's current checkpoint before it is
    scored: damaged, cut, or made from an earlier training (here its recorded source edited), it is set aside with
    its scores and made again — the same bytes as the intact export, the same scores."""
    out, _ = evaluated
    study = _copy(out, tmp_path)
    export = study / "evaluate" / "exports" / "pre-s0"
    weights = export / "model.safetensors"
    if harm == "flipped":
        data = bytearray(weights.read_bytes())
        data[len(data) // 2 : len(data) // 2 + 64] = bytes(64)
        weights.write_bytes(bytes(data))
    elif harm == "cut":
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    else:
        record = json.loads((export / "normgrow_export.json").read_text())
        record["source"] = "0" * 16
        (export / "normgrow_export.json").write_text(json.dumps(record))
    if harm == "flipped":  # a real process outside any git repository: lm_eval's `git describe` stays quiet, and
        # lm_eval's and datasets' progress bars go to each run's lm_eval.log, not normgrow's stderr (before: "fatal:
        # not a git repository" and 14 lines of bars per evaluation)
        proc = cli_process("evaluate", study, cwd=tmp_path)
        assert proc.stderr == "", proc.stderr[-2000:]
        log = (study / "evaluate" / "runs" / "pre-s0" / "lm_eval.log").read_text()
        assert "Running loglikelihood requests" in log and "not a git repository" not in log
    else:
        proc = cli("evaluate", study)
    assert "evaluate: the export of pre-s0 " in proc.stdout and "set aside with its scores in " in proc.stdout
    assert proc.stdout.count("set aside") == 1  # the other exports verify and are kept (a copied study's local task
    # names its own path, so every run is scored again here: the same scores)
    assert weights.read_bytes() == (out / "evaluate" / "exports" / "pre-s0" / "model.safetensors").read_bytes()
    assert (study / "evaluate" / "summary.csv").read_bytes() == (out / "evaluate" / "summary.csv").read_bytes()
    aside = list((study / "evaluate" / "stale").glob("*/exports/pre-s0"))
    assert len(aside) == 1 and (aside[0].parent.parent / "runs" / "pre-s0" / f"{LOCAL_TASK}.json").is_file()
    assert len(list((study / "evaluate" / "stale").iterdir())) == 1


def test_a_damaged_export_whose_run_has_no_checkpoint_left_is_refused_in_one_line(evaluated, tmp_path):
    import shutil

    out, _ = evaluated
    study = _copy(out, tmp_path)
    weights = study / "evaluate" / "exports" / "post-s1" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    shutil.rmtree(study / "runs" / "post-s1" / "checkpoints")
    proc = cli("evaluate", study, check=False)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "model.safetensors does not match its recorded sha256" in lines[0]
    assert "has no checkpoint to export again from" in lines[0]


def test_the_report_leaves_out_scores_of_an_earlier_training_of_a_run(evaluated, tmp_path):
    """summary.csv names each score's export; the report shows only scores of each run's current checkpoint and says
    how many it left out (before: the old downstream table stood beside the retrained runs' val/ce)."""
    out, _ = evaluated
    study = _copy(out, tmp_path)
    path = study / "evaluate" / "summary.csv"
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert all(len(r["source"]) == 16 for r in rows)
    next(r for r in rows if (r["arm"], r["seed"]) == ("pre", "0"))["source"] = "0" * 16  # an earlier training's
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    cli("report", study)
    report = (study / "report.md").read_text()
    assert "**1 score(s) left out**" in report
    section = report.split("## Downstream tasks", 1)[1]
    assert next(x for x in section.splitlines() if x.startswith("| pre | ")).startswith("| pre | 1 | ")


@pytest.mark.parametrize("device", ["cuda", "mps"])
def test_evaluate_on_a_device_this_machine_lacks_is_one_line(evaluated, device):
    """Before: `evaluate --device cuda` on a CPU-only torch ended in lm_eval's AssertionError traceback, and
    `--device mps` in torch's RuntimeError."""
    import torch

    if torch.cuda.is_available() if device == "cuda" else torch.backends.mps.is_available():
        pytest.skip(f"this machine has {device}")
    out, _ = evaluated
    proc = cli("evaluate", out, "--device", device, check=False)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert lines[0].startswith(f"normgrow: error: --device: {device}{':0' * (device == 'cuda')} is not on this machine")
