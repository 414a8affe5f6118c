"""Corpora, tokenizer, token shards, training batches and the diagnostics probe batch.

    corpus ─► documents (doc_id, text) ─► split by sha256(doc_id) ─► tokenizer ─► shards ─► batches
             stdlib | files | JSONL |       train / val, fixed       BPE trained      train.bin   BatchIterator
             Parquet | `datasets`            per document            on train only    val.bin     val_sequences
                                                                                                  probe_batch

Choices:
- The split is by document, from a hash of the document id, so it never depends on the corpus order,
  the seed or the machine; a tiny corpus whose val split would be empty gives its smallest-hash document
  to val (a run always has something to evaluate).
- Every document is encoded without special tokens and prefixed with the BOS id, then the documents of a
  split are concatenated into one flat token file. Sequence i is tokens[i*T : i*T + T + 1]: T inputs, T
  next-token labels. Packing crosses document boundaries, as in nanoGPT; the BOS marks them.
- Tokenizers and shards are cached under content hashes (corpus text, tokenizer definition, split
  arguments) and written to a temp dir that is renamed into place, so a cache entry is never half-written
  and concurrent writers agree on one winner.
- Each shard dir is self-describing: meta.json, the tokenizer, and the token class of every vocabulary id.
"""

from __future__ import annotations

import dataclasses
import datetime
import glob
import hashlib
import itertools
import json
import math
import os
import platform
import re
import shutil
import sysconfig
import tempfile
import time
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, NamedTuple, Optional

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from normgrow.config import DataConfig, RunConfig
from normgrow.errors import DataError

# Bump when the bytes a cache entry holds would change for the same inputs.
TOKENIZER_VERSION = "bpe-v1"
SHARDS_VERSION = "shards-v1"

TOKEN_CLASSES = ("content", "bos", "whitespace", "punct")
SPLITS = ("train", "val")

# ----------------------------------------------------------------------------- corpus sources

_STDLIB_SKIP_DIRS = {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__"}
# Files a `datasets.save_to_disk` directory holds at its top (Dataset, or DatasetDict).
_SAVED_DATASET_FILES = ("dataset_info.json", "state.json", "dataset_dict.json")


def iter_documents(d: DataConfig) -> Iterator[tuple[str, str]]:
    """(doc_id, text) of every non-empty document of the corpus, in a fixed order; the first
    `d.max_documents` only when that is set. Raises DataError for a missing or empty corpus."""
    n = 0
    for doc in itertools.islice(_all_documents(d), d.max_documents):
        n += 1
        yield doc
    if n == 0:
        if _source(d) == "files":
            files = [p for p, _ in _corpus_files(d.corpus) if p.suffix not in (".jsonl", ".parquet")]
            if files and all(_read_text(p) is None for p in files):
                raise DataError(f"data.corpus: {d.corpus}: its {len(files)} file(s) are binary, not text "
                                "(a NUL byte in the first 8 KiB); give a folder of text, .jsonl or .parquet files")
        raise DataError(f"data.corpus: {d.corpus}: holds no non-empty documents")


def _source(d: DataConfig) -> str:
    """Which reader the corpus needs: 'stdlib', 'hub' or 'saved' (`datasets`), or 'files'."""
    if d.corpus == "stdlib" and d.format in ("auto", "text"):
        return "stdlib"
    if d.corpus.startswith("hf:"):
        return "hub"
    path = Path(d.corpus).expanduser()
    if d.format == "datasets":
        return "saved" if path.exists() else "hub"
    if d.format == "auto" and path.is_dir() and any((path / f).is_file() for f in _SAVED_DATASET_FILES):
        return "saved"
    return "files"


def _all_documents(d: DataConfig) -> Iterator[tuple[str, str]]:
    """Every document, before max_documents. With format auto, each file of a file/glob/directory corpus
    is read by its suffix: .jsonl and .parquet hold one document per row, anything else is one text document."""
    source = _source(d)
    if source == "stdlib":
        for path, rel in _stdlib_files():
            text = _read_text(path)
            if text:
                yield rel, text
    elif source in ("hub", "saved"):
        yield from _dataset_documents(d, source)
    else:
        files = _corpus_files(d.corpus)
        single = len(files) == 1 and not Path(d.corpus).expanduser().is_dir()
        for path, rel in files:
            # In a multi-file corpus, row documents are named by their file too, so ids stay unique.
            prefix = "" if single else f"{rel}:"
            fmt = d.format if d.format != "auto" else {".jsonl": "jsonl", ".parquet": "parquet"}.get(path.suffix, "text")
            if fmt == "jsonl":
                yield from _jsonl_documents(path, d.text_field, prefix)
            elif fmt == "parquet":
                yield from _parquet_documents(path, d.text_field, prefix)
            else:
                text = _read_text(path)
                if text:
                    yield rel, text


def _stdlib_files() -> list[tuple[Path, str]]:
    """The stdlib corpus's files: this interpreter's standard-library modules, tests left out."""
    root = Path(sysconfig.get_paths()["stdlib"])
    return [(p, rel) for p, rel in _walk(root, skip_dir=lambda name: name in _STDLIB_SKIP_DIRS)
            if p.suffix == ".py" and not p.name.startswith("test_")]


def _walk(root: Path, skip_dir: Callable[[str], bool]) -> list[tuple[Path, str]]:
    """(path, posix path relative to root) of the regular files under root, sorted by the relative path."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [n for n in dirnames if not skip_dir(n)]
        for name in filenames:
            path = Path(dirpath) / name
            if path.is_file():
                out.append((path, path.relative_to(root).as_posix()))
    return sorted(out, key=lambda f: f[1])


def _corpus_files(corpus: str) -> list[tuple[Path, str]]:
    """The files of a file, glob or directory corpus with their names relative to its root, sorted."""
    if any(c in corpus for c in "*?["):
        pattern = os.path.expanduser(corpus)
        # The glob's base is its leading run of literal path components.
        parts = Path(pattern).parts
        literal = list(itertools.takewhile(lambda p: not any(c in p for c in "*?["), parts))
        base = os.path.join(*literal) if literal else "."
        files = sorted(
            ((Path(p), Path(os.path.relpath(p, base)).as_posix()) for p in glob.glob(pattern, recursive=True) if os.path.isfile(p)),
            key=lambda f: f[1],
        )
        if not files:
            raise DataError(f"data.corpus: {corpus}: no files match")
        return files
    root = Path(corpus).expanduser()
    if root.is_dir():
        return [(p, rel) for p, rel in _walk(root, skip_dir=lambda n: n.startswith(".")) if not p.name.startswith(".")]
    if root.exists():
        return [(root, root.name)]
    raise DataError(f"data.corpus: {corpus}: no such file or directory")


def _read_text(path: Path) -> Optional[str]:
    """The file as text (utf-8, undecodable bytes replaced, newlines kept as they are); None if binary."""
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return None
    return data.decode("utf-8", errors="replace")


def _row_text(value: object, where: str, field: str) -> Optional[str]:
    if value is None or isinstance(value, str):
        return value
    raise DataError(f"{where}: field '{field}' is {type(value).__name__}, expected a string (data.text_field)")


def _jsonl_documents(path: Path, field: str, prefix: str) -> Iterator[tuple[str, str]]:
    with open(path, "rb") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                raise DataError(f"{path}: line {line_no}: invalid JSON") from None
            if not isinstance(row, dict):
                raise DataError(f"{path}: line {line_no}: expected a JSON object")
            if field not in row:
                raise DataError(f"{path}: line {line_no}: no field '{field}' (data.text_field)")
            text = _row_text(row[field], f"{path}: line {line_no}", field)
            if text:
                yield f"{prefix}{line_no}", text


def _parquet_documents(path: Path, field: str, prefix: str) -> Iterator[tuple[str, str]]:
    import pyarrow
    import pyarrow.parquet

    try:
        pf = pyarrow.parquet.ParquetFile(path)
    except pyarrow.ArrowException as e:
        raise DataError(f"{path}: not a readable Parquet file ({str(e).splitlines()[0]})") from None
    if field not in pf.schema_arrow.names:
        raise DataError(f"{path}: no column '{field}' (data.text_field; columns: {', '.join(pf.schema_arrow.names)})")
    row = 0
    for batch in pf.iter_batches(batch_size=1024, columns=[field]):
        for value in batch.column(0).to_pylist():
            text = _row_text(value, f"{path}: row {row}", field)
            if text:
                yield f"{prefix}{row}", text
            row += 1


def _dataset_documents(d: DataConfig, source: str) -> Iterator[tuple[str, str]]:
    # Imported here: `datasets` takes a while to import and only these corpora need it.
    import datasets

    if source == "saved":
        ds = datasets.load_from_disk(str(Path(d.corpus).expanduser()))
        if isinstance(ds, datasets.DatasetDict):
            if d.dataset_split not in ds:
                raise DataError(f"data.dataset_split: {d.corpus} has no split '{d.dataset_split}' (splits: {', '.join(ds)})")
            ds = ds[d.dataset_split]
    else:
        name = d.corpus.removeprefix("hf:")
        # A local directory in a hub dataset's layout: `datasets` caches its Arrow copy under the directory's
        # *base name* and configuration only, so a second directory of the same name (or this one, changed)
        # would silently read the first one's cached copy. Each version of a local directory gets its own cache.
        local = _local_dataset_files(d)
        cache_dir = str(cache_root(d) / "datasets" / _key(local)) if local is not None else None
        try:
            ds = datasets.load_dataset(name, d.dataset_config, split=d.dataset_split, cache_dir=cache_dir)
        except Exception as e:  # unknown name, config or split, no network: all the user's to fix
            raise DataError(f"data.corpus: {d.corpus}: cannot load the dataset ({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
    if d.text_field not in ds.column_names:
        raise DataError(f"data.text_field: {d.corpus} has no column '{d.text_field}' (columns: {', '.join(ds.column_names)})")
    row = 0
    for batch in ds.select_columns([d.text_field]).iter(batch_size=1024):
        for value in batch[d.text_field]:
            text = _row_text(value, f"{d.corpus}: row {row}", d.text_field)
            if text:
                yield str(row), text
            row += 1


# ----------------------------------------------------------------------------- train / val split


def _unit_hash(doc_id: str) -> float:
    """sha256 of the id as a number in [0, 1): stable across processes (unlike hash())."""
    return int.from_bytes(hashlib.sha256(doc_id.encode("utf-8", "surrogatepass")).digest()[:8], "big") / 2**64


def is_val(doc_id: str, val_fraction: float) -> bool:
    """Whether a document is held out for validation (about `val_fraction` of the documents)."""
    return _unit_hash(doc_id) < val_fraction


@dataclass
class CorpusScan:
    """What one streaming pass over the corpus learns: its content hash and the split sizes."""

    sha256: str
    n_documents: int
    n_val: int
    n_chars: int
    val_fallback: Optional[str]
    """The smallest-hash document, moved to val when is_val() leaves val empty (tiny corpora); else None."""

    def split_of(self, doc_id: str, val_fraction: float) -> str:
        return "val" if is_val(doc_id, val_fraction) or doc_id == self.val_fallback else "train"


def scan_corpus(d: DataConfig) -> CorpusScan:
    """Stream the corpus once: sha256 over (doc_id, text) of every document, and the split sizes."""
    h = hashlib.sha256()
    n = n_val = n_chars = 0
    smallest, smallest_id = 2.0, None
    for doc_id, text in iter_documents(d):
        for part in (doc_id, text):  # length-prefixed, so ("ab", "c") and ("a", "bc") differ
            b = part.encode("utf-8", "surrogatepass")
            h.update(len(b).to_bytes(8, "little") + b)
        n, n_chars = n + 1, n_chars + len(text)
        u = _unit_hash(doc_id)
        n_val += u < d.val_fraction
        if u < smallest:
            smallest, smallest_id = u, doc_id
    fallback = smallest_id if n_val == 0 else None
    n_val = max(n_val, 1)
    if n_val == n:
        raise DataError(f"data.corpus: {d.corpus}: all {n} document(s) fall in the validation split; "
                        "a run needs at least one training document (add documents or lower data.val_fraction)")
    return CorpusScan(h.hexdigest(), n, n_val, n_chars, fallback)


_SCANS: dict[str, str] = {}


def _stat_list(files: list[Path]) -> list:
    return [(str(p), st.st_size, st.st_mtime_ns, st.st_ctime_ns) for p in files for st in (p.stat(),)]


def _local_dataset_files(d: DataConfig) -> Optional[list]:
    """For an `hf:` corpus that names a local directory (a hub dataset's layout on disk): the path, size and
    times of each of its files; None for a hub name."""
    root = Path(d.corpus.removeprefix("hf:")).expanduser()
    if not d.corpus.startswith("hf:") or not root.is_dir():
        return None
    return _stat_list(sorted(p for p in root.rglob("*") if p.is_file() and ".cache" not in p.parts))


def _files_fingerprint(d: DataConfig) -> Optional[list]:
    """Path, size, modification and change time of every file a local corpus reads (a local `hf:` directory's
    too); None for a hub `datasets` corpus (fixed by name and revision)."""
    source = _source(d)
    if source == "stdlib":
        return _stat_list([p for p, _ in _stdlib_files()])
    if source == "files":
        return _stat_list([p for p, _ in _corpus_files(d.corpus)])
    return _local_dataset_files(d)


def corpus_sha256(d: DataConfig) -> str:
    """The content hash of the corpus `d` reads — scan_corpus's, remembered in this process: for local files
    while none of them changes (their sizes and times are compared at every call), for a `datasets` corpus
    for the life of the process (a full scan of a large dataset at every call would be the slow part)."""
    key = hashlib.sha256(json.dumps([d.corpus, d.format, d.text_field, d.dataset_config, d.dataset_split,
                                     d.max_documents, d.val_fraction, _files_fingerprint(d)]).encode()).hexdigest()
    if key not in _SCANS:
        _SCANS[key] = scan_corpus(d).sha256
    return _SCANS[key]


def split_documents(d: DataConfig, scan: CorpusScan, split: str) -> Iterator[str]:
    """Texts of one split's documents, in corpus order."""
    return (text for doc_id, text in iter_documents(d) if scan.split_of(doc_id, d.val_fraction) == split)


# ----------------------------------------------------------------------------- tokenizer


def cache_root(d: DataConfig) -> Path:
    return Path(d.cache_dir or os.environ.get("NORMGROW_CACHE") or Path.home() / ".cache" / "normgrow").expanduser()


def _key(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]


def _write_atomically(final: Path, write: Callable[[Path], None]) -> None:
    """Run write(tmp) in a temp dir beside `final`, then rename it into place: a cache entry is never
    half-written, and a writer that loses the race to a concurrent one drops its copy and keeps the winner's."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        write(tmp)
        try:
            os.rename(tmp, final)
        except OSError:  # a non-empty `final` exists: another writer finished first
            if not final.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone already after a successful rename


def load_tokenizer(d: DataConfig, teacher_path: str, cache: Path, *, scan: Optional[CorpusScan] = None,
                   log: Callable[[str], None] = print) -> PreTrainedTokenizerFast:
    """The tokenizer `d.tokenizer` names: a BPE trained on the train split (cached), the teacher's, or a path/hub id."""
    if d.tokenizer == "bpe":
        scan = scan or scan_corpus(d)
        # The BPE sees train documents only, so the split (val_fraction) is part of its identity.
        final = cache / "tokenizers" / _key(scan.sha256, d.vocab_size, d.val_fraction, TOKENIZER_VERSION)
        if not (final / "tokenizer.json").is_file():
            def train(tmp: Path) -> None:
                t0, n_train = time.time(), scan.n_documents - scan.n_val
                _train_bpe(split_documents(d, scan, "train"), d.vocab_size, n_train).save_pretrained(tmp)
                log(f"trained a byte-level BPE (vocab {d.vocab_size:,}) on {n_train:,} train documents in {time.time() - t0:.1f} s")

            _write_atomically(final, train)
        # Always load the saved copy, so a fresh and a cached tokenizer hash identically.
        return AutoTokenizer.from_pretrained(str(final))
    if d.tokenizer == "teacher":
        if teacher_path in (None, "none", "default"):  # "default" must be resolved by teacher.resolve_teacher_path
            raise DataError(f"data.tokenizer: 'teacher' needs a teacher, but teacher.path is '{teacher_path}'")
        return _auto_tokenizer(teacher_path, "teacher.path")
    return _auto_tokenizer(d.tokenizer, "data.tokenizer")


# BPE training counts every pre-tokenized "word" and merges inside it: a word of n characters costs O(n²),
# so one 20 MB line without whitespace kept `prepare` busy for many minutes. Runs of non-space (or space)
# characters longer than this are cut into pieces of this length for *training* only; encoding is unchanged
# (the Python standard library has no such run, so its tokenizer is the same with or without the cut).
BPE_TRAIN_RUN = 256
_LONG_RUN = re.compile(r"\S{%d,}|\s{%d,}" % (BPE_TRAIN_RUN + 1, BPE_TRAIN_RUN + 1))


def _bounded_runs(texts: Iterator[str]) -> Iterator[str]:
    """The texts, with every overlong run yielded as BPE_TRAIN_RUN-character pieces of its own."""
    for text in texts:
        pos = 0
        for m in _LONG_RUN.finditer(text):
            if m.start() > pos:
                yield text[pos:m.start()]
            yield from (m.group()[i:i + BPE_TRAIN_RUN] for i in range(0, len(m.group()), BPE_TRAIN_RUN))
            pos = m.end()
        if pos < len(text):
            yield text[pos:] if pos else text


def _train_bpe(texts: Iterator[str], vocab_size: int, n_texts: int) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    # Byte level: every string is encodable and decode(encode(text)) == text.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|bos|>", "<|eos|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_bounded_runs(texts), trainer, length=n_texts)
    # No clean-up of spaces before punctuation: it would break the exact round trip of source code.
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|bos|>", eos_token="<|eos|>",
                                   pad_token="<|eos|>", clean_up_tokenization_spaces=False)


def _auto_tokenizer(path: str, key: str) -> PreTrainedTokenizerFast:
    try:
        tok = AutoTokenizer.from_pretrained(path)
    except Exception as e:  # missing dir, unknown hub id, no network, broken files
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise DataError(f"{key}: {path}: cannot load a tokenizer ({msg})") from None
    if not isinstance(tok, PreTrainedTokenizerFast):
        raise DataError(f"{key}: {path}: needs a fast (tokenizers-backed) tokenizer, got {type(tok).__name__}")
    return tok


def bos_id(tok: PreTrainedTokenizerFast, d: DataConfig) -> int:
    """The id that starts every document: data.bos_token, else the tokenizer's BOS, else its EOS."""
    if d.bos_token is not None:
        vocab = tok.get_vocab()
        if d.bos_token not in vocab:
            raise DataError(f"data.bos_token: '{d.bos_token}' is not in the tokenizer's vocabulary")
        return vocab[d.bos_token]
    for i in (tok.bos_token_id, tok.eos_token_id):
        if i is not None:
            return i
    raise DataError("data.bos_token: the tokenizer has neither a BOS nor an EOS token; name one")


def _plain_backend(tok: PreTrainedTokenizerFast) -> Tokenizer:
    """A copy of the Rust tokenizer without padding or truncation, which callers of tok(...) switch on and off."""
    t = Tokenizer.from_str(tok.backend_tokenizer.to_str())
    t.no_padding()
    t.no_truncation()
    return t


def tokenizer_hash(tok: PreTrainedTokenizerFast) -> str:
    """sha256 of the tokenizer's definition (vocabulary, merges, normalizer, pre-tokenizer, ...)."""
    return hashlib.sha256(_plain_backend(tok).to_str().encode()).hexdigest()


def token_classes(tok: PreTrainedTokenizerFast, bos: int) -> np.ndarray:
    """Class index (into TOKEN_CLASSES) of every id of the full vocabulary, from its text `tok.decode([id])`:

    - bos:        the BOS id only;
    - whitespace: decodes to a non-empty, all-whitespace string ("\\n", "    ", "\\n\\t");
    - punct:      after stripping whitespace, non-empty and every character Unicode punctuation or symbol
                  (categories P*, S*): "(", "):", " ==", "->";
    - content:    everything else, including other special tokens and byte fragments that decode to U+FFFD
                  (itself a symbol, but it stands for part of a character, not for punctuation).
    """
    classes = np.zeros(len(tok), dtype=np.int8)
    special = set(tok.all_special_ids)
    for i in range(len(tok)):
        if i == bos:
            classes[i] = TOKEN_CLASSES.index("bos")
        elif i not in special:
            classes[i] = TOKEN_CLASSES.index(_text_class(tok.decode([i])))
    return classes


def _text_class(text: str) -> str:
    if "\ufffd" in text:
        return "content"
    if text.isspace():
        return "whitespace"
    stripped = text.strip()
    if stripped and all(unicodedata.category(c)[0] in "PS" for c in stripped):
        return "punct"
    return "content"


# ----------------------------------------------------------------------------- shards


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


def prepare(cfg: RunConfig, teacher_path: Optional[str] = None, log: Callable[[str], None] = print) -> Prepared:
    """Corpus → tokenizer → token shards, each cached; returns the opened shards."""
    d = cfg.data
    cache = cache_root(d)
    t0 = time.time()
    scan = scan_corpus(d)
    log(f"corpus {d.corpus}: {scan.n_documents:,} documents ({scan.n_val:,} val), "
        f"{scan.n_chars / 1e6:.1f}M characters, scanned in {time.time() - t0:.1f} s")
    tok = load_tokenizer(d, teacher_path if teacher_path is not None else cfg.teacher.path, cache, scan=scan, log=log)
    bos = bos_id(tok, d)
    final = cache / "shards" / _key(scan.sha256, tokenizer_hash(tok), bos, d.val_fraction, d.max_documents, d.format,
                                    d.text_field, d.dataset_config, d.dataset_split, SHARDS_VERSION)
    if (final / "meta.json").is_file():
        log(f"token shards: cached in {final}")
        return load_prepared(final)
    _write_atomically(final, lambda tmp: _write_shards(d, scan, tok, bos, tmp, log))
    return dataclasses.replace(load_prepared(final), cache_hit=False)


def _write_shards(d: DataConfig, scan: CorpusScan, tok: PreTrainedTokenizerFast, bos: int, out: Path,
                  log: Callable[[str], None]) -> None:
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
            for (split, _), enc in zip(chunk, encodings):
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
    source = _source(d)
    meta = {
        "version": SHARDS_VERSION,
        "corpus": {
            "corpus": d.corpus, "source": source, "format": d.format, "text_field": d.text_field,
            "dataset_config": d.dataset_config, "dataset_split": d.dataset_split,
            "max_documents": d.max_documents, "sha256": scan.sha256,
            # The stdlib corpus is whatever this interpreter ships.
            "python": platform.python_version() if source == "stdlib" else None,
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
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    total = sum(n_tokens.values())
    log(f"tokenized {scan.n_documents:,} documents, {total / 1e6:.1f}M tokens "
        f"(train {n_tokens['train']:,}, val {n_tokens['val']:,}) in {time.time() - t0:.1f} s")


def load_prepared(dir: str | Path) -> Prepared:
    """Open a shard dir written by `prepare` (token files memory-mapped read-only)."""
    dir = Path(dir)
    if not (dir / "meta.json").is_file():
        raise DataError(f"{dir}: not a token shard directory (no meta.json)")
    meta = json.loads((dir / "meta.json").read_text())
    tok = AutoTokenizer.from_pretrained(str(dir / "tokenizer"))
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


# ----------------------------------------------------------------------------- sequences and batches


def n_sequences(tokens: np.ndarray, seq_len: int) -> int:
    """Sequences of seq_len + 1 tokens (inputs and next-token labels) at stride seq_len."""
    return max(len(tokens) - 1, 0) // seq_len


def _rows(tokens: np.ndarray, starts: np.ndarray, length: int) -> torch.Tensor:
    return torch.from_numpy(np.stack([np.asarray(tokens[s : s + length], dtype=np.int64) for s in starts]))


class Batch(NamedTuple):
    """One rank's share of a global batch: its rows and which training sequences they are."""

    tokens: torch.Tensor  # (B/W, T+1) int64: T inputs and their T next-token labels
    index: torch.Tensor  # (B/W,) int64 sequence indices into the split (a teacher cache is indexed by them)


class BatchIterator:
    """Endless shuffled batches of one split, as `Batch`es of batch_size / world_size sequences.

    Epoch e visits every sequence once in a permutation seeded by (seed, e); each global batch is the
    next batch_size sequences of it (an epoch's incomplete tail is dropped), and rank r takes rows
    [r*B/W, (r+1)*B/W) of it, so the ranks together see exactly the single-process batch.
    """

    def __init__(self, tokens: np.ndarray, seq_len: int, batch_size: int, seed: int, rank: int = 0, world_size: int = 1):
        if batch_size % world_size:
            raise DataError(f"train.batch_size: {batch_size} is not divisible by the world size {world_size}")
        self.tokens, self.seq_len, self.batch_size, self.seed = tokens, seq_len, batch_size, seed
        self.rank, self.local = rank, batch_size // world_size
        self.n = n_sequences(tokens, seq_len)
        if self.n < batch_size:
            raise DataError(f"train.batch_size: {batch_size} exceeds the {self.n} sequences of "
                            f"data.seq_len={seq_len} the split holds")
        self.epoch, self.cursor = 0, 0
        self._perm_epoch, self._perm = -1, np.empty(0, dtype=np.int64)

    def _order(self) -> np.ndarray:
        if self._perm_epoch != self.epoch:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
            self._perm, self._perm_epoch = torch.randperm(self.n, generator=g).numpy(), self.epoch
        return self._perm

    def __iter__(self) -> BatchIterator:
        return self

    def __next__(self) -> Batch:
        lo = self.cursor + self.rank * self.local
        seqs = self._order()[lo : lo + self.local]
        self.cursor += self.batch_size
        if self.cursor + self.batch_size > self.n:  # the next batch would not fit: start the next epoch
            self.epoch, self.cursor = self.epoch + 1, 0
        return Batch(_rows(self.tokens, seqs * self.seq_len, self.seq_len + 1), torch.from_numpy(seqs))  # (B/W, T+1)

    def state_dict(self) -> dict:
        return {"epoch": int(self.epoch), "cursor": int(self.cursor)}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.cursor = int(state["epoch"]), int(state["cursor"])


def val_sequences(prepared: Prepared, seq_len: int, val_tokens: int) -> torch.Tensor:
    """The fixed validation set: the first ceil(val_tokens / seq_len) sequences of the val split, (N, T+1)."""
    n = min(math.ceil(val_tokens / seq_len), n_sequences(prepared.val, seq_len))
    if n == 0:
        raise DataError(f"data.seq_len: the validation split holds {len(prepared.val)} tokens, too few for one "
                        f"sequence of {seq_len}+1 (raise data.val_fraction or lower data.seq_len)")
    return _rows(prepared.val, np.arange(n) * seq_len, seq_len + 1)


def select_sequences(prepared: Prepared, seq_len: int, val_tokens: int, select_tokens: int) -> torch.Tensor:
    """The model-selection set (an LR sweep picks its learning rate on it): ceil(select_tokens / seq_len)
    sequences of the val split that start at the first document after the validation set, so no
    selection token is ever a reported validation token, nor seen in training."""
    n_val = min(math.ceil(val_tokens / seq_len), n_sequences(prepared.val, seq_len))
    after = prepared.val_docs[prepared.val_docs >= n_val * seq_len + 1]
    start = int(after[0]) if len(after) else len(prepared.val)
    n = math.ceil(select_tokens / seq_len)
    have = max(len(prepared.val) - start - 1, 0) // seq_len
    if have < n:
        raise DataError(f"data.select_tokens: the validation split holds {have * seq_len:,} tokens after the "
                        f"validation set's documents, fewer than {select_tokens:,} (lower data.select_tokens or "
                        "data.val_tokens, or raise data.val_fraction)")
    return _rows(prepared.val, start + np.arange(n) * seq_len, seq_len + 1)


def probe_batch(prepared: Prepared, n: int, seq_len: int) -> tuple[torch.Tensor, dict[str, int]]:
    """n val sequences (n, T+1) that each start at a document start, so position 0 is always BOS, and the
    count of input positions per token class (plus "first" = n, the position-0 tokens).

    Documents of at least T+1 tokens come first, evenly spaced across the split; if there are fewer than n,
    shorter documents (evenly spaced too) fill the rest and run on into the documents after them.
    """
    starts = prepared.val_docs
    lengths = np.diff(np.append(starts, len(prepared.val)))
    long = starts[lengths >= seq_len + 1]
    short = starts[(lengths < seq_len + 1) & (starts + seq_len + 1 <= len(prepared.val))]
    if len(long) + len(short) < n:
        raise DataError(f"data.probe_sequences: the validation split has {len(long) + len(short)} document starts "
                        f"with data.seq_len+1={seq_len + 1} tokens after them, fewer than {n}")

    def spaced(a: np.ndarray, k: int) -> np.ndarray:
        return a[np.linspace(0, len(a) - 1, k).round().astype(int)] if k > 0 else a[:0]

    chosen = spaced(long, n) if len(long) >= n else np.sort(np.concatenate([long, spaced(short, n - len(long))]))
    rows = _rows(prepared.val, chosen, seq_len + 1)
    classes = prepared.token_classes[rows[:, :seq_len].numpy()]
    counts = {name: int((classes == i).sum()) for i, name in enumerate(TOKEN_CLASSES)}
    counts["first"] = n
    return rows, counts
