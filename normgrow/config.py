"""The run configuration: typed, nested dataclasses merged from YAML presets and dotted overrides.

    preset YAML  ─┐
    dotted keys  ─┼─► OmegaConf.merge (types and unknown keys checked) ─► RunConfig ─► validate()
    (defaults)   ─┘

Every field carries a one-line attribute docstring; `field_docs()` reads them back from this file,
so the docstring is the help text (`normgrow config --fields`). A resolved config saved with
`save_config` reloads to an equal `RunConfig`. Every field also declares its meaning (`setting`,
`section`): whether it enters the default teacher's key (`teacher_key_view`) and whether a resumed
run may change it (`resume_may_differ`); teacher.py and rundir.py read these instead of keeping lists.

Presets are the YAML files in `configs/` (installed as the package `normgrow.configs`); a preset is
named by its file stem (`tiny`) or given as a path. `load_structured` is the one merge loop: run
configs (`load_config`) and study files (study.py) both go through it.

Fields that name an extension (a placement, a growth operator, a diagnostic, a launcher) are plain
strings checked against their registry (registry.py) at validation time, so names that user code
registers are valid too.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import fnmatch
import functools
import importlib.resources
import inspect
import math
import os
import typing
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from normgrow import atomic, registry
from normgrow.errors import ConfigError

# Placement names that are rules over positions rather than one block class (model.placement_of resolves them).
PLACEMENT_RULES = ("mixln",)


# ----------------------------------------------------------------------------- field meanings
#
# Beside its value and help line, a field declares what it means to the rest of the package, once, here:
# whether it enters the default teacher's content key (teacher.default_teacher_key: the default teacher is trained
# once per recipe and cached under a hash of its resolved config), whether a resumed run may change it
# (rundir.check_same_run), and when it or its default arrived after teachers were first keyed. `setting(...)`
# declares it with the field, `@section(...)` for every field of a section that does not declare its own;
# tests/test_config.py checks that every field has both decisions:
#
#     d_model: int = setting(256, key=True)                      # shapes the teacher: in its key
#     device: str = setting("auto", key=False, resume=True)      # where it runs: not in the key, may change on resume
#     mixln_ratio: float = setting(0.25, key=True, before=0.25)  # added later: left out of the key while at 0.25


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET = _Unset()  # a meaning entry not given (None is a value)


@dataclass(frozen=True)
class Meaning:
    """What a config field means beyond its value (`setting` / `section` declare it; `meaning_of` reads it)."""

    key: bool | None = None
    """Enters the default teacher's key. False for what cannot change the teacher's weights: where it runs, how often
    it logs, evaluates and checkpoints, diagnostics, the distillation settings (the teacher trains on next-token CE;
    the loss chunk changes only the order of float sums). The key then holds the field's default whatever the run
    sets, so changing it does not retrain the teacher; the full config is still saved with the teacher."""
    resume: bool | None = None
    """May differ when a run directory is resumed: where it runs and how a step is laid out in memory (micro-batches,
    sharding, recomputation), none of which changes what is computed beyond summation order (tests/test_train.py:
    split invariance; a DDP run resumed sharded). config.yaml keeps the first values."""
    before: Any = UNSET
    """The field was added after default teachers were first keyed: while it holds this value (the behaviour from
    before it existed, which an older key implies) it is left out of the key, so adding it orphans no cached
    teacher."""
    old_default: Any = UNSET
    """The field's default changed after teachers were keyed: while it holds the new default, the key records this old
    one (teacher.dtype became `auto`, resolved per run), so the change orphaned no cached teacher."""


_MEANING = "normgrow.meaning"  # the dataclasses.field metadata entry `setting` fills


def setting(
    default: Any = dataclasses.MISSING,
    *,
    factory: Any = dataclasses.MISSING,
    key: bool | None = None,
    resume: bool | None = None,
    before: Any = UNSET,
    old_default: Any = UNSET,
) -> Any:
    """A config field with its `Meaning` (unset entries come from its section's): `default`, or `factory` for a
    mutable one, as in dataclasses.field."""
    meaning = Meaning(key, resume, before, old_default)
    return field(default=default, default_factory=factory, metadata={_MEANING: meaning})


def section(*, key: bool | None = None, resume: bool | None = None):
    """Class decorator: the meaning of every field of a config section that does not declare its own."""

    def declare(cls: type) -> type:
        cls._meaning = Meaning(key, resume)
        return cls

    return declare


@section(resume=False)
@dataclass
class ModelConfig:
    norm: str = setting("pre", key=True)
    """Normalization placement of every block: pre h+F(N(h)) | post N(h+F(h)) | sandwich h+N2(F(N1(h))) | deepnorm N(α·h+F(h)) | a registered one; or the rule mixln (post in the first floor(mixln_ratio·n_layer) blocks, pre above)."""
    block_norms: list[str] = setting(factory=list, key=True, before=[])
    """Per-block placements, one per block of the full-depth student (block i at index i); empty = model.norm everywhere."""
    n_layer: int = setting(9, key=True)
    """Number of blocks of the full-depth student (growth appends up to this depth)."""
    d_model: int = setting(256, key=True)
    """Width of the residual stream."""
    n_head: int = setting(4, key=True)
    """Number of query heads."""
    n_kv_head: int = setting(2, key=True)
    """Number of key/value heads (grouped-query attention); must divide n_head."""
    head_dim: int | None = setting(None, key=True)
    """Per-head width; null = d_model // n_head. Must be even (rotary embeddings)."""
    d_ff: int = setting(768, key=True)
    """Hidden width of the SwiGLU MLP."""
    vocab_size: int | None = setting(None, key=True)
    """Student vocabulary size; null = the tokenizer's size (resolved and saved)."""
    rope_theta: float = setting(10000.0, key=True)
    """Rotary embedding base."""
    norm_eps: float = setting(1e-6, key=True)
    """RMSNorm epsilon (all norms, including q/k norms)."""
    qk_norm: bool = setting(True, key=True)
    """Per-head RMSNorm on queries and keys (Qwen3)."""
    final_norm: bool = setting(True, key=True)
    """RMSNorm between the last block and the LM head (a pre-norm student with it is a Qwen3)."""
    tie_embeddings: bool = setting(False, key=True)
    """Share the token embedding matrix with the LM head."""
    init_std: float = setting(0.02, key=True)
    """Std of the normal init of linear weights (and of the token embedding unless embed_init_std is set)."""
    embed_init_std: float | None = setting(None, key=True, before=None)
    """Std of the normal init of the token embedding; null = init_std. Larger keeps block 0's update from swamping a pre-norm stream, but 1.0 collapses post-norm at d_model 256 (docs/DESIGN.md §5.6: the regime both placements share)."""
    init_embeddings: Literal["random", "teacher"] = setting("random", key=True)
    """Token embeddings and LM head: random, or copied from the teacher (needs equal widths)."""
    init_depth: int | None = setting(None, key=True)
    """Depth D in the std/sqrt(2D) init of residual output projections (and DeepNorm's α, β); null = model.n_layer."""
    mixln_ratio: float = setting(0.25, key=True, before=0.25)
    """Mix-LN (model.norm=mixln): the first floor(mixln_ratio · n_layer) blocks of the full-depth student are post-norm, the rest pre-norm (0 = every block pre-norm)."""


@section(resume=False)
@dataclass
class DataConfig:
    corpus: str = setting("stdlib", key=True)
    """'stdlib' (this interpreter's standard library source), a file, glob, directory, JSONL, Parquet or `datasets` name/path."""
    format: str = setting("auto", key=True)
    """How to read `corpus`: auto (from its name: stdlib, *.jsonl, *.parquet, saved dataset dir, else text), text, jsonl, parquet, datasets, or a source registered with normgrow.register_corpus_source."""
    text_field: str = setting("text", key=True)
    """Field holding the document text in JSONL, Parquet and `datasets` corpora."""
    dataset_config: str | None = setting(None, key=True)
    """Configuration name for a hub `datasets` corpus."""
    dataset_split: str = setting("train", key=True)
    """Split of a `datasets` corpus to read."""
    max_documents: int | None = setting(None, key=True)
    """Use only the first N documents of the corpus (null = all)."""
    max_document_bytes: int = setting(2**28, key=False, before=2**28)
    """Largest file read as one text document, and largest JSONL line, in bytes (a larger one is an error naming it, before it is read)."""
    tokenizer: str = setting("bpe", key=True)
    """'bpe' trains a byte-level BPE on the corpus; 'teacher' uses teacher.path's tokenizer; else an AutoTokenizer path or hub id."""
    vocab_size: int = setting(8192, key=True)
    """Vocabulary size of a trained BPE tokenizer (ignored for other tokenizers)."""
    bos_token: str | None = setting(None, key=True)
    """Token that starts every document; null = the tokenizer's BOS, else its EOS (Qwen has no BOS)."""
    seq_len: int = setting(256, key=True)
    """Tokens per training sequence (the model sees seq_len inputs, predicts seq_len next tokens)."""
    val_fraction: float = setting(0.05, key=True)
    """Fraction of documents held out for validation (split by a hash of the document id)."""
    val_tokens: int = setting(32768, key=False)
    """Validation tokens evaluated at every eval (a fixed prefix of the validation split)."""
    probe_sequences: int = setting(16, key=False)
    """Sequences in the fixed diagnostics probe batch (each starts at a document start)."""
    curve_tokens: int = setting(0, key=False, before=0)
    """Tokens of the curve subset (the first ceil(curve_tokens / seq_len) validation sequences): every evaluation logs curve/… on it; interval and dense ones evaluate only it; 0 = the whole validation set."""
    select_tokens: int = setting(0, key=False, before=0)
    """Tokens of the model-selection set (val-split documents after the validation set's), evaluated at the end; 0 = none."""
    cache_dir: str | None = setting(None, key=False)
    """Where tokenizers and token shards are cached; null = $NORMGROW_CACHE or ~/.cache/normgrow."""
    train_pool_sequences: int = setting(0, key=True, before=0)
    """Train on a fixed pool of N = this many training-split sequences, spread evenly over the split's n (round(linspace(0, n − 1, N))), the same for every seed and arm; a teacher cache covers only the pool; 0 = the whole split. The default teacher always trains on the whole split."""
    max_pool_repeats: int = setting(0, key=False, before=0)
    """Refuse a run whose training would serve any one sequence of its pool (or of the whole split) more than this many times, i.e. start more epochs; 0 = no bound."""


@section(key=False, resume=False)
@dataclass
class TeacherConfig:
    path: str = "default"
    """Teacher causal LM: a local path or hub id; 'default' = the embedded default teacher; 'none' = plain next-token training."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = setting("auto", old_default="float32")
    """Dtype the teacher is loaded in; 'auto' = bfloat16 only where it is native and its forward of this run's shape is measured ≥ 1.2× faster (dtypes.py), else float32."""
    default_preset: str = "teacher"
    """Preset whose run trains the embedded default teacher (used when path is 'default')."""
    sharding: Literal["none", "fsdp"] = setting("none", resume=True, before="none")
    """Over several ranks: 'fsdp' shards the teacher's decoder layers (each gathered for its forward) for a teacher too big for one device; 'none' keeps a full copy on every rank."""
    cache: bool = False
    """Train from a top-k teacher cache (built once, then shared by runs); validation stays online and exact."""
    cache_k: int = 64
    """Teacher log-probabilities kept per token in the cache (plus one tail bucket); at least the vocabulary: the full distribution, in vocabulary order (no ids, no tail)."""
    cache_path: str | None = None
    """Use this cache directory (verified field by field) instead of the one keyed in the cache root."""
    cache_dtype: Literal["float16", "float32"] = setting("float16", before="float16")
    """Dtype of the cache's log-probabilities (and tail); float32 at cache_k ≥ the vocabulary makes the cache's loss the online one to float32 rounding (4·V bytes a token)."""


@section(key=False, resume=False)
@dataclass
class DistillConfig:
    loss: Literal["ce", "kl", "reverse_kl", "jsd"] = "ce"
    """Training loss against the teacher: soft CE, forward KL, reverse KL or generalized JSD."""
    temperature: float = 1.0
    """Softmax temperature of teacher and student in the training loss (eval is always at T=1)."""
    jsd_beta: float = 0.5
    """Mixture weight of the generalized JSD."""
    nll_weight: float = 0.0
    """Weight of an added hard-label next-token NLL term (0 = none)."""
    chunk_tokens: int = 256
    """Tokens per chunk when materializing full-vocabulary logits in the loss."""


@section(resume=False)
@dataclass
class StageConfig:
    n_layer: int = setting(9, key=True)
    """Depth of the student during this stage."""
    tokens: int = setting(0, key=True)
    """Training tokens of this stage (set this or active_layer_tokens; 0 = active_layer_tokens sets it)."""
    active_layer_tokens: int = setting(0, key=True)
    """Budget as active-layer tokens (tokens x depth) instead of tokens (0 = tokens sets it)."""
    train: str = setting("all", key=True)
    """Blocks that train: 'all', 'new' (blocks added at this stage; prefix frozen) or indices '0,1,5'."""


@section(resume=False)
@dataclass
class CurriculumConfig:
    stages: list[StageConfig] = setting(factory=lambda: [StageConfig(n_layer=9, tokens=1_000_000)], key=True)
    """Stages in order; joint training is one stage at full depth, growth appends blocks between stages."""
    growth: str = setting("append", key=True, before="append")
    """Growth operator: where appended blocks go (append = on top of the trained prefix) | a registered one."""
    growth_init: Literal["random", "zero", "copy"] = setting("zero", key=True)
    """Init of appended blocks: fresh random, random with residual-branch outputs zeroed, or a copy of the last prefix block."""
    optimizer: Literal["keep", "reset"] = setting("keep", key=True)
    """Optimizer state at growth: keep existing moments (new params start fresh) or reset all."""
    lr_schedule: Literal["global", "restart"] = setting("global", key=True)
    """One LR schedule over the whole run, or a re-warmup and decay per stage."""
    match_budget: str | None = setting(None, key=True)
    """Take the budget from another run directory or config (preset name or YAML): stage budgets are scaled to match its total."""
    match_by: Literal["active_layer_tokens", "tokens", "flops"] = setting("active_layer_tokens", key=True)
    """The compute measure matched by match_budget (active-layer tokens is the paper's compute control)."""


@section(resume=False)
@dataclass
class TrainConfig:
    batch_size: int = setting(16, key=True)
    """Sequences per optimizer step, summed over ranks and accumulation steps."""
    micro_batch_size: int | None = setting(None, key=True, resume=True)
    """Sequences per forward/backward on one rank; null = batch_size / world size (no accumulation). Gradient
    accumulation steps = batch_size / (world size × micro_batch_size); `normgrow plan --device-memory` sizes it."""
    tokens_per_step: int | None = setting(None, key=True, before=None)
    """Tokens per optimizer step (all ranks and accumulation steps); when set, batch_size = tokens_per_step / data.seq_len."""
    lr: float = setting(1e-3, key=True)
    """Peak learning rate."""
    min_lr_ratio: float = setting(0.1, key=True)
    """Final LR as a fraction of the peak (0 = decay to zero)."""
    schedule: Literal["cosine", "wsd", "constant"] = setting("cosine", key=True)
    """LR schedule after warmup, over tokens."""
    warmup_tokens: int = setting(50_000, key=True)
    """Linear warmup length in tokens (0 = none)."""
    decay_fraction: float = setting(0.2, key=True)
    """WSD: fraction of the budget spent decaying."""
    weight_decay: float = setting(0.1, key=True)
    """AdamW weight decay (matrices only; not norms, embeddings or biases; 0 = none)."""
    beta1: float = setting(0.9, key=True)
    """AdamW beta1 (0 = no momentum)."""
    beta2: float = setting(0.95, key=True)
    """AdamW beta2 (0 = the last gradient's square alone)."""
    grad_clip: float = setting(1.0, key=True)
    """Max global gradient norm (0 = off)."""
    dtype: Literal["auto", "float32", "bfloat16"] = setting("auto", key=True)
    """Autocast dtype for the student's forward; 'auto' = bfloat16 only where it is native and measured faster (CUDA with bf16; CPUs with AMX/AVX-512-BF16 whose matmul probe and then this run's own training step are ≥ 1.5× and ≥ 1.2× faster in it; cached), else float32 (dtypes.py)."""
    compile: bool = setting(False, key=False)
    """torch.compile each block (one graph per placement, reused at every depth; caches under <cache>/compile; not with train.sharding=fsdp across ranks)."""
    sharding: Literal["ddp", "fsdp"] = setting("ddp", key=False, resume=True, before="ddp")
    """Over several ranks: 'ddp' replicates the student; 'fsdp' shards its weights, gradients and optimizer state (FSDP2, per block)."""
    activation_checkpointing: bool = setting(False, key=False, resume=True, before=False)
    """Recompute each block's activations in the backward pass instead of keeping them (less memory, ≈ 1/3 more compute; same gradients)."""
    device: str = setting("auto", key=False, resume=True)
    """'auto' (cuda if available, else cpu), 'cpu', 'cuda' or 'cuda:N'."""
    threads: int | None = setting(None, key=False, resume=True)
    """CPU threads for torch (null = torch's default)."""
    eval_every_tokens: int = setting(250_000, key=False)
    """Evaluate the curve subset (data.curve_tokens) every this many training tokens (event `eval`, curve/… only)."""
    dense_eval_steps: int = setting(0, key=False, before=0)
    """The dense window: the first this many steps of every stage after the first also evaluate the curve subset and diagnose (event `dense`); 0 = none."""
    dense_eval_every: int = setting(4, key=False, before=4)
    """Steps between two evaluations of the dense window (at stage steps dense_eval_every, 2 × dense_eval_every, …)."""
    log_every_steps: int = setting(10, key=False)
    """Write train metrics every this many steps."""
    checkpoint_every_tokens: int = setting(500_000, key=False)
    """Save a checkpoint every this many training tokens (and at the end)."""
    keep_checkpoints: int = setting(2, key=False)
    """Keep this many most recent checkpoints."""
    loggers: list[str] = setting(factory=list, key=False)
    """Extra metric sinks besides metrics.jsonl: 'tensorboard', 'wandb' (offline unless WANDB_MODE says otherwise)."""


@section(key=False, resume=False)
@dataclass
class DiagnosticsConfig:
    enabled: bool = True
    """Compute boundary diagnostics on the probe batch (diagnostics.jsonl); they never change training."""
    every_tokens: int = 0
    """Also diagnose every this many tokens (0 = only at stage starts and ends)."""
    sink_threshold: float = 0.3
    """A (layer, head) counts as an attention sink when later queries give position 0 more than this."""
    skip_ce: bool = True
    """Measure the probe CE change when each block is skipped (one extra partial forward per block)."""
    include: list[str] | None = setting(None, before=None)
    """Diagnostics to compute, by registered name; null = every registered diagnostic."""


@section(resume=False)
@dataclass
class RunConfig:
    name: str = setting("", key=False)
    """Free-form run name, recorded with the results."""
    seed: int = setting(0, key=True)
    """Seed of model init, batch order and everything random in the run (0 … 2^32 − 1)."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """The student."""
    data: DataConfig = field(default_factory=DataConfig)
    """Corpus, tokenizer and sequences."""
    teacher: TeacherConfig = field(default_factory=TeacherConfig)
    """The teacher."""
    distill: DistillConfig = field(default_factory=DistillConfig)
    """The distillation loss."""
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    """Stages and growth."""
    train: TrainConfig = field(default_factory=TrainConfig)
    """Optimization, evaluation and checkpoint cadence."""
    diagnostics: DiagnosticsConfig = field(default_factory=DiagnosticsConfig)
    """Boundary diagnostics on the fixed probe batch."""


# ----------------------------------------------------------------------------- loading


def preset_names() -> list[str]:
    """Names of the run presets shipped in configs/."""
    root = importlib.resources.files("normgrow.configs")
    return sorted(p.name[: -len(".yaml")] for p in root.iterdir() if p.name.endswith(".yaml"))


def preset_path(name_or_path: str) -> Path:
    """A preset name ('tiny') or a YAML path → the file; one-line error if neither exists."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or os.sep in name_or_path:
        if not p.is_file():
            raise ConfigError(f"{name_or_path}: config file not found")
        return p
    candidate = importlib.resources.files("normgrow.configs") / f"{name_or_path}.yaml"
    if not candidate.is_file():
        raise ConfigError(f"{name_or_path}: no such preset (presets: {', '.join(preset_names())}) and no such file")
    return Path(str(candidate))


class _UniqueKeyLoader(yaml.SafeLoader):
    """safe_load that refuses a key given twice in one mapping (YAML keeps the last one silently)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"key '{key}' given twice", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def read_yaml(path: Path) -> dict:
    """A YAML mapping from a file; one-line errors naming the file (and line) otherwise."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a text (UTF-8) file; expected a YAML config") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror})") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark else ""
        raise ConfigError(f"{path}: invalid YAML{where}: {getattr(e, 'problem', e)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of config keys at the top level")
    return data


def omegaconf_message(e: OmegaConfBaseException, source: str) -> str:
    key = getattr(e, "full_key", None) or "?"
    msg = str(e).splitlines()[0]
    return f"{source}: {key}: {msg}"


def load_structured(schema: type, layers: list[tuple[str, dict]], overrides: list[str] | tuple[str, ...] = ()):
    """The one merge loop: `schema`'s defaults ← each (source, mapping) layer in order ← dotted
    `key=value` overrides, type-checked by OmegaConf. Every error is one line naming its source and key."""
    merged = OmegaConf.structured(schema)
    for source, data in layers:
        try:
            merged = OmegaConf.merge(merged, OmegaConf.create(data))
        except OmegaConfBaseException as e:
            raise ConfigError(omegaconf_message(e, source)) from None
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override '{item}': expected key=value (e.g. model.norm=post)")
        key, _, raw = item.partition("=")
        try:
            if any(part.isdigit() for part in key.split(".")):  # into a list's entry: curriculum.stages.1.tokens=…
                OmegaConf.update(merged, key, OmegaConf.from_dotlist([f"value={raw}"]).value, merge=True)
            else:
                merged = OmegaConf.merge(merged, OmegaConf.from_dotlist([item]))
        except OmegaConfBaseException as e:
            raise ConfigError(omegaconf_message(e, f"override '{item}'")) from None
        except yaml.YAMLError as e:  # a YAML tag (never executed) or broken flow syntax in the value
            raise ConfigError(
                f"override '{item}': {key}: the value is not plain YAML ({str(e).splitlines()[0]})"
            ) from None
    try:
        return OmegaConf.to_object(merged)
    except OmegaConfBaseException as e:
        raise ConfigError(omegaconf_message(e, "config")) from None


def _preset_layers(preset: str, seen: tuple[str, ...] = ()) -> list[tuple[str, dict]]:
    """A preset and the chain of presets it names with `base:`, base first."""
    path = preset_path(preset)
    data = read_yaml(path)
    base = data.pop("base", None)
    if base is None:
        return [(str(path), data)]
    if not isinstance(base, str):
        raise ConfigError(f"{path}: base: expected a preset name or path")
    if str(path) in seen:
        raise ConfigError(f"{path}: base: presets form a cycle")
    if os.sep in base and not Path(base).is_absolute():
        base = str(path.parent / base)
    return _preset_layers(base, seen + (str(path),)) + [(str(path), data)]


def load_config(preset: str | None = None, overrides: tuple[str, ...] | list[str] = ()) -> RunConfig:
    """Defaults ← preset YAML (name or path, after the presets it names with `base:`) ← dotted
    overrides, type-checked and validated."""
    cfg = load_structured(RunConfig, _preset_layers(preset) if preset is not None else [], overrides)
    tps = cfg.train.tokens_per_step
    if tps is not None:  # the step's size in tokens fixes its size in sequences
        need(
            tps > 0 and tps % cfg.data.seq_len == 0,
            "train.tokens_per_step",
            f"{tps} is not a positive multiple of data.seq_len={cfg.data.seq_len}",
        )
        cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, batch_size=tps // cfg.data.seq_len))
    validate(cfg)
    return cfg


def to_dict(cfg: RunConfig) -> dict:
    return dataclasses.asdict(cfg)


def to_yaml(cfg: RunConfig) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg), sort_keys=False)


def save_config(cfg: RunConfig, path: str | Path) -> None:
    """Write the resolved config atomically (temp file, then rename)."""
    atomic.write_text(path, to_yaml(cfg))


# ----------------------------------------------------------------------------- validation


def resolved_head_dim(m: ModelConfig) -> int:
    return m.head_dim if m.head_dim is not None else m.d_model // m.n_head


def parse_train_blocks(spec: str, n_layer: int, new_blocks: Sequence[int]) -> list[int]:
    """Block indices a stage trains: 'all', 'new' (`new_blocks`: the blocks its growth event inserted,
    which the growth operator decides; every block in the first stage) or explicit indices '0,3,4'."""
    if spec == "all":
        return list(range(n_layer))
    if spec == "new":
        return sorted(new_blocks)
    try:
        idx = sorted({int(s) for s in spec.split(",") if s.strip()})
    except ValueError:
        raise ValueError(f"'{spec}' is not 'all', 'new' or comma-separated block indices") from None
    bad = [i for i in idx if not 0 <= i < n_layer]
    if bad:
        raise ValueError(f"block index {bad[0]} outside 0..{n_layer - 1}")
    return idx


def need(ok: bool, key: str, msg: str) -> None:
    """Raise a one-line ConfigError naming `key` unless `ok`."""
    if not ok:
        raise ConfigError(f"{key}: {msg}")


INT_LIMIT = 2**53  # integers beyond it are not exact as floats, and token counts are multiplied by rates
FLOAT_LIMIT = 1e15  # no float setting means anything beyond it; larger ones overflow float32 arithmetic
# fields whose meaningful range ends well below FLOAT_LIMIT (their own checks below give the lower ends)
UPPER = {
    "seed": 2**32 - 1,
    "curriculum.stages.*.n_layer": 2**16,
    "model.n_layer": 2**16,
    "model.rope_theta": 1e12,
    "model.norm_eps": 1.0,
    "model.init_std": 10.0,
    "model.embed_init_std": 10.0,
    "train.lr": 1e6,
    "distill.temperature": 100.0,
}


def number_fields(obj: Any, prefix: str = "") -> Iterator[tuple[str, Any, type]]:
    """(dotted key, value, int or float) of every number of a config section, walked into sections, lists (key
    curriculum.stages.<i>.<field>, seeds.<i>) and maps of sections (arms.<name>.…); None values left out."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        yield from _numbers(f"{prefix}{f.name}", getattr(obj, f.name), hints[f.name])


def _numbers(key: str, value: Any, hint: Any) -> Iterator[tuple[str, Any, type]]:
    if dataclasses.is_dataclass(value):
        yield from number_fields(value, key + ".")
    elif isinstance(value, dict):
        for name, v in value.items():
            yield from _numbers(f"{key}.{name}", v, (typing.get_args(hint) or (str, Any))[-1])
    elif isinstance(value, (list, tuple)):
        inner = [a for t in (typing.get_args(hint) or (Any,)) for a in (typing.get_args(t) or (t,))]
        for i, v in enumerate(value):
            yield from _numbers(f"{key}.{i}", v, inner[0] if inner else Any)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        kinds = [t for t in typing.get_args(hint) or (hint,) if t in (int, float)]
        yield key, value, kinds[0] if kinds else type(value)


def check_numbers(obj: Any, prefix: str = "", upper: dict | None = None) -> None:
    """Every number of a config finite and representable (ints within ±2^53, floats within ±1e15, narrower where
    `upper` (UPPER) says, by key pattern: `*` for a list index or a map's name), before any range check compares it:
    NaN, ±inf and 1e300 are one line naming the field."""
    upper = UPPER if upper is None else upper
    for key, value, kind in number_fields(obj, prefix):
        if kind is float and not math.isfinite(value):
            raise ConfigError(f"{key}: must be a finite number, got {value}")
        limit = next(
            (v for pattern, v in upper.items() if fnmatch.fnmatchcase(key, pattern)),
            INT_LIMIT if kind is int else FLOAT_LIMIT,
        )
        need(abs(value) <= limit, key, f"{value:g} is out of range (at most {limit:g} in magnitude)")


def validate(cfg: RunConfig) -> None:
    """Semantic checks the type system cannot express; raises ConfigError naming the field."""
    check_numbers(cfg)
    need(cfg.seed >= 0, "seed", f"must be non-negative, got {cfg.seed}")
    _validate_model(cfg.model, cfg.teacher)
    _validate_data_teacher_distill(cfg)
    _validate_curriculum(cfg)
    _validate_train(cfg.train)


def _validate_model(m: ModelConfig, teacher: TeacherConfig) -> None:
    for key in ("n_layer", "d_model", "n_head", "n_kv_head", "d_ff"):
        need(getattr(m, key) > 0, f"model.{key}", f"must be positive, got {getattr(m, key)}")
    need(m.head_dim is None or m.head_dim > 0, "model.head_dim", f"must be positive, got {m.head_dim}")
    need(m.vocab_size is None or m.vocab_size > 0, "model.vocab_size", f"must be positive, got {m.vocab_size}")
    need(m.init_depth is None or m.init_depth > 0, "model.init_depth", f"must be positive, got {m.init_depth}")
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
    need(m.norm_eps > 0, "model.norm_eps", f"must be positive, got {m.norm_eps}")
    need(m.init_std > 0, "model.init_std", f"must be positive, got {m.init_std}")
    need(
        m.embed_init_std is None or m.embed_init_std > 0,
        "model.embed_init_std",
        f"must be positive, got {m.embed_init_std}",
    )
    need(m.rope_theta > 0, "model.rope_theta", f"must be positive, got {m.rope_theta}")
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


def _validate_data_teacher_distill(cfg: RunConfig) -> None:
    tc = cfg.teacher
    need(tc.cache_k > 0, "teacher.cache_k", f"must be positive, got {tc.cache_k}")
    need(
        not (tc.cache or tc.cache_path) or tc.path != "none",
        "teacher.cache",
        "a cache needs a teacher (teacher.path is 'none')",
    )
    need(
        not (tc.cache or tc.cache_path) or cfg.distill.loss in ("ce", "kl"),
        "distill.loss",
        f"'{cfg.distill.loss}' is not available on a top-k teacher cache (use ce or kl, or teacher.cache=false)",
    )

    d = cfg.data
    registry.check("data.format", d.format)
    for key in ("vocab_size", "seq_len", "val_tokens", "probe_sequences", "max_document_bytes"):
        need(getattr(d, key) > 0, f"data.{key}", f"must be positive, got {getattr(d, key)}")
    need(d.select_tokens >= 0, "data.select_tokens", f"must be non-negative, got {d.select_tokens}")
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
    need(t.temperature > 0, "distill.temperature", f"must be positive, got {t.temperature}")
    need(0 < t.jsd_beta < 1, "distill.jsd_beta", f"must be in (0, 1), got {t.jsd_beta}")
    need(t.nll_weight >= 0, "distill.nll_weight", f"must be non-negative, got {t.nll_weight}")
    need(t.chunk_tokens > 0, "distill.chunk_tokens", f"must be positive, got {t.chunk_tokens}")

    g = cfg.diagnostics
    need(g.every_tokens >= 0, "diagnostics.every_tokens", f"must be non-negative, got {g.every_tokens}")
    need(0 < g.sink_threshold < 1, "diagnostics.sink_threshold", f"must be in (0, 1), got {g.sink_threshold}")
    for name in g.include or []:
        registry.check("diagnostics.include", name)


def _validate_pool(d: DataConfig, batch_size: int) -> None:
    """The pool's size against what the config alone decides (the split's size is checked once it is read)."""
    need(
        d.train_pool_sequences >= 0, "data.train_pool_sequences", f"must be non-negative, got {d.train_pool_sequences}"
    )
    need(
        d.train_pool_sequences == 0 or d.train_pool_sequences >= batch_size,
        "data.train_pool_sequences",
        f"{d.train_pool_sequences} is fewer than the train.batch_size={batch_size} sequences of one step",
    )
    need(d.max_pool_repeats >= 0, "data.max_pool_repeats", f"must be non-negative, got {d.max_pool_repeats}")


def _validate_curriculum(cfg: RunConfig) -> None:
    registry.check("curriculum.growth", cfg.curriculum.growth)
    operator = (
        registry.BY_FIELD["curriculum.growth"][cfg.curriculum.growth]
        if "curriculum.growth" in registry.BY_FIELD
        else None
    )
    inits = getattr(operator, "inits", None)
    stages = cfg.curriculum.stages
    need(
        inits is None or len(stages) < 2 or cfg.curriculum.growth_init in inits,
        "curriculum.growth_init",
        f"'{cfg.curriculum.growth_init}' does not apply to growth operator '{cfg.curriculum.growth}' (it takes: "
        f"{', '.join(inits or ())})",
    )
    need(len(stages) > 0, "curriculum.stages", "needs at least one stage")
    prev = 0
    for i, s in enumerate(stages):
        key = f"curriculum.stages.{i}"
        need(s.n_layer > 0, f"{key}.n_layer", f"must be positive, got {s.n_layer}")
        need(s.n_layer > prev, f"{key}.n_layer", f"stage depths must increase, got {s.n_layer} after {prev}")
        need(s.n_layer <= cfg.model.n_layer, f"{key}.n_layer", f"{s.n_layer} exceeds model.n_layer={cfg.model.n_layer}")
        need(s.tokens >= 0, f"{key}.tokens", f"must be non-negative, got {s.tokens}")
        need(
            s.active_layer_tokens >= 0,
            f"{key}.active_layer_tokens",
            f"must be non-negative, got {s.active_layer_tokens}",
        )
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


def _validate_train(r: TrainConfig) -> None:
    for key in (
        "batch_size",
        "lr",
        "eval_every_tokens",
        "log_every_steps",
        "checkpoint_every_tokens",
        "keep_checkpoints",
    ):
        need(getattr(r, key) > 0, f"train.{key}", f"must be positive, got {getattr(r, key)}")
    need(
        r.micro_batch_size is None or r.micro_batch_size > 0,
        "train.micro_batch_size",
        f"must be positive, got {r.micro_batch_size}",
    )
    need(
        r.micro_batch_size is None or r.batch_size % r.micro_batch_size == 0,
        "train.micro_batch_size",
        f"{r.micro_batch_size} does not divide train.batch_size={r.batch_size}",
    )
    need(r.warmup_tokens >= 0, "train.warmup_tokens", f"must be non-negative, got {r.warmup_tokens}")
    need(
        not (r.compile and r.sharding == "fsdp"),
        "train.compile",
        "not supported with train.sharding=fsdp (compile the blocks of a replicated student: train.sharding=ddp)",
    )
    need(r.dense_eval_steps >= 0, "train.dense_eval_steps", f"must be non-negative, got {r.dense_eval_steps}")
    need(r.dense_eval_every >= 1, "train.dense_eval_every", f"must be at least 1, got {r.dense_eval_every}")
    need(0 <= r.min_lr_ratio <= 1, "train.min_lr_ratio", f"must be in [0, 1], got {r.min_lr_ratio}")
    need(0 < r.decay_fraction <= 1, "train.decay_fraction", f"must be in (0, 1], got {r.decay_fraction}")
    need(r.weight_decay >= 0, "train.weight_decay", f"must be non-negative, got {r.weight_decay}")
    need(0 <= r.beta1 < 1, "train.beta1", f"must be in [0, 1), got {r.beta1}")
    need(0 <= r.beta2 < 1, "train.beta2", f"must be in [0, 1), got {r.beta2}")
    need(r.grad_clip >= 0, "train.grad_clip", f"must be non-negative, got {r.grad_clip}")
    need(r.threads is None or r.threads > 0, "train.threads", f"must be positive, got {r.threads}")
    for logger in r.loggers:
        need(logger in ("tensorboard", "wandb"), "train.loggers", f"unknown logger '{logger}' (tensorboard, wandb)")
    need(
        r.device == "auto" or r.device == "cpu" or r.device.startswith("cuda"),
        "train.device",
        f"expected auto, cpu, cuda or cuda:N, got '{r.device}'",
    )


# ----------------------------------------------------------------------------- help text


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """{field: docstring} for a config dataclass, read from the attribute docstrings in this file."""
    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body
    docs = {}
    for node, nxt in zip(body, body[1:], strict=False):
        if isinstance(node, ast.AnnAssign) and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
            docs[node.target.id] = str(nxt.value.value)
    return docs


def field_default(f: dataclasses.Field) -> Any:
    """A dataclass field's default value (a fresh one for a default factory)."""
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def _is_section_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and dataclasses.is_dataclass(value[0])


def leaf_fields(cls: type = RunConfig, prefix: str = "") -> Iterator[tuple[str, type, dataclasses.Field]]:
    """(dotted key, section class, field) for every field that holds a value, depth first. Sections are walked
    into; a list of sections (curriculum.stages) is a field, followed by its entries' fields as `key[].name`."""
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        default = field_default(f)
        if dataclasses.is_dataclass(default):
            yield from leaf_fields(type(default), key + ".")
            continue
        yield key, cls, f
        if _is_section_list(default):
            yield from leaf_fields(type(default[0]), key + "[].")


def describe_fields(cls: type = RunConfig, prefix: str = "") -> list[tuple[str, str, str]]:
    """(dotted key, default, help) for every leaf field, depth first; a field chosen from a registry (and
    model.block_norms, a list of placements) lists the names registered now, extensions' included."""
    rows = []
    for key, owner, f in leaf_fields(cls, prefix):
        default = field_default(f)
        shown = f"[{len(default)} entries]" if _is_section_list(default) else repr(default)
        doc = field_docs(owner).get(f.name, "")
        reg = registry.BY_FIELD.get("model.norm" if key == "model.block_norms" else key)
        if reg is not None:
            doc += f" [registered {reg.kind}s: {', '.join(reg.names())}]"
        rows.append((key, shown, doc))
    return rows


# ----------------------------------------------------------------------------- what fields mean (see `Meaning`)


def meaning_of(cls: type, f: dataclasses.Field) -> Meaning:
    """Field `f` of config section `cls`: its own `setting(...)` entries, the unset ones from `@section(...)`."""
    own = f.metadata.get(_MEANING, Meaning())
    sec = getattr(cls, "_meaning", Meaning())
    return dataclasses.replace(
        own, key=sec.key if own.key is None else own.key, resume=sec.resume if own.resume is None else own.resume
    )


def teacher_key_view(cfg: Any) -> dict:
    """The config (a RunConfig or one of its sections) as the default teacher's key sees it, which
    teacher.default_teacher_key hashes: `to_dict(cfg)` with key-free fields at their defaults, fields added later
    left out while they hold their `before` value, and changed defaults written as the old ones."""
    fresh = type(cfg)()
    view = {}
    for f in dataclasses.fields(cfg):
        m = meaning_of(type(cfg), f)
        value = getattr(fresh if m.key is False else cfg, f.name)  # a section (key None) is walked into
        if dataclasses.is_dataclass(value):
            value = teacher_key_view(value)
        elif _is_section_list(value):
            value = [teacher_key_view(v) for v in value]
        else:
            value = copy.deepcopy(value)
        if m.before is not UNSET and value == m.before:
            continue
        if m.old_default is not UNSET and value == getattr(fresh, f.name):
            value = m.old_default
        view[f.name] = value
    return view


def resume_may_differ() -> frozenset[str]:
    """Dotted keys (as rundir.config_differences names them) a resumed run directory may change."""
    return frozenset(key for key, cls, f in leaf_fields() if "[]" not in key and meaning_of(cls, f).resume)
