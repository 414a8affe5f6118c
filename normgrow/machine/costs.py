"""The cost model of a run, computed from its config alone — no model built, no data read, no teacher loaded —
and shared by everything that estimates before running: `normgrow plan` (memory per device, device-hours),
the run's memory check at start (pipeline.check_memory) and a study's progress bar (FLOPs per stage).

Memory per device of one run (bytes):
    student weights, gradients, AdamW moments    4 + 4 + 8 bytes per parameter (float32 master weights);
                                                 divided by the data-parallel ranks under FSDP sharding
    activations of one micro-batch               per block and token, the tensors autograd keeps:
                                                 4·d + 3·H·hd + 2·Hkv·hd + 4·d_ff elements (norm outputs, q,
                                                 k, v, attention output, MLP gate/up/activation/product), at
                                                 2 bytes under bf16 autocast (4 in float32); with activation
                                                 checkpointing only each block's input (d) plus one block's set
    distillation loss chunk                      ≈ 6 float32 (chunk_tokens × V) temporaries (docs/LOG.md)
    teacher weights                              its parameters at teacher.dtype (no gradients, no optimizer),
                                                 divided by the ranks under teacher.sharding=fsdp
FLOPs: the student's training FLOPs of every stage (stages.step_cost: 6·N per token plus attention)
and the teacher's forward (2·N_teacher per token plus attention).
"""

from __future__ import annotations

import dataclasses
import typing

from normgrow.config import ModelConfig, RunConfig, resolved_head_dim
from normgrow.nn.model import parameters_of
from normgrow.teacher.load import teacher_shape
from normgrow.train.stages import forward_flops_per_token, plan_stages, step_cost, tokens_per_step

BYTES_PER_WEIGHT = {"float32": 4, "bfloat16": 2, "float16": 2, "auto": 2}  # `auto` is bfloat16 where it is fast


def vocab_of(cfg: RunConfig) -> int:
    """The student's vocabulary: set, or the teacher's (data.tokenizer=teacher), or the BPE size to train."""
    if cfg.model.vocab_size:
        return cfg.model.vocab_size
    t = teacher_shape(cfg) if cfg.data.tokenizer == "teacher" and cfg.teacher.path != "default" else None
    return typing.cast(int, t.vocab_size) if t is not None else cfg.data.vocab_size  # teacher_shape sets it


def with_vocab(cfg: RunConfig) -> RunConfig:
    """The config with its student's vocabulary filled in (`vocab_of`)."""
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, vocab_size=vocab_of(cfg)))


def activation_elements(m: ModelConfig) -> int:
    """Elements autograd keeps per token and block (see the module docstring)."""
    hd = resolved_head_dim(m)
    return 4 * m.d_model + 3 * m.n_head * hd + 2 * m.n_kv_head * hd + 4 * m.d_ff


def student_state_bytes(cfg: RunConfig, world: int, fsdp: bool = False) -> dict[str, float]:
    """float32 weights, gradients and AdamW's two moments of the student, per device."""
    n = parameters_of(cfg.model)
    shard = world if fsdp or cfg.train.sharding == "fsdp" else 1
    return {
        "student weights (fp32)": 4 * n / shard,
        "gradients (fp32)": 4 * n / shard,
        "AdamW moments (fp32)": 8 * n / shard,
    }


def teacher_bytes(cfg: RunConfig, world: int) -> float:
    """The teacher's weights per device at teacher.dtype (0 without a teacher of known shape)."""
    t = teacher_shape(cfg)
    if t is None:
        return 0
    return parameters_of(t) * BYTES_PER_WEIGHT[cfg.teacher.dtype] / (world if cfg.teacher.sharding == "fsdp" else 1)


def job_memory(cfg: RunConfig, world: int, fsdp: bool = False) -> dict:
    """Bytes per device of one run, term by term (a run training from the teacher cache counts no teacher)."""
    cfg = with_vocab(cfg)
    m = cfg.model
    assert m.vocab_size is not None  # with_vocab filled it in
    micro = cfg.train.micro_batch_size or max(1, cfg.train.batch_size // world)
    act_bytes = 2 if cfg.train.dtype in ("bfloat16", "auto") else 4
    per_token_block = activation_elements(m)
    tokens = micro * cfg.data.seq_len
    if cfg.train.activation_checkpointing:
        acts = tokens * (m.n_layer * m.d_model + per_token_block) * act_bytes
    else:
        acts = tokens * m.n_layer * per_token_block * act_bytes
    return {
        **student_state_bytes(cfg, world, fsdp),
        f"activations ({micro} × {cfg.data.seq_len} tokens)": acts,
        "loss chunk": 6 * min(cfg.distill.chunk_tokens, tokens) * m.vocab_size * 4,
        "teacher weights": 0 if cfg.teacher.cache else teacher_bytes(cfg, world),
    }


def teacher_flops_per_token(cfg: RunConfig) -> float:
    """The teacher's forward FLOPs per training token (0 without a teacher of known shape)."""
    shape = teacher_shape(cfg)
    return forward_flops_per_token(shape, cfg.data.seq_len) if shape else 0


def stage_costs(cfg: RunConfig) -> list[tuple[int, float]]:
    """(steps, FLOPs per step) of each stage: the student's training FLOPs plus the teacher's forward, so a
    3-block stage weighs less than a 9-block one."""
    cfg = with_vocab(cfg)
    teacher = teacher_flops_per_token(cfg) * tokens_per_step(cfg)
    return [(p.steps, step_cost(cfg, p)["flops"] + teacher) for p in plan_stages(cfg)]
