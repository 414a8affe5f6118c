"""The paper's inputs on the CPU stand-in: a Qwen3-8B-shaped checkpoint whose head has more rows than its
tokenizer has tokens, a Qwen-style tokenizer (special tokens added after the base vocabulary, no BOS), and a
FineWeb-Edu-shaped dataset read through the `hf:` code path. The whole study on it is the slow test at the end."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from conftest import cli, cli_process
from normgrow.config import load_config
from normgrow.data import DataError, bos_id, is_val, iter_documents, prepare
from normgrow.teacher.load import TeacherError, load_teacher
from normgrow.teacher.standin import study_overrides


def paper_cfg_args(standin):
    """The stand-in's overrides that are run keys (the rest are the study's: seeds, budget, launcher)."""
    return [o for o in study_overrides(standin) if o.split("=")[0].count(".") and not o.startswith("launcher.")]


def paper_cfg(standin, cache, *extra):
    return load_config("paper", [f"data.cache_dir={cache}", *paper_cfg_args(standin), *extra])


def test_standin_is_shaped_like_qwen3_8b(standin):
    hf = json.loads((standin / "teacher" / "config.json").read_text())
    hf["rope_theta"] = hf.get("rope_parameters", hf)["rope_theta"]  # transformers ≥ 5 nests it
    # Qwen3-8B's published config.json, less its sizes
    assert {
        k: hf[k]
        for k in (
            "model_type",
            "architectures",
            "tie_word_embeddings",
            "rope_theta",
            "rms_norm_eps",
            "max_position_embeddings",
            "hidden_act",
            "attention_bias",
        )
    } == {
        "model_type": "qwen3",
        "architectures": ["Qwen3ForCausalLM"],
        "tie_word_embeddings": False,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 40960,
        "hidden_act": "silu",
        "attention_bias": False,
    }
    assert hf["num_key_value_heads"] < hf["num_attention_heads"]  # grouped-query attention, as Qwen3-8B's 32 / 8
    tok = AutoTokenizer.from_pretrained(str(standin / "teacher"))
    # as Qwen's: special tokens after the base vocabulary (len > vocab_size), no BOS, <|im_end|> as EOS
    assert tok.vocab_size == 400 and len(tok) == 413 and tok.bos_token is None and tok.eos_token == "<|im_end|>"
    assert tok.convert_tokens_to_ids("<|endoftext|>") == 400
    # and a head padded to a multiple of 128 rows beyond the tokenizer (Qwen3-8B: 151,669 → 151,936)
    assert hf["vocab_size"] == 512


def test_standin_head_is_trimmed_to_the_tokenizer(standin):
    path = str(standin / "teacher")
    teacher = load_teacher(path, "float32", torch.device("cpu"), tokenizer_size=413, student_vocab=413)
    assert (teacher.report["head_rows"], teacher.report["trimmed_rows"]) == (512, 99)
    model = AutoModelForCausalLM.from_pretrained(path)
    idx = torch.tensor([[400, 17, 250, 3, 99, 301, 8, 402]])
    with torch.no_grad():
        logits = model(input_ids=idx).logits[0]  # (T, 512)
        chunks = teacher.chunks(idx)
        ours = torch.log_softmax(chunks.hidden @ chunks.weight.T, -1)
    # the distribution normgrow distills: the model's logits over the real tokens only, renormalized
    torch.testing.assert_close(ours, torch.log_softmax(logits[:, :413], -1), atol=1e-5, rtol=0)
    # the padded rows would have taken real probability mass from an untrimmed softmax
    assert torch.softmax(logits, -1)[:, 413:].sum(-1).mean() > 1e-3


def test_a_tokenizer_larger_than_the_head_is_refused(standin, tmp_path):
    tok = AutoTokenizer.from_pretrained(str(standin / "teacher"))
    tok.add_tokens([f"<extra_{i}>" for i in range(120)])  # 533 tokens, 512 head rows
    tok.save_pretrained(tmp_path / "big")
    with pytest.raises(TeacherError, match="512 LM-head rows but the tokenizer has 533 tokens"):
        load_teacher(
            str(standin / "teacher"), "float32", torch.device("cpu"), tokenizer_size=len(tok), student_vocab=len(tok)
        )


def test_paper_preset_reads_the_hf_layout_and_reconciles_the_tokenizer(standin, tmp_path):
    cfg = paper_cfg(standin, tmp_path / "cache")
    assert cfg.data.corpus.startswith("hf:") and cfg.data.dataset_config == "sample-10BT"  # the preset's own config
    docs = list(iter_documents(cfg.data))
    assert len(docs) == 150 and all(text for _, text in docs)
    prep = prepare(cfg, str(standin / "teacher"), log=lambda *_: None)
    tok = AutoTokenizer.from_pretrained(str(standin / "teacher"))
    # the student's vocabulary is every token the tokenizer can emit (413), not its base vocab_size (400)
    assert prep.vocab_size == 413
    # documents are separated by Qwen's <|endoftext|> (the preset's data.bos_token), not its chat EOS <|im_end|>
    sep = bos_id(tok, cfg.data)
    assert sep == tok.convert_tokens_to_ids("<|endoftext|>") == 400
    train_docs = [text for doc_id, text in docs if not is_val(doc_id, cfg.data.val_fraction)]
    assert int((prep.train == sep).sum()) == len(train_docs)
    # each one the teacher tokenizer's own encoding of its text, after the separator
    ids = tok(train_docs[0], add_special_tokens=False).input_ids
    assert prep.train[0] == sep and prep.train[1 : 1 + len(ids)].tolist() == ids


def test_a_missing_dataset_configuration_is_one_line(standin, tmp_path):
    cfg = paper_cfg(standin, tmp_path / "cache", "data.dataset_config=sample-350BT")
    with pytest.raises(DataError, match="data.corpus: hf:.*cannot load the dataset"):
        list(iter_documents(cfg.data))
    proc = cli(
        "prepare",
        "paper",
        f"data.cache_dir={tmp_path / 'c'}",
        *paper_cfg_args(standin),
        "data.dataset_config=sample-350BT",
        check=False,
    )
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "sample-350BT" in proc.stderr


@pytest.mark.slow
def test_paper_path_runs_on_the_cpu_stand_in(standin, tmp_path):
    """`normgrow study paper` with the stand-in's paths and sizes: submitit's local executor, two torchrun ranks
    per run, bf16 autocast and torch.compile as the preset sets them; every arm ends and the report is written."""
    out = tmp_path / "study"
    proc = cli_process(
        "study",
        "paper",
        "-o",
        out,
        "--no-progress",
        f"data.cache_dir={tmp_path / 'cache'}",
        *study_overrides(standin),
        timeout=3600,
    )
    assert f"report: {out / 'report.md'}" in proc.stdout
    rows = (out / "results.csv").read_text().splitlines()
    assert len(rows) == 13 and all(",ok," in r for r in rows[1:]), rows
    for arm in ("pre-joint", "post-grow", "post-freeze"):
        summary = json.loads((out / "runs" / f"{arm}-s0" / "summary.json").read_text())
        cfg = load_config(str(out / "runs" / f"{arm}-s0" / "config.yaml"))
        assert (cfg.train.dtype, cfg.train.compile, cfg.teacher.dtype) == ("bfloat16", True, "bfloat16")
        assert summary["world_size"] == 2
        # the fixture's stand-in: 400 BPE tokens + 13 Qwen special tokens, the head padded to a multiple of 128
        assert (summary["teacher"]["head_rows"], summary["teacher"]["tokenizer_size"]) == (512, 413)
    grow = [json.loads(line) for line in (out / "runs" / "post-grow-s0" / "metrics.jsonl").read_text().splitlines()]
    assert sum(e["event"] == "growth" for e in grow) == 2
    report = (out / "report.md").read_text()
    assert "## The paper's claims at this scale" in report and "grow_gap" in report


def test_two_local_hf_directories_of_the_same_name_are_read_each_as_itself(tmp_path):
    """`datasets` keys its cache of a local directory by the directory's base name and configuration; normgrow
    gives each version of a local directory its own cache, so neither a namesake nor an edit reads stale rows."""
    from normgrow.config import DataConfig
    from normgrow.teacher.standin import write_dataset

    a, b = tmp_path / "a" / "dataset", tmp_path / "b" / "dataset"
    write_dataset(a, ["alpha one", "alpha two"], shards=1)
    write_dataset(b, ["beta one", "beta two", "beta three"], shards=1)

    def texts(root):
        d = DataConfig(
            corpus=f"hf:{root}", dataset_config="sample-10BT", dataset_split="train", cache_dir=str(tmp_path / "cache")
        )
        return [t for _, t in iter_documents(d)]

    assert texts(a) == ["alpha one", "alpha two"]
    assert texts(b) == ["beta one", "beta two", "beta three"]
    import shutil

    shutil.rmtree(a)
    write_dataset(a, ["alpha, rewritten"], shards=1)
    assert texts(a) == ["alpha, rewritten"]


@pytest.mark.e2e
def test_a_streamed_hf_corpus_gives_the_downloaded_documents_and_shards_and_reads_only_what_it_needs(tmp_path):
    """A local directory in a hub dataset's layout (three Parquet shards) read with `datasets` streaming and by the
    download path: the same (id, text) pairs, the same split and byte-identical token shards. With data.max_documents
    inside the first shard, a streamed read never opens the others — here the last shard is not Parquet at all, which
    the download path (it converts the whole split first) cannot read."""
    import itertools
    import shutil

    from normgrow.config import load_config
    from normgrow.data import prepare
    from normgrow.teacher.standin import SHARD_DIR, write_dataset

    texts = [text for _, text in itertools.islice(iter_documents(load_config("tiny").data), 90)]
    root = tmp_path / "dataset"
    write_dataset(root, texts, shards=3)
    common = [f"data.corpus=hf:{root}", "data.dataset_config=sample-10BT", "data.vocab_size=300", "teacher.path=none"]

    def read(streaming: bool, cache: str, *more):
        cfg = load_config(
            "tiny", [*common, f"data.streaming={str(streaming).lower()}", f"data.cache_dir={cache}", *more]
        )
        return list(iter_documents(cfg.data)), prepare(cfg, log=lambda *_: None)

    (docs_s, prep_s), (docs_d, prep_d) = read(True, tmp_path / "c1"), read(False, tmp_path / "c2")
    assert docs_s == docs_d == [(str(i), t) for i, t in enumerate(texts)]
    import numpy as np

    assert np.array_equal(prep_s.train_docs, prep_d.train_docs) and np.array_equal(prep_s.val_docs, prep_d.val_docs)
    assert len(prep_s.val_docs) > 0 and prep_s.dir.name == prep_d.dir.name  # the same split, the same shard key
    for name in sorted(p.name for p in prep_d.dir.iterdir() if p.suffix == ".bin"):
        assert (prep_s.dir / name).read_bytes() == (prep_d.dir / name).read_bytes(), name
    (shard,) = [p for p in (root / SHARD_DIR).iterdir() if p.name.startswith("002_")]
    shard.write_bytes(b"not parquet")
    shutil.rmtree(tmp_path / "c1")
    streamed, _ = read(True, tmp_path / "c1", "data.max_documents=20")
    assert streamed == [(str(i), t) for i, t in enumerate(texts[:20])]
    with pytest.raises(Exception):  # noqa: B017  (whatever `datasets` raises for a broken file: the point is that it reads it)
        read(False, tmp_path / "c3", "data.max_documents=20")
