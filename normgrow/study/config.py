"""A study file: its arms, seeds, contrasts, claims' roles and launcher, loaded and validated.

A study file (configs/studies/*.yaml, or any YAML path) names a base run preset, the arms (each a run
preset plus overrides, optionally budget-matched to another arm or sweeping learning rates), the seeds,
the contrasts, which arm plays which part in the paper's claims, and how the jobs run:

    name: default
    base: default                      # run preset every arm starts from
    seeds: [0, 1, 2]
    arms:
      pre-joint:  {preset: joint, overrides: [model.norm=pre]}
      post-grow:  {preset: grow, overrides: [model.norm=post]}
      post-grow-matched: {preset: grow, overrides: [model.norm=post], match: post-joint}
    contrasts: {grow_gap: [pre-grow, post-grow]}
    claims: {pre_grow: pre-grow, post_grow: post-grow}
    launcher: {kind: local, parallel: 2}
    lr_pilot: {lrs: [2.0e-3, 4.0e-3, 8.0e-3]}   # optional: a short pilot chooses each arm's rate first (pilot.py)
    regime: {max_collapse: 0.5, min_kl: 0.05, scale_factor: 2}  # optional: pre-registered regime checks (regime.py)

Command-line overrides under a run-config section (model., train., …) become run overrides of every arm;
the others set study fields. Every problem is a one-line ConfigError naming the field.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.resources
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from omegaconf import OmegaConf

from normgrow import registry
from normgrow.config.schema import check_numbers, describe_fields, load_structured, need, read_yaml
from normgrow.errors import ConfigError
from normgrow.study.engine.verdicts import normalize_claims, section_fields
from normgrow.study.sections import (
    SECTIONS,
    STUDY_UPPER,
    StudySection,
    SweepConfig,
    check_sizes,
    field_order,
    register_section,
    section,
    validate_arm_budgets,
    validate_ladder,
    validate_sweep,
)

RUN_SECTIONS = ("model.", "data.", "teacher.", "distill.", "curriculum.", "train.", "diagnostics.")


@dataclass
class LauncherConfig:
    kind: str = "local"
    """inline: one after another in this process; local: parallel subprocesses; submitit: SLURM (or its local executor); or a registered launcher."""
    parallel: int = 1
    """Jobs at once for the local launcher and for submitit's local executor (SLURM's queue decides there)."""
    threads: int | None = None
    """CPU threads per job; null = the machine's cores / parallel (oversubscribed CPU threads stall torch)."""
    cluster: str | None = None
    """submitit cluster: null = auto (SLURM if present), 'slurm', 'local' or 'debug'."""
    parameters: dict[str, Any] = field(default_factory=dict)
    """submitit executor parameters, e.g. {timeout_min: 120, slurm_partition: gpu, gpus_per_node: 1}."""
    torchrun_nproc: int = 1
    """Processes per job: >1 launches each run with torchrun (data parallel)."""
    preload: bool = True
    """local launcher: start each job by forking a server that imported normgrow's training modules once
    (multiprocessing's forkserver; every run is still its own process), not a fresh interpreter (its imports cost
    ≈ 7–10 s per run on a CPU). false = a fresh interpreter per job. Jobs through torchrun always start fresh."""


@dataclass
class ArmConfig:
    preset: str | None = None
    """Run preset of this arm (configs/*.yaml name or path); null = the study's base."""
    overrides: list[str] = field(default_factory=list)
    """Dotted run-config overrides of this arm (after the study's own)."""
    match: str | None = None
    """Another arm whose budget this arm matches, seed by seed, up or down (the measure is curriculum.match_by)."""
    lrs: list[float] = field(default_factory=list)
    """Learning rates to sweep: one run per rate and seed; the report keeps the rate with the lowest mean
    CE on the model-selection set (study.select_tokens), never on the validation set it reports."""
    budgets: list[float] = field(default_factory=list)
    """In a budget ladder, the budgets (some of the study's `budgets`) this arm runs at; empty = every budget. At a
    budget without it, the contrasts, claims and retention ratios that need it are not computed."""
    lr_from: str | None = None
    """With a learning-rate pilot: an arm not piloted (see lr_pilot.arms) trains at this arm's chosen rate (a piloted
    arm, or one that itself takes a piloted arm's rate), e.g. a control at the rate of its placement's core arm."""


@dataclass
class LrPilotConfig:
    lrs: list[float] = field(default_factory=list)
    """Learning rates the pilot tries for every arm (empty = no pilot: every arm trains at its own train.lr, or with
    envelope_seeds anchors its envelope there). The
    pilot is the sub-study pilot/ (pilot.py); each arm then trains at the rate with the lowest mean CE on the
    model-selection set (study.select_tokens), a matched arm at its unmatched twin's."""
    budget_scale: float = 0.5
    """The pilot's budget as a fraction of the study's own: its runs train budget_scale × this (in (0, 1])."""
    seeds: list[int] = field(default_factory=lambda: [0])
    """Seeds of the pilot's runs; a rate is scored by its mean selection-set CE over them."""
    arms: list[str] = field(default_factory=list)
    """The arms the pilot runs (empty = every arm that takes no other arm's rate: neither arms.X.lr_from nor an
    unmatched twin); every other arm then needs a rate source: its lr_from, or the twin of a matched arm."""
    extend: int = 0
    """Rounds the pilot may add to its grid (0 = none): after each round, every piloted arm whose chosen rate is the
    highest (lowest) rate it tried gets one more rate beyond it, a grid step further (the ratio of the grid's two
    rates at that edge), in a round of its own (pilot/extend-<k>/); it stops when every choice is interior."""
    confirm_seeds: list[int] = field(default_factory=list)
    """Confirm the rates where the claims are read (pilot.py): once the study has trained, each core arm (the claims'
    pre_joint, post_joint, pre_grow, post_grow) also runs at half and twice its chosen rate on these seeds, at the
    study's budget — a budget ladder's largest — (pilot/confirm/); a claim reading an arm whose chosen rate sits at an edge of its pilot's grid or is
    beaten by a neighbour by more than δ/2 (select/ce) reads "undetermined (learning rate)". Empty: no confirmation."""
    envelope_seeds: list[int] = field(default_factory=list)
    """Envelope rates (envelope.py): at every budget a claim is read at (a plain study's; every budget of a ladder),
    each piloted arm runs r/2, r and 2r on these seeds (r its choice at the budget before, the pilot's at the first),
    widened beyond an edge (envelope_widen), and every seed trains at the rate with the lowest mean select/ce over
    them; a claim reading an arm whose bracket did not close reads "undetermined (learning rate)". Seeds of the
    study's own: their runs at the chosen rate are the study's runs. Empty: the pilot's choice at every budget.
    Supersedes confirm_seeds and the ladder's check. Without a pilot (lr_pilot.lrs empty) the first budget's
    brackets anchor at each arm's own train.lr (widen far enough to reach the rates a pilot would have tried)."""
    envelope_widen: int = 1
    """Rounds an envelope may widen its bracket: each adds, to every arm whose best rate is the highest (lowest) it
    tried, the rate a factor 2 beyond it (0 = never: a best rate at an edge leaves its bracket open)."""
    check: bool = True
    """In a budget ladder: a second pilot point at the ladder's middle fitted budget (pilot/check/, the pilot's first
    seed, the ladder's own recipe at that budget), where every piloted arm runs its chosen rate and the rate next to
    it on either side. The report says per arm whether the choice held there; where it moved, each budget trains at
    the choice of the pilot point nearest to it (in log budget)."""
    overrides: list[str] = field(default_factory=list)
    """Run overrides of the pilot's runs only, after the study's: measurements it does not need (diagnostics,
    learning curves) can be turned off, since they never change training; anything that does change training
    would make the pilot choose for another run."""


@dataclass
class EvaluateConfig:
    tasks: list[str] = field(default_factory=list)
    """lm-evaluation-harness tasks run on every finished run's export once the study has trained, into its report
    (`normgrow evaluate`, study/report/downstream.py); `normgrow_continuation` is the local one; [] = none."""
    include_path: list[str] = field(default_factory=list)
    """Folders of task YAMLs (lm_eval's --include_path) besides the harness's own tasks."""
    batch_size: int = 8
    limit: int | None = None
    """At most this many items per task (null: all)."""
    device: str = "auto"
    """cpu, cuda, …; auto = cuda when available."""


@dataclass
class StudyConfig:
    name: str = "study"
    """Study name (default output: studies/<name>)."""
    base: str = "default"
    """Run preset every arm starts from unless it names its own."""
    overrides: list[str] = field(default_factory=list)
    """Run-config overrides applied to every arm."""
    budget_scale: float = 1.0
    """Multiply every stage budget and LR warmup of every arm (keeps the presets' proportions; for quick studies)."""
    seeds: list[int] = field(default_factory=lambda: [0])
    """Seeds; every arm runs once per seed."""
    arms: dict[str, ArmConfig] = field(default_factory=dict)
    """Named arms."""
    contrasts: dict[str, list[str]] = field(default_factory=dict)
    """Named pairs [a, b], reported as the paired difference b − a of final val/ce over seeds."""
    gap_ratio: list[str] = field(default_factory=list)
    """Two contrast names [x, y]: the signed ratio x / y with a Fieller 95% interval over seeds
    (printed as undefined when y's interval contains 0), e.g. the grow gap over the joint gap."""
    phase: list[str] = field(default_factory=list)
    """Two curriculum arms [a, b] compared at every stage boundary (the crossover analysis)."""
    diagnostics_pair: list[str] = field(default_factory=list)
    """Arms whose diagnostics figures are drawn side by side (default: the phase arms)."""
    claims: dict[str, Any] = field(default_factory=dict)
    """Which arm plays which part in the registered claims (roles: pre_grow: <arm>, matched: [<joint>, <grow>], …) and
    the claims' settings (margin, …): the roles and settings the claims declare (verdicts.py, paper.py; `normgrow
    config --study` lists them). The report gives each registered claim a verdict."""
    select_tokens: int = 16384
    """Size of the model-selection set (data.select_tokens) of the arms that sweep learning rates."""
    collapse_threshold: float = 0.5
    """The report warns when a run's residual stream puts more than this share of its energy in the direction
    all tokens share (diagnostics `collapse_share`, any block, end of training)."""
    launcher: LauncherConfig = field(default_factory=LauncherConfig)
    """How jobs run."""
    sweep: SweepConfig = field(default_factory=SweepConfig)
    """Sweep axes: the arms and seeds run at every point (sweep.py); none = a plain study."""
    budgets: list[float] = field(default_factory=list)
    """A budget ladder: absolute budget scales (like budget_scale), ascending, one complete sub-study each under
    budgets/b<scale>/, read together as each contrast's retention ratio between successive budgets (ladder.py);
    must contain budget_scale, the reference budget whose report is the study's main one. Empty: no ladder."""
    holdout: float | None = None
    """A budget ladder's held-out budget: its largest, left out of the fits (limits.py). Its runs start only after the
    fits of the other budgets (at least four) have written their prediction of it (prediction.json, hashed into
    study.log); the report checks the prediction (the claim `extrapolation`). null: no held-out budget."""
    ladder: Literal["rungs", "branches", "direct"] = "rungs"
    """How a budget ladder's budgets are trained. `rungs`: each budget scales every stage and the warmup (the presets'
    proportions at every budget). `branches`: continued training at full depth — the warmup and every stage before
    the last at their lengths at the smallest budget, the last stage stretched to the budget's total tokens, under
    train.schedule=wsd; each arm × seed is trained once, as a trunk (trunks/) that stops at the largest budget's decay
    start, and every budget is a decay branch resumed from the trunk's checkpoint at its own decay start (branches.py),
    equal bit for bit to training it directly. `direct`: the `branches` recipe with every budget trained from step 0
    (the control of the branches' cost and equality)."""
    ladder_base: float | None = None
    """Set by a ladder in each of its budgets' study.yaml, not by hand: the ladder's smallest budget, whose warmup and
    stages before the last the `branches` and `direct` recipes keep at every budget."""
    lr_pilot: LrPilotConfig = field(default_factory=LrPilotConfig)
    """A short learning-rate pilot run first, on the model-selection set, that chooses each arm's rate (pilot.py)."""
    evaluate: EvaluateConfig = field(default_factory=EvaluateConfig)
    """Downstream evaluation after training (lm-evaluation-harness); it changes no run, so it may change between
    invocations of one study."""


# ----------------------------------------------------------------------------- the schema: the core and a paper's sections


CORE_FIELDS = tuple(f.name for f in dataclasses.fields(StudyConfig))


def register_study_section(sec: StudySection) -> None:
    """A paper's study-file section (sections.StudySection), in every study's schema from now on."""
    register_section(sec, CORE_FIELDS)


@functools.cache
def _schema(names: tuple[str, ...]) -> type:
    secs = [SECTIONS[n] for n in names]
    cls = dataclasses.make_dataclass(
        "StudyConfig",
        [(sec.name, sec.kind, field(default_factory=sec.default)) for sec in secs],
        bases=(StudyConfig,),
        namespace={"__field_docs__": {sec.name: sec.doc for sec in secs}},
    )
    cls.__module__ = __name__
    return cls


def study_schema() -> type[StudyConfig]:
    """The study file's schema: StudyConfig with every registered section as a field (a subclass, built once per set
    of sections)."""
    return _schema(tuple(SECTIONS))


def new_study(**fields: Any) -> StudyConfig:
    """A study with the given fields (a paper's sections among them), the others at their defaults."""
    return study_schema()(**fields)


# ----------------------------------------------------------------------------- loading


def _presets_root():
    return importlib.resources.files("normgrow.configs") / "studies"


def study_preset_names() -> list[str]:
    return sorted(q.name[:-5] for q in _presets_root().iterdir() if q.name.endswith(".yaml"))


def study_path(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.is_dir() and (p / "study.yaml").is_file():
        return p / "study.yaml"
    if p.suffix in (".yaml", ".yml") or os.sep in name_or_path:
        if not p.is_file():
            raise ConfigError(f"{name_or_path}: study file not found")
        return p
    cand = _presets_root() / f"{name_or_path}.yaml"
    if not cand.is_file():
        raise ConfigError(
            f"{name_or_path}: no such study preset (presets: {', '.join(study_preset_names())}) and no such file"
        )
    return Path(str(cand))


def load_study(name_or_path: str | None = None, overrides: Sequence[str] = ()) -> StudyConfig:
    """Study preset/file ← overrides. Keys under a run-config section (model., train., …) become
    run overrides for every arm; the others (seeds=…, launcher.parallel=…) set study fields."""
    path = study_path(name_or_path or "default")
    run_over = [o for o in overrides if o.startswith(RUN_SECTIONS)]
    study_over = [o for o in overrides if not o.startswith(RUN_SECTIONS)]
    study = load_structured(study_schema(), [(str(path), read_yaml(path))], study_over)
    study = dataclasses.replace(study, overrides=list(study.overrides) + run_over)
    study = canonical(study)
    validate_study(study)
    for item in run_over:
        key, _, value = item.partition("=")
        registry.check(key, value.strip())  # an unknown placement, growth operator, … fails here, once
        if all(any(o.partition("=")[0] == key for o in arm.overrides) for arm in study.arms.values()):
            raise ConfigError(
                f"override '{item}': every arm of the study sets {key} itself, so this override "
                "would change nothing (override the arms instead, e.g. arms.<name>.overrides=[…])"
            )
    return study


def canonical(study: StudyConfig) -> StudyConfig:
    """The study with its `claims:` section checked and completed (verdicts.normalize_claims: every registered role
    and setting, in registration order), as it is compared and saved."""
    return dataclasses.replace(complete(study), claims=normalize_claims(study.claims, study.arms))


def complete(study: StudyConfig) -> StudyConfig:
    """The study in the full schema: a section it was made without at its empty value."""
    if type(study) is study_schema():
        return study
    core = {name: getattr(study, name) for name in CORE_FIELDS}
    return new_study(**core, **{name: section(study, name) for name in SECTIONS})


def validate_study(s: StudyConfig) -> None:
    check_sizes(s)
    check_numbers(s, STUDY_UPPER)
    need(len(s.arms) > 0, "arms", "a study needs at least one arm")
    need(len(s.seeds) > 0 and len(set(s.seeds)) == len(s.seeds), "seeds", f"need distinct seeds, got {s.seeds}")
    need(all(x >= 0 for x in s.seeds), "seeds", f"must be non-negative, got {s.seeds}")
    need(all(x >= 0 for x in s.lr_pilot.seeds), "lr_pilot.seeds", f"must be non-negative, got {s.lr_pilot.seeds}")
    need(s.budget_scale > 0, "budget_scale", f"must be positive, got {s.budget_scale}")
    registry.check("launcher.kind", s.launcher.kind)
    need(s.launcher.parallel > 0, "launcher.parallel", f"must be positive, got {s.launcher.parallel}")
    need(s.launcher.torchrun_nproc > 0, "launcher.torchrun_nproc", f"must be positive, got {s.launcher.torchrun_nproc}")
    need(
        s.launcher.threads is None or s.launcher.threads > 0,
        "launcher.threads",
        f"must be positive (or null: the machine's cores / parallel), got {s.launcher.threads}",
    )
    for name, arm in s.arms.items():
        need(name.replace("-", "").replace("_", "").isalnum(), f"arms.{name}", "arm names use letters, digits, - and _")
        need(arm.match is None or arm.match in s.arms, f"arms.{name}.match", f"no arm named '{arm.match}'")
        need(arm.match != name, f"arms.{name}.match", "an arm cannot match itself")
    for cname, pair in s.contrasts.items():
        need(
            len(pair) == 2 and all(a in s.arms for a in pair),
            f"contrasts.{cname}",
            f"expected two arm names, got {pair}",
        )
    need(
        not s.gap_ratio or (len(s.gap_ratio) == 2 and all(c in s.contrasts for c in s.gap_ratio)),
        "gap_ratio",
        f"expected two contrast names, got {s.gap_ratio}",
    )
    for key in ("phase", "diagnostics_pair"):
        pair = getattr(s, key)
        need(
            not pair or (len(pair) == 2 and all(a in s.arms for a in pair)), key, f"expected two arm names, got {pair}"
        )
    for sec in SECTIONS.values():
        if not sec.late:
            sec.validate(s)
    validate_evaluate(s)
    need(0 < s.collapse_threshold < 1, "collapse_threshold", f"must be in (0, 1), got {s.collapse_threshold}")
    validate_sweep(s.sweep, RUN_SECTIONS)
    validate_ladder(s)
    validate_arm_budgets(s)
    for sec in SECTIONS.values():
        if sec.late:
            sec.validate(s)
    for name, arm in s.arms.items():
        need(
            all(lr > 0 for lr in arm.lrs) and len(set(arm.lrs)) == len(arm.lrs),
            f"arms.{name}.lrs",
            f"need distinct positive learning rates, got {arm.lrs}",
        )
    validate_pilot(s)


def validate_confirm(s: StudyConfig) -> None:
    c = s.lr_pilot.confirm_seeds
    if not c:
        return
    need(
        len(set(c)) == len(c) and set(c) <= set(s.seeds),
        "lr_pilot.confirm_seeds",
        f"need distinct seeds of the study's own seeds {s.seeds}, got {c}",
    )


def validate_evaluate(s: StudyConfig) -> None:
    need(s.select_tokens > 0, "select_tokens", f"must be positive, got {s.select_tokens}")
    e = s.evaluate
    need(e.batch_size > 0, "evaluate.batch_size", f"must be positive, got {e.batch_size}")
    need(e.limit is None or e.limit > 0, "evaluate.limit", f"must be positive, got {e.limit}")
    need(
        not (e.tasks and (s.sweep.axes or s.budgets)),
        "evaluate.tasks",
        "a sweep or budget ladder is evaluated one point at a time: `normgrow evaluate` on a point's study directory",
    )


def validate_envelope(s: StudyConfig) -> None:
    p, e = s.lr_pilot, s.lr_pilot.envelope_seeds
    need(
        0 <= p.envelope_widen <= 4, "lr_pilot.envelope_widen", f"must be between 0 and 4 rounds, got {p.envelope_widen}"
    )
    if not e:
        return
    need(
        len(set(e)) == len(e) and set(e) <= set(s.seeds),
        "lr_pilot.envelope_seeds",
        f"need distinct seeds of the study's own seeds {s.seeds}, got {e}",
    )
    need(
        not p.confirm_seeds,
        "lr_pilot.confirm_seeds",
        "the envelope chooses every arm's rate at the budget it is read at: give envelope_seeds or confirm_seeds",
    )
    need(
        s.ladder == "rungs",
        "lr_pilot.envelope_seeds",
        f"a {s.ladder} ladder's budgets share their trunks' rate; envelope rates need separate rungs (ladder: rungs)",
    )
    for name in piloted_arms(s):
        need(
            s.arms[name].match is None,
            f"arms.{name}.match",
            "a matched arm with no unmatched twin cannot bracket its own rate under the envelope: "
            f"give it arms.{name}.lr_from",
        )


def validate_pilot(s: StudyConfig) -> None:
    p = s.lr_pilot
    validate_confirm(s)
    validate_envelope(s)
    need(
        all(lr > 0 for lr in p.lrs) and len(set(p.lrs)) == len(p.lrs),
        "lr_pilot.lrs",
        f"need distinct positive learning rates, got {p.lrs}",
    )
    need(
        len(p.lrs) != 1,
        "lr_pilot.lrs",
        f"a pilot of one rate ({p.lrs[0] if p.lrs else ''}) chooses nothing: give "
        "two or more, or none (then every arm trains at its own train.lr)",
    )
    need(0 <= p.extend <= 8, "lr_pilot.extend", f"must be between 0 and 8 rounds, got {p.extend}")
    need(
        not p.extend or not p.lrs or len(p.lrs) >= 2,
        "lr_pilot.extend",
        "extends a grid of at least two rates (lr_pilot.lrs)",
    )
    need(
        0 < p.budget_scale <= 1,
        "lr_pilot.budget_scale",
        f"must be in (0, 1] (a fraction of the study's budget), got {p.budget_scale}",
    )
    need(
        len(p.seeds) > 0 and len(set(p.seeds)) == len(p.seeds), "lr_pilot.seeds", f"need distinct seeds, got {p.seeds}"
    )
    for item in p.overrides:
        need(
            item.startswith(RUN_SECTIONS) and "=" in item,
            "lr_pilot.overrides",
            f"expected run-config overrides key=value ({', '.join(k.rstrip('.') for k in RUN_SECTIONS)}), got '{item}'",
        )
    if not p.lrs and not p.envelope_seeds:
        need(not p.arms, "lr_pilot.arms", "names the arms of a pilot that does not run (lr_pilot.lrs is empty)")
        for name, arm in s.arms.items():
            need(
                arm.lr_from is None,
                f"arms.{name}.lr_from",
                "takes a pilot's rate, but the study runs no pilot (lr_pilot.lrs is empty)",
            )
        return
    for name, arm in s.arms.items():
        need(
            not arm.lrs,
            "lr_pilot.lrs",
            f"arm {name} sweeps its own rates (arms.{name}.lrs) and a pilot would choose "
            f"another: use either arms.{name}.lrs (a sweep at the full budget) or lr_pilot.lrs, not both",
        )
    need(
        not s.sweep.axes,
        "lr_pilot.lrs",
        "a sweep study cannot run a learning-rate pilot yet (each point would "
        "need its own); sweep train.lr as an axis or give the arms their own lrs",
    )
    validate_rate_sources(s)


def validate_rate_sources(s: StudyConfig) -> None:
    """lr_pilot.arms name distinct arms; every lr_from names an arm that is not piloted itself; every arm reaches a
    piloted arm's rate (rate_path), with no cycle."""
    p = s.lr_pilot
    for a in p.arms:
        need(a in s.arms, "lr_pilot.arms", f"no arm named '{a}'")
    need(len(set(p.arms)) == len(p.arms), "lr_pilot.arms", f"names an arm twice, got {p.arms}")
    for name, arm in s.arms.items():
        if arm.lr_from is not None:
            need(arm.lr_from in s.arms, f"arms.{name}.lr_from", f"no arm named '{arm.lr_from}'")
            need(
                name not in p.arms,
                f"arms.{name}.lr_from",
                f"{name} is piloted (lr_pilot.arms): it trains at its own chosen rate, not another arm's",
            )
    for name in s.arms:
        rate_path(s, name)


def twin_of(study: StudyConfig, arm: str) -> str | None:
    """The unmatched twin of a matched arm: the first arm with the same preset and overrides and no match."""
    a = study.arms[arm]
    if a.match is None:
        return None
    for name, b in study.arms.items():
        if b.match is None and (b.preset or study.base) == (a.preset or study.base) and b.overrides == a.overrides:
            return name
    return None


def envelope_on(study: StudyConfig) -> bool:
    """Does the study choose its rates by envelope (envelope seeds; anchored by its pilot, or without one at each
    arm's own train.lr)?"""
    return bool(study.lr_pilot.envelope_seeds)


def piloted_arms(study: StudyConfig) -> list[str]:
    """The arms the learning-rate pilot runs, in the study's order: lr_pilot.arms, or (empty) every arm that takes
    no other arm's rate (no lr_from, no unmatched twin)."""
    if study.lr_pilot.arms:
        return [n for n in study.arms if n in study.lr_pilot.arms]
    return [n for n, a in study.arms.items() if a.lr_from is None and twin_of(study, n) is None]


_NO_RATE = (
    "{name} is not piloted (lr_pilot.arms) and takes no other arm's rate: name the arm whose chosen rate it trains "
    "at, or add it to lr_pilot.arms"
)


def rate_path(study: StudyConfig, arm: str) -> list[str]:
    """The arms whose rate `arm` takes, one step at a time (its lr_from, else a matched arm's unmatched twin), ending
    at the piloted arm that chooses it; [] for a piloted arm. A cycle, or an arm left without a source, is a
    ConfigError naming arms.<arm>.lr_from."""
    piloted, path, name = set(piloted_arms(study)), list[str](), arm
    while name not in piloted:
        a = study.arms[name]
        nxt = a.lr_from if a.lr_from is not None else twin_of(study, name)
        if nxt is None:
            raise ConfigError(f"arms.{name}.lr_from: " + _NO_RATE.format(name=name))
        need(
            nxt != arm and nxt not in path,
            f"arms.{arm}.lr_from",
            f"rates form a cycle ({' → '.join([arm, *path, nxt])})",
        )
        path.append(nxt)
        name = nxt
    return path


def study_fields() -> list[tuple[str, str, str]]:
    """(dotted key, default, help) of every field of a study file, the registered claims' roles and settings
    among them."""
    groups: dict[str, list[tuple[str, str, str]]] = {}
    for row in describe_fields(StudyConfig):
        groups.setdefault(row[0].split(".")[0], []).append(row)
    groups["claims"] += section_fields()
    for name, sec in SECTIONS.items():
        default = sec.default()
        rows = describe_fields(type(default), f"{name}.") if dataclasses.is_dataclass(default) else []
        groups[name] = rows or [(name, repr(default), sec.doc)]
    return [row for name in field_order(CORE_FIELDS) for row in groups[name]]


def study_yaml(study: StudyConfig) -> str:
    """study.yaml's text: every field, each paper section after the field it follows (sections.field_order)."""
    data = OmegaConf.to_container(OmegaConf.structured(complete(study)))
    assert isinstance(data, dict)
    return OmegaConf.to_yaml(OmegaConf.create({k: data[k] for k in field_order(CORE_FIELDS)}), sort_keys=False)
