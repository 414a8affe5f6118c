"""Norm kinds: what every N of a student is (`model.norm_kind`), independent of where its placement puts it.

Like blocks.py, this module imports only torch: `normgrow export` copies it beside blocks.py into every export that
is not a stock Qwen3, so `trust_remote_code=True` builds the built-in kinds without normgrow.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

# ----------------------------------------------------------------------------- norm kinds
#
# A norm kind (`model.norm_kind`) is what every N of a student is, independent of where the placement puts it: the
# norms around the sublayers, the per-head q/k (and HybridNorm's v) norms and the final norm. Each is a module with
# `is_norm = True` and a `reset_parameters()` that sets its initial values without drawing random numbers, so a
# block's init (Block.init_weights) draws the same numbers for its linear weights whatever the kind.


class RMSNorm(nn.Module):
    """rmsnorm: y = g · x / sqrt(mean(x²) + eps), computed in float32 like Qwen3RMSNorm; g starts at 1."""

    is_norm = True

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        y = F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps)
        return (self.weight * y.to(dtype)).to(dtype)  # stay in the input dtype under autocast


class LayerNorm(nn.Module):
    """layernorm: y = g · (x − mean(x)) / sqrt(var(x) + eps) + b (biased variance), computed in float32; g starts
    at 1, b at 0."""

    is_norm = True

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))
        self.eps = eps

    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight)
        nn.init.zeros_(self.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        y = F.layer_norm(x.float(), (x.shape[-1],), eps=self.eps)
        return (self.weight * y.to(dtype) + self.bias.to(dtype)).to(dtype)


class DyT(nn.Module):
    """dyt (Dynamic Tanh, "Transformers without Normalization", 2025): y = g · tanh(a · x) + b, no statistics; a is
    one learned scalar per norm starting at model.dyt_alpha, g starts at 1, b at 0. Computed in float32."""

    is_norm = True

    def __init__(self, dim: int, alpha: float):
        super().__init__()
        self.alpha0 = alpha
        self.alpha = nn.Parameter(torch.full((1,), float(alpha)))
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def reset_parameters(self) -> None:
        nn.init.constant_(self.alpha, self.alpha0)
        nn.init.ones_(self.weight)
        nn.init.zeros_(self.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        y = torch.tanh(self.alpha * x.float())
        return (self.weight * y.to(dtype) + self.bias.to(dtype)).to(dtype)


# The built-in norm kinds by name: each makes a norm of width `dim` for a model config (model.NORM_KINDS registers
# these and whatever user code adds; an export carries the built-in ones).
BUILTIN_NORM_KINDS = {
    "rmsnorm": lambda cfg, dim: RMSNorm(dim, cfg.norm_eps),
    "layernorm": lambda cfg, dim: LayerNorm(dim, cfg.norm_eps),
    "dyt": lambda cfg, dim: DyT(dim, getattr(cfg, "dyt_alpha", 0.5)),
}
NORM_KINDS = dict(BUILTIN_NORM_KINDS)  # what make_norm builds from (normgrow's registry adds user kinds here)


def make_norm(cfg, dim: int) -> nn.Module:
    """A norm of the config's kind (model.norm_kind; a config from before the field existed: rmsnorm)."""
    kind = getattr(cfg, "norm_kind", "rmsnorm")
    if kind not in NORM_KINDS:
        raise ValueError(f"norm kind '{kind}' is not known here ({', '.join(NORM_KINDS)})")
    return NORM_KINDS[kind](cfg, dim)


def is_norm(module: nn.Module) -> bool:
    return bool(getattr(module, "is_norm", False))
