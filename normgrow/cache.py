"""A verified top-k teacher-logit cache: run the teacher once per study, read it in every run.

For every input position of the training split (sequence i covers tokens [i·T, i·T + T), the
same windows the batch iterator serves), the cache stores the teacher's top-k log-probabilities at
temperature τ and their token ids, plus the log of the remaining tail mass:

    cache dir/
        logp.bin   (N, k) float16   top-k log p_T^τ, descending
        ids.bin    (N, k) uint16 (vocab ≤ 65,536) or uint32
        tail.bin   (N,)   float16   log Σ_{j ∉ top-k} p_T^τ(j), summed over the tail (−inf when k = V)
        meta.json  teacher identity and weights hash, tokenizer hash, vocabulary size, seq_len, k,
                   temperature, shard key, N, dtypes, and a sha256 of every file
        progress/  per-rank count of finished chunks (only while building)

N = n_sequences × T, so 2·k·2 + 2 bytes per token (258 at k = 64). Files are memory-mapped
read-only: many runs read one cache at once. Building writes into preallocated files, chunk by
chunk, each rank its own contiguous range of sequences; a killed build resumes at its last
finished chunk (chunks are fixed, so the result is byte-identical to an uninterrupted build).

Loss on the cache (losses.sparse_*): the student distribution is coarsened to the k teacher tokens
plus one tail bucket (its mass outside them), and the soft CE / KL are taken between the two
(k+1)-bucket distributions. With k = V the tail is empty and the losses equal the online ones.
Validation in a run is always computed with the online teacher over the full vocabulary, so
reported `val/ce` never depends on k.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from normgrow import atomic, dist
from normgrow.checkpoint import sha256_file
from normgrow.config import RunConfig
from normgrow.data import Prepared, cache_root, n_sequences, tokenizer_hash
from normgrow.errors import NormgrowError
from normgrow.losses import tail_logsumexp
from normgrow.teacher import Teacher

CACHE_VERSION = "topk-v2"  # v2: tail mass summed directly (v1: 1 − Σ top-k)
CHUNK_SEQUENCES = 16  # sequences per teacher forward while building (fixed: resume is byte-identical)


class CacheError(NormgrowError):
    """A teacher cache is missing, incomplete, corrupted or does not match the run."""


def sample_sha256(path: Path, size: int, block: int = 1 << 16, blocks: int = 64) -> str:
    """sha256 of `blocks` evenly spaced `block`-byte pieces of a file (the whole file when it is smaller):
    a few MiB read whatever the file's size."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        if size <= block * blocks:
            h.update(f.read())
        else:
            for i in range(blocks):
                f.seek((size - block) * i // (blocks - 1))
                h.update(f.read(block))
    return h.hexdigest()[:16]


def teacher_identity(path: str, memo: Path | None = None) -> dict:
    """What identifies a teacher: its config.json and the sha256 of its weight files. Hashes are
    remembered in `memo` (a JSON file in the cache root) by path, size, modification and change times
    and a hash of samples of the content (`sample_sha256`), so a 16 GB teacher is hashed once, not at
    every run start, while a file rewritten in place — even with its size and mtime restored — is
    hashed again (the change time cannot be set back; the samples catch copies that keep it)."""
    root = Path(path)
    if not root.is_dir():
        return {"path": path, "weights_sha256": None, "note": "hub id: identified by name only"}
    files = sorted(p for p in root.iterdir() if p.suffix in (".safetensors", ".bin") and p.is_file())
    h = hashlib.sha256()
    h.update((root / "config.json").read_bytes() if (root / "config.json").is_file() else b"")
    known = json.loads(memo.read_text()) if memo is not None and memo.is_file() else {}
    for f in files:
        st = f.stat()
        key = f"{f.resolve()}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{sample_sha256(f, st.st_size)}"
        if key not in known:
            known[key] = sha256_file(f)
        h.update(f"{f.name}:{st.st_size}".encode())
        h.update(known[key].encode())
    if memo is not None:
        memo.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_text(memo, json.dumps(known))
    return {"path": str(root.resolve()), "weights_sha256": h.hexdigest()}


def expected_meta(cfg: RunConfig, teacher_path: str, prep: Prepared) -> dict:
    """The metadata a run needs its cache to have; every field is checked on open."""
    T = cfg.data.seq_len
    k = min(cfg.teacher.cache_k, prep.vocab_size)
    return {
        "version": CACHE_VERSION,
        "teacher": teacher_identity(teacher_path, cache_root(cfg.data) / "file-sha256.json"),
        "tokenizer_sha256": tokenizer_hash(prep.tokenizer),
        "vocab_size": prep.vocab_size,
        "seq_len": T,
        "k": k,
        "temperature": cfg.distill.temperature,
        "teacher_dtype": cfg.teacher.dtype,
        "shards": prep.dir.name,
        "n_tokens": n_sequences(prep.train, T) * T,
        "ids_dtype": "uint16" if prep.vocab_size <= 65536 else "uint32",
    }


def cache_dir(cfg: RunConfig, meta: dict) -> Path:
    key = hashlib.sha256(json.dumps({k: v for k, v in meta.items()}, sort_keys=True).encode()).hexdigest()[:16]
    return cache_root(cfg.data) / "teacher-cache" / key


FILES = ("logp.bin", "ids.bin", "tail.bin")


def _shapes(meta: dict) -> dict:
    n, k = meta["n_tokens"], meta["k"]
    return {"logp.bin": ((n, k), np.float16), "ids.bin": ((n, k), np.dtype(meta["ids_dtype"])),
            "tail.bin": ((n,), np.float16)}


def build(cfg: RunConfig, teacher_path: str, prep: Prepared, teacher: Teacher, info: dist.DistInfo,
          log: Callable[[str], None] = print, progress: bool = True) -> Path:
    """Build (or finish building) the cache for this run's teacher and training split.

    Under torchrun each rank (`info`) fills its own contiguous range of sequences; rank 0
    preallocates the files and writes meta.json once all ranks are done."""
    meta = expected_meta(cfg, teacher_path, prep)
    out = cache_dir(cfg, meta)
    if (out / "meta.json").is_file():
        return out
    T, k, tau = meta["seq_len"], meta["k"], meta["temperature"]
    shapes = _shapes(meta)
    if info.is_main:
        (out / "progress").mkdir(parents=True, exist_ok=True)
        (out / "building.json").write_text(json.dumps(meta, indent=1))
        for name, (shape, dtype) in shapes.items():
            size = int(np.prod(shape)) * np.dtype(dtype).itemsize
            path = out / name
            if not path.is_file() or path.stat().st_size != size:
                with open(path, "wb") as f:
                    f.truncate(size)
    dist.barrier()
    if json.loads((out / "building.json").read_text()) != meta:
        raise CacheError(f"{out}: a build with different settings is in progress there")
    n_seq = n_sequences(prep.train, T)
    lo, hi = info.rank * n_seq // info.world_size, (info.rank + 1) * n_seq // info.world_size
    chunks = [(s, min(s + CHUNK_SEQUENCES, hi)) for s in range(lo, hi, CHUNK_SEQUENCES)]
    prog_file = out / "progress" / f"rank{info.rank}-of-{info.world_size}.json"
    done = json.loads(prog_file.read_text())["chunks"] if prog_file.is_file() else 0
    maps = {name: np.memmap(out / name, dtype=dtype, mode="r+", shape=shape) for name, (shape, dtype) in shapes.items()}
    bar = tqdm(total=len(chunks), initial=done, unit="chunk", desc="teacher cache", disable=not (progress and info.is_main),
               dynamic_ncols=True)
    if done:
        log(f"teacher cache: resuming at chunk {done} of {len(chunks)} (rank {info.rank})")
    if teacher.sharded:  # its forwards gather layers from every rank: all ranks run as many
        placeholder = torch.from_numpy(np.asarray(prep.train[:T], dtype=np.int64)).view(1, T).to(info.device)
        for _ in range(dist.all_reduce_max(len(chunks) - done) - (len(chunks) - done)):
            teacher.chunks(placeholder)
    for c in range(done, len(chunks)):
        s0, s1 = chunks[c]
        x = torch.from_numpy(np.asarray(prep.train[s0 * T: s1 * T], dtype=np.int64)).view(s1 - s0, T).to(info.device)  # (b, T)
        with torch.no_grad():
            tc = teacher.chunks(x)
            logits = (tc.hidden @ tc.weight.T).float() / tau  # (b·T, V)
            logp = torch.log_softmax(logits, dim=-1)
            top, ids = logp.topk(k, dim=-1)  # descending
            tail = tail_logsumexp(logp, ids) if k < logp.shape[-1] else torch.full_like(top[:, 0], -float("inf"))
        r0, r1 = s0 * T, s1 * T
        maps["logp.bin"][r0:r1] = top.cpu().numpy().astype(np.float16)
        maps["ids.bin"][r0:r1] = ids.cpu().numpy().astype(maps["ids.bin"].dtype)
        maps["tail.bin"][r0:r1] = tail.cpu().numpy().astype(np.float16)
        for m in maps.values():
            m.flush()
        atomic.write_text(prog_file, json.dumps({"chunks": c + 1}))
        bar.update(1)
    bar.close()
    del maps
    dist.barrier()
    if info.is_main:
        meta["sha256"] = {name: sha256_file(out / name) for name in FILES}
        meta["bytes_per_token"] = sum((out / n).stat().st_size for n in FILES) / meta["n_tokens"]
        meta["mean_tail_mass"] = mean_tail_mass(out / "tail.bin", meta["n_tokens"])
        atomic.write_text(out / "meta.json", json.dumps(meta, indent=1))
        shutil.rmtree(out / "progress", ignore_errors=True)
        (out / "building.json").unlink(missing_ok=True)
        log(f"teacher cache: {meta['n_tokens']:,} tokens, top-{k}, {meta['bytes_per_token']:.0f} bytes/token → {out}")
        log(f"teacher cache: the top-{k} hold {1 - meta['mean_tail_mass']:.1%} of the teacher's probability on average; "
            f"the remaining {meta['mean_tail_mass']:.1%} is one tail bucket in the loss (raise teacher.cache_k to keep more)")
    dist.barrier()
    return out


def mean_tail_mass(path: Path, n_tokens: int, block: int = 1 << 22) -> float:
    """Mean over tokens of the teacher's probability outside its top-k (read from tail.bin in blocks)."""
    tail = np.memmap(path, dtype=np.float16, mode="r", shape=(n_tokens,))
    total = sum(float(np.exp(tail[i: i + block].astype(np.float64)).sum()) for i in range(0, n_tokens, block))
    return total / max(n_tokens, 1)


@dataclasses.dataclass
class TeacherCache:
    """A verified cache opened read-only; `rows(seq_idx)` gives the teacher's sparse distribution."""

    dir: Path
    meta: dict
    logp: np.ndarray
    ids: np.ndarray
    tail: np.ndarray

    def sequences(self, seq_idx: torch.Tensor, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(logp (b·T, k) float32, ids (b·T, k) int64, tail (b·T,) float32) for these train sequences."""
        T = self.meta["seq_len"]
        rows = (seq_idx[:, None] * T + torch.arange(T)[None]).reshape(-1).numpy()
        return (torch.from_numpy(self.logp[rows].astype(np.float32)).to(device),
                torch.from_numpy(self.ids[rows].astype(np.int64)).to(device),
                torch.from_numpy(self.tail[rows].astype(np.float32)).to(device))


def open_cache(cfg: RunConfig, teacher_path: str, prep: Prepared, verify_checksums: bool = True) -> TeacherCache:
    """Open the run's cache, refusing any mismatch with a one-line error naming the field."""
    want = expected_meta(cfg, teacher_path, prep)
    path = cache_dir(cfg, want)
    if not (path / "meta.json").is_file():
        raise CacheError(f"teacher.cache: no finished cache for this run at {path} (build it: normgrow teacher cache)")
    return open_cache_dir(path, want, verify_checksums)


def _short(v) -> str:
    if isinstance(v, dict):  # a teacher identity: its path and weights hash prefix
        return f"{v.get('path')} (weights {str(v.get('weights_sha256'))[:12]})"
    return repr(v)


def open_cache_dir(path: Path, want: dict | None, verify_checksums: bool = True) -> TeacherCache:
    try:
        meta = json.loads((path / "meta.json").read_text())
    except FileNotFoundError:
        raise CacheError(f"teacher.cache_path: {path} holds no teacher cache (no meta.json); build one with "
                         "`normgrow teacher cache`") from None
    except (OSError, ValueError):
        raise CacheError(f"teacher cache {path}: meta.json is unreadable or cut") from None
    if want is not None:  # the plainest causes first: a different seq_len also means a different default teacher
        order = ["version", "seq_len", "vocab_size", "k", "temperature", "tokenizer_sha256", "shards", "n_tokens",
                 "ids_dtype", "teacher_dtype", "teacher"]
        for key in order + [k for k in want if k not in order]:
            if meta.get(key) != want.get(key):
                raise CacheError(f"teacher cache {path}: {key} is {_short(meta.get(key))}, the run needs {_short(want.get(key))}")
    for name, (shape, dtype) in _shapes(meta).items():
        size = int(np.prod(shape)) * np.dtype(dtype).itemsize
        actual = (path / name).stat().st_size if (path / name).is_file() else -1
        if actual != size:
            raise CacheError(f"teacher cache {path}: {name} has {actual} bytes, expected {size} (truncated?)")
        if verify_checksums and sha256_file(path / name) != meta["sha256"][name]:
            raise CacheError(f"teacher cache {path}: {name} fails its sha256 check (corrupted)")
    maps = {name: np.memmap(path / name, dtype=dtype, mode="r", shape=shape) for name, (shape, dtype) in _shapes(meta).items()}
    return TeacherCache(path, meta, maps["logp.bin"], maps["ids.bin"], maps["tail.bin"])
