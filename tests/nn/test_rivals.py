"""The rivals a reviewer names: the placements reordered, hybrid, lnscale, keel and sandwich-ds; the norm kinds rmsnorm,
layernorm and dyt as an axis of their own; middle duplication, a late expansion and AdamW moments copied into copied
blocks. Equations from raw weights (every placement × every kind), parity with torch's own norms, init constants, what
`zero` growth preserves, the optimizer-state rule, and bitwise resume through a growth event."""

import math

import pytest
import torch
from test_model import norm_by_hand, sublayers_by_hand

from conftest import assert_same_run, cli, events, kill_and_resume, stage_started
from normgrow.config import ModelConfig, load_config
from normgrow.errors import ConfigError
from normgrow.nn.model import Student, count_parameters
from normgrow.train.growth import GROWTH, grow, rebuild_optimizer, set_trainable
from normgrow.train.stages import plan_stages
from normgrow.train.step import build_optimizer

KINDS = ["rmsnorm", "layernorm", "dyt"]
PLACEMENTS = ["pre", "post", "sandwich", "deepnorm", "reordered", "hybrid", "lnscale", "keel", "sandwich-ds"]
RIVALS = ["reordered", "hybrid", "lnscale", "keel", "sandwich-ds"]


def tiny(**kw) -> ModelConfig:
    base = dict(n_layer=4, d_model=32, n_head=4, n_kv_head=2, d_ff=64, vocab_size=97, init_std=0.1)
    base.update(kw)
    return ModelConfig(**base)


def randomize_norms(model: torch.nn.Module) -> None:
    """Every norm parameter away from its start (gains 1, biases 0, DyT's scalar 0.5), so a misplaced norm cannot
    hide behind a neutral value."""
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm." in name:
                p.copy_(
                    torch.rand(p.shape, generator=g) * (1.2 if name.endswith("alpha") else 1.0) + 0.5
                    if not name.endswith("bias")
                    else torch.randn(p.shape, generator=g) * 0.1
                )


def block_by_hand(placement: str, block, kind: str, h, cos, sin, depth: int, index: int) -> torch.Tensor:
    """What the placement's equation gives for block `index` of a `depth`-block full student (the docs' table)."""
    attn, mlp = sublayers_by_hand(block, h, cos, sin, kind)
    b = block

    def N(name, x):
        return norm_by_hand(kind, getattr(b, name), x)

    if placement == "pre":  # h + F(N(h))
        x = h + attn(N("input_layernorm", h))
        return x + mlp(N("post_attention_layernorm", x))
    if placement == "post":  # N(h + F(h))
        x = N("input_layernorm", h + attn(h))
        return N("post_attention_layernorm", x + mlp(x))
    if placement in ("sandwich", "sandwich-ds"):  # h + N2(F(N1(h)))
        x = h + N("attn_out_norm", attn(N("input_layernorm", h)))
        return x + N("mlp_out_norm", mlp(N("post_attention_layernorm", x)))
    if placement == "deepnorm":  # N(α·h + F(h)), α = (2D)^¼
        a = (2 * depth) ** 0.25
        x = N("input_layernorm", a * h + attn(h))
        return N("post_attention_layernorm", a * x + mlp(x))
    if placement == "reordered":  # h + N(F(h))
        x = h + N("attn_out_norm", attn(h))
        return x + N("mlp_out_norm", mlp(x))
    if placement == "hybrid":  # y = h + Attn_qkv(h); z = N(y); z + FFN(z)
        z = N("post_attention_layernorm", h + attn(h))
        return z + mlp(z)
    if placement == "lnscale":  # h + F(N(h)/√ℓ), ℓ = index + 1
        s = 1 / math.sqrt(index + 1)
        x = h + attn(N("input_layernorm", h) * s)
        return x + mlp(N("post_attention_layernorm", x) * s)
    assert placement == "keel"  # N_out(α·h + F(N_in(h))), α = 2D
    a = 2 * depth
    x = N("attn_out_norm", a * h + attn(N("input_layernorm", h)))
    return N("mlp_out_norm", a * x + mlp(N("post_attention_layernorm", x)))


# ----------------------------------------------------------------------------- equations and kinds


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("placement", PLACEMENTS)
def test_every_placement_in_every_norm_kind_follows_its_equation(placement, kind):
    cfg = tiny(norm=placement, norm_kind=kind)
    model = Student(cfg, depth=3).eval()  # a shallow prefix: every depth constant still comes from the full depth
    randomize_norms(model)
    T = 9
    h = torch.randn(2, T, cfg.d_model, generator=torch.Generator().manual_seed(1)) * 2
    cos, sin = model.rotary(T, h.device)
    with torch.no_grad():
        got = model.layers[2](h, cos, sin)
        expected = block_by_hand(placement, model.layers[2], kind, h, cos, sin, depth=4, index=2)
    torch.testing.assert_close(got, expected, atol=2e-5, rtol=2e-5)


def test_the_norm_kinds_equal_torchs_own_norms_and_dyt_its_formula():
    from normgrow.nn.norms import DyT, LayerNorm, RMSNorm

    x = torch.randn(3, 5, 16, generator=torch.Generator().manual_seed(2)) * 3 + 1
    g, b = torch.rand(16) + 0.5, torch.randn(16)
    ours = RMSNorm(16, 1e-6)
    theirs = torch.nn.RMSNorm(16, eps=1e-6)
    ln, torch_ln = LayerNorm(16, 1e-5), torch.nn.LayerNorm(16, eps=1e-5)
    dyt = DyT(16, 0.5)
    with torch.no_grad():
        for m in (ours, theirs, ln, torch_ln, dyt):
            m.weight.copy_(g)
        for m in (ln, torch_ln, dyt):
            m.bias.copy_(b)
        torch.testing.assert_close(ours(x), theirs(x))
        torch.testing.assert_close(ln(x), torch_ln(x))
        dyt.alpha.fill_(0.7)
        torch.testing.assert_close(dyt(x), g * torch.tanh(0.7 * x) + b)
        dyt.reset_parameters()  # back to its start: a = 0.5, g = 1, b = 0
        torch.testing.assert_close(dyt(x), torch.tanh(0.5 * x))


@pytest.mark.parametrize("placement", ["pre", "post", "hybrid", "keel"])
def test_the_norm_kind_changes_no_random_draw_of_the_init(placement):
    """A kind is an axis of its own: the same seed gives every linear weight and the embedding the same values
    whatever the norms are, and every norm starts at its kind's neutral values."""
    weights = {}
    for kind in KINDS:
        torch.manual_seed(0)
        model = Student(tiny(norm=placement, norm_kind=kind))
        weights[kind] = {n: p for n, p in model.named_parameters() if "norm." not in n}
        for n, p in model.named_parameters():
            if n.endswith("norm.weight"):
                assert torch.all(p == 1), n
            elif n.endswith("norm.bias"):
                assert torch.all(p == 0), n
            elif n.endswith("norm.alpha"):
                assert torch.all(p == 0.5), n
    assert weights["rmsnorm"].keys() == weights["layernorm"].keys() == weights["dyt"].keys()
    for n in weights["rmsnorm"]:
        assert torch.equal(weights["rmsnorm"][n], weights["layernorm"][n]) and torch.equal(
            weights["rmsnorm"][n], weights["dyt"][n]
        ), n


def test_each_rivals_parameters_are_the_norms_it_says():
    """Norm names per placement (the docs' table): a missing or extra norm would show in the counts."""
    per_block = {p: count_parameters(Student(tiny(norm=p)))["per_block"] for p in PLACEMENTS}
    d, hd = 32, 8
    assert per_block["reordered"] == per_block["pre"]  # two norms, moved to the branches' outputs
    assert per_block["hybrid"] == per_block["pre"] - d + hd  # no input norm; v gets a per-head norm
    assert per_block["lnscale"] == per_block["pre"]  # 1/√ℓ is a buffer, not a parameter
    assert per_block["keel"] == per_block["sandwich-ds"] == per_block["sandwich"] == per_block["pre"] + 2 * d
    # a LayerNorm adds a bias per gain; DyT a bias and one scalar per norm (2 block norms + q/k norms here)
    ln = count_parameters(Student(tiny(norm="pre", norm_kind="layernorm")))["per_block"]
    dyt = count_parameters(Student(tiny(norm="pre", norm_kind="dyt")))["per_block"]
    assert ln == per_block["pre"] + 2 * d + 2 * hd and dyt == ln + 4


def test_init_constants_of_the_rivals_come_from_the_full_depth():
    cfg = tiny(norm="sandwich-ds", n_layer=8)
    model = Student(cfg, depth=2)
    for block in model.layers:  # N₂'s gains start at 1/√(2D) with D = 8, not the 2 blocks held now
        for norm in (block.attn_out_norm, block.mlp_out_norm):
            assert torch.allclose(norm.weight, torch.full((32,), 1 / math.sqrt(16)))
        assert torch.all(block.input_layernorm.weight == 1)
    keel = Student(tiny(norm="keel", n_layer=8), depth=2)
    assert all(b.alpha == 16.0 for b in keel.layers)
    assert keel.init_record()["placements"]["KeelBlock"]["alpha"] == 16.0
    scaled = Student(tiny(norm="lnscale", n_layer=8))
    assert [float(b.depth_scale) for b in scaled.layers] == pytest.approx([1 / math.sqrt(i + 1) for i in range(8)])
    assert "layers.3.depth_scale" in scaled.state_dict()  # checkpoints and exports carry ℓ


def test_layernorm_scaling_keeps_the_index_a_block_ends_at_through_growth():
    """Under interleave the initial blocks end at 0, 2 and 4 of a 6-block student: their ℓ is that, from the
    start, and an inserted copy takes its own ℓ, not its source's."""
    cfg = load_config(
        "tiny",
        [
            "model.norm=lnscale",
            "model.n_layer=6",
            "model.vocab_size=64",
            "curriculum.growth=interleave",
            "curriculum.growth_init=copy",
            "curriculum.stages=[{n_layer: 3, tokens: 256}, {n_layer: 6, tokens: 256}]",
        ],
    )
    plans = plan_stages(cfg)
    assert plans[0].indices == (0, 2, 4) and plans[1].indices == tuple(range(6))
    model = Student(cfg.model, depth=3, placements=list(plans[0].placements), indices=list(plans[0].indices))
    assert [float(b.depth_scale) for b in model.layers] == pytest.approx([1, 1 / math.sqrt(3), 1 / math.sqrt(5)])
    grow(model, plans[1], cfg)
    assert [float(b.depth_scale) for b in model.layers] == pytest.approx([1 / math.sqrt(i + 1) for i in range(6)])
    assert torch.equal(model.layers[1].self_attn.q_proj.weight, model.layers[0].self_attn.q_proj.weight)


@pytest.mark.parametrize(
    "placement,kind,operator,preserved",
    [
        *[(p, k, op, "exact") for p in ("reordered", "lnscale", "sandwich-ds") for k in KINDS for op in ("append",)],
        ("reordered", "dyt", "interleave", "exact"),
        ("lnscale", "layernorm", "interleave", "exact"),
        # normalizing blocks: on top, the final norm undoes N's per-token rescale where N is scale-invariant
        *[(p, k, "append", "up to eps") for p in ("hybrid", "keel") for k in ("rmsnorm", "layernorm")],
        *[(p, "dyt", "append", "moves") for p in ("hybrid", "keel")],  # tanh is not scale-invariant
        ("hybrid", "rmsnorm", "interleave", "moves"),
        ("keel", "layernorm", "interleave", "moves"),
    ],
)
def test_zero_growth_preserves_the_function_where_the_placement_and_kind_allow(placement, kind, operator, preserved):
    cfg = tiny(norm=placement, norm_kind=kind, n_layer=6)
    torch.manual_seed(0)
    model = Student(cfg, depth=3).eval()
    randomize_norms(model)  # trained gains and biases are not neutral: a rescale cannot hide behind them
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


# ----------------------------------------------------------------------------- growth operators and state


def test_middle_duplication_copies_the_middle_group_after_itself():
    op = GROWTH["middle"]
    assert op.event(3, 6).new_blocks == (3, 4, 5) and op.event(6, 9).new_blocks == (4, 5, 6)
    assert op.event(6, 9).boundaries == (4,) and op.event(4, 6).new_blocks == (3, 4)
    assert [op.copy_source(6, 9, p) for p in (4, 5, 6)] == [1, 2, 3]
    cfg = tiny(n_layer=9)
    torch.manual_seed(0)
    model = Student(cfg, depth=6)
    old = list(model.layers)
    op.apply(model, 9, "copy", seed=0)
    # 0 1 2 3 1' 2' 3' 4 5: the old blocks are the same objects, the new ones copies of 1-3 by value
    assert [model.layers[i] for i in (0, 1, 2, 3, 7, 8)] == old
    for new, src in zip((4, 5, 6), (1, 2, 3), strict=True):
        assert model.layers[new] is not old[src]
        for (n, p), (_, q) in zip(model.layers[new].named_parameters(), old[src].named_parameters(), strict=True):
            assert torch.equal(p, q) and p is not q, n
    with pytest.raises(ConfigError, match="curriculum.growth: middle: growing 2 → 5"):
        op.event(2, 5)


def test_a_middle_step_larger_than_its_prefix_is_one_line_before_any_work(tmp_path):
    """Refused when the config loads: no teacher built, no cache, no run directory."""
    proc = cli(
        "run",
        "tiny",
        "curriculum.growth=middle",
        "curriculum.growth_init=copy",
        "curriculum.stages=[{n_layer: 1, tokens: 256}, {n_layer: 3, tokens: 256}]",
        f"data.cache_dir={tmp_path / 'cache'}",
        "-o",
        tmp_path / "run",
        check=False,
    )
    lines = proc.stderr.strip().splitlines()
    assert (
        proc.returncode == 2 and len(lines) == 1 and "middle group of 2 blocks, but the prefix has only 1" in lines[0]
    )
    assert not (tmp_path / "run").exists() and not (tmp_path / "cache").exists()


@pytest.mark.parametrize("optimizer", ["keep", "copy", "reset"])
def test_copied_blocks_start_from_their_sources_moments_only_when_asked(optimizer):
    cfg = load_config(
        "tiny",
        [
            "model.n_layer=6",
            "model.vocab_size=64",
            "curriculum.growth=middle",
            "curriculum.growth_init=copy",
            f"curriculum.optimizer={optimizer}",
            "curriculum.stages=[{n_layer: 4, tokens: 256}, {n_layer: 6, tokens: 256}]",
        ],
    )
    plans = plan_stages(cfg)
    torch.manual_seed(0)
    model = Student(cfg.model, depth=4, placements=list(plans[0].placements), indices=list(plans[0].indices))
    opt = build_optimizer(model, cfg, torch.device("cpu"))
    for _ in range(2):  # two steps: moments and a step count that are not their starting values
        model(torch.randint(0, 64, (2, 8))).square().mean().backward()
        opt.step()
        opt.zero_grad()
    before = {n: opt.state[p] for n, p in model.named_parameters()}
    grow(model, plans[1], cfg)  # 4 → 6: blocks 1, 2 copied to 3, 4 (0 1 2 1' 2' 3)
    set_trainable(model, plans[1])
    new = rebuild_optimizer(opt, model, cfg, torch.device("cpu"), plans[1])
    params = dict(model.named_parameters())
    for sub in ("self_attn.q_proj.weight", "mlp.down_proj.weight", "input_layernorm.weight"):
        for new_block, source in ((3, 1), (4, 2)):
            state = new.state.get(params[f"layers.{new_block}.{sub}"], {})
            if optimizer == "copy":
                src = before[f"layers.{source}.{sub}"]
                assert state.keys() == src.keys() and float(state["step"]) == 2.0
                assert all(torch.equal(state[k], src[k]) for k in src) and state["exp_avg"] is not src["exp_avg"]
            else:
                assert state == {}
        kept = new.state.get(params[f"layers.5.{sub}"], {})  # the old block 3, now at 5
        assert (kept is before[f"layers.3.{sub}"]) == (optimizer != "reset")
    if optimizer == "copy":
        with pytest.raises(ConfigError, match="curriculum.optimizer: 'copy' carries moments into copied blocks"):
            load_config("tiny", ["curriculum.optimizer=copy", "curriculum.growth_init=zero", *STAGES_1_3])


STAGES_1_3 = ["curriculum.stages=[{n_layer: 1, tokens: 256}, {n_layer: 3, tokens: 256}]"]


def test_a_late_expansion_grows_once_at_three_quarters_of_its_tokens_on_one_schedule():
    cfg = load_config("grow-late", ["model.vocab_size=64"])
    joint = load_config("joint", ["model.vocab_size=64"])
    plans = plan_stages(cfg)
    assert [p.n_layer for p in plans] == [3, 9] and cfg.curriculum.lr_schedule == "global"
    assert sum(p.tokens for p in plans) == sum(p.tokens for p in plan_stages(joint))  # joint's tokens
    assert plans[0].tokens == 3 * plans[1].tokens  # the event at 3/4 of training


@pytest.mark.e2e
@pytest.mark.parametrize(
    "kind", ["layernorm", pytest.param("rmsnorm", marks=pytest.mark.slow), pytest.param("dyt", marks=pytest.mark.slow)]
)
def test_kill_just_after_a_growth_event_of_every_placement_resumes_bitwise(tiny_cache, tmp_path, kind):
    """A block of every placement in one student (a per-block list), in each norm kind, grown 3 → 9 by appending
    (lnscale's ℓ, keel's α and the others' constants from the full depth): a run killed right after its growth event
    ends as the uninterrupted run, bit for bit (LayerNorm in the default suite, the other kinds in the slow one)."""
    args = [
        "tiny",
        f"data.cache_dir={tiny_cache}",
        "model.n_layer=9",
        f"model.norm_kind={kind}",
        f"model.block_norms=[{', '.join(PLACEMENTS)}]",
        "curriculum.stages=[{n_layer: 3, tokens: 5120}, {n_layer: 9, tokens: 12800}]",
        "train.checkpoint_every_tokens=100000",
        "train.threads=1",
        "--no-progress",
    ]
    full, killed = kill_and_resume(tmp_path, args, stage_started(1))
    growth = [e for e in events(killed) if e["event"] == "growth"]
    assert growth and growth[0]["grow/new_blocks"] == list(range(3, 9))
    assert_same_run(full, killed)


@pytest.mark.slow  # 2 × ≈ 9 s: middle duplication with copied moments, DyT; and a late expansion (grow-late)
@pytest.mark.parametrize(
    "extra",
    [
        [
            "model.norm=keel",
            "model.norm_kind=dyt",
            "model.n_layer=4",
            "curriculum.growth=middle",
            "curriculum.growth_init=copy",
            "curriculum.optimizer=copy",
            "curriculum.stages=[{n_layer: 2, tokens: 5120}, {n_layer: 4, tokens: 20000}]",
        ],
        [
            "model.norm=hybrid",
            "curriculum.stages=[{n_layer: 1, tokens: 15360}, {n_layer: 3, tokens: 5120}]",
        ],
    ],
    ids=["middle-copy-moments-dyt", "late-expansion-hybrid"],
)
def test_kill_after_the_growth_of_middle_and_late_expansion_resumes_bitwise(tiny_cache, tmp_path, extra):
    args = [
        "tiny",
        f"data.cache_dir={tiny_cache}",
        *extra,
        "train.checkpoint_every_tokens=100000",
        "train.threads=1",
        "--no-progress",
    ]
    full, killed = kill_and_resume(tmp_path, args, stage_started(1))
    assert_same_run(full, killed)


def test_config_fields_list_the_new_names():
    out = cli("config", "--fields").stdout
    for name in (*RIVALS, *KINDS, "middle"):
        assert name in out, name
    line = next(x for x in out.splitlines() if x.lstrip().startswith("model.norm_kind"))
    assert all(k in line for k in KINDS)


def test_a_registered_norm_kind_builds_every_norm_and_draws_nothing():
    """The extending guide's ScaleNorm, registered: every norm of the student is one, the linear weights are those of
    the same seed with RMSNorm, and an unknown kind is one line naming the field."""
    import normgrow
    from normgrow.nn.model import NORM_KINDS
    from normgrow.nn.norms import NORM_KINDS as BUILT

    class ScaleNorm(torch.nn.Module):
        is_norm = True

        def __init__(self, dim: int, eps: float):
            super().__init__()
            self.g, self.dim, self.eps = torch.nn.Parameter(torch.ones(1)), dim, eps

        def reset_parameters(self):
            torch.nn.init.ones_(self.g)

        def forward(self, x):
            return self.g * x * self.dim**0.5 / (x.norm(dim=-1, keepdim=True) + self.eps)

    normgrow.register_norm_kind("scalenorm", lambda cfg, dim: ScaleNorm(dim, cfg.norm_eps))
    try:
        cfg = load_config("tiny", ["model.norm_kind=scalenorm", "model.vocab_size=64"])
        torch.manual_seed(0)
        model = Student(cfg.model)
        norms = [m for m in model.modules() if getattr(m, "is_norm", False)]
        assert norms and all(isinstance(m, ScaleNorm) for m in norms)
        assert len(norms) == 4 * 3 + 1  # two block norms and q/k norms per block, and the final norm
        torch.manual_seed(0)
        plain = Student(load_config("tiny", ["model.vocab_size=64"]).model)
        assert torch.equal(model.layers[2].mlp.up_proj.weight, plain.layers[2].mlp.up_proj.weight)
    finally:
        NORM_KINDS.unregister("scalenorm")
        BUILT.pop("scalenorm", None)
    with pytest.raises(ConfigError, match="model.norm_kind: unknown norm kind 'scalenorm'"):
        load_config("tiny", ["model.norm_kind=scalenorm"])
