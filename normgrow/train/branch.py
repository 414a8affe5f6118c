"""Decay branches: a run that starts from another run's checkpoint instead of from step 0.

A warmup–stable–decay schedule (`train.schedule: wsd`) holds the peak rate from the end of warmup until the decay
starts, at (1 − decay_fraction) of the run's tokens. Two runs of the same recipe that differ only in their budget
— and, for a grown student, only in the length of their last stage — therefore take the very same steps until the
smaller one's decay starts (`decay_start_step`). A budget ladder (study/branches.py) trains that shared prefix once,
as a *trunk* that stops there (`train.stop_tokens`, checkpointing every decay start it passes:
`train.checkpoint_tokens`), and each budget as a *branch*: a run whose `train.init_from` names the trunk's checkpoint
at its own decay start. The branch's run directory is seeded from it (`seed_branch`): the checkpoint copied in (its
stage records rewritten to the branch's plan), the trunk's metrics.jsonl and diagnostics.jsonl up to it; the run
then resumes as a killed run resumes. Since resuming is exact (tests/train/test_train.py), the branch equals, bit for bit,
the run trained directly at its budget (tests/train/test_branch.py) — which is what `check_branch` guards: same config but
the budget, a schedule that is flat to the checkpoint in both, the same stages before the last.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from normgrow import atomic
from normgrow.config import RunConfig, resume_may_differ, to_dict
from normgrow.errors import ConfigError
from normgrow.train import checkpoint
from normgrow.train.growth import StagePlan
from normgrow.train.rundir import RunDir, config_differences
from normgrow.train.stages import plan_stages, tokens_per_step

# fields a trunk and its branch may differ in: the budget (checked stage by stage below), the trunk's stop and
# checkpoints, the branch's own pointer, the name, the matched reference's path (the budget it yields is compared)
BUDGET_FIELDS = frozenset(
    {"name", "curriculum.stages", "curriculum.match_budget", "train.stop_tokens", "train.checkpoint_tokens"}
)


def decay_start_step(cfg: RunConfig, plans: list[StagePlan] | None = None) -> int:
    """The last step of a WSD run still at the peak rate: every step up to it ends at or before the decay's start,
    (1 − decay_fraction) × the run's tokens (cadence.lr_at), so runs of one recipe agree up to it, whatever their
    budget."""
    plans = plans if plans is not None else plan_stages(cfg)
    per_step, total = tokens_per_step(cfg), sum(p.tokens for p in plans)
    start = total * (1 - cfg.train.decay_fraction)  # the same float lr_at compares with
    k = math.floor(start / per_step)
    while (k + 1) * per_step <= start:
        k += 1
    while k > 0 and k * per_step > start:
        k -= 1
    return k


def needs_flat_schedule(cfg: RunConfig, what: str) -> None:
    """A recipe whose budgets can share a prefix: WSD over the whole run (a cosine or per-stage schedule differs at
    every step between budgets), every stage budget in tokens."""
    if cfg.train.schedule != "wsd":
        raise ConfigError(f"{what}: needs train.schedule=wsd (got {cfg.train.schedule}): only WSD shares a prefix")
    if cfg.curriculum.lr_schedule != "global":
        raise ConfigError(f"{what}: needs curriculum.lr_schedule=global (got restart): a restart decays every stage")


def check_branch(trunk: RunConfig, cfg: RunConfig, state: dict, where: str) -> None:
    """Raise (one line naming `where`, the train.init_from checkpoint) unless a run of `cfg` started from `trunk`'s
    checkpoint with this `state` takes, up to it, the very steps `cfg` trained from step 0 would take."""
    needs_flat_schedule(cfg, "train.init_from")
    differ = [
        k
        for k in config_differences(to_dict(trunk), to_dict(cfg))
        if k not in BUDGET_FIELDS | resume_may_differ() and k != "train.init_from"
    ]
    if differ:
        shown = ", ".join(differ[:3]) + (" …" if len(differ) > 3 else "")
        raise ConfigError(f"train.init_from: {where}: its run has another recipe than this one ({shown} differ)")
    mine, theirs = plan_stages(cfg), plan_stages(trunk)
    if len(mine) != len(theirs) or [p.tokens for p in mine[:-1]] != [p.tokens for p in theirs[:-1]]:
        raise ConfigError(
            f"train.init_from: {where}: its stages {[p.tokens for p in theirs]} and this run's "
            f"{[p.tokens for p in mine]} differ before the last (a branch may only lengthen or shorten the last stage)"
        )
    step = int(state["step"])
    own, trunk_flat = decay_start_step(cfg, mine), decay_start_step(trunk, theirs)
    if step > min(own, trunk_flat) or step <= 0:
        raise ConfigError(
            f"train.init_from: {where}: step {step} is past this run's last step at the peak rate ({own}"
            + (f", the trunk's {trunk_flat}" if trunk_flat < own else "")
            + "): the two runs differ before it"
        )


def seed_branch(init_from: str, out: Path, cfg: RunConfig, plans: list[StagePlan], say: Callable[[str], None]) -> Path:
    """Copy the checkpoint `init_from` (…/checkpoints/step_N of the trunk's run directory) into `out`'s checkpoints,
    with its stage records rewritten to this run's plan, and the trunk's events up to it; return the copy, which the
    run then resumes from. The events are copied first and the checkpoint renamed into place last, so a branch killed
    while being seeded is seeded again."""
    src = Path(init_from)
    trunk, run = RunDir(src.parent.parent), RunDir(out)
    if not (src / "state.json").is_file() or not trunk.is_run():
        raise ConfigError(f"train.init_from: {src}: not a checkpoint of a run directory (no state.json, or no run)")
    why = checkpoint.damage(src)
    if why is not None:
        raise ConfigError(f"train.init_from: {src}: {why}")
    state = json.loads((src / "state.json").read_text())
    check_branch(trunk.config(), cfg, state, str(src))
    for rec, plan in zip(state["stages"], plans, strict=False):  # the stages as this run plans them
        rec["steps"], rec["tokens"] = plan.steps, plan.tokens
    logs = (
        (trunk.metrics_file, run.metrics_file, "metrics_lines"),
        (trunk.diagnostics_file, run.diagnostics_file, "diagnostics_lines"),
    )
    for have, copy, key in logs:
        lines, n = have.read_text().splitlines() if have.is_file() else [], state[key]
        if len(lines) < n:
            raise ConfigError(f"train.init_from: {have}: holds {len(lines)} events, the checkpoint {n}")
        atomic.write_text(copy, "".join(line + "\n" for line in lines[:n]))
    root = run.checkpoints
    root.mkdir(exist_ok=True)
    tmp = root / f".tmp-{src.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp)
    (tmp / "state.json").write_text(json.dumps(state, indent=1))
    os.rename(tmp, root / src.name)
    say(f"{out}: branched from {src} (step {state['step']}, {state['tokens']:,} tokens)")
    return root / src.name
