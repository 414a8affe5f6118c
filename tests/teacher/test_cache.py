"""The top-k teacher cache: exactness at k = V, verification of every field and byte, resumable builds."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import cli, tiny_cfg
from normgrow.data import POOL_RULE, BatchIterator, n_sequences, prepare, train_pool
from normgrow.errors import ConfigError
from normgrow.nn.losses import SparseTeacher, distill_loss
from normgrow.nn.model import Student
from normgrow.parallel.dist import DistInfo
from normgrow.run.pipeline import resolve_config, teacher_path
from normgrow.teacher import cache
from normgrow.teacher.load import load_teacher
from normgrow.train.loop import RunInputs

SMALL = [
    "data.max_documents=12",
    "data.val_fraction=0.2",
    "data.probe_sequences=2",
]  # a small training split keeps k = V caches small


def setup_cache(tiny_cache, *over):
    cfg = tiny_cfg(tiny_cache, *SMALL, *over)
    path = teacher_path(cfg, log=lambda *_: None, progress=False)
    prep = prepare(cfg, teacher_path=path, log=lambda *_: None)
    cfg = resolve_config(cfg, prep)
    teacher = load_teacher(path, "float32", torch.device("cpu"), prep.vocab_size, prep.vocab_size)
    out = cache.build(
        cfg, path, prep, teacher, DistInfo(0, 1, 0, torch.device("cpu")), log=lambda *_: None, progress=False
    )
    return cfg, path, prep, teacher, out


@pytest.mark.parametrize("kind,tau", [("ce", 1.0), ("kl", 2.0)])
def test_full_vocabulary_cache_reproduces_the_online_loss_and_gradients(tiny_cache, kind, tau):
    cfg, path, prep, teacher, out = setup_cache(tiny_cache, "teacher.cache_k=512", f"distill.temperature={tau}")
    c = cache.open_cache(cfg, path, prep)
    assert c.meta["k"] == 512 and c.ids is None and c.tail is None  # the full layout: implicit ids, no tail
    assert c.meta["bytes_per_token"] == 2 * 512  # float16 log-probs alone
    seqs = torch.tensor([3, 0, 7])
    T = cfg.data.seq_len
    x = torch.stack(
        [torch.from_numpy(np.asarray(prep.train[i * T : i * T + T], dtype=np.int64)) for i in seqs.tolist()]
    )
    y = torch.stack(
        [torch.from_numpy(np.asarray(prep.train[i * T + 1 : i * T + T + 1], dtype=np.int64)) for i in seqs.tolist()]
    )
    g = torch.Generator().manual_seed(0)
    h = torch.randn(x.numel(), 32, generator=g)
    w = torch.randn(512, 32, generator=g) * 0.3
    grads = []
    for t in (teacher.chunks(x), SparseTeacher(*c.sequences(seqs, "cpu"))):
        hh, ww = h.clone().requires_grad_(), w.clone().requires_grad_()
        loss = distill_loss(hh, ww, t, y.reshape(-1), n_tokens=x.numel(), kind=kind, temperature=tau, chunk=40)
        loss.backward()
        grads.append((loss.item(), hh.grad, ww.grad))
    (l_on, gh_on, gw_on), (l_c, gh_c, gw_c) = grads
    # the cache stores float16 log-probabilities: agreement to that precision
    assert l_c == pytest.approx(l_on, rel=2e-3, abs=2e-3)
    torch.testing.assert_close(gh_c, gh_on, atol=2e-5, rtol=5e-3)
    torch.testing.assert_close(gw_c, gw_on, atol=2e-5, rtol=5e-3)


EXACT = ["data.train_pool_sequences=24", "teacher.cache_k=512", "teacher.cache_dtype=float32"]


@pytest.mark.parametrize("kind,tau", [("ce", 1.0), ("kl", 2.0)])
def test_exact_cache_over_a_pool_gives_the_online_training_loss(tiny_cache, kind, tau):
    """k = V in float32 over a training pool: one file of 4·V bytes a token whose row r is pool sequence r, and the
    training loss of a real student on a pool batch read from it is the online teacher's to float32 rounding."""
    cfg, path, prep, teacher, out = setup_cache(tiny_cache, *EXACT, f"distill.temperature={tau}")
    T, n = cfg.data.seq_len, n_sequences(prep.train, cfg.data.seq_len)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["layout"] == "full" and meta["values_dtype"] == "float32" and "ids_dtype" not in meta
    assert meta["pool"] == {"sequences": 24, "of": n, "rule": POOL_RULE} and meta["n_tokens"] == 24 * T
    assert sorted(p.name for p in out.iterdir()) == ["logp.bin", "meta.json"]
    assert meta["bytes_per_token"] == 4 * 512 == (out / "logp.bin").stat().st_size / (24 * T)
    c = cache.open_cache(cfg, path, prep)
    assert c.ids is None and c.tail is None
    np.testing.assert_allclose(np.exp(c.logp.astype(np.float64)).sum(1), 1.0, atol=1e-5)  # rows: distributions over V
    info = DistInfo(0, 1, 0, torch.device("cpu"))
    online, cached = RunInputs(cfg, info, prep, teacher), RunInputs(cfg, info, prep, teacher, c)
    batch = next(BatchIterator(prep.train, T, 8, seed=3, pool=train_pool(n, 24)))
    assert batch.index.max() < 24 and (train_pool(n, 24)[batch.index.numpy()] != batch.index.numpy()).any()
    torch.manual_seed(0)
    model = Student(cfg.model, depth=3, max_seq_len=T)
    x, y = batch.tokens[:, :-1], batch.tokens[:, 1:].reshape(-1)
    results = []
    for inputs in (online, cached):
        model.zero_grad()
        h = model(x, hidden_only=True)
        loss = distill_loss(
            h.reshape(-1, h.shape[-1]),
            model.lm_head.weight,
            inputs.train_teacher(x, batch.index),
            y,
            n_tokens=y.numel(),
            kind=kind,
            temperature=tau,
            chunk=cfg.distill.chunk_tokens,
        )
        loss.backward()
        results.append((loss.item(), [p.grad.clone() for p in model.parameters()]))
    (l_on, g_on), (l_c, g_c) = results
    assert l_c == pytest.approx(l_on, rel=1e-5, abs=1e-6)
    for a, b in zip(g_c, g_on, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)


def test_pools_layouts_and_dtypes_key_their_own_caches_and_the_defaults_keep_theirs(tiny_cache):
    def meta_of(*over):
        cfg = tiny_cfg(tiny_cache, *SMALL, *over)
        path = teacher_path(cfg, log=lambda *_: None, progress=False)
        prep = prepare(cfg, teacher_path=path, log=lambda *_: None)
        cfg = resolve_config(cfg, prep)
        return cfg, cache.expected_meta(cfg, path, prep)

    cfg, default = meta_of()
    # the fields and values of caches built before pools, layouts and dtypes existed: their keys are unchanged
    assert set(default) == {
        "version",
        "teacher",
        "tokenizer_sha256",
        "vocab_size",
        "seq_len",
        "k",
        "temperature",
        "teacher_dtype",
        "shards",
        "n_tokens",
        "ids_dtype",
    }
    keys = {
        cache.cache_dir(c, m)
        for c, m in [
            (cfg, default),
            meta_of("data.train_pool_sequences=16"),
            meta_of("data.train_pool_sequences=24"),
            meta_of("teacher.cache_dtype=float32"),
            meta_of("teacher.cache_k=512"),
        ]
    }
    assert len(keys) == 5
    with pytest.raises(ConfigError, match="^data.train_pool_sequences: 100000 exceeds"):
        meta_of("data.train_pool_sequences=100000")
    # a cache over a pool, given to a run without one (teacher.cache_path), is refused with the field named
    pooled_cfg, path, prep, teacher, out = setup_cache(tiny_cache, *EXACT)
    _, whole = meta_of("teacher.cache_k=512", "teacher.cache_dtype=float32")
    with pytest.raises(cache.CacheError, match=r": pool is \{.*the run needs None"):
        cache.open_cache_dir(out, whole, verify_checksums=False)


def test_cli_builds_a_cache_over_a_pool_that_a_run_trains_from(tiny_cache, tmp_path):
    over = [f"data.cache_dir={tiny_cache}", *SMALL, *EXACT, "--no-progress"]
    built = cli("teacher", "cache", "tiny", *over)
    path = Path(built.stdout.strip().splitlines()[-1].removeprefix("teacher cache: "))
    meta = json.loads((path / "meta.json").read_text())
    assert meta["pool"]["sequences"] == 24 and meta["layout"] == "full"
    # 10 steps of 8 over 3 batches an epoch: ceil(10 / 3) = 4 epochs started, the first batch served in all 4
    cli(
        "run",
        "tiny",
        "-o",
        tmp_path / "run",
        *over,
        "teacher.cache=true",
        "--no-plots",
        "curriculum.stages=[{n_layer: 3, tokens: 2560}]",
    )
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert (
        s["train_teacher"].startswith("full-distribution teacher cache (k = V = 512, float32")
        and str(path) in s["train_teacher"]
    )
    assert s["data_pool"] == {"sequences": 24, "tokens": 24 * 32, "epochs_started": 4, "max_repeats": 4}


@pytest.mark.e2e
def test_top_k_cache_has_a_tail_and_a_run_trains_from_it(tiny_cache, tmp_path):
    cfg, path, prep, teacher, out = setup_cache(tiny_cache, "teacher.cache_k=8")
    meta = json.loads((out / "meta.json").read_text())
    assert meta["k"] == 8 and meta["bytes_per_token"] == pytest.approx(8 * 2 + 8 * 2 + 2)
    c = cache.open_cache(cfg, path, prep)
    probs = np.exp(c.logp[:100].astype(np.float64)).sum(1) + np.exp(c.tail[:100].astype(np.float64))
    np.testing.assert_allclose(probs, 1.0, atol=5e-3)  # top-k plus tail is a distribution
    assert np.all(np.diff(c.logp[:100].astype(np.float32), axis=1) <= 1e-3)  # descending
    # the coverage statistic the build reports: the mean tail mass, here from the stored top-k instead
    top_mass = np.exp(c.logp.astype(np.float64)).sum(1)
    assert 0.05 < meta["mean_tail_mass"] < 0.95
    assert meta["mean_tail_mass"] == pytest.approx(1 - top_mass.mean(), abs=5e-3)
    cli(
        "run",
        "tiny",
        "-o",
        tmp_path / "run",
        f"data.cache_dir={tiny_cache}",
        *SMALL,
        "teacher.cache=true",
        "teacher.cache_k=8",
        "--no-progress",
    )
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert "top-8 teacher cache" in s["train_teacher"] and "full vocabulary" in s["ce_source"]
    assert f"{meta['mean_tail_mass']:.1%} of the teacher's mass" in s["train_teacher"]
    assert s["stages"][0]["end"]["val/ce"] < s["stages"][0]["start"]["val/ce"]


def test_a_float32_top_k_cache_stores_log_probs_and_tail_in_float32(tiny_cache):
    cfg, path, prep, teacher, out = setup_cache(tiny_cache, "teacher.cache_k=8", "teacher.cache_dtype=float32")
    meta = json.loads((out / "meta.json").read_text())
    assert meta["values_dtype"] == "float32" and "layout" not in meta and "pool" not in meta
    assert meta["bytes_per_token"] == 8 * 4 + 8 * 2 + 4  # float32 log-probs and tail, uint16 ids
    c = cache.open_cache(cfg, path, prep)
    assert c.logp.dtype == np.float32 and c.tail.dtype == np.float32
    half = cache.open_cache(*setup_cache(tiny_cache, "teacher.cache_k=8")[:3])  # the same teacher rows in float16
    np.testing.assert_array_equal(c.ids, half.ids)
    np.testing.assert_allclose(c.logp, half.logp.astype(np.float32), atol=2e-2, rtol=1e-3)
    probs = np.exp(c.logp.astype(np.float64)).sum(1) + np.exp(c.tail.astype(np.float64))
    np.testing.assert_allclose(probs, 1.0, atol=1e-5)  # top-k plus tail is a distribution, to float32 precision
    assert meta["mean_tail_mass"] == pytest.approx(float(np.exp(c.tail.astype(np.float64)).mean()), rel=1e-9)


def test_every_metadata_mismatch_is_named(tiny_cache, tmp_path):
    cfg, path, prep, teacher, out = setup_cache(tiny_cache, "teacher.cache_k=8")
    want = cache.expected_meta(cfg, path, prep)
    for key, bad in [
        ("tokenizer_sha256", "0" * 64),
        ("seq_len", 64),
        ("vocab_size", 1000),
        ("k", 16),
        ("temperature", 2.0),
        ("teacher", {"path": "/elsewhere", "weights_sha256": "x"}),
    ]:
        with pytest.raises(cache.CacheError, match=rf": {key} is "):
            cache.open_cache_dir(out, {**want, key: bad}, verify_checksums=False)
    # through a run: an explicit cache_path built for another sequence length is refused with its field
    proc = cli(
        "run",
        "tiny",
        "-o",
        tmp_path / "r",
        f"data.cache_dir={tiny_cache}",
        *SMALL,
        f"teacher.cache_path={out}",
        "teacher.cache_k=8",
        "data.seq_len=16",
        check=False,
    )
    assert proc.returncode == 2 and "seq_len" in proc.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "r").exists()


def test_truncated_or_flipped_bytes_are_detected(tiny_cache, tmp_path):
    cfg, path, prep, teacher, out = setup_cache(tiny_cache, "teacher.cache_k=8")
    bad = tmp_path / "bad"
    shutil.copytree(out, bad)
    want = cache.expected_meta(cfg, path, prep)
    cache.open_cache_dir(bad, want)  # the copy is intact
    data = bytearray((bad / "logp.bin").read_bytes())
    data[len(data) // 2] ^= 0x01
    (bad / "logp.bin").write_bytes(bytes(data))
    with pytest.raises(cache.CacheError, match="logp.bin fails its sha256"):
        cache.open_cache_dir(bad, want)
    shutil.copy(out / "logp.bin", bad / "logp.bin")  # repaired; now cut two bytes off another file
    with open(bad / "ids.bin", "r+b") as f:
        f.truncate((bad / "ids.bin").stat().st_size - 2)
    with pytest.raises(cache.CacheError, match="ids.bin has .* bytes.*truncated"):
        cache.open_cache_dir(bad, want)


def test_a_cache_that_does_not_fit_its_disk_is_one_line_and_the_rerun_builds_it(tiny_cache, tmp_path):
    """Before: the cache's files were sparse and written through memory maps, and a disk that filled mid-build
    killed the process with SIGBUS, no message. Now the files' blocks are allocated before any chunk: the cache's
    directory on a 512 KiB file system (tmpfs; needs root) that its 1.5 MB do not fit is one line naming the cache,
    the bytes it needs and the bytes free; the same file system grown, the rerun builds the cache, byte for byte
    the one built on a roomy disk."""
    import shutil
    import subprocess

    cache = tmp_path / "cache"
    shutil.copytree(tiny_cache, cache)
    small = cache / "teacher-cache"
    shutil.rmtree(small, ignore_errors=True)  # the caches other tests built in the shared one
    small.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(small)], capture_output=True).returncode:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        over = [*SMALL, *EXACT, "--no-progress"]
        proc = cli("teacher", "cache", "tiny", f"data.cache_dir={cache}", *over, check=False)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
        assert lines[0].startswith(f"normgrow: error: teacher cache {small}/")
        assert "no space left on the device (about 1,572,864 bytes needed" in lines[0] and "bytes free" in lines[0]
        subprocess.run(["mount", "-o", "remount,size=8m", str(small)], check=True, capture_output=True)
        built = cli("teacher", "cache", "tiny", f"data.cache_dir={cache}", *over)
        path = Path(built.stdout.strip().splitlines()[-1].removeprefix("teacher cache: "))
        roomy = Path(
            cli("teacher", "cache", "tiny", f"data.cache_dir={tiny_cache}", *over)
            .stdout.strip()
            .splitlines()[-1]
            .removeprefix("teacher cache: ")
        )
        assert path.parent == small and roomy.parent == tiny_cache / "teacher-cache"  # (keyed by its teacher's path)
        assert (
            json.loads((path / "meta.json").read_text())["sha256"]
            == json.loads((roomy / "meta.json").read_text())["sha256"]
        )
    finally:
        subprocess.run(["umount", str(small)], capture_output=True)


@pytest.mark.e2e
def test_a_second_build_of_the_same_cache_waits_for_the_first_and_reuses_it(tiny_cache, tmp_path):
    """Before: two `teacher cache` builds of one key 3 s apart, the second joined the first's build and failed on its
    temporary progress file. Now a second build waits for the first's lock, saying so, and then finds the cache
    built. The first builder is this process (holding the build's lock, building); the second a real
    `normgrow teacher cache` process."""
    import os
    import shutil
    import subprocess
    import sys

    cache_dir = tmp_path / "cache"
    shutil.copytree(tiny_cache, cache_dir)
    cfg = tiny_cfg(cache_dir, *SMALL, *EXACT)
    path = teacher_path(cfg, log=lambda *_: None, progress=False)
    prep = prepare(cfg, teacher_path=path, log=lambda *_: None)
    cfg = resolve_config(cfg, prep)
    teacher = load_teacher(path, "float32", torch.device("cpu"), prep.vocab_size, prep.vocab_size)
    meta = cache.expected_meta(cfg, path, prep)
    out, info = cache.cache_dir(cfg, meta), DistInfo(0, 1, 0, torch.device("cpu"))
    args = [sys.executable, "-m", "normgrow.cli", "teacher", "cache", "tiny", f"data.cache_dir={cache_dir}"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with cache.build_lock(out, info, log=lambda *_: None):
        second = subprocess.Popen(
            [*args, *SMALL, *EXACT, "--no-progress"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        assert second.stdout is not None
        said = []
        for line in second.stdout:  # until it says it waits (or ends, and the assertion below says what it said)
            said.append(line)
            if line.startswith("waiting: "):
                break
        assert said and said[-1].startswith("waiting: ") and "in use by another teacher cache build process" in said[-1]
        assert not (out / "meta.json").exists()
        cache._build(cfg, out, meta, prep, teacher, info, lambda *_: None, False)  # this process: the first builder
    rest, _ = second.communicate(timeout=300)
    assert second.returncode == 0, rest[-2000:]
    lines = rest.strip().splitlines()
    assert (
        lines[-2] == f"teacher cache: built by another process meanwhile → {out}"
        and lines[-1] == f"teacher cache: {out}"
    )


@pytest.mark.slow  # 36 s; the run-level kill-and-resume tests stay in the default suite
def test_killed_build_resumes_to_a_byte_identical_cache(tiny_cache, tmp_path):
    over = [*SMALL, "data.max_documents=40", "teacher.cache_k=16"]
    _, _, _, _, ref = setup_cache(tiny_cache, *over)
    kill_and_resume_build(tiny_cache, tmp_path / "cache", over, ref, cache.FILES, after_chunks=3)


def kill_and_resume_build(tiny_cache, other, over, ref, files, after_chunks: int) -> None:
    """`normgrow teacher cache` in a second cache root (the same shards and teacher, so the cache is built there
    anew), SIGKILLed once `after_chunks` chunks are done, then run again: it resumes at that chunk and ends with the
    reference cache's bytes (`files`) and hashes."""
    for name in ("shards", "teachers", "tokenizers"):
        shutil.copytree(tiny_cache / name, other / name)
    cmd = [sys.executable, "-m", "normgrow.cli", "teacher", "cache", "tiny", f"data.cache_dir={other}", *over]
    proc = subprocess.Popen(
        [*cmd, "--no-progress", "train.threads=1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    building = other / "teacher-cache"
    deadline, killed = time.time() + 120, False
    while time.time() < deadline and proc.poll() is None:
        done = list(building.glob("*/progress/rank0-of-1.json")) if building.is_dir() else []
        if done and json.loads(done[0].read_text())["chunks"] >= after_chunks:
            os.kill(proc.pid, signal.SIGKILL)
            killed = True
            break
        time.sleep(0.01)
    proc.wait()
    assert killed, "the build finished before it could be killed"
    partial = next(building.iterdir())
    assert not (partial / "meta.json").exists()
    again = cli("teacher", "cache", "tiny", f"data.cache_dir={other}", *over, "--no-progress")
    assert f"resuming at chunk {after_chunks}" in again.stdout + again.stderr
    for name in files:
        assert (partial / name).read_bytes() == (ref / name).read_bytes(), name
    assert (
        json.loads((partial / "meta.json").read_text())["sha256"]
        == json.loads((ref / "meta.json").read_text())["sha256"]
    )


@pytest.mark.slow  # 22 s each; two-rank parity of training stays in test_train.py
@pytest.mark.parametrize("teacher_sharding", ["none", "fsdp"])
def test_a_two_rank_torchrun_build_matches_the_single_process_cache(tiny_cache, tmp_path, teacher_sharding):
    """Each rank fills its own range; with the teacher's layers sharded over the ranks too."""
    over = [*SMALL, "teacher.cache_k=16"]
    cfg, path, prep, teacher, ref = setup_cache(tiny_cache, *over)
    over.append(f"teacher.sharding={teacher_sharding}")  # not part of the cache's identity
    other = tmp_path / "cache"
    for sub in ("shards", "teachers", "tokenizers"):
        shutil.copytree(tiny_cache / sub, other / sub)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "normgrow.cli",
        "teacher",
        "cache",
        "tiny",
        f"data.cache_dir={other}",
        *over,
        "--no-progress",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    built = next((other / "teacher-cache").iterdir())
    meta = json.loads((built / "meta.json").read_text())
    a = cache.open_cache_dir(built, None)
    b = cache.open_cache_dir(ref, None)
    assert meta["n_tokens"] == b.meta["n_tokens"]
    # the ranks' chunks differ from the single process's, so matmul batching may move the last bits
    np.testing.assert_allclose(a.logp.astype(np.float32), b.logp.astype(np.float32), atol=2e-3)
    assert (a.ids == b.ids).mean() > 0.999
