"""Diagnostics: known answers on constructed models, exact class masks, pure observation, recomputation."""

import json

import numpy as np
import pytest
import torch

from conftest import cli, tiny_cfg
from normgrow.config import DiagnosticsConfig, ModelConfig
from normgrow.nn.model import Student
from normgrow.run.pipeline import run
from normgrow.train import checkpoint
from normgrow.train.diagnostics import Observation, collapse, diagnose, identity_stats, make_probe

QUIET = dict(log=lambda *_: None, progress=False)


def model_and_probe(norm="pre", n_layer=3):
    cfg = ModelConfig(
        norm=norm, n_layer=n_layer, d_model=32, n_head=4, n_kv_head=2, d_ff=64, vocab_size=40, init_std=0.2
    )
    model = Student(cfg).eval()
    g = torch.Generator().manual_seed(0)
    rows = torch.randint(2, 40, (3, 17), generator=g)
    rows[:, 0] = 0  # BOS
    classes = np.zeros(40, dtype=np.int8)  # content
    classes[0], classes[1], classes[2:6], classes[6:10] = 1, 1, 2, 3  # bos, bos, whitespace, punct
    return model, make_probe(rows, classes)


def test_class_masks_select_exactly_the_right_positions():
    rows = torch.tensor([[0, 5, 7, 12, 3, 0, 9, 9], [0, 12, 12, 2, 8, 6, 0, 4]])
    classes = np.zeros(16, dtype=np.int8)
    classes[0] = 1  # bos
    classes[[2, 3]] = 2  # whitespace
    classes[[7, 8, 9]] = 3  # punct
    p = make_probe(rows, classes)
    x = rows[:, :-1]
    expect = {  # every class but `first` leaves position 0 out: the BOS there is the attention sink
        "bos": [(0, 5), (1, 6)],
        "whitespace": [(0, 4), (1, 3)],
        "punct": [(0, 2), (0, 6), (1, 4)],
        "first": [(0, 0), (1, 0)],
    }
    for name, pos in expect.items():
        got = sorted(map(tuple, p.masks[name].nonzero().tolist()))
        assert got == sorted(pos), name
    content = sorted(map(tuple, p.masks["content"].nonzero().tolist()))
    assert content == [(0, 1), (0, 3), (1, 1), (1, 2), (1, 5)]
    assert p.masks["structural"].sum() == 2 + 2 + 3
    assert p.counts["all"] == x.numel() - 2 and p.counts["first"] == 2


def observe(stream: torch.Tensor, probe):
    """An Observation whose only residual stream is `stream` (n, T, C), for the stream-level diagnostics."""
    return Observation(None, probe, [stream], None, None, DiagnosticsConfig(), 64)


def test_collapse_known_answers():
    _, probe = model_and_probe()
    n, T = probe.x.shape
    same = torch.randn(32).expand(n, T, 32).clone()
    c = collapse(observe(same, probe))
    assert c["collapse_share"][0] == pytest.approx(1.0, abs=1e-5) and c["collapse_cos"][0] == pytest.approx(
        1.0, abs=1e-5
    )
    # N = n·(T−1) orthogonal unit vectors (position 0 excluded): share = 1/N, cosine 0
    k = n * (T - 1)
    stream = torch.zeros(n, T, n * T)
    stream[:, 1:] = torch.eye(n * T)[:k].reshape(n, T - 1, n * T)
    stream[:, 0] = 100.0  # position 0 (a massive activation there) does not enter
    c = collapse(observe(stream, probe))
    assert c["collapse_share"][0] == pytest.approx(1 / k, rel=1e-5) and abs(c["collapse_cos"][0]) < 1e-6
    # a shared offset much larger than the token-specific parts: most of the energy is shared
    shifted = torch.randn(n, T, 32) + 10 * torch.randn(32)
    assert collapse(observe(shifted, probe))["collapse_share"][0] > 0.9


def test_zeroed_block_is_an_identity_and_skipping_it_changes_nothing():
    model, probe = model_and_probe("pre")
    with torch.no_grad():
        torch.nn.init.zeros_(model.layers[1].self_attn.o_proj.weight)
        torch.nn.init.zeros_(model.layers[1].mlp.down_proj.weight)
    d = diagnose(model, probe)
    assert d["branch_update"][1] == 0.0 and d["branch_update"][0] > 0  # its branches output nothing
    assert d["rel_update"][1] == 0.0
    assert d["cos"][1] == pytest.approx(1.0, abs=1e-6)
    assert d["skip_ce_delta"][1] == 0.0
    assert d["rel_update"][0] > 0 and abs(d["skip_ce_delta"][0]) > 0  # the other blocks are not identities
    assert len(d["residual_rms"]) == 4 and d["residual_rms"][1] == d["residual_rms"][2]


def test_a_block_that_doubles_its_input_reads_as_such():
    h = torch.randn(4, 9, 32)
    rel, cos = identity_stats(h, 2 * h)
    assert rel == pytest.approx(1.0, abs=1e-6) and cos == pytest.approx(1.0, abs=1e-6)
    rel, cos = identity_stats(h, -h)
    assert rel == pytest.approx(2.0, abs=1e-6) and cos == pytest.approx(-1.0, abs=1e-6)


def test_residual_rms_per_class_by_hand():
    model, probe = model_and_probe("post")
    d = diagnose(model, probe, DiagnosticsConfig(skip_ce=False))
    res: list = []
    with torch.no_grad():
        model.hidden(probe.x, residuals=res)
    h = res[2]
    m = probe.masks["punct"]
    assert d["residual_rms"][2]["punct"] == pytest.approx(h[m].pow(2).mean().sqrt().item(), rel=1e-5)
    assert d["max_abs"][2]["first"] == pytest.approx(h[:, 0].abs().max().item(), rel=1e-6)
    ratio = d["residual_rms"][2]["structural"] / d["residual_rms"][2]["content"]
    assert d["struct_content_ratio"][2] == pytest.approx(ratio)


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_branch_update_ratio_by_hand(norm):
    model, probe = model_and_probe(norm)
    d = diagnose(model, probe, DiagnosticsConfig(skip_ce=False))
    res: list = []
    with torch.no_grad():
        model.hidden(probe.x, residuals=res)
        h, block = res[1], model.layers[1]
        cos, sin = model.rotary(probe.x.shape[1], h.device)
        if norm == "pre":  # h + A(N1(h)), then + M(N2(·))
            a = block.self_attn(block.input_layernorm(h), cos, sin)[0]
            m = block.mlp(block.post_attention_layernorm(h + a))
        else:  # N1(h + A(h)), then N2(· + M(·))
            a = block.self_attn(h, cos, sin)[0]
            m = block.mlp(block.input_layernorm(h + a))
    ratio = ((a.pow(2).sum(-1) + m.pow(2).sum(-1)).sqrt() / h.norm(dim=-1))[:, 1:].mean().item()
    assert d["branch_update"][1] == pytest.approx(ratio, rel=1e-5)


def test_attention_sink_scores():
    model, probe = model_and_probe("pre", n_layer=2)
    d = diagnose(model, probe, DiagnosticsConfig(sink_threshold=0.5, skip_ce=False))
    assert len(d["sink_score"]) == 2 and len(d["sink_score"][0]) == 4
    # position 0 gets 1/(t+1) of query t's attention at uniform attention; scores lie in (0, 1)
    assert all(0 < s < 1 for layer in d["sink_score"] for s in layer)
    share_all = diagnose(model, probe, DiagnosticsConfig(sink_threshold=1e-6, skip_ce=False))["sink_share"]
    assert share_all == 1.0


def test_diagnostics_do_not_change_training(tiny_cache, tmp_path):
    stages = "curriculum.stages=[{n_layer: 2, tokens: 2560}, {n_layer: 3, tokens: 2560}]"
    on = run(
        tiny_cfg(tiny_cache, stages, "diagnostics.every_tokens=512", "train.dense_eval_steps=8"),
        tmp_path / "on",
        **QUIET,
    )
    off = run(tiny_cfg(tiny_cache, stages, "diagnostics.enabled=false"), tmp_path / "off", **QUIET)
    assert on["final"] == off["final"]
    a = checkpoint.load(checkpoint.latest(tmp_path / "on" / "checkpoints"))[0]
    b = checkpoint.load(checkpoint.latest(tmp_path / "off" / "checkpoints"))[0]
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert (tmp_path / "on" / "diagnostics.jsonl").is_file() and not (tmp_path / "off" / "diagnostics.jsonl").exists()
    records = [json.loads(line) for line in (tmp_path / "on" / "diagnostics.jsonl").read_text().splitlines()]
    events = [r["event"] for r in records]
    assert events.count("stage_end") == 2 and events.count("stage_start") == 2 and "interval" in events
    # the dense window of stage 1 (steps 11–20): stage steps 4 and 8 (train.dense_eval_every = 4), diagnosed once each
    # though both also cross an interval of 512 tokens (2 steps)
    assert [r["step"] for r in records if r["event"] == "dense"] == [14, 18]
    assert not {14, 18} & {r["step"] for r in records if r["event"] == "interval"}
    assert len(on["boundaries"]) == 1 and on["boundaries"][0]["boundary"] == 2


def test_diagnose_command_reproduces_the_logged_values(tiny_cache, tmp_path):
    stages = "curriculum.stages=[{n_layer: 2, tokens: 2560}, {n_layer: 3, tokens: 2560}]"
    run(tiny_cfg(tiny_cache, stages, "model.norm=post"), tmp_path / "run", **QUIET)
    proc = cli("diagnose", tmp_path / "run")
    assert "largest difference from the logged values 0" in proc.stdout
    recomputed = [
        json.loads(line) for line in (tmp_path / "run" / "diagnostics-recomputed.jsonl").read_text().splitlines()
    ]
    assert [r["n_layer"] for r in recomputed] == [2, 3]  # both stage ends kept (protected from pruning)
    logged = {
        json.loads(line)["step"]: json.loads(line)
        for line in (tmp_path / "run" / "diagnostics.jsonl").read_text().splitlines()
        if json.loads(line)["event"] == "stage_end"
    }
    for r in recomputed:
        assert r["residual_rms"] == logged[r["step"]]["residual_rms"]
        assert r["skip_ce_delta"] == logged[r["step"]]["skip_ce_delta"]
