"""`normgrow evaluate STUDY_DIR`: lm-evaluation-harness on every finished arm × seed's export, the per-item results
kept, and per task each arm's score and each contrast paired over seeds with its interval, in the report beside
`val/ce`.

    STUDY_DIR/evaluate/
      tasks/normgrow_continuation.{yaml,jsonl}   the local task, made from the study's validation split
      exports/<job>/                             each run's export (`normgrow export`)
      runs/<job>/<task>.json                     lm_eval's metrics for the task and the key they were computed under
      runs/<job>/<task>.samples.jsonl            its per-item records: doc id, target, responses, metrics
      runs/<job>/lm_eval.log                     what lm_eval wrote to stderr (progress bars, warnings)
      summary.csv                                task, metric, arm, seed, value: what the report reads

The local task (offline: hub tasks cannot be downloaded here) is multiple choice over the study's own held-out text:
a context of CONTEXT tokens from the validation split and four continuations of CONTINUATION tokens — its own and
those of three other items — scored by lm_eval's log-likelihood of each (`acc`). It is made from the tokens of the
first arm's data config, deterministically: the same study gives the same bytes. A GPU user passes the harness's own
tasks by name (docs/paper-scale.md). Each (export, task) result is keyed by the task's definition (its YAML and data
hashes, or the harness's task name and version), lm_eval's version, the batch size and the item limit: a key that
changed is evaluated again, a matching one is read back.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import json
import random
from pathlib import Path

from normgrow import atomic
from normgrow.config import RunConfig
from normgrow.data import prepare
from normgrow.errors import ConfigError, NormgrowError
from normgrow.parallel.dist import pick_device
from normgrow.run.export import export_damage, export_record, export_student, run_source
from normgrow.study.config import EvaluateConfig, StudyConfig
from normgrow.study.engine.stats import estimate, paired
from normgrow.study.record import RunRecord, verified_results
from normgrow.train.rundir import RunDir

LOCAL_TASK = "normgrow_continuation"
ITEMS, CONTEXT, CONTINUATION, CHOICES = 200, 32, 8, 4
FIELDS = ["task", "metric", "arm", "seed", "value", "source"]  # source: the export's (export.source_id)


def local_task(study_dir: Path, cfg) -> Path:
    """The local task's folder (tasks/, its YAML and JSONL) for this study; written once, then the same bytes."""
    folder = study_dir / "evaluate" / "tasks"
    data = folder / f"{LOCAL_TASK}.jsonl"
    if not data.is_file():
        prep = prepare(cfg, log=lambda *_: None)
        val, span = prep.val, CONTEXT + CONTINUATION
        if len(val) < ITEMS * span:
            raise NormgrowError(
                f"evaluate: the validation split has {len(val):,} tokens; the local task needs {ITEMS * span:,}"
            )
        stride = len(val) // ITEMS
        pieces = [[int(t) for t in val[i * stride : i * stride + span]] for i in range(ITEMS)]
        rng, rows = random.Random(0), []
        for i, piece in enumerate(pieces):
            others = [pieces[(i + j) % ITEMS][CONTEXT:] for j in range(1, CHOICES)]
            label = rng.randrange(CHOICES)
            conts = others[:label] + [piece[CONTEXT:]] + others[label:]
            rows.append(
                {
                    "context": prep.tokenizer.decode(piece[:CONTEXT]),
                    "choices": [prep.tokenizer.decode(c) for c in conts],
                    "label": label,
                }
            )
        folder.mkdir(parents=True, exist_ok=True)
        atomic.write_text(data, "".join(json.dumps(r) + "\n" for r in rows))
    yaml = (
        f"task: {LOCAL_TASK}\n"
        "dataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {json.dumps(str(data.resolve()))}\n"
        "test_split: test\n"
        "output_type: multiple_choice\n"
        "doc_to_text: context\n"
        "doc_to_choice: choices\n"
        "doc_to_target: label\n"
        'target_delimiter: ""\n'
        "metric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n"
        "metadata:\n  version: 1\n"
    )
    atomic.write_text(folder / f"{LOCAL_TASK}.yaml", yaml)
    return folder


def task_key(task: str, include: list[Path], batch_size: int, limit: int | None) -> str:
    """What a result depends on besides the export: the task's files when it is defined in an include folder (its
    YAML and the JSONL it reads), else its name and the harness's version; the batch size and the limit."""
    import lm_eval

    h = hashlib.sha256(json.dumps([task, lm_eval.__version__, batch_size, limit]).encode())
    for folder in include:
        for name in (f"{task}.yaml", f"{task}.jsonl"):
            if (folder / name).is_file():
                h.update((folder / name).read_bytes())
    return h.hexdigest()[:16]


def _model_args(export: Path) -> dict:
    """lm_eval's `hf` model on an export: float32, and remote code where the placement is not a stock Qwen3."""
    model_type = json.loads((export / "config.json").read_text()).get("model_type")
    return {"pretrained": str(export), "dtype": "float32", "trust_remote_code": model_type == "normgrow"}


@contextlib.contextmanager
def quiet_git():
    """lm_eval records the git commit of the working directory by running `git describe` with its stderr on ours:
    outside a repository every evaluation ended with git's "fatal: not a git repository". The same call, its stderr
    discarded, while lm_eval evaluates (its result, a hash or None, unchanged)."""
    import subprocess

    from lm_eval import evaluator

    def commit() -> str | None:
        try:
            return subprocess.check_output(["git", "describe", "--always"], stderr=subprocess.DEVNULL).strip().decode()
        except (subprocess.CalledProcessError, FileNotFoundError):
            return None

    before = evaluator.get_git_commit_hash
    evaluator.get_git_commit_hash = commit
    try:
        yield
    finally:
        evaluator.get_git_commit_hash = before


@contextlib.contextmanager
def output_to(log: Path):
    """The process's stderr (file descriptor 2: lm_eval's and datasets' progress bars, its logging, warnings from C
    code) appended to `log` while lm_eval runs, so that normgrow's output stays its own; restored afterwards, also
    when lm_eval raises."""
    import os
    import sys

    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    with open(log, "ab") as f:
        os.dup2(f.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


def evaluate_export(
    export: Path,
    tasks: list[str],
    include: list[Path],
    batch_size: int,
    limit: int | None,
    device: str,
    log: Path | None = None,
) -> dict:
    """lm_eval.simple_evaluate on one export: {task: (metrics, samples)}; lm_eval's own output into `log` if given."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    local = all(any((f / f"{t}.yaml").is_file() for f in include) for t in tasks)
    manager = TaskManager(include_path=[str(f) for f in include], include_defaults=not local)
    unknown = [t for t in tasks if t not in manager.all_tasks]
    if unknown:
        raise NormgrowError(
            f"evaluate --tasks: {', '.join(unknown)}: not among lm_eval's tasks or the include paths' "
            "(offline, a hub task's data must already be in the datasets cache)"
        )
    with quiet_git(), output_to(log) if log else contextlib.nullcontext():
        res = lm_eval.simple_evaluate(
            model="hf",
            model_args=_model_args(export),
            tasks=tasks,
            task_manager=manager,
            batch_size=batch_size,
            limit=limit,
            device=device,
            log_samples=True,
        )
    if res is None:  # lm_eval returns None on ranks other than 0
        return {}
    out = {}
    for task in tasks:
        samples = [
            {k: s[k] for k in ("doc_id", "target", "filtered_resps", *s["metrics"]) if k in s}
            for s in res["samples"][task]
        ]
        out[task] = (res["results"][task], samples)
    return out


def evaluate_study(
    study_dir: Path,
    tasks: list[str],
    include: list[Path] = (),  # type: ignore[assignment]
    batch_size: int = 8,
    limit: int | None = None,
    device: str = "cpu",
    log=print,
) -> Path:
    """Export and evaluate every finished run the study's statistics use; write summary.csv. Returns its path."""
    records = [r for r in verified_results(study_dir) if r.ok and r.kept]
    if not records:
        raise NormgrowError(f"{study_dir}: no finished runs to evaluate")
    root = study_dir / "evaluate"
    include = [Path(f) for f in include]
    if LOCAL_TASK in tasks:
        include = [local_task(study_dir, _first_config(records)), *include]
    rows: list[dict] = []
    exports = [current_export(study_dir, r, root, log) for r in records]  # every export verified before any score
    for i, (r, (export, source)) in enumerate(zip(records, exports, strict=True)):
        done = root / "runs" / r.job
        key = {t: f"{task_key(t, include, batch_size, limit)}-{source}" for t in tasks}  # the export's scores only
        todo = [t for t in tasks if _stored(done, t) != key[t]]
        if todo:
            log(f"evaluate: {r.job} ({i + 1} of {len(records)}): {', '.join(todo)}")
            scored = evaluate_export(export, todo, include, batch_size, limit, device, done / "lm_eval.log")
            for task, (metrics, samples) in scored.items():
                done.mkdir(parents=True, exist_ok=True)
                atomic.write_text(done / f"{task}.samples.jsonl", "".join(json.dumps(s) + "\n" for s in samples))
                atomic.write_text(done / f"{task}.json", json.dumps({"key": key[task], "metrics": metrics}, indent=1))
        for task in tasks:
            metrics = json.loads((done / f"{task}.json").read_text())["metrics"]
            rows += [
                {"task": task, "metric": m.split(",")[0], "arm": r.arm, "seed": r.seed, "value": v, "source": source}
                for m, v in metrics.items()
                if "," in m and "_stderr" not in m and isinstance(v, int | float)
            ]
    path = root / "summary.csv"
    with atomic.atomic_open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    log(f"evaluate: {len(records)} run(s) × {len(tasks)} task(s) → {path}")
    return path


def current_export(study_dir: Path, r: RunRecord, root: Path, log=print) -> tuple[Path, str]:
    """The run's export for scoring, and its source id, made from the run's current checkpoint and verified: an
    export that is missing is made; one made from an earlier training of the run (retrained since), from before
    exports recorded their source, or whose files no longer match their recorded hashes (damaged, cut) is set aside
    with the run's scores (evaluate/stale/<time>/, never mixed with the current ones) and made again; where the run
    has no checkpoint left to make it from, that is one line."""
    export, run_dir = root / "exports" / r.job, study_dir / r.run_dir
    source = run_source(run_dir)
    if export.exists():
        record = export_record(export) or {}
        if record.get("source") is None:
            why = "was made before exports recorded the checkpoint they came from"
        elif source is not None and record["source"] != source:
            why = "was made from an earlier training of the run (retrained since)"
        else:
            damage = export_damage(export)
            if damage is None:
                return export, record["source"]
            why = f"does not verify: {damage}"
        if source is None:
            raise NormgrowError(f"{export}: {why}, and its run {run_dir} has no checkpoint to export again from")
        aside = set_aside(root, r.job)
        log(f"evaluate: the export of {r.job} {why}; set aside with its scores in {aside}, exported again")
    export_student(run_dir, export)
    made = export_record(export)
    assert made is not None  # export_student just wrote it
    return export, made["source"]


def set_aside(root: Path, job: str) -> Path:
    """A job's export and scores moved to evaluate/stale/<UTC time>/ (kept for inspection, read by nothing)."""
    import datetime
    import os

    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    aside = root / "stale" / stamp
    for part in ("exports", "runs"):
        if (root / part / job).exists():
            (aside / part).mkdir(parents=True, exist_ok=True)
            os.rename(root / part / job, aside / part / job)
    return aside


def _stored(done: Path, task: str) -> str | None:
    try:
        return json.loads((done / f"{task}.json").read_text())["key"]
    except (OSError, ValueError, KeyError):
        return None


def _first_config(records: list[RunRecord]) -> RunConfig:
    r = records[0]
    assert r.study_dir is not None  # verified_results reads records with their study directory
    return RunDir(r.study_dir / r.run_dir).config()


def read_summary(study_dir: Path) -> tuple[dict[tuple[str, str], dict[str, dict[int, float]]], int]:
    """summary.csv's current scores as {(task, metric): {arm: {seed: value}}} (empty when the study was never
    evaluated), and how many rows it left out: scores of an export that is not of the run's current checkpoint
    (the run retrained since `normgrow evaluate` ran), or rows from before scores recorded their export. A run whose
    checkpoints are not on disk (a study archived without them) is read as the file says."""
    path = study_dir / "evaluate" / "summary.csv"
    if not path.is_file():
        return {}, 0
    now = {}
    for r in verified_results(study_dir):
        if r.ok and r.kept:
            now[(r.arm, r.seed)] = run_source(study_dir / r.run_dir)
    out: dict = {}
    stale = 0
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            want = now.get((row["arm"], int(row["seed"])))
            if not row.get("source") or (want is not None and row["source"] != want):
                stale += 1
                continue
            out.setdefault((row["task"], row["metric"]), {}).setdefault(row["arm"], {})[int(row["seed"])] = float(
                row["value"]
            )
    return out, stale


def downstream_section(study: StudyConfig, study_dir: Path) -> list[str]:
    """The report's "Downstream tasks": per task and metric, each arm's mean over seeds with its 95% interval and
    each contrast (b − a, paired over seeds) with its own; descriptive, outside the claims."""
    scores, stale = read_summary(study_dir)
    if not scores and not stale:
        return []
    L = [
        "## Downstream tasks (lm-evaluation-harness)",
        "",
        "Each finished run's export scored by lm-evaluation-harness (`normgrow evaluate`; per-item results in "
        "`evaluate/runs/`). Means over seeds with 95% t-intervals; contrasts are b − a paired over seeds (for an "
        "accuracy, positive = b scores higher). Descriptive: no claim reads them.",
        "",
    ]
    if stale:
        L += [
            f"**{stale} score(s) left out**: of an export that is not the run's current checkpoint (the run was "
            f"retrained after `normgrow evaluate` ran) or recorded before scores named their export; run "
            f"`normgrow evaluate {study_dir}` again to score the current runs.",
            "",
        ]
    for (task, metric), arms in sorted(scores.items()):
        L += [f"**{task}** — `{metric}`", "", "| arm | n | mean | 95% CI |", "|---|---|---|---|"]
        for arm, values in arms.items():
            e = estimate(list(values.values()))
            L.append(f"| {arm} | {e.n} | {e.mean:.4f} | {'±' + format(e.half, '.4f') if e.half is not None else '—'} |")
        rows = [(name, pair) for name, pair in study.contrasts.items() if pair[0] in arms and pair[1] in arms]
        if rows:
            L += ["", "| contrast | b − a | n | 95% CI |", "|---|---|---|---|"]
            for name, (a, b) in rows:
                c = paired(a, b, arms[a], arms[b])
                half = "—" if c.est.half is None else f"[{c.est.lo:+.4f}, {c.est.hi:+.4f}]"
                mean = "—" if c.est.mean is None else f"{c.est.mean:+.4f}"
                L.append(f"| {name} ({b} − {a}) | {mean} | {c.est.n} | {half} |")
        L.append("")
    return L


def settings(
    cfg: EvaluateConfig, tasks: str | None, include: list[Path], batch_size: int | None, limit, device
) -> dict:
    """`evaluate_study`'s arguments: the command line's where given, else the study's `evaluate:` section (tasks
    default to the local one); refused in one line when lm-evaluation-harness is not installed."""
    import importlib.util

    if importlib.util.find_spec("lm_eval") is None:
        raise NormgrowError(
            "evaluate: lm-evaluation-harness is not installed (`make setup`, or pip install 'normgrow[eval]')"
        )
    names = [t.strip() for t in tasks.split(",") if t.strip()] if tasks else cfg.tasks or [LOCAL_TASK]
    dev = device or cfg.device
    if dev == "auto":
        import torch

        dev = "cuda" if torch.cuda.is_available() else "cpu"
    if dev != "cpu":  # a device this machine lacks: one line now, not lm-eval's AssertionError later
        try:
            pick_device(dev)
        except ConfigError as e:
            field = "--device" if device else "evaluate.device"
            raise ConfigError(f"{field}: {str(e).removeprefix('train.device: ')}") from None
    return {
        "tasks": names,
        "include": [*map(Path, cfg.include_path), *include],
        "batch_size": batch_size or cfg.batch_size,
        "limit": limit if limit is not None else cfg.limit,
        "device": dev,
    }
