"""The command line's verbs through the real console entry point: output, exit codes, one-line errors."""

import json

import pytest

from conftest import cli, cli_process
from normgrow import __version__
from normgrow.config import load_config
from normgrow.nn.model import Student, count_parameters


@pytest.mark.e2e
def test_version_and_help():
    assert cli_process("--version").stdout.strip() == f"normgrow {__version__}"  # the installed console entry
    helptext = cli("--help").stdout
    for verb in ("study", "run", "report", "export", "diagnose", "teacher", "prepare", "model", "config"):
        assert verb in helptext


def test_config_prints_the_resolved_yaml_and_every_field():
    out = cli("config", "tiny", "model.norm=post", "train.lr=0.01").stdout
    assert "norm: post" in out and "lr: 0.01" in out
    fields = cli("config", "--fields").stdout.splitlines()
    keys = [line.split()[0] for line in fields]
    assert {"model.norm", "model.block_norms", "curriculum.growth", "diagnostics.include", "train.lr"} <= set(keys)
    assert all(len(line.split(None, 2)) == 3 for line in fields)  # key, default, help


def test_model_prints_shapes_and_the_true_parameter_count(tiny_cache):
    out = cli("model", "tiny", f"data.cache_dir={tiny_cache}", "model.block_norms=[post,pre,sandwich]").stdout
    cfg = load_config("tiny", ["model.vocab_size=512", "model.block_norms=[post,pre,sandwich]"])
    total = count_parameters(Student(cfg.model))["total"]
    assert f"parameters: total {total:,}" in out
    assert "block_norms=post,pre,sandwich" in out and "layers.0.self_attn.q_proj.weight" in out


def test_prepare_and_teacher_train_reuse_the_cache(tiny_cache):
    out = cli("prepare", "tiny", f"data.cache_dir={tiny_cache}").stdout
    assert "reused cached token shards in" in out and "vocabulary 512" in out
    out = cli("teacher", "train", "tiny", f"data.cache_dir={tiny_cache}", "--no-progress").stdout
    assert out.startswith("default teacher: ") and str(tiny_cache) in out


@pytest.mark.e2e
def test_report_of_run_directories_draws_them_side_by_side(tiny_cache, tmp_path):
    for norm in ("pre", "post"):
        cli(
            "run",
            "tiny",
            "-o",
            tmp_path / norm,
            f"data.cache_dir={tiny_cache}",
            f"model.norm={norm}",
            "curriculum.stages=[{n_layer: 2, tokens: 1024}, {n_layer: 3, tokens: 1024}]",
            "--no-progress",
        )
    out = cli("report", tmp_path / "pre", tmp_path / "post", "-o", tmp_path / "fig").stdout.split()
    assert sorted(p.rsplit("/", 1)[1] for p in out) == [
        "boundary_rms.png",
        "collapse.png",
        "identity.png",
        "struct_content.png",
        "val_ce.png",
    ]
    growth = [
        json.loads(line)
        for line in (tmp_path / "post" / "metrics.jsonl").read_text().splitlines()
        if '"event": "growth"' in line
    ][0]
    assert growth["grow/operator"] == "append" and growth["grow/boundaries"] == [2] and growth["grow/new_blocks"] == [2]


def test_usage_errors_exit_2_with_one_line():
    for args, needle in (
        (["frobnicate"], "invalid choice"),
        (["run", "tiny", "--bogus"], "unrecognized"),
        (["config", "tiny", "model.norm=diagonal"], "model.norm: unknown placement 'diagonal'"),
        (["report", "/no/such/dir"], "/no/such/dir: no such directory"),
    ):
        proc = cli(*args, check=False)
        assert proc.returncode == 2, args
        assert needle in proc.stderr and "Traceback" not in proc.stderr


def test_report_of_a_run_that_has_not_evaluated_yet_is_one_line(tmp_path):
    """A run directory whose run has written no evaluation (killed before its first, or only just created): one
    line naming it, exit 2, and no figure of an empty curve left behind."""
    run_dir = tmp_path / "fresh run é"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("model: {}\n")
    proc = cli("report", run_dir, check=False)
    assert proc.returncode == 2 and "nothing to plot yet (no evaluation in metrics.jsonl)" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (run_dir / "plots").exists()
