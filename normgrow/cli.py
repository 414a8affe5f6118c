"""The `normgrow` command line: one console script, one subcommand per verb.

    normgrow prepare [CONFIG] [key=value …]   corpus → tokenizer → token shards (cached)
    normgrow model   [CONFIG] [key=value …]   the student's shapes and parameter counts
    normgrow config  [CONFIG] [key=value …]   the fully resolved config as YAML (--fields: every field's help)

CONFIG is a preset name from configs/ (`tiny`, `default`) or a YAML path; with none, the built-in
defaults. Every error a user can cause prints one line, `normgrow: error: …`, and exits with 2.
"""

from __future__ import annotations

import argparse
import sys
import time

from normgrow import __version__
from normgrow.errors import NormgrowError


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
    from normgrow.config import load_config

    config, overrides = _split_config_and_overrides(args)
    return load_config(config, overrides)


def cmd_config(args: argparse.Namespace) -> None:
    from normgrow.config import describe_fields, to_yaml

    if args.fields:
        for key, default, doc in describe_fields():
            print(f"{key:40s} {default:>14s}  {doc}")
        return
    print(to_yaml(_load(args)), end="")


def cmd_prepare(args: argparse.Namespace) -> None:
    from normgrow.data import prepare

    cfg = _load(args)
    t0 = time.perf_counter()
    prep = prepare(cfg, teacher_path=cfg.teacher.path)
    dt = time.perf_counter() - t0
    m = prep.meta
    print(f"{'reused cached' if prep.cache_hit else 'built'} token shards in {dt:.1f} s: {prep.dir}")
    print(f"  vocabulary {prep.vocab_size:,} (BOS id {prep.bos_id}); "
          f"train {m['train_documents']:,} documents / {m['train_tokens']:,} tokens; "
          f"val {m['val_documents']:,} documents / {m['val_tokens']:,} tokens")


def cmd_model(args: argparse.Namespace) -> None:
    import dataclasses

    from normgrow.config import resolved_head_dim
    from normgrow.model import Student, count_parameters

    cfg = _load(args)
    m = cfg.model
    if m.vocab_size is None:  # the tokenizer decides; preparing is cached after the first call
        from normgrow.data import prepare

        m = dataclasses.replace(m, vocab_size=prepare(cfg, teacher_path=cfg.teacher.path, log=lambda *_: None).vocab_size)
    student = Student(m)
    counts = count_parameters(student)
    hd = resolved_head_dim(m)
    print(f"student: norm={m.norm} n_layer={m.n_layer} d_model={m.d_model} n_head={m.n_head} "
          f"n_kv_head={m.n_kv_head} head_dim={hd} d_ff={m.d_ff} vocab={m.vocab_size} "
          f"final_norm={m.final_norm} tie_embeddings={m.tie_embeddings}")
    for name, p in student.named_parameters():
        if not name.startswith("layers.") or name.startswith("layers.0."):
            print(f"  {name:45s} {tuple(p.shape)}")
    if m.n_layer > 1:
        print(f"  (layers.1 … layers.{m.n_layer - 1}: as layers.0)")
    print(f"parameters: total {counts['total']:,} = embedding {counts['embedding']:,} + "
          f"{m.n_layer} blocks × {counts['per_block']:,} + final norm/LM head {counts['final_norm_and_head']:,}")
    print(f"init: {student.init_record()}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="normgrow", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"normgrow {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("prepare", help="corpus → tokenizer → token shards (cached)")
    _add_config_args(p)
    p.set_defaults(func=cmd_prepare)

    p = sub.add_parser("model", help="print the student's shapes and parameter counts")
    _add_config_args(p)
    p.set_defaults(func=cmd_model)

    p = sub.add_parser("config", help="print the fully resolved config")
    _add_config_args(p)
    p.add_argument("--fields", action="store_true", help="list every config field with its default and help")
    p.set_defaults(func=cmd_config)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except NormgrowError as e:
        print(f"normgrow: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("normgrow: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
