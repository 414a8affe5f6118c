"""Sequences and batches: shuffled training batches, the fixed validation and model-selection sets, and the
diagnostics probe batch, all cut from a `Prepared` shard dir's flat token arrays.

    val.bin    [val_sequences: the first ceil(val_tokens / T)] [to the next BOS] [select_sequences] ...
               probe_batch: n sequences that each start T // 2 tokens before a document start (BOS at T // 2)
    train.bin  BatchIterator: a permutation of the split's sequences (or of a fixed pool of them) per epoch,
               batch_size at a time

Choices:
- Sequence i of a split is tokens[i*T : i*T + T + 1]: T inputs and their T next-token labels, at stride T.
  Packing crosses document boundaries, as in nanoGPT; the BOS marks them.
- The training order depends on (seed, epoch) only, and a BatchIterator's state is (epoch, cursor), so a resumed
  run sees exactly the batches an uninterrupted one would; W ranks split each global batch into W row blocks.
- A training pool (`data.train_pool_sequences` = N > 0, `train_pool`) is N sequences of the training split spread
  evenly over it, fixed by N and the split alone (every seed and arm draws from the same ones); the iterator then
  permutes pool positions, and a batch's index is the pool position (the row of a teacher cache built over the
  pool). N = 0 is the whole split, the iterator's behaviour before pools existed.
- The validation, selection and probe sets are fixed by the shards and the sizes alone (no randomness), and the
  selection set never overlaps the validation set's documents.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch

from normgrow.data.shards import Prepared
from normgrow.data.tokenizer import TOKEN_CLASSES
from normgrow.errors import ConfigError, DataError

POOL_RULE = "round(linspace(0, n - 1, N))"  # the pool's sequences of a split of n (recorded in a cache's meta.json)


def n_sequences(tokens: np.ndarray, seq_len: int) -> int:
    """Sequences of seq_len + 1 tokens (inputs and next-token labels) at stride seq_len."""
    return max(len(tokens) - 1, 0) // seq_len


def _rows(tokens: np.ndarray, starts: np.ndarray, length: int) -> torch.Tensor:
    return torch.from_numpy(np.stack([np.asarray(tokens[s : s + length], dtype=np.int64) for s in starts]))


def train_pool(n: int, size: int) -> np.ndarray | None:
    """The training pool: `size` sequence indices of a split of n, spread evenly over it (POOL_RULE), ascending
    and distinct; None for size 0 (the whole split). One-line ConfigError when the split holds fewer than size."""
    if size == 0:
        return None
    if size > n:
        raise ConfigError(f"data.train_pool_sequences: {size} exceeds the {n} sequences the training split holds")
    return np.linspace(0, n - 1, size).round().astype(np.int64)


class Batch(NamedTuple):
    """One rank's share of a global batch: its rows and which training sequences they are."""

    tokens: torch.Tensor  # (B/W, T+1) int64: T inputs and their T next-token labels
    index: torch.Tensor  # type: ignore[assignment]  # field shadows tuple.index. (B/W,) int64 sequence indices into the split, or pool positions (a teacher cache's rows)


class BatchIterator:
    """Endless shuffled batches of one split (or of a pool of its sequences), as `Batch`es of
    batch_size / world_size sequences.

    Epoch e visits every sequence (pool position) once in a permutation seeded by (seed, e); each global
    batch is the next batch_size of it (an epoch's incomplete tail is dropped), and rank r takes rows
    [r*B/W, (r+1)*B/W) of it, so the ranks together see exactly the single-process batch. `served` counts
    how often each position has been in a global batch (`usage` reports it; a resumed iterator recounts it).
    """

    def __init__(
        self,
        tokens: np.ndarray,
        seq_len: int,
        batch_size: int,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
        pool: np.ndarray | None = None,
    ):
        if batch_size % world_size:
            raise DataError(f"train.batch_size: {batch_size} is not divisible by the world size {world_size}")
        self.tokens, self.seq_len, self.batch_size, self.seed = tokens, seq_len, batch_size, seed
        self.rank, self.local, self.pool = rank, batch_size // world_size, pool
        self.n = n_sequences(tokens, seq_len) if pool is None else len(pool)
        if self.n < batch_size:
            raise DataError(
                f"train.batch_size: {batch_size} exceeds the {self.n} sequences of "
                f"data.seq_len={seq_len} the {'split' if pool is None else 'training pool'} holds"
            )
        self.epoch, self.cursor = 0, 0
        self._perm_epoch, self._perm = -1, np.empty(0, dtype=np.int64)
        self.served = np.zeros(self.n, dtype=np.int32)

    def _order(self) -> np.ndarray:
        if self._perm_epoch != self.epoch:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
            self._perm, self._perm_epoch = torch.randperm(self.n, generator=g).numpy(), self.epoch
        return self._perm

    def __iter__(self) -> BatchIterator:
        return self

    def __next__(self) -> Batch:
        lo = self.cursor + self.rank * self.local
        order = self._order()
        seqs = order[lo : lo + self.local]
        self.served[order[self.cursor : self.cursor + self.batch_size]] += 1  # the global batch: distinct positions
        self.cursor += self.batch_size
        if self.cursor + self.batch_size > self.n:  # the next batch would not fit: start the next epoch
            self.epoch, self.cursor = self.epoch + 1, 0
        starts = (seqs if self.pool is None else self.pool[seqs]) * self.seq_len
        return Batch(_rows(self.tokens, starts, self.seq_len + 1), torch.from_numpy(seqs))  # (B/W, T+1)

    def state_dict(self) -> dict:
        return {"epoch": int(self.epoch), "cursor": int(self.cursor)}

    def load_state_dict(self, state: dict) -> None:
        """Move to a saved position, recounting `served` by replaying the batches served before it."""
        epoch, cursor = int(state["epoch"]), int(state["cursor"])
        self.served[:] = 0
        per_epoch = self.n // self.batch_size * self.batch_size
        for e in range(epoch + 1):
            self.epoch = e
            self.served[self._order()[: per_epoch if e < epoch else cursor]] += 1
        self.cursor = cursor

    def usage(self) -> dict:
        """What the run's training has read: the sequences (of the pool, or the whole split) and their tokens, the
        epochs started and the most times any one sequence was served (counted, not derived)."""
        return {
            "sequences": int(self.n),
            "tokens": int(self.n * self.seq_len),
            "epochs_started": int(self.epoch + (self.cursor > 0)),
            "max_repeats": int(self.served.max()),
        }


def val_sequences(prepared: Prepared, seq_len: int, val_tokens: int) -> torch.Tensor:
    """The fixed validation set: the first ceil(val_tokens / seq_len) sequences of the val split, (N, T+1)."""
    n = min(math.ceil(val_tokens / seq_len), n_sequences(prepared.val, seq_len))
    if n == 0:
        raise DataError(
            f"data.seq_len: the validation split holds {len(prepared.val)} tokens, too few for one "
            f"sequence of {seq_len}+1 (raise data.val_fraction or lower data.seq_len)"
        )
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
        raise DataError(
            f"data.select_tokens: the validation split holds {have * seq_len:,} tokens after the "
            f"validation set's documents, fewer than {select_tokens:,} (lower data.select_tokens or "
            "data.val_tokens, or raise data.val_fraction)"
        )
    return _rows(prepared.val, start + np.arange(n) * seq_len, seq_len + 1)


def probe_batch(prepared: Prepared, n: int, seq_len: int) -> tuple[torch.Tensor, dict[str, int]]:
    """n val sequences (n, T+1) that each start h = T // 2 tokens before a document start: positions 0 … h−1 are
    the tail of the previous document(s) and position h is the document's BOS, so a BOS sits at an interior
    position of every row (where it is an ordinary structural token, not the attention sink position 0 is).
    Returns the rows and the count of input positions per token class (position 0 included) plus "first" = n.

    Document starts with at least T+1−h tokens of their own after them come first, evenly spaced across the
    split; if there are fewer than n, shorter documents (evenly spaced too) fill the rest and run on into the
    documents after them. A start is usable when h tokens precede it and T+1−h follow it in the split; on a split
    too small for n such starts, the documents with fewer than h tokens before them fill the rest, their rows
    starting at the split's first token (BOS nearer position 0, at 0 for the split's first document).
    """
    h = seq_len // 2
    starts = prepared.val_docs
    lengths = np.diff(np.append(starts, len(prepared.val)))
    offset = np.minimum(starts, h)  # tokens of the previous document(s) before the BOS
    fits = starts - offset + seq_len + 1 <= len(prepared.val)
    full = fits & (offset == h)
    tiers = [
        starts[full & (lengths >= seq_len + 1 - h)],
        starts[full & (lengths < seq_len + 1 - h)],
        starts[fits & ~full],
    ]
    if sum(len(t) for t in tiers) < n:
        raise DataError(
            f"data.probe_sequences: the validation split has {sum(len(t) for t in tiers)} document starts "
            f"with data.seq_len+1={seq_len + 1} tokens in a row around them, fewer than {n} (lower "
            "data.probe_sequences or raise data.val_fraction)"
        )

    def spaced(a: np.ndarray, k: int) -> np.ndarray:
        return a[np.linspace(0, len(a) - 1, k).round().astype(int)] if k > 0 else a[:0]

    picked, left = [], n
    for tier in tiers:
        take = min(left, len(tier))
        picked.append(spaced(tier, take))
        left -= take
    chosen = np.sort(np.concatenate(picked))
    rows = _rows(prepared.val, chosen - np.minimum(chosen, h), seq_len + 1)
    classes = prepared.token_classes[rows[:, :seq_len].numpy()]
    counts = {name: int((classes == i).sum()) for i, name in enumerate(TOKEN_CLASSES)}
    counts["first"] = n
    return rows, counts
