"""A study's jobs — one run of an arm at a seed (and a learning rate, for an arm that sweeps them) — and
the study directory that holds them:

    study dir/
        study.yaml                  the resolved study (rerun from it: normgrow study DIR/study.yaml -o DIR)
        configs/<job>.yaml          every job's fully merged run config
        runs/<job>/                 one run directory per job
        logs/<job>.log              the job's output (local / submitit launchers)
        results.csv  report.md  plots/*.png  (regime.json: the regime checks' outcomes, when registered)
    a sweep study: study.yaml, points/<label>/ (each a study dir as above), and the sweep's
        results.csv  report.md  plots/sweep_<contrast>.png
    a budget ladder: study.yaml, budgets/<label>/ (each a study dir as above, label b0.5, b1, …, holding the arms
        run at that budget), and the ladder's results.csv  report.md  (regime.json)

A job's name (`job_name`) is `<arm>-s<seed>`, or `<arm>-lr<lr>-s<seed>` in a learning-rate sweep; it names
its config, run directory and log, and is the one way any module refers to a job (`row_job_name` for a
results.csv row).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from normgrow import atomic
from normgrow.config import RunConfig, load_config, resume_may_differ, to_dict, to_yaml
from normgrow.config.schema import load_structured, read_yaml
from normgrow.errors import ConfigError
from normgrow.study.config import StudyConfig, canonical, study_schema, study_yaml
from normgrow.study.sweep import budget_factor, ladder_points, point_study, points, rung_study
from normgrow.train.branch import needs_flat_schedule
from normgrow.train.rundir import RunDir, config_differences


@dataclass
class Job:
    """One run of a study: an arm at a seed, its resolved config file and its run directory."""

    arm: str
    seed: int
    cfg: RunConfig
    config_path: Path
    run_dir: Path
    log_path: Path
    lr: float | None = None  # set for the jobs of an arm's learning-rate sweep
    point: str = ""  # the sweep point's (ladder budget's) label, for the jobs of a sweep study (ladder)
    start_step: int = 0  # a decay branch: the trunk's step it starts from (train.init_from)
    stop_step: int = 0  # a trunk: the step it stops at (train.stop_tokens); 0: it trains to its end
    label: str = ""  # a name of its own (a branch ladder's trunk of one of an arm's rates); "": job_name's

    @property
    def name(self) -> str:
        name = self.label or job_name(self.arm, self.seed, self.lr)
        return f"{self.point}/{name}" if self.point else name

    @property
    def finished(self) -> bool:
        """Has the run written a readable summary (a cut one is rebuilt when the run is started again) — or, a trunk,
        the checkpoint it stops at?"""
        if self.stop_step:
            return (RunDir(self.run_dir).checkpoint(self.stop_step) / "state.json").is_file()
        return RunDir(self.run_dir).summary() is not None


def job_name(arm: str, seed: int, lr: float | None = None) -> str:
    """`<arm>-s<seed>`, or `<arm>-lr<lr>-s<seed>` for a job of a learning-rate sweep."""
    return f"{arm}-s{seed}" if lr is None else f"{arm}-lr{lr:g}-s{seed}"


def row_job_name(row: dict) -> str:
    """The name of the job a results.csv row records (its learning rate is part of it where the arm sweeps
    rates: such rows say `selected` yes or no)."""
    return job_name(row["arm"], int(row["seed"]), float(row["lr"]) if row.get("selected") else None)


def scale_budget(cfg: RunConfig, scale: float) -> RunConfig:
    """Every stage budget and the LR warmup times `scale` (a warmup left at full length would take
    up most of a shortened run)."""
    if scale == 1.0:
        return cfg
    stages = [
        dataclasses.replace(
            s, tokens=int(round(s.tokens * scale)), active_layer_tokens=int(round(s.active_layer_tokens * scale))
        )
        for s in cfg.curriculum.stages
    ]
    train = dataclasses.replace(cfg.train, warmup_tokens=int(round(cfg.train.warmup_tokens * scale)))
    return dataclasses.replace(cfg, curriculum=dataclasses.replace(cfg.curriculum, stages=stages), train=train)


def continued(cfg: RunConfig, scale: float, base: float) -> RunConfig:
    """A budget ladder's `branches` / `direct` recipe at budget `scale` of a ladder whose smallest budget is `base`:
    continued training at full depth. The warmup and every stage before the last as `scale_budget(cfg, base)` has
    them, the last stage stretched so the run trains as many tokens as `scale_budget(cfg, scale)`; WSD over the run."""
    needs_flat_schedule(cfg, "ladder")
    stages = cfg.curriculum.stages
    if any(s.tokens <= 0 for s in stages):
        raise ConfigError(
            "ladder: the branches' recipe needs every stage budget in tokens (curriculum.stages[].tokens)"
        )
    small, full = scale_budget(cfg, base), scale_budget(cfg, scale)
    before = sum(s.tokens for s in small.curriculum.stages[:-1])
    last = dataclasses.replace(stages[-1], tokens=sum(s.tokens for s in full.curriculum.stages) - before)
    curriculum = dataclasses.replace(cfg.curriculum, stages=[*small.curriculum.stages[:-1], last])
    return dataclasses.replace(cfg, curriculum=curriculum, train=small.train)


def budget_recipe(cfg: RunConfig, study: StudyConfig) -> RunConfig:
    """An arm's config at the study's budget: every stage and the warmup scaled (a plain study, a ladder's rungs), or
    a ladder's continued-training recipe (`continued`)."""
    if study.ladder_base is None:
        return scale_budget(cfg, study.budget_scale)
    return continued(cfg, study.budget_scale, study.ladder_base)


def arm_order(study: StudyConfig) -> list[str]:
    """Arms with every matched arm after the arm it matches."""
    order: list[str] = []

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in order:
            return
        if name in path:
            raise ConfigError(f"arms.{name}.match: matches form a cycle ({' → '.join(path + (name,))})")
        ref = study.arms[name].match
        if ref is not None:
            visit(ref, path + (name,))
        order.append(name)

    for name in study.arms:
        visit(name, ())
    return order


def plan_jobs(study: StudyConfig, out: Path, point: str = "") -> list[Job]:
    """Resolve every arm × seed (× learning rate, for a sweep) into a run config (validated now, so a bad arm
    fails before anything runs). `point` labels the jobs of one point of a sweep study."""
    jobs = []
    for arm in arm_order(study):
        a = study.arms[arm]
        for lr in a.lrs or [None]:  # type: ignore[list-item]  # None: the arm's own rate
            first = None
            for seed in study.seeds:
                if first is None:  # resolved once per arm and rate; the seed changes no other field
                    sweep = [f"train.lr={lr}", f"data.select_tokens={study.select_tokens}"] if lr is not None else []
                    over = [*study.overrides, *a.overrides, *sweep, f"seed={seed}", f"name={arm}"]
                    try:
                        first = budget_recipe(load_config(a.preset or study.base, over), study)
                    except ConfigError as e:
                        raise ConfigError(f"arms.{arm}: {e}") from None
                cfg = dataclasses.replace(first, seed=seed)
                nproc = study.launcher.torchrun_nproc
                if cfg.train.batch_size % nproc:  # caught here: under torchrun each rank would fail, then torchrun
                    raise ConfigError(
                        f"arms.{arm}: train.batch_size: {cfg.train.batch_size} is not divisible by "
                        f"launcher.torchrun_nproc={nproc}"
                    )
                if a.match is not None:
                    # matched to the reference job's config (same seed; any of its swept rates: the budget does not
                    # depend on the rate): its planned totals are exactly what it consumes (budgets are whole
                    # steps), so the two jobs need not wait for each other
                    ref_lrs = study.arms[a.match].lrs
                    ref = out / "configs" / f"{job_name(a.match, seed, ref_lrs[0] if ref_lrs else None)}.yaml"
                    # in a ladder's continued-training recipe the stages before the last stay as they are
                    stages: Literal["all", "last"] = "all" if study.ladder_base is None else "last"
                    cfg = dataclasses.replace(
                        cfg, curriculum=dataclasses.replace(cfg.curriculum, match_budget=str(ref), match_stages=stages)
                    )
                cfg = tracked(cfg, study, arm, seed)
                name = job_name(arm, seed, lr)
                jobs.append(
                    Job(
                        arm,
                        seed,
                        cfg,
                        out / "configs" / f"{name}.yaml",
                        out / "runs" / name,
                        out / "logs" / f"{name}.log",
                        lr,
                        point,
                    )
                )
    return jobs


def tracked(cfg: RunConfig, study: StudyConfig, arm: str, seed: int) -> RunConfig:
    """The job's tracker identity: group <study>/<arm>, job type = the arm's part in the claims (else `arm`; a
    pilot's runs `pilot`), tags seed, budget, placement and curriculum (the user's own tags kept after them)."""
    role = "pilot" if study.name.endswith("-pilot") else next((k for k, v in study.claims.items() if v == arm), "arm")
    curriculum = "grow" if len(cfg.curriculum.stages) > 1 else "joint"
    tags = [f"seed-{seed}", f"budget-{study.budget_scale:g}", f"placement-{cfg.model.norm}", f"curriculum-{curriculum}"]
    t = cfg.train
    train = dataclasses.replace(
        t,
        track_group=f"{study.name}/{arm}",
        track_job_type=role,
        track_tags=tags + [x for x in t.track_tags if x not in tags],
    )
    return dataclasses.replace(cfg, train=train)


def sweep_plan(study: StudyConfig, out: Path) -> list[tuple[StudyConfig, Path, list[Job]]]:
    """A sweep study's points (or a ladder's budgets): each one's study (the point's overrides and budget),
    directory and jobs."""
    if study.budgets:
        return ladder_plan(study, out)
    plan, reference = [], None
    for p in points(study.sweep):
        try:
            cfg = load_config(study.base, [*study.overrides, *p.overrides])
        except ConfigError as e:
            raise ConfigError(f"sweep point {p.label}: {e}") from None
        reference = reference or cfg
        plan.append(
            _sub_plan(
                point_study(study, p, budget_factor(study.sweep, cfg, reference)),
                out / "points",
                p.label,
                "sweep point",
            )
        )
    return plan


def _sub_plan(sub: StudyConfig, root: Path, label: str, what: str) -> tuple[StudyConfig, Path, list[Job]]:
    """One sweep point's or budget's study, directory root/label and jobs (a bad arm names the point)."""
    try:
        return sub, root / label, plan_jobs(sub, root / label, point=label)
    except ConfigError as e:
        raise ConfigError(f"{what} {label}: {e}") from None


def ladder_plan(
    study: StudyConfig, out: Path, at: Callable[[float], StudyConfig] | None = None
) -> list[tuple[StudyConfig, Path, list[Job]]]:
    """A budget ladder's rungs: each budget's study (the ladder's at that absolute budget scale; `at(budget)`: the
    ladder's study for that budget, where its arms' rates differ by budget), directory budgets/<label>/ and jobs."""
    return [
        _sub_plan(rung_study(at(p.coords[0]) if at else study, p), out / "budgets", p.label, "budget")
        for p in ladder_points(study.budgets)
    ]


def extends_ladder(old: StudyConfig, new: StudyConfig, differ: list[str]) -> bool:
    """Does `new` only add budgets to the ladder `old`? Then its finished rungs are reused: every rung is a study
    of its own whose study.yaml is checked when it is written, and the ladder's other fields are the same."""
    return (
        differ == ["budgets"]
        and bool(old.budgets)
        and set(old.budgets) <= set(new.budgets)
        and old.ladder != "branches"
    )


STUDY_FILES = ("study.yaml", ".lock")  # what makes a directory a study's (the lock alone: one killed at its start)


def claim_study_dir(out: Path, force: bool = False) -> None:
    """Before a study writes anything: `out` is new, empty, a study directory (write_study_yaml then checks that it
    is the same study), or — with `force` — a user's folder the study may write into (files of the same names are
    replaced, the others kept). A run directory is never one: a study does not write into a run."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out}: exists and is not a directory; choose another -o")
    if not out.is_dir() or (out / "study.yaml").is_file():
        return
    try:
        held = sorted(p.name for p in out.iterdir() if p.name not in STUDY_FILES)
    except OSError as e:
        raise ConfigError(f"{out}: cannot read the study directory ({e.strerror})") from None
    if RunDir(out).has_trained():
        raise ConfigError(
            f"{out}: is a run directory (config.yaml); a study never writes into a run, choose another -o"
        )
    if held and not force:
        shown = ", ".join(held[:3]) + (f" and {len(held) - 3} more" if len(held) > 3 else "")
        raise ConfigError(
            f"{out}: not empty and not a study directory (holds {shown}); choose another -o, "
            "or pass --force to write the study into it"
        )


def write_study_yaml(study: StudyConfig, out: Path, subdirs: tuple[str, ...] = ()) -> None:
    """study.yaml (and the given subdirectories); an existing study dir must hold the same study. Both are compared,
    and the study saved, with their `claims:` sections completed (config.canonical)."""
    study, saved = canonical(study), out / "study.yaml"
    if saved.is_file():
        old = canonical(load_structured(study_schema(), [(str(saved), read_yaml(saved))]))
        differ = [
            f.name
            for f in dataclasses.fields(study)
            if getattr(old, f.name) != getattr(study, f.name) and f.name not in ("launcher", "evaluate")
        ]
        if differ and not extends_ladder(old, study, differ):
            raise ConfigError(
                f"{out}: holds a different study ({', '.join(differ)} differ); choose another -o"
                + (
                    " (a budget ladder may gain budgets, not lose them)"
                    if differ == ["budgets"] and old.budgets and old.ladder != "branches"
                    else " (a branch ladder's budgets are fixed: they fix its trunks' checkpoints)"
                    if differ == ["budgets"] and old.budgets
                    else ""
                )
            )
    try:
        out.mkdir(parents=True, exist_ok=True)
        for sub in subdirs:
            (out / sub).mkdir(exist_ok=True)
    except OSError as e:
        raise ConfigError(f"{out}: cannot write the study directory ({e.strerror})") from None
    atomic.write_text(saved, study_yaml(study))


def write_study_dir(study: StudyConfig, jobs: list[Job], out: Path) -> None:
    """study.yaml, the run/log directories and the job configs; an existing study dir must hold the same study, and
    every run already started must have been started from the config its job resolves to today."""
    check_runs_unchanged(jobs, out)  # before anything is written: a refused rerun leaves the directory as it was
    write_study_yaml(study, out, ("configs", "runs", "logs"))
    for job in jobs:
        atomic.write_text(job.config_path, to_yaml(job.cfg))


def check_runs_unchanged(jobs: list[Job], out: Path) -> None:
    """A job whose run directory holds a run (finished or not) must resolve today to the config it was launched
    with (configs/<job>.yaml, compared field by field after loading, so a field added since reads as its default):
    an edited base preset, a file it names or a changed override is refused, naming the runs and fields, instead of
    counting old runs as finished under a new definition. Fields a resume may change (where it runs) may differ, and
    so may `curriculum.match_budget`: it is the path of the arm it matches, spelled as `-o` was (relative, absolute,
    a moved folder), and which arm is matched is study.yaml's to compare (arms.X.match)."""
    may_differ, changed = resume_may_differ() | {"curriculum.match_budget"}, []
    for job in jobs:
        if not job.config_path.is_file() or not RunDir(job.run_dir).is_run():
            continue
        keys = [
            k
            for k in config_differences(to_dict(load_config(str(job.config_path))), to_dict(job.cfg))
            if k not in may_differ
        ]
        if keys:
            changed.append(f"{job.name} ({', '.join(keys[:3])}{' …' if len(keys) > 3 else ''})")
    if changed:
        shown = "; ".join(changed[:3]) + (f"; and {len(changed) - 3} more" if len(changed) > 3 else "")
        raise ConfigError(
            f"{out}: {len(changed)} run(s) were trained with another definition than today's: {shown}; "
            "choose another -o, or delete those runs' directories to train them again"
        )
