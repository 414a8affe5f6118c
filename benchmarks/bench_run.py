"""Training-step throughput of a distillation run with the online teacher, and the teacher's share.

    python benchmarks/bench_run.py [CONFIG] [key=value …]     (default: the `default` preset)

Builds (or reuses) the config's teacher and token shards, then times, in this process and on the
same batches: (a) the full distillation step — teacher forward + student forward/backward with the
chunked loss + AdamW — and (b) the same student step with plain next-token loss and no teacher
(the reference). Prints tokens/s of both, their ratio, and the share of step time in the teacher.
"""

import statistics
import sys
import time

import torch

from normgrow.config import load_config
from normgrow.data import BatchIterator, prepare
from normgrow.losses import distill_loss
from normgrow.model import Student
from normgrow.teacher import load_teacher, resolve_teacher_path


def main() -> None:
    args = sys.argv[1:]
    preset = args[0] if args and "=" not in args[0] else "default"
    cfg = load_config(preset, [a for a in args if "=" in a])
    path = resolve_teacher_path(cfg)
    prep = prepare(cfg, teacher_path=path, log=lambda *_: None)
    V = prep.vocab_size
    teacher = load_teacher(path, cfg.teacher.dtype, torch.device("cpu"), V, V)
    import dataclasses

    mcfg = dataclasses.replace(cfg.model, vocab_size=V)
    model = Student(mcfg, max_seq_len=cfg.data.seq_len)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    batches = BatchIterator(prep.train, cfg.data.seq_len, cfg.train.batch_size, cfg.seed)
    n = cfg.train.batch_size * cfg.data.seq_len
    def student_step(x, y, chunks) -> None:  # forward, chunked loss (chunks None: next-token), backward, AdamW
        h = model(x, hidden_only=True)
        distill_loss(h.reshape(n, -1), model.lm_head.weight, chunks, y, n_global=n,
                     chunk=cfg.distill.chunk_tokens).backward()
        opt.step()
        opt.zero_grad()

    t_teacher, t_step, t_plain = [], [], []
    for i in range(8):
        b = next(batches)
        x, y = b[:, :-1], b[:, 1:].reshape(-1)
        t0 = time.perf_counter()
        chunks = teacher.chunks(x)
        t1 = time.perf_counter()
        student_step(x, y, chunks)
        t2 = time.perf_counter()
        student_step(x, y, None)
        t3 = time.perf_counter()
        if i >= 2:  # warm-up steps excluded
            t_teacher.append(t1 - t0)
            t_step.append(t2 - t0)
            t_plain.append(t3 - t2)
    step, plain, tea = statistics.median(t_step), statistics.median(t_plain), statistics.median(t_teacher)
    print(f"{preset}: student n_layer={mcfg.n_layer} d_model={mcfg.d_model}, teacher {teacher.report['class']} "
          f"({teacher.report['parameters']:,} params), batch {cfg.train.batch_size}x{cfg.data.seq_len}, vocab {V}, "
          f"threads {torch.get_num_threads()}")
    print(f"distillation step: {n / step:8,.0f} tokens/s   (teacher forward {tea / step:.1%} of the step)")
    print(f"no-teacher step:   {n / plain:8,.0f} tokens/s   (reference, same student and batches)")
    print(f"ratio distillation / no-teacher: {plain / step:.3f}")


if __name__ == "__main__":
    main()
