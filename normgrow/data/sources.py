"""Corpus sources: a corpus's documents, the fingerprint of the files they come from, and the train / val split.

    data.format ─► SOURCES[format] ──resolve(d)──► the source that reads d.corpus ─► documents (doc_id, text)
    auto | text | jsonl |                          stdlib | files | hub | saved     ─► split by sha256(doc_id)
    parquet | datasets | (registered)              | (a registered source)              ─► CorpusScan

`data.format` names a `CorpusSource` in the registry `SOURCES`; user code adds one with
`register_corpus_source(name, source)`. A built-in format may hand a corpus to another source (`resolve`),
which is how `auto` detection works:

- corpus `stdlib` (formats auto and text): this interpreter's standard-library modules, tests left out;
- a corpus `hf:NAME` (any built-in format), or data.format=datasets with a path that does not exist: a
  `datasets` hub name, or a local directory in a hub dataset's layout;
- a directory `datasets.save_to_disk` wrote (format auto, detected by its files), or data.format=datasets
  with a path that exists: a saved `datasets` Dataset / DatasetDict;
- anything else: a file, glob or directory; each file is read as the format says, or with auto by its
  suffix (.jsonl and .parquet hold one document per row, anything else is one text document).

Choices:
- Documents come in a fixed order (files sorted by their relative path, rows in file order), so the corpus
  hash, the split and the token files never depend on the file system's listing order.
- The split is by document, from a hash of the document id, so it never depends on the corpus order,
  the seed or the machine; a tiny corpus whose val split would be empty gives its smallest-hash document
  to val (a run always has something to evaluate).
- Every cache entry (tokenizers, shards, a local `hf:` directory's Arrow copy) lives under `cache_root`, keyed
  by `_key` over content hashes, and is published by `atomic.publish_directory`; the later stages share these helpers.
"""

from __future__ import annotations

import glob
import hashlib
import itertools
import json
import os
import platform
import stat
import sysconfig
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from normgrow.config import DataConfig
from normgrow.errors import DataError
from normgrow.registry import Registry

_STDLIB_SKIP_DIRS = {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__"}
# Files a `datasets.save_to_disk` directory holds at its top (Dataset, or DatasetDict).
_SAVED_DATASET_FILES = ("dataset_info.json", "state.json", "dataset_dict.json")

# ----------------------------------------------------------------------------- cache entries


def cache_root(d: DataConfig) -> Path:
    return Path(d.cache_dir or os.environ.get("NORMGROW_CACHE") or Path.home() / ".cache" / "normgrow").expanduser()


def _key(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]


# ----------------------------------------------------------------------------- the source interface


class CorpusSource:
    """One kind of corpus, selected by `data.format`. Override `documents`, and `fingerprint` when the
    documents come from local files, then `register_corpus_source(name, source)` makes data.format=<name>
    read `data.corpus` through it."""

    kind: str | None = None
    """The corpus's source as a shard dir's meta.json records it; None = the data.format name."""

    def resolve(self, d: DataConfig) -> CorpusSource:
        """The source that reads `d.corpus`: this one; a built-in format hands some corpora to another."""
        return self

    def documents(self, d: DataConfig) -> Iterator[tuple[str, str]]:
        """(doc_id, text) of every non-empty document, in a fixed order; the ids unique (the split hashes them)."""
        raise NotImplementedError(f"{type(self).__name__}.documents")

    def fingerprint(self, d: DataConfig) -> list | None:
        """A cheap, JSON-able identity of what `documents` reads (path, size and times of each file), compared at
        every `corpus_sha256` call; None = the corpus cannot change during the process (no rescan)."""
        return None

    def empty_error(self, d: DataConfig) -> DataError:
        """The error for a corpus that yields no document."""
        return DataError(f"data.corpus: {d.corpus}: holds no non-empty documents")

    def python_version(self) -> str | None:
        """The interpreter version the documents depend on (recorded in meta.json), or None."""
        return None


SOURCES: Registry[CorpusSource] = Registry("corpus source", field="data.format")


def register_corpus_source(name: str, source: CorpusSource, replace: bool = False) -> CorpusSource:
    """Make `data.format=<name>` read the corpus through `source` (an instance of a CorpusSource subclass)."""
    if not isinstance(source, CorpusSource):
        raise TypeError(f"corpus source '{name}': expected a normgrow.data.CorpusSource instance")
    return SOURCES.register(name, source, replace=replace)


def source_of(d: DataConfig) -> CorpusSource:
    """The source that reads `d.corpus`: data.format's entry, after its own detection (`resolve`)."""
    return SOURCES[d.format].resolve(d)


def iter_documents(d: DataConfig) -> Iterator[tuple[str, str]]:
    """(doc_id, text) of every non-empty document of the corpus, in a fixed order; the first
    `d.max_documents` only when that is set. Raises DataError for a missing or empty corpus."""
    source = source_of(d)
    n = 0
    for doc in itertools.islice(source.documents(d), d.max_documents):
        n += 1
        yield doc
    if n == 0:
        raise source.empty_error(d)


# ----------------------------------------------------------------------------- the built-in sources


class StdlibSource(CorpusSource):
    """Corpus `stdlib`: this interpreter's standard-library modules, one document per file, tests left out."""

    kind = "stdlib"

    def documents(self, d: DataConfig) -> Iterator[tuple[str, str]]:
        for path, rel in _stdlib_files():
            text = _read_text(path, d.max_document_bytes)
            if text:
                yield rel, text

    def fingerprint(self, d: DataConfig) -> list | None:
        return _stat_list([p for p, _ in _stdlib_files()])

    def python_version(self) -> str | None:
        return platform.python_version()  # the stdlib corpus is whatever this interpreter ships


class FilesSource(CorpusSource):
    """A file, glob or directory corpus; each file read as `fmt` (text, jsonl, parquet) or, with auto, by its
    suffix: .jsonl and .parquet hold one document per row, anything else is one text document."""

    kind = "files"

    def __init__(self, fmt: str):
        self.fmt = fmt

    def resolve(self, d: DataConfig) -> CorpusSource:
        if d.corpus == "stdlib" and self.fmt in ("auto", "text"):
            return STDLIB
        if d.corpus.startswith("hf:"):  # a `datasets` corpus, whatever the format says
            return HUB
        path = Path(d.corpus).expanduser()
        if self.fmt == "auto" and path.is_dir() and any((path / f).is_file() for f in _SAVED_DATASET_FILES):
            return SAVED
        return self

    def documents(self, d: DataConfig) -> Iterator[tuple[str, str]]:
        files = _corpus_files(d.corpus)
        single = len(files) == 1 and not Path(d.corpus).expanduser().is_dir()
        for path, rel in files:
            # In a multi-file corpus, row documents are named by their file too, so ids stay unique.
            prefix = "" if single else f"{rel}:"
            fmt = (
                self.fmt if self.fmt != "auto" else {".jsonl": "jsonl", ".parquet": "parquet"}.get(path.suffix, "text")
            )
            if fmt == "jsonl":
                yield from _jsonl_documents(path, d.text_field, prefix, d.max_document_bytes)
            elif fmt == "parquet":
                yield from _parquet_documents(path, d.text_field, prefix)
            else:
                text = _read_text(path, d.max_document_bytes)
                if text:
                    yield rel, text

    def fingerprint(self, d: DataConfig) -> list | None:
        return _stat_list([p for p, _ in _corpus_files(d.corpus)])

    def empty_error(self, d: DataConfig) -> DataError:
        files = [p for p, _ in _corpus_files(d.corpus) if p.suffix not in (".jsonl", ".parquet")]
        if files and all(_read_text(p, d.max_document_bytes) is None for p in files):
            return DataError(
                f"data.corpus: {d.corpus}: its {len(files)} file(s) are binary, not text "
                "(a NUL byte in the first 8 KiB); give a folder of text, .jsonl or .parquet files"
            )
        return super().empty_error(d)


class HubDataset(CorpusSource):
    """A `datasets` hub name (`hf:NAME`, or NAME with data.format=datasets), or a local directory in a hub
    dataset's layout (`hf:PATH`), read with `datasets.load_dataset`."""

    kind = "hub"

    def documents(self, d: DataConfig) -> Iterator[tuple[str, str]]:
        # Imported here: `datasets` takes a while to import and only these corpora need it.
        import datasets

        name = d.corpus.removeprefix("hf:")
        if d.streaming:  # only the rows read are fetched; row numbers are the same as the download's
            try:
                ds = datasets.load_dataset(name, d.dataset_config, split=d.dataset_split, streaming=True)
                rows = _dataset_rows(ds, d, streamed=True)
                first = next(rows, None)
            except DataError:
                raise
            except Exception as e:  # unknown name, config or split, no network: all the user's to fix
                raise DataError(f"data.corpus: {d.corpus}: cannot load the dataset ({_first_line(e)})") from None
            if first is not None:
                yield first
                yield from rows
            return
        # A local directory in a hub dataset's layout: `datasets` caches its Arrow copy under the directory's
        # *base name* and configuration only, so a second directory of the same name (or this one, changed)
        # would silently read the first one's cached copy. Each version of a local directory gets its own cache.
        local = _local_dataset_files(d)
        cache_dir = str(cache_root(d) / "datasets" / _key(local)) if local is not None else None
        try:
            ds = datasets.load_dataset(name, d.dataset_config, split=d.dataset_split, cache_dir=cache_dir)
        except Exception as e:  # unknown name, config or split, no network: all the user's to fix
            raise DataError(f"data.corpus: {d.corpus}: cannot load the dataset ({_first_line(e)})") from None
        yield from _dataset_rows(ds, d)

    def fingerprint(self, d: DataConfig) -> list | None:
        return _local_dataset_files(d)  # None for a hub name (fixed by name and revision)


class SavedDataset(CorpusSource):
    """A directory `datasets.save_to_disk` wrote: a Dataset, or a DatasetDict read at data.dataset_split."""

    kind = "saved"

    def documents(self, d: DataConfig) -> Iterator[tuple[str, str]]:
        import datasets  # imported here, as in HubDataset

        ds = datasets.load_from_disk(str(Path(d.corpus).expanduser()))
        if isinstance(ds, datasets.DatasetDict):
            if d.dataset_split not in ds:
                raise DataError(
                    f"data.dataset_split: {d.corpus} has no split '{d.dataset_split}' (splits: {', '.join(ds)})"
                )
            ds = ds[d.dataset_split]
        yield from _dataset_rows(ds, d)


class DatasetsFormat(CorpusSource):
    """data.format=datasets: a path that exists is a saved dataset, anything else (or `hf:`) a hub dataset."""

    def resolve(self, d: DataConfig) -> CorpusSource:
        if d.corpus.startswith("hf:"):
            return HUB
        return SAVED if Path(d.corpus).expanduser().exists() else HUB


STDLIB, HUB, SAVED = StdlibSource(), HubDataset(), SavedDataset()

register_corpus_source("auto", FilesSource("auto"))
register_corpus_source("text", FilesSource("text"))
register_corpus_source("jsonl", FilesSource("jsonl"))
register_corpus_source("parquet", FilesSource("parquet"))
register_corpus_source("datasets", DatasetsFormat())


# ----------------------------------------------------------------------------- files and rows


def _stdlib_files() -> list[tuple[Path, str]]:
    """The stdlib corpus's files: this interpreter's standard-library modules, tests left out."""
    root = Path(sysconfig.get_paths()["stdlib"])
    return [
        (p, rel)
        for p, rel in _walk(root, skip_dir=lambda name: name in _STDLIB_SKIP_DIRS, strict=False)
        if p.suffix == ".py" and not p.name.startswith("test_")
    ]


def _walk(root: Path, skip_dir: Callable[[str], bool], strict: bool = True) -> list[tuple[Path, str]]:
    """(path, posix path relative to root) of the regular files under root, sorted by the relative path. `strict`
    (a user's corpus): a folder that cannot be read, a broken link and a file that is not regular (FIFO, device,
    socket) are one-line errors, so a corpus is never read with parts silently missing and never blocks on a pipe;
    otherwise (the stdlib corpus) they are left out."""

    def unreadable(e: OSError) -> None:
        raise DataError(
            f"data.corpus: {e.filename}: cannot be read ({e.strerror}); make it readable or move it out of the corpus"
        ) from None

    out = []
    for dirpath, dirnames, filenames in os.walk(root, onerror=unreadable if strict else None):
        dirnames[:] = [n for n in dirnames if not skip_dir(n)]
        for name in filenames:
            path = Path(dirpath) / name
            if strict and skip_dir(name):  # a corpus folder's hidden files are left out like its hidden folders
                continue
            if strict:
                regular_file(path)
            elif not path.is_file():
                continue
            out.append((path, path.relative_to(root).as_posix()))
    return sorted(out, key=lambda f: f[1])


def regular_file(path: Path) -> None:
    """A corpus file must be a regular file (after links): anything else is a one-line error before it is opened."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise DataError(f"data.corpus: {path}: a broken link (its target does not exist)") from None
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        raise DataError(
            f"data.corpus: {path}: not a regular file (a FIFO, device or socket); a corpus is made of files and folders"
        )


def _corpus_files(corpus: str) -> list[tuple[Path, str]]:
    """The files of a file, glob or directory corpus with their names relative to its root, sorted."""
    if any(c in corpus for c in "*?["):
        pattern = os.path.expanduser(corpus)
        # The glob's base is its leading run of literal path components.
        parts = Path(pattern).parts
        literal = list(itertools.takewhile(lambda p: not any(c in p for c in "*?["), parts))
        base = os.path.join(*literal) if literal else "."
        matches = [Path(p) for p in glob.glob(pattern, recursive=True)]
        for p in matches:
            regular_file(p)
        files = sorted(
            ((p, Path(os.path.relpath(p, base)).as_posix()) for p in matches if p.is_file()), key=lambda f: f[1]
        )
        if not files:
            raise DataError(f"data.corpus: {corpus}: no files match")
        return files
    root = Path(corpus).expanduser()
    if root.is_dir():
        return [(p, rel) for p, rel in _walk(root, skip_dir=lambda n: n.startswith(".")) if not p.name.startswith(".")]
    if root.exists() or root.is_symlink():
        regular_file(root)
        return [(root, root.name)]
    raise DataError(f"data.corpus: {corpus}: no such file or directory")


def _read_text(path: Path, limit: int) -> str | None:
    """The file as text (utf-8, undecodable bytes replaced, newlines kept as they are); None if binary. A file larger
    than `limit` (data.max_document_bytes) is a one-line error before it is read."""
    size = path.stat().st_size
    if size > limit:
        raise DataError(
            f"data.corpus: {path}: {size:,} bytes, more than data.max_document_bytes={limit:,} for one "
            "document; raise the limit or leave the file out"
        )
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if b"\0" in data[:8192]:
        return None
    return data.decode("utf-8", errors="replace")


def _row_text(value: object, where: str, field: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise DataError(f"{where}: field '{field}' is {type(value).__name__}, expected a string (data.text_field)")


def _jsonl_documents(path: Path, field: str, prefix: str, limit: int) -> Iterator[tuple[str, str]]:
    with open(path, "rb") as f:
        for line_no, line in enumerate(iter(lambda: f.readline(limit + 2), b""), start=1):  # + its line end
            if len(line.rstrip(b"\r\n")) > limit:
                raise DataError(
                    f"{path}: line {line_no}: more than data.max_document_bytes={limit:,} bytes for one "
                    "document; raise the limit or split the line"
                )
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


def _first_line(e: Exception) -> str:
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def _dataset_rows(ds, d: DataConfig, streamed: bool = False) -> Iterator[tuple[str, str]]:
    """(row number, text) of a `datasets` Dataset's (or a streamed IterableDataset's) non-empty data.text_field
    values, read in batches of 1,024 rows."""
    columns = ds.column_names if ds.column_names is not None else list(ds.features or {})
    if d.text_field not in columns:
        raise DataError(f"data.text_field: {d.corpus} has no column '{d.text_field}' (columns: {', '.join(columns)})")
    row = 0
    selected = ds.select_columns([d.text_field])
    # streamed: row by row (a batch would fetch rows past the last one read); downloaded: in batches
    batches = ({d.text_field: [r[d.text_field]]} for r in selected) if streamed else selected.iter(batch_size=1024)
    for batch in batches:
        for value in batch[d.text_field]:
            text = _row_text(value, f"{d.corpus}: row {row}", d.text_field)
            if text:
                yield str(row), text
            row += 1


def _stat_list(files: list[Path]) -> list:
    return [(str(p), st.st_size, st.st_mtime_ns, st.st_ctime_ns) for p in files for st in (p.stat(),)]


def _local_dataset_files(d: DataConfig) -> list | None:
    """For an `hf:` corpus that names a local directory (a hub dataset's layout on disk): the path, size and
    times of each of its files; None for a hub name."""
    root = Path(d.corpus.removeprefix("hf:")).expanduser()
    if not d.corpus.startswith("hf:") or not root.is_dir():
        return None
    return _stat_list(sorted(p for p in root.rglob("*") if p.is_file() and ".cache" not in p.parts))


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
    val_fallback: str | None
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
        raise DataError(
            f"data.corpus: {d.corpus}: all {n} document(s) fall in the validation split; "
            "a run needs at least one training document (add documents or lower data.val_fraction)"
        )
    return CorpusScan(h.hexdigest(), n, n_val, n_chars, fallback)


_SCANS: dict[str, str] = {}


def corpus_sha256(d: DataConfig) -> str:
    """The content hash of the corpus `d` reads — scan_corpus's, remembered in this process while the source's
    fingerprint is unchanged: for local files while none of them changes (their sizes and times are compared at
    every call), for a `datasets` corpus for the life of the process (a full scan of a large dataset at every
    call would be the slow part)."""
    key = hashlib.sha256(
        json.dumps(
            [
                d.corpus,
                d.format,
                d.text_field,
                d.dataset_config,
                d.dataset_split,
                d.max_documents,
                d.val_fraction,
                source_of(d).fingerprint(d),
            ]
        ).encode()
    ).hexdigest()
    if key not in _SCANS:
        _SCANS[key] = scan_corpus(d).sha256
    return _SCANS[key]


def split_documents(d: DataConfig, scan: CorpusScan, split: str) -> Iterator[str]:
    """Texts of one split's documents, in corpus order."""
    return (text for doc_id, text in iter_documents(d) if scan.split_of(doc_id, d.val_fraction) == split)
