"""Faults while running: damaged checkpoints, killed writes. Each ends either with the uninterrupted run's
result or with a one-line error; nothing damaged is loaded silently."""

import json
import os

from conftest import assert_same_run, cli, events, kill_and_resume
from normgrow import checkpoint

ARGS = ["curriculum.stages=[{n_layer: 3, tokens: 40000}]", "train.checkpoint_every_tokens=4096",
        "train.eval_every_tokens=8192", "train.threads=1", "--no-progress"]


def at_least_two_checkpoints_past(step):
    def ready(run_dir):
        ckpts = checkpoint.list_checkpoints(run_dir / "checkpoints")
        return len(ckpts) >= 2 and int(ckpts[-1].name.split("_")[1]) >= step
    return ready


def flip_a_byte(path, offset_from_end=100):
    data = bytearray(path.read_bytes())
    data[len(data) - offset_from_end] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_flipped_byte_in_the_latest_checkpoint_falls_back_to_the_previous_one(tiny_cache, tmp_path):
    damaged = {}

    def damage_latest(run_dir):
        ckpts = checkpoint.list_checkpoints(run_dir / "checkpoints")
        damaged["name"], damaged["previous"] = ckpts[-1].name, ckpts[-2].name
        flip_a_byte(ckpts[-1] / "model.safetensors")  # inside the weights: still a loadable file
        # and a killed write of the next checkpoint, left behind by a process that no longer exists
        (run_dir / "checkpoints" / ".tmp-step_99999999-999999999").mkdir()

    args = ["tiny", f"data.cache_dir={tiny_cache}", *ARGS]
    full, killed = kill_and_resume(tmp_path, args, at_least_two_checkpoints_past(24), after_kill=damage_latest)
    assert_same_run(full, killed)  # ends exactly as the uninterrupted run: same events, val/ce and weights
    ckdir = killed / "checkpoints"
    assert (ckdir / f".damaged-{damaged['name']}").is_dir()  # set aside for inspection, not deleted
    assert not list(ckdir.glob(".tmp-*"))  # the dead writer's temp dir is gone
    final = json.loads((killed / "summary.json").read_text())["val/ce"]
    assert final == json.loads((full / "summary.json").read_text())["val/ce"]


def test_resume_reports_the_damaged_checkpoint(tiny_cache, tmp_path):
    out = tmp_path / "run"
    base = ["run", "tiny", f"data.cache_dir={tiny_cache}", "-o", out, *ARGS[1:]]
    cli(*base, "curriculum.stages=[{n_layer: 3, tokens: 12288}]")
    ckpts = checkpoint.list_checkpoints(out / "checkpoints")
    latest = ckpts[-1]
    (latest / "state.json").write_text((latest / "state.json").read_text()[:40])  # a cut state.json
    assert checkpoint.damage(latest) == "state.json is unreadable or cut"
    os.remove(out / "summary.json")  # make the run unfinished so that it resumes
    proc = cli(*base, "curriculum.stages=[{n_layer: 3, tokens: 12288}]")
    said = proc.stdout + proc.stderr
    assert f"checkpoint {latest}: state.json is unreadable or cut" in said and "falling back" in said
    assert f"resuming {out} from {ckpts[-2].name}" in said
    assert events(out)[-1]["event"] == "stage_end"
