"""Data: corpora round-trip through token shards, the split is stable, batches resume exactly,
token classes match their definition, caches hit, and user mistakes name their field or file."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from normgrow.atomic import publish_directory
from normgrow.config import load_config
from normgrow.data import (
    TOKEN_CLASSES,
    BatchIterator,
    bos_id,
    is_val,
    iter_documents,
    load_prepared,
    load_tokenizer,
    n_sequences,
    prepare,
    probe_batch,
    token_classes,
    tokenizer_hash,
    train_pool,
    val_sequences,
)
from normgrow.errors import ConfigError, DataError
from normgrow.train.diagnostics import make_probe


def make_cfg(cache, *overrides):
    return load_config("tiny", [f"data.cache_dir={cache}", *overrides])


def quiet(msg):
    pass


def python_like(i):
    """A small function; the trailing spaces make a four-space token worth a merge."""
    return (
        f"def function_{i}(alpha, beta):    \n"
        f"    if alpha > beta:\n"
        f"        return alpha + {i}    \n"
        f"    values = [alpha, beta, {i}]\n"
        f"    return sum(values)\n\n\n"
    )


def write_code_corpus(root, n_files=20, funcs_per_file=10):
    root.mkdir()
    for i in range(n_files):
        (root / f"mod_{i:02d}.py").write_text(
            "".join(python_like(i * funcs_per_file + j) for j in range(funcs_per_file))
        )
    return root


def doc_spans(tokens, starts):
    ends = list(starts[1:]) + [len(tokens)]
    return [np.asarray(tokens[s:e]) for s, e in zip(starts, ends, strict=True)]


@pytest.fixture(scope="module")
def stdlib_prepared(tmp_path_factory):
    """The stdlib corpus, first 300 files, prepared once for the tests that need real shards."""
    cfg = make_cfg(tmp_path_factory.mktemp("cache"), "data.max_documents=300", "data.val_fraction=0.1")
    return prepare(cfg, log=quiet)


# ----------------------------------------------------------------------------- corpora


def test_text_corpus_shards_decode_back_to_the_files(tmp_path):
    corpus = tmp_path / "corpus"
    (corpus / "pkg" / "sub").mkdir(parents=True)
    (corpus / ".hidden").mkdir()
    files = {
        "a.py": "def f(x):\n    return x + 1\n",
        "b.txt": "naïve café — ünïcödé ✓ 日本語\n",
        "pkg/crlf.txt": "line one\r\nline two\r\n\r\n",
        "pkg/sub/deep.md": "# Title\n\n  indented   spaces\t\ttabs  \n",
        "pkg/spaces.txt": "f(a , b) . c ! d ? it 's , do n't\n",
        "z.txt": "no trailing newline",
    }
    for rel, text in files.items():
        (corpus / rel).write_bytes(text.encode("utf-8"))
    (corpus / ".dotfile").write_text("hidden file\n")
    (corpus / ".hidden" / "x.txt").write_text("inside a hidden dir\n")
    (corpus / "empty.txt").write_text("")
    (corpus / "blob.bin").write_bytes(b"\x00\x01\x02binary")

    cfg = make_cfg(tmp_path / "cache", f"data.corpus={corpus}", "data.val_fraction=0.3")
    assert [doc_id for doc_id, _ in iter_documents(cfg.data)] == sorted(files)

    p = prepare(cfg, log=quiet)
    decoded = []
    for split in ("train", "val"):
        for span in doc_spans(getattr(p, split), getattr(p, f"{split}_docs")):
            assert span[0] == p.bos_id
            decoded.append(p.tokenizer.decode(span[1:].tolist()))
    assert sorted(decoded) == sorted(files.values())
    assert p.meta["n_documents"]["train"] >= 1 and p.meta["n_documents"]["val"] >= 1


def test_glob_corpus_names_documents_relative_to_its_base(tmp_path):
    for rel in ("data/x/one.txt", "data/y/two.txt", "data/y/skip.md"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(f"text of {rel}\n")
    cfg = make_cfg(tmp_path / "cache", f"data.corpus={tmp_path}/data/*/*.txt")
    assert list(iter_documents(cfg.data)) == [
        ("x/one.txt", "text of data/x/one.txt\n"),
        ("y/two.txt", "text of data/y/two.txt\n"),
    ]


def test_jsonl_corpus_round_trips_and_names_bad_lines(tmp_path):
    path = tmp_path / "docs.jsonl"
    rows = [{"text": "first doc", "n": 1}, {"text": "second\ndoc", "n": 2}, {"text": "third ✓", "n": 3}]
    path.write_text("\n".join(json.dumps(r) for r in rows[:2]) + "\n\n" + json.dumps(rows[2]) + "\n")
    cfg = make_cfg(tmp_path / "cache", f"data.corpus={path}")
    assert list(iter_documents(cfg.data)) == [("1", "first doc"), ("2", "second\ndoc"), ("4", "third ✓")]

    # In a directory, rows are named by file and line, so ids stay unique across files.
    (tmp_path / "many").mkdir()
    for name in ("b.jsonl", "a.jsonl"):
        (tmp_path / "many" / name).write_text(json.dumps({"text": f"from {name}"}) + "\n")
    cfg_dir = make_cfg(tmp_path / "cache", f"data.corpus={tmp_path / 'many'}")
    assert list(iter_documents(cfg_dir.data)) == [("a.jsonl:1", "from a.jsonl"), ("b.jsonl:1", "from b.jsonl")]

    path.write_text(json.dumps({"text": "ok"}) + "\n" + json.dumps({"body": "no text here"}) + "\n")
    with pytest.raises(DataError, match=r"docs\.jsonl: line 2: no field 'text'"):
        list(iter_documents(cfg.data))
    path.write_text(json.dumps({"text": "ok"}) + "\n{not json\n")
    with pytest.raises(DataError, match=r"docs\.jsonl: line 2: invalid JSON"):
        list(iter_documents(cfg.data))


def test_parquet_corpus_round_trips(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = ["alpha beta", "gamma\n\tdelta", "ε ζ η"]
    path = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"content": texts, "id": [10, 11, 12]}), path)
    cfg = make_cfg(tmp_path / "cache", f"data.corpus={path}", "data.text_field=content")
    assert list(iter_documents(cfg.data)) == [("0", texts[0]), ("1", texts[1]), ("2", texts[2])]
    with pytest.raises(DataError, match="no column 'text'"):
        list(iter_documents(make_cfg(tmp_path / "cache", f"data.corpus={path}").data))


def test_saved_datasets_dir_round_trips(tmp_path):
    import datasets

    texts = ["one document", "another one", "a third"]
    datasets.Dataset.from_dict({"text": texts, "label": [0, 1, 0]}).save_to_disk(str(tmp_path / "ds"))
    cfg = make_cfg(tmp_path / "cache", f"data.corpus={tmp_path / 'ds'}")
    assert [text for _, text in iter_documents(cfg.data)] == texts

    datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict({"text": ["train doc"]}),
            "validation": datasets.Dataset.from_dict({"text": texts}),
        }
    ).save_to_disk(str(tmp_path / "dsd"))
    cfg = make_cfg(tmp_path / "cache", f"data.corpus={tmp_path / 'dsd'}", "data.dataset_split=validation")
    assert [text for _, text in iter_documents(cfg.data)] == texts


def test_missing_corpus_and_empty_corpus_are_data_errors(tmp_path):
    with pytest.raises(DataError, match=r"^data\.corpus: .*nope: no such file or directory"):
        list(iter_documents(make_cfg(tmp_path, f"data.corpus={tmp_path / 'nope'}").data))
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "blank.txt").write_text("")
    with pytest.raises(DataError, match="data.corpus"):
        list(iter_documents(make_cfg(tmp_path, f"data.corpus={tmp_path / 'empty'}").data))


def test_stdlib_corpus_holds_library_source_without_tests():
    docs = list(iter_documents(make_cfg("/unused", "data.max_documents=null").data))
    ids = [doc_id for doc_id, _ in docs]
    assert len(docs) > 500
    assert "json/__init__.py" in ids and "collections/__init__.py" in ids
    assert ids == sorted(ids)
    for doc_id in ids:
        parts = doc_id.split("/")
        assert doc_id.endswith(".py")
        assert not {"test", "tests", "idle_test", "site-packages", "__pycache__"} & set(parts[:-1]), doc_id
        assert not parts[-1].startswith("test_"), doc_id
    assert all(text for _, text in docs)
    assert "def dumps(" in dict(docs)["json/__init__.py"]


def test_max_documents_keeps_the_first_documents():
    all_ids = [doc_id for doc_id, _ in iter_documents(make_cfg("/unused", "data.max_documents=40").data)]
    assert [doc_id for doc_id, _ in iter_documents(make_cfg("/unused", "data.max_documents=7").data)] == all_ids[:7]


# ----------------------------------------------------------------------------- split


@pytest.mark.e2e
def test_split_is_deterministic_across_processes_and_roughly_sized():
    ids = [f"doc{i}" for i in range(400)]
    first = [is_val(i, 0.25) for i in ids]
    assert first == [is_val(i, 0.25) for i in ids]
    assert 70 <= sum(first) <= 130  # Binomial(400, 0.25): mean 100, sd 8.7
    # Another interpreter with a different str hash seed agrees, so the split does not use hash().
    code = (
        "from normgrow.data import is_val; print(''.join('1' if is_val(f'doc{i}', 0.25) else '0' for i in range(400)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONHASHSEED": "12345"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert out == "".join("1" if v else "0" for v in first)


def test_tiny_corpus_still_gets_a_val_document_and_one_document_is_an_error(tmp_path):
    corpus = tmp_path / "three"
    corpus.mkdir()
    for name in ("a.txt", "b.txt", "c.txt"):
        (corpus / name).write_text(f"document {name}\n" * 20)
    p = prepare(make_cfg(tmp_path / "cache", f"data.corpus={corpus}", "data.val_fraction=0.001"), log=quiet)
    assert p.meta["n_documents"] == {"train": 2, "val": 1}
    train_texts = {p.tokenizer.decode(s[1:].tolist()) for s in doc_spans(p.train, p.train_docs)}
    val_texts = {p.tokenizer.decode(s[1:].tolist()) for s in doc_spans(p.val, p.val_docs)}
    assert not train_texts & val_texts and len(train_texts | val_texts) == 3

    single = tmp_path / "single.txt"
    single.write_text("the only document\n")
    with pytest.raises(DataError, match="training document"):
        prepare(make_cfg(tmp_path / "cache", f"data.corpus={single}"), log=quiet)


# ----------------------------------------------------------------------------- tokenizer and token classes


def test_token_classes_of_known_tokens(tmp_path):
    corpus = write_code_corpus(tmp_path / "code")
    cfg = make_cfg(tmp_path / "cache", f"data.corpus={corpus}", "data.vocab_size=512")
    tok = load_tokenizer(cfg.data, "default", tmp_path / "cache", log=quiet)
    bos = bos_id(tok, cfg.data)
    assert bos == tok.convert_tokens_to_ids("<|bos|>") == 0 and tok.convert_tokens_to_ids("<|eos|>") == 1
    classes = token_classes(tok, bos)
    assert classes.dtype == np.int8 and len(classes) == len(tok)

    def single_id(text):
        ids = tok.encode(text, add_special_tokens=False)
        assert len(ids) == 1, (text, ids)
        return ids[0]

    expected = {
        "\n": "whitespace",
        "    ": "whitespace",
        "\n   ": "whitespace",
        "(": "punct",
        "):": "punct",
        ",": "punct",
        "def": "content",
        " return": "content",
    }
    for text, cls in expected.items():
        assert TOKEN_CLASSES[classes[single_id(text)]] == cls, text
    assert TOKEN_CLASSES[classes[bos]] == "bos"
    assert TOKEN_CLASSES[classes[1]] == "content"  # <|eos|>: another special token
    # "é" is two bytes; each byte-level token alone decodes to U+FFFD.
    for i in tok.encode("é", add_special_tokens=False):
        assert tok.decode([i]) == "\ufffd" and TOKEN_CLASSES[classes[i]] == "content"


def test_tokenizer_choices_and_bos_errors(tmp_path):
    corpus = write_code_corpus(tmp_path / "code", n_files=5)
    cfg = make_cfg(tmp_path / "cache", f"data.corpus={corpus}")
    with pytest.raises(DataError, match="teacher.path"):
        load_tokenizer(make_cfg(tmp_path, "data.tokenizer=teacher").data, "default", tmp_path)
    with pytest.raises(DataError, match=r"data\.tokenizer: .*no_such_tokenizer"):
        load_tokenizer(make_cfg(tmp_path, f"data.tokenizer={tmp_path / 'no_such_tokenizer'}").data, "default", tmp_path)

    tok = load_tokenizer(cfg.data, "default", tmp_path / "cache", log=quiet)
    assert bos_id(tok, make_cfg(tmp_path, "data.bos_token=<|eos|>").data) == 1
    with pytest.raises(DataError, match="data.bos_token"):
        bos_id(tok, make_cfg(tmp_path, "data.bos_token=<|nope|>").data)
    # A saved tokenizer dir works as data.tokenizer too.
    [saved] = (tmp_path / "cache" / "tokenizers").iterdir()
    again = load_tokenizer(make_cfg(tmp_path, f"data.tokenizer={saved}").data, "default", tmp_path)
    assert again.encode("def f(x):\n") == tok.encode("def f(x):\n")


# ----------------------------------------------------------------------------- shards and cache


def test_second_prepare_is_a_cache_hit_and_vocab_size_changes_the_dir(tmp_path):
    corpus = write_code_corpus(tmp_path / "code")
    cfg = make_cfg(tmp_path / "cache", f"data.corpus={corpus}")
    first = prepare(cfg, log=quiet)
    second = prepare(cfg, log=quiet)
    assert not first.cache_hit and second.cache_hit and second.dir == first.dir
    for name in ("train", "val", "train_docs", "val_docs", "token_classes"):
        assert np.array_equal(getattr(first, name), getattr(second, name)), name
    assert second.train.dtype == np.uint16 and second.vocab_size == 512
    assert tokenizer_hash(second.tokenizer) == second.meta["tokenizer_sha256"]  # the shard's own copy
    reopened = load_prepared(first.dir)
    assert np.array_equal(reopened.train, first.train) and reopened.meta == first.meta
    other = prepare(make_cfg(tmp_path / "cache", f"data.corpus={corpus}", "data.vocab_size=400"), log=quiet)
    assert other.dir != first.dir and other.vocab_size == 400
    assert not list((tmp_path / "cache" / "shards").glob(".*"))  # no temp dirs left behind


def test_a_writer_that_loses_the_rename_race_keeps_the_winners_copy(tmp_path):
    winner = tmp_path / "cache" / "key"
    winner.mkdir(parents=True)
    (winner / "meta.json").write_text("winner")
    publish_directory(winner, lambda tmp: (tmp / "meta.json").write_text("loser"))
    assert (winner / "meta.json").read_text() == "winner"
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["key"]  # the loser's temp dir is gone


@pytest.mark.e2e
def test_stdlib_prepare_with_300_documents(stdlib_prepared):
    p = stdlib_prepared
    meta = json.loads((p.dir / "meta.json").read_text())
    assert sum(meta["n_documents"].values()) == 300
    assert meta["n_tokens"] == {"train": len(p.train), "val": len(p.val)}
    assert meta["n_documents"] == {"train": len(p.train_docs), "val": len(p.val_docs)}
    assert p.bos_id == 0 and p.vocab_size == 512
    for split in ("train", "val"):
        tokens, starts = getattr(p, split), getattr(p, f"{split}_docs")
        assert starts[0] == 0 and np.all(np.diff(starts) > 1)
        assert np.all(tokens[starts] == p.bos_id)
        assert np.count_nonzero(np.asarray(tokens) == p.bos_id) == len(starts)  # BOS only at document starts
        assert int(np.asarray(tokens).max()) < p.vocab_size


# ----------------------------------------------------------------------------- batches


def test_batch_iterator_resumes_exactly():
    tokens = np.arange(4 * 50 + 1, dtype=np.uint16)
    it = BatchIterator(tokens, seq_len=4, batch_size=6, seed=3)
    for _ in range(3):
        next(it)
    state = json.loads(json.dumps(it.state_dict()))
    resumed = BatchIterator(tokens, seq_len=4, batch_size=6, seed=3)
    resumed.load_state_dict(state)
    for _ in range(20):  # crosses epoch boundaries (8 batches per epoch)
        a, b = next(it), next(resumed)
        assert torch.equal(a.tokens, b.tokens) and torch.equal(a.index, b.index)


def test_batch_iterator_ranks_partition_the_global_batch():
    tokens = np.arange(8 * 40 + 1, dtype=np.uint16)
    single = BatchIterator(tokens, seq_len=8, batch_size=6, seed=0)
    ranks = [BatchIterator(tokens, seq_len=8, batch_size=6, seed=0, rank=r, world_size=2) for r in range(2)]
    for _ in range(10):
        parts = [next(r).tokens for r in ranks]
        assert parts[0].shape == (3, 9)
        assert torch.equal(torch.cat(parts), next(single).tokens)


def test_batch_iterator_rows_are_sequences_and_epochs_wrap():
    T, n = 4, 10
    tokens = np.arange(T * n + 3, dtype=np.uint16)  # 10 sequences; the 2 extra tokens never start one
    assert n_sequences(tokens, T) == n
    it = BatchIterator(tokens, seq_len=T, batch_size=4, seed=1)
    first, second = next(it), next(it)
    epoch0 = torch.cat([first.tokens, second.tokens])  # 2 full batches; the tail of 2 sequences is dropped
    assert it.state_dict() == {"epoch": 1, "cursor": 0}
    assert epoch0.dtype == torch.long and epoch0.shape == (8, T + 1)
    starts = epoch0[:, 0]
    assert len(set(starts.tolist())) == 8 and all(s % T == 0 and s < T * n for s in starts.tolist())
    assert torch.equal(epoch0, starts[:, None] + torch.arange(T + 1))  # row = tokens[s : s + T + 1]
    assert torch.equal(torch.cat([first.index, second.index]) * T, starts)  # index = which sequence each row is
    epoch1 = torch.cat([next(it).tokens, next(it).tokens])
    assert it.state_dict() == {"epoch": 2, "cursor": 0}
    assert not torch.equal(epoch0, epoch1)


def test_train_pool_is_spread_evenly_and_checked_against_the_split():
    assert train_pool(10, 0) is None  # the whole split
    assert train_pool(10, 4).tolist() == [0, 3, 6, 9]  # round(linspace(0, 9, 4)) = 0, 3, 6, 9
    assert train_pool(11, 3).tolist() == [0, 5, 10]
    assert train_pool(7, 7).tolist() == list(range(7))  # the pool of all n is the split in order
    big = train_pool(1000, 999)
    assert len(set(big.tolist())) == 999 and np.all(np.diff(big) > 0)  # distinct and ascending, also when dense
    with pytest.raises(ConfigError, match=r"^data.train_pool_sequences: 11 exceeds the 10 sequences"):
        train_pool(10, 11)


def test_batch_iterator_over_a_pool_serves_pool_positions():
    T, n = 4, 10
    tokens = np.arange(T * n + 1, dtype=np.uint16)
    pool = train_pool(n, 4)  # sequences 0, 3, 6, 9
    it = BatchIterator(tokens, seq_len=T, batch_size=2, seed=5, pool=pool)
    for _ in range(3):  # 3 epochs of 2 batches
        batches = [next(it), next(it)]
        index = torch.cat([b.index for b in batches])
        assert sorted(index.tolist()) == [0, 1, 2, 3]  # every pool position once an epoch
        rows = torch.cat([b.tokens for b in batches])
        assert torch.equal(rows[:, 0], torch.from_numpy(pool)[index] * T)  # row = pool sequence `index`
        assert torch.equal(rows, rows[:, :1] + torch.arange(T + 1))
    # the pool of every sequence is the iterator without a pool, bit for bit (the default's behaviour)
    plain, full = (BatchIterator(tokens, seq_len=T, batch_size=3, seed=2, pool=p) for p in (None, train_pool(n, n)))
    for _ in range(7):
        a, b = next(plain), next(full)
        assert torch.equal(a.tokens, b.tokens) and torch.equal(a.index, b.index)


# 8 steps: 3 batches an epoch over 12 → epochs 0, 1 full and 2 batches of epoch 2 (ceil(8 / 3) = 3 started);
# 2 batches an epoch over 10 (2 sequences dropped each) → 4 full epochs
@pytest.mark.parametrize("n_pool,batch,epochs", [(12, 4, 3), (10, 4, 4)])
def test_batch_iterator_counts_what_it_served_and_recounts_it_on_resume(n_pool, batch, epochs):
    T, steps = 4, 8
    tokens = np.arange(T * 30 + 1, dtype=np.uint16)
    it = BatchIterator(tokens, seq_len=T, batch_size=batch, seed=1, pool=train_pool(30, n_pool))
    assert it.usage() == {"sequences": n_pool, "tokens": n_pool * T, "epochs_started": 0, "max_repeats": 0}
    for _ in range(steps):
        next(it)
    assert it.usage()["epochs_started"] == epochs
    assert it.served.sum() == steps * batch
    if n_pool % batch == 0:  # nothing dropped: the last epoch's first batches were served in every epoch
        assert it.usage()["max_repeats"] == epochs and it.served.min() == epochs - 1
    else:  # some sequences dropped from each epoch's tail: at most once per started epoch
        assert it.usage()["max_repeats"] <= epochs and it.served.min() < epochs
    resumed = BatchIterator(tokens, seq_len=T, batch_size=batch, seed=1, pool=train_pool(30, n_pool))
    resumed.load_state_dict(json.loads(json.dumps(it.state_dict())))
    assert np.array_equal(resumed.served, it.served) and resumed.usage() == it.usage()
    for _ in range(5):
        assert torch.equal(next(resumed).index, next(it).index)
    assert np.array_equal(resumed.served, it.served)


def test_batch_iterator_errors_name_train_batch_size():
    tokens = np.arange(4 * 5 + 1, dtype=np.uint16)
    with pytest.raises(DataError, match="train.batch_size"):
        BatchIterator(tokens, seq_len=4, batch_size=3, seed=0, world_size=2)
    with pytest.raises(DataError, match="train.batch_size"):
        BatchIterator(tokens, seq_len=4, batch_size=6, seed=0)


def test_val_sequences_are_the_split_prefix(stdlib_prepared):
    p = stdlib_prepared
    rows = val_sequences(p, seq_len=32, val_tokens=100)  # ceil(100 / 32) = 4 sequences
    assert rows.shape == (4, 33) and rows.dtype == torch.long
    for i in range(4):
        assert rows[i].tolist() == np.asarray(p.val[i * 32 : i * 32 + 33]).tolist()


def test_probe_batch_puts_a_document_start_mid_row_and_counts_classes(stdlib_prepared):
    p = stdlib_prepared
    rows, counts = probe_batch(p, 4, 32)
    assert rows.shape == (4, 33)
    assert (rows[:, 16] == p.bos_id).all()  # BOS at position seq_len // 2 = 16, an interior position
    starts = set(p.val_docs.tolist())
    for r in rows:  # each row is the val split from 16 tokens before some document start
        assert any(np.array_equal(np.asarray(p.val[s - 16 : s + 17]), r.numpy()) for s in starts if s >= 16)
    assert counts["first"] == 4
    assert sum(counts[c] for c in TOKEN_CLASSES) == 4 * 32
    assert counts["bos"] >= 4 and counts["content"] > 0
    probe = make_probe(rows, p.token_classes)  # the diagnostics' classes: BOS enters bos/structural, not first
    assert probe.masks["bos"][:, 16].all() and probe.masks["structural"][:, 16].all()
    assert probe.counts["bos"] >= 4 and probe.counts["first"] == 4


def test_probe_batch_from_short_documents_runs_on_into_the_next(tmp_path):
    corpus = tmp_path / "short"
    corpus.mkdir()
    for i in range(60):
        (corpus / f"d{i:02d}.txt").write_text(f"x = {i}\n")
    p = prepare(make_cfg(tmp_path / "cache", f"data.corpus={corpus}", "data.val_fraction=0.5"), log=quiet)
    rows, counts = probe_batch(p, 3, 16)
    assert (rows[:, 8] == p.bos_id).all()
    assert ((rows[:, 9:] == p.bos_id).sum(dim=1) > 0).all()  # each row crosses into later documents
    assert ((rows[:, :8] == p.bos_id).sum(dim=1) > 0).all()  # and its head is earlier documents' tails
    assert counts["bos"] == int((rows[:, :16] == p.bos_id).sum()) and counts["bos"] >= 3
    assert sum(counts[c] for c in TOKEN_CLASSES) == 3 * 16
    with pytest.raises(DataError, match=r"^data.probe_sequences: .* fewer than 1000"):
        probe_batch(p, 1000, 16)


def test_probe_batch_on_a_split_of_few_long_documents_starts_a_row_at_the_split(tmp_path):
    """A few validation documents, all of them probed: all but the first have seq_len//2 tokens before it, so the first row starts at the
    split's first token (its BOS at position 0, reported as `first`) and the second has its BOS inside."""
    corpus = tmp_path / "two"
    corpus.mkdir()
    for i in range(30):
        (corpus / f"d{i}.txt").write_text(" ".join(f"word{i}_{j}" for j in range(200)) + "\n")
    p = prepare(make_cfg(tmp_path / "cache", f"data.corpus={corpus}", "data.val_fraction=0.2"), log=quiet)
    starts = p.val_docs.tolist()
    assert len(starts) >= 2 and starts[0] == 0
    n = len(starts)
    rows, _ = probe_batch(p, n, 32)
    assert np.array_equal(rows[0].numpy(), np.asarray(p.val[0:33]))  # the first document from its BOS
    assert all((r[16] == p.bos_id).item() for r in rows[1:])  # the others: BOS at 16


@pytest.mark.e2e
def test_prepare_command_builds_then_reuses(tmp_path):
    from conftest import cli

    def summary(proc):
        lines = proc.stdout.splitlines()
        i = next(i for i, line in enumerate(lines) if "token shards in" in line)
        return lines[i], lines[i + 1]

    first = summary(cli("prepare", "tiny", "teacher.path=none", f"data.cache_dir={tmp_path}"))
    assert first[0].startswith("built token shards") and "vocabulary 512" in first[1]
    second = summary(cli("prepare", "tiny", "teacher.path=none", f"data.cache_dir={tmp_path}"))
    assert second[0].startswith("reused cached token shards")
    assert first[1] == second[1]  # same vocabulary and token counts


@pytest.mark.e2e
def test_selection_set_is_disjoint_from_the_validation_set(tiny_cache):
    from normgrow.data import select_sequences

    cfg = load_config("tiny", [f"data.cache_dir={tiny_cache}", "teacher.path=none", "data.tokenizer=bpe"])
    prep = prepare(cfg, log=lambda *_: None)
    T = 32
    val = val_sequences(prep, T, 2048)  # 64 sequences: tokens [0, 64·32 + 1)
    sel = select_sequences(prep, T, 2048, 1000)
    assert sel.shape == (32, T + 1)  # ceil(1000 / 32)
    start = int(prep.val_docs[prep.val_docs >= 64 * T + 1][0])  # the first document after the validation set
    assert torch.equal(sel[0], torch.from_numpy(np.asarray(prep.val[start : start + T + 1], dtype=np.int64)))
    assert sel[0, 0] == prep.bos_id and start > val.shape[0] * T
    with pytest.raises(DataError, match="data.select_tokens"):
        select_sequences(prep, T, 2048, 10**9)
