"""The run directory (docs/DESIGN.md §4.2): creating or reopening it, and the event logs written into it.

    config.yaml        the fully resolved config (vocabulary size and matched budgets filled in)
    metrics.jsonl      one object per event: step, tokens, compute counters, n_layer, stage, event, metrics
    diagnostics.jsonl  one object per diagnostics point (train/diagnostics.py)
    checkpoints/       step_XXXXXXXX/ directories, written atomically (train/checkpoint.py)
    summary.json       final metrics, compute totals, one entry per stage, vocabulary and init records
    tensorboard/       with train.loggers=[tensorboard]: a mirror of metrics.jsonl

A run directory holds one run: reopening it with a different config (other than where it runs and
how a step is laid out in memory: the fields config/fields.py marks `resume=True`) is an error. Only rank 0
writes here.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import types
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from normgrow import atomic
from normgrow.config import RunConfig, load_config, resume_may_differ, save_config, to_dict
from normgrow.errors import ConfigError, NormgrowError, disk_full, no_space

CONFIG, SUMMARY, METRICS, DIAGNOSTICS, CHECKPOINTS = (
    "config.yaml", "summary.json", "metrics.jsonl", "diagnostics.jsonl", "checkpoints"
)  # fmt: skip
RECOMPUTED = "diagnostics-recomputed.jsonl"  # `normgrow diagnose`: the diagnostics recomputed from the checkpoints
Summary = Mapping[str, Any]  # a run's summary.json as read: frozen all the way down


def freeze(obj: Any) -> Any:
    """A JSON value made read-only: objects become read-only mappings, lists tuples."""
    if isinstance(obj, dict):
        return types.MappingProxyType({k: freeze(v) for k, v in obj.items()})
    if isinstance(obj, list):
        return tuple(freeze(v) for v in obj)
    return obj


@dataclass(frozen=True)
class RunDir:
    """A run's directory: the one module that knows its files' names, and reads and writes them (rank 0 writes).
    Everything else — the loop, export, plots, diagnose, the study's records — goes through it."""

    path: Path

    @property
    def config_file(self) -> Path:
        return self.path / CONFIG

    @property
    def summary_file(self) -> Path:
        return self.path / SUMMARY

    @property
    def metrics_file(self) -> Path:
        return self.path / METRICS

    @property
    def diagnostics_file(self) -> Path:
        return self.path / DIAGNOSTICS

    @property
    def checkpoints(self) -> Path:
        return self.path / CHECKPOINTS

    def checkpoint(self, step: int) -> Path:
        return self.checkpoints / f"step_{step:08d}"

    def is_run(self) -> bool:
        """Does it hold a run (its resolved config)?"""
        return self.config_file.is_file()

    def has_trained(self) -> bool:
        """Does it hold a run that has written anything beyond its config (events, a checkpoint, a summary)?"""
        return self.is_run() and any(p.exists() for p in (self.metrics_file, self.checkpoints, self.summary_file))

    def require(self) -> RunDir:
        """Itself, or a one-line error if it holds no run."""
        if not self.is_run():
            raise NormgrowError(f"{self.path}: not a run directory (no {CONFIG})")
        return self

    def config(self) -> RunConfig:
        return load_config(str(self.config_file))

    def config_or_none(self) -> RunConfig | None:
        return self.config() if self.is_run() else None

    def summary(self) -> Summary | None:
        """summary.json, frozen; None if there is none or it is unreadable (cut or edited)."""
        found = read_summary(self.path)
        return None if found is None else freeze(found)

    def has_summary_file(self) -> bool:
        return self.summary_file.is_file()

    def metrics(self) -> list[dict]:
        return read_jsonl(self.metrics_file)

    def diagnostics(self) -> list[dict]:
        return read_jsonl(self.diagnostics_file)

    def write_summary(self, summary: dict) -> None:
        write_json(self.summary_file, summary)

    def steps_logged(self) -> int:
        """The step of the last event in metrics.jsonl, read from the file's tail (0 without one): a progress bar's
        view of a run another process is writing."""
        try:
            with open(self.metrics_file, "rb") as f:
                f.seek(max(0, self.metrics_file.stat().st_size - 4096))
                last = f.read().decode(errors="replace").strip().splitlines()[-1]
            return int(json.loads(last)["step"])
        except (ValueError, IndexError, KeyError, OSError):
            return 0

    def write_recomputed(self, lines: list[str]) -> None:
        """`normgrow diagnose`'s output: one JSON line per checkpoint, beside diagnostics.jsonl."""
        atomic.write_text(self.path / RECOMPUTED, "".join(line + "\n" for line in lines))

    def append_diagnostics(self, record: dict) -> None:
        append_jsonl(self.diagnostics_file, record)

    def clear_logs(self) -> None:
        """A fresh start: no events of an earlier attempt."""
        self.metrics_file.unlink(missing_ok=True)
        self.diagnostics_file.unlink(missing_ok=True)

    def keep_events(self, metrics_lines: int, diagnostics_lines: int) -> None:
        """Keep the events written before the checkpoint being resumed (truncate_jsonl's rule)."""
        truncate_jsonl(self.metrics_file, metrics_lines)
        truncate_jsonl(self.diagnostics_file, diagnostics_lines)


def config_differences(a: dict, b: dict, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two config dicts."""
    keys = []
    for k in sorted(set(a) | set(b)):
        key = f"{prefix}{k}"
        if isinstance(a.get(k), dict) and isinstance(b.get(k), dict):
            keys += config_differences(a[k], b[k], key + ".")
        elif a.get(k) != b.get(k):
            keys.append(key)
    return keys


def check_same_run(out: Path, cfg: RunConfig) -> None:
    """Raise unless the run directory's saved config is `cfg`, up to the fields config/fields.py declares may differ on
    resume (`resume_may_differ`: where it runs, how a step is laid out in memory)."""
    old = RunDir(out).config()
    may_differ = resume_may_differ()
    differ = [k for k in config_differences(to_dict(old), to_dict(cfg)) if k not in may_differ]
    if differ:
        raise ConfigError(
            f"{out}: holds a run with a different config ({', '.join(differ[:3])}"
            f"{' …' if len(differ) > 3 else ''}); choose another output directory"
        )


def open_run_dir(out: Path, cfg: RunConfig) -> bool:
    """Create the run directory, or check that an existing one holds the same run. True = resume."""
    saved = RunDir(out).config_file
    if saved.is_file():
        check_same_run(out, cfg)
        return True
    if out.is_dir() and any(out.iterdir()):  # a fresh run clears metrics.jsonl: never in someone else's folder
        raise ConfigError(f"{out}: not empty and not a normgrow run directory (no config.yaml); choose a new -o")
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise ConfigError(f"{out}: cannot write the run directory ({e.strerror})") from None
    save_config(cfg, saved)
    return False


def truncate_jsonl(path: Path, n_lines: int) -> None:
    """Keep the first `n_lines` events: those written before the checkpoint being resumed. Fewer than that
    (the file deleted or cut since) is an error: resuming would silently lose the missing events."""
    lines = path.read_text().splitlines() if path.is_file() else []
    if len(lines) < n_lines:
        raise NormgrowError(
            f"{path}: holds {len(lines)} events but the checkpoint being resumed was taken after "
            f"{n_lines}; it was cut or deleted — restore it, or start the run over in a new directory"
        )
    atomic.write_text(path, "".join(line + "\n" for line in lines[:n_lines]))


def write_json(path: Path, obj) -> None:
    """Write a JSON file atomically (temp file, then rename)."""
    atomic.write_text(path, json.dumps(obj, indent=1))


def append_jsonl(path: Path, record: dict) -> None:
    line = json.dumps(record) + "\n"
    try:
        with open(path, "a") as f:
            f.write(line)
    except OSError as e:
        if no_space(e):
            raise disk_full(path, len(line)) from None
        raise


LOGGER_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb", "trackio": "trackio"}


def check_loggers(cfg: RunConfig) -> None:
    """The packages train.loggers needs, checked before the run directory is created."""
    for name in cfg.train.loggers:
        if importlib.util.find_spec(LOGGER_PACKAGES[name]) is None:
            raise ConfigError(
                f"train.loggers: '{name}' needs the {LOGGER_PACKAGES[name]} package "
                f"(pip install {LOGGER_PACKAGES[name]}, or pip install -e .[loggers])"
            )


def wandb_run_id(out: Path) -> str:
    """One W&B run per run directory, the same across resumes: its name plus a hash of its absolute path
    (the arms of two studies share names such as post-grow-s0 and must not resume each other's W&B run)."""
    path = str(Path(out).resolve())
    return f"{Path(path).name}-{hashlib.sha256(path.encode()).hexdigest()[:8]}"


def _numeric(record: dict) -> dict:
    """The metrics of an event (keys such as train/loss, val/ce, grow/max_dlogit) that a dashboard plots."""
    return {k: v for k, v in record.items() if "/" in k and isinstance(v, (int, float)) and not isinstance(v, bool)}


class MetricsWriter:
    """Appends events to metrics.jsonl (rank 0), mirrored to TensorBoard / W&B when configured.

    The optional sinks are imported here, not at the top of the module: they are optional extras
    whose presence `check_loggers` verified before the run directory was created."""

    def __init__(self, out: Path, cfg: RunConfig, enabled: bool):
        self.path, self.enabled = RunDir(out).metrics_file, enabled
        self.lines = len(self.path.read_text().splitlines()) if enabled and self.path.is_file() else 0
        self.tb = self.wandb = self.trackio = None
        if not enabled:
            return
        if "tensorboard" in cfg.train.loggers:
            from torch.utils.tensorboard import SummaryWriter

            # rebuilt from metrics.jsonl each time the run (re)starts, so that after a resume it holds exactly
            # the events of metrics.jsonl: none of those a killed attempt wrote after its last checkpoint
            shutil.rmtree(out / "tensorboard", ignore_errors=True)
            self.tb = SummaryWriter(str(out / "tensorboard"))
            if self.path.is_file():
                for line in self.path.read_text().splitlines():
                    self._to_tensorboard(json.loads(line))
        if "wandb" in cfg.train.loggers:
            import wandb

            os.environ.setdefault("WANDB_MODE", "offline")  # offline-safe unless the user opts in
            t = cfg.train
            self.wandb = wandb.init(
                project="normgrow",
                name=cfg.name or out.name,
                dir=str(out),
                config=to_dict(cfg),
                resume="allow",
                id=wandb_run_id(out),
                group=t.track_group or None,
                job_type=t.track_job_type or None,
                tags=t.track_tags or None,
            )
        if "trackio" in cfg.train.loggers:
            self.trackio = _trackio_run(out, cfg)

    def write(self, record: dict) -> None:
        if not self.enabled:
            return
        append_jsonl(self.path, record)
        self.lines += 1
        if self.tb is not None:
            self._to_tensorboard(record)
        if self.wandb is not None:
            self.wandb.log({**_numeric(record), "tokens": record["tokens"]}, step=record["step"])
        if self.trackio is not None:
            self.trackio.log({**_numeric(record), "tokens": record["tokens"]}, step=record["step"])

    def _to_tensorboard(self, record: dict) -> None:
        assert self.tb is not None  # write calls this only with a writer
        for k, v in _numeric(record).items():
            self.tb.add_scalar(k, v, record["tokens"])

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()
        if self.trackio is not None:
            self.trackio.finish()


def _trackio_run(out: Path, cfg: RunConfig):
    """A local Trackio run in Trackio's own database (TRACKIO_DIR, default under HF_HOME: one dashboard for every
    run), named as the W&B run and grouped as it is; a resumed run directory continues the run of its name."""
    import trackio

    return trackio.init(
        project="normgrow",
        name=wandb_run_id(out),
        config={**to_dict(cfg), "job_type": cfg.train.track_job_type, "tags": cfg.train.track_tags},
        group=cfg.train.track_group or None,
        resume="allow",
    )


def log_once(out: Path, loggers: list[str], group: str, values: dict, config: dict) -> None:
    """One tracker run for a directory (a study's summary): `values` (numbers) logged at step 0 and set as the W&B
    run's summary, `config` beside them; job type `study-summary`, in `group`. Its id is the directory's
    (wandb_run_id), so a second call updates that run instead of adding one."""
    if "wandb" in loggers:
        import wandb

        os.environ.setdefault("WANDB_MODE", "offline")
        run = wandb.init(
            project="normgrow", name=f"{group} summary", dir=str(out), config=config, resume="allow",
            id=wandb_run_id(out), group=group, job_type="study-summary", tags=["study-summary"],
        )  # fmt: skip
        run.log(values, step=0)
        run.summary.update(values)
        run.finish()
    if "trackio" in loggers:
        import trackio

        local = trackio.init(
            project="normgrow", name=wandb_run_id(out), group=group, resume="allow",
            config={**config, "job_type": "study-summary"},
        )  # fmt: skip
        local.log(values, step=0)
        local.finish()


def read_summary(run_dir: Path) -> dict | None:
    """A run's summary.json, or None if it has none (or an unreadable one)."""
    try:
        return json.loads((Path(run_dir) / SUMMARY).read_text())
    except (OSError, ValueError):
        return None


def read_jsonl(path: Path) -> list[dict]:
    """The events of a metrics.jsonl / diagnostics.jsonl (empty if there is none); a line that is not JSON
    (a cut or edited file) is a one-line error naming the file and line."""
    if not path.is_file():
        return []
    rows = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        try:
            rows.append(json.loads(line))
        except ValueError:
            raise NormgrowError(f"{path}: line {i} is not valid JSON (cut or edited?)") from None
    return rows
