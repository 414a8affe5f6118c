"""The student: a Qwen3-style decoder whose normalization placement is one config field.

Architecture (docs/DESIGN.md §3.1), read top to bottom:
- RMSNorm everywhere (`F.rms_norm`, fused where torch has a kernel), epsilon `model.norm_eps`.
- Rotary position embeddings on q and k (half-split layout, as Qwen3/Llama), base `model.rope_theta`.
- Grouped-query attention (`n_kv_head` key/value heads shared by `n_head` query heads) with a
  per-head RMSNorm on q and k (Qwen3), causal `F.scaled_dot_product_attention`, no biases.
- SwiGLU MLP: down(silu(gate(x)) * up(x)).
- Placement `model.norm` (N = RMSNorm, F = attention or MLP sublayer), one Block subclass each,
  registered by name in `PLACEMENTS` (user code adds its own with `register_placement`);
  `model.block_norms` gives every block its own:
      pre       h = h + F(N(h))          (Qwen3, Llama, GPT-2)
      post      h = N(h + F(h))          (original Transformer, BERT)
      sandwich  h = h + N2(F(N1(h)))     (peri-norm; Gemma 2/3, OLMo 2 use variants)
      deepnorm  h = N(α·h + F(h))        (DeepNet; α, β from the depth: DeepNormBlock)
  and one placement *rule*: `mixln` (Mix-LN) = post in the first floor(model.mixln_ratio · n_layer)
  blocks of the full-depth student, pre above (`placement_of`).
- Token embedding, optional final RMSNorm, LM head (optionally tied). A pre-norm student with
  `final_norm: true` is exactly `transformers`' Qwen3ForCausalLM (tests/nn/test_model.py checks logits);
  `hf_config()` / `to_hf_state_dict()` give the mapping.

Initialization (every constant and the depth it uses is in `init_record()`):
- token embedding ~ N(0, embed_init_std²) (default: init_std); LM head and every linear weight ~ N(0, init_std²);
- residual-branch output projections (attention o_proj, MLP down_proj) ~ N(0, (init_std/√(2D))²)
  with D = `model.init_depth`, default `model.n_layer` — the *final* depth, so a block gets the
  same init whether it is trained jointly or appended later, and no constant depends on the
  current (growing) depth: under growth "the depth" is ambiguous, so the one used is recorded;
- all norm gains 1;
- a placement may define its own (DeepNormBlock: β-scaled weights, no 1/√(2D)) by overriding
  `Block.init_weights`; its constants are in `init_record()["placements"]`.

The architecture itself (blocks, placements, the decoder trunk) is in nn/blocks.py, which imports only
torch so that exports can carry it; this module adds the registry, initialization and records.

The model holds the blocks of its current depth (`Student.depth`, logged as `n_layer`); growth
operators (train/growth.py) insert blocks into `layers`. The forward pass can return the residual
stream entering every block and leaving the last (diagnostics).
"""

from __future__ import annotations

import math
import typing
from collections.abc import Iterable

import torch
import torch.nn as nn

from normgrow.config import ModelConfig, resolved_head_dim
from normgrow.nn import norms
from normgrow.nn.blocks import (  # noqa: F401 - the architecture's names, re-exported where normgrow always had them
    BUILTIN_NORM_KINDS,
    BUILTIN_PLACEMENTS,
    MLP,
    Attention,
    Block,
    Decoder,
    DeepNormBlock,
    DyT,
    HybridNormBlock,
    KeelBlock,
    LayerNorm,
    LNScaledBlock,
    PostNormBlock,
    PreNormBlock,
    ReorderedBlock,
    RMSNorm,
    SandwichBlock,
    ScaledSandwichBlock,
    apply_rotary,
    deepnorm_constants,
    init_depth,
    mixln_post_blocks,
    placement_of,
    rotary_tables,
)
from normgrow.registry import Registry

PLACEMENTS: Registry[type[Block]] = Registry("placement", field="model.norm")


def register_placement(name: str, block_class: type[Block], replace: bool = False) -> type[Block]:
    """Make `model.norm=<name>` (and `model.block_norms` entries) build `block_class` blocks."""
    if not (isinstance(block_class, type) and issubclass(block_class, Block)):
        raise TypeError(f"placement '{name}': expected a subclass of normgrow.Block, got {block_class!r}")
    return PLACEMENTS.register(name, block_class, replace=replace)


for _name, _block in BUILTIN_PLACEMENTS.items():
    register_placement(_name, _block)

NORM_KINDS: Registry[typing.Callable] = Registry("norm kind", field="model.norm_kind")


def register_norm_kind(name: str, factory: typing.Callable, replace: bool = False) -> typing.Callable:
    """Make `model.norm_kind=<name>` build every norm of a student with `factory(model_config, width)`: a module with
    `is_norm = True` and a `reset_parameters()` that sets its initial values without drawing random numbers."""
    if not callable(factory):
        raise TypeError(f"norm kind '{name}': expected a callable factory(cfg, dim), got {factory!r}")
    NORM_KINDS.register(name, factory, replace=replace)
    norms.NORM_KINDS[name] = factory
    return factory


for _name, _factory in BUILTIN_NORM_KINDS.items():
    register_norm_kind(_name, _factory)


def make_block(cfg: ModelConfig, index: int) -> Block:
    """A freshly constructed (not yet initialized) block for position `index`."""
    return PLACEMENTS[placement_of(cfg, index)](cfg)


# ----------------------------------------------------------------------------- the student


class Student(Decoder):
    def __init__(
        self,
        cfg: ModelConfig,
        depth: int | None = None,
        max_seq_len: int = 2048,
        placements: list[str] | None = None,
        indices: list[int] | None = None,
    ):
        """A student holding `depth` blocks (default cfg.n_layer, the full depth; a growth curriculum
        starts shallower and inserts blocks) of the given `placements` (default: placement_of each
        index; a curriculum passes its first stage's, growth.StagePlan) at the given `indices` in the
        full-depth student (default 0 … depth − 1; a curriculum passes its first stage's), initialized (module
        docstring). cfg.vocab_size must be resolved."""
        depth = cfg.n_layer if depth is None else depth
        placements = placements or [placement_of(cfg, i) for i in range(depth)]
        indices = list(range(depth)) if indices is None else indices
        if len(placements) != depth or len(indices) != depth:
            raise ValueError(f"{len(placements)} placements and {len(indices)} indices for {depth} blocks")
        super().__init__(cfg, [PLACEMENTS[name] for name in placements], max_seq_len, tie=False)
        nn.init.normal_(self.embed_tokens.weight, mean=0.0, std=embed_std(cfg))
        nn.init.normal_(self.lm_head.weight, mean=0.0, std=cfg.init_std)
        for block, index in zip(self.layers, indices, strict=True):
            init_block(typing.cast(Block, block), cfg)
            typing.cast(Block, block).place(index)
        if cfg.tie_embeddings:  # after both inits, so the random draws do not depend on tying
            self.lm_head.weight = self.embed_tokens.weight

    def init_record(self) -> dict:
        """Every initialization constant and the depth it used (saved in the run summary)."""
        depth = init_depth(self.cfg)
        classes = {type(b).__name__: type(b) for b in typing.cast(Iterable[Block], self.layers)}
        return {
            "init_std": self.cfg.init_std,
            "embed_init_std": embed_std(self.cfg),
            "residual_out_std": self.cfg.init_std / math.sqrt(2 * depth),
            "residual_out_depth": depth,
            "residual_out_depth_source": "model.init_depth" if self.cfg.init_depth else "model.n_layer (final depth)",
            "norm_gain": 1.0,
            "placements": {name: c.init_constants(self.cfg) for name, c in sorted(classes.items())},
        }


def embed_std(cfg: ModelConfig) -> float:
    """Std of the token-embedding init (model.embed_init_std, else init_std)."""
    return cfg.embed_init_std if cfg.embed_init_std is not None else cfg.init_std


def init_block(block: Block, cfg: ModelConfig) -> None:
    """Initialize one block in place (at construction and for blocks inserted by growth): its
    placement's `init_weights` (Block.init_weights for the built-in scheme)."""
    block.init_weights(cfg)


def count_parameters(model: Student) -> dict[str, int]:
    """Parameter counts: total, embeddings, per block (the first block's; `blocks` sums them all),
    LM head (a tied head counts once)."""
    seen: set[int] = set()

    def n(module: nn.Module) -> int:
        total = 0
        for p in module.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                total += p.numel()
        return total

    emb = n(model.embed_tokens)
    blocks = [n(b) for b in model.layers]
    rest = n(model.norm) + n(model.lm_head)
    return {
        "total": emb + sum(blocks) + rest,
        "embedding": emb,
        "per_block": blocks[0] if blocks else 0,
        "blocks": sum(blocks),
        "final_norm_and_head": rest,
    }


def block_parameters(cfg: ModelConfig, index: int) -> int:
    """Parameters of block `index` of this student, counted on a block built on the meta device (no
    memory, no random numbers drawn), so FLOP estimates follow whatever a placement defines."""
    with torch.device("meta"):
        return sum(p.numel() for p in make_block(cfg, index).parameters())


def parameters_of(cfg: ModelConfig) -> int:
    """Parameters of the full-depth student (embedding, blocks, final norm, head), counted without building it."""
    assert cfg.vocab_size is not None  # every caller passes a resolved vocabulary
    head = 0 if cfg.tie_embeddings else cfg.vocab_size * cfg.d_model
    return cfg.vocab_size * cfg.d_model + sum(block_parameters(cfg, i) for i in range(cfg.n_layer)) + cfg.d_model + head


# ----------------------------------------------------------------------------- Hugging Face mapping


def hf_config(cfg: ModelConfig, **extra):
    """The transformers Qwen3Config describing a pre-norm student with a final norm."""
    from transformers import Qwen3Config

    assert cfg.vocab_size is not None  # a built student's vocabulary is resolved
    return Qwen3Config(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.d_model,
        intermediate_size=cfg.d_ff,
        num_hidden_layers=cfg.n_layer,
        num_attention_heads=cfg.n_head,
        num_key_value_heads=cfg.n_kv_head,
        head_dim=resolved_head_dim(cfg),
        hidden_act="silu",
        rms_norm_eps=cfg.norm_eps,
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta},
        tie_word_embeddings=cfg.tie_embeddings,
        attention_bias=False,
        **extra,
    )


def to_hf_state_dict(model: Student) -> dict[str, torch.Tensor]:
    """Student weights under Qwen3ForCausalLM's names (model.* for the trunk, lm_head.* for the head)."""
    out = {}
    for name, t in model.state_dict().items():
        out[name if name.startswith("lm_head.") else f"model.{name}"] = t
    return out
