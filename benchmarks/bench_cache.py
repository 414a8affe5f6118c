"""The teacher cache (top-k, or sampled: teacher.cache_kind=sampled): bytes per token, read throughput against
the student's consumption rate, and the wall time of a study with the online teacher vs with the cache.

    python benchmarks/bench_cache.py [CONFIG] [key=value …]        (default: the `default` preset)
    python benchmarks/bench_cache.py default --study default budget_scale=0.25   (adds the study comparison)

Read throughput: random training batches (the order the batch iterator serves them) gathered
from the memory-mapped cache and converted to float32 tensors, in tokens/s, divided by the
student's distillation-step throughput measured in the same process (target >= 20).
Study: the same study run twice in subprocesses, once with the online teacher and once training from the cache
(built above, so the second study does not rebuild it); the ratio is reported with and without the build.
"""

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from normgrow.config import load_config
from normgrow.data import BatchIterator, n_sequences, train_pool
from normgrow.run.pipeline import build_inputs, teacher_path
from normgrow.teacher import cache
from normgrow.train.growth import set_trainable
from normgrow.train.loop import build_student
from normgrow.train.stages import plan_stages
from normgrow.train.step import build_optimizer, train_step, wrap_for_training


def main() -> None:
    args = sys.argv[1:]
    study = None
    if "--study" in args:
        i = args.index("--study")
        study = args[i + 1 :]
        args = args[:i]
    preset = args[0] if args and "=" not in args[0] else "default"
    cfg = load_config(preset, [a for a in args if "=" in a] + ["teacher.cache=true"])
    inputs = build_inputs(cfg, log=lambda *_: None, open_cache=False)
    cfg, prep = inputs.cfg, inputs.prep
    path = teacher_path(cfg, build=False)
    t0 = time.perf_counter()
    out = cache.build(cfg, path, prep, inputs.teacher, inputs.info)
    build_s = time.perf_counter() - t0
    c = inputs.cache = cache.open_cache(cfg, path, prep)
    T, B = cfg.data.seq_len, cfg.train.batch_size
    it = BatchIterator(
        prep.train, T, B, seed=1, pool=train_pool(n_sequences(prep.train, T), cfg.data.train_pool_sequences)
    )
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < 3.0:
        c.teacher_rows(next(it).index, "cpu")
        n += B * T
    read_tps = n / (time.perf_counter() - t0)
    plan = plan_stages(cfg)[-1]  # the full-depth stage: the training loop's own step, reading the cache
    model = build_student(inputs, plan)
    set_trainable(model, plan)
    opt = build_optimizer(model, cfg, inputs.info.device)
    step_fn = wrap_for_training(model, inputs.info, cfg)
    times = []
    for i in range(6):
        b = next(it)
        t1 = time.perf_counter()
        train_step(model, step_fn, opt, b, cfg, inputs.info, inputs.train_teacher, lr=1e-4)
        if i >= 2:
            times.append(time.perf_counter() - t1)
    student_tps = B * T / float(np.median(times))
    what = f"n={c.meta['samples']} sampled" if cache.is_sampled(c.meta) else f"k={c.meta['k']}"
    print(f"{preset}: cache {out} ({what}, {c.meta['n_tokens']:,} tokens), built in {build_s:.0f} s")
    print(f"bytes per token: {c.meta['bytes_per_token']:.0f}")
    print(
        f"cache read: {read_tps:,.0f} tokens/s; student step on the cache: {student_tps:,.0f} tokens/s; "
        f"ratio {read_tps / student_tps:.1f} (target >= 20)"
    )
    if study is not None:
        import csv

        walls, ce = {}, {}
        for mode in ("false", "true"):
            with tempfile.TemporaryDirectory() as d:
                t1 = time.perf_counter()
                subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "normgrow.cli",
                        "study",
                        *study,
                        f"teacher.cache={mode}",
                        "-o",
                        str(Path(d) / "s"),
                        "--no-progress",
                    ],
                    check=True,
                    capture_output=True,
                )
                walls[mode] = time.perf_counter() - t1
                with open(Path(d) / "s" / "results.csv") as f:
                    ce[mode] = {f"{r['arm']}-s{r['seed']}": float(r["val_ce"]) for r in csv.DictReader(f)}
        on, off = walls["false"], walls["true"]
        print(
            f"study {' '.join(study)}: online teacher {on:.0f} s; cache {off:.0f} s of training "
            f"(ratio cache/online {off / on:.3f}), {off + build_s:.0f} s with the build "
            f"(ratio {(off + build_s) / on:.3f})"
        )
        print("final val/ce (always online, full vocabulary): arm  trained-online  trained-on-cache  difference")
        for arm in ce["false"]:
            print(
                f"  {arm:18s} {ce['false'][arm]:.4f}  {ce['true'][arm]:.4f}  {ce['true'][arm] - ce['false'][arm]:+.4f}"
            )


if __name__ == "__main__":
    main()
