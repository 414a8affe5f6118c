"""Corpora, tokenizer, token shards, training batches and the diagnostics probe batch, one module per stage:

    sources.py     corpus ─► documents (doc_id, text) ─► split by sha256(doc_id) ─► CorpusScan
                   data.format names a CorpusSource: auto | text | jsonl | parquet | datasets | registered
    tokenizer.py   byte-level BPE trained on train only, the teacher's, or a path; BOS id; token classes
    shards.py      train.bin / val.bin, one flat token file per split, cached under content hashes
    batches.py     BatchIterator (over the split or a fixed training pool), val_sequences, select_sequences, probe_batch

Each stage imports only the ones before it; this package re-exports their public names, so callers import
from `normgrow.data`. A new kind of corpus is a CorpusSource subclass and one `register_corpus_source` call.
"""

from normgrow.data.batches import (
    POOL_RULE,
    Batch,
    BatchIterator,
    n_sequences,
    probe_batch,
    select_sequences,
    train_pool,
    val_sequences,
)
from normgrow.data.shards import SHARDS_VERSION, SPLITS, Prepared, load_prepared, prepare
from normgrow.data.sources import (
    SOURCES,
    CorpusScan,
    CorpusSource,
    cache_root,
    corpus_sha256,
    is_val,
    iter_documents,
    register_corpus_source,
    scan_corpus,
    source_of,
    split_documents,
)
from normgrow.data.tokenizer import (
    BPE_TRAIN_RUN,
    TOKEN_CLASSES,
    TOKENIZER_VERSION,
    bos_id,
    load_tokenizer,
    token_classes,
    tokenizer_hash,
)
from normgrow.errors import DataError

__all__ = [
    # sources
    "SOURCES",
    "CorpusScan",
    "CorpusSource",
    "DataError",
    "cache_root",
    "corpus_sha256",
    "is_val",
    "iter_documents",
    "register_corpus_source",
    "scan_corpus",
    "source_of",
    "split_documents",
    # tokenizer
    "BPE_TRAIN_RUN",
    "TOKEN_CLASSES",
    "TOKENIZER_VERSION",
    "bos_id",
    "load_tokenizer",
    "token_classes",
    "tokenizer_hash",
    # shards
    "SHARDS_VERSION",
    "SPLITS",
    "Prepared",
    "load_prepared",
    "prepare",
    # batches
    "POOL_RULE",
    "Batch",
    "BatchIterator",
    "n_sequences",
    "probe_batch",
    "select_sequences",
    "train_pool",
    "val_sequences",
]
