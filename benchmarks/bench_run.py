"""Training-step throughput of a distillation run with the online teacher, and the teacher's share.

    python benchmarks/bench_run.py [CONFIG] [key=value …]     (default: the `default` preset)

Builds (or reuses) the config's inputs exactly as a run does (pipeline.build_inputs), then times,
in this process and on the same batches, the training loop's own `train_step`: (a) the full
distillation step — teacher forward + student forward/backward with the chunked loss + AdamW —
and (b) the same step with plain next-token loss and no teacher (the reference). Prints tokens/s
of both, their ratio, and the share of step time in the teacher forward (timed on its own).
"""

import dataclasses
import statistics
import sys
import time

import torch

from normgrow.config import load_config
from normgrow.curriculum import plan_stages
from normgrow.data import BatchIterator
from normgrow.pipeline import build_inputs
from normgrow.train import build_optimizer, build_student, set_trainable, train_step, wrap_for_training


def main() -> None:
    args = sys.argv[1:]
    preset = args[0] if args and "=" not in args[0] else "default"
    cfg = load_config(preset, [a for a in args if "=" in a])
    inputs = build_inputs(cfg, log=lambda *_: None)
    cfg, info = inputs.cfg, inputs.info
    no_teacher = dataclasses.replace(inputs, teacher=None, cache=None)
    plan = plan_stages(cfg)[-1]  # the full-depth stage
    model = build_student(inputs, plan)
    set_trainable(model, plan)
    opt = build_optimizer(model, cfg, info.device)
    step_fn = wrap_for_training(model, info, cfg.train.compile)
    batches = BatchIterator(inputs.prep.train, cfg.data.seq_len, cfg.train.batch_size, cfg.seed)
    n = cfg.train.batch_size * cfg.data.seq_len
    t_teacher, t_step, t_plain = [], [], []
    for i in range(8):
        batch = next(batches)
        x = batch.tokens[:, :-1].to(info.device)
        t0 = time.perf_counter()
        inputs.teacher.chunks(x)
        t1 = time.perf_counter()
        train_step(model, step_fn, opt, batch, inputs, lr=1e-4)
        t2 = time.perf_counter()
        train_step(model, step_fn, opt, batch, no_teacher, lr=1e-4)
        t3 = time.perf_counter()
        if i >= 2:  # warm-up steps excluded
            t_teacher.append(t1 - t0)
            t_step.append(t2 - t1)
            t_plain.append(t3 - t2)
    step, plain, tea = statistics.median(t_step), statistics.median(t_plain), statistics.median(t_teacher)
    m = cfg.model
    print(f"{preset}: student n_layer={plan.n_layer} d_model={m.d_model}, teacher {inputs.teacher.report['class']} "
          f"({inputs.teacher.report['parameters']:,} params), batch {cfg.train.batch_size}x{cfg.data.seq_len}, "
          f"vocab {m.vocab_size}, threads {torch.get_num_threads()}")
    print(f"distillation step: {n / step:8,.0f} tokens/s   (teacher forward {tea / step:.1%} of the step)")
    print(f"no-teacher step:   {n / plain:8,.0f} tokens/s   (reference, same student and batches)")
    print(f"ratio distillation / no-teacher: {plain / step:.3f}")


if __name__ == "__main__":
    main()
