"""Stages: each stage's budget in optimizer steps, its blocks and growth event (`plan_stages`), and the compute
accounting that the training loop and the planned totals share.

Compute accounting (docs/DESIGN.md §3.3), summed over optimizer steps (`step_cost`, the one formula the
training loop and the planned totals both use):
    tokens                  training tokens consumed
    active_layer_tokens     tokens × blocks in the forward pass      (the paper's compute match)
    trainable_layer_tokens  tokens × blocks with trainable parameters
    flops                   estimate: 6·N_trainable + 2·N_frozen per token (N = parameters of the
                            blocks and head the token passes through, counted on the blocks the
                            placements build) plus the attention scores (6·T·n_head·head_dim per
                            trainable block and token, 2· for frozen ones); a frozen block still
                            runs forward (and backward, if trainable blocks lie below it — the 2·
                            undercounts that case; the estimate is stated, not hidden).
"""

from __future__ import annotations

import dataclasses
import math

import torch

from normgrow.config import ModelConfig, RunConfig, resolved_head_dim
from normgrow.errors import ConfigError
from normgrow.nn.model import PLACEMENTS, Student, block_parameters, placement_of
from normgrow.train.growth import GROWTH, GrowthEvent, GrowthOperator, StagePlan, replay_growth, stage_student


def tokens_per_step(cfg: RunConfig) -> int:
    return cfg.train.batch_size * cfg.data.seq_len


def plan_stages(cfg: RunConfig) -> list[StagePlan]:
    """Each stage's budget rounded to whole optimizer steps (at least one), its growth event and trainable blocks.

    A budget in active-layer tokens becomes tokens = active_layer_tokens / depth. Rounding to the
    nearest step keeps a matched run within half a step's tokens of its target per stage.
    """
    per_step = tokens_per_step(cfg)
    op = GROWTH[cfg.curriculum.growth]
    stages = cfg.curriculum.stages
    events: list[GrowthEvent | None] = [None] + [
        op.event(a.n_layer, b.n_layer) for a, b in zip(stages, stages[1:], strict=False)
    ]
    blocks = block_identities(stages[0].n_layer, events)  # each stage's blocks, bottom to top, as identities
    final = {b: i for i, b in enumerate(blocks[-1])}  # identity → index in the last stage's model
    verb = "appended" if cfg.curriculum.growth == "append" else f"inserted ({cfg.curriculum.growth})"
    plans: list[StagePlan] = []
    for i, (s, event, ids) in enumerate(zip(stages, events, blocks, strict=True)):
        budget = s.tokens if s.tokens > 0 else s.active_layer_tokens / s.n_layer
        steps = max(1, round(budget / per_step))
        indices = tuple(final[b] for b in ids)
        placements = tuple(placement_of(cfg.model, i) for i in indices)
        if event is None:
            provenance = ["initial"] * s.n_layer
        else:
            check_copies(cfg, op, event, plans[-1].placements, placements)
            provenance = list(plans[-1].provenance)
            for position in event.new_blocks:
                provenance.insert(position, f"{verb} at stage {i} ({cfg.curriculum.growth_init} init)")
        trained = tuple(op.train_blocks(s.train, s.n_layer, event))
        if not trained or not all(0 <= b < s.n_layer for b in trained):
            raise ConfigError(
                f"curriculum.growth: {cfg.curriculum.growth}: its train_blocks {list(trained)} for stage "
                f"{i} are not a non-empty set of blocks in 0..{s.n_layer - 1}"
            )
        if cfg.model.tie_embeddings and 0 not in trained:
            raise ConfigError(
                f"curriculum.stages.{i}.train: block 0 is frozen, but model.tie_embeddings=true makes the "
                "training LM head the embedding that feeds it, so the frozen prefix would still be "
                "retrained; set model.tie_embeddings=false for this arm"
            )
        plans.append(
            StagePlan(i, s.n_layer, steps, steps * per_step, trained, placements, indices, event, tuple(provenance), op)
        )
    return plans


def check_copies(
    cfg: RunConfig, op: GrowthOperator, event: GrowthEvent, before: tuple[str, ...], after: tuple[str, ...]
) -> None:
    """A `copy` init needs each new block to have its source's parameters: refused when the stages are planned
    (run start, study start, `normgrow plan`), not at the growth event after the prefix has trained."""
    if cfg.curriculum.growth_init != "copy":
        return
    for position in event.new_blocks:
        source = op.copy_source(event.prefix, event.depth, position)
        if _parameter_names(cfg.model, after[position]) != _parameter_names(cfg.model, before[source]):
            raise ConfigError(
                f"curriculum.growth_init: copy: the new {after[position]} block at {position} cannot "
                f"copy block {source} ({before[source]}): their parameters differ"
            )


def _parameter_names(cfg: ModelConfig, placement: str) -> list[str]:
    with torch.device("meta"):  # names only: nothing allocated
        return sorted(name for name, _ in PLACEMENTS[placement](cfg).named_parameters())


def block_identities(first: int, events: list[GrowthEvent | None]) -> list[list[int]]:
    """Each stage's blocks as identities (0, 1, … in order of creation), bottom to top: a block keeps its
    identity while growth events insert others around it."""
    ids, out, fresh = list(range(first)), [], first
    for event in events:
        if event is not None:
            ids = list(ids)
            for position in event.new_blocks:  # ascending: each lands at its index in the grown model
                ids.insert(position, fresh)
                fresh += 1
        out.append(ids)
    return out


def student_at_stage(cfg: RunConfig, stage: int) -> Student:
    """A student with the block structure of `stage` of this run (on the CPU), to load weights into."""
    plans = plan_stages(cfg)
    model = stage_student(cfg, plans[0])
    replay_growth(model, plans, stage, cfg)
    return model


# ----------------------------------------------------------------------------- compute accounting


def flops_per_token(m: ModelConfig, placements: tuple[str, ...], trainable: tuple[int, ...], seq_len: int) -> int:
    """Estimated training FLOPs per token of a student holding blocks of these placements, of which the
    `trainable` indices train (see the module docstring)."""
    assert m.vocab_size is not None  # step_cost calls this only with a resolved vocabulary
    params = {name: block_parameters(dataclasses.replace(m, block_norms=[], norm=name), 0) for name in set(placements)}
    attn = 2 * seq_len * m.n_head * resolved_head_dim(m)  # QKᵀ and AV, causal half, fwd only
    head = m.d_model * m.vocab_size
    trained = set(trainable)
    n_train = sum(1 for i in range(len(placements)) if i in trained)
    p_train = sum(params[p] for i, p in enumerate(placements) if i in trained)
    p_frozen = sum(params[p] for i, p in enumerate(placements) if i not in trained)
    return 6 * (p_train + head) + 2 * p_frozen + 3 * n_train * attn + (len(placements) - n_train) * attn


def forward_flops_per_token(m: ModelConfig, seq_len: int) -> int:
    """Estimated forward FLOPs per token of a pre-norm model of this shape (a teacher's cost in a step)."""
    block = block_parameters(dataclasses.replace(m, block_norms=[], norm="pre"), 0)
    return 2 * (
        m.n_layer * block + m.d_model * (m.vocab_size or 0)
    ) + m.n_layer * 2 * seq_len * m.n_head * resolved_head_dim(m)


def step_cost(cfg: RunConfig, plan: StagePlan) -> dict[str, float]:
    """What one optimizer step of this stage adds to each compute counter."""
    per_step = tokens_per_step(cfg)
    return {
        "tokens": per_step,
        "active_layer_tokens": per_step * plan.n_layer,
        "trainable_layer_tokens": per_step * len(plan.train_blocks),
        "flops": (
            flops_per_token(cfg.model, plan.placements, plan.train_blocks, cfg.data.seq_len) * per_step
            if cfg.model.vocab_size is not None
            else 0.0
        ),
    }


def planned_totals(cfg: RunConfig, plans: list[StagePlan] | None = None) -> dict[str, float]:
    """Compute totals a config's curriculum will consume (vocab_size must be resolved for flops)."""
    totals = {"tokens": 0, "active_layer_tokens": 0, "trainable_layer_tokens": 0, "flops": 0.0}
    for p in plans or plan_stages(cfg):
        for k, v in step_cost(cfg, p).items():
            totals[k] += v * p.steps
    return totals


def pool_epochs(cfg: RunConfig, n_pool: int, plans: list[StagePlan] | None = None) -> int:
    """Epochs the run's training starts over a pool of n_pool sequences (the whole split's count without a pool):
    ceil(steps / floor(n_pool / batch_size)), an epoch serving whole batches only. No sequence is served more
    often than this; with batch_size dividing n_pool, the first batch of the last epoch is served exactly so often."""
    steps = sum(p.steps for p in plans or plan_stages(cfg))
    return math.ceil(steps / (n_pool // cfg.train.batch_size))


def check_pool_repeats(cfg: RunConfig, n_pool: int, plans: list[StagePlan] | None = None) -> None:
    """Refuse, when the stages are planned, a run that would start more epochs over its pool than
    data.max_pool_repeats allows (0: no bound)."""
    bound = cfg.data.max_pool_repeats
    if not bound or n_pool < cfg.train.batch_size:  # no bound, or no epoch at all (the batch iterator refuses it)
        return
    epochs = pool_epochs(cfg, n_pool, plans)
    if epochs > bound:
        steps = sum(p.steps for p in plans or plan_stages(cfg))
        raise ConfigError(
            f"data.max_pool_repeats: the run would serve a sequence up to {epochs} times (ceil({steps} "
            f"steps / {n_pool // cfg.train.batch_size} batches of {cfg.train.batch_size} per epoch over "
            f"{n_pool} sequences)), more than the bound {bound}"
        )
