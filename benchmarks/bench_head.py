"""Where a distillation step's time goes when the vocabulary is large: the student's blocks vs its LM head and loss.

    python benchmarks/bench_head.py [CONFIG] [key=value …]        (default: the `real` preset, V = 49,152)

One training step of the preset's student (its batch, sequence length, autocast dtype) on random tokens, timed in
parts, each the median of five after a warm-up, all in this process one after the other:
- step:    embeddings and blocks forward, the chunked distillation loss over the full vocabulary (losses.distill_loss,
           against a sampled teacher of teacher.cache_samples draws, what a sampled cache feeds), backward, AdamW;
- blocks:  the same without the head: embeddings and blocks forward and backward (a loss on the hidden states);
- head:    the LM head and loss alone, forward and backward, on fixed hidden states;
- head_V': the same over the V' most frequent vocabulary rows (V' = --rows, the corpus's distinct training tokens
           by default), what a vocabulary restricted to the corpus would cost (timing only: no such option exists);
- teacher: the teacher's forward over the same batch, float32 and bfloat16 (what an online teacher adds per step).
Prints milliseconds per step, the head's share of the step, and the ratios.
"""

import dataclasses
import statistics
import sys
import time

import numpy as np
import torch

from normgrow.config import load_config
from normgrow.data import cache_root, prepare
from normgrow.machine.dtypes import resolved
from normgrow.nn.losses import SampledTeacher, distill_loss
from normgrow.nn.model import Student
from normgrow.teacher.load import load_teacher


def timed(fn, repeats: int = 5) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    args = sys.argv[1:]
    preset = args[0] if args and "=" not in args[0] else "real"
    cfg = load_config(preset, [a for a in args if "=" in a])
    cfg = resolved(cfg, torch.device("cpu"), cache_root(cfg.data))  # `auto` dtypes as a run here resolves them
    prep = prepare(cfg, teacher_path=cfg.teacher.path, log=lambda *_: None)
    V, T, B = prep.vocab_size, cfg.data.seq_len, cfg.train.batch_size
    counts = np.bincount(np.asarray(prep.train), minlength=V)
    rows = int((counts > 0).sum()) + 1  # the corpus's distinct tokens and one tail bucket
    dtype = torch.bfloat16 if cfg.train.dtype == "bfloat16" else torch.float32
    torch.manual_seed(0)
    student = Student(dataclasses.replace(cfg.model, vocab_size=V))
    opt = torch.optim.AdamW(student.parameters(), lr=1e-3)
    x = torch.randint(0, V, (B, T))
    y = torch.randint(0, V, (B * T,))
    n = cfg.teacher.cache_samples
    draws = SampledTeacher(torch.randint(0, V, (B * T, n)), torch.full((B * T, n), 1.0 / n), torch.zeros(B * T))
    chunk = cfg.distill.chunk_tokens

    def hidden():
        with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
            return student(x, hidden_only=True).reshape(B * T, -1)

    def step():
        loss = distill_loss(hidden(), student.lm_head.weight, draws, y, n_tokens=B * T, chunk=chunk)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    def blocks():
        hidden().float().square().mean().backward()
        student.zero_grad(set_to_none=True)

    h = hidden().detach().float().requires_grad_()
    w = student.lm_head.weight.detach().clone().requires_grad_()

    def head(r: int):
        def run():
            ids = draws.ids.remainder(r)
            loss = distill_loss(h, w[:r], SampledTeacher(ids, draws.weights, draws.entropy), y % r, B * T, chunk=chunk)
            loss.backward()
            h.grad = w.grad = None

        return run

    ms = {"step": timed(step), "blocks": timed(blocks), "head": timed(head(V)), f"head_{rows}": timed(head(rows))}
    for dt in ("float32", "bfloat16"):
        teacher = load_teacher(cfg.teacher.path, dt, torch.device("cpu"), V, V, seq_len=T)  # its dtype: both
        ms[f"teacher_{dt}"] = timed(lambda t=teacher: t.chunks(x), repeats=3)
        del teacher
    print(
        f"{preset}: V = {V:,}, batch {B} × {T} = {B * T:,} tokens, d_model {cfg.model.d_model}, "
        f"{cfg.model.n_layer} blocks, student {cfg.train.dtype} (resolved), {torch.get_num_threads()} threads"
    )
    for k, v in ms.items():
        print(f"  {k:18s} {v * 1e3:9.1f} ms/step  {B * T / v:9,.0f} tokens/s")
    print(
        f"head share of the step: {ms['head'] / ms['step']:.2f}; blocks share: {ms['blocks'] / ms['step']:.2f}; "
        f"head over {rows:,} rows / full head: {ms[f'head_{rows}'] / ms['head']:.2f}; "
        f"step with that head / step: {(ms['step'] - ms['head'] + ms[f'head_{rows}']) / ms['step']:.2f}; "
        f"teacher bfloat16 / float32 forward time: {ms['teacher_bfloat16'] / ms['teacher_float32']:.2f}"
    )


if __name__ == "__main__":
    main()
