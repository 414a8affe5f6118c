"""The training step: one optimizer step of a student on one rank's share of a global batch, and what it needs —
the precision it runs in, its micro-batches, the optimizer, the module it calls (DDP-wrapped, blocks compiled).

    build_optimizer(model, cfg, device)       AdamW over the trainable parameters, in module order
    wrap_for_training(model, info, cfg)       the module the step calls: DDP across ranks, compiled blocks
    train_step(model, step_fn, optimizer, batch, cfg, info, teacher, lr)
        for each micro-batch:  teacher(x, index) → autocast forward → chunked distillation loss → backward
        clip → non-finite check → AdamW step

The training loop (train/loop.py) calls `train_step` for every step of a run; the speed probe behind `normgrow plan`
and `dtype: auto` (machine/speed.py) calls the same function on a synthetic batch, so what `plan` times is the step a run
takes. Evaluation (train/evaluate.py) shares `autocast` and `micro_batch_size`.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Callable

import torch
from torch.nn.parallel import DistributedDataParallel

from normgrow.config import RunConfig
from normgrow.data import Batch, cache_root
from normgrow.errors import ConfigError
from normgrow.nn.compiling import compile_blocks, use_compile_cache
from normgrow.nn.losses import SampledTeacher, SparseTeacher, TeacherChunks, distill_loss
from normgrow.nn.model import Student
from normgrow.parallel import dist, sharding

# the teacher's distribution for training inputs x (b, T), the sequences `index` of the split (None: no teacher)
TeacherFn = Callable[[torch.Tensor, torch.Tensor], TeacherChunks | SparseTeacher | SampledTeacher | None]


def autocast(cfg: RunConfig, device: torch.device):
    """bfloat16 autocast when the run's student computes in bfloat16 (float32 master weights), else nothing."""
    if cfg.train.dtype == "bfloat16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def micro_batch_size(cfg: RunConfig, info: dist.DistInfo) -> int:
    """Sequences per forward: train.micro_batch_size, or all the sequences a rank holds per step."""
    return cfg.train.micro_batch_size or cfg.train.batch_size // info.world_size


def check_micro_batch(cfg: RunConfig, info: dist.DistInfo) -> None:
    """Every accumulation step of a rank the same size (the config checked that it divides the global batch)."""
    local, mb = cfg.train.batch_size // info.world_size, micro_batch_size(cfg, info)
    if mb < local and local % mb:
        raise ConfigError(
            f"train.micro_batch_size: {mb} does not divide the {local} sequences each of the "
            f"{info.world_size} ranks holds per step (train.batch_size={cfg.train.batch_size})"
        )


BLOCK_INDEX = re.compile(r"(?:^|\.)layers\.(\d+)\.")  # a block parameter's index in the stack


def build_optimizer(model: Student, cfg: RunConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW; weight decay on matrices of the blocks and the LM head only (not norms or embeddings).

    Only trainable parameters enter the optimizer, in a deterministic order (module order), so a
    checkpointed optimizer state maps back onto the same parameters. With curriculum.new_block_lr ≠ 1, the blocks
    appended after the first stage (index ≥ its depth) get groups of their own whose rate is that multiple of the
    schedule's (`lr_scale`, read by the step).
    """
    decay: list[torch.nn.Parameter] = []
    no_decay: list[torch.nn.Parameter] = []
    new_decay: list[torch.nn.Parameter] = []  # the appended blocks', with curriculum.new_block_lr ≠ 1
    new_no_decay: list[torch.nn.Parameter] = []
    scale, first = cfg.curriculum.new_block_lr, cfg.curriculum.stages[0].n_layer
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        appended = scale != 1.0 and (m := BLOCK_INDEX.search(name)) is not None and int(m.group(1)) >= first
        if p.ndim == 2 and not name.startswith("embed_tokens"):
            (new_decay if appended else decay).append(p)
        else:
            (new_no_decay if appended else no_decay).append(p)
    t = cfg.train
    groups = [{"params": decay, "weight_decay": t.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    groups += [  # only where there are appended blocks: a run without them keeps its two groups
        {"params": ps, "weight_decay": wd, "lr_scale": scale}
        for ps, wd in ((new_decay, t.weight_decay), (new_no_decay, 0.0))
        if ps
    ]
    fused = device.type in ("cuda", "cpu")
    return torch.optim.AdamW(groups, lr=t.lr, betas=(t.beta1, t.beta2), fused=fused)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """The schedule's rate into every group, times the group's `lr_scale` (the appended blocks' groups:
    curriculum.new_block_lr)."""
    for g in optimizer.param_groups:
        g["lr"] = lr * g.get("lr_scale", 1.0)


def uses_fsdp(cfg: RunConfig, info: dist.DistInfo) -> bool:
    return cfg.train.sharding == "fsdp" and info.world_size > 1


def wrap_for_training(model: Student, info: dist.DistInfo, cfg: RunConfig) -> torch.nn.Module:
    """The module the training step calls: DDP across ranks (a sharded model is its own wrapper), its blocks
    compiled where `train.compile` asks (nn/compiling.py: each block on its own, so wrapping again after growth
    compiles only the appended blocks, and they reuse their placement's graph)."""
    if cfg.train.compile:
        if uses_fsdp(cfg, info):
            raise ConfigError(
                "train.compile: not supported with train.sharding=fsdp (compile the blocks of a "
                "replicated student: train.sharding=ddp)"
            )
        use_compile_cache(cache_root(cfg.data))
        compile_blocks(model)
    if info.world_size > 1 and not sharding.is_sharded(model):
        return DistributedDataParallel(model, device_ids=[info.device.index] if info.device.type == "cuda" else None)
    return model


class NonFinite(Exception):
    """Raised by train_step before the update when the loss or the gradient norm is NaN/inf."""

    def __init__(self, what: str, loss: float):
        super().__init__(what)
        self.what, self.loss = what, loss


def _gradient_sync(
    model: Student, step_fn: torch.nn.Module, info: dist.DistInfo, last: bool
) -> contextlib.AbstractContextManager:
    """DDP and FSDP reduce gradients on the last micro-batch only (no_sync / no gradient sync on the others)."""
    if sharding.is_sharded(model):
        sharding.set_gradient_sync(model, last)
    elif info.world_size > 1 and not last:
        return step_fn.no_sync()  # type: ignore[operator]  # step_fn is DDP here
    return contextlib.nullcontext()


def train_step(
    model: Student,
    step_fn: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: Batch,
    cfg: RunConfig,
    info: dist.DistInfo,
    teacher: TeacherFn,
    lr: float,
) -> tuple[float, torch.Tensor]:
    """One optimizer step on this rank's share of a global batch; returns (train/loss, gradient norm).

    Loss normalization — the contract of losses.distill_loss, enforced here: each micro-batch's loss
    is its sum over tokens divided by `n_local`, the tokens this rank contributes to the step, so a
    rank's micro-batch losses add up to its per-token mean. DDP then *averages* the gradients over
    ranks, which — every rank holding the same number of tokens — is the gradient of the per-token
    mean over the global batch, the same for any split into ranks and micro-batches (the logged loss
    is averaged the same way). tests/train/test_train.py checks one step against 2 × accumulation and 2 ranks.
    """
    set_lr(optimizer, lr)
    n_local = batch.tokens.shape[0] * cfg.data.seq_len
    mb = micro_batch_size(cfg, info)
    micro, index = batch.tokens.split(mb), batch.index.split(mb)
    loss_sum = torch.zeros((), device=info.device)
    d = cfg.distill
    for i, (part, idx) in enumerate(zip(micro, index, strict=True)):
        x, y = part[:, :-1].to(info.device), part[:, 1:].to(info.device)  # both (b, T)
        with _gradient_sync(model, step_fn, info, last=i == len(micro) - 1):
            with autocast(cfg, info.device):
                h = step_fn(x, hidden_only=True)  # (b, T, C)
            loss = distill_loss(
                h.reshape(-1, h.shape[-1]),
                model.lm_head.weight,
                teacher(x, idx),
                y.reshape(-1),
                n_tokens=n_local,
                kind=d.loss,
                temperature=d.temperature,
                jsd_beta=d.jsd_beta,
                nll_weight=d.nll_weight,
                chunk=d.chunk_tokens,
            )
            loss.backward()
        loss_sum += loss.detach()
    dist.all_reduce_sum(loss_sum)
    train_loss = loss_sum.item() / info.world_size
    params = [p for p in model.parameters() if p.requires_grad]
    grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.train.grad_clip if cfg.train.grad_clip > 0 else float("inf"))
    grad_norm = sharding.full_tensor(grad_norm)  # a DTensor under FSDP
    if not (math.isfinite(train_loss) and torch.isfinite(grad_norm)):
        raise NonFinite("loss" if not math.isfinite(train_loss) else "gradient norm", train_loss)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return train_loss, grad_norm
