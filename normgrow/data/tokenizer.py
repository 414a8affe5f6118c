"""The tokenizer: a byte-level BPE trained on the train split (cached), the teacher's, or any fast tokenizer;
the BOS id that starts every document; and the token class of every vocabulary id (diagnostics read them).

    data.tokenizer ─► bpe:      train documents ─► byte-level BPE ─► cache/tokenizers/<key>/ ─► loaded from there
                      teacher:  teacher.path's tokenizer
                      else:     AutoTokenizer.from_pretrained(path, hub id, .gguf file or pkg:DIST/FILE:
                                normgrow/hfsource.py), fast tokenizers only

Choices:
- The BPE is byte level, with no clean-up of spaces before punctuation, so every string is encodable and
  decode(encode(text)) == text: source code round-trips exactly.
- It sees train documents only, and its cache key is (corpus sha256, vocab_size, val_fraction,
  TOKENIZER_VERSION): a change of the split is a new tokenizer. A trained tokenizer is always loaded back from
  its cache dir, so a fresh and a cached tokenizer hash identically (`tokenizer_hash`).
- Token classes are read from each id's decoded text (content, bos, whitespace, punct), once per shard dir.
"""

from __future__ import annotations

import hashlib
import re
import time
import typing
import unicodedata
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from normgrow import hfsource
from normgrow.atomic import publish_directory
from normgrow.config import DataConfig
from normgrow.data.sources import CorpusScan, _key, scan_corpus, split_documents
from normgrow.errors import DataError

# Bump when the bytes a cache entry holds would change for the same inputs.
TOKENIZER_VERSION = "bpe-v1"

TOKEN_CLASSES = ("content", "bos", "whitespace", "punct")


def load_tokenizer(
    d: DataConfig, teacher_path: str, cache: Path, *, scan: CorpusScan | None = None, log: Callable[[str], None] = print
) -> PreTrainedTokenizerFast:
    """The tokenizer `d.tokenizer` names: a BPE trained on the train split (cached), the teacher's, or a path/hub id."""
    if d.tokenizer == "bpe":
        scan = scan or scan_corpus(d)
        # The BPE sees train documents only, so the split (val_fraction) is part of its identity.
        final = cache / "tokenizers" / _key(scan.sha256, d.vocab_size, d.val_fraction, TOKENIZER_VERSION)
        if not (final / "tokenizer.json").is_file():

            def train(tmp: Path) -> None:
                t0, n_train = time.time(), scan.n_documents - scan.n_val
                _train_bpe(split_documents(d, scan, "train"), d.vocab_size, n_train).save_pretrained(tmp)
                log(
                    f"trained a byte-level BPE (vocab {d.vocab_size:,}) on {n_train:,} train documents in {time.time() - t0:.1f} s"
                )

            publish_directory(final, train)
        # Always load the saved copy, so a fresh and a cached tokenizer hash identically.
        return typing.cast(PreTrainedTokenizerFast, AutoTokenizer.from_pretrained(str(final)))
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
_LONG_RUN = re.compile(rf"\S{{{BPE_TRAIN_RUN + 1},}}|\s{{{BPE_TRAIN_RUN + 1},}}")


def _bounded_runs(texts: Iterator[str]) -> Iterator[str]:
    """The texts, with every overlong run yielded as BPE_TRAIN_RUN-character pieces of its own."""
    for text in texts:
        pos = 0
        for m in _LONG_RUN.finditer(text):
            if m.start() > pos:
                yield text[pos : m.start()]
            yield from (m.group()[i : i + BPE_TRAIN_RUN] for i in range(0, len(m.group()), BPE_TRAIN_RUN))
            pos = m.end()
        if pos < len(text):
            yield text[pos:] if pos else text


def _train_bpe(texts: Iterator[str], vocab_size: int, n_texts: int) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    # Byte level: every string is encodable and decode(encode(text)) == text.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|bos|>", "<|eos|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_bounded_runs(texts), trainer, length=n_texts)
    # No clean-up of spaces before punctuation: it would break the exact round trip of source code.
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|bos|>",
        eos_token="<|eos|>",
        pad_token="<|eos|>",
        clean_up_tokenization_spaces=False,
    )


def _auto_tokenizer(path: str, key: str) -> PreTrainedTokenizerFast:
    src = hfsource.locate(path, key)
    try:
        tok = AutoTokenizer.from_pretrained(src.ref, **src.kwargs)
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
            classes[i] = TOKEN_CLASSES.index(_text_class(typing.cast(str, tok.decode([i]))))
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
