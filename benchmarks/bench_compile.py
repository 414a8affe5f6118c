"""Compiled blocks (`train.compile`) against eager: compile time per process, cold and warm, and the step ratio.

    python benchmarks/bench_compile.py [STUDY] [key=value …] [--processes 3]

For the study's first arm of each placement (default: the `default` study, the shape its runs train), each of
`--processes` fresh interpreters in turn, all sharing one new, empty compile cache (TORCHINDUCTOR_CACHE_DIR):
times the training step (normgrow.speed.time_steps: the student's forward, the chunked loss against a teacher of
the run's form, backward, AdamW; an online teacher's forward) at full depth, compiled and eager. The first
process compiles from an empty cache (cold); the others load what it wrote (warm). Prints per process the
first two steps' overhead over two steady steps (the compile), the steady step both ways and their ratio, and
what that means for one run of the study: the steps a run must take before compiling pays back.
One thread per process unless `train.threads` says otherwise; nothing else should run meanwhile.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, sys, torch
from normgrow.config import load_config
from normgrow.machine.dtypes import resolved
from normgrow.machine.speed import time_steps
from normgrow.data import cache_root
from normgrow.parallel.dist import pick_device
import dataclasses
from normgrow.machine.costs import with_vocab
cfg = with_vocab(load_config(sys.argv[1], json.loads(sys.argv[2])))
torch.set_num_threads(cfg.train.threads or 1)
device = pick_device(cfg.train.device)
cfg = resolved(cfg, device, cache_root(cfg.data))
on = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, compile=True))
off = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, compile=False))
c, e = time_steps(on, cfg.model.n_layer, device), time_steps(off, cfg.model.n_layer, device)
print(json.dumps({"compiled": c, "eager": e, "dtype": cfg.train.dtype}))
"""


def arm_configs(study_name: str, overrides: list[str]) -> list[tuple[str, list[str]]]:
    """(arm, the run overrides its job resolves to) for the first arm of each placement set."""
    from normgrow.machine.speed import full_placements
    from normgrow.study.config import load_study
    from normgrow.study.jobs import plan_jobs

    study = load_study(study_name, overrides)
    seen, out = set(), []
    with tempfile.TemporaryDirectory() as tmp:
        for job in plan_jobs(study, Path(tmp)):
            key = tuple(sorted(set(full_placements(job.cfg))))
            if key not in seen:
                seen.add(key)
                out.append((job.name, job.cfg))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("study", nargs="?", default="default")
    ap.add_argument("overrides", nargs="*")
    ap.add_argument("--processes", type=int, default=3, help="fresh interpreters per arm (the first one cold)")
    args = ap.parse_args()
    from normgrow.config import to_yaml
    from normgrow.machine.hardware import cpu_info
    from normgrow.train.stages import plan_stages

    print(f"machine: {cpu_info().model}; {args.study} {' '.join(args.overrides)}")
    for arm, cfg in arm_configs(args.study, args.overrides):
        with tempfile.TemporaryDirectory() as cache:
            cfg_path = os.path.join(cache, "run.yaml")
            with open(cfg_path, "w") as f:
                f.write(to_yaml(cfg))
            env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": os.path.join(cache, "compile"), "OMP_NUM_THREADS": "1"}
            steps = sum(p.steps for p in plan_stages(cfg))
            m = cfg.model
            print(
                f"{arm}: {m.n_layer} × d_model {m.d_model}, batch {cfg.train.batch_size}x{cfg.data.seq_len}, "
                f"{steps} steps per run"
            )
            for i in range(args.processes):
                out = subprocess.run(
                    [sys.executable, "-c", CHILD, cfg_path, "[]"], env=env, capture_output=True, text=True, check=True
                )
                r = json.loads(out.stdout.strip().splitlines()[-1])
                c, e = r["compiled"], r["eager"]
                compile_s = c["first_s"] - 2 * c["step_s"]
                saved = e["step_s"] - c["step_s"]
                pays = f"pays back after {compile_s / saved:,.0f} steps" if saved > 0 else "never pays back"
                print(
                    f"  process {i + 1} ({'cold' if i == 0 else 'warm'} cache, {r['dtype']}): compile {compile_s:5.1f} s; "
                    f"step eager {e['step_s'] * 1e3:6.1f} ms, compiled {c['step_s'] * 1e3:6.1f} ms "
                    f"(×{e['step_s'] / c['step_s']:.2f}); {pays}; a run of {steps} steps: "
                    f"{steps * e['step_s']:.1f} s eager vs {compile_s + steps * c['step_s']:.1f} s compiled"
                )


if __name__ == "__main__":
    main()
