"""Curricula: stages, their budgets in optimizer steps, compute accounting, and the growth operators.

A curriculum is a list of stages (`curriculum.stages`), each a span of training at fixed depth.
Joint training is one stage at full depth; a growth curriculum appends blocks between stages
(3 → 6 → 9 in the `grow` preset). At a **growth event** new blocks are inserted above the trained
prefix and below the final norm / LM head, so the first new block receives the prefix's output
(the *boundary* representation).

Compute accounting (DESIGN.md §3), summed over optimizer steps:
    tokens                  training tokens consumed
    active_layer_tokens     tokens × blocks in the forward pass      (the paper's compute match)
    trainable_layer_tokens  tokens × blocks with trainable parameters
    flops                   estimate: 6·N_trainable + 2·N_frozen per token (N = parameters of the
                            blocks and head the token passes through) plus the attention scores
                            (6·T·n_head·head_dim per trainable block and token, 2· for frozen ones);
                            a frozen block still runs forward (and backward, if trainable blocks
                            lie below it — the 2· undercounts that case; the estimate is stated,
                            not hidden).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import torch

from normgrow.config import ModelConfig, RunConfig, load_config, parse_train_blocks, resolved_head_dim
from normgrow.errors import ConfigError
from normgrow.model import Block, Student, init_block


@dataclass(frozen=True)
class StagePlan:
    index: int
    n_layer: int
    steps: int
    tokens: int  # steps × tokens per step
    train_blocks: tuple[int, ...]


def tokens_per_step(cfg: RunConfig) -> int:
    return cfg.train.batch_size * cfg.data.seq_len


def plan_stages(cfg: RunConfig) -> list[StagePlan]:
    """Each stage's budget rounded to whole optimizer steps (at least one).

    A budget in active-layer tokens becomes tokens = active_layer_tokens / depth. Rounding to the
    nearest step keeps a matched run within half a step's tokens of its target per stage.
    """
    per_step = tokens_per_step(cfg)
    plans, prev = [], 0
    for i, s in enumerate(cfg.curriculum.stages):
        budget = s.tokens if s.tokens > 0 else s.active_layer_tokens / s.n_layer
        steps = max(1, round(budget / per_step))
        plans.append(StagePlan(i, s.n_layer, steps, steps * per_step,
                               tuple(parse_train_blocks(s.train, s.n_layer, prev))))
        prev = s.n_layer
    return plans


def block_parameters(m: ModelConfig) -> int:
    hd = resolved_head_dim(m)
    attn = m.d_model * hd * (2 * m.n_head + 2 * m.n_kv_head)
    norms = 2 * m.d_model + (2 * hd if m.qk_norm else 0) + (2 * m.d_model if m.norm == "sandwich" else 0)
    return attn + 3 * m.d_model * m.d_ff + norms


def flops_per_token(m: ModelConfig, depth: int, n_trainable: int, seq_len: int) -> float:
    """Estimated training FLOPs per token at this depth with n_trainable trainable blocks (see module doc)."""
    per_block = block_parameters(m)
    attn = 2 * seq_len * m.n_head * resolved_head_dim(m)  # QKᵀ and AV, causal half, fwd only
    head = m.d_model * m.vocab_size
    frozen = depth - n_trainable
    return 6 * (n_trainable * per_block + head) + 2 * frozen * per_block + 3 * n_trainable * attn + frozen * attn


# ----------------------------------------------------------------------------- growth


def grow(model: Student, n_layer: int, init: str, seed: int) -> list[Block]:
    """Append blocks to reach depth `n_layer`; returns the new blocks (already inside `model.layers`).

    init:
      random  a fresh block, initialized like blocks at the start (model.init_block);
      zero    a fresh block with its residual-branch output projections (attention o_proj, MLP
              down_proj) zeroed — the branches output 0, so for pre-norm (and sandwich) the block
              is the identity and growth preserves the function exactly; for post-norm the block
              still applies its norms, N(N(h)+0)… and the function changes (the jump is measured);
              norm gains stay 1 (zeroing gains kills gradients, RESEARCH.md item 6);
      copy    a copy of the last prefix block's weights.
    New weights come from a generator seeded by (seed, depth), so a resumed run grows identically.
    """
    cfg = model.cfg
    prefix = model.n_layer
    if n_layer <= prefix:
        raise ValueError(f"cannot grow from {prefix} to {n_layer} blocks")
    ref = next(model.parameters())
    new = []
    for depth in range(prefix, n_layer):
        block = Block(cfg)
        if init == "copy":
            block.load_state_dict(model.layers[prefix - 1].state_dict())
        else:
            g = torch.Generator().manual_seed(seed * 7919 + depth)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=g)))
                init_block(block, cfg)
            if init == "zero":
                torch.nn.init.zeros_(block.self_attn.o_proj.weight)
                torch.nn.init.zeros_(block.mlp.down_proj.weight)
        block.to(device=ref.device, dtype=ref.dtype)
        model.layers.append(block)
        new.append(block)
    return new



# ----------------------------------------------------------------------------- budget matching


def planned_totals(cfg: RunConfig, plans: list[StagePlan] | None = None) -> dict[str, float]:
    """Compute totals a config's curriculum will consume (vocab_size must be resolved for flops)."""
    plans = plans or plan_stages(cfg)
    totals = {"tokens": 0, "active_layer_tokens": 0, "trainable_layer_tokens": 0, "flops": 0.0}
    for p in plans:
        totals["tokens"] += p.tokens
        totals["active_layer_tokens"] += p.tokens * p.n_layer
        totals["trainable_layer_tokens"] += p.tokens * len(p.train_blocks)
        if cfg.model.vocab_size is not None:
            totals["flops"] += p.tokens * flops_per_token(cfg.model, p.n_layer, len(p.train_blocks), cfg.data.seq_len)
    return totals


def reference_totals(ref: str, vocab_size: int) -> tuple[dict, str]:
    """Totals of a finished run (its summary), an unfinished run (its config) or a config/preset."""
    path = Path(ref)
    if path.is_dir():
        if (path / "summary.json").is_file():
            return json.loads((path / "summary.json").read_text())["compute"], f"run {ref} (measured)"
        if not (path / "config.yaml").is_file():
            raise ConfigError(f"curriculum.match_budget: {ref}: a directory without config.yaml is not a run")
        ref_cfg = load_config(str(path / "config.yaml"))
        source = f"run {ref} (planned)"
    else:
        try:
            ref_cfg = load_config(ref)
        except ConfigError as e:
            raise ConfigError(f"curriculum.match_budget: {e}") from None
        source = f"config {ref} (planned)"
    if ref_cfg.model.vocab_size is None:
        ref_cfg = dataclasses.replace(ref_cfg, model=dataclasses.replace(ref_cfg.model, vocab_size=vocab_size))
    return planned_totals(ref_cfg), source


def match_budget(cfg: RunConfig) -> tuple[RunConfig, dict | None]:
    """Scale every stage's budget so the run's total of `match_by` equals the reference's.

    Stage proportions are kept; budgets become explicit token counts (written into the resolved
    config), rounded to whole steps by plan_stages, so a matched joint run lands within half a step
    of the target. Returns the new config and a record for the summary.
    """
    c = cfg.curriculum
    if c.match_budget is None:
        return cfg, None
    by = c.match_by
    target_totals, source = reference_totals(c.match_budget, cfg.model.vocab_size)
    target = target_totals[by]
    per_stage, prev = [], 0  # (tokens, cost of one token in the matched unit) per stage
    for s in c.stages:
        tokens = s.tokens if s.tokens > 0 else s.active_layer_tokens / s.n_layer
        n_train = len(parse_train_blocks(s.train, s.n_layer, prev))
        unit = {"tokens": 1, "active_layer_tokens": s.n_layer,
                "flops": flops_per_token(cfg.model, s.n_layer, n_train, cfg.data.seq_len)}[by]
        per_stage.append((tokens, unit))
        prev = s.n_layer
    current = sum(t * u for t, u in per_stage)
    scale = target / current
    stages = [dataclasses.replace(s, tokens=int(round(t * scale)), active_layer_tokens=0)
              for s, (t, _) in zip(c.stages, per_stage)]
    new = dataclasses.replace(cfg, curriculum=dataclasses.replace(c, stages=stages))
    got = planned_totals(new)[by]
    return new, {"reference": c.match_budget, "source": source, "by": by, "target": target, "planned": got}
