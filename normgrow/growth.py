"""The growth event: a student grown into its next stage, plain or sharded, what then trains, the optimizer
state carried over, and the measurement of how far the event moved the student's function.

    grow_student(model, optimizer, before, plan, cfg, device, val) → (model, optimizer, record)
        logits on a fixed probe (GROWTH_PROBE_ROWS validation rows)             before
        curriculum.grow(model, plan, cfg)      the operator inserts the stage's new blocks (same call on resume)
        logits on the probe                    after: grow/logit_max_abs_diff, grow/logit_rms_diff, grow/logit_rms
        set_trainable(model, plan)             the operator's policy: which parameters train in the new stage
        the optimizer rebuilt                  AdamW over the trainable parameters in module order; a parameter
                                               that trained before and trains on keeps its moments and step count
                                               where the operator's policy says so, the others start fresh

The training loop makes this one explicit, logged call at a stage boundary (train.growth_event) and completes
the record with `val_jumps` (grow/val_ce_jump, …: the stage's first evaluation minus the previous stage's
last). A sharded student (train.sharding=fsdp) is gathered into a plain copy on every rank, grown by the same
calls and sharded again; its AdamW state travels by parameter name (sharding makes new parameter objects).
A resumed run (`restore`) replays the growth events with the same `grow` and takes the stage's trainability
from the same policy, so its optimizer holds the same parameters, in the same order, as the uninterrupted run's.

The policy belongs to the growth operator (curriculum.GrowthOperator): `train_blocks` (which blocks a stage
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

import typing

import torch

from normgrow import sharding
from normgrow.config import RunConfig
from normgrow.curriculum import StagePlan, grow, plan_stages, replay_growth
from normgrow.model import Student
from normgrow.step import build_optimizer

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
    old: torch.optim.AdamW, model: Student, cfg: RunConfig, device: torch.device, plan: StagePlan | None = None
) -> torch.optim.AdamW:
    """The optimizer after the growth event into `plan` (default: the run's stage at the model's depth), the
    model grown in place and its trainability set. A parameter that trained before and trains on keeps its
    moments and step count where `keeps_state` says so (`keep`: all of them; `reset`: none); new and newly
    unfrozen parameters start fresh; frozen ones leave the optimizer, and their state with it."""
    plan = plan or next(p for p in plan_stages(cfg) if p.n_layer == model.depth)
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
    plain = sharding.plain_student(cfg, before, sharding.full_weights(model), device)
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
