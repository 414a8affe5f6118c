"""A run's cadence: the learning rate at each step, and what is due after each step — a train log, an
evaluation (the stage end's full one, a curve point of the dense window after growth or of the interval), the
model-selection set, an interval diagnosis, a checkpoint.

    lr_at(tokens, cfg, start, total)            the schedule: warmup, then constant, cosine or WSD
    schedule_span(plans, stage, cfg)            the schedule's span: the whole run (global) or the stage (restart)
    due(cfg, plan, n_stages, stage_step, step, tokens) → Due
        a pure function of the run's plan and its position after a step; the training loop asks it after every
        step (train.end_step), and `normgrow plan` folds it over a run's steps to count its evaluations
        (evaluation_counts), so the two cannot drift apart

Every stage also opens with a full evaluation and a diagnosis (train.start_stage), whatever `due` says.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from normgrow.config import RunConfig
from normgrow.train.growth import StagePlan
from normgrow.train.stages import tokens_per_step


def lr_at(tokens: int, cfg: RunConfig, start: int, total: int) -> float:
    """Learning rate for a step beginning at `tokens`, in a schedule spanning [start, start + total)."""
    t = cfg.train
    pos = tokens - start + tokens_per_step(cfg)  # tokens seen once this step is done: the first step has lr > 0
    if t.warmup_tokens and pos <= t.warmup_tokens:
        return t.lr * pos / t.warmup_tokens
    if t.schedule == "constant":
        return t.lr
    if t.schedule == "cosine":
        progress = (pos - t.warmup_tokens) / max(1, total - t.warmup_tokens)
        frac = 0.5 * (1 + math.cos(math.pi * min(1.0, max(0.0, progress))))
    else:  # wsd: stable, then a linear decay over the last decay_fraction of the budget
        decay_start = total * (1 - t.decay_fraction)
        frac = 1.0 if pos <= decay_start else max(0.0, 1 - (pos - decay_start) / (total - decay_start))
    return t.lr * (t.min_lr_ratio + (1 - t.min_lr_ratio) * frac)


def schedule_span(plans: list[StagePlan], stage: int, cfg: RunConfig) -> tuple[int, int]:
    """(start tokens, length) of the schedule governing `stage`: the whole run, or the stage alone."""
    if cfg.curriculum.lr_schedule == "global":
        return 0, sum(p.tokens for p in plans)
    return sum(p.tokens for p in plans[:stage]), plans[stage].tokens


def crossed(tokens: int, per_step: int, every: int) -> bool:
    """Did the step that just ended (at `tokens`, `per_step` of them) cross a multiple of `every` tokens?"""
    return tokens // every != (tokens - per_step) // every


def in_dense_window(cfg: RunConfig, plan: StagePlan, stage_step: int) -> bool:
    """Is the step that just ended (the stage's `stage_step`-th) a dense evaluation of the window after a growth
    event: a stage after the first, stage step ≤ train.dense_eval_steps and a multiple of train.dense_eval_every?"""
    t = cfg.train
    return plan.index > 0 and stage_step <= t.dense_eval_steps and stage_step % t.dense_eval_every == 0


STAGE_END, DENSE, INTERVAL = "stage_end", "dense", "eval"  # the evaluation events a step can end with


@dataclass(frozen=True)
class Due:
    """What is due after one step."""

    log: bool  # a `train` record (every train.log_every_steps, and at the stage's last step)
    evaluation: str | None  # STAGE_END: full evaluation and diagnosis; DENSE: curve point and diagnosis;
    # INTERVAL: curve point (every train.eval_every_tokens); None: no evaluation
    select: bool  # the model-selection set (the last stage's end, when data.select_tokens is set)
    diagnosis: bool  # an `interval` diagnosis (every diagnostics.every_tokens, unless the evaluation diagnoses)
    checkpoint: bool  # at the stage end, every train.checkpoint_every_tokens, at train.checkpoint_tokens and the stop


def due(cfg: RunConfig, plan: StagePlan, n_stages: int, stage_step: int, step: int, tokens: int) -> Due:
    """What is due after the step that brought stage `plan` (of `n_stages`) to `stage_step` steps, the run to
    `step` steps and `tokens` training tokens."""
    t, per_step = cfg.train, tokens_per_step(cfg)
    last = stage_step == plan.steps
    dense = in_dense_window(cfg, plan, stage_step) and not last
    if last:
        evaluation: str | None = STAGE_END
    elif dense:
        evaluation = DENSE
    else:
        evaluation = INTERVAL if crossed(tokens, per_step, t.eval_every_tokens) else None
    every = cfg.diagnostics.every_tokens
    return Due(
        log=step % t.log_every_steps == 0 or last,
        evaluation=evaluation,
        select=last and bool(cfg.data.select_tokens) and plan.index == n_stages - 1,
        diagnosis=bool(every) and not (last or dense) and crossed(tokens, per_step, every),
        checkpoint=last
        or crossed(tokens, per_step, t.checkpoint_every_tokens)
        or tokens == t.stop_tokens
        or tokens in t.checkpoint_tokens,
    )


def evaluation_counts(cfg: RunConfig, plans: list[StagePlan], start: int = 0, stop: int = 0) -> list[dict[str, int]]:
    """Per stage, what a run of these plans evaluates, folded from `due` over its steps: full evaluations of the
    validation set (the stage's start and end), curve points (`eval` and `dense` events), diagnoses (none with
    diagnostics off), whether the selection set is scored, and the steps trained. Only steps start + 1 … stop count
    (stop 0: the run's end), and a stage's opening only where its first step does: a decay branch's part of its run
    (train.init_from at step `start`), a trunk's (train.stop_tokens at step `stop`)."""
    per_step = tokens_per_step(cfg)
    out, step, tokens = [], 0, 0
    stop = stop or sum(p.steps for p in plans)
    for plan in plans:
        opens = start < step + 1 <= stop  # the stage's start: evaluate, diagnose
        n = {"full": int(opens), "curve": 0, "diagnoses": int(opens), "select": 0, "steps": 0}
        for s in range(1, plan.steps + 1):
            step, tokens = step + 1, tokens + per_step
            if not start < step <= stop:
                continue
            n["steps"] += 1
            d = due(cfg, plan, len(plans), s, step, tokens)
            n["full"] += d.evaluation == STAGE_END
            n["curve"] += d.evaluation in (DENSE, INTERVAL)
            n["diagnoses"] += d.evaluation in (STAGE_END, DENSE) or d.diagnosis
            n["select"] += d.select
        if not cfg.diagnostics.enabled:
            n["diagnoses"] = 0
        out.append(n)
    return out
