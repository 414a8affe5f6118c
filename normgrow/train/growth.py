"""Growth: the operators that insert blocks, the stage a growth event opens, and the event in training.

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
after the event, which this module applies on every path (plain, sharded, resumed): which blocks a stage
trains (`train_blocks`, at planning time, so compute accounting sees it), which parameters that makes
trainable (`set_trainable`) and which parameters keep their AdamW state (`keeps_state`); the defaults
are the stage's `train` field and `curriculum.optimizer`.

The growth event in training:

    grow_student(model, optimizer, before, plan, cfg, device, val) → (model, optimizer, record)
        logits on a fixed probe (GROWTH_PROBE_ROWS validation rows)             before
        grow(model, plan, cfg)                 the operator inserts the stage's new blocks (same call on resume)
        logits on the probe                    after: grow/logit_max_abs_diff, grow/logit_rms_diff, grow/logit_rms
        set_trainable(model, plan)             the operator's policy: which parameters train in the new stage
        the optimizer rebuilt                  AdamW over the trainable parameters in module order; a parameter
                                               that trained before and trains on keeps its moments and step count
                                               where the operator's policy says so, the others start fresh

The training loop makes this one explicit, logged call at a stage boundary (loop.growth_event) and completes
the record with `val_jumps` (grow/val_ce_jump, …: the stage's first evaluation minus the previous stage's
last). A sharded student (train.sharding=fsdp) is gathered into a plain copy on every rank, grown by the same
calls and sharded again; its AdamW state travels by parameter name (sharding makes new parameter objects).
A resumed run (`restore`) replays the growth events with the same `grow` and takes the stage's trainability
from the same policy, so its optimizer holds the same parameters, in the same order, as the uninterrupted run's.

The policy belongs to the growth operator (GrowthOperator): `train_blocks` (which blocks a stage
trains; decided when the stages are planned, so compute accounting counts it), `set_trainable` (which
parameters that makes trainable) and `keeps_state` (whose AdamW state survives the event). Their defaults are
the stage's `train` field and `curriculum.optimizer`; an operator that needs another policy overrides them,
and this module applies it on the plain, the sharded and the resumed path alike:

    class NewAndBelow(Append):  # after growth: the new blocks and the block just below them train
        def train_blocks(self, spec, n_layer, event):
            if event is None:  # the first stage
                return super().train_blocks(spec, n_layer, event)
            return sorted({*event.new_blocks, event.new_blocks[0] - 1})
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass

import torch

from normgrow.config import ModelConfig, RunConfig
from normgrow.config.schema import parse_train_blocks
from normgrow.errors import ConfigError
from normgrow.nn.model import PLACEMENTS, Block, Student, init_block, placement_of
from normgrow.parallel import sharding
from normgrow.registry import Registry
from normgrow.train.step import build_optimizer

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

    The policy after the event, overridable like the placement of the blocks (this module calls it on
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
        raise TypeError(f"growth operator '{name}': expected a normgrow.GrowthOperator instance")
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


# ----------------------------------------------------------------------------- stages and their students


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


def plain_student(cfg: RunConfig, plan: StagePlan, weights: dict[str, torch.Tensor], device: torch.device) -> Student:
    """An unsharded copy of a sharded student at `plan`'s depth, holding `weights` (from `full_weights`; its
    construction's RNG draws undone)."""
    with torch.random.fork_rng(devices=[]):
        model = stage_student(cfg, plan).to(device)
    model.load_state_dict(weights)
    model.activation_checkpointing = cfg.train.activation_checkpointing
    return model


# ----------------------------------------------------------------------------- trainability and optimizer


def set_trainable(model: Student, plan: StagePlan) -> None:
    """Which parameters train during stage `plan`: its operator's policy (GrowthOperator.set_trainable; by
    default blocks outside plan.train_blocks frozen, the embedding trainable exactly when block 0 is)."""
    plan.operator.set_trainable(model, plan)


def keeps_state(name: str, plan: StagePlan, cfg: RunConfig) -> bool:
    """Does the parameter `name` of the grown model (trained before the event into `plan`, trains after it)
    keep its AdamW state? The operator's policy (GrowthOperator.keeps_state; by default curriculum.optimizer)."""
    return plan.operator.keeps_state(name, plan, cfg.curriculum.optimizer)


def rebuild_optimizer(
    old: torch.optim.AdamW, model: Student, cfg: RunConfig, device: torch.device, plan: StagePlan
) -> torch.optim.AdamW:
    """The optimizer after the growth event into `plan`, the
    model grown in place and its trainability set. A parameter that trained before and trains on keeps its
    moments and step count where `keeps_state` says so (`keep`: all of them; `reset`: none); new and newly
    unfrozen parameters start fresh; frozen ones leave the optimizer, and their state with it."""
    name_of = {p: n for n, p in model.named_parameters()}
    by_name = dict(model.named_parameters())
    copied = plan.operator.copied_state(model, plan, cfg.curriculum.optimizer)
    new = build_optimizer(model, cfg, device)
    for group in new.param_groups:
        for p in group["params"]:
            if p in old.state and keeps_state(name_of[p], plan, cfg):  # state: it trained before
                new.state[p] = old.state[p]
            elif name_of[p] in copied and by_name[copied[name_of[p]]] in old.state:
                new.state[p] = {k: v.clone() for k, v in old.state[by_name[copied[name_of[p]]]].items()}
    return new


# ----------------------------------------------------------------------------- the event

GROWTH_PROBE_ROWS = 2  # validation rows on which a growth event's logit change is measured


def grow_student(
    model: Student,
    optimizer: torch.optim.AdamW,
    before: StagePlan,
    plan: StagePlan,
    cfg: RunConfig,
    device: torch.device,
    val: torch.Tensor,
) -> tuple[Student, torch.optim.AdamW, dict]:
    """Grow the student of stage `before` into stage `plan`: the grown student (the same object unless sharded),
    its optimizer and the event's record, its logit change measured on the first validation rows."""
    # the logit change is measured on a fixed slice of the validation split, the same whatever the micro-batch,
    # ranks or sharding (two rows: the full logits, before and after, of a paper-scale vocabulary take ≈ 10 GB)
    probe_x = val[:GROWTH_PROBE_ROWS, :-1].to(device)  # (2, T)
    if sharding.is_sharded(model):
        return _grow_sharded(model, optimizer, before, plan, cfg, device, probe_x)
    record = grow_and_measure(model, plan, cfg, probe_x)
    set_trainable(model, plan)
    return model, rebuild_optimizer(optimizer, model, cfg, device, plan), record


def _grow_sharded(
    model: Student,
    optimizer: torch.optim.AdamW,
    before: StagePlan,
    plan: StagePlan,
    cfg: RunConfig,
    device: torch.device,
    probe_x: torch.Tensor,
) -> tuple[Student, torch.optim.AdamW, dict]:
    """The growth event of a sharded student: every rank gathers it into a plain copy, grows that with the same
    calls as an unsharded run and shards the result. The AdamW state a parameter keeps is found by name before
    growth and followed through it by object identity; only then is it gathered (not at all if none is kept)."""
    trained = {n for n, p in model.named_parameters() if p.requires_grad}  # the old optimizer's parameters
    plain = plain_student(cfg, before, sharding.full_weights(model), device)
    name_before = {id(p): n for n, p in plain.named_parameters()}
    record = grow_and_measure(plain, plan, cfg, probe_x)
    set_trainable(plain, plan)
    carried = {
        n: name_before[id(p)]
        for n, p in plain.named_parameters()  # name now → name before growth
        if p.requires_grad and name_before.get(id(p)) in trained and keeps_state(n, plan, cfg)
    }
    now = dict(plain.named_parameters())
    for n, source in plan.operator.copied_state(plain, plan, cfg.curriculum.optimizer).items():
        if now[n].requires_grad and name_before.get(id(now[source])) in trained:
            carried[n] = name_before[id(now[source])]  # a copied block starts from its source's moments
    moments = sharding.optimizer_state_by_name(model, optimizer) if carried else {}
    grown = typing.cast(Student, sharding.shard(plain))  # sharded in place: still a Student
    new = build_optimizer(grown, cfg, device)
    # each name its own tensors: a copied block and its source must not share one state (AdamW updates it in place,
    # its step count included, so a shared state would advance twice a step)
    states = {
        n: {k: v.clone() if torch.is_tensor(v) else v for k, v in moments[old].items()}
        for n, old in carried.items()
        if old in moments
    }
    sharding.load_state_by_name(grown, new, states)
    return grown, new, record


@torch.no_grad()
def grow_and_measure(model: Student, plan: StagePlan, cfg: RunConfig, probe_x: torch.Tensor) -> dict:
    """Apply the stage's growth event; its record plus the logit change it caused on probe_x."""
    was_training = model.training
    model.eval()
    before = model(probe_x).float()  # (b, T, V)
    event = grow(model, plan, cfg)
    assert event == plan.growth, (event, plan.growth)  # the operator did what the plan says
    after = model(probe_x).float()
    model.train(was_training)
    diff = after - before
    return {
        **event.record(cfg.curriculum.growth, cfg.curriculum.growth_init),
        "grow/logit_max_abs_diff": diff.abs().max().item(),
        "grow/logit_rms_diff": diff.pow(2).mean().sqrt().item(),
        "grow/logit_rms": before.pow(2).mean().sqrt().item(),
    }


def val_jumps(start: dict[str, float], end_before: dict[str, float]) -> dict[str, float]:
    """grow/val_ce_jump, grow/val_nll_jump, …: the first evaluation of the grown student (`start`, val/… keys)
    minus the last evaluation before the event."""
    return {f"grow/val_{k[4:]}_jump": start[k] - end_before[k] for k in start}


# ----------------------------------------------------------------------------- resume


def restore(
    model: Student,
    plans: list[StagePlan],
    stage: int,
    cfg: RunConfig,
    weights: dict[str, torch.Tensor],
    optimizer_state: dict,
    device: torch.device,
    fsdp: bool,
) -> torch.optim.AdamW:
    """A checkpoint of `stage` restored into a first-stage student (in place) and its optimizer: the growth
    events up to `stage` replayed with the same `grow` as the run (the weights are then overwritten), the
    stage's trainability from the same policy, then the weights and the optimizer state (sharded first
    under FSDP; the checkpoint holds full tensors either way)."""
    replay_growth(model, plans, stage, cfg)
    model.load_state_dict(weights)
    set_trainable(model, plans[stage])
    if fsdp:
        sharding.shard(model)
        optimizer = build_optimizer(model, cfg, device)
        sharding.load_optimizer_state(model, optimizer, optimizer_state)
    else:
        optimizer = build_optimizer(model, cfg, device)
        optimizer.load_state_dict(optimizer_state)
    return optimizer
