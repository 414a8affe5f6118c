"""Config: presets load, overrides apply, bad values name their field, resolved configs round-trip."""

import dataclasses

import pytest

from normgrow.config import (
    RunConfig,
    load_config,
    preset_names,
    resume_may_differ,
    save_config,
    to_dict,
)
from normgrow.config.schema import describe_fields, field_docs, leaf_fields, meaning_of, teacher_key_view
from normgrow.errors import ConfigError
from normgrow.train.rundir import check_same_run


def test_every_preset_loads_and_validates():
    names = preset_names()
    assert {"tiny", "default"} <= set(names)
    for name in names:
        cfg = load_config(name)
        assert isinstance(cfg, RunConfig)


def test_overrides_apply_with_types():
    cfg = load_config("tiny", ["model.norm=post", "train.lr=3e-4", "model.d_model=64", "seed=7"])
    assert cfg.model.norm == "post"
    assert cfg.train.lr == pytest.approx(3e-4) and isinstance(cfg.train.lr, float)
    assert cfg.model.d_model == 64 and cfg.seed == 7
    assert load_config("tiny").model.norm == "pre"  # presets are not mutated


def test_overrides_can_replace_the_stage_list():
    cfg = load_config(
        "tiny",
        ["model.n_layer=6", "curriculum.stages=[{n_layer: 3, tokens: 100}, {n_layer: 6, tokens: 200, train: new}]"],
    )
    assert [(s.n_layer, s.tokens, s.train) for s in cfg.curriculum.stages] == [(3, 100, "all"), (6, 200, "new")]


def test_resolved_config_saves_and_reloads_unchanged(tmp_path):
    cfg = load_config("tiny", ["model.norm=post", "model.vocab_size=512", "data.cache_dir=/x/y"])
    save_config(cfg, tmp_path / "config.yaml")
    again = load_config(str(tmp_path / "config.yaml"))
    assert again == cfg
    assert dataclasses.asdict(again) == dataclasses.asdict(cfg)


BAD = [
    (["model.nrom=post"], "model.nrom"),  # unknown key
    (["bogus=1"], "bogus"),
    (["model.n_layer=abc"], "model.n_layer"),  # wrong type
    (["train.lr=fast"], "train.lr"),
    (["model.norm=postnorm"], "model.norm"),  # unknown placement
    (["model.n_head=4", "model.n_kv_head=3"], "model.n_kv_head"),
    (["model.d_model=36", "model.n_head=4", "model.n_kv_head=2"], "model.head_dim"),  # head_dim 9 is odd
    (["model.head_dim=7"], "model.head_dim"),
    (["model.d_model=0"], "model.d_model"),
    (["model.n_layer=-1"], "model.n_layer"),
    (["train.lr=0"], "train.lr"),
    (["train.lr=-1e-3"], "train.lr"),
    (["train.batch_size=0"], "train.batch_size"),
    (["data.seq_len=0"], "data.seq_len"),
    (
        ["model.n_layer=6", "curriculum.stages=[{n_layer: 3, tokens: 10}, {n_layer: 3, tokens: 10}]"],
        "curriculum.stages.1.n_layer",
    ),  # depths not increasing
    (
        ["model.n_layer=6", "curriculum.stages=[{n_layer: 6, tokens: 10}, {n_layer: 4, tokens: 10}]"],
        "curriculum.stages.1.n_layer",
    ),
    (["curriculum.stages=[{n_layer: 4, tokens: 10}]"], "curriculum.stages.0.n_layer"),  # exceeds model.n_layer=3
    (["curriculum.stages=[{n_layer: 3, tokens: 0}]"], "curriculum.stages.0.tokens"),  # empty budget
    (["curriculum.stages=[{n_layer: 2, tokens: 5}, {n_layer: 3, tokens: 5, train: '7'}]"], "curriculum.stages.1.train"),
    (["curriculum.stages=[]"], "curriculum.stages"),
    (["train.micro_batch_size=3"], "train.micro_batch_size"),  # does not divide batch_size 8
    (["train.tokens_per_step=500"], "train.tokens_per_step"),  # not a multiple of seq_len 32
    (["train.tokens_per_step=512", "train.micro_batch_size=5"], "train.micro_batch_size"),  # 5 ∤ 16
    (["data.train_pool_sequences=-1"], "data.train_pool_sequences"),
    (["data.train_pool_sequences=7"], "data.train_pool_sequences"),  # fewer than one step's 8 sequences
    (["data.max_pool_repeats=-2"], "data.max_pool_repeats"),
]


def test_tokens_per_step_sets_the_batch_in_sequences(tmp_path):
    cfg = load_config("tiny", ["train.tokens_per_step=1024", "train.micro_batch_size=4"])
    assert cfg.train.batch_size == 32  # 1,024 tokens / 32 per sequence: 8 accumulation steps of 4
    save_config(cfg, tmp_path / "c.yaml")
    assert load_config(str(tmp_path / "c.yaml")) == cfg


@pytest.mark.parametrize("overrides,field", BAD, ids=[" ".join(o) for o, _ in BAD])
def test_bad_values_give_one_line_error_naming_the_field(overrides, field):
    with pytest.raises(ConfigError) as e:
        load_config("tiny", overrides)
    msg = str(e.value)
    assert "\n" not in msg
    assert field in msg, msg


def test_bad_preset_and_yaml_name_the_file(tmp_path):
    with pytest.raises(ConfigError, match="nosuchpreset"):
        load_config("nosuchpreset")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  norm: [pre\n")
    with pytest.raises(ConfigError, match="bad.yaml"):
        load_config(str(bad))
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("model:\n  widht: 3\n")
    with pytest.raises(ConfigError, match=r"unknown.yaml.*model\.widht"):
        load_config(str(unknown))
    with pytest.raises(ConfigError, match="key=value"):
        load_config("tiny", ["model.norm"])


def test_every_field_has_a_help_line():
    rows = describe_fields(RunConfig)
    assert len(rows) > 50
    missing = [key for key, _, doc in rows if not doc.strip()]
    assert not missing, missing
    assert "placement" in field_docs(type(RunConfig().model))["norm"]


def test_every_field_declares_its_meaning():
    """A new field must decide whether it enters the default teacher's key and whether a resumed run may change it."""
    undecided = [
        f"{key} ({what})"
        for key, cls, f in leaf_fields(RunConfig)
        for what in ("key", "resume")
        if getattr(meaning_of(cls, f), what) is None
    ]
    assert not undecided, (
        f"config fields without a declared meaning: {', '.join(undecided)}. In normgrow/config/fields.py "
        "declare each with setting(default, key=True|False, resume=True|False), or its whole "
        "section with @section(key=..., resume=...) (see schema.Meaning)"
    )
    in_lists = [key for key, cls, f in leaf_fields(RunConfig) if "[]" in key and meaning_of(cls, f).resume]
    assert not in_lists, f"{in_lists}: a resumed run compares a list of sections whole; resume=True cannot apply here"


def dotted_keys(d: dict, prefix: str = "") -> set[str]:
    """Every dotted key rundir.config_differences can name in a config dict."""
    keys = [dotted_keys(v, f"{prefix}{k}.") if isinstance(v, dict) else {prefix + k} for k, v in d.items()]
    return set().union(*keys)


def test_resume_may_differ_names_real_keys_and_the_key_view_the_config():
    leaves = dotted_keys(to_dict(RunConfig()))
    assert resume_may_differ() and resume_may_differ() <= leaves, resume_may_differ() - leaves
    view = teacher_key_view(RunConfig())
    assert set(view) == set(to_dict(RunConfig())) and "block_norms" not in view["model"]  # left out at its `before`
    assert view["teacher"]["dtype"] == "float32" and "sharding" not in view["train"]  # an old default; added later
    moved = load_config("tiny", ["train.device=cpu", "name=x", "distill.loss=kl"])
    assert teacher_key_view(moved) == teacher_key_view(load_config("tiny"))


def test_a_resumed_run_may_change_where_it_runs_not_what_it_computes(tmp_path):
    save_config(load_config("tiny"), tmp_path / "config.yaml")
    check_same_run(
        tmp_path,
        load_config(
            "tiny",
            [
                "train.device=cpu",
                "train.threads=2",
                "train.micro_batch_size=4",
                "train.sharding=fsdp",
                "teacher.sharding=fsdp",
                "train.activation_checkpointing=true",
            ],
        ),
    )
    for changed in (
        "train.lr=0.5",
        "model.norm=post",
        "train.compile=true",
        "train.eval_every_tokens=999",
        "data.cache_dir=/elsewhere",
    ):
        with pytest.raises(ConfigError, match=changed.split("=")[0]):
            check_same_run(tmp_path, load_config("tiny", [changed]))


def test_a_micro_batch_that_does_not_divide_a_ranks_share_is_refused():
    import torch

    from normgrow.parallel.dist import DistInfo
    from normgrow.train.step import check_micro_batch

    cfg = load_config("tiny", ["train.batch_size=12", "train.micro_batch_size=4"])  # 4 divides 12 ...
    check_micro_batch(cfg, DistInfo(0, 1, 0, torch.device("cpu")))
    check_micro_batch(cfg, DistInfo(0, 3, 0, torch.device("cpu")))  # 4 per rank: no accumulation
    with pytest.raises(ConfigError, match=r"train.micro_batch_size: 4 does not divide the 6 sequences each of the 2"):
        check_micro_batch(cfg, DistInfo(0, 2, 0, torch.device("cpu")))  # ... but not the 6 each of two ranks holds


def test_compiled_blocks_with_a_sharded_student_are_refused_at_load_time():
    from normgrow.errors import ConfigError

    load_config("tiny", ["train.compile=true"])  # alone: fine
    with pytest.raises(ConfigError, match=r"^train.compile: not supported with train.sharding=fsdp"):
        load_config("tiny", ["train.compile=true", "train.sharding=fsdp"])
