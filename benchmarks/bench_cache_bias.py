"""The bias of a teacher cache, measured on real students: the gradient of the training loss read from a top-k or a
sampled cache against the exact teacher's (k = V), on fixed batches of each run's training split.

    python benchmarks/bench_cache_bias.py STUDY_DIR|RUN_DIR [...] [--batches 4] [--draws 32] [--out FILE.json]

A study directory stands for seed 0 of each of its arms (their finished runs). For each run: its final student, and
`--batches` training batches of its own shape drawn with a fixed seed (the same for every cache kind). The gradient g
of the soft CE at the run's τ with respect to every parameter of the student is taken with the teacher's
distribution given as

    exact     the online teacher's full distribution (k = V)
    top-k     k = 8, 64: the cache's rows (the k largest log-probs, their ids and the tail bucket)
    sampled   n = 4, 12, 32: the cache's own draws (cache.sampled_rows), for `--draws` draw seeds

and compared with the exact gradient: cosine and relative norm error ‖g − g_exact‖ / ‖g_exact‖, for one cache
(averaged over draw seeds: what one training step sees) and for the mean of the draws' gradients (what is left when
the draw noise averages out: the bias, → 0 for an unbiased cache; a top-k cache's one gradient is all bias).
Reference, measured in the same run: the same two numbers between the exact gradients of this batch set and of
another one of the same size (the minibatch noise every step already carries). Bytes per token of each kind at the
run's vocabulary (float16 values) are printed beside.
"""

import argparse
import json
import platform
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from normgrow.config import load_config
from normgrow.data import BatchIterator, prepare
from normgrow.nn.losses import SampledTeacher, SparseTeacher, distill_loss, tail_logsumexp
from normgrow.run.export import _latest_student
from normgrow.run.pipeline import teacher_path
from normgrow.teacher import cache
from normgrow.teacher.load import load_teacher

TOPK, SAMPLES = (8, 64), (4, 12, 32)


def runs_of(path: Path) -> list[Path]:
    """A run directory, or seed 0 of every arm of a study directory (its runs/ folder)."""
    if (path / "config.yaml").is_file() and (path / "checkpoints").is_dir():
        return [path]
    runs = sorted(p for p in (path / "runs").glob("*-s0") if (p / "summary.json").is_file())
    if not runs:
        sys.exit(f"bench_cache_bias: {path} is neither a finished run nor a study directory with finished runs")
    return runs


def compare(g: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    return F.cosine_similarity(g, ref, dim=0).item(), ((g - ref).norm() / ref.norm()).item()


def batch_set(prep, cfg, n_batches: int, seed: int):
    it = BatchIterator(prep.train, cfg.data.seq_len, cfg.train.batch_size, seed=seed)
    batches = [next(it) for _ in range(n_batches)]
    tokens = torch.cat([b.tokens for b in batches])
    return tokens[:, :-1], tokens[:, 1:].reshape(-1), torch.cat([b.index for b in batches])


def measure_run(run: Path, n_batches: int, draws: int) -> dict:
    cfg = load_config(str(run / "config.yaml"))
    path = teacher_path(cfg, log=lambda *_: None, build=False, progress=False)
    prep = prepare(cfg, teacher_path=path, log=lambda *_: None)
    V, tau, T = prep.vocab_size, cfg.distill.temperature, cfg.data.seq_len
    teacher = load_teacher(path, "float32", torch.device("cpu"), V, V)
    _, _, _, student = _latest_student(run)
    student.float().train()
    params = [p for p in student.parameters() if p.requires_grad]

    def gradients(x, y, index) -> tuple[torch.Tensor, dict]:
        """The exact gradient and every cache kind's gradients for one batch set."""
        with torch.no_grad():
            logp = F.log_softmax(teacher.chunks(x).logits(slice(None)) / tau, dim=-1)  # (N, V) at τ
        h = student(x, hidden_only=True)
        h = h.reshape(-1, h.shape[-1])

        def grad(t) -> torch.Tensor:
            loss = distill_loss(h, student.lm_head.weight, t, y, y.numel(), "ce", tau, chunk=cfg.distill.chunk_tokens)
            return torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, params, retain_graph=True)])

        exact = grad(SparseTeacher(logp, None, None))
        kinds: dict = {}
        for k in TOPK:
            top, ids = logp.topk(k, dim=-1)
            kinds[f"top-{k}"] = [grad(SparseTeacher(top, ids, tail_logsumexp(logp, ids)))]
        for n in SAMPLES:
            kinds[f"sampled-{n}"] = []
            for d in range(draws):
                ids, entropy = cache.sampled_rows(logp, {"samples": n, "seq_len": T, "seed": d}, index.numpy())
                kinds[f"sampled-{n}"].append(grad(SampledTeacher(ids, torch.full(ids.shape, 1 / n), entropy)))
        return exact, kinds

    exact, kinds = gradients(*batch_set(prep, cfg, n_batches, seed=20261206))
    other, _ = gradients(*batch_set(prep, cfg, n_batches, seed=20261207))
    out = {"batch-to-batch (reference)": {"per_cache": compare(other, exact), "of_mean": compare(other, exact)}}
    for name, gs in kinds.items():
        per = [compare(g, exact) for g in gs]
        out[name] = {
            "per_cache": tuple(sum(v) / len(v) for v in zip(*per, strict=True)),
            "of_mean": compare(torch.stack(gs).mean(0), exact),
        }
    return {"run": str(run), "tokens": n_batches * cfg.train.batch_size * T, "vocab": V, "kinds": out}


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").is_file() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def bytes_per_token(name: str, vocab: int) -> int | None:
    ids = 2 if vocab <= 65536 else 4
    if name.startswith("top-"):
        k = int(name.split("-")[1])
        return 2 * k + ids * k + 2
    if name.startswith("sampled-"):
        return ids * int(name.split("-")[1]) + 2
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", type=Path)
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--draws", type=int, default=32)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    torch.manual_seed(0)
    results = [measure_run(r, a.batches, a.draws) for p in a.paths for r in runs_of(p)]
    names = list(results[0]["kinds"])
    vocab = results[0]["vocab"]
    print(
        f"{len(results)} student(s), {results[0]['tokens']:,} tokens each, {a.draws} draw seeds; {platform.processor()}"
    )
    print(
        f"{'cache':<28} {'bytes/tok':>9} {'cos (one)':>10} {'rel.err (one)':>14} {'cos (mean)':>11} {'rel.err (mean)':>15}"
    )
    table = {}
    for name in names:
        one = [sum(r["kinds"][name]["per_cache"][i] for r in results) / len(results) for i in (0, 1)]
        mean = [sum(r["kinds"][name]["of_mean"][i] for r in results) / len(results) for i in (0, 1)]
        b = bytes_per_token(name, vocab)
        table[name] = {
            "bytes_per_token": b,
            "cos_one": one[0],
            "rel_one": one[1],
            "cos_mean": mean[0],
            "rel_mean": mean[1],
        }
        print(f"{name:<28} {b or '':>9} {one[0]:>10.4f} {one[1]:>14.4f} {mean[0]:>11.4f} {mean[1]:>15.4f}")
    print(f"exact (k = V) bytes/token: {2 * vocab} (float16), {4 * vocab} (float32)")
    if a.out:
        a.out.write_text(json.dumps({"table": table, "runs": results, "draws": a.draws}, indent=1))


if __name__ == "__main__":
    main()
