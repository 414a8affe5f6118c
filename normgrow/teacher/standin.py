"""A CPU stand-in for the paper's inputs: a Qwen3-8B-shaped teacher scaled down, and a FineWeb-Edu-shaped dataset.

`normgrow standin DIR` writes, from the embedded corpus alone (no network):

- `DIR/teacher/`: a `Qwen3ForCausalLM` with Qwen3-8B's config structure (untied head, grouped-query
  attention, q/k norms, rope θ 1e6, RMSNorm ε 1e-6, SiLU MLP, 40,960 positions) at a small width, random
  weights (`initializer_range` 0.02, seeded), saved with `save_pretrained` beside its tokenizer. Like
  Qwen3-8B's, the tokenizer is a byte-level BPE whose special tokens (`<|endoftext|>`, `<|im_start|>`,
  `<|im_end|>`, …) are *added* tokens after the base vocabulary, with no BOS token and `<|im_end|>` as EOS,
  and the embedding and LM head have more rows than the tokenizer has tokens (rounded up to a multiple of
  128, as 151,669 → 151,936); the padded rows hold large values, so an untrimmed softmax would show.
- `DIR/dataset/`: the corpus as Parquet shards in FineWeb-Edu's layout (`sample/10BT/*.parquet`, columns
  `text`, `id`, `url`), with a README whose `configs` declare the `sample-10BT` configuration, so that
  `datasets.load_dataset(DIR/dataset, "sample-10BT", split="train")` — the call a `hf:` corpus makes — reads
  it exactly as it reads the hub's copy.

`study_overrides(DIR)` lists the overrides that run the `paper` study preset on them: paths and sizes only
(model width, sequence length, budgets and cadences, seeds, processes per run), nothing else changed; the
slow test `test_paper_path_runs_on_the_cpu_stand_in` runs it, and docs/paper-scale.md §8 shows it.
"""

from __future__ import annotations

import itertools
import json
import typing
from pathlib import Path

import torch

from normgrow.config import DataConfig
from normgrow.data import iter_documents
from normgrow.errors import NormgrowError

# Qwen3-8B's config.json, as published, less the sizes (filled in by `teacher_config`).
QWEN3_8B = dict(
    architectures=["Qwen3ForCausalLM"],
    model_type="qwen3",
    attention_bias=False,
    attention_dropout=0.0,
    hidden_act="silu",
    initializer_range=0.02,
    max_position_embeddings=40960,
    rms_norm_eps=1e-6,
    rope_scaling=None,
    rope_theta=1000000.0,
    sliding_window=None,
    use_sliding_window=False,
    tie_word_embeddings=False,
    use_cache=True,
    hidden_size=4096,
    intermediate_size=12288,
    num_hidden_layers=36,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    vocab_size=151936,
)
# Qwen's special tokens come after the byte-level BPE's merges, as added tokens (the first few of its 26).
SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<think>",
    "</think>",
]
SIZES = dict(
    hidden_size=64,
    intermediate_size=192,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
)
DATASET_CONFIG, SHARD_DIR = "sample-10BT", "sample/10BT"


class StandInError(NormgrowError):
    """The stand-in cannot be written where asked."""


def _documents(n: int) -> list[str]:
    return [text for _, text in itertools.islice(iter_documents(DataConfig(corpus="stdlib")), n)]


def write_dataset(out: Path, texts: list[str], shards: int = 2) -> None:
    """The texts as FineWeb-Edu-shaped Parquet shards under out/sample/10BT, declared by out/README.md."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    shard_dir = out / SHARD_DIR
    shard_dir.mkdir(parents=True)
    per = -(-len(texts) // shards)
    for s in range(shards):
        part = texts[s * per : (s + 1) * per]
        ids = [f"<urn:uuid:standin-{s * per + i:06d}>" for i in range(len(part))]
        table = pa.table({"text": part, "id": ids, "url": [f"https://example.org/{i}" for i in ids]})
        pq.write_table(table, shard_dir / f"{s:03d}_00000.parquet")
    (out / "README.md").write_text(
        "---\nconfigs:\n"
        f"- config_name: {DATASET_CONFIG}\n  data_files:\n  - split: train\n    path: {SHARD_DIR}/*\n---\n"
        "A FineWeb-Edu-shaped stand-in written by `normgrow standin` from normgrow's embedded corpus.\n"
    )


def train_tokenizer(texts: list[str], base_vocab: int):
    """A byte-level BPE with Qwen's conventions: special tokens added after the base vocabulary, no BOS."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=base_vocab, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, clean_up_tokenization_spaces=False)
    fast.add_special_tokens({"additional_special_tokens": SPECIAL_TOKENS})
    fast.eos_token, fast.pad_token = "<|im_end|>", "<|endoftext|>"
    return fast


def teacher_config(n_tokens: int, **sizes):
    """Qwen3-8B's config at the stand-in's sizes; the head padded to a multiple of 128 rows."""
    from transformers import Qwen3Config

    fields = {**QWEN3_8B, **SIZES, **sizes}
    fields["vocab_size"] = -(-n_tokens // 128) * 128
    fields.pop("architectures"), fields.pop("model_type")
    cfg = Qwen3Config(**fields)
    cfg.architectures = ["Qwen3ForCausalLM"]
    return cfg


def make_standin(
    out: str | Path, documents: int = 600, base_vocab: int = 500, seed: int = 0, sizes: dict | None = None
) -> Path:
    """Write DIR/teacher and DIR/dataset (see the module docstring); refuses an existing DIR."""
    from transformers import Qwen3ForCausalLM

    out = Path(out)
    if out.exists():
        raise StandInError(f"{out}: already exists (give a new directory)")
    texts = _documents(documents)
    if len(texts) < documents:  # not silently fewer than asked (the corpus is this Python's standard library)
        raise StandInError(f"--documents: {documents:,} asked; the embedded corpus has {len(texts):,} documents")
    tmp = out.with_name(out.name + ".partial")
    if tmp.exists():
        import shutil

        shutil.rmtree(tmp)
    write_dataset(tmp / "dataset", texts)
    tok = train_tokenizer(texts, base_vocab)
    cfg = teacher_config(len(tok), **(sizes or {}))
    cfg.eos_token_id, cfg.pad_token_id, cfg.bos_token_id = tok.eos_token_id, tok.pad_token_id, None
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(cfg)
    with torch.no_grad():  # padded rows: never a token, but large; untrimmed they would take the softmax's mass
        for w in (typing.cast(torch.Tensor, model.get_input_embeddings().weight), model.get_output_embeddings().weight):
            w[len(tok) :] = 0.5
    model.save_pretrained(tmp / "teacher")
    tok.save_pretrained(tmp / "teacher")
    (tmp / "standin.json").write_text(
        json.dumps(
            {"documents": len(texts), "tokenizer_size": len(tok), "head_rows": cfg.vocab_size, "seed": seed}, indent=2
        )
        + "\n"
    )
    tmp.rename(out)
    return out


def study_overrides(standin: str | Path, seeds: str = "[0]", nproc: int = 2) -> list[str]:
    """What runs the `paper` study preset on the stand-in: its paths, then sizes only."""
    d = Path(standin).resolve()
    return [
        f"teacher.path={d / 'teacher'}",
        f"data.corpus=hf:{d / 'dataset'}",  # the paths
        # the student at the stand-in's width (nine blocks, as the paper's), and the data at its length
        "model.d_model=64",
        "model.n_head=4",
        "model.n_kv_head=2",
        "model.head_dim=16",
        "model.d_ff=192",
        "data.seq_len=64",
        "data.val_tokens=2048",
        "data.probe_sequences=4",
        "select_tokens=2048",
        # budgets and cadences: 1B tokens × 2e-5 = 20k tokens per joint run, in steps of 8 × 64
        "budget_scale=2e-5",
        "train.batch_size=8",
        "train.warmup_tokens=1024",
        "train.eval_every_tokens=8192",
        "train.checkpoint_every_tokens=8192",
        "diagnostics.every_tokens=8192",
        # how many runs, and processes per run: one seed, 2 torchrun ranks on the CPU, submitit's local executor
        f"seeds={seeds}",
        f"launcher.torchrun_nproc={nproc}",
        "launcher.cluster=local",
        "launcher.parallel=1",
        "launcher.parameters.gpus_per_node=0",
        "launcher.parameters.timeout_min=60",
    ]
