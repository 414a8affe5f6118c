"""Checkpoints: one directory per step, written atomically (temp dir, then rename).

    checkpoints/step_00000120/
        model.safetensors   student weights (names as in the Student; the depth is in state.json)
        optimizer.pt        optimizer state (tensors and plain containers only: read with weights_only=True)
        rng.pt              torch CPU (and CUDA) RNG states
        state.json          step, tokens, compute counters, stage, data-iterator position, …, and
                            `sha256`: the hash of each of the three files above

A directory without state.json, or a `.tmp-*` directory, is an interrupted write and is ignored
(and a `.tmp-*` left by a dead process is removed at the next write). Resuming verifies the newest
checkpoint's hashes; a damaged one is set aside as `.damaged-step_*`, with a message, and the run
resumes from the previous intact one (`train.keep_checkpoints` ≥ 2 keeps one to fall back to).
Nothing is ever unpickled: safetensors for weights, `torch.load(weights_only=True)` for the rest.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from normgrow import atomic
from normgrow.errors import disk_full, no_space

FILES = ("model.safetensors", "optimizer.pt", "rng.pt")


def _step_dir(root: Path, step: int) -> Path:
    return root / f"step_{step:08d}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        return True
    return True


def remove_stale_temps(root: Path) -> None:
    """Delete `.tmp-step_*-<pid>` directories whose writer is no longer running (a killed write)."""
    for p in root.glob(".tmp-step_*-*") if root.is_dir() else []:
        pid = p.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not _pid_alive(int(pid)):
            shutil.rmtree(p, ignore_errors=True)


def save(
    root: str | Path,
    step: int,
    model_state: dict,
    optimizer_state: dict,
    state: dict,
    keep: int = 2,
    protected: frozenset[int] = frozenset(),
) -> Path:
    """Write checkpoint `step` atomically, then keep only the `keep` most recent ones plus the
    `protected` steps (stage ends: `normgrow diagnose` and phase-wise analyses reload them)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(root)
    final = _step_dir(root, step)
    tmp = root / f".tmp-{final.name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        _write(tmp, model_state, optimizer_state, state)
    except Exception as e:
        shutil.rmtree(tmp, ignore_errors=True)
        need = _tensor_bytes(model_state) + _tensor_bytes(optimizer_state)
        # torch.save reports a full disk as a stream error ("unexpected pos"), not ENOSPC: compare with free space
        if no_space(e) or shutil.disk_usage(root).free < need:
            raise disk_full(final, need) from None
        raise
    atomic.follow_umask(tmp)  # safetensors writes 0600: the checkpoint readable by whom the user's files are
    if final.exists():  # a rerun reached the same step: replace it
        shutil.rmtree(final)
    os.rename(tmp, final)
    _fsync_dir(root)
    for old in list_checkpoints(root)[:-keep]:
        if int(old.name.split("_")[1]) not in protected:
            shutil.rmtree(old, ignore_errors=True)
    return final


def _write(tmp: Path, model_state: dict, optimizer_state: dict, state: dict) -> None:
    tmp.mkdir()
    # safetensors refuses shared storage (tied embeddings): store each distinct tensor contiguously
    save_file({k: v.detach().contiguous().clone() for k, v in model_state.items()}, str(tmp / "model.safetensors"))
    torch.save(optimizer_state, tmp / "optimizer.pt")
    rng: dict[str, torch.Tensor | list[torch.Tensor]] = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    torch.save(rng, tmp / "rng.pt")
    sums = {name: atomic.sha256_file(tmp / name) for name in FILES}
    (tmp / "state.json").write_text(json.dumps({**state, "sha256": sums}, indent=1))
    _fsync_dir(tmp)


def _tensor_bytes(obj) -> int:
    """Bytes of every tensor in a (nested) state dict."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(_tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(v) for v in obj)
    return 0


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


def damage(path: str | Path) -> str | None:
    """Why a checkpoint cannot be trusted (None if it is intact): unreadable state.json, a missing file, or a
    file whose sha256 differs from the one recorded when it was written (checkpoints from before hashes were
    recorded are checked for completeness only)."""
    path = Path(path)
    try:
        state = json.loads((path / "state.json").read_text())
    except (OSError, ValueError):
        return "state.json is unreadable or cut"
    for name in FILES:
        if not (path / name).is_file():
            return f"{name} is missing"
        want = (state.get("sha256") or {}).get(name)
        if want is not None and atomic.sha256_file(path / name) != want:
            return f"{name} does not match its recorded sha256"
    return None


def latest_intact(root: str | Path, warn: Callable[[str], None]) -> Path | None:
    """The newest checkpoint that verifies. Damaged newer ones are renamed `.damaged-<name>` (kept for
    inspection, ignored from then on) and reported through `warn`."""
    root = Path(root)
    for ckpt in reversed(list_checkpoints(root)):
        why = damage(ckpt)
        if why is None:
            return ckpt
        aside = root / f".damaged-{ckpt.name}"
        if aside.exists():
            shutil.rmtree(aside)
        os.rename(ckpt, aside)
        warn(f"checkpoint {ckpt}: {why}; set aside as {aside.name}, falling back to the previous checkpoint")
    return None


def load(path: str | Path, map_location: str | torch.device = "cpu") -> tuple[dict, dict, dict, dict]:
    """(model_state, optimizer_state, rng_state, state) of one checkpoint directory."""
    path = Path(path)
    model_state = load_file(str(path / "model.safetensors"), device=str(map_location))
    optimizer_state = torch.load(path / "optimizer.pt", map_location=map_location, weights_only=True)
    rng = torch.load(path / "rng.pt", map_location="cpu", weights_only=True)
    state = json.loads((path / "state.json").read_text())
    state.pop("sha256", None)  # the checkpoint's own bookkeeping (see `damage`)
    return model_state, optimizer_state, rng, state


def restore_rng(rng: dict) -> None:
    torch.set_rng_state(rng["cpu"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
