"""Checkpoints: one directory per step, written atomically (temp dir, then rename).

    checkpoints/step_00000120/
        model.safetensors   student weights (names as in the Student; the depth is in state.json)
        optimizer.pt        optimizer state (tensors and plain containers only: read with weights_only=True)
        rng.pt              torch CPU (and CUDA) RNG states
        state.json          step, tokens, compute counters, stage, data-iterator position, …

A directory without state.json, or a `.tmp-*` directory, is an interrupted write and is ignored.
Nothing is ever unpickled: safetensors for weights, `torch.load(weights_only=True)` for the rest.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file


def _step_dir(root: Path, step: int) -> Path:
    return root / f"step_{step:08d}"


def save(root: str | Path, step: int, model_state: dict, optimizer_state: dict, state: dict, keep: int = 2,
         protected: frozenset[int] = frozenset()) -> Path:
    """Write checkpoint `step` atomically, then keep only the `keep` most recent ones plus the
    `protected` steps (stage ends: `normgrow diagnose` and phase-wise analyses reload them)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final = _step_dir(root, step)
    tmp = root / f".tmp-{final.name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    # safetensors refuses shared storage (tied embeddings): store each distinct tensor contiguously
    save_file({k: v.detach().contiguous().clone() for k, v in model_state.items()}, str(tmp / "model.safetensors"))
    torch.save(optimizer_state, tmp / "optimizer.pt")
    rng = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    torch.save(rng, tmp / "rng.pt")
    (tmp / "state.json").write_text(json.dumps(state, indent=1))
    _fsync_dir(tmp)
    if final.exists():  # a rerun reached the same step: replace it
        shutil.rmtree(final)
    os.rename(tmp, final)
    _fsync_dir(root)
    for old in list_checkpoints(root)[:-keep]:
        if int(old.name.split("_")[1]) not in protected:
            shutil.rmtree(old, ignore_errors=True)
    return final


def _fsync_dir(path: Path) -> None:
    for f in path.iterdir() if path.is_dir() else []:
        if f.is_file():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())


def list_checkpoints(root: str | Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    done = [p for p in root.iterdir() if p.is_dir() and p.name.startswith("step_") and (p / "state.json").is_file()]
    return sorted(done, key=lambda p: int(p.name.split("_")[1]))


def latest(root: str | Path) -> Path | None:
    ckpts = list_checkpoints(root)
    return ckpts[-1] if ckpts else None


def load(path: str | Path, map_location: str | torch.device = "cpu") -> tuple[dict, dict, dict, dict]:
    """(model_state, optimizer_state, rng_state, state) of one checkpoint directory."""
    path = Path(path)
    model_state = load_file(str(path / "model.safetensors"), device=str(map_location))
    optimizer_state = torch.load(path / "optimizer.pt", map_location=map_location, weights_only=True)
    rng = torch.load(path / "rng.pt", map_location="cpu", weights_only=True)
    state = json.loads((path / "state.json").read_text())
    return model_state, optimizer_state, rng, state


def restore_rng(rng: dict) -> None:
    torch.set_rng_state(rng["cpu"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
