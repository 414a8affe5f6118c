"""normgrow: controlled distillation studies of normalization placement under curriculum depth growth."""

__version__ = "0.1.0"
