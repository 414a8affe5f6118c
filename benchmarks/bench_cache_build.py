"""Building a teacher cache against transformers' own forward: is the cache's teacher pass at least as fast?

    python benchmarks/bench_cache_build.py [CONFIG] [key=value …]     (default: `real`, a pool of 32 sequences)

In one process, one after the other, over the same pool of training sequences (data.train_pool_sequences):
- the cache builds (cache.build: teacher decoder, head projection, log-softmax, top-k and tail or draws and entropy,
  written chunk by chunk with its progress file), top-k and sampled, each into a fresh cache root;
- the reference, timed before and after the builds: `model(input_ids=x).logits`, log-softmax and top-k per chunk of the
  same sequences, nothing written.
Prints tokens/s of each and the ratio cache / reference (≥ 1.0: the cache costs no more than the library's forward).
"""

import dataclasses
import sys
import tempfile
import time

import numpy as np
import torch

from normgrow.config import load_config
from normgrow.data import n_sequences, train_pool
from normgrow.run.pipeline import build_inputs, teacher_path
from normgrow.teacher import cache


def main() -> None:
    args = sys.argv[1:]
    preset = args[0] if args and "=" not in args[0] else "real"
    over = ["teacher.cache=true", "data.train_pool_sequences=32", *[a for a in args if "=" in a]]
    cfg = load_config(preset, over)
    inputs = build_inputs(cfg, log=lambda *_: None, open_cache=False)
    cfg, prep, teacher = inputs.cfg, inputs.prep, inputs.teacher
    path = teacher_path(cfg, build=False)
    T = cfg.data.seq_len
    pool = train_pool(n_sequences(prep.train, T), cfg.data.train_pool_sequences)
    assert pool is not None
    n_tokens = len(pool) * T

    def chunk(s: int) -> torch.Tensor:
        seqs = pool[s : s + cache.CHUNK_SEQUENCES]
        return torch.from_numpy(np.stack([np.asarray(prep.train[i * T : i * T + T], dtype=np.int64) for i in seqs]))

    with torch.no_grad():  # a warm-up forward: the first one in a process pays one-time costs
        teacher.model(input_ids=chunk(0))

    def reference() -> float:
        t0 = time.perf_counter()
        for s in range(0, len(pool), cache.CHUNK_SEQUENCES):
            with torch.no_grad():
                logits = teacher.model(input_ids=chunk(s)).logits.float()
                torch.log_softmax(logits, dim=-1).topk(cfg.teacher.cache_k, dim=-1)
        return n_tokens / (time.perf_counter() - t0)

    rates = {"transformers forward, before": reference()}
    for kind in ("topk", "sampled"):
        with tempfile.TemporaryDirectory() as root:
            c = dataclasses.replace(
                cfg,
                data=dataclasses.replace(cfg.data, cache_dir=root),
                teacher=dataclasses.replace(cfg.teacher, cache_kind=kind),
            )
            t0 = time.perf_counter()
            cache.build(c, path, prep, teacher, inputs.info, log=lambda *_: None, progress=False)
            rates[f"cache {kind}"] = n_tokens / (time.perf_counter() - t0)
    rates["transformers forward, after"] = reference()
    print(
        f"{preset}: teacher {cfg.teacher.path} ({cfg.teacher.dtype}), {len(pool)} sequences × {T} = {n_tokens:,} "
        f"tokens, chunks of {cache.CHUNK_SEQUENCES} sequences, {torch.get_num_threads()} threads"
    )
    for k, v in rates.items():
        print(f"  {k:30s} {v:9,.0f} tokens/s")
    ref = (rates["transformers forward, before"] + rates["transformers forward, after"]) / 2
    caches = ", ".join(f"{k} {v / ref:.2f}" for k, v in rates.items() if k.startswith("cache"))
    print(f"ratio to transformers' forward (the mean of its timings before and after the caches): {caches}")


if __name__ == "__main__":
    main()
