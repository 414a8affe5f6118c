"""Curricula: stages, their budgets in optimizer steps, compute accounting, and the growth operators.

A curriculum is a list of stages (`curriculum.stages`), each a span of training at fixed depth.
Joint training is one stage at full depth; a growth curriculum inserts blocks between stages
(3 → 6 → 9 in the `grow` preset). Where the new blocks go is the **growth operator**
(`curriculum.growth`, a registry user code can add to):
    append      (the paper's) new blocks above the trained prefix, below the final norm / LM head, so
                the first new block receives the prefix's output (the *boundary* representation);
    stack       (G_stack-style) new blocks above the prefix as copies of the prefix's blocks in order,
                bottom first (3 → 6: blocks 3, 4, 5 copy 0, 1, 2; 6 → 9: 6, 7, 8 copy 0, 1, 2), so a
                grown model repeats its prefix; `copy` init only (random or zero would be `append`);
    interleave  each new block inserted right after the block it copies, the k new blocks spread
                evenly over the p old ones (new block i follows old block ⌈(i+1)·p/k⌉ − 1: 3 → 6
                gives 0 0' 1 1' 2 2'); every insertion point is a boundary;
    middle      (MIDAS-style) the prefix's middle group of k blocks copied and inserted right after itself
                (6 → 9: 0 1 2 3 1' 2' 3' 4 5); the boundary is the group's output.
Blocks are placed by their position in the *full-depth* student (model.placement_of): under an
operator that inserts below the top, a block's index changes as the model grows, so `plan_stages`
follows every block through the growth events to its final index. One `GrowthOperator` object answers every
question about a growth event — which blocks are new (the freeze rule `train: new`), which
residual indices are boundaries (diagnostics, report), which block a `copy` init copies — and
performs it (`apply`), for a fresh run and for the replay on resume alike. It also carries the policy
after the event, which growth.py applies on every path (plain, sharded, resumed): which blocks a stage
trains (`train_blocks`, at planning time, so compute accounting sees it), which parameters that makes
trainable (`set_trainable`) and which parameters keep their AdamW state (`keeps_state`); the defaults
are the stage's `train` field and `curriculum.optimizer`.

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
import json
import math
import typing
from dataclasses import dataclass
from pathlib import Path

import torch

from normgrow.config import ModelConfig, RunConfig, load_config, resolved_head_dim
from normgrow.errors import ConfigError
from normgrow.model import PLACEMENTS, Block, Student, block_parameters, init_block, placement_of
from normgrow.registry import Registry
from normgrow.schema import parse_train_blocks

# ----------------------------------------------------------------------------- growth operators


@dataclass(frozen=True)
class GrowthEvent:
    """What one growth event does to the block list."""

    prefix: int  # depth before
    depth: int  # depth after
    new_blocks: tuple[int, ...]  # indices, in the grown model, of the inserted blocks
    boundaries: tuple[int, ...]  # residual indices where an inserted block receives trained blocks' output

    def record(self, operator: str, init: str) -> dict:
        """The event's entry in metrics.jsonl and summary.json (`grow/…` keys)."""
        return {
            "grow/from": self.prefix,
            "grow/to": self.depth,
            "grow/init": init,
            "grow/operator": operator,
            "grow/new_blocks": list(self.new_blocks),
            "grow/boundaries": list(self.boundaries),
        }


class GrowthOperator:
    """Where a growth event inserts blocks and how they are initialized.

    A subclass defines `new_blocks` (and `copy_source` if `copy` init means something else than
    copying the block just below); `apply` inserts the blocks in place. New blocks are built by the
    placement of their position (model.make_block) and initialized per `curriculum.growth_init`:
      random  like blocks at the start (model.init_block);
      zero    random, then the residual branches' output projections zeroed (Block.zero_branch_outputs):
              the branches output 0, so a pre-norm (or sandwich) block is the identity and growth
              preserves the function exactly; a post-norm block still applies its norms (N(N(h)+0)…);
              with a final RMSNorm the logits still do not move (up to eps); the jump is measured;
      copy    a copy of the weights of block `copy_source` of the model before growth.
    The random numbers of a new block come from a generator seeded by (seed, position), drawn inside
    a forked RNG, so growth neither depends on nor disturbs the global RNG, and a resumed run
    replays it identically. `inits` lists the inits that mean something for the operator (config
    validation refuses the others).

    The policy after the event, overridable like the placement of the blocks (growth.py calls it on
    the plain, the sharded and the resumed path alike):
      train_blocks  which blocks a stage trains (default: the stage's `train` field: all, new, indices);
      set_trainable which parameters that makes trainable (default: blocks outside the list frozen, the
                    embedding trains exactly when block 0 does, the final norm and head always);
      keeps_state   whether a parameter that trains on keeps its AdamW moments and step count across
                    the event (default: curriculum.optimizer — keep and copy: yes, reset: no; newly unfrozen
                    parameters always start fresh);
      copied_state  which new parameters start from another's AdamW state (curriculum.optimizer=copy: a
                    copied block's from its source block's; otherwise new parameters start fresh).
    """

    inits: tuple[str, ...] = ("random", "zero", "copy")

    def new_blocks(self, prefix: int, depth: int) -> list[int]:
        raise NotImplementedError

    def copy_source(self, prefix: int, depth: int, position: int) -> int:
        """Index in the pre-growth model of the block a `copy`-initialized block at `position` copies."""
        new = set(self.new_blocks(prefix, depth))
        return max(0, sum(1 for p in range(position) if p not in new) - 1)  # the nearest old block below it

    def boundaries(self, prefix: int, depth: int) -> list[int]:
        """Residual index entering each run of consecutive new blocks that has trained blocks below it."""
        new = set(self.new_blocks(prefix, depth))
        return [p for p in sorted(new) if p > 0 and p - 1 not in new]

    def event(self, prefix: int, depth: int) -> GrowthEvent:
        if depth <= prefix:
            raise ValueError(f"cannot grow from {prefix} to {depth} blocks")
        new = tuple(sorted(self.new_blocks(prefix, depth)))
        if len(new) != depth - prefix or len(set(new)) != len(new) or not all(0 <= p < depth for p in new):
            raise ValueError(
                f"{type(self).__name__}: new blocks {list(new)} are not {depth - prefix} distinct "
                f"positions in 0..{depth - 1}"
            )
        return GrowthEvent(prefix, depth, new, tuple(self.boundaries(prefix, depth)))

    # --- the policy after the event

    def train_blocks(self, spec: str, n_layer: int, event: GrowthEvent | None) -> list[int]:
        """Block indices a stage of `n_layer` blocks trains, from its `train` spec; `event` is the growth event
        opening the stage (None for the first stage, whose blocks are all new)."""
        return parse_train_blocks(spec, n_layer, event.new_blocks if event is not None else range(n_layer))

    def set_trainable(self, model: Student, plan: StagePlan) -> None:
        """Blocks outside the stage's train list are frozen (no gradients, so no optimizer state and no weight
        decay). The token embedding trains exactly when block 0 does (it feeds the prefix: a frozen prefix on
        moving embeddings would be retrained in effect); the final norm and LM head always train. A tied head is
        the embedding, so a stage that freezes block 0 of a tied student is refused when the stages are planned."""
        for i, block in enumerate(model.layers):
            block.requires_grad_(i in plan.train_blocks)
        model.embed_tokens.requires_grad_(0 in plan.train_blocks)

    def keeps_state(self, name: str, plan: StagePlan, optimizer: str) -> bool:
        """Does the parameter `name` (its name in the grown model), which trained before the event into `plan`
        (so has AdamW state) and trains on after it, keep that state? `optimizer` is curriculum.optimizer."""
        return optimizer in ("keep", "copy")

    def copied_state(self, model: Student, plan: StagePlan, optimizer: str) -> dict[str, str]:
        """{name of a new block's parameter: name of the parameter whose AdamW state (moments and step count) it
        starts from}, both names in the grown `model` (the event into `plan` applied): with curriculum.optimizer=copy,
        every parameter of a `copy`-initialized block takes its source block's; otherwise none (new parameters
        start fresh)."""
        ev = plan.growth
        if optimizer != "copy" or ev is None:
            return {}
        old_positions = [i for i in range(ev.depth) if i not in set(ev.new_blocks)]  # old block j sits here now
        out = {}
        for position in ev.new_blocks:
            source = old_positions[self.copy_source(ev.prefix, ev.depth, position)]
            for name, _ in model.layers[position].named_parameters():
                out[f"layers.{position}.{name}"] = f"layers.{source}.{name}"
        return out

    # --- the event

    def apply(
        self,
        model: Student,
        depth: int,
        init: str,
        seed: int,
        placements: tuple[str, ...] | None = None,
        indices: tuple[int, ...] | None = None,
    ) -> GrowthEvent:
        """Insert the new blocks into `model.layers` (in place) and return the event. `placements` are those
        of the grown model's blocks and `indices` their indices in the full-depth student (a StagePlan's; default:
        model.placement_of each position, and the position)."""
        ev = self.event(model.depth, depth)
        old = list(model.layers)
        ref = next(model.parameters())
        for position in ev.new_blocks:  # ascending, so each insertion lands at its final index
            source = self.copy_source(ev.prefix, depth, position)
            placement = placements[position] if placements else placement_of(model.cfg, position)
            block = new_block(model.cfg, position, init, seed, typing.cast(Block, old[source]), placement, source)
            block.place(indices[position] if indices else position)  # its own index, also when it is a copy
            model.layers.insert(position, block.to(device=ref.device, dtype=ref.dtype))
        return ev


class Append(GrowthOperator):
    """append: new blocks on top of the trained prefix, below the final norm and LM head (the paper's).
    The boundary is the prefix's output; `copy` copies the last prefix block."""

    def new_blocks(self, prefix: int, depth: int) -> list[int]:
        return list(range(prefix, depth))


class Stack(Append):
    """stack (G_stack-style): new blocks on top of the prefix, each a copy of a prefix block, bottom
    first and cycling (position prefix + j copies block j mod prefix), so the grown model repeats the
    trained prefix. Boundary: the prefix's output, as for append. `copy` init only."""

    inits = ("copy",)

    def copy_source(self, prefix: int, depth: int, position: int) -> int:
        return (position - prefix) % prefix


class Interleave(GrowthOperator):
    """interleave: each new block inserted directly after the old block it copies (or, with random /
    zero init, is placed after). The k = depth − prefix new blocks follow the old blocks
    ⌈(i+1)·prefix/k⌉ − 1 for i = 0 … k−1, i.e. spread evenly (3 → 6: after 0, 1, 2; 6 → 9: after 1, 3, 5;
    more new than old blocks: several after one). Every insertion point is a boundary."""

    def followed(self, prefix: int, depth: int) -> list[int]:
        """For each new block, bottom first, the old block it follows."""
        k = depth - prefix
        return [math.ceil((i + 1) * prefix / k) - 1 for i in range(k)]

    def new_blocks(self, prefix: int, depth: int) -> list[int]:
        after = self.followed(prefix, depth)
        positions, inserted = [], 0
        for old in range(prefix):
            for _ in range(after.count(old)):
                inserted += 1
                positions.append(old + inserted)
        return positions


class Middle(GrowthOperator):
    """middle (MIDAS-style middle duplication): the k = depth − prefix new blocks are copies of the prefix's middle
    group of k consecutive blocks, starting at s = ⌊(p − k)/2⌋, inserted right after that group (position s + k + j
    copies block s + j). 3 → 6 copies blocks 0–2 (as `stack`); 6 → 9 copies 1–3: 0 1 2 3 1′ 2′ 3′ 4 5. The group
    sizes are the stages' depth steps (3 → 6 → 9: groups of 3; 3 → 5 → 7 → 9: groups of 2); a step larger than its
    prefix has no group to copy and is refused when the stages are planned. The boundary is the group's output
    (position s + k). `copy` init only."""

    inits = ("copy",)

    def group_start(self, prefix: int, depth: int) -> int:
        k = depth - prefix
        if k > prefix:
            raise ConfigError(
                f"curriculum.growth: middle: growing {prefix} → {depth} duplicates a middle group of {k} blocks, "
                f"but the prefix has only {prefix}; use steps of at most the prefix's depth"
            )
        return (prefix - k) // 2

    def new_blocks(self, prefix: int, depth: int) -> list[int]:
        s, k = self.group_start(prefix, depth), depth - prefix
        return list(range(s + k, s + 2 * k))

    def copy_source(self, prefix: int, depth: int, position: int) -> int:
        return position - (depth - prefix)


def new_block(
    cfg: ModelConfig, position: int, init: str, seed: int, source: Block, placement: str, source_index: int = 0
) -> Block:
    """A block of `placement` for `position`, initialized per `init` (see GrowthOperator)."""
    with torch.random.fork_rng(devices=[]):
        block = PLACEMENTS[placement](cfg)  # its construction draws are overwritten below
        if init == "copy":
            theirs, mine = source.state_dict(), block.state_dict()
            if theirs.keys() != mine.keys():
                raise ConfigError(
                    f"curriculum.growth_init: copy: the new {placement} block at {position} cannot copy "
                    f"block {source_index} ({type(source).__name__}): their parameters differ"
                )
            block.load_state_dict(theirs)
        else:
            g = torch.Generator().manual_seed(seed * 7919 + position)
            torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=g)))
            init_block(block, cfg)
            if init == "zero":
                block.zero_branch_outputs()
    return block


GROWTH: Registry[GrowthOperator] = Registry("growth operator", field="curriculum.growth")


def register_growth(name: str, operator: GrowthOperator, replace: bool = False) -> GrowthOperator:
    """Make `curriculum.growth=<name>` use `operator` (an instance of a GrowthOperator subclass)."""
    if not isinstance(operator, GrowthOperator):
        raise TypeError(f"growth operator '{name}': expected a normgrow.curriculum.GrowthOperator instance")
    return GROWTH.register(name, operator, replace=replace)


register_growth("append", Append())
register_growth("stack", Stack())
register_growth("interleave", Interleave())
register_growth("middle", Middle())


def grow(model: Student, plan: StagePlan, cfg: RunConfig) -> GrowthEvent:
    """The run's growth event into stage `plan`: its operator, init, seed and the stage's placements."""
    return GROWTH[cfg.curriculum.growth].apply(
        model, plan.n_layer, cfg.curriculum.growth_init, cfg.seed, plan.placements, plan.indices
    )


# ----------------------------------------------------------------------------- stages


@dataclass(frozen=True)
class StagePlan:
    index: int
    n_layer: int  # depth during the stage
    steps: int
    tokens: int  # steps × tokens per step
    train_blocks: tuple[int, ...]
    placements: tuple[str, ...]  # placement of each block held during the stage, bottom to top
    indices: tuple[int, ...]  # each block's index in the full-depth student (what it is placed by)
    growth: GrowthEvent | None  # the event that opens the stage (None for the first)
    provenance: tuple[str, ...]  # where each block came from: "initial" or "appended at stage k (<init> init)"
    # the run's growth operator (curriculum.growth), whose policy the stage follows (GrowthOperator.set_trainable, …)
    operator: GrowthOperator = dataclasses.field(repr=False, compare=False)


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


def replay_growth(model: Student, plans: list[StagePlan], stage: int, cfg: RunConfig) -> None:
    """Apply the growth events of stages 1 … `stage` to a first-stage student: its structure at that stage
    (resuming a run, loading a checkpoint). The same `grow` a running curriculum calls."""
    for plan in plans[1 : stage + 1]:
        grow(model, plan, cfg)


def stage_student(cfg: RunConfig, plan: StagePlan) -> Student:
    """A freshly initialized student holding the blocks of `plan` (its depth, placements and full-depth indices), on
    the CPU, drawing from the global RNG."""
    return Student(
        cfg.model,
        depth=plan.n_layer,
        max_seq_len=cfg.data.seq_len,
        placements=list(plan.placements),
        indices=list(plan.indices),
    )


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


# ----------------------------------------------------------------------------- budget matching


def reference_totals(ref: str, vocab_size: int | None) -> tuple[dict, str]:
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


def match_budget(cfg: RunConfig, reference: dict | None = None) -> tuple[RunConfig, dict | None]:
    """Scale the stage budgets so the run's total of `match_by` equals the reference's — up or down.

    Stage proportions are kept (with match_stages=last, the stages before the last are kept as given and the last
    alone takes the difference); budgets become explicit token counts in whole steps (written into the
    resolved config). Every stage but the last is rounded to whole steps, and the last takes what is
    left of the target, so the run lands within half a step (of the last stage) of the target in any
    direction. Returns the new config and a record for the summary: the target, the planned total,
    the arm's own total before matching and the scale between them (> 1: matched upward). `reference`: the
    reference's planned totals, when they are known without reading its file.
    """
    c = cfg.curriculum
    if c.match_budget is None:
        return cfg, None
    by = c.match_by
    if reference is None:
        target_totals, source = reference_totals(c.match_budget, cfg.model.vocab_size)
    else:  # the reference's planned totals, given (a study planning its jobs before their configs are written)
        target_totals, source = reference, f"config {c.match_budget} (planned)"
    target = target_totals[by]
    per_step = tokens_per_step(cfg)
    plans = plan_stages(cfg)
    # tokens of each stage and the cost of one of its tokens in the matched unit
    per_stage = [
        (s.tokens if s.tokens > 0 else s.active_layer_tokens / s.n_layer, step_cost(cfg, p)[by] / per_step)
        for s, p in zip(c.stages, plans, strict=True)
    ]
    current = sum(t * u for t, u in per_stage)
    scale = target / current
    kept = 1.0 if c.match_stages == "last" else scale  # `last`: the stages before the last as given
    steps = [max(1, round(t * kept / per_step)) for t, _ in per_stage[:-1]]
    spent = sum(n * per_step * u for n, (_, u) in zip(steps, per_stage, strict=False))
    if c.match_stages == "last" and target - spent < per_stage[-1][1] * per_step:
        raise ConfigError(
            f"curriculum.match_budget: the target ({target:,.0f} {by}) leaves no step for the last stage after the "
            f"stages before it ({spent:,.0f}); curriculum.match_stages=last keeps those as given"
        )
    steps.append(max(1, round((target - spent) / (per_stage[-1][1] * per_step))))
    stages = [
        dataclasses.replace(s, tokens=n * per_step, active_layer_tokens=0) for s, n in zip(c.stages, steps, strict=True)
    ]
    new = dataclasses.replace(cfg, curriculum=dataclasses.replace(c, stages=stages))
    got = planned_totals(new)[by]
    return new, {
        "reference": c.match_budget,
        "source": source,
        "by": by,
        "target": target,
        "planned": got,
        "unmatched": planned_totals(cfg, plans)[by],
        "scale": scale,
    }
