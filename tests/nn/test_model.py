"""The student: parity with transformers' Qwen3, the placements' equations, residual streams, counts."""

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from normgrow.config import ModelConfig
from normgrow.nn.model import Student, count_parameters, hf_config, to_hf_state_dict

torch.manual_seed(0)


def tiny(**kw) -> ModelConfig:
    base = dict(n_layer=3, d_model=32, n_head=4, n_kv_head=2, d_ff=64, vocab_size=97, init_std=0.1)
    base.update(kw)
    return ModelConfig(**base)


def randomize_norms(model: torch.nn.Module) -> None:
    """Norm gains start at 1; give them random values so a misplaced norm cannot hide."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)


@pytest.mark.parametrize("tie", [False, True])
@pytest.mark.parametrize("n_kv_head", [2, 4])
def test_pre_norm_student_equals_transformers_qwen3(tie, n_kv_head):
    from transformers import Qwen3ForCausalLM

    cfg = tiny(tie_embeddings=tie, n_kv_head=n_kv_head)
    student = Student(cfg).eval()
    randomize_norms(student)
    hf = Qwen3ForCausalLM(hf_config(cfg)).eval()
    missing, unexpected = hf.load_state_dict(to_hf_state_dict(student), strict=False)
    assert not unexpected
    assert set(missing) <= ({"lm_head.weight"} if tie else set())
    idx = torch.randint(0, cfg.vocab_size, (2, 17))
    with torch.no_grad():
        ours = student(idx)
        theirs = hf(input_ids=idx).logits
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)


def rms(x, g, eps):
    return g * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def norm_by_hand(kind: str, module, x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """A norm kind's formula from the module's raw parameters (rmsnorm, layernorm, dyt)."""
    if kind == "rmsnorm":
        return rms(x, module.weight, eps)
    if kind == "layernorm":
        mu = x.mean(-1, keepdim=True)
        var = (x - mu).pow(2).mean(-1, keepdim=True)
        return module.weight * (x - mu) / torch.sqrt(var + eps) + module.bias
    assert kind == "dyt"
    return module.weight * torch.tanh(module.alpha * x) + module.bias


def sublayers_by_hand(block, h, cos, sin, kind: str = "rmsnorm"):
    """Attention and MLP sublayers recomputed from the raw weights (no normgrow modules): q/k norms of the kind, and
    v's where the block has one (HybridNorm)."""
    a, m = block.self_attn, block.mlp
    B, T, _ = h.shape
    hd = a.head_dim
    v_norm = getattr(a.v_norm, "weight", None) is not None

    def attn(x):
        q = (x @ a.q_proj.weight.T).view(B, T, a.n_head, hd)
        k = (x @ a.k_proj.weight.T).view(B, T, a.n_kv_head, hd)
        v = (x @ a.v_proj.weight.T).view(B, T, a.n_kv_head, hd)
        q, k = norm_by_hand(kind, a.q_norm, q), norm_by_hand(kind, a.k_norm, k)
        if v_norm:
            v = norm_by_hand(kind, a.v_norm, v)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))

        def rot(t):
            t1, t2 = t[..., : hd // 2], t[..., hd // 2 :]
            return t * cos + torch.cat((-t2, t1), -1) * sin

        q, k = rot(q), rot(k)
        rep = a.n_head // a.n_kv_head
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        s = (q @ k.transpose(-1, -2) / math.sqrt(hd)).masked_fill(torch.ones(T, T).triu(1).bool(), float("-inf"))
        return (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, -1) @ a.o_proj.weight.T

    def mlp(x):
        return (F.silu(x @ m.gate_proj.weight.T) * (x @ m.up_proj.weight.T)) @ m.down_proj.weight.T

    return attn, mlp


@pytest.mark.parametrize("norm", ["pre", "post", "sandwich"])
def test_block_follows_its_placement_equation(norm):
    cfg = tiny(norm=norm)
    model = Student(cfg).eval()
    randomize_norms(model)
    block = model.layers[1]
    T = 11
    h = torch.randn(2, T, cfg.d_model) * 3
    cos, sin = model.rotary(T, h.device)
    attn, mlp = sublayers_by_hand(block, h, cos, sin)
    g1, g2, eps = block.input_layernorm.weight, block.post_attention_layernorm.weight, cfg.norm_eps
    if norm == "pre":  # h = h + F(N(h))
        x = h + attn(rms(h, g1, eps))
        expected = x + mlp(rms(x, g2, eps))
    elif norm == "post":  # h = N(h + F(h))
        x = rms(h + attn(h), g1, eps)
        expected = rms(x + mlp(x), g2, eps)
    else:  # h = h + N2(F(N1(h)))
        x = h + rms(attn(rms(h, g1, eps)), block.attn_out_norm.weight, eps)
        expected = x + rms(mlp(rms(x, g2, eps)), block.mlp_out_norm.weight, eps)
    with torch.no_grad():
        torch.testing.assert_close(block(h, cos, sin), expected, atol=1e-5, rtol=1e-5)


def test_post_norm_output_has_unit_rms_times_gain():
    """A post-norm block's output is a normalized vector: RMS 1 when the gain is 1, whatever the input scale."""
    cfg = tiny(norm="post")
    model = Student(cfg).eval()
    h = torch.randn(2, 9, cfg.d_model) * 50
    with torch.no_grad():
        out = model.layers[0](h, *model.rotary(9, h.device))
    torch.testing.assert_close(out.pow(2).mean(-1).sqrt(), torch.ones(2, 9), atol=1e-4, rtol=0)


def test_residuals_are_the_stream_between_blocks():
    cfg = tiny(n_layer=3)
    model = Student(cfg).eval()
    idx = torch.randint(0, cfg.vocab_size, (2, 8))
    res: list = []
    with torch.no_grad():
        out = model.hidden(idx, residuals=res)
        assert len(res) == cfg.n_layer + 1
        torch.testing.assert_close(res[0], model.embed_tokens(idx))
        cos, sin = model.rotary(8, idx.device)
        for b, block in enumerate(model.layers):
            torch.testing.assert_close(res[b + 1], block(res[b], cos, sin))
        torch.testing.assert_close(out, model.norm(res[-1]))


def test_init_uses_final_depth_for_residual_outputs():
    cfg = tiny(n_layer=8, d_model=64, d_ff=256, init_std=0.02)
    model = Student(cfg, depth=2)  # a shallow prefix of an 8-block student
    rec = model.init_record()
    assert rec["residual_out_depth"] == 8
    expected = 0.02 / math.sqrt(16)
    o = model.layers[0].self_attn.o_proj.weight
    assert abs(o.std().item() - expected) < 0.15 * expected
    q = model.layers[0].self_attn.q_proj.weight
    assert abs(q.std().item() - 0.02) < 0.1 * 0.02
    rec2 = Student(dataclasses.replace(cfg, init_depth=2)).init_record()
    assert rec2["residual_out_depth"] == 2 and rec2["residual_out_depth_source"] == "model.init_depth"


def test_parameter_counts_by_hand():
    cfg = tiny(n_layer=3, d_model=32, n_head=4, n_kv_head=2, d_ff=64, vocab_size=97)
    hd = 8
    per_block = (32 * 4 * hd + 2 * 32 * 2 * hd + 4 * hd * 32) + 2 * hd + 3 * 32 * 64 + 2 * 32
    counts = count_parameters(Student(cfg))
    assert counts["per_block"] == per_block
    assert counts["total"] == 97 * 32 + 3 * per_block + 32 + 97 * 32
    tied = count_parameters(Student(dataclasses.replace(cfg, tie_embeddings=True)))
    assert tied["total"] == counts["total"] - 97 * 32
    assert counts["total"] == sum(p.numel() for p in Student(cfg).parameters())


def test_attention_weights_match_sdpa_output():
    """The explicit attention path (diagnostics) computes the same block output as SDPA."""
    cfg = tiny()
    model = Student(cfg).eval()
    attn = model.layers[0].self_attn
    x = torch.randn(2, 10, cfg.d_model)
    cos, sin = model.rotary(10, x.device)
    with torch.no_grad():
        y_fast, _ = attn(x, cos, sin)
        y_slow, w = attn(x, cos, sin, return_weights=True)
    torch.testing.assert_close(y_fast, y_slow, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, cfg.n_head, 10))
    assert torch.all(w.triu(1) == 0)


@pytest.mark.parametrize("norms", [["pre"] * 3, ["post"] * 3, ["sandwich"] * 3, ["post", "pre", "sandwich"]])
def test_block_parameter_counts_used_for_flops_are_the_built_blocks(norms):
    """curriculum's FLOP estimate counts block parameters through block_parameters: tie it to real modules."""
    from normgrow.nn.model import PostNormBlock, PreNormBlock, SandwichBlock, block_parameters

    cfg = tiny(block_norms=norms)
    model = Student(cfg)
    classes = {"pre": PreNormBlock, "post": PostNormBlock, "sandwich": SandwichBlock}
    for i, (name, block) in enumerate(zip(norms, model.layers, strict=True)):
        assert type(block) is classes[name]
        assert block_parameters(cfg, i) == sum(p.numel() for p in block.parameters())
    assert count_parameters(model)["blocks"] == sum(block_parameters(cfg, i) for i in range(3))


@pytest.mark.parametrize("norm", ["pre", "post", "deepnorm"])
def test_activation_checkpointing_gives_identical_gradients(norm):
    cfg = tiny(norm=norm, n_layer=3)
    torch.manual_seed(0)
    model = Student(cfg).train()
    idx = torch.randint(0, cfg.vocab_size, (2, 13))

    calls = []
    forward = model.layers[1].forward  # counted by a wrapper: module hooks do not fire on the recomputation
    model.layers[1].forward = lambda *a: (calls.append(1), forward(*a))[1]

    def grads(checkpointing: bool) -> dict:
        model.zero_grad()
        calls.clear()
        model.activation_checkpointing = checkpointing
        logits = model(idx)
        F.cross_entropy(logits[:, :-1].flatten(0, 1), idx[:, 1:].flatten()).backward()
        assert len(calls) == (2 if checkpointing else 1)  # recomputed in the backward pass, or not
        return {n: p.grad.clone() for n, p in model.named_parameters()}

    plain, recomputed = grads(False), grads(True)
    assert plain.keys() == recomputed.keys()
    for name in plain:
        torch.testing.assert_close(recomputed[name], plain[name], rtol=0, atol=0, msg=name)


PLACEMENTS = ["pre", "post", "sandwich", "deepnorm", "reordered", "hybrid", "lnscale", "keel", "sandwich-ds", "mixln"]


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_a_padded_batch_gives_every_row_its_unpadded_logits(placement):
    """Three sequences of lengths 11, 6 and 3 padded to 11, on the left and on the right (pad id 0, whose
    embedding is made large so a leak cannot hide): each row's logits at its tokens equal those of the sequence
    alone, and every padded logit is finite. Also through the explicit attention path of the diagnostics."""
    cfg = tiny(n_layer=4, norm=placement, norm_kind="layernorm" if placement == "keel" else "rmsnorm")
    model = Student(cfg).eval()
    randomize_norms(model)
    with torch.no_grad():
        model.embed_tokens.weight[0].fill_(5.0)
    g = torch.Generator().manual_seed(3)
    seqs = [torch.randint(1, 97, (n,), generator=g) for n in (11, 6, 3)]
    with torch.no_grad():
        alone = [model(s[None])[0] for s in seqs]
        for side in ("left", "right"):
            ids, mask = torch.zeros(3, 11, dtype=torch.long), torch.zeros(3, 11, dtype=torch.long)
            for i, s in enumerate(seqs):
                sl = slice(11 - len(s), 11) if side == "left" else slice(0, len(s))
                ids[i, sl], mask[i, sl] = s, 1
            logits = model(ids, attention_mask=mask)
            assert torch.isfinite(logits).all()
            for i in range(len(seqs)):
                torch.testing.assert_close(logits[i][mask[i].bool()], alone[i], atol=2e-5, rtol=1e-5, msg=side)
            # a mask of ones is the plain forward, bit for bit
            assert torch.equal(model(ids, attention_mask=torch.ones_like(mask)), model(ids))
    attn, x = model.layers[0].self_attn, torch.randn(3, 11, cfg.d_model)
    cos, sin = model.rotary(11, x.device)
    from normgrow.nn.blocks import KEY_MASK

    token = KEY_MASK.set(mask.bool())
    try:
        with torch.no_grad():
            fast, slow = attn(x, cos, sin)[0], attn(x, cos, sin, return_weights=True)[0]
    finally:
        KEY_MASK.reset(token)
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)
