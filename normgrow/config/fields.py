"""The run configuration's fields: typed, nested dataclasses, one per section, each field with its one-line attribute
docstring (its help text, `normgrow config --fields`) and its meaning (`schema.setting`, `schema.section`): whether
it enters the default teacher's key and whether a resumed run may change it. Loading is in load.py, the checks the
types cannot express in checks.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from normgrow.config.schema import section, setting


@section(resume=False)
@dataclass
class ModelConfig:
    norm: str = setting("pre", key=True)
    """Normalization placement of every block: pre h+F(N(h)) | post N(h+F(h)) | sandwich h+N2(F(N1(h))) | deepnorm N(α·h+F(h)) | reordered h+N(F(h)) | hybrid (QKV-norm attention, post-norm FFN) | lnscale h+F(N(h)/√ℓ) | keel N(2D·h+F(N(h))) | sandwich-ds (sandwich, output gains 1/√(2D)) | a registered one; or the rule mixln (post in the first floor(mixln_ratio·n_layer) blocks, pre above)."""
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
    norm_kind: str = setting("rmsnorm", key=True, before="rmsnorm")
    """What every norm of the student is, wherever the placement puts it (block norms, per-head q/k norms, the final norm): rmsnorm g·x/rms(x) | layernorm g·(x−mean)/sd + b | dyt g·tanh(a·x) + b (no statistics) | a registered one."""
    boundary_scale: float = setting(1.0, key=False, before=1.0)
    """The causal dose: from each growth event on, the stream entering the event's first appended block is multiplied by this absolute factor (not one relative to a measured ratio), every block left as it is; with zero-initialized appended blocks and a scale-invariant final norm the function is unchanged at the event. 1 = none."""
    scaled_boundaries: list[int] = setting(factory=list, key=False, before=[])
    """Block indices where boundary_scale applies; filled from the curriculum's stage depths (all but the last) when left empty."""
    dyt_alpha: float = setting(0.5, key=True, before=0.5)
    """Initial value of DyT's learned scalar a (model.norm_kind=dyt; the DyT paper's default for non-LLM models, not tuned here)."""


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
    streaming: bool = setting(True, key=False, before=True)
    """Stream an `hf:` corpus (`datasets` streaming: only the documents read — data.max_documents of them — are fetched, nothing is copied to Arrow); false downloads and converts the whole split first. Both give the same documents, ids and shards."""
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
    """Teacher causal LM: a local directory, hub id, .gguf file or pkg:DIST/FILE (a file an installed package ships); 'default' = the embedded default teacher; 'none' = plain next-token training."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = setting("auto", old_default="float32")
    """Dtype the teacher is loaded in; 'auto' = bfloat16 only where it is native and its forward of this run's shape is measured ≥ 1.2× faster (machine/dtypes.py), else float32."""
    default_preset: str = "teacher"
    """Preset whose run trains the embedded default teacher (used when path is 'default')."""
    sharding: Literal["none", "fsdp"] = setting("none", resume=True, before="none")
    """Over several ranks: 'fsdp' shards the teacher's decoder layers (each gathered for its forward) for a teacher too big for one device; 'none' keeps a full copy on every rank."""
    cache: bool = False
    """Train from a teacher cache (built once, then shared by runs; its kind: cache_kind); validation stays online and exact."""
    cache_kind: Literal["topk", "sampled"] = setting("topk", before="topk")
    """'topk': the cache_k most likely tokens and a tail bucket (biased unless cache_k ≥ the vocabulary); 'sampled': cache_samples ids drawn per token from the teacher's distribution at the distillation temperature (seeded by cache_seed) and its entropy: an unbiased loss and gradient (ce, kl) at 2·n + 2 bytes a token."""
    cache_samples: int = setting(12, before=12)
    """Draws per token in a sampled cache (with replacement, from p_T^τ; each weighs 1/n)."""
    cache_seed: int = setting(0, before=0)
    """Seed of a sampled cache's draws (per sequence, so the draws do not depend on chunks, ranks or resumes)."""
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
    optimizer: Literal["keep", "reset", "copy"] = setting("keep", key=True)
    """Optimizer state at growth: keep existing moments (new params start fresh), reset all, or copy = keep, and each copied block (growth_init=copy) starts from its source block's moments and step count."""
    new_block_lr: float = setting(1.0, key=True, before=1.0)
    """Learning rate of the blocks appended after the first stage, as a multiple of train.lr (append growth; 1 = the same rate as the rest): the rate counterpart of model.boundary_scale, since under Adam scaling the stream by c scales the appended blocks' step relative to it by 1/c."""
    lr_schedule: Literal["global", "restart"] = setting("global", key=True)
    """One LR schedule over the whole run, or a re-warmup and decay per stage."""
    match_budget: str | None = setting(None, key=True)
    """Take the budget from another run directory or config (preset name or YAML): stage budgets are scaled to match its total."""
    match_by: Literal["active_layer_tokens", "tokens", "flops"] = setting("active_layer_tokens", key=True)
    """The compute measure matched by match_budget (active-layer tokens is the paper's compute control)."""
    match_stages: Literal["all", "last"] = setting("all", key=True, before="all")
    """What match_budget scales: every stage, keeping their proportions, or the last stage alone (the stages before it
    as given: a budget ladder's decay branches share them)."""


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
    """Autocast dtype for the student's forward; 'auto' = bfloat16 only where it is native and measured faster (CUDA with bf16; CPUs with AMX/AVX-512-BF16 whose matmul probe and then this run's own training step are ≥ 1.5× and ≥ 1.2× faster in it; cached), else float32 (machine/dtypes.py)."""
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
    checkpoint_tokens: list[int] = setting(factory=list, key=False, before=[])
    """Also checkpoint, and keep, the steps ending at these token counts (a ladder's trunk: its branches' starts)."""
    stop_tokens: int = setting(0, key=False, before=0)
    """Stop after this many tokens, checkpointed, without a summary (0 = train to the end): a ladder's trunk."""
    init_from: str | None = setting(None, key=False, resume=True, before=None)
    """Start from this checkpoint of another run (…/checkpoints/step_N), not step 0: a decay branch (train/branch.py)."""
    loggers: list[str] = setting(factory=list, key=False)
    """Extra metric sinks besides metrics.jsonl: 'tensorboard', 'wandb' (offline unless WANDB_MODE says otherwise), 'trackio' (local)."""
    track_group: str = setting("", key=False, resume=True, before="")
    """The trackers' run group ('' = none); a study sets <study>/<arm>."""
    track_job_type: str = setting("", key=False, resume=True, before="")
    """W&B's job type ('' = none); a study sets the run's role: its arm's part in the claims, pilot, trunk or branch."""
    track_tags: list[str] = setting(factory=list, key=False, resume=True, before=[])
    """The trackers' tags; a study sets seed, budget, placement and curriculum."""


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
