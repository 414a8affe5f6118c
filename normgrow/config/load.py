"""Presets and overrides into a RunConfig: the preset's YAML layers (a preset may name a `base`) and dotted overrides
merged by OmegaConf onto the dataclasses of fields.py (types and unknown keys checked), then checks.py's `validate`.
A config saved with `save_config` reloads equal."""

from __future__ import annotations

import copy
import dataclasses
import importlib.resources
import json
import os
from pathlib import Path

from omegaconf import OmegaConf

from normgrow import atomic
from normgrow.config.checks import validate
from normgrow.config.fields import RunConfig
from normgrow.config.schema import leaf_fields, load_structured, meaning_of, need, read_yaml
from normgrow.errors import ConfigError


def preset_names() -> list[str]:
    """Names of the run presets shipped in configs/."""
    root = importlib.resources.files("normgrow.configs")
    return sorted(p.name[: -len(".yaml")] for p in root.iterdir() if p.name.endswith(".yaml"))


def preset_path(name_or_path: str) -> Path:
    """A preset name ('tiny') or a YAML path → the file; one-line error if neither exists."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or os.sep in name_or_path:
        if not p.is_file():
            raise ConfigError(f"{name_or_path}: config file not found")
        return p
    candidate = importlib.resources.files("normgrow.configs") / f"{name_or_path}.yaml"
    if not candidate.is_file():
        raise ConfigError(f"{name_or_path}: no such preset (presets: {', '.join(preset_names())}) and no such file")
    return Path(str(candidate))


def _preset_layers(preset: str, seen: tuple[str, ...] = ()) -> list[tuple[str, dict]]:
    """A preset and the chain of presets it names with `base:`, base first."""
    path = preset_path(preset)
    data = read_yaml(path)
    base = data.pop("base", None)
    if base is None:
        return [(str(path), data)]
    if not isinstance(base, str):
        raise ConfigError(f"{path}: base: expected a preset name or path")
    if str(path) in seen:
        raise ConfigError(f"{path}: base: presets form a cycle")
    if os.sep in base and not Path(base).is_absolute():
        base = str(path.parent / base)
    return _preset_layers(base, seen + (str(path),)) + [(str(path), data)]


def load_config(preset: str | None = None, overrides: tuple[str, ...] | list[str] = ()) -> RunConfig:
    """Defaults ← preset YAML (name or path, after the presets it names with `base:`) ← dotted
    overrides, type-checked and validated."""
    layers = _preset_layers(preset) if preset is not None else []
    key = json.dumps([layers, list(overrides)], sort_keys=True, default=str)  # the files' contents, not their names
    if key in _LOADED:
        return copy.deepcopy(_LOADED[key])
    cfg = _load(layers, overrides)
    if len(_LOADED) >= 512:
        _LOADED.pop(next(iter(_LOADED)))
    _LOADED[key] = cfg
    return copy.deepcopy(cfg)


_LOADED: dict[str, RunConfig] = {}  # load_config's results by their inputs: a study plans hundreds of one config


def _load(layers: list[tuple[str, dict]], overrides: tuple[str, ...] | list[str]) -> RunConfig:
    cfg = load_structured(RunConfig, layers, overrides)
    tps = cfg.train.tokens_per_step
    if tps is not None:  # the step's size in tokens fixes its size in sequences
        need(
            tps > 0 and tps % cfg.data.seq_len == 0,
            "train.tokens_per_step",
            f"{tps} is not a positive multiple of data.seq_len={cfg.data.seq_len}",
        )
        cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, batch_size=tps // cfg.data.seq_len))
    if cfg.model.boundary_scale != 1.0 and not cfg.model.scaled_boundaries:  # the growth events' boundaries
        at = [s.n_layer for s in cfg.curriculum.stages[:-1]]
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, scaled_boundaries=at))
    validate(cfg)
    return cfg


def to_dict(cfg: RunConfig) -> dict:
    return dataclasses.asdict(cfg)


def to_yaml(cfg: RunConfig) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg), sort_keys=False)


def save_config(cfg: RunConfig, path: str | Path) -> None:
    """Write the resolved config atomically (temp file, then rename)."""
    atomic.write_text(path, to_yaml(cfg))


def resume_may_differ() -> frozenset[str]:
    """Dotted keys (as rundir.config_differences names them) a resumed run directory may change."""
    return frozenset(key for key, cls, f in leaf_fields(RunConfig) if "[]" not in key and meaning_of(cls, f).resume)
