"""Regional compilation (`train.compile`): each block is compiled, not the model.

A whole-model `torch.compile` traces the embedding, every block and the head as one graph. A growth run changes
its depth at every stage, so it compiled a new graph at every growth event, and each of a study's processes paid
that again. Here every block is compiled on its own (`nn.Module.compile`, in place, so parameter names and
checkpoints are unchanged), for training only: evaluation and the diagnostics run the blocks eagerly. dynamo keys its compiled code on the block's class (its `forward`) and treats the
parameters as inputs, so all blocks of one placement share one graph per input shape and grad mode: a depth
change or an appended block adds none. The token embedding, the final norm and the chunked loss (nn/losses.py)
stay eager.

torch's on-disk caches (the FX graph cache and the AOTAutograd cache, which hold the generated C++ and its
compiled libraries) live under `<cache>/compile/` ($NORMGROW_CACHE), so the first process of a study compiles
and the others load. A user's own TORCHINDUCTOR_CACHE_DIR wins (torch's default location, which torch writes into
that variable when it first looks, does not count as one); a cache root this user cannot write, or whose path
holds a space (inductor puts the path into its g++ command unquoted, so the build fails), leaves torch its default
location. Compiled and eager runs agree to rounding, not bitwise (tests/train/test_train.py; docs/LOG.md
measures how close after a study).
"""

from __future__ import annotations

import os
import typing
from pathlib import Path

import torch

CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"


def torch_default_cache_dir() -> str:
    """The directory torch's inductor uses when TORCHINDUCTOR_CACHE_DIR is unset — and writes into that variable
    the first time it looks (importing transformers' torch integration does), so a value equal to it is torch's
    own, or a parent process's, not a user's choice."""
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    except ImportError:  # a torch without that helper: nothing to tell apart
        return ""
    return os.path.abspath(default_cache_dir())


def use_compile_cache(cache_root: Path) -> str | None:
    """Point torch's compile caches at `<cache_root>/compile` unless the environment names a place of its own;
    returns the directory in use (None: torch's default, because this user cannot write under `cache_root`)."""
    current = os.environ.get(CACHE_ENV)
    if current and os.path.abspath(current) != torch_default_cache_dir():
        return current
    target = cache_root / "compile"
    if any(c.isspace() for c in str(target.resolve())):
        return None  # inductor builds its C++ with the cache path unquoted in the g++ command: a space breaks it
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    if not os.access(target, os.W_OK | os.X_OK):
        return None
    os.environ[CACHE_ENV] = str(target.resolve())
    return os.environ[CACHE_ENV]


def is_compiled(block: torch.nn.Module) -> bool:
    """Whether `block` itself was compiled by compile_blocks (a deep copy of a compiled block is not)."""
    return getattr(getattr(block, "_compiled_call_impl", None), "compiled_block", None) is block


def compile_block(block: torch.nn.Module) -> None:
    """Compile `block` in place for training: a call in training mode with gradients on runs the compiled
    graph; every other call (evaluation, diagnostics with their forward hooks, the growth measurement) runs the
    block eagerly, exactly as without compile. What `nn.Module.compile` does (`_compiled_call_impl`, the compiled
    `_call_impl`), with that dispatch in front."""
    compiled = torch.compile(block._call_impl)
    eager = block._call_impl

    def call(*args, **kwargs):
        if block.training and torch.is_grad_enabled():
            return compiled(*args, **kwargs)
        return eager(*args, **kwargs)

    call.compiled_block = block  # type: ignore[attr-defined]  # marks the wrapper as this block's
    block._compiled_call_impl = call


def compile_blocks(model: torch.nn.Module) -> int:
    """Compile every block of `model.layers` not compiled yet (after a growth event: the appended ones);
    returns how many were compiled now."""
    fresh = [b for b in typing.cast(torch.nn.ModuleList, model.layers) if not is_compiled(b)]
    for block in fresh:
        compile_block(block)
    return len(fresh)
