"""Studies: arms × seeds of runs, launched as independent jobs, then aggregated with honest statistics.

A study file (configs/studies/*.yaml) names a base run preset, the arms (each a run preset plus
overrides, optionally budget-matched to another arm), the seeds, the contrasts and the launcher:

    study dir/
        study.yaml                  the resolved study (rerun from it: normgrow study DIR/study.yaml -o DIR)
        configs/<arm>-s<seed>.yaml  every job's fully merged run config
        runs/<arm>-s<seed>/         one run directory per job (train.py)
        logs/<arm>-s<seed>.log      the job's output (local / submitit launchers)
        results.csv  report.md  plots/*.png

Shared work (the default teacher, tokenizer, token shards) is done once, in the study process,
before any job starts. A second invocation skips finished runs and resumes killed ones from their
checkpoints; a failing job is recorded (status, last error line) and does not stop the others.

Pieces: the study file and its jobs live here; launching them is launch.py (a registry of
launchers), the statistics stats.py, the report and figures report.py — which, like
`normgrow report`, reads only what the study directory holds.
"""

from __future__ import annotations

import csv
import dataclasses
import importlib.resources
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from omegaconf import OmegaConf

from normgrow import registry
from normgrow.config import RunConfig, load_config, load_structured, read_yaml, to_yaml
from normgrow.errors import ConfigError, NormgrowError
from normgrow.launch import Job, LauncherConfig, launch
from normgrow.pipeline import build_cache, prepare_data
from normgrow.report import write_report
from normgrow.rundir import read_summary
from normgrow.stats import COMPUTE, aggregate

RUN_SECTIONS = ("model.", "data.", "teacher.", "distill.", "curriculum.", "train.", "diagnostics.")


@dataclass
class ArmConfig:
    preset: Optional[str] = None
    """Run preset of this arm (configs/*.yaml name or path); null = the study's base."""
    overrides: list[str] = field(default_factory=list)
    """Dotted run-config overrides of this arm (after the study's own)."""
    match: Optional[str] = None
    """Another arm whose budget this arm matches, seed by seed (the measure is curriculum.match_by)."""


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
    """Two contrast names [x, y]: report |x| / |y| (e.g. the grow gap over the joint gap)."""
    phase: list[str] = field(default_factory=list)
    """Two curriculum arms [a, b] compared at every stage boundary (the crossover analysis)."""
    diagnostics_pair: list[str] = field(default_factory=list)
    """Arms whose diagnostics figures are drawn side by side (default: the phase arms)."""
    launcher: LauncherConfig = field(default_factory=LauncherConfig)
    """How jobs run."""


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
        raise ConfigError(f"{name_or_path}: no such study preset (presets: {', '.join(study_preset_names())}) "
                          "and no such file")
    return Path(str(cand))


def load_study(name_or_path: Optional[str] = None, overrides: list[str] = ()) -> StudyConfig:
    """Study preset/file ← overrides. Keys under a run-config section (model., train., …) become
    run overrides for every arm; the others (seeds=…, launcher.parallel=…) set study fields."""
    path = study_path(name_or_path or "default")
    run_over = [o for o in overrides if o.startswith(RUN_SECTIONS)]
    study_over = [o for o in overrides if not o.startswith(RUN_SECTIONS)]
    study = load_structured(StudyConfig, [(str(path), read_yaml(path))], study_over)
    study = dataclasses.replace(study, overrides=list(study.overrides) + run_over)
    validate_study(study)
    for item in run_over:
        key, _, value = item.partition("=")
        registry.check(key, value.strip())  # an unknown placement, growth operator, … fails here, once
        if all(any(o.partition("=")[0] == key for o in arm.overrides) for arm in study.arms.values()):
            raise ConfigError(f"override '{item}': every arm of the study sets {key} itself, so this override "
                              "would change nothing (override the arms instead, e.g. arms.<name>.overrides=[…])")
    return study


def validate_study(s: StudyConfig) -> None:
    def need(ok: bool, key: str, msg: str) -> None:
        if not ok:
            raise ConfigError(f"{key}: {msg}")

    need(len(s.arms) > 0, "arms", "a study needs at least one arm")
    need(len(s.seeds) > 0 and len(set(s.seeds)) == len(s.seeds), "seeds", f"need distinct seeds, got {s.seeds}")
    need(s.budget_scale > 0, "budget_scale", f"must be positive, got {s.budget_scale}")
    registry.check("launcher.kind", s.launcher.kind)
    need(s.launcher.parallel > 0, "launcher.parallel", f"must be positive, got {s.launcher.parallel}")
    need(s.launcher.torchrun_nproc > 0, "launcher.torchrun_nproc", f"must be positive, got {s.launcher.torchrun_nproc}")
    for name, arm in s.arms.items():
        need(name.replace("-", "").replace("_", "").isalnum(), f"arms.{name}", "arm names use letters, digits, - and _")
        need(arm.match is None or arm.match in s.arms, f"arms.{name}.match", f"no arm named '{arm.match}'")
        need(arm.match != name, f"arms.{name}.match", "an arm cannot match itself")
    for cname, pair in s.contrasts.items():
        need(len(pair) == 2 and all(a in s.arms for a in pair), f"contrasts.{cname}",
             f"expected two arm names, got {pair}")
    need(not s.gap_ratio or (len(s.gap_ratio) == 2 and all(c in s.contrasts for c in s.gap_ratio)), "gap_ratio",
         f"expected two contrast names, got {s.gap_ratio}")
    for key in ("phase", "diagnostics_pair"):
        pair = getattr(s, key)
        need(not pair or (len(pair) == 2 and all(a in s.arms for a in pair)), key, f"expected two arm names, got {pair}")


def study_yaml(study: StudyConfig) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(study), sort_keys=False)


# ----------------------------------------------------------------------------- jobs


def scale_budget(cfg: RunConfig, scale: float) -> RunConfig:
    """Every stage budget and the LR warmup times `scale` (a warmup left at full length would take
    up most of a shortened run)."""
    if scale == 1.0:
        return cfg
    stages = [dataclasses.replace(s, tokens=int(round(s.tokens * scale)),
                                  active_layer_tokens=int(round(s.active_layer_tokens * scale)))
              for s in cfg.curriculum.stages]
    train = dataclasses.replace(cfg.train, warmup_tokens=int(round(cfg.train.warmup_tokens * scale)))
    return dataclasses.replace(cfg, curriculum=dataclasses.replace(cfg.curriculum, stages=stages), train=train)


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


def plan_jobs(study: StudyConfig, out: Path) -> list[Job]:
    """Resolve every arm × seed into a run config (validated now, so a bad arm fails before anything runs)."""
    jobs = []
    for arm in arm_order(study):
        a = study.arms[arm]
        for seed in study.seeds:
            over = [*study.overrides, *a.overrides, f"seed={seed}", f"name={arm}"]
            try:
                cfg = load_config(a.preset or study.base, over)
            except ConfigError as e:
                raise ConfigError(f"arms.{arm}: {e}") from None
            cfg = scale_budget(cfg, study.budget_scale)
            if a.match is not None:
                # matched to the reference job's config (same seed): its planned totals are exactly what it
                # consumes (budgets are whole steps), so the two jobs need not wait for each other
                ref = out / "configs" / f"{a.match}-s{seed}.yaml"
                cfg = dataclasses.replace(cfg, curriculum=dataclasses.replace(cfg.curriculum, match_budget=str(ref)))
            name = f"{arm}-s{seed}"
            jobs.append(Job(arm, seed, cfg, out / "configs" / f"{name}.yaml", out / "runs" / name,
                            out / "logs" / f"{name}.log"))
    return jobs


def write_study_dir(study: StudyConfig, jobs: list[Job], out: Path) -> None:
    """study.yaml and the job configs; an existing study dir must hold the same study."""
    text = study_yaml(study)
    saved = out / "study.yaml"
    if saved.is_file():
        old = load_structured(StudyConfig, [(str(saved), read_yaml(saved))])
        differ = [f.name for f in dataclasses.fields(StudyConfig)
                  if getattr(old, f.name) != getattr(study, f.name) and f.name != "launcher"]
        if differ:
            raise ConfigError(f"{out}: holds a different study ({', '.join(differ)} differ); choose another -o")
    try:
        (out / "configs").mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"{out}: cannot write the study directory ({e.strerror})") from None
    (out / "runs").mkdir(exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    tmp = saved.with_name("study.yaml.tmp")
    tmp.write_text(text)
    os.replace(tmp, saved)
    for job in jobs:
        tmp = job.config_path.with_name(job.config_path.name + ".tmp")
        tmp.write_text(to_yaml(job.cfg))
        os.replace(tmp, job.config_path)


def prepare_shared(jobs: list[Job], log: Callable[[str], None]) -> None:
    """Default teacher, tokenizer and token shards (and a teacher cache when asked), once per distinct
    (data, teacher) config, before any job starts."""
    seen = set()
    for job in jobs:
        key = (json.dumps(dataclasses.asdict(job.cfg.data), sort_keys=True), json.dumps(dataclasses.asdict(job.cfg.teacher)))
        if key in seen:
            continue
        seen.add(key)
        try:
            if job.cfg.teacher.cache and not job.cfg.teacher.cache_path:  # one teacher pass for the whole study
                build_cache(job.cfg, log=log)
            else:
                prepare_data(job.cfg, log=log)
        except NormgrowError as e:  # the affected jobs fail on their own, with this error in their logs
            log(f"shared preparation for {job.name} failed: {e}")


# ----------------------------------------------------------------------------- results


FIELDS = ["arm", "seed", "status", "norm", "curriculum", "preset", "val_ce", "val_kl", "val_nll", "val_teacher_entropy",
          "tokens", "active_layer_tokens", "trainable_layer_tokens", "flops", "steps", "wall_time_s", "run_dir", "error"]


def collect(study: StudyConfig, jobs: list[Job], status: dict[str, str]) -> list[dict]:
    """One results.csv row per job, from its run directory."""
    rows = []
    for job in jobs:
        row = {k: "" for k in FIELDS}
        row.update(arm=job.arm, seed=job.seed, norm=job.cfg.model.norm, preset=study.arms[job.arm].preset or study.base,
                   curriculum="-".join(str(s.n_layer) for s in job.cfg.curriculum.stages),
                   run_dir=str(job.run_dir.relative_to(job.run_dir.parent.parent)))
        st = status.get(job.name)
        s = read_summary(job.run_dir) if job.finished else None
        if s is not None:
            row.update(status="ok", val_ce=s.get("val/ce", ""), val_kl=s.get("val/kl", ""), val_nll=s.get("val/nll", ""),
                       val_teacher_entropy=s.get("val/teacher_entropy", ""), wall_time_s=round(s["wall_time_s"], 1),
                       **{k: s["compute"][k] for k in COMPUTE}, steps=s["compute"]["step"])
        else:
            row.update(status="failed" if st and st != "ok" else "missing", error=st or "not run")
        rows.append(row)
    return rows


def write_results(rows: list[dict], path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    os.replace(tmp, path)


def read_results(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def stage_records(study: StudyConfig, jobs: list[Job]) -> dict[str, list[dict]]:
    """Per-stage evaluations of the phase arms' finished runs, by job name (from their summaries)."""
    out = {}
    for job in jobs:
        if job.arm in study.phase:
            s = read_summary(job.run_dir)
            if s is not None:
                out[job.name] = s["stages"]
    return out


def summarize(study: StudyConfig, jobs: list[Job], status: dict[str, str], out: Path) -> Path:
    """results.csv, the statistics and report.md (with its figures) from what the run directories hold."""
    rows = collect(study, jobs, status)
    write_results(rows, out / "results.csv")
    agg = aggregate(list(study.arms), study.contrasts, study.gap_ratio, study.phase, rows, stage_records(study, jobs))
    return write_report(study, rows, agg, out)


# ----------------------------------------------------------------------------- the whole study


def run_study(study: StudyConfig, out: Path, log: Callable[[str], None] = print, progress: bool = True) -> Path:
    """Plan, prepare shared work, launch the jobs, aggregate, report. Returns report.md's path."""
    jobs = plan_jobs(study, out)
    write_study_dir(study, jobs, out)
    log(f"study {study.name}: {len(study.arms)} arms × {len(study.seeds)} seeds = {len(jobs)} runs → {out}")
    prepare_shared(jobs, log)
    status = launch(jobs, study.launcher, out, log, progress=progress)
    for name, err in status.items():
        if err != "ok":
            log(f"run {name} failed: {err}")
    return summarize(study, jobs, status, out)


def rebuild_report(study_dir: Path) -> Path:
    """`normgrow report STUDY_DIR`: results.csv, report.md and plots from what is on disk."""
    study = load_study(str(study_dir / "study.yaml"))
    jobs = plan_jobs(study, study_dir)
    previous = {}
    if (study_dir / "results.csv").is_file():
        previous = {f"{r['arm']}-s{r['seed']}": r["error"] for r in read_results(study_dir / "results.csv")
                    if r["status"] == "failed"}
    return summarize(study, jobs, previous, study_dir)
