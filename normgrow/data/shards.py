"""Token shards: the corpus encoded once into one flat token file per split, cached under content hashes.

    documents ─► split_of(doc_id) ─► [BOS, *encode(text)] ─► train.bin / val.bin ─► Prepared (memory-mapped)
                                                                 train_docs.npy / val_docs.npy (document starts)

A shard dir, cache/shards/<key>/, is self-describing:

    meta.json            corpus (its source, format, fields, sha256), split, token counts, dtype, BOS id, tokenizer hash
    train.bin, val.bin   the split's documents, concatenated: uint16 ids (uint32 for a vocabulary over 2**16)
    *_docs.npy           the offset of each document's BOS in its split's token file
    tokenizer/           the tokenizer the ids belong to
    token_classes.npy    the token class (tokenizer.TOKEN_CLASSES) of every vocabulary id

Choices:
- Every document is encoded without special tokens and prefixed with the BOS id, in corpus order; packing into
  sequences crosses document boundaries (batches.py), as in nanoGPT, and the BOS marks them.
- The key is (corpus sha256, tokenizer hash, BOS id, val_fraction, max_documents, format, text_field,
  dataset_config, dataset_split, SHARDS_VERSION); the dir is written to a temp dir renamed into place, so a
  cache entry is never half-written and concurrent writers agree on one winner.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import time
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from normgrow.atomic import publish_directory
from normgrow.config import DataConfig, RunConfig
from normgrow.data.sources import (
    CorpusScan,
    _key,
    cache_root,
    iter_documents,
    scan_corpus,
    source_of,
)
from normgrow.data.tokenizer import _plain_backend, bos_id, load_tokenizer, token_classes, tokenizer_hash
from normgrow.errors import DataError

# Bump when the bytes a cache entry holds would change for the same inputs.
SHARDS_VERSION = "shards-v1"

SPLITS = ("train", "val")


@dataclass
class Prepared:
    """A token shard dir opened for reading: flat token arrays per split, document offsets, tokenizer."""

    dir: Path
    meta: dict
    tokenizer: PreTrainedTokenizerFast
    bos_id: int
    vocab_size: int
    train: np.ndarray
    val: np.ndarray
    train_docs: np.ndarray
    val_docs: np.ndarray
    cache_hit: bool
    token_classes: np.ndarray


def prepare(cfg: RunConfig, teacher_path: str | None = None, log: Callable[[str], None] = print) -> Prepared:
    """Corpus → tokenizer → token shards, each cached; returns the opened shards."""
    d = cfg.data
    cache = cache_root(d)
    t0 = time.time()
    scan = scan_corpus(d)
    log(
        f"corpus {d.corpus}: {scan.n_documents:,} documents ({scan.n_val:,} val), "
        f"{scan.n_chars / 1e6:.1f}M characters, scanned in {time.time() - t0:.1f} s"
    )
    tok = load_tokenizer(d, teacher_path if teacher_path is not None else cfg.teacher.path, cache, scan=scan, log=log)
    bos = bos_id(tok, d)
    final = (
        cache
        / "shards"
        / _key(
            scan.sha256,
            tokenizer_hash(tok),
            bos,
            d.val_fraction,
            d.max_documents,
            d.format,
            d.text_field,
            d.dataset_config,
            d.dataset_split,
            SHARDS_VERSION,
        )
    )
    if (final / "meta.json").is_file():
        log(f"token shards: cached in {final}")
        return load_prepared(final)
    publish_directory(final, lambda tmp: _write_shards(d, scan, tok, bos, tmp, log))
    return dataclasses.replace(load_prepared(final), cache_hit=False)


def _write_shards(
    d: DataConfig, scan: CorpusScan, tok: PreTrainedTokenizerFast, bos: int, out: Path, log: Callable[[str], None]
) -> None:
    t0 = time.time()
    dtype = np.uint16 if len(tok) <= 2**16 else np.uint32
    backend = _plain_backend(tok)
    starts: dict[str, list[int]] = {s: [] for s in SPLITS}
    n_tokens = dict.fromkeys(SPLITS, 0)
    with open(out / "train.bin", "wb") as f_train, open(out / "val.bin", "wb") as f_val:
        files = {"train": f_train, "val": f_val}

        def flush(chunk: list[tuple[str, str]]) -> None:
            # Batch encoding runs the Rust tokenizer on all cores.
            encodings = backend.encode_batch([text for _, text in chunk], add_special_tokens=False)
            for (split, _), enc in zip(chunk, encodings, strict=True):
                starts[split].append(n_tokens[split])
                files[split].write(np.array([bos, *enc.ids], dtype=dtype).tobytes())
                n_tokens[split] += 1 + len(enc.ids)

        chunk, chars, done = [], 0, 0
        for doc_id, text in iter_documents(d):
            chunk.append((scan.split_of(doc_id, d.val_fraction), text))
            chars += len(text)
            if chars >= 4_000_000 or len(chunk) >= 4096:
                flush(chunk)
                done += chars
                log(f"tokenizing: {done / 1e6:.1f}M of {scan.n_chars / 1e6:.1f}M characters ({time.time() - t0:.0f} s)")
                chunk, chars = [], 0
        if chunk:
            flush(chunk)
    for s in SPLITS:
        np.save(out / f"{s}_docs.npy", np.array(starts[s], dtype=np.int64))
    tok.save_pretrained(out / "tokenizer")
    np.save(out / "token_classes.npy", token_classes(tok, bos))
    meta = _shards_meta(d, scan, tok, bos, starts, n_tokens, dtype)
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    total = sum(n_tokens.values())
    log(
        f"tokenized {scan.n_documents:,} documents, {total / 1e6:.1f}M tokens "
        f"(train {n_tokens['train']:,}, val {n_tokens['val']:,}) in {time.time() - t0:.1f} s"
    )


def _shards_meta(
    d: DataConfig,
    scan: CorpusScan,
    tok: PreTrainedTokenizerFast,
    bos: int,
    starts: dict[str, list[int]],
    n_tokens: dict[str, int],
    dtype: type,
) -> dict:
    """meta.json of a shard directory: where its documents came from, how they split, how they were tokenized."""
    source = source_of(d)
    return {
        "version": SHARDS_VERSION,
        "corpus": {
            "corpus": d.corpus,
            "source": source.kind or d.format,
            "format": d.format,
            "text_field": d.text_field,
            "dataset_config": d.dataset_config,
            "dataset_split": d.dataset_split,
            "max_documents": d.max_documents,
            "sha256": scan.sha256,
            # The interpreter the documents depend on: the stdlib corpus is whatever this interpreter ships.
            "python": source.python_version(),
        },
        "val_fraction": d.val_fraction,
        "val_fallback": scan.val_fallback,
        "n_documents": {s: len(starts[s]) for s in SPLITS},
        "n_tokens": n_tokens,
        "dtype": np.dtype(dtype).name,
        "vocab_size": len(tok),
        "bos_id": bos,
        "tokenizer": d.tokenizer,
        "tokenizer_sha256": tokenizer_hash(tok),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def load_prepared(dir: str | Path) -> Prepared:
    """Open a shard dir written by `prepare` (token files memory-mapped read-only)."""
    dir = Path(dir)
    if not (dir / "meta.json").is_file():
        raise DataError(f"{dir}: not a token shard directory (no meta.json)")
    meta = json.loads((dir / "meta.json").read_text())
    tok = typing.cast(PreTrainedTokenizerFast, AutoTokenizer.from_pretrained(str(dir / "tokenizer")))
    return Prepared(
        dir=dir,
        meta=meta,
        tokenizer=tok,
        bos_id=meta["bos_id"],
        vocab_size=len(tok),
        train=np.memmap(dir / "train.bin", dtype=meta["dtype"], mode="r"),
        val=np.memmap(dir / "val.bin", dtype=meta["dtype"], mode="r"),
        train_docs=np.load(dir / "train_docs.npy"),
        val_docs=np.load(dir / "val_docs.npy"),
        cache_hit=True,
        token_classes=np.load(dir / "token_classes.npy"),
    )
