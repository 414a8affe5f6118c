"""The `normgrow` command line: one console script, one subcommand per verb.

    normgrow study   [STUDY] [-o DIR] [key=value …]  the main job: all arms × seeds, then the report
    normgrow run     CONFIG [-o DIR] [key=value …]  one training run (resumes DIR if it exists)
    normgrow report  STUDY_DIR | RUN_DIR …          rebuild a study's report / plot runs side by side
    normgrow diagnose RUN_DIR                       recompute diagnostics from the checkpoints
    normgrow export  RUN_DIR -o DIR              the student in Hugging Face format
    normgrow teacher train [CONFIG] [key=value …]   build the default teacher for a data config
    normgrow prepare [CONFIG] [key=value …]   default teacher (if used) → corpus → tokenizer → token shards (cached)
    normgrow model   [CONFIG] [key=value …]   the student's shapes and parameter counts
    normgrow config  [CONFIG] [key=value …]   the fully resolved config as YAML (--fields: every field's help)
    normgrow plan    STUDY|CONFIG [options]    memory per device and device-hours, before running
    normgrow standin DIR                       a CPU stand-in for the paper's teacher and dataset, and its study command

CONFIG is a preset name from configs/ (`tiny`, `default`) or a YAML path; with none, the built-in
defaults. Every error a user can cause prints one line, `normgrow: error: …`, and exits with 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import shlex
import sys
import time
from pathlib import Path

import torch

from normgrow.config import RunConfig, load_config, resolved_head_dim, to_yaml
from normgrow.config.schema import describe_fields
from normgrow.data import cache_root
from normgrow.errors import NormgrowError, RunsFailed, Stopped, catch_stop_signals, os_error_line, restore_signals
from normgrow.flags import Parser, count, device, folder, fraction, names, new_folder, output, positive
from normgrow.nn.model import Student, count_parameters
from normgrow.registry import load_extensions
from normgrow.run.budget import match_budget
from normgrow.run.export import export_student
from normgrow.run.pipeline import build_cache, build_default_teacher, diagnose_run, prepare_data, quiet, run
from normgrow.run.plots import plot_runs
from normgrow.study.config import load_study, study_fields
from normgrow.study.launch import die_with_parent, forks, threads_per_job
from normgrow.study.plan import (
    describe,
    describe_fit,
    is_study,
    job_plan,
    pilot_lines,
    rate_of,
    recorded_rate,
    study_plan,
    vocab_of,
    wall_lines,
)
from normgrow.study.report.compare import compare_studies
from normgrow.study.report.downstream import evaluate_study, settings
from normgrow.study.runner import rebuild_report, run_study, unfinished_runs
from normgrow.teacher.load import non_embedding_parameters
from normgrow.teacher.standin import make_standin, study_overrides
from normgrow.train import rundir
from normgrow.train.rundir import RunDir
from normgrow.version import __version__

RUN_DIR = folder((rundir.CONFIG,), "a run directory")
RESUME = "; rerunning the same command resumes from the last checkpoint (finished runs are kept)"


def _resume_hint(args: argparse.Namespace) -> str:
    """The resume sentence, for the commands that train (and so resume)."""
    return RESUME if args.command in ("study", "run", "teacher") else ""


def _add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", nargs="?", default=None, help="preset name (configs/*.yaml) or YAML path")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides, e.g. model.norm=post")


def _split_config_and_overrides(args: argparse.Namespace) -> tuple[str | None, list[str]]:
    """argparse fills `config` with the first positional; if it is an override, it is one."""
    config, overrides = args.config, list(args.overrides)
    if config is not None and "=" in config:
        config, overrides = None, [config] + overrides
    return config, overrides


def _load(args: argparse.Namespace):
    config, overrides = _split_config_and_overrides(args)
    return load_config(config, overrides)


def _is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def cmd_config(args: argparse.Namespace) -> None:
    if args.fields or args.study:
        if args.config or args.overrides:
            given = " ".join([args.config or "", *args.overrides]).strip()
            raise NormgrowError(
                f"config --{'study' if args.study else 'fields'} lists every field; it takes no preset or overrides (got {given!r})"
            )
        for key, default, doc in study_fields() if args.study else describe_fields(RunConfig):
            print(f"{key:40s} {default:>14s}  {doc}")
        return
    print(to_yaml(_load(args)), end="")


def cmd_prepare(args: argparse.Namespace) -> None:
    cfg = _load(args)
    t0 = time.perf_counter()
    _, prep = prepare_data(cfg)
    dt = time.perf_counter() - t0
    m = prep.meta
    print(f"{'reused cached' if prep.cache_hit else 'built'} token shards in {dt:.1f} s: {prep.dir}")
    print(
        f"  vocabulary {prep.vocab_size:,} (BOS id {prep.bos_id}); "
        f"train {m['n_documents']['train']:,} documents / {m['n_tokens']['train']:,} tokens; "
        f"val {m['n_documents']['val']:,} documents / {m['n_tokens']['val']:,} tokens"
    )


def cmd_model(args: argparse.Namespace) -> None:
    cfg = _load(args)
    m = cfg.model
    if m.vocab_size is None:  # the tokenizer decides; preparing is cached after the first call
        _, prep = prepare_data(cfg, log=quiet)
        m = dataclasses.replace(m, vocab_size=prep.vocab_size)
    with torch.device("meta"):  # shapes and counts only: no memory, at any size
        student = Student(m)
    counts = count_parameters(student)
    hd = resolved_head_dim(m)
    print(
        f"student: norm={m.norm} n_layer={m.n_layer} d_model={m.d_model} n_head={m.n_head} "
        f"n_kv_head={m.n_kv_head} head_dim={hd} d_ff={m.d_ff} vocab={m.vocab_size} "
        f"final_norm={m.final_norm} tie_embeddings={m.tie_embeddings}"
        + (f" block_norms={','.join(m.block_norms)}" if m.block_norms else "")
    )
    for name, p in student.named_parameters():
        if not name.startswith("layers.") or name.startswith("layers.0."):
            print(f"  {name:45s} {tuple(p.shape)}")
    if m.n_layer > 1:
        print(
            f"  (layers.1 … layers.{m.n_layer - 1}: as layers.0{' with their own placements' if m.block_norms else ''})"
        )
    print(
        f"parameters: total {counts['total']:,} = embedding {counts['embedding']:,} + "
        f"{m.n_layer} blocks ({counts['blocks']:,}; block 0: {counts['per_block']:,}) + "
        f"final norm/LM head {counts['final_norm_and_head']:,}"
    )
    print(f"init: {student.init_record()}")
    teacher = non_embedding_parameters(cfg)
    if teacher is not None:  # the paper's capacity ratio: Qwen3-8B over its nine-block student, 49×
        own = counts["blocks"] + sum(p.numel() for p in student.norm.parameters())
        print(
            f"capacity: teacher {cfg.teacher.path} {teacher:,} non-embedding parameters / student {own:,} "
            f"(blocks and final norm) = {teacher / own:.1f}× (the paper's Qwen3-8B over its nine blocks: 49×)"
        )


def default_run_dir(cfg) -> str:
    name = cfg.name or "run"
    return f"runs/{name}-{cfg.model.norm}-s{cfg.seed}-{hashlib.sha256(to_yaml(cfg).encode()).hexdigest()[:6]}"


def cmd_run(args: argparse.Namespace) -> None:
    die_with_parent()
    cfg = _load(args)
    out = args.output or default_run_dir(cfg)
    summary = run(cfg, out, progress=not args.no_progress)
    if not _is_main_process():
        return
    if not args.no_plots:
        plot_runs([out], Path(out) / "plots")
    keys = [k for k in ("val/ce", "val/kl", "val/nll") if k in summary]
    print(
        f"{out}: "
        + ", ".join(f"{k} {summary[k]:.4f}" for k in keys)
        + f" after {summary['compute']['tokens']:,} tokens ({summary['wall_time_s']:.0f} s)"
    )


def cmd_export(args: argparse.Namespace) -> None:
    out = export_student(args.run_dir, args.output, force=args.force)
    print(f"exported {args.run_dir} → {out}")


def cmd_evaluate(args: argparse.Namespace) -> None:
    study_dir = Path(args.study_dir)
    study = load_study(str(study_dir / "study.yaml"))
    include = [Path(p) for p in args.include_path]
    evaluate_study(study_dir, **settings(study.evaluate, args.tasks, include, args.batch_size, args.limit, args.device))
    print(f"report: {rebuild_report(study_dir)}")


def cmd_diagnose(args: argparse.Namespace) -> None:
    results = diagnose_run(args.run_dir)
    worst = max((r["max_abs_diff"] for r in results if r["logged"]), default=None)
    print(
        f"{args.run_dir}: {len(results)} checkpoints diagnosed → diagnostics-recomputed.jsonl"
        + (f"; largest difference from the logged values {worst:.3g}" if worst is not None else "")
    )


def cmd_study(args: argparse.Namespace) -> None:
    config, overrides = _split_config_and_overrides(args)
    study = load_study(config, overrides)
    out = Path(args.output) if args.output else Path("studies") / study.name
    report = run_study(study, out, progress=not args.no_progress, force=args.force)
    print(f"report: {report}")
    failed = unfinished_runs(out)
    if failed:
        shown = ", ".join(failed[:5]) + (f" and {len(failed) - 5} more" if len(failed) > 5 else "")
        raise RunsFailed(
            f"{len(failed)} run{'s' if len(failed) > 1 else ''} of the study did not finish: {shown} "
            f"(errors in {out / 'results.csv'}); the report leaves them out, rerun the study to retry them"
        )


def cmd_report(args: argparse.Namespace) -> None:
    dirs = [Path(d) for d in args.dirs]
    if args.against:
        if len(dirs) != 1:
            raise NormgrowError("--against: give one study directory to compare")
        if Path(args.against).resolve() == Path(dirs[0]).resolve():
            raise NormgrowError(f"--against: {args.against} is the study itself; give another study to compare with")
        print("\n".join(compare_studies(Path(args.against), dirs[0])))
        return
    if len(dirs) == 1 and (dirs[0] / "study.yaml").is_file():
        print(f"report: {rebuild_report(dirs[0])}")
        return
    for d in dirs:
        RunDir(d).require()
    out = Path(args.output) if args.output else dirs[0] / "plots"
    for f in plot_runs(dirs, out).values():
        print(f)


def cmd_plan(args: argparse.Namespace) -> None:
    config, overrides = _split_config_and_overrides(args)
    rate = rate_of(args.tokens_per_hour, args.peak_tflops, args.mfu)
    if config is not None and is_study(config):
        study = load_study(config, overrides)
        jobs, cfgs = study_plan(study, args.world_size, args.fsdp)
        title = f"plan of study {study.name}: {len(jobs)} runs"
    else:
        cfg = load_config(config, overrides)
        cfgs = [
            match_budget(dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, vocab_size=vocab_of(cfg))))[0]
        ]
        jobs = [job_plan(cfg.name or "run", cfgs[0], args.world_size or 1, args.fsdp)]
        title = f"plan of run {cfg.name or config}"
    rate = recorded_rate(rate, cache_root(cfgs[0].data))  # a GPU's gpu_smoke.sh record, when there is one
    lines = describe(jobs, cfgs, rate, title)
    if args.device_memory:
        lines += ["", *describe_fit(jobs, cfgs, args.fsdp, args.device_memory)]
    if args.pilot:
        if config is None or not is_study(config):
            raise NormgrowError("--pilot: needs a study to plan (a study preset or YAML), not a run config")
        lines += ["", *pilot_lines(study, Path(args.pilot))]
    if not args.no_measure:
        forked = False
        if config is not None and is_study(config):
            parallel, threads, forked = study.launcher.parallel, threads_per_job(study.launcher), forks(study.launcher)
        else:
            parallel, threads = 1, cfgs[0].train.threads or torch.get_num_threads()
        lines += ["", *wall_lines(jobs, cfgs, parallel, threads, again=args.remeasure, forked=forked)]
    for line in lines:
        print(line)


def cmd_standin(args: argparse.Namespace) -> None:
    out = make_standin(args.dir, documents=args.documents)
    print(f"stand-in: {out}/teacher (Qwen3-8B-shaped, padded head) and {out}/dataset (FineWeb-Edu layout)")
    print("the paper's study on it (paths and sizes only; ≈ 30 min on 2 CPU cores):")
    print("  normgrow study paper -o studies/paper-standin " + " ".join(map(shlex.quote, study_overrides(out))))


def cmd_teacher_train(args: argparse.Namespace) -> None:
    out = build_default_teacher(_load(args), progress=not args.no_progress)
    print(f"default teacher: {out}")


def cmd_teacher_cache(args: argparse.Namespace) -> None:
    out = build_cache(_load(args), progress=not args.no_progress)
    if _is_main_process():
        print(f"teacher cache: {out}")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="normgrow", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"normgrow {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_run_commands(sub)
    _add_tool_commands(sub)
    return parser


def _add_run_commands(sub) -> None:
    """The verbs of the main path: a study, one run, and what is done with their directories afterwards."""
    p = sub.add_parser("study", help="the main job: every arm × seed of a study, then its report")
    p.add_argument(
        "config",
        nargs="?",
        default=None,
        help="study preset (configs/studies) or YAML; default: the built-in CPU study",
    )
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="study keys (seeds=[0,1], launcher.parallel=2) or run keys for every arm (train.lr=1e-3)",
    )
    p.add_argument("-o", "--output", type=output(), default=None, help="study directory (default: studies/<name>)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    force = "write the study into a non-empty folder that is not a study directory (its files of those names replaced)"
    p.add_argument("--force", action="store_true", help=force)
    p.set_defaults(func=cmd_study)

    p = sub.add_parser("run", help="one training run")
    _add_config_args(p)
    p.add_argument(
        "-o", "--output", type=output(), default=None, help="run directory (default: runs/<name>-<norm>-s<seed>-<hash>)"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--no-plots",
        action="store_true",
        help="no figures in the run directory (a study draws its own; `normgrow report RUN_DIR` draws them later)",
    )
    p.set_defaults(func=cmd_run)
    _add_directory_commands(sub)


def _add_directory_commands(sub) -> None:
    """The verbs that read a run's or a study's directory: export, diagnose, report."""
    p = sub.add_parser("export", help="write a run's student in Hugging Face format")
    p.add_argument("run_dir", type=RUN_DIR)
    p.add_argument(
        "-o",
        "--output",
        type=output(),
        required=True,
        help="output directory: new, empty, or a previous export of this run (replaced)",
    )
    p.add_argument("--force", action="store_true", help="replace a non-empty output directory normgrow did not write")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("evaluate", help="lm-evaluation-harness on every finished run of a study, into its report")
    p.add_argument("study_dir", type=folder(("study.yaml", "results.csv"), "a finished study directory"))
    p.add_argument(
        "--tasks",
        type=names(),
        default=None,
        help="comma-separated lm_eval task names (default: the study's evaluate.tasks, else normgrow_continuation)",
    )
    p.add_argument(
        "--include-path", type=folder(), action="append", default=[], help="a folder of task YAMLs (repeatable)"
    )
    p.add_argument("--batch-size", type=count(1), default=None, help="lm_eval batch size (default 8)")
    p.add_argument("--limit", type=count(1), default=None, help="at most this many items per task")
    p.add_argument("--device", type=device(), default=None, help="cpu, cuda, … (default: cuda when available)")
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("diagnose", help="recompute a run's diagnostics from its checkpoints")
    p.add_argument("run_dir", type=RUN_DIR)
    p.set_defaults(func=cmd_diagnose)

    p = sub.add_parser("report", help="rebuild a study's results and report, or plot runs side by side")
    p.add_argument(
        "dirs", nargs="+", type=folder(), metavar="DIR", help="a study directory, or one or more run directories"
    )
    p.add_argument(
        "-o", "--output", type=output(), default=None, help="output directory (default: RUN_DIR/plots of the first)"
    )
    p.add_argument(
        "--against",
        type=folder(("study.yaml", "results.csv"), "a finished study directory"),
        default=None,
        metavar="STUDY_DIR",
        help="compare the study's contrasts with those of another study (e.g. half the budget)",
    )
    p.set_defaults(func=cmd_report)


def _add_tool_commands(sub) -> None:
    """The verbs around runs: the teacher, data, model shapes, planning, the stand-in and the config."""
    p = sub.add_parser("teacher", help="the default teacher")
    tsub = p.add_subparsers(dest="teacher_command", required=True, metavar="ACTION")
    p = tsub.add_parser("train", help="train, export and cache the default teacher for a data config")
    _add_config_args(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_teacher_train)
    p = tsub.add_parser(
        "cache", help="build the teacher cache (top-k or sampled: teacher.cache_kind) of a config's training split"
    )
    _add_config_args(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_teacher_cache)

    p = sub.add_parser("prepare", help="corpus → tokenizer → token shards (cached)")
    _add_config_args(p)
    p.set_defaults(func=cmd_prepare)

    p = sub.add_parser("model", help="print the student's shapes and parameter counts")
    _add_config_args(p)
    p.set_defaults(func=cmd_model)

    _add_plan_command(sub)

    p = sub.add_parser("standin", help="write a CPU stand-in for the paper's teacher and dataset")
    p.add_argument("dir", type=new_folder(), help="new directory for the stand-in")
    p.add_argument("--documents", type=count(1), default=600, help="documents of the embedded corpus in its dataset")
    p.set_defaults(func=cmd_standin)

    p = sub.add_parser("config", help="print the fully resolved config")
    _add_config_args(p)
    p.add_argument("--fields", action="store_true", help="list every config field with its default and help")
    p.add_argument("--study", action="store_true", help="list every field of a study file instead (--fields implied)")
    p.set_defaults(func=cmd_config)


def _add_plan_command(sub) -> None:
    p = sub.add_parser("plan", help="memory per device and device-hours of a study or run, before running it")
    p.add_argument("config", nargs="?", default=None, help="study preset or YAML (or a run preset / YAML)")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides")
    p.add_argument(
        "--world-size",
        type=count(1),
        default=None,
        help="data-parallel ranks per run (default: the study's launcher.torchrun_nproc, or 1)",
    )
    p.add_argument(
        "--fsdp", action="store_true", help="the student's weights and optimizer state sharded over the ranks"
    )
    p.add_argument(
        "--device-memory",
        type=positive(),
        default=None,
        metavar="GIB",
        help="size gradient accumulation for devices of this memory: the largest micro-batch that fits",
    )
    p.add_argument(
        "--tokens-per-hour",
        type=positive(),
        default=None,
        help="measured training tokens per device-hour (benchmarks/gpu_smoke.sh); else from FLOPs",
    )
    p.add_argument(
        "--peak-tflops", type=positive(), default=989.0, help="device peak dense bf16 TFLOP/s (default: H100 SXM)"
    )
    p.add_argument("--mfu", type=fraction(), default=0.4, help="assumed fraction of the peak reached (default 0.4)")
    p.add_argument(
        "--pilot",
        type=folder(("study.yaml", "results.csv"), "a finished study directory"),
        default=None,
        metavar="DIR",
        help="a finished pilot study: what this study's seeds can resolve, from its per-seed sd",
    )
    timing = p.add_mutually_exclusive_group()
    timing.add_argument(
        "--no-measure",
        action="store_true",
        help="skip the wall-time prediction (it times a few training steps of each shape on this machine)",
    )
    timing.add_argument(
        "--remeasure", action="store_true", help="time the shapes again instead of reusing the cached probe"
    )
    p.set_defaults(func=cmd_plan)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    # Overrides may come after options (`run tiny -o DIR model.norm=post`): collect the leftovers.
    args, extra = parser.parse_known_args(argv)
    stray = [e for e in extra if e.startswith("-") or "=" not in e or not hasattr(args, "overrides")]
    if stray:
        parser.error(f"unrecognized arguments: {' '.join(stray)}")
    if extra:
        args.overrides = list(args.overrides) + extra
    previous = catch_stop_signals()
    try:
        load_extensions()
        args.func(args)
    except NormgrowError as e:
        print(f"normgrow: error: {e}", file=sys.stderr)
        return getattr(e, "exit_code", 2)
    except BrokenPipeError:  # the reader went away (`normgrow config --fields | head`): stop quietly, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as e:  # one place for the OS's errors on a path the user gave (or the cache): one line
        line = os_error_line(e)
        if line is None:
            raise
        print(f"normgrow: error: {line}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("normgrow: interrupted" + _resume_hint(args), file=sys.stderr)
        return 130
    except Stopped as e:
        print(f"normgrow: stopped by {e.name}" + _resume_hint(args), file=sys.stderr)
        return 128 + e.signum
    finally:
        restore_signals(previous)
    return 0


if __name__ == "__main__":
    sys.exit(main())
