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

Statistics (`aggregate`): per arm mean, sd and a 95% t-interval over seeds; each contrast (a, b)
as the paired difference b − a over the seeds both finished, with its t-interval; with one seed
the report says no interval is available rather than printing a zero-width one.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Optional

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from normgrow import dist
from normgrow.config import RunConfig, _omegaconf_message, _read_yaml, load_config, to_yaml
from normgrow.errors import ConfigError

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
class LauncherConfig:
    kind: Literal["inline", "local", "submitit"] = "local"
    """inline: one after another in this process; local: parallel subprocesses; submitit: SLURM (or its local executor)."""
    parallel: int = 1
    """Jobs at once for the local launcher (and the submitit array parallelism)."""
    threads: Optional[int] = None
    """CPU threads per job; null = the machine's cores / parallel (oversubscribed CPU threads stall torch)."""
    cluster: Optional[str] = None
    """submitit cluster: null = auto (SLURM if present), 'slurm', 'local' or 'debug'."""
    parameters: dict[str, Any] = field(default_factory=dict)
    """submitit executor parameters, e.g. {timeout_min: 120, slurm_partition: gpu, gpus_per_node: 1}."""
    torchrun_nproc: int = 1
    """Processes per job: >1 launches each run with torchrun (data parallel)."""


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


def study_path(name_or_path: str) -> Path:
    import importlib.resources

    p = Path(name_or_path)
    if p.is_dir() and (p / "study.yaml").is_file():
        return p / "study.yaml"
    if p.suffix in (".yaml", ".yml") or os.sep in name_or_path:
        if not p.is_file():
            raise ConfigError(f"{name_or_path}: study file not found")
        return p
    root = importlib.resources.files("normgrow.configs") / "studies"
    cand = root / f"{name_or_path}.yaml"
    if not cand.is_file():
        names = sorted(q.name[:-5] for q in root.iterdir() if q.name.endswith(".yaml"))
        raise ConfigError(f"{name_or_path}: no such study preset (presets: {', '.join(names)}) and no such file")
    return Path(str(cand))


def study_preset_names() -> list[str]:
    import importlib.resources

    root = importlib.resources.files("normgrow.configs") / "studies"
    return sorted(q.name[:-5] for q in root.iterdir() if q.name.endswith(".yaml"))


def load_study(name_or_path: Optional[str] = None, overrides: list[str] = ()) -> StudyConfig:
    """Study preset/file ← overrides. Keys under a run-config section (model., train., …) become
    run overrides for every arm; the others (seeds=…, launcher.parallel=…) set study fields."""
    merged = OmegaConf.structured(StudyConfig)
    path = study_path(name_or_path or "default")
    try:
        merged = OmegaConf.merge(merged, OmegaConf.create(_read_yaml(path)))
    except OmegaConfBaseException as e:
        raise ConfigError(_omegaconf_message(e, str(path))) from None
    run_over = []
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override '{item}': expected key=value")
        if item.startswith(RUN_SECTIONS):
            run_over.append(item)
            continue
        try:
            merged = OmegaConf.merge(merged, OmegaConf.from_dotlist([item]))
        except OmegaConfBaseException as e:
            raise ConfigError(_omegaconf_message(e, f"override '{item}'")) from None
    study = OmegaConf.to_object(merged)
    study = dataclasses.replace(study, overrides=list(study.overrides) + run_over)
    validate_study(study)
    return study


def validate_study(s: StudyConfig) -> None:
    def need(ok: bool, key: str, msg: str) -> None:
        if not ok:
            raise ConfigError(f"{key}: {msg}")

    need(len(s.arms) > 0, "arms", "a study needs at least one arm")
    need(len(s.seeds) > 0 and len(set(s.seeds)) == len(s.seeds), "seeds", f"need distinct seeds, got {s.seeds}")
    need(s.budget_scale > 0, "budget_scale", f"must be positive, got {s.budget_scale}")
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


# ----------------------------------------------------------------------------- jobs


@dataclass
class Job:
    arm: str
    seed: int
    cfg: RunConfig
    config_path: Path
    run_dir: Path

    @property
    def name(self) -> str:
        return f"{self.arm}-s{self.seed}"

    @property
    def finished(self) -> bool:
        return (self.run_dir / "summary.json").is_file()


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
            jobs.append(Job(arm, seed, cfg, out / "configs" / f"{name}.yaml", out / "runs" / name))
    return jobs


def write_study_dir(study: StudyConfig, jobs: list[Job], out: Path) -> None:
    """study.yaml and the job configs; an existing study dir must hold the same study."""
    text = OmegaConf.to_yaml(OmegaConf.structured(study), sort_keys=False)
    saved = out / "study.yaml"
    if saved.is_file():
        old = saved.read_text()
        if old != text:
            old_s = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(StudyConfig), OmegaConf.create(old)))
            differ = [f.name for f in dataclasses.fields(StudyConfig)
                      if getattr(old_s, f.name) != getattr(study, f.name) and f.name != "launcher"]
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
    """Default teacher, tokenizer and token shards, once per distinct (data, teacher) before any job."""
    from normgrow.data import prepare
    from normgrow.errors import NormgrowError
    from normgrow.teacher import resolve_teacher_path

    seen = set()
    for job in jobs:
        key = (json.dumps(dataclasses.asdict(job.cfg.data), sort_keys=True), json.dumps(dataclasses.asdict(job.cfg.teacher)))
        if key in seen:
            continue
        seen.add(key)
        try:
            path = resolve_teacher_path(job.cfg, log=log)
            prep = prepare(job.cfg, teacher_path=path, log=log)
            if job.cfg.teacher.cache and not job.cfg.teacher.cache_path:  # one teacher pass for the whole study
                from normgrow import cache
                from normgrow.teacher import load_teacher
                from normgrow.train import resolve_config

                cfg = resolve_config(job.cfg, prep)
                teacher = load_teacher(path, cfg.teacher.dtype, dist.setup(cfg.train.device).device,
                                       prep.vocab_size, prep.vocab_size)
                cache.build(cfg, path, prep, teacher, log=log)
        except NormgrowError as e:  # the affected jobs fail on their own, with this error in their logs
            log(f"shared preparation for {job.name} failed: {e}")


def _threads(launcher: LauncherConfig) -> int:
    if launcher.threads:
        return launcher.threads
    return max(1, (os.cpu_count() or 1) // (launcher.parallel * launcher.torchrun_nproc))


def job_command(job: Job, launcher: LauncherConfig, threads: int) -> list[str]:
    run_args = ["run", str(job.config_path), "-o", str(job.run_dir), "--no-progress", f"train.threads={threads}"]
    if launcher.torchrun_nproc > 1:
        return [sys.executable, "-m", "torch.distributed.run", "--standalone",
                f"--nproc_per_node={launcher.torchrun_nproc}", "-m", "normgrow.cli", *run_args]
    return [sys.executable, "-m", "normgrow.cli", *run_args]


def _last_error(log_path: Path) -> str:
    if not log_path.is_file():
        return "failed (no log)"
    lines = [line for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
    errs = [line for line in lines if line.startswith("normgrow: error:") or "Error" in line]
    return (errs or lines or ["failed"])[-1][:300]


def _steps_done(job: Job) -> int:
    """Steps a job has logged so far (for the study's progress bar)."""
    path = job.run_dir / "metrics.jsonl"
    if not path.is_file():
        return 0
    try:
        with open(path, "rb") as f:
            f.seek(max(0, path.stat().st_size - 4096))
            last = f.read().decode(errors="replace").strip().splitlines()[-1]
        return int(json.loads(last)["step"])
    except (ValueError, IndexError, KeyError, OSError):
        return 0


def run_jobs(jobs: list[Job], launcher: LauncherConfig, out: Path, log: Callable[[str], None],
             progress: bool = True) -> dict[str, str]:
    """Run every unfinished job; returns {job name: "ok" | error line}."""
    from tqdm import tqdm

    from normgrow.curriculum import plan_stages

    status = {j.name: "ok" for j in jobs if j.finished}
    todo = [j for j in jobs if not j.finished]
    if status:
        log(f"{len(status)} of {len(jobs)} runs already finished: skipped")
    if not todo:
        return status
    total = {j.name: sum(p.steps for p in plan_stages(j.cfg)) for j in todo}
    bar = tqdm(total=sum(total.values()), unit="step", desc="study", disable=not progress, dynamic_ncols=True,
               file=sys.stderr)
    threads = _threads(launcher)

    def refresh(extra: str = "") -> None:
        bar.n = sum(total[j.name] if j.finished else min(_steps_done(j), total[j.name]) for j in todo)
        done = sum(1 for j in todo if j.name in status)
        bar.set_postfix_str(f"runs {done}/{len(todo)}{extra}")
        bar.refresh()

    if launcher.kind == "inline":
        from normgrow.train import run

        for job in todo:
            refresh(f" · {job.name}")
            try:
                run(job.cfg, job.run_dir, log=lambda *_: None, progress=False)
                status[job.name] = "ok"
            except Exception as e:  # noqa: BLE001 - a failing arm is reported, the others go on
                status[job.name] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
    elif launcher.kind == "local":
        queue, running = list(todo), {}  # name → (job, process, log file)
        while queue or running:
            while queue and len(running) < launcher.parallel:
                job = queue.pop(0)
                logf = open(out / "logs" / f"{job.name}.log", "a")
                env = {**os.environ, "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false"}
                proc = subprocess.Popen(job_command(job, launcher, threads), stdout=logf, stderr=subprocess.STDOUT, env=env)
                running[job.name] = (job, proc, logf)
            for name, (job, proc, logf) in list(running.items()):
                rc = proc.poll()
                if rc is not None:
                    logf.close()
                    status[name] = "ok" if rc == 0 and job.finished else _last_error(out / "logs" / f"{name}.log")
                    del running[name]
            refresh()
            time.sleep(0.5)
    else:
        import submitit

        ex = submitit.AutoExecutor(folder=str(out / "submitit"), cluster=launcher.cluster)
        params = dict(launcher.parameters)
        if ex.cluster != "debug":
            params.setdefault("timeout_min", 24 * 60)
            params.setdefault("cpus_per_task", threads * launcher.torchrun_nproc)
        ex.update_parameters(**params)
        futures = [(job, ex.submit(_run_command, job_command(job, launcher, threads),
                                   str(out / "logs" / f"{job.name}.log"), threads)) for job in todo]
        while futures:
            for job, fut in list(futures):
                if fut.done():
                    try:
                        rc = fut.result()
                        status[job.name] = "ok" if rc == 0 and job.finished else _last_error(out / "logs" / f"{job.name}.log")
                    except Exception as e:  # noqa: BLE001 - the job's failure is recorded
                        status[job.name] = f"submitit: {str(e).splitlines()[0] if str(e) else type(e).__name__}"[:300]
                    futures.remove((job, fut))
            refresh()
            time.sleep(1.0)
    refresh()
    bar.close()
    return status


def _run_command(cmd: list[str], log_path: str, threads: int) -> int:
    """What a submitit job executes: the same `normgrow run` subprocess the local launcher uses."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false"}
    with open(log_path, "a") as f:
        return subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env).returncode


# ----------------------------------------------------------------------------- aggregation

T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
       12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}


def t95(df: int) -> float:
    """Two-sided 95% Student-t quantile (tabulated; ≥ 30 degrees of freedom use 1.96 → 2.042 steps)."""
    if df in T95:
        return T95[df]
    keys = sorted(T95)
    for a, b in zip(keys, keys[1:]):
        if a < df < b:
            return T95[b]  # the next tabulated df: a slightly conservative interval
    return 1.96


def mean_ci(values: list[float]) -> dict:
    """mean, sd, and the half-width of a 95% t-interval (None with fewer than two values)."""
    n = len(values)
    if n == 0:
        return {"n": 0, "mean": None, "sd": None, "ci95": None}
    mean = sum(values) / n
    if n < 2:
        return {"n": 1, "mean": mean, "sd": None, "ci95": None}
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return {"n": n, "mean": mean, "sd": sd, "ci95": t95(n - 1) * sd / math.sqrt(n)}


FIELDS = ["arm", "seed", "status", "norm", "curriculum", "preset", "val_ce", "val_kl", "val_nll", "val_teacher_entropy",
          "tokens", "active_layer_tokens", "trainable_layer_tokens", "flops", "steps", "wall_time_s", "run_dir", "error"]


def collect(study: StudyConfig, jobs: list[Job], status: dict[str, str]) -> list[dict]:
    rows = []
    for job in jobs:
        row = {k: "" for k in FIELDS}
        row.update(arm=job.arm, seed=job.seed, norm=job.cfg.model.norm, preset=study.arms[job.arm].preset or study.base,
                   curriculum="-".join(str(s.n_layer) for s in job.cfg.curriculum.stages),
                   run_dir=str(job.run_dir.relative_to(job.run_dir.parent.parent)))
        st = status.get(job.name)
        if job.finished:
            s = json.loads((job.run_dir / "summary.json").read_text())
            row.update(status="ok", val_ce=s.get("val/ce", ""), val_kl=s.get("val/kl", ""), val_nll=s.get("val/nll", ""),
                       val_teacher_entropy=s.get("val/teacher_entropy", ""), wall_time_s=round(s["wall_time_s"], 1),
                       **{k: s["compute"][k] for k in ("tokens", "active_layer_tokens", "trainable_layer_tokens", "flops")},
                       steps=s["compute"]["step"])
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


def _ok(rows: list[dict], arm: str) -> dict[int, dict]:
    return {int(r["seed"]): r for r in rows if r["arm"] == arm and r["status"] == "ok"}


def aggregate(study: StudyConfig, rows: list[dict], study_dir: Path) -> dict:
    """Every number the report shows, computed from results.csv rows and the run directories."""
    arms = {}
    for arm in study.arms:
        ok = _ok(rows, arm)
        arms[arm] = {"val_ce": mean_ci([float(r["val_ce"]) for r in ok.values() if r["val_ce"] != ""]),
                     "val_nll": mean_ci([float(r["val_nll"]) for r in ok.values() if r["val_nll"] != ""]),
                     "failed": sorted(int(r["seed"]) for r in rows if r["arm"] == arm and r["status"] != "ok"),
                     "compute": {k: (sum(float(r[k]) for r in ok.values()) / len(ok) if ok else None)
                                 for k in ("tokens", "active_layer_tokens", "trainable_layer_tokens", "flops")}}
    contrasts = {}
    for name, (a, b) in study.contrasts.items():
        ra, rb = _ok(rows, a), _ok(rows, b)
        seeds = sorted(set(ra) & set(rb))
        diffs = [float(rb[s]["val_ce"]) - float(ra[s]["val_ce"]) for s in seeds]
        contrasts[name] = {"a": a, "b": b, "seeds": seeds, "diffs": diffs, **mean_ci(diffs)}
    ratio = None
    if study.gap_ratio:
        x, y = (contrasts[c]["mean"] for c in study.gap_ratio)
        ratio = abs(x) / abs(y) if x is not None and y not in (None, 0) else None
    return {"arms": arms, "contrasts": contrasts, "gap_ratio": ratio, "phase": phase_table(study, rows, study_dir)}


def phase_table(study: StudyConfig, rows: list[dict], study_dir: Path) -> Optional[dict]:
    """val/ce of the two phase arms at the end of every stage (and just after each growth), per seed,
    their paired differences b − a, and the stage where the leader changes (the crossover)."""
    if not study.phase:
        return None
    a, b = study.phase
    ra, rb = _ok(rows, a), _ok(rows, b)
    seeds = sorted(set(ra) & set(rb))
    if not seeds:
        return {"a": a, "b": b, "rows": [], "crossover": None, "seeds": []}

    def stages(r: dict) -> list[dict]:
        return json.loads((study_dir / r["run_dir"] / "summary.json").read_text())["stages"]

    per_seed = {s: (stages(ra[s]), stages(rb[s])) for s in seeds}
    n_stages = min(len(x) for pair in per_seed.values() for x in pair)
    out = []
    for k in range(n_stages):
        for point in (["start", "end"] if k > 0 else ["end"]):
            va = [per_seed[s][0][k][point]["val/ce"] for s in seeds]
            vb = [per_seed[s][1][k][point]["val/ce"] for s in seeds]
            diff = mean_ci([y - x for x, y in zip(va, vb)])
            out.append({"stage": k, "point": "after growth" if point == "start" else "stage end",
                        "n_layer": per_seed[seeds[0]][0][k]["n_layer"], "a": sum(va) / len(va), "b": sum(vb) / len(vb),
                        "diff": diff, "leader": b if diff["mean"] < 0 else a})
    ends = [r for r in out if r["point"] == "stage end"]
    crossover = None
    for prev, cur in zip(ends, ends[1:]):
        if cur["leader"] != prev["leader"]:
            crossover = {"stage": cur["stage"], "n_layer": cur["n_layer"], "from": prev["leader"], "to": cur["leader"]}
            break
    return {"a": a, "b": b, "rows": out, "crossover": crossover, "seeds": seeds}


# ----------------------------------------------------------------------------- the whole study


def run_study(study: StudyConfig, out: Path, log: Callable[[str], None] = print, progress: bool = True) -> Path:
    """Plan, prepare shared work, launch the jobs, aggregate, report. Returns report.md's path."""
    from normgrow.report import write_report

    jobs = plan_jobs(study, out)
    write_study_dir(study, jobs, out)
    log(f"study {study.name}: {len(study.arms)} arms × {len(study.seeds)} seeds = {len(jobs)} runs → {out}")
    prepare_shared(jobs, log)
    status = run_jobs(jobs, study.launcher, out, log, progress=progress)
    failed = {k: v for k, v in status.items() if v != "ok"}
    for name, err in failed.items():
        log(f"run {name} failed: {err}")
    rows = collect(study, jobs, status)
    write_results(rows, out / "results.csv")
    return write_report(study, rows, aggregate(study, rows, out), out)


def rebuild_report(study_dir: Path) -> Path:
    """`normgrow report STUDY_DIR`: results.csv, report.md and plots from what is on disk."""
    from normgrow.report import write_report

    study = load_study(str(study_dir / "study.yaml"))
    jobs = plan_jobs(study, study_dir)
    previous = {}
    if (study_dir / "results.csv").is_file():
        previous = {f"{r['arm']}-s{r['seed']}": r["error"] for r in read_results(study_dir / "results.csv")
                    if r["status"] == "failed"}
    rows = collect(study, jobs, previous)
    write_results(rows, study_dir / "results.csv")
    return write_report(study, rows, aggregate(study, rows, study_dir), study_dir)
