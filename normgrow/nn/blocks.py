"""The architecture of a normgrow student, self-contained: this module imports only torch and its sibling
norms.py (the norm kinds), so `normgrow export` copies both next to the exported model's modeling file and
`trust_remote_code=True` loads a student on a machine without normgrow. Everything that is normgrow's own (the
placement and norm-kind registries, initialization records, parameter counts, the Qwen3 mapping) is in nn/model.py,
which builds on this.

`cfg` below is any object with the fields of normgrow.config.ModelConfig (the dataclass itself, or a
namespace made from its dict in an exported config.json).
"""

from __future__ import annotations

import math
import typing
from contextvars import ContextVar

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

from .norms import BUILTIN_NORM_KINDS, NORM_KINDS, DyT, LayerNorm, RMSNorm, is_norm, make_norm  # noqa: F401

# The keys of a padded batch (B, T) while Decoder.hidden runs one: a context, so no block's signature changes.
KEY_MASK: ContextVar[torch.Tensor | None] = ContextVar("normgrow_key_mask", default=None)


def head_dim_of(cfg) -> int:
    """Per-head width: model.head_dim, else d_model // n_head."""
    return cfg.head_dim if cfg.head_dim is not None else cfg.d_model // cfg.n_head


def rotary_tables(seq_len: int, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin of shape (seq_len, head_dim) in the half-split layout (frequencies repeated twice)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    freqs = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)  # (T, hd/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (T, hd)
    return emb.cos(), emb.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x (B, H, T, hd) by position: x·cos + rotate_half(x)·sin."""
    x1, x2 = x.chunk(2, dim=-1)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Attention(nn.Module):
    """Grouped-query attention. `qkv_norm` (HybridNorm's attention): q, k and v each normalized per head, whatever
    model.qk_norm says; otherwise q and k per head when model.qk_norm (Qwen3), v never."""

    def __init__(self, cfg, qkv_norm: bool = False):
        super().__init__()
        self.n_head, self.n_kv_head = cfg.n_head, cfg.n_kv_head
        self.head_dim = head_dim_of(cfg)
        self.q_proj = nn.Linear(cfg.d_model, cfg.n_head * self.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.d_model, cfg.n_kv_head * self.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.d_model, cfg.n_kv_head * self.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.n_head * self.head_dim, cfg.d_model, bias=False)
        # Qwen3's q/k norms act on each head's vector, before the rotation.
        qk = qkv_norm or cfg.qk_norm
        self.q_norm = make_norm(cfg, self.head_dim) if qk else nn.Identity()
        self.k_norm = make_norm(cfg, self.head_dim) if qk else nn.Identity()
        self.v_norm = make_norm(cfg, self.head_dim) if qkv_norm else nn.Identity()

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, return_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        B, T, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(B, T, self.n_head, self.head_dim)).transpose(1, 2)  # (B, H, T, hd)
        k = self.k_norm(self.k_proj(x).view(B, T, self.n_kv_head, self.head_dim)).transpose(1, 2)  # (B, Hkv, T, hd)
        v = self.v_norm(self.v_proj(x).view(B, T, self.n_kv_head, self.head_dim)).transpose(1, 2)  # (B, Hkv, T, hd)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        weights, keys = None, KEY_MASK.get()
        allowed = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()  # causal
        if keys is not None:  # padding: real keys only; a pad query also sees itself (finite, never read)
            allowed = (allowed & keys[:, None, None, :]) | torch.eye(T, dtype=torch.bool, device=x.device)
        if return_weights:  # explicit attention matrix, only for diagnostics
            rep = self.n_head // self.n_kv_head
            k_, v_ = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
            scores = (q @ k_.transpose(-2, -1)) / math.sqrt(self.head_dim)  # (B, H, T, T)
            weights = scores.float().masked_fill(~allowed, float("-inf")).softmax(-1).to(q.dtype)
            y = weights @ v_
        elif keys is not None:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=self.n_kv_head != self.n_head)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.n_kv_head != self.n_head)
        y = y.transpose(1, 2).reshape(B, T, self.n_head * self.head_dim)  # (B, T, H·hd)
        return self.o_proj(y), weights


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.up_proj = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.down_proj = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


# ----------------------------------------------------------------------------- blocks: the placements


class Block(nn.Module):
    """One decoder block: attention and MLP sublayers and the norms that a placement arranges.

    A placement is a subclass that overrides `forward` (the residual path) and `attention_input`
    (what the attention sublayer sees, for the attention-sink diagnostics); one that needs more
    norms adds them in `__init__` after calling this one. Parameter names follow Qwen3
    (input_layernorm before/around attention, post_attention_layernorm before/around the MLP), so a
    pre-norm block maps onto a Qwen3DecoderLayer one to one (`qwen3_compatible`: `normgrow export`
    writes a student made only of such blocks as a stock Qwen3ForCausalLM).
    """

    qwen3_compatible = False
    renormalizes = False  # its output is a norm's output: a dose the stream carried in does not come out (the dose)
    qkv_norm = False  # HybridNorm's attention (q, k and v normalized per head)

    def __init__(self, cfg):
        super().__init__()
        self.self_attn = Attention(cfg, qkv_norm=self.qkv_norm)
        self.mlp = MLP(cfg)
        self.input_layernorm = make_norm(cfg, cfg.d_model)
        self.post_attention_layernorm = make_norm(cfg, cfg.d_model)

    def forward(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def attention_input(self, h: torch.Tensor) -> torch.Tensor:
        """The tensor the attention sublayer receives when the block's input is h."""
        raise NotImplementedError

    def attention_weights(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """(B, H, T, T) attention probabilities of this block on input h (diagnostics only)."""
        return self.self_attn(self.attention_input(h), cos, sin, return_weights=True)[1]

    def init_weights(self, cfg) -> None:
        """Initialize in place, by parameter name: every norm to its kind's start (gains 1, biases 0, DyT's scalar
        model.dyt_alpha; no random draw), residual-branch outputs (o_proj, down_proj) ~ N(0, (init_std/√(2D))²) with
        D = model.init_depth or n_layer, every other weight ~ N(0, init_std²). A placement with its own scheme
        overrides this (and `init_constants`)."""
        depth = init_depth(cfg)
        for name, p in self.weights_to_draw():
            if name in ("self_attn.o_proj.weight", "mlp.down_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=cfg.init_std / math.sqrt(2 * depth))
            else:
                nn.init.normal_(p, mean=0.0, std=cfg.init_std)

    def weights_to_draw(self) -> list[tuple[str, nn.Parameter]]:
        """Reset every norm of the block to its start, then return the other parameters, in module order: the ones
        an init draws (in this order, so the draws do not depend on the norm kind)."""
        in_norms: set[int] = set()
        for module in self.modules():
            if is_norm(module):
                typing.cast(typing.Any, module).reset_parameters()
                in_norms.update(id(p) for p in module.parameters())
        return [(n, p) for n, p in self.named_parameters() if id(p) not in in_norms]

    def place(self, index: int) -> None:
        """Told the block's index in the full-depth student (0-based) when it is built or inserted by growth (and
        after a `copy` init): a placement whose computation depends on it (LayerNorm Scaling) records it here."""

    @classmethod
    def init_constants(cls, cfg) -> dict:
        """The constants this placement's init and forward use (recorded in the run summary)."""
        depth = init_depth(cfg)
        return {"residual_out_std": cfg.init_std / math.sqrt(2 * depth), "depth": depth}

    def zero_branch_outputs(self) -> None:
        """Zero the residual branches' output projections (`zero` growth init): the branches output 0.
        Norm gains are left alone: zeroing them would kill their gradients."""
        nn.init.zeros_(self.self_attn.o_proj.weight)
        nn.init.zeros_(self.mlp.down_proj.weight)


class PreNormBlock(Block):
    """pre: h = h + F(N(h))  (Qwen3, Llama, GPT-2)

    h ─┬───────────────(+)─►
       └─ N ─ F ───────┘
    """

    qwen3_compatible = True

    def forward(self, h, cos, sin):
        h = h + self.self_attn(self.input_layernorm(h), cos, sin)[0]
        return h + self.mlp(self.post_attention_layernorm(h))

    def attention_input(self, h):
        return self.input_layernorm(h)


class PostNormBlock(Block):
    """post: h = N(h + F(h))  (original Transformer, BERT)

    h ─┬──────────(+)─ N ─►
       └─ F ──────┘
    """

    renormalizes = True

    def forward(self, h, cos, sin):
        h = self.input_layernorm(h + self.self_attn(h, cos, sin)[0])
        return self.post_attention_layernorm(h + self.mlp(h))

    def attention_input(self, h):
        return h


class SandwichBlock(Block):
    """sandwich (peri-norm): h = h + N2(F(N1(h)))  (Gemma 2/3, OLMo 2 use variants)

    h ─┬──────────────────(+)─►
       └─ N1 ─ F ─ N2 ────┘
    """

    def __init__(self, cfg):
        super().__init__(cfg)
        self.attn_out_norm = make_norm(cfg, cfg.d_model)  # the second norm of each sandwich
        self.mlp_out_norm = make_norm(cfg, cfg.d_model)

    def forward(self, h, cos, sin):
        h = h + self.attn_out_norm(self.self_attn(self.input_layernorm(h), cos, sin)[0])
        return h + self.mlp_out_norm(self.mlp(self.post_attention_layernorm(h)))

    def attention_input(self, h):
        return self.input_layernorm(h)


class DeepNormBlock(Block):
    """deepnorm (DeepNet, Wang et al. 2022): post-norm with an up-weighted residual, per sublayer

        h = N(α·h + F(h))          α = (2D)^(1/4)
        h ─┬── ×α ────(+)─ N ─►
           └─ F ──────┘

    and, at initialization, the weights of the value and output projections and of the whole MLP
    ~ N(0, (β·init_std)²) with β = (8D)^(-1/4); query and key projections ~ N(0, init_std²); norm
    gains 1 (the decoder-only constants of the paper, whose Xavier init is replaced by the run's
    normal init_std; RMSNorm in place of LayerNorm, as in every normgrow block). β replaces the
    1/√(2D) scaling of the other placements.

    D is the depth of the *full-depth* student (model.init_depth, else model.n_layer), not the depth
    held now: under growth every block — trained from the start or appended later — has the same α
    and was initialized with the same β, and no constant changes at a growth event. A zero-initialized
    appended block computes N(α·N(α·h)) = N(h) up to ε: like post-norm, the function is preserved only
    where the block's input is already normalized (any block after the first), which is always the case
    for blocks appended on top of a DeepNorm prefix.
    """

    renormalizes = True

    BETA_SCALED = (
        "self_attn.v_proj.weight",
        "self_attn.o_proj.weight",
        "mlp.gate_proj.weight",
        "mlp.up_proj.weight",
        "mlp.down_proj.weight",
    )

    def __init__(self, cfg):
        super().__init__(cfg)
        self.alpha = deepnorm_constants(init_depth(cfg))[0]

    def forward(self, h, cos, sin):
        h = self.input_layernorm(self.alpha * h + self.self_attn(h, cos, sin)[0])
        return self.post_attention_layernorm(self.alpha * h + self.mlp(h))

    def attention_input(self, h):
        return h

    def init_weights(self, cfg) -> None:
        beta = deepnorm_constants(init_depth(cfg))[1]
        for name, p in self.weights_to_draw():
            nn.init.normal_(p, mean=0.0, std=cfg.init_std * (beta if name in self.BETA_SCALED else 1.0))

    @classmethod
    def init_constants(cls, cfg) -> dict:
        depth = init_depth(cfg)
        alpha, beta = deepnorm_constants(depth)
        return {"alpha": alpha, "beta": beta, "beta_scaled_std": cfg.init_std * beta, "depth": depth}


class ReorderedBlock(Block):
    """reordered (OLMo 2's order): the norm on each branch's output, inside the residual; no norm on its input

        h = h + N(F(h))
        h ─┬─────────────(+)─►
           └─ F ─ N ─────┘

    Norms `attn_out_norm` and `mlp_out_norm` (the names of sandwich's second norms; the block has no
    input_layernorm or post_attention_layernorm). A zero-initialized block adds N(0) = 0 (RMSNorm, LayerNorm, DyT
    with its bias at 0): the identity, exactly.
    """

    def __init__(self, cfg):
        super().__init__(cfg)
        del self.input_layernorm, self.post_attention_layernorm
        self.attn_out_norm = make_norm(cfg, cfg.d_model)
        self.mlp_out_norm = make_norm(cfg, cfg.d_model)

    def forward(self, h, cos, sin):
        h = h + self.attn_out_norm(self.self_attn(h, cos, sin)[0])
        return h + self.mlp_out_norm(self.mlp(h))

    def attention_input(self, h):
        return h


class HybridNormBlock(Block):
    """hybrid (HybridNorm, Zhuo et al. 2025): QKV normalization inside attention, post-norm around the FFN

        y = h + Attn(h)     with q, k and v each normalized per head (self_attn.q_norm, k_norm, v_norm)
        z = N(y)            (post_attention_layernorm)
        h' = z + FFN(z)
        h ─┬─────────(+)─ N ─┬──────(+)─►
           └─ Attn_qkv ┘     └─ FFN ─┘

    No norm on the block's input (no input_layernorm): the attention normalizes q, k and v itself, whatever
    model.qk_norm says. The paper's HybridNorm* variant (pre-norm in the first block) is not built in; a per-block
    list (model.block_norms: [pre, hybrid, …]) comes closest. A zero-initialized block computes N(h): the identity
    up to a per-token rescale, which a final RMSNorm or LayerNorm undoes (as for post-norm).
    """

    renormalizes = True

    qkv_norm = True

    def __init__(self, cfg):
        super().__init__(cfg)
        del self.input_layernorm

    def forward(self, h, cos, sin):
        z = self.post_attention_layernorm(h + self.self_attn(h, cos, sin)[0])
        return z + self.mlp(z)

    def attention_input(self, h):
        return h


class LNScaledBlock(Block):
    """lnscale (LayerNorm Scaling, "The Curse of Depth in Large Language Models", 2025): pre-norm with each norm's
    output scaled by 1/√ℓ, ℓ the block's 1-based index in the full-depth student

        h = h + F(N(h) / √ℓ)
        h ─┬──────────────────(+)─►
           └─ N ─ ×ℓ^-½ ─ F ──┘

    ℓ is fixed when the block is built or inserted (`place`): its position in the *full-depth* student, the
    index its placement is chosen by, so no block's scale changes at a growth event (under `append` that is also
    the index it holds at every stage; under `interleave` or `middle` a block keeps the ℓ of where it ends, and a
    `copy` takes its own ℓ, not its source's). 1/√ℓ is the persistent buffer `depth_scale`, so checkpoints and
    exports carry it. A zero-initialized block is the identity, exactly.
    """

    def __init__(self, cfg):
        super().__init__(cfg)
        self.register_buffer("depth_scale", torch.ones(()))

    def place(self, index: int) -> None:
        with torch.no_grad():
            typing.cast(torch.Tensor, self.depth_scale).fill_(1.0 / math.sqrt(index + 1))

    def forward(self, h, cos, sin):
        s = self.depth_scale.to(h.dtype)
        h = h + self.self_attn(self.input_layernorm(h) * s, cos, sin)[0]
        return h + self.mlp(self.post_attention_layernorm(h) * s)

    def attention_input(self, h):
        return self.input_layernorm(h) * self.depth_scale.to(h.dtype)


class KeelBlock(Block):
    """keel (Keel, "Post-LayerNorm Is Back: Stable, Expressive, and Deep", 2026): post-norm whose residual path is
    highway-style — the stream scaled by α = L, the number of sublayers of the full-depth student (2D) — with a norm
    on the branch's input as well

        h = N_out(α·h + F(N_in(h)))     α = 2D
        h ─┬── ×α ─────────(+)─ N_out ─►
           └─ N_in ─ F ─────┘

    N_in: input_layernorm / post_attention_layernorm; N_out: attn_out_norm / mlp_out_norm. The initialization is
    the default one (the paper asks for none of its own). D is the full depth (model.init_depth, else n_layer), as
    for DeepNorm: no constant changes at a growth event. A zero-initialized block computes N_out(α·h) = N(h), as
    post-norm does.
    """

    renormalizes = True

    def __init__(self, cfg):
        super().__init__(cfg)
        self.attn_out_norm = make_norm(cfg, cfg.d_model)
        self.mlp_out_norm = make_norm(cfg, cfg.d_model)
        self.alpha = keel_alpha(init_depth(cfg))

    def forward(self, h, cos, sin):
        h = self.attn_out_norm(self.alpha * h + self.self_attn(self.input_layernorm(h), cos, sin)[0])
        return self.mlp_out_norm(self.alpha * h + self.mlp(self.post_attention_layernorm(h)))

    def attention_input(self, h):
        return self.input_layernorm(h)

    @classmethod
    def init_constants(cls, cfg) -> dict:
        return {**super().init_constants(cfg), "alpha": keel_alpha(init_depth(cfg))}


def keel_alpha(depth: int) -> float:
    """Keel's residual scale α = L, the number of sublayers (two per block) of a `depth`-block model."""
    return float(2 * depth)


class ScaledSandwichBlock(SandwichBlock):
    """sandwich-ds (depth-scaled sandwich): sandwich whose output norms' gains start at 1/√(2D), D the full depth

        h = h + N₂(F(N₁(h))),   N₂'s gain (and nothing else) initialized to 1/√(2D)

    In a sandwich block N₂ normalizes the branch, so the 1/√(2D) scale the other placements give o_proj and
    down_proj cannot survive it; this variant moves the depth scaling onto N₂'s gain, where it does (our reading
    of "sandwich with depth-scaled init": the scale that sets each branch's share of the stream at the start).
    A zero-initialized block is the identity, exactly.
    """

    def init_weights(self, cfg) -> None:
        super().init_weights(cfg)
        scale = sandwich_gain(init_depth(cfg))
        with torch.no_grad():
            for norm in (self.attn_out_norm, self.mlp_out_norm):
                norm.weight.fill_(scale)

    @classmethod
    def init_constants(cls, cfg) -> dict:
        return {**super().init_constants(cfg), "output_norm_gain": sandwich_gain(init_depth(cfg))}


def sandwich_gain(depth: int) -> float:
    """The depth-scaled sandwich's initial output-norm gain 1/√(2D)."""
    return 1.0 / math.sqrt(2 * depth)


def deepnorm_constants(depth: int) -> tuple[float, float]:
    """DeepNet's decoder-only α = (2D)^(1/4) and β = (8D)^(-1/4) for a D-block model."""
    return (2 * depth) ** 0.25, (8 * depth) ** -0.25


def init_depth(cfg) -> int:
    """The depth D init constants use: model.init_depth, else the full depth model.n_layer."""
    return cfg.init_depth or cfg.n_layer


# The built-in placements by name (model.PLACEMENTS registers these and whatever user code adds).
BUILTIN_PLACEMENTS: dict[str, type[Block]] = {
    "pre": PreNormBlock,
    "post": PostNormBlock,
    "sandwich": SandwichBlock,
    "deepnorm": DeepNormBlock,
    "reordered": ReorderedBlock,
    "hybrid": HybridNormBlock,
    "lnscale": LNScaledBlock,
    "keel": KeelBlock,
    "sandwich-ds": ScaledSandwichBlock,
}


def mixln_post_blocks(cfg) -> int:
    """Mix-LN (Li et al. 2024): how many of the full-depth student's first blocks are post-norm,
    floor(model.mixln_ratio · n_layer); the blocks above are pre-norm."""
    return math.floor(cfg.mixln_ratio * cfg.n_layer + 1e-9)


def placement_of(cfg, index: int) -> str:
    """Placement of block `index` (its position in the full-depth student): model.block_norms[index] if
    given, else model.norm, where the rule `mixln` is post below mixln_post_blocks and pre from there up."""
    if cfg.block_norms:
        return cfg.block_norms[index]
    if cfg.norm == "mixln":
        return "post" if index < mixln_post_blocks(cfg) else "pre"
    return cfg.norm


# ----------------------------------------------------------------------------- the decoder


class Decoder(nn.Module):
    """Token embedding, the blocks (`block_classes`, bottom to top: built in this order, which fixes the random
    draws), the final norm (if model.final_norm) and the LM head, with torch's default init. model.Student adds
    normgrow's initialization and records, and ties the head itself (`tie=False`) after initializing both."""

    def __init__(self, cfg, block_classes: list[type[Block]], max_seq_len: int = 2048, tie: bool = True):
        super().__init__()
        if cfg.vocab_size is None:
            raise ValueError("model.vocab_size must be resolved (from the tokenizer) before building the student")
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layers = nn.ModuleList(c(cfg) for c in block_classes)
        for i, block in enumerate(typing.cast(list[Block], self.layers)):
            block.place(i)  # its index in the full-depth student when this is it (model.Student passes its own)
        self.norm = make_norm(cfg, cfg.d_model) if cfg.final_norm else nn.Identity()
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self._rotary: dict = {}  # per device, on first use, out of the state dict: from_pretrained's meta init is safe
        self.max_seq_len = max_seq_len
        self.activation_checkpointing = False  # set by the trainer (train.activation_checkpointing)
        if cfg.tie_embeddings and tie:
            self.lm_head.weight = self.embed_tokens.weight

    @property
    def depth(self) -> int:
        """Blocks held now (logged as `n_layer`); grows during a curriculum up to cfg.n_layer."""
        return len(self.layers)

    def rotary(self, T: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin tables (T, head_dim) in float32 on `device`."""
        n = max(T, self.max_seq_len)
        cached = self._rotary.get(device)
        if cached is None or cached[0].shape[0] < T:
            cached = tuple(t.to(device) for t in rotary_tables(n, head_dim_of(self.cfg), self.cfg.rope_theta))
            self._rotary[device] = cached
        return cached[0][:T], cached[1][:T]

    def hidden(
        self, idx: torch.Tensor, residuals: list | None = None, attention_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Final hidden states (B, T, C): every block, then the final norm. `residuals` (a list) gets the stream entering
        each block and leaving the last (depth + 1 tensors). `attention_mask` (B, T; 0 = padding, left or right): each
        token attends to the real tokens before it at its position among them, as in its unpadded sequence."""
        if attention_mask is None or bool(attention_mask.all()):
            return self._hidden(idx, residuals, None)
        token = KEY_MASK.set(keys := attention_mask.bool())
        try:
            return self._hidden(idx, residuals, (keys.long().cumsum(-1) - 1).clamp_min(0))
        finally:
            KEY_MASK.reset(token)

    def _hidden(self, idx: torch.Tensor, residuals: list | None, positions: torch.Tensor | None) -> torch.Tensor:
        B, T = idx.shape
        cos, sin = self.rotary(T, idx.device)  # (T, hd)
        if positions is not None:  # per row (B, 1, T, hd): each token at its position among the row's tokens
            cos, sin = cos[positions].unsqueeze(1), sin[positions].unsqueeze(1)
        h = self.embed_tokens(idx)  # (B, T, C)
        recompute = self.activation_checkpointing and self.training and torch.is_grad_enabled()
        scale, scaled = self.boundary_dose()
        carried = 1.0
        for i, block in enumerate(self.layers):
            if i in scaled:  # the dose: the stream a growth event's first appended block receives, × c
                h, carried = h * scale, carried * scale
            if residuals is not None:
                residuals.append(h)  # the stream entering block i
            if recompute:  # keep only the block's input; its activations are recomputed in the backward pass
                h = torch.utils.checkpoint.checkpoint(block, h, cos, sin, use_reentrant=False)
            else:
                h = block(h, cos, sin)
            if block.renormalizes:
                carried = 1.0
        if residuals is not None:
            residuals.append(h)
        return self.final(h, carried)

    def final(self, h: torch.Tensor, carried: float = 1.0) -> torch.Tensor:
        """The final norm of the last residual h, read as h / carried (the dose it carries: the boundaries' c since the
        last block whose output is a norm's), so the norm's ε cannot tell it from the plain stream."""
        return self.norm(h / carried if carried != 1.0 else h)

    def carried_at(self, b: int) -> float:
        """The dose factor the stream entering block b carries (b = depth: leaving the last block)."""
        scale, scaled = self.boundary_dose()
        carried = 1.0
        for i in range(min(b, len(self.layers)) + 1):
            carried = 1.0 if i and self.layers[i - 1].renormalizes else carried
            carried *= scale if i in scaled and i < len(self.layers) else 1.0
        return carried

    def boundary_dose(self) -> tuple[float, frozenset[int]]:
        """model.boundary_scale and the block indices it applies at (none in an older export's config)."""
        scale = float(getattr(self.cfg, "boundary_scale", 1.0))
        return scale, frozenset(getattr(self.cfg, "scaled_boundaries", ()) if scale != 1.0 else ())

    def run_blocks(
        self, h: torch.Tensor, start: int, cos: torch.Tensor, sin: torch.Tensor, carried: float = 1.0
    ) -> tuple[torch.Tensor, float]:
        """The blocks from `start` on applied to h (carrying the dose `carried`) as `hidden` applies them; the last
        residual and the dose it carries."""
        scale, scaled = self.boundary_dose()
        for i in range(start, len(self.layers)):
            if i in scaled:
                h, carried = h * scale, carried * scale
            h = self.layers[i](h, cos, sin)
            if self.layers[i].renormalizes:
                carried = 1.0
        return h, carried

    def forward(
        self, idx: torch.Tensor, hidden_only: bool = False, attention_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Logits (B, T, V), or with `hidden_only` the final hidden states (B, T, C): losses over large
        vocabularies apply `lm_head` chunk by chunk (nn/losses.py), and going through forward keeps
        DistributedDataParallel's hooks in the loop. `attention_mask`: a padded batch (see hidden)."""
        h = self.hidden(idx, attention_mask=attention_mask)
        return h if hidden_only else self.lm_head(h)
