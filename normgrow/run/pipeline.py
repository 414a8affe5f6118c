"""Orchestration: the commands that combine components — build a run's inputs, run, build the
default teacher, build a teacher cache, diagnose a run from its checkpoints.

    teacher path ──► prepare (corpus → tokenizer → shards) ──► resolve config (vocabulary, matched
    (default one      budget) ──► load teacher ──► teacher cache (if asked) ══► RunInputs ──► train
     built if missing)

`build_inputs` is the one place a run's inputs are assembled; the CLI, studies, diagnostics and
the benchmarks all call it. Components below this module (data, teacher, cache, train, …) never
call back up here; the default teacher is itself a run (`run` of the `teacher` preset with no
teacher of its own), which is why building it lives here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import typing
from collections.abc import Callable
from pathlib import Path

import torch
from omegaconf import OmegaConf
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from normgrow import atomic
from normgrow.config import DataConfig, RunConfig, load_config
from normgrow.config.schema import teacher_key_view
from normgrow.data import (
    Prepared,
    cache_root,
    corpus_sha256,
    n_sequences,
    prepare,
    probe_batch,
    tokenizer_hash,
    train_pool,
)
from normgrow.errors import ConfigError, NormgrowError
from normgrow.locks import DirLock
from normgrow.machine import dtypes
from normgrow.machine.costs import student_state_bytes, teacher_bytes
from normgrow.machine.hardware import available_memory
from normgrow.nn.model import parameters_of
from normgrow.parallel import dist
from normgrow.parallel.dist import pick_device
from normgrow.run.budget import match_budget
from normgrow.run.export import export_student
from normgrow.teacher import cache
from normgrow.teacher.load import DEFAULT_TEACHER, NO_TEACHER, TeacherError, load_teacher, unigram_nll
from normgrow.train import checkpoint
from normgrow.train.diagnostics import diagnose, make_probe, max_difference
from normgrow.train.loop import RunInputs, train
from normgrow.train.rundir import RunDir, check_same_run, read_summary
from normgrow.train.stages import check_pool_repeats, student_at_stage

Log = Callable[[str], None]


def quiet(*_) -> None:
    """A log function that drops everything."""


# ----------------------------------------------------------------------------- a run's inputs


def teacher_path(cfg: RunConfig, log: Log = print, build: bool = True, progress: bool = True) -> str | None:
    """teacher.path → a loadable path or hub id (None for `none`), building the default teacher if missing."""
    if build and cfg.teacher.path == "default" and not (default_teacher_dir(cfg) / "normgrow_teacher.json").is_file():
        build_default_teacher(cfg, log=log, progress=progress)
    return resolve_teacher_path(cfg)


def prepare_data(
    cfg: RunConfig, log: Log = print, build_teacher: bool = True, progress: bool = True
) -> tuple[str | None, Prepared]:
    """The teacher's path (the default teacher decides the tokenizer when data.tokenizer=teacher) and the
    token shards, built and cached if missing."""
    path = teacher_path(cfg, log=log, build=build_teacher, progress=progress)
    return path, prepare(cfg, teacher_path=path, log=log)


def resolve_config(cfg: RunConfig, prep: Prepared) -> RunConfig:
    """Fill in what the data decides (the vocabulary size); a mismatch is an error."""
    v = prep.vocab_size
    if cfg.model.vocab_size is not None and cfg.model.vocab_size != v:
        raise ConfigError(f"model.vocab_size: {cfg.model.vocab_size} differs from the tokenizer's {v} tokens")
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, vocab_size=v))


def build_inputs(
    cfg: RunConfig,
    info: dist.DistInfo | None = None,
    log: Log = print,
    progress: bool = True,
    build_teacher: bool = True,
    open_cache: bool = True,
) -> RunInputs:
    """Everything a run consumes: data, resolved config, teacher, teacher cache, device.

    Under torchrun, rank 0 builds what is shared (default teacher, shards, cache) while the others
    wait, then every rank opens it. Nothing is written to the run directory here, so a bad teacher
    or config leaves nothing behind."""
    info = info or dist.setup(cfg.train.device)
    say = log if info.is_main else quiet
    cfg = dtypes.resolve_run(cfg, info, cache_root(cfg.data), say)
    if info.is_main:
        path, prep = prepare_data(cfg, log=say, build_teacher=build_teacher, progress=progress)
    dist.barrier()
    if not info.is_main:
        path, prep = prepare_data(cfg, log=say, build_teacher=False)
    if cfg.teacher.path == "default" and path is not None:
        check_default_teacher_tokenizer(Path(path), prep)
    cfg = resolve_config(cfg, prep)
    cfg, budget = match_budget(cfg)
    if budget is not None:
        say(
            f"budget matched by {budget['by']} to {budget['source']}: target {budget['target']:,.0f}, "
            f"this run {budget['planned']:,.0f} ({budget['planned'] / budget['target'] - 1:+.4%})"
        )
    check_memory(cfg, info.device, info.world_size)
    check_pool(cfg, prep)
    teacher = None
    if path is not None:
        assert cfg.model.vocab_size is not None  # resolve_config filled it in
        teacher = load_teacher(
            path,
            cfg.teacher.dtype,
            info.device,
            prep.vocab_size,
            cfg.model.vocab_size,
            cfg.data.seq_len,
            shard=cfg.teacher.sharding == "fsdp" and info.world_size > 1,
        )
    inputs = RunInputs(cfg, info, prep, teacher, None, budget)
    if open_cache and (cfg.teacher.cache or cfg.teacher.cache_path):  # training reads it; validation stays online
        assert path is not None  # validate: a cache needs a teacher
        inputs.cache = teacher_cache(inputs, path, log=say, progress=progress)
    return inputs


def check_memory(cfg: RunConfig, device: torch.device, world: int = 1) -> None:
    """Refuse, before allocating anything, a student (and teacher) whose weights and optimizer state alone —
    float32 weights, gradients and AdamW's two moments, 16 bytes a parameter, plus the teacher's weights, each
    divided over the ranks where sharded — exceed the memory free on the device: a lower bound, so no run that
    fits is refused."""
    free = available_memory(device)
    if free is None:
        return
    student = parameters_of(cfg.model)
    need = sum(student_state_bytes(cfg, world).values()) + teacher_bytes(cfg, world)  # the cost model's terms
    if need > free:
        m = cfg.model
        raise ConfigError(
            f"model: a student of {student:,} parameters (model.d_model={m.d_model}, "
            f"model.n_layer={m.n_layer}, vocabulary {m.vocab_size:,}) needs at least {need / 2**30:,.1f} "
            f"GiB for its weights, gradients and optimizer state, and {device.type} has "
            f"{free / 2**30:,.1f} GiB free"
        )


def check_pool(cfg: RunConfig, prep: Prepared) -> None:
    """The training pool against the split it is cut from (data.train_pool_sequences at most the split's
    sequences), and the run's epochs over it against data.max_pool_repeats."""
    n = n_sequences(prep.train, cfg.data.seq_len)
    pool = train_pool(n, cfg.data.train_pool_sequences)
    check_pool_repeats(cfg, n if pool is None else len(pool))


def check_default_teacher_tokenizer(teacher_dir: Path, prep: Prepared) -> None:
    """The default teacher predicts ids of the tokenizer it was trained with: a run whose tokenizer differs
    (a cache edited by hand, a teacher copied between corpora) would score it on the wrong ids."""
    info = json.loads((teacher_dir / "normgrow_teacher.json").read_text())
    want, have = info.get("tokenizer_sha256"), tokenizer_hash(prep.tokenizer)
    if want is not None and want != have:
        raise TeacherError(
            f"teacher.path: the default teacher {teacher_dir} was trained with tokenizer "
            f"{want[:12]}, but this run's tokenizer is {have[:12]} (data.tokenizer: use 'teacher', "
            "or delete that teacher so that it is rebuilt for this corpus)"
        )


def teacher_cache(inputs: RunInputs, path: str, log: Log = print, progress: bool = True) -> cache.TeacherCache:
    """The run's verified teacher cache: an explicit teacher.cache_path, or the keyed one (built if missing)."""
    cfg = inputs.cfg
    if cfg.teacher.cache_path:
        return cache.open_cache_dir(Path(cfg.teacher.cache_path), cache.expected_meta(cfg, path, inputs.prep))
    assert inputs.teacher is not None  # build_inputs loaded it from `path`
    cache.build(cfg, path, inputs.prep, inputs.teacher, inputs.info, log=log, progress=progress)
    return cache.open_cache(cfg, path, inputs.prep)


def build_cache(cfg: RunConfig, log: Log = print, progress: bool = True) -> Path:
    """`normgrow teacher cache`: one teacher pass over the training split (resumable, split over torchrun ranks)."""
    if cfg.teacher.path == NO_TEACHER:
        raise ConfigError("teacher.path: 'none' has no teacher to cache")
    inputs = build_inputs(cfg, log=log, progress=progress, open_cache=False)
    path = teacher_path(cfg, build=False)
    assert path is not None and inputs.teacher is not None  # teacher.path is not 'none' here
    return cache.build(inputs.cfg, path, inputs.prep, inputs.teacher, inputs.info, log=log, progress=progress)


# ----------------------------------------------------------------------------- runs


def finished_summary(cfg: RunConfig, out: Path, log: Log = print) -> dict | None:
    """The summary of a finished run of this config in `out` (None if not finished; an error if `out`
    holds a different run)."""
    run_dir = RunDir(out)
    if not (run_dir.has_summary_file() and run_dir.is_run()):
        return None
    saved = run_dir.config()  # resolved: compare with this config resolved the same way
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, vocab_size=saved.model.vocab_size))
    check_same_run(out, match_budget(cfg)[0])
    summary = read_summary(out)
    if summary is None:  # damaged since it was written (writes are atomic): rebuilt by resuming the final checkpoint
        log(f"{run_dir.summary_file} is unreadable; rebuilding it from the run's last checkpoint")
    return summary


def run(cfg: RunConfig, out_dir: str | Path, log: Log = print, progress: bool = True) -> dict:
    """Train (or resume) one run into `out_dir`; returns its summary."""
    info = dist.setup(cfg.train.device)
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    out = Path(out_dir)
    cfg = dtypes.keep_saved(cfg, out)
    done = finished_summary(cfg, out, log if info.is_main else quiet)
    if done is not None:
        (log if info.is_main else quiet)(f"{out}: already finished")
        return done
    inputs = build_inputs(cfg, info, log=log, progress=progress)
    return train(inputs, out, log=log, progress=progress)


# ----------------------------------------------------------------------------- the default teacher


def default_teacher_config(cfg: RunConfig) -> RunConfig:
    """The default teacher's own run: the `teacher` preset trained on the student's data config."""
    base = load_config(cfg.teacher.default_preset)
    if base.train.dtype == "auto":  # resolved by the machine (not the student's choice): the key names the dtype
        dtype = dtypes.machine_dtype(pick_device(cfg.train.device), cache_root(cfg.data))[0]
        base = dataclasses.replace(base, train=dataclasses.replace(base.train, dtype=dtype))
    # the student's corpus, tokenizer, split and sequence length; evaluation sizes are the teacher preset's own,
    # so changing how a student is evaluated does not retrain its teacher; the teacher trains on the whole split,
    # never on a student's training pool (nor under its repeat bound)
    data = dataclasses.replace(
        cfg.data,
        tokenizer="bpe" if cfg.data.tokenizer == "teacher" else cfg.data.tokenizer,
        val_tokens=base.data.val_tokens,
        probe_sequences=base.data.probe_sequences,
        train_pool_sequences=DataConfig.train_pool_sequences,
        max_pool_repeats=DataConfig.max_pool_repeats,
    )
    return dataclasses.replace(base, data=data, teacher=dataclasses.replace(base.teacher, path=NO_TEACHER))


def default_teacher_key(cfg: RunConfig) -> str:
    """Hash of the default teacher's training recipe: its resolved config as the key sees it, which each field
    declares in config/fields.py (`Meaning`: key-free fields at their defaults, fields added later left out at their
    old behaviour), so that a setting which cannot change the teacher's weights does not retrain it."""
    recipe = teacher_key_view(default_teacher_config(cfg))
    return hashlib.sha256(OmegaConf.to_yaml(OmegaConf.create(recipe), sort_keys=False).encode()).hexdigest()[:16]


def default_teacher_dir(cfg: RunConfig) -> Path:
    """Where the default teacher of this recipe and corpus is cached (built by pipeline.build_default_teacher):
    named by the recipe's key and the corpus's content hash, so a corpus edited in place gets a teacher of
    its own instead of the one trained on the old text."""
    corpus = corpus_sha256(default_teacher_config(cfg).data)
    return cache_root(cfg.data) / "teachers" / f"default-{default_teacher_key(cfg)}-{corpus[:12]}"


def resolve_teacher_path(cfg: RunConfig) -> str | None:
    """teacher.path → a loadable path or hub id; None for `none`. The default teacher must be built
    (pipeline.teacher_path builds it when missing)."""
    path = cfg.teacher.path
    if path == NO_TEACHER:
        return None
    if path != DEFAULT_TEACHER:
        return path
    out = default_teacher_dir(cfg)
    if not (out / "normgrow_teacher.json").is_file():
        raise TeacherError(f"teacher.path: the default teacher for this data config is not built yet ({out})")
    return str(out)


# ----------------------------------------------------------------------------- the default teacher


def build_default_teacher(cfg: RunConfig, log: Log = print, progress: bool = True) -> Path:
    """Train the default teacher with next-token CE, export it (HF Qwen3 + tokenizer), cache it."""
    out = default_teacher_dir(cfg)
    if (out / "normgrow_teacher.json").is_file():
        return out
    # one builder at a time: a second process (another run of a study, another user of a shared cache) waits for
    # the first's teacher instead of failing on its busy run directory
    with DirLock(out.parent / f"{out.name}.build", "default-teacher build", wait_s=teacher_wait_s(), on_wait=log):
        if (out / "normgrow_teacher.json").is_file():
            return out
        return _build_default_teacher(cfg, out, log, progress)


def teacher_wait_s() -> float:
    """How long a second builder of a default teacher waits for the first: $NORMGROW_TEACHER_WAIT_S, else 6 h."""
    raw = os.environ.get("NORMGROW_TEACHER_WAIT_S", "21600")
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise ConfigError(f"NORMGROW_TEACHER_WAIT_S: expected seconds (a finite number ≥ 0), got {raw!r}")
    return value


def _build_default_teacher(cfg: RunConfig, out: Path, log: Log, progress: bool) -> Path:
    tcfg = default_teacher_config(cfg)
    log(f"building the default teacher (once per data config; cached in {out})")
    run_dir = out.parent / f"{out.name}.run"  # the teacher's training run (resumable if interrupted)
    try:
        summary = run(tcfg, run_dir, log=log, progress=progress)
    except NormgrowError as e:  # its fields are the teacher preset's, not the student's: say whose they are
        own = str(e).startswith(("data.val_tokens", "data.probe_sequences"))
        raise type(e)(
            f"the default teacher's run (preset '{cfg.teacher.default_preset}', teacher.default_preset): {e}"
            + (
                "; its evaluation sizes are that preset's own, not the student's: use a larger corpus or a "
                "teacher preset with smaller ones"
                if own
                else ""
            )
        ) from None
    prep = prepare(tcfg, teacher_path=None, log=quiet)
    unigram = unigram_nll(prep.train, prep.val, prep.vocab_size)

    def write(tmp: Path) -> None:  # published whole, or not at all (another process may publish it first)
        export_student(run_dir, tmp, tokenizer=prep.tokenizer)
        info = {
            "val/nll": summary["val/nll"],
            "unigram_val_nll": unigram,
            "corpus_sha256": corpus_sha256(tcfg.data),
            "tokenizer_sha256": tokenizer_hash(
                typing.cast(PreTrainedTokenizerFast, AutoTokenizer.from_pretrained(str(tmp)))
            ),
            "tokens": summary["compute"]["tokens"],
            "wall_time_s": summary["wall_time_s"],
            "config": dataclasses.asdict(tcfg),
        }
        (tmp / "normgrow_teacher.json").write_text(json.dumps(info, indent=1))

    atomic.publish_directory(out, write)
    log(f"default teacher: val NLL {summary['val/nll']:.4f} nats/token vs unigram baseline {unigram:.4f}")
    return out


# ----------------------------------------------------------------------------- diagnostics from checkpoints


def diagnose_run(run_dir: str | Path, log: Log = print) -> list[dict]:
    """Recompute the diagnostics of every saved checkpoint of a run and compare them with the values
    logged during training at the same step (`normgrow diagnose RUN_DIR`). Writes
    diagnostics-recomputed.jsonl next to diagnostics.jsonl; returns one comparison per checkpoint."""
    run_dir = Path(run_dir)
    run = RunDir(run_dir).require()
    cfg = run.config()
    ckpts = checkpoint.list_checkpoints(run.checkpoints)
    if not ckpts:
        raise NormgrowError(f"{run_dir}: has no checkpoints to diagnose")
    # the saved config is resolved (its stage budgets already matched): no second matching, no cache
    cfg = dataclasses.replace(cfg, curriculum=dataclasses.replace(cfg.curriculum, match_budget=None))
    try:
        inputs = build_inputs(
            cfg, dist.DistInfo(0, 1, 0, torch.device("cpu")), log=quiet, build_teacher=False, open_cache=False
        )
    except TeacherError as e:
        raise NormgrowError(f"{run_dir}: {e}") from None
    rows, _ = probe_batch(inputs.prep, cfg.data.probe_sequences, cfg.data.seq_len)
    probe = make_probe(rows, inputs.prep.token_classes, inputs.teacher)
    logged = {r["step"]: r for r in run.diagnostics() if r["event"] in ("stage_end", "interval", "dense")}
    results, out_lines = [], []
    for ckpt in ckpts:
        why = checkpoint.damage(ckpt)
        if why is not None:
            log(f"{ckpt.name}: skipped, {why}")
            continue
        weights, _, _, state = checkpoint.load(ckpt)
        model = student_at_stage(inputs.cfg, state["stage"])
        model.load_state_dict(weights)
        rec = diagnose(model, probe, cfg.diagnostics, cfg.distill.chunk_tokens)
        rec = {"step": state["step"], "tokens": state["tokens"], "n_layer": model.depth, "checkpoint": ckpt.name, **rec}
        out_lines.append(json.dumps(rec))
        cmp = {"step": state["step"], "checkpoint": ckpt.name, "logged": state["step"] in logged}
        if cmp["logged"]:
            cmp["max_abs_diff"], cmp["where"] = max_difference(rec, logged[state["step"]])
        results.append(cmp)
        log(
            f"{ckpt.name}: n_layer {model.depth}, probe CE {rec.get('probe_ce', float('nan')):.4f}, "
            + (
                f"max |recomputed − logged| {cmp['max_abs_diff']:.3g}"
                if cmp["logged"]
                else "no logged record at this step"
            )
        )
    run.write_recomputed(out_lines)
    return results
