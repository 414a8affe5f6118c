"""The architecture of a normgrow student, self-contained: this module imports only torch, so `normgrow
export` copies it next to the exported model's modeling file and `trust_remote_code=True` loads a
student on a machine without normgrow. Everything that is normgrow's own (the placement registry,
initialization records, parameter counts, the Qwen3 mapping) is in model.py, which builds on this.

`cfg` below is any object with the fields of normgrow.config.ModelConfig (the dataclass itself, or a
namespace made from its dict in an exported config.json).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint


def head_dim_of(cfg) -> int:
    """Per-head width: model.head_dim, else d_model // n_head."""
    return cfg.head_dim if cfg.head_dim is not None else cfg.d_model // cfg.n_head


class RMSNorm(nn.Module):
    """y = g · x / sqrt(mean(x²) + eps), computed in float32 like Qwen3RMSNorm."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        y = F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps)
        return (self.weight * y.to(dtype)).to(dtype)  # stay in the input dtype under autocast


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
    def __init__(self, cfg):
        super().__init__()
        self.n_head, self.n_kv_head = cfg.n_head, cfg.n_kv_head
        self.head_dim = head_dim_of(cfg)
        self.q_proj = nn.Linear(cfg.d_model, cfg.n_head * self.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.d_model, cfg.n_kv_head * self.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.d_model, cfg.n_kv_head * self.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.n_head * self.head_dim, cfg.d_model, bias=False)
        # Qwen3's q/k norms act on each head's vector, before the rotation.
        self.q_norm = RMSNorm(self.head_dim, cfg.norm_eps) if cfg.qk_norm else nn.Identity()
        self.k_norm = RMSNorm(self.head_dim, cfg.norm_eps) if cfg.qk_norm else nn.Identity()

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, return_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        B, T, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(B, T, self.n_head, self.head_dim)).transpose(1, 2)  # (B, H, T, hd)
        k = self.k_norm(self.k_proj(x).view(B, T, self.n_kv_head, self.head_dim)).transpose(1, 2)  # (B, Hkv, T, hd)
        v = self.v_proj(x).view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)  # (B, Hkv, T, hd)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        weights = None
        if return_weights:  # explicit attention matrix, only for diagnostics
            rep = self.n_head // self.n_kv_head
            k_, v_ = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
            scores = (q @ k_.transpose(-2, -1)) / math.sqrt(self.head_dim)  # (B, H, T, T)
            causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            weights = scores.float().masked_fill(~causal, float("-inf")).softmax(-1).to(q.dtype)
            y = weights @ v_
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

    def __init__(self, cfg):
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.d_model, cfg.norm_eps)

    def forward(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def attention_input(self, h: torch.Tensor) -> torch.Tensor:
        """The tensor the attention sublayer receives when the block's input is h."""
        raise NotImplementedError

    def attention_weights(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """(B, H, T, T) attention probabilities of this block on input h (diagnostics only)."""
        return self.self_attn(self.attention_input(h), cos, sin, return_weights=True)[1]

    def init_weights(self, cfg) -> None:
        """Initialize in place, by parameter name: gains of every `*norm` 1, residual-branch outputs (o_proj,
        down_proj) ~ N(0, (init_std/√(2D))²) with D = model.init_depth or n_layer, every other weight
        ~ N(0, init_std²). A placement with its own scheme overrides this (and `init_constants`)."""
        depth = init_depth(cfg)
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                nn.init.ones_(p)
            elif name in ("self_attn.o_proj.weight", "mlp.down_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=cfg.init_std / math.sqrt(2 * depth))
            else:
                nn.init.normal_(p, mean=0.0, std=cfg.init_std)

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
        self.attn_out_norm = RMSNorm(cfg.d_model, cfg.norm_eps)  # the second norm of each sandwich
        self.mlp_out_norm = RMSNorm(cfg.d_model, cfg.norm_eps)

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
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                nn.init.ones_(p)
            else:
                nn.init.normal_(p, mean=0.0, std=cfg.init_std * (beta if name in self.BETA_SCALED else 1.0))

    @classmethod
    def init_constants(cls, cfg) -> dict:
        depth = init_depth(cfg)
        alpha, beta = deepnorm_constants(depth)
        return {"alpha": alpha, "beta": beta, "beta_scaled_std": cfg.init_std * beta, "depth": depth}


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
    """Token embedding, the blocks, the final norm (if model.final_norm) and the LM head, with torch's
    default init: `block_classes` are the blocks' classes, bottom to top (modules are built in this
    order, which fixes the random draws). model.Student adds normgrow's initialization and records,
    and ties the head itself (`tie=False`) after initializing both matrices."""

    def __init__(self, cfg, block_classes: list[type[Block]], max_seq_len: int = 2048, tie: bool = True):
        super().__init__()
        if cfg.vocab_size is None:
            raise ValueError("model.vocab_size must be resolved (from the tokenizer) before building the student")
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layers = nn.ModuleList(c(cfg) for c in block_classes)
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps) if cfg.final_norm else nn.Identity()
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        # Rotary tables are computed on first use per (length, device) and kept out of the state dict:
        # a model materialized from meta tensors (transformers' from_pretrained) gets correct ones.
        self._rotary: dict = {}
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

    def hidden(self, idx: torch.Tensor, residuals: list | None = None) -> torch.Tensor:
        """Final hidden states (B, T, C): every block, then the final norm.

        If `residuals` is a list, the residual stream entering each block and leaving the last is
        appended to it (depth + 1 tensors of shape (B, T, C)); the plain path builds no list.
        """
        B, T = idx.shape
        cos, sin = self.rotary(T, idx.device)  # (T, hd)
        h = self.embed_tokens(idx)  # (B, T, C)
        if residuals is not None:
            residuals.append(h)
        recompute = self.activation_checkpointing and self.training and torch.is_grad_enabled()
        for block in self.layers:
            if recompute:  # keep only the block's input; its activations are recomputed in the backward pass
                h = torch.utils.checkpoint.checkpoint(block, h, cos, sin, use_reentrant=False)
            else:
                h = block(h, cos, sin)
            if residuals is not None:
                residuals.append(h)
        return self.norm(h)

    def forward(self, idx: torch.Tensor, hidden_only: bool = False) -> torch.Tensor:
        """Logits (B, T, V), or with `hidden_only` the final hidden states (B, T, C): losses over large
        vocabularies apply `lm_head` chunk by chunk (losses.py), and going through forward keeps
        DistributedDataParallel's hooks in the loop."""
        h = self.hidden(idx)
        return h if hidden_only else self.lm_head(h)
