"""Decay branches (train/branch.py): a run started from a trunk's checkpoint at its decay start equals, bit for bit, the
run trained directly at its budget — for a joint and for a grown student — and a branch that could not equal it is
refused in one line."""

import json
import shutil

import pytest

from conftest import assert_same_run, cli, events
from normgrow.config import load_config
from normgrow.train.branch import decay_start_step

PER_STEP = 8 * 32  # tiny: batch 8 × seq_len 32
RECIPE = ["train.schedule=wsd", "train.decay_fraction=0.2", "train.threads=1", "--no-progress", "--no-plots"]
JOINT = {"small": "[{n_layer: 3, tokens: 12800}]", "large": "[{n_layer: 3, tokens: 25600}]"}
# grown 1 → 3 blocks: the first stage as long in both budgets, the last stretched
GROW = {
    "small": "[{n_layer: 1, tokens: 2560}, {n_layer: 3, tokens: 10240}]",
    "large": "[{n_layer: 1, tokens: 2560}, {n_layer: 3, tokens: 23040}]",
}


def _run(cache, out, stages, *extra, check=True):
    return cli("run", "tiny", "-o", out, f"data.cache_dir={cache}", f"curriculum.stages={stages}", *RECIPE, *extra,
               check=check)  # fmt: skip


def test_decay_start_step_is_the_last_step_at_the_peak_rate():
    # hand-computed: 50 steps of 256 tokens, decay over the last 20% → starts at 10,240 tokens = the end of step 40
    cfg = load_config("tiny", ["curriculum.stages=[{n_layer: 3, tokens: 12800}]", "train.schedule=wsd"])
    assert decay_start_step(cfg) == 40
    # 0.3 of 50 steps: the decay starts at 8,960 tokens = 35 steps exactly; of 49 steps at 8,780.8 → step 34
    assert decay_start_step(load_config("tiny", [*cfg_args(12800), "train.decay_fraction=0.3"])) == 35
    assert decay_start_step(load_config("tiny", [*cfg_args(12544), "train.decay_fraction=0.3"])) == 34


def cfg_args(tokens):
    return [f"curriculum.stages=[{{n_layer: 3, tokens: {tokens}}}]", "train.schedule=wsd"]


@pytest.mark.e2e
@pytest.mark.parametrize("stages", [JOINT, GROW], ids=["joint", "grow"])
def test_a_branch_equals_the_run_trained_directly_at_its_budget(tiny_cache, tmp_path, stages):
    small = load_config("tiny", [f"curriculum.stages={stages['small']}", "train.schedule=wsd"])
    large = load_config("tiny", [f"curriculum.stages={stages['large']}", "train.schedule=wsd"])
    s_small, s_large = decay_start_step(small), decay_start_step(large)
    assert (s_small, s_large) == (40, 80)  # 0.8 × 50 and 0.8 × 100 steps
    trunk = tmp_path / "trunk"
    _run(tiny_cache, trunk, stages["large"], f"train.checkpoint_tokens=[{s_small * PER_STEP}]",
         f"train.stop_tokens={s_large * PER_STEP}")  # fmt: skip
    assert not (trunk / "summary.json").exists() and events(trunk)[-1]["step"] <= s_large
    for budget, step in (("small", s_small), ("large", s_large)):
        direct, branch = tmp_path / f"direct-{budget}", tmp_path / f"branch-{budget}"
        _run(tiny_cache, direct, stages[budget])
        _run(tiny_cache, branch, stages[budget], f"train.init_from={trunk}/checkpoints/step_{step:08d}")
        assert_same_run(direct, branch)  # every event, floats compared exactly, and the final weights
        a, b = (json.loads((d / "summary.json").read_text()) for d in (direct, branch))
        assert a["stages"] == b["stages"] and a["boundaries"] == b["boundaries"]
        assert (direct / "diagnostics.jsonl").read_text() == (branch / "diagnostics.jsonl").read_text()
        decayed = [e["lr"] for e in events(branch, "train") if e["step"] > step]
        assert decayed and max(decayed) < 3e-3  # the branch decays: every logged rate after its start is below peak


@pytest.mark.e2e
def test_a_branch_that_could_not_equal_its_direct_run_is_refused(tiny_cache, tmp_path):
    trunk = tmp_path / "trunk"
    _run(tiny_cache, trunk, JOINT["large"], "train.checkpoint_tokens=[10240, 12800]", "train.stop_tokens=20480")
    ckpts = trunk / "checkpoints"

    def refused(out, *extra, stages=JOINT["small"]):
        proc = _run(tiny_cache, tmp_path / out, stages, *extra, check=False)
        assert proc.returncode != 0 and not (tmp_path / out / "summary.json").exists()
        return proc.stderr.strip().splitlines()[-1]

    # past the small run's decay start (step 40): its step 50 is decayed, the trunk's is not
    assert "step 50 is past this run's last step at the peak rate (40)" in refused(
        "late", f"train.init_from={ckpts}/step_00000050"
    )
    assert "another recipe than this one (train.lr differ)" in refused(
        "lr", f"train.init_from={ckpts}/step_00000040", "train.lr=1e-3"
    )
    assert "needs train.schedule=wsd (got cosine)" in refused(
        "cosine", f"train.init_from={ckpts}/step_00000040", "train.schedule=cosine"
    )
    # a grown run cannot branch from a joint trunk: its stages differ before the last
    assert "differ before the last" in refused(
        "grow", f"train.init_from={ckpts}/step_00000040", "model.n_layer=3", stages=GROW["small"]
    )
    damaged = tmp_path / "damaged"
    shutil.copytree(trunk, damaged)
    (damaged / "checkpoints" / "step_00000040" / "optimizer.pt").write_bytes(b"cut")
    assert "optimizer.pt does not match its recorded sha256" in refused(
        "dmg", f"train.init_from={damaged}/checkpoints/step_00000040"
    )
    assert "not a checkpoint of a run directory" in refused("none", f"train.init_from={tmp_path}/nowhere")
    assert "train.stop_tokens: 25,600 is not before the run's end (25,600 tokens)" in refused(
        "stop", "train.stop_tokens=25600", stages=JOINT["large"]
    )
    assert "not a non-negative multiple of the tokens per step (256" in refused("odd", "train.stop_tokens=1000")
