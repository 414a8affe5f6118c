"""The sampled teacher cache (teacher.cache_kind=sampled) built from the real tiny teacher: its draws follow the
teacher's distribution at τ (the loss read from it is unbiased over real tokens), they are keyed by sequence (so
chunks, pools and resumes give the same bytes), and a damaged or mismatched cache is refused in one line."""

import json
import shutil

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from test_cache import SMALL, kill_and_resume_build, setup_cache

from conftest import cli
from normgrow.data import n_sequences, train_pool
from normgrow.nn.losses import distill_loss, inverse_cdf
from normgrow.teacher import cache

SAMPLED = ["teacher.cache_kind=sampled", "teacher.cache_samples=6"]
SIGMAS = 4.5  # a deviation beyond 4.5 standard deviations of the estimator: p ≈ 7e-6 per checked quantity


def test_draws_by_inversion_by_hand():
    logp = torch.tensor([[0.5, 0.0, 0.5], [0.0, 1.0, 0.0], [0.2, 0.3, 0.5]]).log()
    u = torch.tensor([[0.0, 0.25, 0.5, 0.9999], [0.0, 0.3, 0.7, 0.9999], [0.1, 0.2, 0.45, 0.5]])
    # F = (.5, .5, 1), (0, 1, 1), (.2, .5, 1): the first j with F(j) > u; a zero-probability id is never drawn
    assert inverse_cdf(logp, u).tolist() == [[0, 0, 2, 2], [1, 1, 1, 1], [0, 1, 1, 2]]


def rows_of(cfg, prep, seqs):
    T = cfg.data.seq_len
    x = torch.stack([torch.from_numpy(np.asarray(prep.train[i * T : i * T + T], dtype=np.int64)) for i in seqs])
    y = torch.stack([torch.from_numpy(np.asarray(prep.train[i * T + 1 : i * T + T + 1], dtype=np.int64)) for i in seqs])
    return x, y.reshape(-1)


def test_a_sampled_cache_draws_from_the_teachers_distribution_at_tau(tiny_cache):
    """Over every token of 40 real sequences at τ = 2: each id's count among the draws against its expectation
    n·Σ_t p_T^τ(id | t) (the gradient of the soft CE with respect to the logits is p_S^τ − that frequency), the
    loss's mean against the exact one, and the entropy against the teacher's; tolerances from the exact variances."""
    cfg, path, prep, teacher, out = setup_cache(tiny_cache, *SAMPLED, "distill.temperature=2.0")
    meta = json.loads((out / "meta.json").read_text())
    assert meta["layout"] == "sampled" and (meta["samples"], meta["seed"], meta["proposal"]) == (6, 0, "teacher")
    assert sorted(p.name for p in out.iterdir()) == ["entropy.bin", "ids.bin", "meta.json"]
    assert meta["bytes_per_token"] == 2 * 6 + 2  # uint16 ids and a float16 entropy
    c = cache.open_cache(cfg, path, prep)
    assert c.logp is None and c.tail is None
    seqs = list(range(min(40, n_sequences(prep.train, cfg.data.seq_len))))
    x, y = rows_of(cfg, prep, seqs)
    t = c.teacher_rows(torch.tensor(seqs), "cpu")
    n_tok, n = t.ids.shape
    assert n == 6 and torch.all(t.ids.diff(dim=1) >= 0) and torch.all(t.weights == 1 / 6)
    p = F.log_softmax(teacher.chunks(x).logits(slice(None)) / 2.0, -1).double().exp()  # (N, V) at τ = 2
    # the entropy, stored in float16
    exact_h = -(p * p.clamp_min(1e-300).log()).sum(-1)
    torch.testing.assert_close(t.entropy.double(), exact_h, atol=5e-3, rtol=2e-3)
    # counts: a sum over tokens and draws of independent Bernoulli(p_t(v))
    counts = torch.bincount(t.ids.reshape(-1), minlength=p.shape[1]).double()
    mean, var = n * p.sum(0), n * (p * (1 - p)).sum(0)
    z = (counts - mean) / var.clamp_min(1e-12).sqrt()
    assert z[mean > 1].abs().max() <= SIGMAS, z[mean > 1].abs().max()
    assert (counts[mean < 1e-9] == 0).all()
    # the loss of a fixed student: the sampled estimate's mean against the exact ce, sd from the exact variance
    g = torch.Generator().manual_seed(0)
    s_logits = torch.randn(n_tok, p.shape[1], generator=g, dtype=torch.float64) * 2
    s_logp = F.log_softmax(s_logits / 2.0, -1)
    exact_ce = -(p * s_logp).sum(-1)
    est = -s_logp.gather(1, t.ids).mean(-1)
    sd = (((p * s_logp**2).sum(-1) - exact_ce**2) / n).sum().sqrt() / n_tok
    assert abs((est - exact_ce).mean()) <= SIGMAS * sd and est.std() > 0.01
    # the chunked training loss reads the same rows: its value is τ² × the estimate's mean
    V = p.shape[1]  # hidden states = the logits, head = the identity
    loss = distill_loss(s_logits.float(), torch.eye(V), t, y, n_tok, "ce", 2.0, chunk=100)
    assert loss.item() == pytest.approx(4 * est.mean().item(), rel=1e-5)


def copy_root(tiny_cache, other):
    """A second cache root with the same shards, tokenizers and teacher (a cache built there is built anew)."""
    for name in ("shards", "teachers", "tokenizers"):
        shutil.copytree(tiny_cache / name, other / name)
    return other


@pytest.mark.e2e
def test_draws_are_keyed_by_sequence_not_by_chunk_pool_or_seed_alone(tiny_cache, tmp_path, monkeypatch):
    cfg, path, prep, teacher, out = setup_cache(tiny_cache, *SAMPLED)
    ids = np.fromfile(out / "ids.bin", dtype=np.uint16).reshape(-1, 6)
    T, n = cfg.data.seq_len, n_sequences(prep.train, cfg.data.seq_len)
    # a pool cache: pool position r holds the draws of split sequence pool[r], as the whole split's cache does
    _, _, _, _, pooled = setup_cache(tiny_cache, *SAMPLED, "data.train_pool_sequences=10")
    pool = train_pool(n, 10)
    assert pool is not None and (pool != np.arange(10)).any()
    pooled_ids = np.fromfile(pooled / "ids.bin", dtype=np.uint16).reshape(10, T, 6)
    np.testing.assert_array_equal(pooled_ids, ids.reshape(n, T, 6)[pool])
    # other chunks (5 sequences instead of 16) in a fresh cache root: the same bytes
    other = copy_root(tiny_cache, tmp_path / "root")
    monkeypatch.setattr(cache, "CHUNK_SEQUENCES", 5)
    _, _, _, _, rechunked = setup_cache(other, *SAMPLED)
    for name in cache.SAMPLED_FILES:
        assert (rechunked / name).read_bytes() == (out / name).read_bytes(), name
    # another seed: another cache, other draws, the same entropy
    _, _, _, _, seeded = setup_cache(tiny_cache, *SAMPLED, "teacher.cache_seed=1")
    assert seeded != out and (seeded / "entropy.bin").read_bytes() == (out / "entropy.bin").read_bytes()
    assert (np.fromfile(seeded / "ids.bin", dtype=np.uint16) != ids.reshape(-1)).mean() > 0.3


def test_a_damaged_or_mismatched_sampled_cache_is_refused_in_one_line(tiny_cache, tmp_path):
    cfg, path, prep, teacher, out = setup_cache(tiny_cache, *SAMPLED)
    _, _, _, _, topk = setup_cache(tiny_cache, "teacher.cache_k=8")

    def run(cache_path, *over):
        target = tmp_path / f"r{len(list(tmp_path.iterdir()))}"
        proc = cli(
            "run", "tiny", "-o", target, f"data.cache_dir={tiny_cache}", *SMALL, *SAMPLED,
            f"teacher.cache_path={cache_path}", *over, check=False,
        )  # fmt: skip
        last = proc.stderr.strip().splitlines()[-1]
        assert proc.returncode == 2 and not target.exists(), proc.stderr[-2000:]
        return last

    assert "layout is 'top-k', the run needs 'sampled'" in run(topk)
    assert "samples is 6, the run needs 12" in run(out, "teacher.cache_samples=12")
    assert "seed is 0, the run needs 3" in run(out, "teacher.cache_seed=3")
    flipped = tmp_path / "flipped"
    shutil.copytree(out, flipped)
    data = bytearray((flipped / "ids.bin").read_bytes())
    data[len(data) // 3] ^= 0x04
    (flipped / "ids.bin").write_bytes(bytes(data))
    assert "ids.bin fails its sha256 check (corrupted)" in run(flipped)
    cut = tmp_path / "cut"
    shutil.copytree(out, cut)
    with open(cut / "entropy.bin", "r+b") as f:
        f.truncate((cut / "entropy.bin").stat().st_size - 2)
    assert "entropy.bin has" in run(cut) and "truncated" in run(cut)
    # a loss with no unbiased estimate from the teacher's draws: refused when the config loads
    proc = cli("run", "tiny", "-o", tmp_path / "jsd", *SAMPLED, "teacher.cache=true", "distill.loss=jsd", check=False)
    assert proc.returncode == 2 and "'jsd' is not available on a sampled teacher cache" in proc.stderr.splitlines()[-1]


def test_a_run_trains_from_a_sampled_cache_and_says_so(tiny_cache, tmp_path):
    cli(
        "run", "tiny", "-o", tmp_path / "r", f"data.cache_dir={tiny_cache}", *SMALL, *SAMPLED, "teacher.cache=true",
        "--no-progress",
    )  # fmt: skip
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["train_teacher"].startswith("sampled teacher cache: 6 draws per token from the teacher (seed 0")
    assert np.isfinite(summary["final"]["val/ce"])


@pytest.mark.slow  # 19 s; the top-k cache's own kill test is slow too, the run-level resume tests stay default
def test_a_killed_sampled_build_resumes_to_the_same_bytes(tiny_cache, tmp_path):
    over = [*SMALL, "data.max_documents=40", *SAMPLED]
    _, _, _, _, ref = setup_cache(tiny_cache, *over)
    kill_and_resume_build(tiny_cache, tmp_path / "cache", over, ref, cache.SAMPLED_FILES, after_chunks=2)
