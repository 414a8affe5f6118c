"""Studies: arms × seeds of runs, launched as independent jobs, then aggregated with honest statistics.

A study file (configs/studies/*.yaml) names a base run preset, the arms (each a run preset plus
overrides, optionally budget-matched to another arm), the seeds, the contrasts and the launcher:

    study dir/
        study.yaml                  the resolved study (rerun from it: normgrow study DIR/study.yaml -o DIR)
        configs/<arm>-s<seed>.yaml  every job's fully merged run config
        runs/<arm>-s<seed>/         one run directory per job (train.py)
        logs/<arm>-s<seed>.log      the job's output (local / submitit launchers)
        results.csv  report.md  plots/*.png
    a sweep study (sweep.py): study.yaml, points/<label>/ (each a study dir as above), and the sweep's
        results.csv  report.md  plots/sweep_<contrast>.png

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
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from omegaconf import OmegaConf

from normgrow import registry
from normgrow.claims import NOT_TESTED, Claim, ClaimsConfig, evaluate_claims
from normgrow.config import RunConfig, load_config, load_structured, read_yaml, to_yaml
from normgrow.errors import ConfigError, NormgrowError
from normgrow.launch import Job, LauncherConfig, job_name, launch
from normgrow.locks import DirLock
from normgrow.pipeline import build_cache, prepare_data
from normgrow.rundir import read_jsonl, read_summary
from normgrow.stats import COMPUTE, aggregate
from normgrow.stats import paired as stats_paired
from normgrow.study_report import collapsed_arms, headline, write_report
from normgrow.sweep import (
    SweepConfig,
    budget_factor,
    plot_contrast,
    point_study,
    points,
    sentences,
    sign_of,
    sweep_report_lines,
    validate_sweep,
)

RUN_SECTIONS = ("model.", "data.", "teacher.", "distill.", "curriculum.", "train.", "diagnostics.")


@dataclass
class ArmConfig:
    preset: Optional[str] = None
    """Run preset of this arm (configs/*.yaml name or path); null = the study's base."""
    overrides: list[str] = field(default_factory=list)
    """Dotted run-config overrides of this arm (after the study's own)."""
    match: Optional[str] = None
    """Another arm whose budget this arm matches, seed by seed, up or down (the measure is curriculum.match_by)."""
    lrs: list[float] = field(default_factory=list)
    """Learning rates to sweep: one run per rate and seed; the report keeps the rate with the lowest mean
    CE on the model-selection set (study.select_tokens), never on the validation set it reports."""


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
    claims: ClaimsConfig = field(default_factory=ClaimsConfig)
    """Which arms play which part in the paper's claims (claims.py); the report gives each claim a verdict."""
    select_tokens: int = 16384
    """Size of the model-selection set (data.select_tokens) of the arms that sweep learning rates."""
    collapse_threshold: float = 0.5
    """The report warns when a run's residual stream puts more than this share of its energy in the direction
    all tokens share (diagnostics `collapse_share`, any block, end of training)."""
    launcher: LauncherConfig = field(default_factory=LauncherConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)
    """Sweep axes: the arms and seeds run at every point (sweep.py); none = a plain study."""
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
    for f in dataclasses.fields(ClaimsConfig):
        value = getattr(s.claims, f.name)
        if f.name == "matched":
            need(not value or (len(value) == 2 and all(a in s.arms for a in value)), "claims.matched",
                 f"expected two arm names [joint, grow], got {value}")
        elif f.name != "margin":
            need(value is None or value in s.arms, f"claims.{f.name}", f"no arm named '{value}'")
    need(s.claims.margin > 0, "claims.margin", f"must be positive, got {s.claims.margin}")
    need(s.select_tokens > 0, "select_tokens", f"must be positive, got {s.select_tokens}")
    need(0 < s.collapse_threshold < 1, "collapse_threshold", f"must be in (0, 1), got {s.collapse_threshold}")
    validate_sweep(s.sweep, RUN_SECTIONS)
    for name, arm in s.arms.items():
        need(all(lr > 0 for lr in arm.lrs) and len(set(arm.lrs)) == len(arm.lrs), f"arms.{name}.lrs",
             f"need distinct positive learning rates, got {arm.lrs}")


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


def plan_jobs(study: StudyConfig, out: Path, point: str = "") -> list[Job]:
    """Resolve every arm × seed (× learning rate, for a sweep) into a run config (validated now, so a bad arm
    fails before anything runs). `point` labels the jobs of one point of a sweep study."""
    jobs = []
    for arm in arm_order(study):
        a = study.arms[arm]
        for lr in a.lrs or [None]:
            for seed in study.seeds:
                sweep = [f"train.lr={lr}", f"data.select_tokens={study.select_tokens}"] if lr is not None else []
                over = [*study.overrides, *a.overrides, *sweep, f"seed={seed}", f"name={arm}"]
                try:
                    cfg = load_config(a.preset or study.base, over)
                except ConfigError as e:
                    raise ConfigError(f"arms.{arm}: {e}") from None
                cfg = scale_budget(cfg, study.budget_scale)
                nproc = study.launcher.torchrun_nproc
                if cfg.train.batch_size % nproc:  # caught here: under torchrun each rank would fail, then torchrun
                    raise ConfigError(f"arms.{arm}: train.batch_size: {cfg.train.batch_size} is not divisible by "
                                      f"launcher.torchrun_nproc={nproc}")
                if a.match is not None:
                    # matched to the reference job's config (same seed; any of its swept rates: the budget does not
                    # depend on the rate): its planned totals are exactly what it consumes (budgets are whole
                    # steps), so the two jobs need not wait for each other
                    ref_lrs = study.arms[a.match].lrs
                    ref = out / "configs" / f"{job_name(a.match, seed, ref_lrs[0] if ref_lrs else None)}.yaml"
                    cfg = dataclasses.replace(cfg, curriculum=dataclasses.replace(cfg.curriculum, match_budget=str(ref)))
                name = job_name(arm, seed, lr)
                jobs.append(Job(arm, seed, cfg, out / "configs" / f"{name}.yaml", out / "runs" / name,
                                out / "logs" / f"{name}.log", lr, point))
    return jobs


def sweep_plan(study: StudyConfig, out: Path) -> list[tuple[StudyConfig, Path, list[Job]]]:
    """A sweep study's points: each one's study (the point's overrides and budget), directory and jobs."""
    plan, reference = [], None
    for p in points(study.sweep):
        try:
            cfg = load_config(study.base, [*study.overrides, *p.overrides])
        except ConfigError as e:
            raise ConfigError(f"sweep point {p.label}: {e}") from None
        reference = reference or cfg
        sub = point_study(study, p, budget_factor(study.sweep, cfg, reference))
        try:
            jobs = plan_jobs(sub, out / "points" / p.label, point=p.label)
        except ConfigError as e:
            raise ConfigError(f"sweep point {p.label}: {e}") from None
        plan.append((sub, out / "points" / p.label, jobs))
    return plan


def write_study_yaml(study: StudyConfig, out: Path, subdirs: tuple[str, ...] = ()) -> None:
    """study.yaml (and the given subdirectories); an existing study dir must hold the same study."""
    saved = out / "study.yaml"
    if saved.is_file():
        old = load_structured(StudyConfig, [(str(saved), read_yaml(saved))])
        differ = [f.name for f in dataclasses.fields(StudyConfig)
                  if getattr(old, f.name) != getattr(study, f.name) and f.name != "launcher"]
        if differ:
            raise ConfigError(f"{out}: holds a different study ({', '.join(differ)} differ); choose another -o")
    try:
        out.mkdir(parents=True, exist_ok=True)
        for sub in subdirs:
            (out / sub).mkdir(exist_ok=True)
    except OSError as e:
        raise ConfigError(f"{out}: cannot write the study directory ({e.strerror})") from None
    tmp = saved.with_name("study.yaml.tmp")
    tmp.write_text(study_yaml(study))
    os.replace(tmp, saved)


def write_study_dir(study: StudyConfig, jobs: list[Job], out: Path) -> None:
    """study.yaml, the run/log directories and the job configs; an existing study dir must hold the same study."""
    write_study_yaml(study, out, ("configs", "runs", "logs"))
    for job in jobs:
        tmp = job.config_path.with_name(job.config_path.name + ".tmp")
        tmp.write_text(to_yaml(job.cfg))
        os.replace(tmp, job.config_path)


def prepare_shared(jobs: list[Job], log: Callable[[str], None], progress: bool = True) -> None:
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
                build_cache(job.cfg, log=log, progress=progress)
            else:
                prepare_data(job.cfg, log=log, progress=progress)
        except NormgrowError as e:  # the affected jobs fail on their own, with this error in their logs
            log(f"shared preparation for {job.name} failed: {e}")


# ----------------------------------------------------------------------------- results


FIELDS = ["arm", "seed", "lr", "selected", "status", "norm", "curriculum", "preset", "val_ce", "val_kl", "val_nll",
          "val_teacher_entropy", "select_ce", "tokens", "active_layer_tokens", "trainable_layer_tokens", "flops", "steps",
          "matched_to", "match_scale", "wall_time_s", "run_dir", "error"]


def collect(study: StudyConfig, jobs: list[Job], status: dict[str, str]) -> list[dict]:
    """One results.csv row per job, from its run directory."""
    rows = []
    for job in jobs:
        row = {k: "" for k in FIELDS}
        row.update(arm=job.arm, seed=job.seed, lr=job.cfg.train.lr, norm=job.cfg.model.norm,
                   preset=study.arms[job.arm].preset or study.base,
                   curriculum="-".join(str(s.n_layer) for s in job.cfg.curriculum.stages),
                   matched_to=study.arms[job.arm].match or "",
                   run_dir=str(job.run_dir.relative_to(job.run_dir.parent.parent)))
        st = status.get(job.name)
        s = read_summary(job.run_dir) if job.finished else None
        if s is not None:
            match = s.get("budget_match") or {}
            row.update(status="ok", val_ce=s.get("val/ce", ""), val_kl=s.get("val/kl", ""), val_nll=s.get("val/nll", ""),
                       val_teacher_entropy=s.get("val/teacher_entropy", ""),
                       select_ce=(s.get("select") or {}).get("select/ce", ""), match_scale=match.get("scale", ""),
                       wall_time_s=round(s["wall_time_s"], 1), **{k: s["compute"][k] for k in COMPUTE},
                       steps=s["compute"]["step"])
        elif (job.run_dir / "summary.json").is_file():  # present but cut or edited: say so, not "not run"
            row.update(status="failed", error=f"{job.run_dir / 'summary.json'} is unreadable (cut?); rerun the "
                       "study to rebuild it from the run's final checkpoint")
        else:
            row.update(status="failed" if st and st != "ok" else "missing", error=st or "not run")
        rows.append(row)
    return rows


def select_lrs(study: StudyConfig, rows: list[dict]) -> dict[str, dict]:
    """For every arm that sweeps learning rates: the mean selection-set CE of each rate over its finished
    seeds and the rate chosen (the lowest). Marks every row `selected` yes/no (empty for arms without a sweep)."""
    chosen = {}
    for arm, a in study.arms.items():
        if not a.lrs:
            continue
        by_lr = {}
        for lr in a.lrs:
            vals = [float(r["select_ce"]) for r in rows if r["arm"] == arm and float(r["lr"]) == lr
                    and r["status"] == "ok" and r["select_ce"] != ""]
            by_lr[lr] = {"mean": sum(vals) / len(vals) if vals else None, "n": len(vals)}
        scored = [lr for lr in a.lrs if by_lr[lr]["mean"] is not None]
        best = min(scored, key=lambda lr: by_lr[lr]["mean"]) if scored else None
        chosen[arm] = {"lrs": by_lr, "chosen": best}
        for r in rows:
            if r["arm"] == arm:
                r["selected"] = "yes" if best is not None and float(r["lr"]) == best else "no"
    return chosen


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


def _log_drift(pairs: list[tuple[float, float]]) -> Optional[float]:
    """Mean of |log(after / before)| over (before, after) pairs: how far a scale moved, either way."""
    pairs = [(a, b) for a, b in pairs if a and b]
    return sum(abs(math.log(b / a)) for a, b in pairs) / len(pairs) if pairs else None


def run_measures(run_dir: Path) -> dict:
    """The per-run numbers the claims need, from the run's summary and diagnostics (plain values)."""
    s = read_summary(run_dir) or {}
    bounds = s.get("boundaries") or []
    ends = [r for r in read_jsonl(run_dir / "diagnostics.jsonl") if r["event"] == "stage_end"]
    last = bounds[-1] if bounds else {}
    prefix = last.get("last_prefix_block") or {}
    first_new = [b["first_new_block"]["branch_update_end"] for b in bounds if "first_new_block" in b]
    return {
        "val_ce": s.get("val/ce"),
        "stage_ce": [st["end"]["val/ce"] for st in s.get("stages", []) if "val/ce" in (st.get("end") or {})],
        "match_scale": (s.get("budget_match") or {}).get("scale"),
        "boundary_drift": _log_drift([(b["rms_at_growth"]["all"], b["rms_end_of_next_stage"]["all"])
                                      for b in bounds if "rms_at_growth" in b]),
        "struct_drift": _log_drift([tuple(b["struct_content_ratio"]) for b in bounds if "struct_content_ratio" in b]),
        "first_new_update": sum(first_new) / len(first_new) if first_new else None,
        "last_prefix_update": prefix.get("rel_update"),
        "last_prefix_index": prefix.get("index"),
        "last_prefix_provenance": prefix.get("provenance"),
        "block_updates": ends[-1].get("rel_update") if ends else None,
        "growth": [{"stage": st["index"], "from": g["grow/from"], "to": g["grow/to"], "init": g["grow/init"],
                    "logit_max_abs_diff": g["grow/logit_max_abs_diff"], "val_ce_jump": g.get("grow/val_ce_jump")}
                   for st in s.get("stages", []) if (g := st.get("growth"))],
        "collapse_share": max(ends[-1]["collapse_share"][1:], default=None) if ends and "collapse_share" in ends[-1] else None,
        "collapse_cos": max(ends[-1]["collapse_cos"][1:], default=None) if ends and "collapse_cos" in ends[-1] else None,
    }


def summarize(study: StudyConfig, jobs: list[Job], status: dict[str, str], out: Path) -> tuple[Path, list[str]]:
    """results.csv, the statistics, the claims and report.md (with its figures) from what the run directories hold.
    Returns report.md's path and the study's headline lines."""
    rows = collect(study, jobs, status)
    selection = select_lrs(study, rows)
    write_results(rows, out / "results.csv")
    kept = [r for r in rows if r["selected"] != "no"]  # an arm's chosen learning rate only
    stages = {f"{r['arm']}-s{r['seed']}": (read_summary(out / r["run_dir"]) or {}).get("stages", [])
              for r in kept if r["status"] == "ok" and r["arm"] in study.phase}
    agg = aggregate(list(study.arms), study.contrasts, study.gap_ratio, study.phase, kept, stages)
    measures = study_measures(kept, out)
    claims = evaluate_claims(study.claims, measures)
    path = write_report(study, kept, agg, out, claims=claims, measures=measures, selection=selection, all_rows=rows)
    return path, headline(study, agg, claims, collapsed_arms(study, measures))


def compare_studies(base_dir: Path, other_dir: Path) -> list[str]:
    """Each contrast of the study in `other_dir` next to the same contrast in `base_dir` (e.g. the same study
    at twice the budget), and the claims' verdicts in both. Markdown lines.

    Readings of "the conclusions no longer move", all printed: the strict one — every contrast's change stays
    within `other`'s 95% half-width (seed noise, which shrinks as the arms converge) —, the practical one —
    every change within the claims' margin (`claims.margin`, what the claims call "about zero") —, and the
    one a reader acts on — each contrast's sign (its interval below 0, above 0, or containing 0) and each
    claim's verdict are the same at both budgets. Runs of learning rates not selected are left out; contrasts
    missing from either study are skipped; claims are compared where either study tests them."""
    studies = {}
    for d in (base_dir, other_dir):
        if not (d / "study.yaml").is_file() or not (d / "results.csv").is_file():
            raise NormgrowError(f"{d}: not a finished study directory (no study.yaml or results.csv)")
        kept = [r for r in read_results(d / "results.csv") if r.get("selected") != "no"]  # each arm's chosen lr
        studies[d] = (load_study(str(d / "study.yaml")), kept)
        if studies[d][0].sweep.axes:
            raise NormgrowError(f"{d}: is a sweep study; compare two of its points instead (DIR/points/<label>)")
    (a, rows_a), (b, rows_b) = studies[base_dir], studies[other_dir]
    L = [f"Contrasts (b − a of val/ce, mean ± 95% half-width) in `{base_dir}` (budget scale {a.budget_scale}) and "
         f"`{other_dir}` (budget scale {b.budget_scale}); sign: − or + where the interval excludes 0, ? where it "
         "contains it:", "",
         "| contrast | base | other | change | within other's interval | sign (base → other) |",
         "|---|---|---|---|---|---|"]
    within_n = signs_same = small = compared = 0
    for name, (x, y) in b.contrasts.items():
        if a.contrasts.get(name) != [x, y]:
            continue
        ca, cb = stats_paired(rows_a, x, y), stats_paired(rows_b, x, y)
        if ca["mean"] is None or cb["mean"] is None:
            L.append(f"| {name} | — | — | — | no paired seeds | — |")
            continue
        change = cb["mean"] - ca["mean"]
        hw = cb["ci95"]
        within = "—" if hw is None else ("yes" if abs(change) <= hw else "**no**")
        sa, sb = _sign(ca), _sign(cb)
        compared += 1
        within_n += within == "yes"
        signs_same += sa == sb
        small += abs(change) <= b.claims.margin
        L.append(f"| {name} | {ca['mean']:+.4f} ± {_hw(ca)} | {cb['mean']:+.4f} ± {_hw(cb)} | {change:+.4f} | {within} "
                 f"| {sa} → {sb} |")
    claims = [(ca, cb) for ca, cb in zip(study_claims(a, rows_a, base_dir), study_claims(b, rows_b, other_dir))
              if not (ca.verdict == cb.verdict == NOT_TESTED)]
    if claims:
        L += ["", "| claim | verdict at base | verdict at other | same |", "|---|---|---|---|"]
        L += [f"| {ca.key} | {ca.verdict} | {cb.verdict} | {'yes' if ca.verdict == cb.verdict else '**no**'} |"
              for ca, cb in claims]
    L += ["", f"Convergence: {within_n} of {compared} contrasts moved by no more than their interval at budget scale "
          f"{b.budget_scale}; {small} of {compared} by no more than the claims' margin of "
          f"{b.claims.margin:g} nats (their 'about zero'). Signs: {signs_same} of {compared} unchanged."
          + (f" Claims: {sum(ca.verdict == cb.verdict for ca, cb in claims)} of {len(claims)} verdicts unchanged."
             if claims else "")]
    return L


def _sign(c: dict) -> str:
    """− / + where the 95% interval of a contrast lies below / above 0, ? where it contains 0 (or is unknown)."""
    return {"-": "−", "+": "+"}.get(sign_of(c), "?")


def study_measures(rows: list[dict], out: Path) -> dict:
    """{arm: {seed: run_measures}} of the finished runs of the rows kept (each arm's chosen learning rate);
    a row whose run directory is gone contributes its val/ce only."""
    measures: dict = {}
    for r in rows:
        if r.get("status") != "ok" or r.get("selected") == "no":
            continue
        run_dir = out / r["run_dir"] if r.get("run_dir") else None
        m = run_measures(run_dir) if run_dir is not None and run_dir.is_dir() else {}
        if m.get("val_ce") is None:
            m["val_ce"] = float(r["val_ce"])
        measures.setdefault(r["arm"], {})[int(r["seed"])] = m
    return measures


def study_claims(study: StudyConfig, rows: list[dict], out: Path) -> list[Claim]:
    """The claims' verdicts of a finished study from its rows (results.csv) and run directories."""
    return evaluate_claims(study.claims, study_measures(rows, out))


def _hw(c: dict) -> str:
    return "—" if c["ci95"] is None else f"{c['ci95']:.4f}"


# ----------------------------------------------------------------------------- the whole study


def run_study(study: StudyConfig, out: Path, log: Callable[[str], None] = print, progress: bool = True) -> Path:
    """Plan, prepare shared work, launch the jobs, aggregate, report. Returns report.md's path."""
    if study.sweep.axes:
        plan = sweep_plan(study, out)
        with DirLock(out, "study"):
            return _run_sweep_locked(study, plan, out, log, progress)
    jobs = plan_jobs(study, out)
    with DirLock(out, "study"):  # one study process per directory (each run locks its own directory too)
        return _run_locked(study, jobs, out, log, progress)


def _run_sweep_locked(study: StudyConfig, plan, out: Path, log: Callable[[str], None], progress: bool) -> Path:
    """Every point's jobs launched together (one queue, so `launcher.parallel` spans points), then each point's
    report and the sweep's."""
    write_study_yaml(study, out)
    for sub, sub_dir, jobs in plan:
        write_study_dir(sub, jobs, sub_dir)
    jobs = [j for _, _, js in plan for j in js]
    log(f"sweep study {study.name}: {len(plan)} points × {len(study.arms)} arms × {len(study.seeds)} seeds = "
        f"{len(jobs)} runs → {out}")
    prepare_shared(jobs, log, progress=progress)
    status = launch(jobs, study.launcher, out, log, progress=progress)
    for name, err in status.items():
        if err != "ok":
            log(f"run {name} failed: {err}")
    return summarize_sweep(study, plan, {j.name: status.get(j.name) for j in jobs}, out, log)


def summarize_sweep(study: StudyConfig, plan, status: dict, out: Path, log: Callable[[str], None] = print,
                    plots: bool = True) -> Path:
    """Each point's results.csv and report.md, the sweep's results.csv (every run, with its point and axis values),
    its report.md and one figure per contrast. Returns the sweep report's path."""
    table: dict[str, list] = {name: [] for name in study.contrasts}
    all_rows = []
    axis_keys = [ax.key for ax in study.sweep.axes]
    for (sub, sub_dir, jobs), p in zip(plan, points(study.sweep)):
        summarize(sub, jobs, {j.name: v for j in jobs if (v := status.get(j.name))}, sub_dir)
        rows = read_results(sub_dir / "results.csv")
        kept = [r for r in rows if r["selected"] != "no"]
        for name, (a, b) in study.contrasts.items():
            table[name].append((p, stats_paired(kept, a, b)))
        for r in rows:
            all_rows.append({"point": p.label, **dict(zip(axis_keys, p.coords)), **r,
                             "run_dir": f"points/{p.label}/{r['run_dir']}"})
    tmp = out / "results.csv.tmp"
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["point", *axis_keys, *FIELDS])
        w.writeheader()
        w.writerows(all_rows)
    os.replace(tmp, out / "results.csv")
    figures = {}
    if plots:
        for name, entries in table.items():
            if any(c["mean"] is not None for _, c in entries):
                plot_contrast(study, name, entries, out / "plots" / f"sweep_{name}.png")
                figures[name] = f"plots/sweep_{name}.png"
    lines = sweep_report_lines(study, table, figures)
    tmp = out / "report.md.tmp"
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, out / "report.md")
    for name, entries in table.items():
        for line in sentences(study, name, entries):
            log(line)
    return out / "report.md"

def _run_locked(study: StudyConfig, jobs: list[Job], out: Path, log: Callable[[str], None], progress: bool) -> Path:
    write_study_dir(study, jobs, out)
    log(f"study {study.name}: {len(study.arms)} arms × {len(study.seeds)} seeds = {len(jobs)} runs → {out}")
    prepare_shared(jobs, log, progress=progress)
    status = launch(jobs, study.launcher, out, log, progress=progress)
    for name, err in status.items():
        if err != "ok":
            log(f"run {name} failed: {err}")
    path, lines = summarize(study, jobs, status, out)
    for line in lines:
        log(line)
    return path


def rebuild_report(study_dir: Path, log: Callable[[str], None] = print) -> Path:
    """`normgrow report STUDY_DIR`: results.csv, report.md and plots from what is on disk."""
    study = load_study(str(study_dir / "study.yaml"))
    if study.sweep.axes:
        plan = sweep_plan(study, study_dir)
        status = {}
        for _, sub_dir, jobs in plan:
            if (sub_dir / "results.csv").is_file():
                failed = {r["arm"] + "-s" + r["seed"]: r["error"] for r in read_results(sub_dir / "results.csv")
                          if r["status"] == "failed"}
                status.update({j.name: failed[j.name.split("/", 1)[1]] for j in jobs
                               if j.name.split("/", 1)[1] in failed})
        return summarize_sweep(study, plan, status, study_dir, log)
    jobs = plan_jobs(study, study_dir)
    previous = {}
    if (study_dir / "results.csv").is_file():
        previous = {f"{r['arm']}-s{r['seed']}": r["error"] for r in read_results(study_dir / "results.csv")
                    if r["status"] == "failed"}
    path, lines = summarize(study, jobs, previous, study_dir)
    for line in lines:
        log(line)
    return path
