"""A verified teacher-logit cache: run the teacher once per study, read it in every run.

For every input position of the sequences a run trains on — the training split, or its training pool
(`data.train_pool_sequences` = P > 0: P sequences spread evenly over the split, data.train_pool) — the cache
stores the teacher's distribution at temperature τ. Row r·T + t is position t of sequence r (of the split, or
pool position r), the index the batch iterator gives each batch row. Two layouts:

    top-k (k < V)                                       full (k = V: cache_k at least the vocabulary)
    logp.bin  (N, k) top-k log p_T^τ, descending         logp.bin  (N, V) log p_T^τ in vocabulary order
    ids.bin   (N, k) uint16 (vocab ≤ 65,536) or uint32   (no ids: implicit, 0 … V−1)
    tail.bin  (N,)   log Σ_{j ∉ top-k} p_T^τ(j), summed  (no tail: it is empty)
                     over the tail
    meta.json  teacher identity and weights hash, tokenizer hash, vocabulary size, seq_len, k, temperature,
               shard key, N, dtypes, the pool (P, the split's n and the rule) when there is one, the layout
               when full, and a sha256 of every file
    progress/  per-rank count of finished chunks (only while building)

    sampled (teacher.cache_kind=sampled, n = teacher.cache_samples)
    ids.bin      (N, n) uint16 or uint32: n ids drawn with replacement from p_T^τ, ascending within a row
    entropy.bin  (N,)   H(p_T^τ), the teacher's entropy at τ (what the value of kl needs; its gradient does not)
                 Each draw weighs 1/n: −(1/n) Σ_i log p_S^τ(id_i) is an unbiased estimate of the soft CE, with an
                 unbiased gradient (losses.sampled_token_losses). The draws of sequence s come from a generator
                 seeded by (teacher.cache_seed, s): the same whatever the chunks, ranks or resumes; the uniforms
                 are drawn on the CPU and inverted on the device (losses.inverse_cdf). n, the seed and the proposal
                 (the teacher itself) are in the key.

N = the sequences × T. Log-probabilities and tail are `teacher.cache_dtype`: float16 (the default) or float32.
Bytes per token: top-k k·s + 2·k + s with uint16 ids (s = 2 for float16: 258 at k = 64), full V·s (4·V for
float32: 2,048 at V = 512), sampled 2·n + s with uint16 ids (26 at n = 12). A cache covers one pool: a pool of P sequences of 64 tokens at V = 512 in float32 is
P · 128 KiB. Files are memory-mapped read-only: many runs read one cache at once. Building writes into
preallocated files, chunk by chunk, each rank its own contiguous range of sequences; a killed build resumes at its
last finished chunk (chunks are fixed, so the result is byte-identical to an uninterrupted build).

Loss on the cache (losses.sparse_*): the student distribution is coarsened to the k teacher tokens
plus one tail bucket (its mass outside them), and the soft CE / KL are taken between the two
(k+1)-bucket distributions. With k = V (the full layout) there is no tail and the losses are the online
ones, exact to the stored precision: in float32, to float32 rounding. Validation in a run is always computed
with the online teacher over the full vocabulary, so reported `val/ce` never depends on k.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from normgrow import atomic, hfsource
from normgrow.atomic import sha256_file
from normgrow.config import RunConfig
from normgrow.data import POOL_RULE, Prepared, cache_root, n_sequences, tokenizer_hash, train_pool
from normgrow.errors import NormgrowError, disk_full, no_space
from normgrow.locks import DirLock
from normgrow.nn.losses import SampledTeacher, SparseTeacher, inverse_cdf
from normgrow.parallel import dist
from normgrow.progress import progress_bar
from normgrow.teacher.load import Teacher

CACHE_VERSION = "topk-v2"  # v2: tail mass summed directly (v1: 1 − Σ top-k)
SAMPLED_VERSION = "sampled-v1"
CHUNK_SEQUENCES = 16  # sequences per teacher forward while building (fixed: resume is byte-identical)
PROJECT_ROWS = 1024  # rows projected onto the vocabulary at once (whole sequences): small tensors, few page faults


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
    """What identifies a teacher: its config.json and the sha256 of its weight files (or of its one GGUF file). Hashes are
    remembered in `memo` (a JSON file in the cache root) by path, size, modification and change times
    and a hash of samples of the content (`sample_sha256`), so a 16 GB teacher is hashed once, not at
    every run start, while a file rewritten in place — even with its size and mtime restored — is
    hashed again (the change time cannot be set back; the samples catch copies that keep it)."""
    src = hfsource.locate(path, "teacher.path")
    root = Path(src.ref)
    if src.gguf is not None:  # one file; a package's is named by its spec, the same in every environment
        files, where = [src.gguf], path if path.startswith(hfsource.PACKAGE_PREFIX) else str(src.gguf)
    elif root.is_dir():
        files, where = sorted(p for p in root.iterdir() if p.suffix in (".safetensors", ".bin") and p.is_file()), None
    else:
        return {"path": path, "weights_sha256": None, "note": "hub id: identified by name only"}
    h = hashlib.sha256()
    h.update((root / "config.json").read_bytes() if (root / "config.json").is_file() else b"")
    known = json.loads(memo.read_text()) if memo is not None and memo.is_file() else {}
    new = False
    for f in files:
        st = f.stat()
        key = f"{f.resolve()}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{sample_sha256(f, st.st_size)}"
        if key not in known:
            known[key], new = sha256_file(f), True
        h.update(f"{f.name}:{st.st_size}".encode())
        h.update(known[key].encode())
    if memo is not None and new:  # a read-only cache remembers nothing: the hash is computed again next time
        atomic.remember(memo, json.dumps(known))
    return {"path": where or str(root.resolve()), "weights_sha256": h.hexdigest()}


# meta.json fields added after caches were first keyed: left out while they hold the value that was the only one
# before (the whole split, the top-k layout, float16), so adding them changed the key of no existing cache
ADDED = {"pool": None, "layout": "top-k", "values_dtype": "float16"}


def cache_pool(cfg: RunConfig, prep: Prepared) -> np.ndarray | None:
    """The split's sequences the cache covers, in row order: the run's training pool, None for the whole split."""
    return train_pool(n_sequences(prep.train, cfg.data.seq_len), cfg.data.train_pool_sequences)


def expected_meta(cfg: RunConfig, teacher_path: str, prep: Prepared) -> dict:
    """The metadata a run needs its cache to have; every field is checked on open."""
    T = cfg.data.seq_len
    k = min(cfg.teacher.cache_k, prep.vocab_size)
    n, pool = n_sequences(prep.train, T), cache_pool(cfg, prep)
    sampled = cfg.teacher.cache_kind == "sampled"
    full = k == prep.vocab_size and not sampled
    draws = {"samples": cfg.teacher.cache_samples, "seed": cfg.teacher.cache_seed, "proposal": "teacher"}
    meta = {
        "version": SAMPLED_VERSION if sampled else CACHE_VERSION,
        "teacher": teacher_identity(teacher_path, cache_root(cfg.data) / "file-sha256.json"),
        "tokenizer_sha256": tokenizer_hash(prep.tokenizer),
        "vocab_size": prep.vocab_size,
        "seq_len": T,
        **(draws if sampled else {"k": k}),
        "temperature": cfg.distill.temperature,
        "teacher_dtype": cfg.teacher.dtype,
        "shards": prep.dir.name,
        "n_tokens": (n if pool is None else len(pool)) * T,
    }
    if not full:
        meta["ids_dtype"] = "uint16" if prep.vocab_size <= 65536 else "uint32"
    added = {
        "pool": None if pool is None else {"sequences": len(pool), "of": n, "rule": POOL_RULE},
        "layout": "sampled" if sampled else "full" if full else "top-k",
        "values_dtype": cfg.teacher.cache_dtype,
    }
    meta.update({key: v for key, v in added.items() if v != ADDED[key]})
    return meta


def cache_dir(cfg: RunConfig, meta: dict) -> Path:
    key = hashlib.sha256(json.dumps({k: v for k, v in meta.items()}, sort_keys=True).encode()).hexdigest()[:16]
    return cache_root(cfg.data) / "teacher-cache" / key


FILES = ("logp.bin", "ids.bin", "tail.bin")  # a top-k cache's; a full one has logp.bin alone
SAMPLED_FILES = ("ids.bin", "entropy.bin")


def is_full(meta: dict) -> bool:
    """The full layout: every token's log-prob in vocabulary order, no ids and no tail."""
    return meta.get("layout", ADDED["layout"]) == "full"


def is_sampled(meta: dict) -> bool:
    """The sampled layout: n drawn ids per token and the teacher's entropy."""
    return meta.get("layout") == "sampled"


def _shapes(meta: dict) -> dict:
    n = meta["n_tokens"]
    values = np.dtype(meta.get("values_dtype", ADDED["values_dtype"]))
    if is_sampled(meta):
        return {"ids.bin": ((n, meta["samples"]), np.dtype(meta["ids_dtype"])), "entropy.bin": ((n,), values)}
    k = meta["k"]
    if is_full(meta):
        return {"logp.bin": ((n, k), values)}
    return {"logp.bin": ((n, k), values), "ids.bin": ((n, k), np.dtype(meta["ids_dtype"])), "tail.bin": ((n,), values)}


def build(
    cfg: RunConfig,
    teacher_path: str,
    prep: Prepared,
    teacher: Teacher,
    info: dist.DistInfo,
    log: Callable[[str], None] = print,
    progress: bool = True,
) -> Path:
    """Build (or finish building) the cache for this run's teacher and training sequences (its pool, or the split).

    Under torchrun each rank (`info`) fills its own contiguous range of sequences; rank 0
    preallocates the files and writes meta.json once all ranks are done."""
    meta = expected_meta(cfg, teacher_path, prep)
    out = cache_dir(cfg, meta)
    if (out / "meta.json").is_file():
        return out
    with build_lock(out, info, log):
        if (out / "meta.json").is_file():  # another process built it while this one waited
            log(f"teacher cache: built by another process meanwhile → {out}")
            return out
        return _build(cfg, out, meta, prep, teacher, info, log, progress)


def build_lock(out: Path, info: dist.DistInfo, log: Callable[[str], None]) -> contextlib.AbstractContextManager:
    """One builder per cache key (on each machine): the main rank locks `<key>.lock/`, beside the cache so that the
    cache's own directory holds its files alone; a second build of the same key waits for the first, then finds
    the cache built (or resumes it, if the first was stopped)."""
    if not info.is_main:
        return contextlib.nullcontext()
    return DirLock(out.with_name(out.name + ".lock"), "teacher cache build", wait_s=BUILD_WAIT_S, on_wait=log)


BUILD_WAIT_S = 7 * 24 * 3600.0  # a build can take days on a large pool; waiting is what the second process is for


def _build(
    cfg: RunConfig, out: Path, meta: dict, prep: Prepared, teacher: Teacher, info: dist.DistInfo,
    log: Callable[[str], None], progress: bool,
) -> Path:  # fmt: skip
    T = meta["seq_len"]
    shapes = _shapes(meta)
    if info.is_main:
        _preallocate(out, meta, shapes)
    dist.barrier()
    if json.loads((out / "building.json").read_text()) != meta:
        raise CacheError(f"{out}: a build with different settings is in progress there")
    pool = cache_pool(cfg, prep)
    n_seq = meta["n_tokens"] // T
    lo, hi = info.rank * n_seq // info.world_size, (info.rank + 1) * n_seq // info.world_size
    chunks = [(s, min(s + CHUNK_SEQUENCES, hi)) for s in range(lo, hi, CHUNK_SEQUENCES)]
    prog_file = out / "progress" / f"rank{info.rank}-of-{info.world_size}.json"
    done = json.loads(prog_file.read_text())["chunks"] if prog_file.is_file() else 0
    maps = {name: np.memmap(out / name, dtype=dtype, mode="r+", shape=shape) for name, (shape, dtype) in shapes.items()}
    bar = progress_bar(len(chunks), "teacher cache", "chunk", enabled=progress and info.is_main, initial=done)
    if done:
        log(f"teacher cache: resuming at chunk {done} of {len(chunks)} (rank {info.rank})")
    if teacher.sharded:  # its forwards gather layers from every rank: all ranks run as many
        placeholder = torch.from_numpy(np.asarray(prep.train[:T], dtype=np.int64)).view(1, T).to(info.device)
        for _ in range(dist.all_reduce_max(len(chunks) - done) - (len(chunks) - done)):
            teacher.chunks(placeholder)
    for c in range(done, len(chunks)):
        s0, s1 = chunks[c]
        seqs = np.arange(s0, s1) if pool is None else pool[s0:s1]  # the split's sequences of rows s0·T … s1·T
        x = torch.from_numpy(np.stack([np.asarray(prep.train[i * T : i * T + T], dtype=np.int64) for i in seqs]))
        _write_chunk(maps, s0 * T, s1 * T, teacher, x.to(info.device), meta, seqs)  # x (b, T)
        atomic.write_text(prog_file, json.dumps({"chunks": c + 1}))
        bar.update(1)
    bar.close()
    del maps
    dist.barrier()
    if info.is_main:
        _finish(out, meta, log)
    dist.barrier()
    return out


def _preallocate(out: Path, meta: dict, shapes: dict) -> None:
    """The build's directory, its building.json and its files at their final sizes (kept when already so), their
    blocks allocated on disk now (posix_fallocate): the chunks are written through memory maps, where a full disk
    would be a SIGBUS with no message, so a full disk is the one-line error here, before any chunk, naming the cache
    and the bytes it needs; after space is freed the rerun allocates the rest and resumes."""
    (out / "progress").mkdir(parents=True, exist_ok=True)
    (out / "building.json").write_text(json.dumps(meta, indent=1))
    sizes = {name: int(np.prod(shape)) * np.dtype(dtype).itemsize for name, (shape, dtype) in shapes.items()}
    for name, size in sizes.items():
        path = out / name
        if not path.is_file() or path.stat().st_size != size:
            with open(path, "wb") as f:
                f.truncate(size)
        try:
            with open(path, "r+b") as f:
                if size and hasattr(os, "posix_fallocate"):
                    os.posix_fallocate(f.fileno(), 0, size)
        except OSError as e:
            if not no_space(e):
                raise
            raise CacheError(f"teacher cache {disk_full(out, sum(sizes.values()))}") from None


def draw_generator(seed: int, sequence: int) -> torch.Generator:
    """The CPU generator of a sampled cache's draws for one sequence of the split: seeded by (seed, sequence) through
    numpy's SeedSequence, so neighbouring sequences and seeds get unrelated streams."""
    state = np.random.SeedSequence([seed, int(sequence)]).generate_state(1, np.uint64)[0]
    return torch.Generator().manual_seed(int(state))


def sampled_rows(logp: torch.Tensor, meta: dict, seqs: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """A sampled cache's rows for the sequences `seqs` (logp (len(seqs)·T, V) at τ): n ids per token drawn from the
    teacher by inversion of uniforms from each sequence's own generator, ascending within a row; and the entropy."""
    n, T = meta["samples"], meta["seq_len"]
    u = torch.cat([torch.rand(T, n, generator=draw_generator(meta["seed"], s), dtype=torch.float64) for s in seqs])
    ids = inverse_cdf(logp, u).sort(dim=-1).values
    entropy = torch.special.entr(logp.exp()).sum(-1)
    return ids, entropy


def _write_chunk(maps: dict, r0: int, r1: int, teacher: Teacher, x: torch.Tensor, meta: dict, seqs: np.ndarray) -> None:
    """The teacher's rows r0 … r1 for inputs x (b, T), the split's sequences `seqs`: its log-probs at τ, whole (full
    layout) or top-k with ids and the tail, or n draws and the entropy (sampled), written into the memory maps and
    flushed."""
    T = meta["seq_len"]
    per = max(1, PROJECT_ROWS // T)  # sequences projected at once: (per·T, V) logits, not the whole chunk's
    with torch.no_grad():
        tc = teacher.chunks(x)
        for j in range(0, len(seqs), per):
            a, b = j * T, min(len(seqs), j + per) * T
            _write_rows(maps, r0 + a, r0 + b, tc.hidden[a:b] @ tc.weight.T, meta, seqs[j : j + per])
    for m in maps.values():
        m.flush()


def _write_rows(maps: dict, r0: int, r1: int, logits: torch.Tensor, meta: dict, seqs: np.ndarray) -> None:
    """Rows r0 … r1 of the cache from the teacher's logits (r1 − r0, V) of whole sequences `seqs`.

    Top-k never forms the log-probabilities: with z the logits at τ and L = logsumexp(z), the top k are z_top − L
    and the tail is logsumexp(z with the top k masked) − L, summed directly over the tail (no 1 − Σ top-k
    cancellation), two reductions over z in place of log-softmax's full (rows, V) tensor and a masked copy of it.
    `logits` is consumed: a float32 teacher's at τ = 1 are masked in place."""
    z = logits.float() if meta["temperature"] == 1.0 else logits.float() / meta["temperature"]
    if is_sampled(meta) or is_full(meta):
        logp = torch.log_softmax(z, dim=-1)
        if is_full(meta):
            maps["logp.bin"][r0:r1] = logp.cpu().numpy().astype(maps["logp.bin"].dtype)
            return
        ids, entropy = sampled_rows(logp, meta, seqs)
        maps["ids.bin"][r0:r1] = ids.cpu().numpy().astype(maps["ids.bin"].dtype)
        maps["entropy.bin"][r0:r1] = entropy.cpu().numpy().astype(maps["entropy.bin"].dtype)
        return
    lse = torch.logsumexp(z, dim=-1)
    top, ids = z.topk(meta["k"], dim=-1)  # descending
    tail = torch.logsumexp(z.scatter_(1, ids, -float("inf")), dim=-1) - lse
    maps["logp.bin"][r0:r1] = (top - lse[:, None]).cpu().numpy().astype(maps["logp.bin"].dtype)
    maps["ids.bin"][r0:r1] = ids.cpu().numpy().astype(maps["ids.bin"].dtype)
    maps["tail.bin"][r0:r1] = tail.cpu().numpy().astype(maps["tail.bin"].dtype)


def _finish(out: Path, meta: dict, log: Callable[[str], None]) -> None:
    """meta.json with the files' hashes, bytes per token and tail mass; the build's leftovers removed."""
    names = list(_shapes(meta))
    meta["sha256"] = {name: sha256_file(out / name) for name in names}
    meta["bytes_per_token"] = sum((out / n).stat().st_size for n in names) / meta["n_tokens"]
    if is_sampled(meta):
        meta["mean_distinct"] = mean_distinct(out / "ids.bin", meta)
    else:
        meta["mean_tail_mass"] = 0.0 if is_full(meta) else mean_tail_mass(out / "tail.bin", meta["n_tokens"], meta)
    atomic.write_text(out / "meta.json", json.dumps(meta, indent=1))
    shutil.rmtree(out / "progress", ignore_errors=True)
    (out / "building.json").unlink(missing_ok=True)
    if is_sampled(meta):
        log(
            f"teacher cache: {meta['n_tokens']:,} tokens, {meta['samples']} draws per token from the teacher (seed "
            f"{meta['seed']}; {meta['mean_distinct']:.2f} distinct on average), {meta['bytes_per_token']:.0f} "
            f"bytes/token → {out}"
        )
        return
    k = meta["k"]
    what = f"the full distribution (k = V = {k}, vocabulary order)" if is_full(meta) else f"top-{k}"
    log(f"teacher cache: {meta['n_tokens']:,} tokens, {what}, {meta['bytes_per_token']:.0f} bytes/token → {out}")
    if not is_full(meta):
        log(
            f"teacher cache: the top-{k} hold {1 - meta['mean_tail_mass']:.1%} of the teacher's probability on average; "
            f"the remaining {meta['mean_tail_mass']:.1%} is one tail bucket in the loss (raise teacher.cache_k to keep more)"
        )


def mean_tail_mass(path: Path, n_tokens: int, meta: dict | None = None, block: int = 1 << 22) -> float:
    """Mean over tokens of the teacher's probability outside its top-k (read from tail.bin in blocks)."""
    dtype = np.dtype((meta or {}).get("values_dtype", ADDED["values_dtype"]))
    tail = np.memmap(path, dtype=dtype, mode="r", shape=(n_tokens,))
    total = sum(float(np.exp(tail[i : i + block].astype(np.float64)).sum()) for i in range(0, n_tokens, block))
    return total / max(n_tokens, 1)


def mean_distinct(path: Path, meta: dict, block: int = 1 << 20) -> float:
    """Mean over tokens of the distinct ids among a sampled cache's n draws (rows are ascending)."""
    n_tok, n = meta["n_tokens"], meta["samples"]
    ids = np.memmap(path, dtype=np.dtype(meta["ids_dtype"]), mode="r", shape=(n_tok, n))
    total = sum(
        int((np.diff(ids[i : i + block], axis=1) != 0).sum()) + len(ids[i : i + block]) for i in range(0, n_tok, block)
    )
    return total / max(n_tok, 1)


@dataclass
class TeacherCache:
    """A verified cache opened read-only; `sequences(seq_idx)` gives the teacher's distribution for rows of the
    cache (sequences of the split, or pool positions)."""

    dir: Path
    meta: dict
    logp: np.ndarray | None  # None in the sampled layout
    ids: np.ndarray | None  # None in the full layout (implicit ids)
    tail: np.ndarray | None
    entropy: np.ndarray | None = None  # the sampled layout's

    def teacher_rows(self, seq_idx: torch.Tensor, device) -> SparseTeacher | SampledTeacher:
        """What the training loss reads for these sequences: the top-k (or full) distribution, or the draws."""
        if not is_sampled(self.meta):
            return SparseTeacher(*self.sequences(seq_idx, device))
        T, n = self.meta["seq_len"], self.meta["samples"]
        rows = (seq_idx[:, None] * T + torch.arange(T)[None]).reshape(-1).numpy()
        assert self.ids is not None and self.entropy is not None
        ids = torch.from_numpy(self.ids[rows].astype(np.int64)).to(device)
        weights = torch.full(ids.shape, 1.0 / n, dtype=torch.float32, device=device)
        return SampledTeacher(ids, weights, torch.from_numpy(self.entropy[rows].astype(np.float32)).to(device))

    def sequences(self, seq_idx: torch.Tensor, device) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """(logp (b·T, k) float32, ids (b·T, k) int64, tail (b·T,) float32) for these sequences; ids and tail
        None in the full layout (logp (b·T, V) in vocabulary order)."""
        T = self.meta["seq_len"]
        rows = (seq_idx[:, None] * T + torch.arange(T)[None]).reshape(-1).numpy()

        def load(a: np.ndarray | None, dtype) -> torch.Tensor | None:
            return None if a is None else torch.from_numpy(a[rows].astype(dtype)).to(device)

        return (
            typing.cast(torch.Tensor, load(self.logp, np.float32)),
            load(self.ids, np.int64),
            load(self.tail, np.float32),
        )

    def describe(self) -> str:
        """What the training loss reads (the run summary's `train_teacher`)."""
        m = self.meta
        if is_sampled(m):
            return (
                f"sampled teacher cache: {m['samples']} draws per token from the teacher (seed {m['seed']}, "
                f"{m['mean_distinct']:.2f} distinct on average), unbiased ({self.dir})"
            )
        if is_full(m):
            return (
                f"full-distribution teacher cache (k = V = {m['k']}, {m.get('values_dtype', 'float16')}, no tail) "
                f"({self.dir})"
            )
        return (
            f"top-{m['k']} teacher cache + tail bucket holding {m['mean_tail_mass']:.1%} of the teacher's mass on "
            f"average ({self.dir})"
        )


def open_cache(cfg: RunConfig, teacher_path: str, prep: Prepared, verify_checksums: bool = True) -> TeacherCache:
    """Open the run's cache, refusing any mismatch with a one-line error naming the field."""
    want = expected_meta(cfg, teacher_path, prep)
    path = cache_dir(cfg, want)
    if not (path / "meta.json").is_file():
        raise CacheError(f"teacher.cache: no finished cache for this run at {path} (build it: normgrow teacher cache)")
    return open_cache_dir(path, want, verify_checksums)


def _short(v) -> str:
    if isinstance(v, dict) and "weights_sha256" in v:  # a teacher identity: its path and weights hash prefix
        return f"{v.get('path')} (weights {str(v.get('weights_sha256'))[:12]})"
    return repr(v)


def open_cache_dir(path: Path, want: dict | None, verify_checksums: bool = True) -> TeacherCache:
    try:
        meta = json.loads((path / "meta.json").read_text())
    except FileNotFoundError:
        raise CacheError(
            f"teacher.cache_path: {path} holds no teacher cache (no meta.json); build one with `normgrow teacher cache`"
        ) from None
    except (OSError, ValueError):
        raise CacheError(f"teacher cache {path}: meta.json is unreadable or cut") from None
    if want is not None:  # the plainest causes first: a different seq_len also means a different default teacher
        order = [
            "layout",
            "version",
            "seq_len",
            "vocab_size",
            "k",
            "samples",
            "seed",
            "proposal",
            "temperature",
            "tokenizer_sha256",
            "shards",
            "pool",
            "n_tokens",
            "values_dtype",
            "ids_dtype",
            "teacher_dtype",
            "teacher",
        ]
        for key in order + [k for k in want if k not in order]:  # ADDED fields are in order: absent on either side
            have, need = meta.get(key, ADDED.get(key)), want.get(key, ADDED.get(key))  # absent: the ADDED value
            if have != need:
                raise CacheError(f"teacher cache {path}: {key} is {_short(have)}, the run needs {_short(need)}")
    for name, (shape, dtype) in _shapes(meta).items():
        size = int(np.prod(shape)) * np.dtype(dtype).itemsize
        actual = (path / name).stat().st_size if (path / name).is_file() else -1
        if actual != size:
            raise CacheError(f"teacher cache {path}: {name} has {actual} bytes, expected {size} (truncated?)")
        if verify_checksums and sha256_file(path / name) != meta["sha256"][name]:
            raise CacheError(f"teacher cache {path}: {name} fails its sha256 check (corrupted)")
    maps = {
        name: np.memmap(path / name, dtype=dtype, mode="r", shape=shape)
        for name, (shape, dtype) in _shapes(meta).items()
    }
    return TeacherCache(
        path, meta, maps.get("logp.bin"), maps.get("ids.bin"), maps.get("tail.bin"), maps.get("entropy.bin")
    )
