"""Process-group setup for `torchrun`: one process per device, DDP on top (gloo on CPU, NCCL on GPU).

Run without torchrun, everything degrades to a single process (rank 0 of 1) with no process group.
Rank 0 alone writes files and logs; every rank trains on its own slice of each global batch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as tdist

from normgrow.errors import ConfigError


@dataclass(frozen=True)
class DistInfo:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def mps_available() -> bool:
    return torch.backends.mps.is_available()


def available_devices() -> str:
    """What this machine offers to `train.device`, in words."""
    mps = " and mps" if mps_available() else ""
    if not torch.cuda.is_available():
        built = "this torch has no CUDA support" if torch.version.cuda is None else "no CUDA device is visible"
        return f"cpu{mps} only ({built})"
    return f"cpu{mps} and {torch.cuda.device_count()} CUDA device(s): cuda:0 … cuda:{torch.cuda.device_count() - 1}"


def pick_device(pref: str, local_rank: int = 0) -> torch.device:
    """'auto' → the local rank's GPU if CUDA is available, else the CPU. A device this machine does not have is a
    one-line error naming `train.device` and what there is."""
    if pref == "auto":
        pref = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device("cuda", local_rank) if pref == "cuda" else torch.device(pref)
    missing = device.type == "mps" and not mps_available()
    if device.type == "cuda" and (not torch.cuda.is_available() or (device.index or 0) >= torch.cuda.device_count()):
        missing = True
    if missing:
        rank = f" (local rank {local_rank})" if pref == "cuda" and local_rank else ""
        raise ConfigError(f"train.device: {device}{rank} is not on this machine; it has {available_devices()}")
    return device


def setup(device_pref: str = "auto") -> DistInfo:
    """Initialize the process group when launched by torchrun (WORLD_SIZE > 1), else a single process."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = pick_device(device_pref, local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if world > 1 and not tdist.is_initialized():
        # NCCL for CUDA tensors, gloo beside it for the CPU ones (evaluation totals, counts)
        tdist.init_process_group(backend="cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo")
    return DistInfo(rank, world, local_rank, device)


def barrier() -> None:
    if tdist.is_initialized():
        tdist.barrier()


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    """In-place sum over ranks (identity in a single process)."""
    if tdist.is_initialized():
        tdist.all_reduce(t, op=tdist.ReduceOp.SUM)
    return t


def all_reduce_max(n: int) -> int:
    """The largest of an integer over ranks (itself in a single process)."""
    t = torch.tensor([n], dtype=torch.int64)
    if tdist.is_initialized():
        tdist.all_reduce(t, op=tdist.ReduceOp.MAX)
    return int(t.item())


def broadcast_object(obj, src: int = 0):
    """Send a picklable object from `src` to every rank (identity in a single process)."""
    if not tdist.is_initialized():
        return obj
    box = [obj]
    tdist.broadcast_object_list(box, src=src)
    return box[0]
