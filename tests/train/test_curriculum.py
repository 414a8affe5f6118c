"""Growth curricula: function preservation, optimizer state across growth, freezing, compute accounting,
budget matching, resume across a growth event, bad curricula."""

import dataclasses
import json
import signal

import pytest
import torch

from conftest import assert_same_run, cli, events, kill_and_resume, stage_started, tiny_cfg
from normgrow.config import ModelConfig, load_config
from normgrow.errors import ConfigError
from normgrow.nn.model import Student
from normgrow.run.pipeline import run
from normgrow.train import checkpoint
from normgrow.train.growth import GROWTH, rebuild_optimizer, set_trainable
from normgrow.train.stages import plan_stages
from normgrow.train.step import build_optimizer

QUIET = dict(log=lambda *_: None, progress=False)
APPEND = GROWTH["append"]
GROW = "curriculum.stages=[{n_layer: 1, tokens: 2560}, {n_layer: 2, tokens: 2560}, {n_layer: 3, tokens: 2560}]"


def small(norm="pre", **kw):
    return ModelConfig(
        norm=norm, n_layer=4, d_model=32, n_head=4, n_kv_head=2, d_ff=64, vocab_size=61, init_std=0.1, **kw
    )


def test_zero_growth_preserves_pre_norm_logits_exactly():
    for norm in ("pre", "sandwich"):
        model = Student(small(norm), depth=2).eval()
        idx = torch.randint(0, 61, (2, 12))
        with torch.no_grad():
            before = model(idx)
            event = APPEND.apply(model, 4, "zero", seed=0)
            new = [model.layers[i] for i in event.new_blocks]
            after = model(idx)
        assert len(new) == 2 and model.depth == 4
        assert torch.equal(before, after), norm
        # the new blocks are not dead: only their output projections are zero, their norms are 1
        assert new[0].self_attn.q_proj.weight.abs().sum() > 0
        assert torch.all(new[0].input_layernorm.weight == 1)


def test_post_norm_zero_growth_rescales_each_token_and_the_final_norm_undoes_it():
    """A zero-init post-norm block computes N(N(h + 0) + 0) = h / rms(h) (unit gains): a per-token rescale of
    the boundary. With a final norm (scale-invariant) the logits are preserved up to eps; without one,
    the logits are divided by the boundary's RMS, token by token."""
    idx = torch.randint(0, 61, (2, 12))
    for final_norm in (True, False):
        model = Student(dataclasses.replace(small("post"), final_norm=final_norm), depth=2).eval()
        with torch.no_grad():
            for name, p in model.named_parameters():  # trained-looking gains: boundary RMS ≠ 1
                if name.endswith("norm.weight"):
                    p.uniform_(0.3, 2.0)
            res: list = []
            before = model.hidden(idx, residuals=res)
            boundary_rms = res[-1].pow(2).mean(-1, keepdim=True).sqrt()  # (B, T, 1)
            logits_before = model.lm_head(before)
            APPEND.apply(model, 4, "zero", seed=0)
            logits_after = model(idx)
        if final_norm:
            torch.testing.assert_close(logits_after, logits_before, atol=1e-4, rtol=1e-4)
        else:
            assert (logits_after - logits_before).abs().max() > 1e-2
            torch.testing.assert_close(logits_after, logits_before / boundary_rms, atol=1e-5, rtol=1e-4)


def test_random_growth_changes_the_function():
    idx = torch.randint(0, 61, (2, 12))
    for norm in ("pre", "post"):
        model = Student(small(norm), depth=2).eval()
        with torch.no_grad():
            before = model(idx)
            APPEND.apply(model, 3, "random", seed=0)
            assert (model(idx) - before).abs().max() > 1e-3, norm


def test_copy_growth_duplicates_the_last_prefix_block_and_seeds_are_reproducible():
    model = Student(small(), depth=2)
    APPEND.apply(model, 3, "copy", seed=0)
    for (n1, p1), (_n2, p2) in zip(model.layers[1].named_parameters(), model.layers[2].named_parameters(), strict=True):
        assert torch.equal(p1, p2) and p1.data_ptr() != p2.data_ptr(), n1
    a, b = Student(small(), depth=2), Student(small(), depth=2)
    torch.manual_seed(123)  # the global RNG does not influence growth
    APPEND.apply(a, 4, "random", seed=7)
    torch.manual_seed(456)
    APPEND.apply(b, 4, "random", seed=7)
    assert torch.equal(a.layers[3].mlp.up_proj.weight, b.layers[3].mlp.up_proj.weight)


def test_keep_policy_keeps_old_moments_and_new_blocks_join_the_optimizer():
    cfg = load_config(
        "tiny",
        [
            "model.vocab_size=61",
            "model.n_layer=4",
            "curriculum.stages=[{n_layer: 2, tokens: 10}, {n_layer: 4, tokens: 10}]",
        ],
    )
    plans = plan_stages(cfg)
    model = Student(cfg.model, depth=2)
    set_trainable(model, plans[0])
    opt = build_optimizer(model, cfg, torch.device("cpu"))
    idx = torch.randint(0, 61, (2, 8))
    model(idx).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
    old = {n: {k: v.clone() for k, v in opt.state[p].items()} for n, p in model.named_parameters()}
    APPEND.apply(model, 4, "zero", seed=0)
    set_trainable(model, plans[1])
    new_opt = rebuild_optimizer(opt, model, cfg, torch.device("cpu"), plans[1])
    in_opt = {id(p) for g in new_opt.param_groups for p in g["params"]}
    for n, p in model.named_parameters():
        assert id(p) in in_opt, n
        if n in old:
            for k, v in old[n].items():
                assert torch.equal(new_opt.state[p][k], v), (n, k)
        else:
            assert p not in new_opt.state  # fresh state for new parameters
    zero_out = model.layers[3].mlp.down_proj.weight.clone()
    model(idx).pow(2).mean().backward()
    new_opt.step()
    assert not torch.equal(model.layers[3].mlp.down_proj.weight, zero_out)  # the zeroed projection learns
    reset = rebuild_optimizer(
        opt,
        model,
        dataclasses.replace(cfg, curriculum=dataclasses.replace(cfg.curriculum, optimizer="reset")),
        torch.device("cpu"),
        plans[1],
    )
    assert len(reset.state) == 0


def test_freeze_keeps_the_prefix_bit_identical_without_optimizer_state(tiny_cache, tmp_path):
    stages = "curriculum.stages=[{n_layer: 2, tokens: 2560}, {n_layer: 3, tokens: 2560, train: new}]"
    run(
        tiny_cfg(tiny_cache, stages, "train.weight_decay=0.5", "train.checkpoint_every_tokens=2560"),
        tmp_path / "run",
        **QUIET,
    )
    ckpts = checkpoint.list_checkpoints(tmp_path / "run" / "checkpoints")
    (w1, _, _, s1), (w2, opt2, _, s2) = checkpoint.load(ckpts[-2]), checkpoint.load(ckpts[-1])
    assert (s1["stage"], s2["stage"]) == (0, 1) and s2["stage_step"] == s2["stages"][1]["steps"]
    frozen = [k for k in w1 if k.startswith(("layers.0.", "layers.1.", "embed_tokens."))]
    assert frozen and all(torch.equal(w1[k], w2[k]) for k in frozen)
    assert not torch.equal(w1["lm_head.weight"], w2["lm_head.weight"])  # the head trains
    assert not torch.equal(
        w2["layers.2.self_attn.o_proj.weight"], torch.zeros_like(w2["layers.2.self_attn.o_proj.weight"])
    )
    # the optimizer holds exactly the trainable parameters: block 2, final norm, head
    n_trainable = sum(1 for k in w2 if k.startswith(("layers.2.", "norm.", "lm_head.")))
    assert sum(len(g["params"]) for g in opt2["param_groups"]) == n_trainable
    assert len(opt2["state"]) == n_trainable


def test_grow_run_accounting_and_phase_events(tiny_cache, tmp_path):
    summary = run(tiny_cfg(tiny_cache, GROW), tmp_path / "run", **QUIET)
    per_step = 8 * 32
    stages = summary["stages"]
    assert [s["n_layer"] for s in stages] == [1, 2, 3]
    c = summary["compute"]
    assert c["tokens"] == sum(s["tokens"] for s in stages) == 3 * 10 * per_step
    assert c["active_layer_tokens"] == sum(s["tokens"] * s["n_layer"] for s in stages)
    assert c["trainable_layer_tokens"] == c["active_layer_tokens"]  # every block trains in every stage
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    kinds = [(r["event"], r["stage"]) for r in rows if r["event"] != "train"]
    for st in (1, 2):
        i = kinds.index(("pre_growth", st - 1))
        assert kinds[i + 1 : i + 3] == [("growth", st), ("stage_start", st)]
    growth = [r for r in rows if r["event"] == "growth"]
    assert [(g["grow/from"], g["grow/to"]) for g in growth] == [(1, 2), (2, 3)]
    for g in growth:  # tiny is pre-norm and growth_init defaults to zero: the function is preserved
        assert g["grow/logit_max_abs_diff"] == 0.0 and g["grow/val_ce_jump"] == 0.0
    assert all(s["end"] and s["start"] for s in stages)
    assert stages[1]["growth"]["grow/logit_max_abs_diff"] == 0.0


def test_post_norm_growth_jump_is_measured_and_recorded(tiny_cache, tmp_path):
    zero = run(tiny_cfg(tiny_cache, GROW, "model.norm=post"), tmp_path / "zero", **QUIET)
    g = zero["stages"][1]["growth"]
    assert g["grow/val_ce_jump"] == pytest.approx(
        zero["stages"][1]["start"]["val/ce"] - zero["stages"][0]["end"]["val/ce"]
    )
    assert g["grow/logit_max_abs_diff"] < 1e-3  # with a final norm, post-norm zero growth only rescales (see above)
    rand = run(
        tiny_cfg(tiny_cache, GROW, "model.norm=post", "curriculum.growth_init=random"), tmp_path / "rand", **QUIET
    )
    r = rand["stages"][1]["growth"]
    assert r["grow/logit_max_abs_diff"] > 10 * g["grow/logit_max_abs_diff"] and r["grow/val_ce_jump"] != 0


RENORM = (
    "model.n_layer=9",
    "model.block_norms=[pre, pre, pre, post, pre, pre, post, pre, pre]",
    "curriculum.stages=[{n_layer: 3, tokens: 2560}, {n_layer: 6, tokens: 2560}, {n_layer: 9, tokens: 2560}]",
)


@pytest.mark.e2e
def test_renormalized_boundary_growth_preserves_the_function_under_a_final_norm_only(tiny_cache, tmp_path):
    """The boundary-renormalization arm (post-norm first above each growth boundary, pre elsewhere) grown through
    the real run: each event appends [post, pre, pre] with zero init, so the post block computes N(N(h)) = h / rms(h)
    (unit gains) and the pre blocks above it are identities — a per-token rescale the final RMSNorm undoes (up to
    eps). Without a final norm the same events divide the logits by the boundary's RMS."""
    cfg = tiny_cfg(tiny_cache, *RENORM)
    assert [p.placements for p in plan_stages(cfg)][1:] == [
        ("pre",) * 3 + ("post", "pre", "pre"),
        ("pre",) * 3 + ("post", "pre", "pre") * 2,
    ]
    kept = run(cfg, tmp_path / "final-norm", **QUIET)
    moved = run(tiny_cfg(tiny_cache, *RENORM, "model.final_norm=false"), tmp_path / "no-final-norm", **QUIET)
    for k in (1, 2):
        g, h = kept["stages"][k]["growth"], moved["stages"][k]["growth"]
        assert (g["grow/from"], g["grow/to"], g["grow/init"]) == (3 * k, 3 * k + 3, "zero")
        assert g["grow/logit_max_abs_diff"] < 1e-4 and abs(g["grow/val_ce_jump"]) < 1e-4, (k, g)
        assert h["grow/logit_max_abs_diff"] > 1e-2 and abs(h["grow/val_ce_jump"]) > 1e-3, (k, h)


@pytest.mark.e2e
def test_matched_joint_run_equals_the_grow_runs_active_layer_tokens(tiny_cache, tmp_path):
    grow_sum = run(tiny_cfg(tiny_cache, GROW), tmp_path / "grow", **QUIET)
    proc = cli(
        "run",
        "tiny",
        "-o",
        tmp_path / "joint",
        f"data.cache_dir={tiny_cache}",
        f"curriculum.match_budget={tmp_path / 'grow'}",
        "--no-progress",
    )
    assert "budget matched by active_layer_tokens" in proc.stdout
    joint = json.loads((tmp_path / "joint" / "summary.json").read_text())
    target = grow_sum["compute"]["active_layer_tokens"]
    assert abs(joint["compute"]["active_layer_tokens"] - target) <= 8 * 32 * 3  # within one step at depth 3
    assert joint["budget_match"]["target"] == target
    saved = load_config(str(tmp_path / "joint" / "config.yaml"))
    assert round(saved.curriculum.stages[0].tokens / 256) * 256 == joint["compute"]["tokens"]  # written into the config
    # matching by tokens instead gives the grow run's token count
    cfg = tiny_cfg(
        tiny_cache,
        f"curriculum.match_budget={tmp_path / 'grow'}",
        "curriculum.match_by=tokens",
        "curriculum.stages=[{n_layer: 3, tokens: 1}]",
    )
    from normgrow.run.budget import match_budget

    matched, rec = match_budget(dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, vocab_size=512)))
    assert matched.curriculum.stages[0].tokens == grow_sum["compute"]["tokens"]


@pytest.mark.e2e
def test_sigterm_just_after_growth_says_so_and_resumes_identically(tiny_cache, tmp_path):
    args = [
        "tiny",
        f"data.cache_dir={tiny_cache}",
        "model.norm=post",
        "curriculum.stages=[{n_layer: 1, tokens: 5120}, {n_layer: 3, tokens: 30000}]",
        "train.checkpoint_every_tokens=100000",
        "train.threads=1",
        "--no-progress",
    ]
    full, killed = kill_and_resume(tmp_path, args, stage_started(1), sig=signal.SIGTERM)
    assert any(e["event"] == "growth" for e in events(killed))
    assert_same_run(full, killed)


@pytest.mark.parametrize(
    "stages,field",
    [
        ("[{n_layer: 2, tokens: 10}, {n_layer: 2, tokens: 10}]", "curriculum.stages.1.n_layer"),
        ("[{n_layer: 4, tokens: 10}]", "curriculum.stages.0.n_layer"),
        ("[{n_layer: 2, tokens: 0}]", "curriculum.stages.0.tokens"),
        ("[{n_layer: 2, tokens: 10}, {n_layer: 3, tokens: 10, train: '7'}]", "curriculum.stages.1.train"),
        ("[{n_layer: 2, tokens: 10}, {n_layer: 3, tokens: 10, train: ''}]", "curriculum.stages.1.train"),
    ],
)
def test_bad_curricula_name_their_field(stages, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        load_config("tiny", [f"curriculum.stages={stages}"])


def test_growth_presets_load_and_describe_their_schedules():
    grow_cfg = load_config("grow")
    assert [s.n_layer for s in grow_cfg.curriculum.stages] == [3, 6, 9]
    assert [s.n_layer for s in load_config("grow1").curriculum.stages] == [3, 4, 5, 6, 7, 8, 9]
    assert [s.train for s in load_config("freeze").curriculum.stages] == ["all", "new", "new"]
    shallow = load_config("shallow")
    assert [s.n_layer for s in shallow.curriculum.stages] == [3]
    total = sum(s.tokens for s in grow_cfg.curriculum.stages)
    assert shallow.curriculum.stages[0].tokens == total
    assert sum(s.tokens for s in load_config("grow1").curriculum.stages) == total
    assert load_config("matched").curriculum.match_budget == "grow"


@pytest.mark.parametrize(
    "stages",
    [
        "[{n_layer: 1, tokens: 2560}, {n_layer: 2, tokens: 2560}, {n_layer: 3, tokens: 2560}]",
        "[{n_layer: 1, tokens: 3000}, {n_layer: 3, tokens: 7000}]",
    ],
)
def test_matching_lands_within_one_step_upward_and_downward(tmp_path, stages):
    """A grow run given a joint run's active-layer tokens (upward: it had fewer) and a joint run given the grow
    run's (downward) both land within one step of their target, and the record says which way the match went."""
    from normgrow.config import save_config
    from normgrow.run.budget import match_budget
    from normgrow.train.stages import planned_totals

    grow = load_config("tiny", ["model.vocab_size=512", f"curriculum.stages={stages}"])
    joint = load_config("tiny", ["model.vocab_size=512", "curriculum.stages=[{n_layer: 3, tokens: 40000}]"])
    save_config(grow, tmp_path / "grow.yaml")
    save_config(joint, tmp_path / "joint.yaml")
    per_step = 8 * 32
    for cfg, ref, up in ((grow, joint, True), (joint, grow, False)):
        target = planned_totals(ref)["active_layer_tokens"]
        matched, rec = match_budget(
            dataclasses.replace(
                cfg,
                curriculum=dataclasses.replace(
                    cfg.curriculum, match_budget=str(tmp_path / ("joint.yaml" if up else "grow.yaml"))
                ),
            )
        )
        got = planned_totals(matched)["active_layer_tokens"]
        assert abs(got - target) <= per_step * matched.curriculum.stages[-1].n_layer  # one step at the last depth
        assert rec["target"] == target and rec["planned"] == got
        assert (rec["scale"] > 1) == up and rec["unmatched"] == planned_totals(cfg)["active_layer_tokens"]
        assert all(s.tokens % per_step == 0 for s in matched.curriculum.stages)
        # stage proportions are kept (up to whole steps)
        old = [s.tokens for s in cfg.curriculum.stages]
        new = [s.tokens for s in matched.curriculum.stages]
        for o, n in zip(old[:-1], new[:-1], strict=True):
            assert abs(n - o * rec["scale"]) <= per_step / 2


def test_a_tied_student_cannot_freeze_the_block_its_embedding_feeds():
    """With tied embeddings the LM head is the embedding: a stage freezing block 0 would still retrain the input of the
    frozen prefix, so it is refused when the stages are planned (before anything trains); the paper's freeze arms untie."""
    stages = "curriculum.stages=[{n_layer: 1, tokens: 256}, {n_layer: 2, tokens: 256, train: new}]"
    with pytest.raises(
        ConfigError, match=r"curriculum.stages.1.train: block 0 is frozen, but model.tie_embeddings=true"
    ):
        plan_stages(
            load_config("tiny", [stages, "model.n_layer=2", "model.tie_embeddings=true", "model.vocab_size=64"])
        )
    plans = plan_stages(
        load_config("tiny", [stages, "model.n_layer=2", "model.tie_embeddings=false", "model.vocab_size=64"])
    )
    assert plans[1].train_blocks == (1,)
    paper = load_config("paper-freeze")
    assert paper.model.tie_embeddings is False and load_config("paper-grow").model.tie_embeddings is True
    assert all(0 not in p.train_blocks for p in plan_stages(paper)[1:])


def test_matching_to_a_run_whose_summary_is_cut_is_one_line_naming_it(tmp_path):
    """A reference run whose summary.json is cut (or records no compute) was a JSONDecodeError traceback; it is one
    line naming the file, from the command line too, and nothing is written."""
    from normgrow.config import save_config

    ref = tmp_path / "ref"
    ref.mkdir()
    save_config(load_config("tiny", ["model.vocab_size=512"]), ref / "config.yaml")
    (ref / "summary.json").write_text('{"compute": {"tok')
    proc = cli("run", "tiny", f"curriculum.match_budget={ref}", "-o", tmp_path / "out", check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"curriculum.match_budget: {ref / 'summary.json'}: unreadable, or it records no compute" in proc.stderr
    assert not (tmp_path / "out").exists()
    (ref / "summary.json").write_text('{"val/ce": 3.0}')  # readable, but no compute to match
    assert (
        "records no compute"
        in cli("run", "tiny", f"curriculum.match_budget={ref}", "-o", tmp_path / "o2", check=False).stderr
    )
