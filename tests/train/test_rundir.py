"""The run directory's reader (train/rundir.py): a summary read back is frozen all the way down, a cut one reads as
none (while the file is still there to be named), and a folder without a config is not a run."""

import json

import pytest

from normgrow.errors import NormgrowError
from normgrow.train.rundir import RunDir


def test_a_summary_read_back_is_frozen_all_the_way_down(tmp_path):
    run = RunDir(tmp_path)
    run.write_summary({"val/ce": 3.25, "stages": [{"end": {"val/ce": 3.5}}], "compute": {"tokens": 64}})
    s = run.summary()
    assert s is not None and s["val/ce"] == 3.25 and s["stages"][0]["end"]["val/ce"] == 3.5
    with pytest.raises(TypeError):
        s["val/ce"] = 0.0  # type: ignore[index]
    with pytest.raises(TypeError):
        s["stages"][0]["end"]["val/ce"] = 0.0  # type: ignore[index]
    assert isinstance(s["stages"], tuple)  # a list read back cannot be appended to
    assert json.loads(run.summary_file.read_text())["compute"] == {"tokens": 64}  # the file itself is plain JSON


def test_a_cut_summary_reads_as_none_but_is_still_there(tmp_path):
    run = RunDir(tmp_path)
    run.write_summary({"val/ce": 3.25})
    run.summary_file.write_text(run.summary_file.read_text()[:5])
    assert run.summary() is None and run.has_summary_file()


def test_a_folder_without_a_config_is_not_a_run(tmp_path):
    run = RunDir(tmp_path)
    assert not run.is_run() and run.config_or_none() is None and not run.has_trained()
    with pytest.raises(NormgrowError, match="not a run directory"):
        run.require()
    assert run.checkpoint(12) == tmp_path / "checkpoints" / "step_00000012"
