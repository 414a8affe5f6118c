"""Semantic checks of a run config that its types cannot express: each raises a one-line ConfigError naming the
field (load.load_config calls `validate` on every config it builds). Typed against the dataclasses of fields.py."""

from __future__ import annotations

from normgrow import registry
from normgrow.config.fields import DataConfig, ModelConfig, RunConfig, TeacherConfig, TrainConfig
from normgrow.config.schema import check_numbers, need, non_negative, parse_train_blocks, positive
from normgrow.errors import ConfigError

# Placement names that are rules over positions rather than one block class (model.placement_of resolves them).
PLACEMENT_RULES = ("mixln",)


LOGGERS = ("tensorboard", "wandb", "trackio")


def resolved_head_dim(m: ModelConfig) -> int:
    return m.head_dim if m.head_dim is not None else m.d_model // m.n_head


# fields whose meaningful range ends well below FLOAT_LIMIT (their own checks below give the lower ends)
UPPER = {
    "seed": 2**32 - 1,
    "curriculum.stages.*.n_layer": 2**16,
    "model.n_layer": 2**16,
    "model.rope_theta": 1e12,
    "model.norm_eps": 1.0,
    "model.init_std": 10.0,
    "model.embed_init_std": 10.0,
    "model.dyt_alpha": 100.0,
    "model.boundary_scale": 1e3,
    "curriculum.new_block_lr": 1e3,
    "teacher.cache_seed": 2**32 - 1,
    "teacher.cache_samples": 2**16,
    "train.lr": 1e6,
    "distill.temperature": 100.0,
}


def validate(cfg: RunConfig) -> None:
    """Semantic checks the type system cannot express; raises ConfigError naming the field."""
    check_numbers(cfg, UPPER)
    need(cfg.seed >= 0, "seed", f"must be non-negative, got {cfg.seed}")
    _validate_model(cfg.model, cfg.teacher)
    _validate_dose(cfg)
    _validate_new_block_lr(cfg)
    _validate_data_teacher_distill(cfg)
    _validate_curriculum(cfg)
    _validate_train(cfg.train)
    _validate_stops(cfg)


def _validate_model(m: ModelConfig, teacher: TeacherConfig) -> None:
    positive(m, "model", "n_layer", "d_model", "n_head", "n_kv_head", "d_ff", "head_dim", "vocab_size", "init_depth")
    need(m.n_head % m.n_kv_head == 0, "model.n_kv_head", f"{m.n_kv_head} does not divide model.n_head={m.n_head}")
    if m.head_dim is None:
        need(
            m.d_model % m.n_head == 0,
            "model.n_head",
            f"{m.n_head} does not divide model.d_model={m.d_model} (or set model.head_dim)",
        )
    need(
        resolved_head_dim(m) % 2 == 0,
        "model.head_dim",
        f"must be even for rotary embeddings, got {resolved_head_dim(m)}",
    )
    positive(m, "model", "norm_eps", "init_std", "embed_init_std", "rope_theta", "dyt_alpha")
    registry.check("model.norm_kind", m.norm_kind)
    if m.norm not in PLACEMENT_RULES:
        registry.check("model.norm", m.norm)
    need(0.0 <= m.mixln_ratio <= 1.0, "model.mixln_ratio", f"must be in [0, 1], got {m.mixln_ratio}")
    need(
        not m.block_norms or len(m.block_norms) == m.n_layer,
        "model.block_norms",
        f"needs one placement per block of the full-depth student ({m.n_layer}), got {len(m.block_norms)}",
    )
    for i, name in enumerate(m.block_norms):
        registry.check("model.norm", name, key=f"model.block_norms.{i}")
    need(
        not (m.init_embeddings == "teacher" and teacher.path == "none"),
        "model.init_embeddings",
        "'teacher' needs a teacher, but teacher.path is 'none'",
    )


def _validate_dose(cfg: RunConfig) -> None:
    """model.boundary_scale preserves the function at each growth event only on its preconditions: appended blocks
    that add nothing at first, a final norm that ignores the stream's scale, and boundaries where blocks are appended."""
    m, c = cfg.model, cfg.curriculum
    positive(m, "model", "boundary_scale")
    depths = [s.n_layer for s in c.stages]
    need(
        all(0 < b < m.n_layer for b in m.scaled_boundaries),
        "model.scaled_boundaries",
        f"block indices between 1 and model.n_layer − 1, got {m.scaled_boundaries}",
    )
    if m.boundary_scale == 1.0:
        return
    need(m.final_norm and m.norm_kind in ("rmsnorm", "layernorm"), "model.boundary_scale",
         f"needs a scale-invariant final norm (model.final_norm with rmsnorm or layernorm), got norm_kind '{m.norm_kind}'")  # fmt: skip
    need(len(depths) > 1 and c.growth == "append" and c.growth_init == "zero", "model.boundary_scale",
         "scales the stream at growth events: needs curriculum stages that append zero-initialized blocks "
         "(curriculum.growth=append, curriculum.growth_init=zero)")  # fmt: skip


def _validate_new_block_lr(cfg: RunConfig) -> None:
    """curriculum.new_block_lr scales the rate of blocks appended after the first stage: positive, and only where
    blocks are appended on top of it."""
    c = cfg.curriculum
    positive(c, "curriculum", "new_block_lr")
    if c.new_block_lr != 1.0:
        need(len(c.stages) > 1 and c.growth == "append", "curriculum.new_block_lr",
             "scales the rate of blocks appended after the first stage: needs curriculum stages that append blocks "
             "(curriculum.growth=append)")  # fmt: skip


def _validate_data_teacher_distill(cfg: RunConfig) -> None:
    tc = cfg.teacher
    positive(tc, "teacher", "cache_k", "cache_samples")
    non_negative(tc, "teacher", "cache_seed")
    need(
        not (tc.cache or tc.cache_path) or tc.path != "none",
        "teacher.cache",
        "a cache needs a teacher (teacher.path is 'none')",
    )
    need(
        not (tc.cache or tc.cache_path) or cfg.distill.loss in ("ce", "kl"),
        "distill.loss",
        f"'{cfg.distill.loss}' is not available on a {tc.cache_kind} teacher cache (use ce or kl, or teacher.cache=false)",
    )

    d = cfg.data
    registry.check("data.format", d.format)
    positive(d, "data", "vocab_size", "seq_len", "val_tokens", "probe_sequences", "max_document_bytes")
    non_negative(d, "data", "select_tokens")
    need(
        0 <= d.curve_tokens <= d.val_tokens,
        "data.curve_tokens",
        f"must be in [0, data.val_tokens={d.val_tokens}] (a prefix of the validation set), got {d.curve_tokens}",
    )
    need(d.vocab_size >= 260, "data.vocab_size", f"a byte-level BPE needs at least 260 entries, got {d.vocab_size}")
    need(0 < d.val_fraction < 1, "data.val_fraction", f"must be in (0, 1), got {d.val_fraction}")
    need(
        d.max_documents is None or d.max_documents > 1,
        "data.max_documents",
        f"must be at least 2, got {d.max_documents}",
    )
    need(bool(d.corpus), "data.corpus", "must not be empty")
    _validate_pool(d, cfg.train.batch_size)

    t = cfg.distill
    positive(t, "distill", "temperature", "chunk_tokens")
    need(0 < t.jsd_beta < 1, "distill.jsd_beta", f"must be in (0, 1), got {t.jsd_beta}")
    non_negative(t, "distill", "nll_weight")

    g = cfg.diagnostics
    non_negative(g, "diagnostics", "every_tokens")
    need(0 < g.sink_threshold < 1, "diagnostics.sink_threshold", f"must be in (0, 1), got {g.sink_threshold}")
    for name in g.include or []:
        registry.check("diagnostics.include", name)


def _validate_pool(d: DataConfig, batch_size: int) -> None:
    """The pool's size against what the config alone decides (the split's size is checked once it is read)."""
    non_negative(d, "data", "train_pool_sequences", "max_pool_repeats")
    need(
        d.train_pool_sequences == 0 or d.train_pool_sequences >= batch_size,
        "data.train_pool_sequences",
        f"{d.train_pool_sequences} is fewer than the train.batch_size={batch_size} sequences of one step",
    )


def _validate_curriculum(cfg: RunConfig) -> None:
    registry.check("curriculum.growth", cfg.curriculum.growth)
    growth = registry.BY_FIELD.get("curriculum.growth")
    operator = growth[cfg.curriculum.growth] if growth is not None else None
    inits = getattr(operator, "inits", None)
    stages = cfg.curriculum.stages
    need(
        inits is None or len(stages) < 2 or cfg.curriculum.growth_init in inits,
        "curriculum.growth_init",
        f"'{cfg.curriculum.growth_init}' does not apply to growth operator '{cfg.curriculum.growth}' (it takes: "
        f"{', '.join(inits or ())})",
    )
    need(
        cfg.curriculum.optimizer != "copy" or len(stages) < 2 or cfg.curriculum.growth_init == "copy",
        "curriculum.optimizer",
        f"'copy' carries moments into copied blocks, but curriculum.growth_init is '{cfg.curriculum.growth_init}'",
    )
    need(len(stages) > 0, "curriculum.stages", "needs at least one stage")
    prev = 0
    for i, s in enumerate(stages):
        key = f"curriculum.stages.{i}"
        positive(s, key, "n_layer")
        need(s.n_layer > prev, f"{key}.n_layer", f"stage depths must increase, got {s.n_layer} after {prev}")
        need(s.n_layer <= cfg.model.n_layer, f"{key}.n_layer", f"{s.n_layer} exceeds model.n_layer={cfg.model.n_layer}")
        non_negative(s, key, "tokens", "active_layer_tokens")
        need(
            (s.tokens > 0) != (s.active_layer_tokens > 0),
            f"{key}.tokens",
            "set exactly one positive budget: tokens or active_layer_tokens",
        )
        try:
            trained = parse_train_blocks(s.train, s.n_layer, range(prev, s.n_layer))  # as many new blocks as added
        except ValueError as e:
            raise ConfigError(f"{key}.train: {e}") from None
        need(len(trained) > 0, f"{key}.train", f"'{s.train}' trains no block (every block frozen)")
        prev = s.n_layer
    for a, b in zip(stages, stages[1:], strict=False):
        try:  # the operator's own refusals (middle: a step larger than its prefix) at load time, before any work
            if operator is not None:
                operator.event(a.n_layer, b.n_layer)
        except ValueError as e:
            raise ConfigError(f"curriculum.growth: {cfg.curriculum.growth}: {e}") from None


def _validate_train(r: TrainConfig) -> None:
    keys = ("batch_size", "lr", "eval_every_tokens", "log_every_steps", "checkpoint_every_tokens", "keep_checkpoints")
    positive(r, "train", *keys, "micro_batch_size")
    need(
        r.micro_batch_size is None or r.batch_size % r.micro_batch_size == 0,
        "train.micro_batch_size",
        f"{r.micro_batch_size} does not divide train.batch_size={r.batch_size}",
    )
    non_negative(r, "train", "warmup_tokens", "dense_eval_steps")
    need(
        not (r.compile and r.sharding == "fsdp"),
        "train.compile",
        "not supported with train.sharding=fsdp (compile the blocks of a replicated student: train.sharding=ddp)",
    )
    need(r.dense_eval_every >= 1, "train.dense_eval_every", f"must be at least 1, got {r.dense_eval_every}")
    need(0 <= r.min_lr_ratio <= 1, "train.min_lr_ratio", f"must be in [0, 1], got {r.min_lr_ratio}")
    need(0 < r.decay_fraction <= 1, "train.decay_fraction", f"must be in (0, 1], got {r.decay_fraction}")
    non_negative(r, "train", "weight_decay")
    for key, beta in (("beta1", r.beta1), ("beta2", r.beta2)):
        need(0 <= beta < 1, f"train.{key}", f"must be in [0, 1), got {beta}")
    non_negative(r, "train", "grad_clip")
    positive(r, "train", "threads")
    for logger in r.loggers:
        need(logger in LOGGERS, "train.loggers", f"unknown logger '{logger}' ({', '.join(LOGGERS)})")
    need(
        r.device == "auto" or r.device == "cpu" or r.device.startswith("cuda"),
        "train.device",
        f"expected auto, cpu, cuda or cuda:N, got '{r.device}'",
    )


def _validate_stops(cfg: RunConfig) -> None:
    """train.stop_tokens and train.checkpoint_tokens fall on step ends (whether before the run's end: train/loop.py)."""
    per_step, t = cfg.train.batch_size * cfg.data.seq_len, cfg.train
    for key, values in (("stop_tokens", [t.stop_tokens]), ("checkpoint_tokens", t.checkpoint_tokens)):
        for v in values:
            need(
                v >= 0 and v % per_step == 0,
                f"train.{key}",
                f"{v} is not a non-negative multiple of the tokens per step ({per_step} = batch_size × seq_len)",
            )
