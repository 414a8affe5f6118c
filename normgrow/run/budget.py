"""Budget matching: a run's stage budgets scaled so that its compute equals another run's or config's
(`curriculum.match_budget`, in the unit `curriculum.match_by`), read before the run's config is resolved."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from normgrow.config import RunConfig, load_config
from normgrow.errors import ConfigError
from normgrow.train.rundir import RunDir
from normgrow.train.stages import plan_stages, planned_totals, step_cost, tokens_per_step


def reference_totals(ref: str, vocab_size: int | None) -> tuple[dict, str]:
    """Totals of a finished run (its summary), an unfinished run (its config) or a config/preset."""
    path = Path(ref)
    if path.is_dir():
        run = RunDir(path)
        if run.has_summary_file():
            summary = run.summary()
            if summary is None or not isinstance(summary.get("compute"), Mapping):
                raise ConfigError(f"curriculum.match_budget: {run.summary_file}: unreadable, or it records no compute")
            return dict(summary["compute"]), f"run {ref} (measured)"
        if not run.is_run():
            raise ConfigError(f"curriculum.match_budget: {ref}: a directory without config.yaml is not a run")
        ref_cfg = run.config()
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
