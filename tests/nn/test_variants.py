"""Placements beyond pre/post (DeepNorm, Mix-LN, per-block lists) and growth operators beyond append
(stack, interleave): equations from raw weights, init constants, what growth preserves, boundaries,
freeze masks, parameter counts, and bitwise resume after a growth event."""

import dataclasses
import json

import pytest
import torch
from test_model import randomize_norms, rms, sublayers_by_hand

from conftest import assert_same_run, cli, events, kill_and_resume, stage_started
from normgrow.config import ModelConfig, load_config
from normgrow.errors import ConfigError
from normgrow.nn.model import DeepNormBlock, PostNormBlock, PreNormBlock, SandwichBlock, Student, count_parameters
from normgrow.train.growth import GROWTH
from normgrow.train.stages import plan_stages


def tiny(**kw) -> ModelConfig:
    base = dict(n_layer=3, d_model=32, n_head=4, n_kv_head=2, d_ff=64, vocab_size=97, init_std=0.1)
    base.update(kw)
    return ModelConfig(**base)


# ----------------------------------------------------------------------------- placements


@pytest.mark.parametrize("n_layer", [3, 12])
def test_deepnorm_block_follows_its_equation_with_alpha_from_the_full_depth(n_layer):
    cfg = tiny(norm="deepnorm", n_layer=n_layer)
    model = Student(cfg, depth=2).eval()  # a shallow prefix: α still comes from the full depth
    randomize_norms(model)
    block = model.layers[1]
    alpha = (2 * n_layer) ** 0.25  # DeepNet, decoder-only: α = (2N)^(1/4)
    T = 9
    h = torch.randn(2, T, cfg.d_model) * 2
    cos, sin = model.rotary(T, h.device)
    attn, mlp = sublayers_by_hand(block, h, cos, sin)
    g1, g2, eps = block.input_layernorm.weight, block.post_attention_layernorm.weight, cfg.norm_eps
    x = rms(alpha * h + attn(h), g1, eps)  # h = N(α·h + F(h)) per sublayer
    expected = rms(alpha * x + mlp(x), g2, eps)
    with torch.no_grad():
        torch.testing.assert_close(block(h, cos, sin), expected, atol=1e-5, rtol=1e-5)
    # α is not 1: the block differs from post-norm on the same weights
    post = PostNormBlock(cfg)
    post.load_state_dict(block.state_dict())
    with torch.no_grad():
        assert (post(h, cos, sin) - block(h, cos, sin)).abs().max() > 1e-3


def test_deepnorm_init_scales_value_output_and_mlp_by_beta_of_the_full_depth():
    n_layer, std = 16, 0.02
    cfg = tiny(norm="deepnorm", n_layer=n_layer, d_model=256, n_head=4, d_ff=1024, init_std=std)
    torch.manual_seed(0)
    model = Student(cfg, depth=1)
    beta = (8 * n_layer) ** -0.25  # DeepNet, decoder-only: β = (8N)^(-1/4)
    block = model.layers[0]
    for name in (
        "self_attn.v_proj.weight",
        "self_attn.o_proj.weight",
        "mlp.gate_proj.weight",
        "mlp.up_proj.weight",
        "mlp.down_proj.weight",
    ):
        got = dict(block.named_parameters())[name].std().item()
        assert abs(got - beta * std) < 0.05 * beta * std, name
    for name in ("self_attn.q_proj.weight", "self_attn.k_proj.weight"):
        got = dict(block.named_parameters())[name].std().item()
        assert abs(got - std) < 0.05 * std, name
    rec = model.init_record()["placements"]["DeepNormBlock"]
    assert rec["alpha"] == pytest.approx((2 * n_layer) ** 0.25) and rec["beta"] == pytest.approx(beta)
    assert rec["depth"] == n_layer


@pytest.mark.parametrize("ratio,n_post", [(0.25, 2), (0.0, 0), (0.5, 4), (1.0, 9)])
def test_mixln_is_post_norm_below_the_split_and_pre_norm_above(ratio, n_post):
    cfg = tiny(norm="mixln", n_layer=9, mixln_ratio=ratio)
    torch.manual_seed(0)
    mixed = Student(cfg).eval()
    kinds = [type(b) for b in mixed.layers]
    assert kinds == [PostNormBlock] * n_post + [PreNormBlock] * (9 - n_post)
    # the same student as the explicit per-block list (same draws, same function)
    torch.manual_seed(0)
    listed = Student(
        dataclasses.replace(cfg, norm="pre", block_norms=["post"] * n_post + ["pre"] * (9 - n_post))
    ).eval()
    idx = torch.randint(0, cfg.vocab_size, (2, 7))
    with torch.no_grad():
        assert torch.equal(mixed(idx), listed(idx))


def test_a_per_block_list_builds_each_block_of_its_placement():
    names = ["deepnorm", "post", "sandwich", "pre"]
    model = Student(tiny(n_layer=4, block_norms=names))
    assert [type(b) for b in model.layers] == [DeepNormBlock, PostNormBlock, SandwichBlock, PreNormBlock]


@pytest.mark.parametrize(
    "override,field",
    [
        ("model.mixln_ratio=1.5", "model.mixln_ratio"),
        ("model.block_norms=[pre, mixln, pre]", "model.block_norms.1"),
        ("curriculum.growth=stack", "curriculum.growth_init"),  # the grow preset's init is zero: stack only copies
    ],
)
def test_bad_variant_settings_name_their_field(override, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        load_config(
            "grow",
            [override, "model.n_layer=3", "curriculum.stages=[{n_layer: 1, tokens: 10}, {n_layer: 3, tokens: 10}]"],
        )


def test_copy_growth_between_placements_of_different_parameters_is_refused_when_planned(tiny_cache, tmp_path):
    """A sandwich block (four norms) cannot copy a pre-norm one (two): `normgrow plan` says so and a run stops
    before its run directory exists, not at the growth event after the prefix has trained."""
    over = [
        "model.n_layer=3",
        "model.block_norms=[pre, pre, sandwich]",
        "curriculum.growth_init=copy",
        "curriculum.stages=[{n_layer: 2, tokens: 256}, {n_layer: 3, tokens: 256}]",
    ]
    with pytest.raises(
        ConfigError,
        match=r"curriculum\.growth_init: copy: the new sandwich block at 2 cannot copy "
        r"block 1 \(pre\)",
    ):
        plan_stages(load_config("tiny", over))
    plan_stages(load_config("tiny", [over[0], "model.block_norms=[pre, pre, pre]", *over[2:]]))  # alike: fine
    proc = cli(
        "run", "tiny", "-o", tmp_path / "run", f"data.cache_dir={tiny_cache}", *over, "--no-progress", check=False
    )
    assert proc.returncode == 2 and "cannot copy block 1 (pre)" in proc.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "run").exists()


# ----------------------------------------------------------------------------- growth operators


@pytest.mark.parametrize(
    "operator,prefix,depth,new,boundaries",
    [
        ("append", 3, 6, (3, 4, 5), (3,)),
        ("stack", 3, 6, (3, 4, 5), (3,)),
        ("interleave", 3, 6, (1, 3, 5), (1, 3, 5)),
        ("interleave", 6, 9, (2, 5, 8), (2, 5, 8)),  # after old blocks 1, 3, 5
        ("interleave", 1, 3, (1, 2), (1,)),  # two new blocks after the one old block: one boundary
        ("interleave", 4, 6, (2, 5), (2, 5)),  # after old blocks 1 and 3
    ],
)
def test_operators_insert_where_they_say_with_their_boundaries(operator, prefix, depth, new, boundaries):
    ev = GROWTH[operator].event(prefix, depth)
    assert ev.new_blocks == new and ev.boundaries == boundaries


@pytest.mark.parametrize(
    "operator,sources",
    [
        ("stack", {3: 0, 4: 1, 5: 2}),  # the prefix repeated, bottom first
        ("interleave", {1: 0, 3: 1, 5: 2}),  # each new block copies the block just below it
        ("append", {3: 2, 4: 2, 5: 2}),  # copies the last prefix block
    ],
)
def test_copy_growth_copies_the_operators_source_blocks_and_counts_parameters(operator, sources):
    cfg = tiny(n_layer=6)
    model = Student(cfg, depth=3)
    old = [{k: v.clone() for k, v in b.state_dict().items()} for b in model.layers]
    per_block = count_parameters(model)["per_block"]
    total = count_parameters(model)["total"]
    ev = GROWTH[operator].apply(model, 6, "copy", seed=0)
    assert model.depth == 6
    assert count_parameters(model)["total"] == total + 3 * per_block
    old_positions = [p for p in range(6) if p not in ev.new_blocks]
    for i, p in enumerate(old_positions):  # old blocks keep their weights, in order
        assert all(torch.equal(model.layers[p].state_dict()[k], old[i][k]) for k in old[i])
    for p, src in sources.items():
        assert all(torch.equal(model.layers[p].state_dict()[k], old[src][k]) for k in old[src])
        assert model.layers[p] is not model.layers[old_positions[src]]  # a copy, not shared weights


@pytest.mark.parametrize(
    "norm,operator,preserved",
    [
        ("pre", "append", "exact"),
        ("pre", "interleave", "exact"),
        ("sandwich", "append", "exact"),
        ("sandwich", "interleave", "exact"),
        ("mixln", "append", "exact"),  # the appended blocks are above the split: pre-norm
        # a zero-output post-style block still normalizes its input: on top, the final norm undoes that
        # per-token rescale; in the middle of the stack the next block sees it, so the function moves
        ("post", "append", "up to eps"),
        ("deepnorm", "append", "up to eps"),
        ("post", "interleave", "moves"),
        ("deepnorm", "interleave", "moves"),
    ],
)
def test_zero_growth_preserves_the_function_where_the_placement_allows(norm, operator, preserved):
    cfg = tiny(norm=norm, n_layer=6, mixln_ratio=0.34)
    torch.manual_seed(0)
    model = Student(cfg, depth=3).eval()
    randomize_norms(model)  # trained gains are not 1: a rescale cannot hide behind unit gains
    idx = torch.randint(0, cfg.vocab_size, (2, 9))
    with torch.no_grad():
        before = model(idx)
        GROWTH[operator].apply(model, 6, "zero", seed=0)
        diff = (model(idx) - before).abs().max().item()
    if preserved == "exact":
        assert diff == 0.0
    elif preserved == "up to eps":
        assert diff < 1e-4
    else:
        assert diff > 1e-3


def test_placements_follow_each_block_to_its_final_position_under_interleave():
    cfg = load_config(
        "grow", ["model.norm=mixln", "model.mixln_ratio=0.34", "curriculum.growth=interleave", "model.vocab_size=64"]
    )
    plans = plan_stages(cfg)  # 3 → 6 → 9; floor(0.34 · 9) = 3 post-norm blocks at the bottom of the final model
    assert plans[-1].placements == ("post",) * 3 + ("pre",) * 6
    # the three initial blocks end at 0, 3 and 6 of the final model: only the first is below the split
    assert plans[0].placements == ("post", "pre", "pre")
    assert plans[1].placements == ("post", "post", "pre", "pre", "pre", "pre")  # 0, a | 1, b, 2, c (a → final 1)
    assert plans[1].growth.new_blocks == (1, 3, 5) and plans[2].growth.new_blocks == (2, 5, 8)
    assert [p.train_blocks for p in plans] == [(0, 1, 2), tuple(range(6)), tuple(range(9))]
    frozen = load_config(
        "grow",
        [
            "curriculum.growth=interleave",
            "model.vocab_size=64",
            "curriculum.stages=[{n_layer: 3, tokens: 10}, {n_layer: 6, tokens: 10, train: new}]",
        ],
    )
    assert plan_stages(frozen)[1].train_blocks == (1, 3, 5)


@pytest.mark.parametrize(
    "operator,extra",
    [
        pytest.param(
            "stack", ["curriculum.growth_init=copy", "model.norm=deepnorm"], marks=pytest.mark.slow
        ),  # 28 s each; append's stays in the default suite (test_curriculum.py)
        pytest.param("interleave", ["model.norm=mixln", "model.mixln_ratio=0.34"], marks=pytest.mark.slow),
    ],
)
def test_kill_just_after_a_growth_event_resumes_bitwise(tiny_cache, tmp_path, operator, extra):
    args = [
        "tiny",
        f"data.cache_dir={tiny_cache}",
        f"curriculum.growth={operator}",
        *extra,
        "curriculum.stages=[{n_layer: 1, tokens: 5120}, {n_layer: 3, tokens: 30000, train: new}]",
        "train.checkpoint_every_tokens=100000",
        "train.threads=1",
        "--no-progress",
    ]
    full, killed = kill_and_resume(tmp_path, args, stage_started(1))
    growth = [e for e in events(killed) if e["event"] == "growth"]
    assert growth and growth[0]["grow/operator"] == operator and growth[0]["grow/new_blocks"] == [1, 2]
    assert growth[0]["grow/boundaries"] == [1]  # 1 → 3: both new blocks sit above the one old block
    assert_same_run(full, killed)


def test_interleave_boundaries_are_read_where_each_representation_lives(tiny_cache, tmp_path):
    """2 → 4 by interleave inserts after blocks 0 and 1: boundaries 1 and 3 of the grown model are the outputs
    of old blocks 0 and 1 — residuals 1 and 2 before growth. The summary and the figures read them there."""
    out = tmp_path / "run"
    cli(
        "run",
        "tiny",
        f"data.cache_dir={tiny_cache}",
        "model.n_layer=4",
        "curriculum.growth=interleave",
        "curriculum.stages=[{n_layer: 2, tokens: 2560}, {n_layer: 4, tokens: 2560}]",
        "train.threads=1",
        "--no-progress",
        "-o",
        out,
    )
    summary = json.loads((out / "summary.json").read_text())
    before = [r for r in events_of(out / "diagnostics.jsonl") if r["event"] == "stage_end" and r["stage"] == 0][0]
    after = [r for r in events_of(out / "diagnostics.jsonl") if r["event"] == "stage_end" and r["stage"] == 1][0]
    got = [
        (e["boundary"], e["last_prefix_block"]["index"], e["first_new_block"]["index"]) for e in summary["boundaries"]
    ]
    assert got == [(1, 0, 1), (3, 1, 3)]
    for e, old in zip(summary["boundaries"], (1, 2), strict=True):
        assert e["rms_at_growth"]["all"] == before["residual_rms"][old]["all"]
        assert e["rms_end_of_next_stage"]["all"] == after["residual_rms"][e["boundary"]]["all"]
    assert (out / "plots" / "boundary_rms.png").is_file()


def events_of(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]
