"""FSDP2 sharding of the student (`train.sharding=fsdp`), next to DDP, for runs over several ranks.

Each block is its own `fully_shard` unit and the root (embedding, final norm, LM head) another, so a rank
holds 1/world of the weights, gradients and AdamW moments between steps. The training step is unchanged:
the root's parameters stay gathered after its forward, so the chunked loss projects through the full LM
head (tied or not), and the gradients are reduce-scattered in the backward pass; accumulation steps skip
the reduction (`set_requires_gradient_sync`) as DDP's `no_sync` does.

Everything that needs the whole model works on a *plain* copy (train/growth.py's `plain_student`), rebuilt from the gathered
weights: diagnostics (rank 0), growth events (every rank grows its plain copy with the same `grow`, which is
then sharded again), and checkpoints, which hold the full weights and an optimizer state in the ordinary
(index-keyed) form — the same files a DDP or single-process run writes, so resume, `diagnose` and
`export` read them unchanged. tests/train/test_train.py checks one step against one process and DDP, and a one-process
run resumed sharded (teacher too) through a growth event against the uninterrupted one-process run.

`shard_layers` shards a frozen model's layers (the teacher's, `teacher.sharding=fsdp`): each layer is gathered
for its own forward, so every rank must run every teacher forward in step.
"""

from __future__ import annotations

import typing
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.distributed.tensor import DTensor


def is_sharded(model: torch.nn.Module) -> bool:
    return isinstance(model, FSDPModule)


def shard(model: torch.nn.Module) -> torch.nn.Module:
    """Shard the student in place over the default process group: each block, then the root."""
    for block in typing.cast(torch.nn.ModuleList, model.layers):
        fully_shard(block)
    fully_shard(model)
    return model


def shard_layers(model: torch.nn.Module, layers: torch.nn.ModuleList, device: torch.device) -> torch.nn.Module:
    """Shard each of `layers` (a frozen model's, e.g. a teacher's decoder layers) over the default process group,
    each gathered only for its own forward, and move the rest of the model (embeddings, norms, head: one full
    copy per rank) to `device`. Every rank must then run the model's forwards in step."""
    for layer in layers:
        fully_shard(layer)
    for module in model.modules():
        for p in module.parameters(recurse=False):
            if not isinstance(p, DTensor):
                p.data = p.data.to(device)  # in place: a tied head stays tied
        for name, b in module.named_buffers(recurse=False):
            module._buffers[name] = b.to(device)
    return model


def full_tensor(t: torch.Tensor) -> torch.Tensor:
    """A DTensor gathered (every rank calls it); any other tensor as it is."""
    return t.full_tensor() if isinstance(t, DTensor) else t


def full_weights(model: torch.nn.Module, rank0_only: bool = False) -> dict[str, torch.Tensor]:
    """The full state dict, on every rank (or on rank 0 alone, in CPU memory). Every rank must call it."""
    opts = StateDictOptions(full_state_dict=True, cpu_offload=rank0_only)
    return typing.cast(dict[str, torch.Tensor], get_model_state_dict(model, options=opts))


def set_gradient_sync(model: torch.nn.Module, sync: bool) -> None:
    typing.cast(FSDPModule, model).set_requires_gradient_sync(sync)


def _param_names(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> list[str]:
    """Names of the optimizer's parameters, in its own order (the order of its state dict's indices)."""
    name_of = {id(p): n for n, p in model.named_parameters(remove_duplicate=False)}
    return [name_of[id(p)] for g in optimizer.param_groups for p in g["params"]]


def full_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, rank0_only: bool = False) -> dict:
    """The optimizer's state dict as an unsharded optimizer would write it (index-keyed, full tensors)."""
    names = _param_names(model, optimizer)
    by_name: dict[str, Any] = get_optimizer_state_dict(
        model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=rank0_only)
    )
    plain = optimizer.state_dict()  # its param_groups hold the indices and hyperparameters
    state = {i: by_name["state"][n] for i, n in enumerate(names) if n in by_name.get("state", {})}
    return {"state": state, "param_groups": plain["param_groups"]}


def _groups_by_name(names: list[str], param_groups: list[dict]) -> list[dict]:
    groups, k = [], 0
    for g in param_groups:
        n = len(g["params"])
        groups.append({**g, "params": names[k : k + n]})
        k += n
    return groups


def load_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, sd: dict) -> None:
    """Load an index-keyed full optimizer state (a checkpoint's) into the optimizer of a sharded model."""
    names = _param_names(model, optimizer)
    by_name: dict[str, Any] = {
        "state": {names[int(i)]: s for i, s in sd["state"].items()},
        "param_groups": _groups_by_name(names, sd["param_groups"]),
    }
    set_optimizer_state_dict(model, optimizer, by_name, options=StateDictOptions(full_state_dict=True))
    _forget_unloaded(model, optimizer, by_name["state"])


def _forget_unloaded(model: torch.nn.Module, optimizer: torch.optim.Optimizer, loaded: dict) -> None:
    """`set_optimizer_state_dict` first initialises every state with one zero-gradient step (step count 1);
    parameters it was given no state for must start fresh (step 0) as in an unsharded run."""
    names = _param_names(model, optimizer)
    params = [p for g in optimizer.param_groups for p in g["params"]]
    for name, p in zip(names, params, strict=True):
        if name not in loaded:
            optimizer.state.pop(p, None)


def load_state_by_name(model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, dict]) -> None:
    """Give the named parameters of a fresh optimizer over a sharded model these full AdamW states (the rest
    start fresh). Every rank calls it with the same states."""
    if not state:
        return
    names = _param_names(model, optimizer)
    by_name: dict[str, Any] = {
        "state": state,
        "param_groups": _groups_by_name(names, optimizer.state_dict()["param_groups"]),
    }
    set_optimizer_state_dict(model, optimizer, by_name, options=StateDictOptions(full_state_dict=True, strict=False))
    _forget_unloaded(model, optimizer, state)


def optimizer_state_by_name(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, dict]:
    """{parameter name: its full AdamW state}, on every rank (for carrying moments across a growth event)."""
    sd: dict[str, Any] = get_optimizer_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True))
    return dict(sd.get("state", {}))
