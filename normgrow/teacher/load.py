"""The teacher: any causal LM loaded through `AutoModelForCausalLM`, and the embedded default one.

- `teacher.path` is a local directory or hub id (Qwen3-8B in the paper preset), `default` (the
  embedded default teacher, built once per data config and cached), or `none` (no teacher: plain
  next-token training — how the default teacher itself is trained).
- The teacher runs in eval mode, without gradients, in `teacher.dtype`. Its distribution is taken
  as `lm_head(decoder(x))`, projected chunk by chunk by the losses; at load time this is checked
  against the model's own logits, so a model with extra logit processing (soft-capping, scaling)
  is refused instead of silently mis-distilled.
- Vocabulary reconciliation: teacher LM-head rows R ≥ tokenizer size V_tok = student vocabulary
  V_S. Rows beyond V_tok (Qwen pads 151,669 tokens to 151,936 rows) are trimmed, so the teacher's
  softmax runs over real tokens only (a silently padded softmax is a common distillation bug); the
  numbers go in the run summary. Anything else is a one-line error.

The default teacher is a small pre-norm student (configs/teacher.yaml; `teacher.default_preset`
names another) trained with next-token CE on the run's own corpus and tokenizer by the same
training loop, exported in Hugging Face Qwen3 format with its tokenizer, and loaded back through
the same `AutoModelForCausalLM` path as Qwen3-8B. This module defines its recipe and where it is
cached; building it combines training and export, so it lives above them (run/pipeline.py).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig, PreTrainedModel
from transformers.utils import logging as hf_logging

from normgrow import hfsource
from normgrow.config import ModelConfig, RunConfig, load_config
from normgrow.errors import NormgrowError
from normgrow.nn.losses import TeacherChunks
from normgrow.nn.model import Student
from normgrow.parallel import sharding

NO_TEACHER = "none"
DEFAULT_TEACHER = "default"


class TeacherError(NormgrowError):
    """The teacher cannot be loaded or does not fit the tokenizer/student."""


# Shapes of hub teachers the presets name, for cost estimates without the hub (their published config.json).
KNOWN_SHAPES: dict[str, dict[str, Any]] = {
    "Qwen/Qwen3-8B": dict(n_layer=36, d_model=4096, n_head=32, n_kv_head=8, head_dim=128, d_ff=12288, vocab_size=151936)
}


def teacher_shape(cfg: RunConfig) -> ModelConfig | None:
    """The teacher's shape, for cost estimates before it is loaded: the default teacher's preset, the
    config.json of a local checkpoint (Qwen3/Llama-style keys) or a GGUF file's header, or a known hub model's (KNOWN_SHAPES);
    None when unknown (no teacher, another hub id)."""
    vocab = cfg.model.vocab_size or cfg.data.vocab_size
    if cfg.teacher.path == DEFAULT_TEACHER:
        return dataclasses.replace(load_config(cfg.teacher.default_preset).model, vocab_size=vocab)
    if cfg.teacher.path in KNOWN_SHAPES and not Path(cfg.teacher.path).exists():
        return ModelConfig(**KNOWN_SHAPES[cfg.teacher.path])
    try:
        hf = _hf_config(cfg.teacher.path)
        return ModelConfig(
            n_layer=int(hf["num_hidden_layers"]),
            d_model=int(hf["hidden_size"]),
            n_head=int(hf["num_attention_heads"]),
            n_kv_head=int(hf.get("num_key_value_heads") or hf["num_attention_heads"]),
            head_dim=hf.get("head_dim"),
            d_ff=int(hf["intermediate_size"]),
            vocab_size=int(hf.get("vocab_size") or vocab or 0),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _hf_config(path: str) -> dict:
    """A local checkpoint's config.json, or the config transformers reads from a GGUF file's header."""
    src = hfsource.locate(path, "teacher.path")
    if src.gguf is None:
        return json.loads((Path(path) / "config.json").read_text())
    return _auto_config(src).to_dict()


def _auto_config(src: hfsource.Source) -> PretrainedConfig:
    """AutoConfig of a local checkpoint; a GGUF header's (≈ 4 s to read) is remembered per file and version."""
    if src.gguf is None:
        return AutoConfig.from_pretrained(src.ref)
    st = src.gguf.stat()
    return _gguf_config(str(src.gguf), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _gguf_config(file: str, size: int, mtime_ns: int) -> PretrainedConfig:
    hf_logging.disable_progress_bar()
    return AutoConfig.from_pretrained(str(Path(file).parent), gguf_file=Path(file).name)


def non_embedding_parameters(cfg: RunConfig) -> int | None:
    """The teacher's parameters outside its token embedding and LM head (the paper's capacity measure; the
    student's is its blocks and final norm), counted on the meta device from its config: any architecture
    transformers knows, the default teacher's preset, a known hub model's shape; None when unknown."""
    path = cfg.teacher.path
    if path == NO_TEACHER:
        return None
    src = hfsource.locate(path, "teacher.path") if path != DEFAULT_TEACHER else None
    if src is not None and (src.gguf is not None or (Path(path) / "config.json").is_file()):
        hf_logging.set_verbosity_error()
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(_auto_config(src))
        embed, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
        total = sum(p.numel() for p in model.parameters())  # a tied head is one parameter, counted once
        return total - embed.numel() - (0 if head is embed else head.numel())
    shape = teacher_shape(cfg)
    if shape is None:
        return None
    rows = shape.vocab_size or 0
    with torch.device("meta"):
        student = Student(dataclasses.replace(shape, vocab_size=rows or 1))
    return sum(p.numel() for p in student.layers.parameters()) + sum(p.numel() for p in student.norm.parameters())


def unigram_nll(train: np.ndarray, val: np.ndarray, vocab_size: int) -> float:
    """Val NLL (nats/token) of the add-one-smoothed unigram distribution of the train tokens; the
    first val token has no prediction, as in the model's next-token NLL."""
    counts = np.bincount(np.asarray(train), minlength=vocab_size).astype(np.float64) + 1.0
    logp = np.log(counts / counts.sum())
    return float(-logp[np.asarray(val[1:])].mean())


# ----------------------------------------------------------------------------- loading


@dataclass
class Teacher:
    model: PreTrainedModel
    weight: torch.Tensor  # (V, C_T) LM-head rows of the student's vocabulary
    report: dict

    @property
    def sharded(self) -> bool:
        """Its layers are sharded over the ranks (teacher.sharding=fsdp): every rank must run each forward."""
        return bool(self.report.get("sharded"))

    @torch.no_grad()
    def chunks(self, idx: torch.Tensor) -> TeacherChunks:
        """The teacher's view of a batch (B, T): final hidden states (B·T, C_T) and head rows."""
        hidden = self.model.get_decoder()(input_ids=idx).last_hidden_state  # (B, T, C_T)
        return TeacherChunks(hidden.reshape(-1, hidden.shape[-1]), self.weight)


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def load_teacher(
    path: str,
    dtype: str,
    device: torch.device,
    tokenizer_size: int,
    student_vocab: int,
    seq_len: int | None = None,
    shard: bool = False,
) -> Teacher:
    """The teacher at `path` through AutoModelForCausalLM, checked against the tokenizer and student vocabulary.
    `shard` (teacher.sharding=fsdp over several ranks): its decoder layers sharded over the ranks, whose every
    teacher forward must then happen in step (train/loop.py and teacher/cache.py pad ranks with fewer rows)."""
    model = _from_pretrained(path, dtype)
    max_pos = getattr(model.config, "max_position_embeddings", None)
    if seq_len is not None and isinstance(max_pos, int) and max_pos < seq_len:
        raise TeacherError(
            f"data.seq_len: {seq_len} is longer than the teacher's max_position_embeddings {max_pos} ({path})"
        )
    head = model.get_output_embeddings()
    if head is None or model.get_decoder() is None:
        raise TeacherError(f"teacher.path: '{path}' has no separable decoder and LM head")
    model.eval().requires_grad_(False)
    if shard:
        layers = getattr(model.get_decoder(), "layers", None)
        if not isinstance(layers, torch.nn.ModuleList):
            raise TeacherError(f"teacher.sharding: '{path}' ({type(model).__name__}) has no decoder.layers to shard")
        sharding.shard_layers(model, layers, device)
    else:
        model.to(device)  # type: ignore[arg-type]  # transformers mistypes the wrapped .to
    rows = head.weight.shape[0]
    if rows < tokenizer_size:
        raise TeacherError(
            f"teacher.path: '{path}' has {rows} LM-head rows but the tokenizer has {tokenizer_size} "
            "tokens (is data.tokenizer the teacher's tokenizer?)"
        )
    if student_vocab != tokenizer_size:
        raise TeacherError(f"model.vocab_size: {student_vocab} differs from the tokenizer's {tokenizer_size} tokens")
    if getattr(head, "bias", None) is not None:
        raise TeacherError(f"teacher.path: '{path}' has an LM-head bias, which normgrow does not project")
    teacher = Teacher(
        model,
        head.weight[:tokenizer_size],
        {
            "path": path,
            "dtype": dtype,
            "class": type(model).__name__,
            "head_rows": rows,
            "tokenizer_size": tokenizer_size,
            "student_vocab": student_vocab,
            "trimmed_rows": rows - tokenizer_size,
            "sharded": shard,
            "parameters": sum(p.numel() for p in model.parameters()),
        },
    )
    _check_projection(teacher, device)
    return teacher


def _from_pretrained(path: str, dtype: str) -> PreTrainedModel:
    """AutoModelForCausalLM.from_pretrained, a missing local directory or a failed load as one line."""
    hf_logging.disable_progress_bar()
    src = hfsource.locate(path, "teacher.path")
    looks_local = path.startswith((".", "/", "~")) or os.sep in path.rstrip(os.sep).lstrip(".") and path.count("/") > 1
    if src.gguf is None and looks_local and not Path(path).expanduser().is_dir():
        raise TeacherError(f"teacher.path: {path}: no such directory")
    try:
        return AutoModelForCausalLM.from_pretrained(src.ref, dtype=DTYPES[dtype], **src.kwargs)
    except ImportError as e:  # a GGUF file without the `gguf` package
        raise TeacherError(f"teacher.path: cannot load '{path}': {str(e).strip().splitlines()[0]}") from None
    except (OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise TeacherError(f"teacher.path: cannot load '{path}': {first}") from None


def _check_projection(teacher: Teacher, device: torch.device) -> None:
    """lm_head(decoder(x)) must be the model's logits; otherwise distilling the projection is wrong."""
    idx = torch.arange(8, device=device).remainder(teacher.weight.shape[0])[None]
    with torch.no_grad():
        ref = teacher.model(input_ids=idx).logits[..., : teacher.weight.shape[0]].float()
        ours = (teacher.chunks(idx).hidden @ teacher.weight.T).float().view_as(ref)
    tol = 1e-4 if teacher.weight.dtype == torch.float32 else 5e-2
    if not torch.allclose(ours, ref, atol=tol * max(1.0, ref.abs().max().item()), rtol=0):
        raise TeacherError(
            f"teacher.path: {teacher.report['path']}: its logits are not lm_head(decoder output) "
            "(logit soft-capping or scaling?); not supported"
        )


def copy_embeddings(student, teacher: Teacher) -> None:
    """Initialize the student's token embeddings and LM head from the teacher's (model.init_embeddings=teacher)."""
    emb = typing.cast(torch.Tensor, teacher.model.get_input_embeddings().weight)
    V, C = student.embed_tokens.weight.shape
    if emb.shape[1] != C:
        raise TeacherError(f"model.init_embeddings: the teacher's width {emb.shape[1]} differs from model.d_model={C}")
    with torch.no_grad():
        student.embed_tokens.weight.copy_(emb[:V].to(student.embed_tokens.weight))
        if student.lm_head.weight is not student.embed_tokens.weight:
            student.lm_head.weight.copy_(teacher.weight.to(student.lm_head.weight))
