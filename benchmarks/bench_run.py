"""Training-step throughput of a distillation run: the default path against float32 eager.

    python benchmarks/bench_run.py [CONFIG] [key=value …] [--steps 8] [--variant 'key=value …' …]

Builds (or reuses) the config's inputs exactly as a run does (pipeline.build_inputs) and times the
training loop's own `train_step` — teacher forward + student forward/backward with the chunked
loss + AdamW — on the same batches, in this process, for:

  default          the config as given (`train.dtype` / `teacher.dtype` auto-resolved for this
                   machine, `train.compile` as configured)
  float32 eager    the same with train.dtype=float32, teacher.dtype=float32, train.compile=false
  each --variant   the config plus those overrides (e.g. --variant 'train.compile=true')

Prints tokens/s of each, its ratio to float32 eager, the resolved dtype, the teacher forward's
share of the step (timed on its own), and the step's achieved FLOP/s against a float32 (and, where
bfloat16 is native or used, bfloat16) 2048³ matmul timed in the same run, and against the student's own
matmuls at this shape (own_shape_matmuls: what its matrix work could reach at best). Steps
alternate between the variants so they share the machine's noise; the first two steps of each (allocation, compilation) are not timed, and a
compiled variant's compile time is printed separately. `train.threads` is applied as in a run.
The machine (CPU model, bf16 flags) is printed with the figures: write it next to them in the LOG.
"""

import argparse
import shlex
import statistics
import time

import torch

from normgrow.config import load_config, resolved_head_dim
from normgrow.data import BatchIterator
from normgrow.machine.costs import teacher_flops_per_token
from normgrow.machine.hardware import BF16_FLAGS, cpu_info, matmul_peak, native_bf16
from normgrow.run.pipeline import build_inputs
from normgrow.train.growth import set_trainable
from normgrow.train.loop import build_student
from normgrow.train.stages import plan_stages, step_cost, tokens_per_step
from normgrow.train.step import build_optimizer, train_step, wrap_for_training

FP32_EAGER = ["train.dtype=float32", "teacher.dtype=float32", "train.compile=false"]


class Variant:
    """One way of running the step: its inputs, student, optimizer and timings."""

    def __init__(self, name: str, preset: str, overrides: list[str]):
        cfg = load_config(preset, overrides)
        if cfg.train.threads:
            torch.set_num_threads(cfg.train.threads)
        self.name = name
        self.inputs = build_inputs(cfg, log=lambda *_: None)
        self.cfg, info = self.inputs.cfg, self.inputs.info
        plan = plan_stages(self.cfg)[-1]  # the full-depth stage
        torch.manual_seed(0)
        self.model = build_student(self.inputs, plan)
        set_trainable(self.model, plan)
        self.opt = build_optimizer(self.model, self.cfg, info.device)
        self.step_fn = wrap_for_training(self.model, info, self.cfg)
        self.device = info.device
        self.times: list[float] = []
        self.teacher_times: list[float] = []
        self.first: list[float] = []

    def step_flops(self) -> float:
        """FLOPs of one train_step: the student's (stages.step_cost) and an online teacher's forward."""
        plan = plan_stages(self.cfg)[-1]
        teacher = teacher_flops_per_token(self.cfg) if self.inputs.cache is None else 0
        return step_cost(self.cfg, plan)["flops"] + teacher * tokens_per_step(self.cfg)

    def step(self, batch, timed: bool) -> None:
        x = batch.tokens[:, :-1].to(self.device)
        t0 = time.perf_counter()
        self.inputs.teacher.chunks(x)
        t1 = time.perf_counter()
        train_step(
            self.model, self.step_fn, self.opt, batch, self.cfg, self.inputs.info, self.inputs.train_teacher, lr=1e-4
        )
        t2 = time.perf_counter()
        if timed:
            self.teacher_times.append(t1 - t0)
            self.times.append(t2 - t1)
        else:
            self.first.append(t2 - t1)


def own_shape_matmuls(cfg, dtype: torch.dtype, reps: int = 5) -> float:
    """FLOP/s of the student's own matmuls at this step's shape — every projection of a block and the LM head at
    M = batch × sequence tokens, in the three orientations a training step runs them (forward, input gradient,
    weight gradient) — timed one by one (best of `reps`), total FLOPs over total time: the rate the step's
    matrix work could reach at best, against which the 2048³ peak overstates what a small shape can do."""
    m = cfg.model
    M, hd = cfg.train.batch_size * cfg.data.seq_len, resolved_head_dim(m)
    dims = [
        (m.d_model, m.n_head * hd),
        (m.d_model, m.n_kv_head * hd),
        (m.d_model, m.n_kv_head * hd),
        (m.n_head * hd, m.d_model),
        (m.d_model, m.d_ff),
        (m.d_model, m.d_ff),
        (m.d_ff, m.d_model),
    ]
    gen = torch.Generator().manual_seed(0)
    flops = seconds = 0.0
    for (k, n), count in [*((d, m.n_layer) for d in dims), ((m.d_model, m.vocab_size), 1)]:
        x, w, g = (torch.randn(*s, generator=gen).to(dtype) for s in ((M, k), (k, n), (M, n)))
        for a, b in ((x, w), (g, w.T), (x.T, g)):
            best = float("inf")
            for _ in range(reps + 1):
                t0 = time.perf_counter()
                a @ b
                best = min(best, time.perf_counter() - t0)
            flops += 2 * M * k * n * count
            seconds += best * count
    return flops / seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", nargs="?", default="default")
    ap.add_argument("overrides", nargs="*")
    ap.add_argument("--steps", type=int, default=8, help="timed steps per variant (after 2 untimed)")
    ap.add_argument("--variant", action="append", default=[], help="extra overrides for one more variant")
    args = ap.parse_args()
    if "=" in args.config:
        args.overrides, args.config = [args.config, *args.overrides], "default"
    variants = [
        Variant("default", args.config, args.overrides),
        Variant("float32 eager", args.config, [*args.overrides, *FP32_EAGER]),
    ]
    variants += [Variant(v, args.config, [*args.overrides, *shlex.split(v)]) for v in args.variant]
    ref = variants[0]
    batches = BatchIterator(ref.inputs.prep.train, ref.cfg.data.seq_len, ref.cfg.train.batch_size, ref.cfg.seed)
    for i in range(2 + args.steps):
        batch = next(batches)
        for v in variants:
            v.step(batch, timed=i >= 2)

    info, m = cpu_info(), ref.cfg.model
    flags = sorted(info.flags & (BF16_FLAGS | {"avx2", "avx512f"}))
    print(
        f"machine: {info.model}; flags {' '.join(flags) or 'none of avx2/avx512f/bf16'}; torch {torch.__version__}, "
        f"threads {torch.get_num_threads()}"
    )
    print(
        f"{args.config} {' '.join(args.overrides)}: student n_layer={m.n_layer} d_model={m.d_model}, teacher "
        f"{ref.inputs.teacher.report['class']} ({ref.inputs.teacher.report['parameters']:,} params), batch "
        f"{ref.cfg.train.batch_size}x{ref.cfg.data.seq_len}, vocab {m.vocab_size}"
    )
    n = ref.cfg.train.batch_size * ref.cfg.data.seq_len
    peaks = {"float32": matmul_peak(torch.float32)}
    if native_bf16(ref.device) or any(v.cfg.train.dtype == "bfloat16" for v in variants):
        peaks["bfloat16"] = matmul_peak(torch.bfloat16)
    print(
        f"matmul peak in this run (2048³, {torch.get_num_threads()} thread(s)): "
        + ", ".join(f"{k} {p / 1e9:,.1f} GFLOP/s" for k, p in peaks.items())
        + ("" if native_bf16(ref.device) or "bfloat16" not in peaks else " (bfloat16 emulated here)")
    )
    own = own_shape_matmuls(ref.cfg, torch.float32)
    print(
        f"the student's own matmuls at this shape (M = {n:,} tokens; each projection and the head, forward and both "
        f"gradients): float32 {own / 1e9:,.1f} GFLOP/s = {own / peaks['float32']:.0%} of the float32 peak — the "
        "most a step's matrix work reaches here"
    )
    base = statistics.median(variants[1].times)
    for v in variants:
        step = statistics.median(v.times)
        compiled = f", first steps {sum(v.first):.1f} s (compile)" if v.cfg.train.compile else ""
        print(
            f"{v.name:>16}: {n / step:8,.0f} tokens/s  ×{base / step:.2f} vs float32 eager  "
            f"(dtype {v.cfg.train.dtype}, compile {v.cfg.train.compile}; teacher forward "
            f"{statistics.median(v.teacher_times) / step:.0%} of the step{compiled})"
        )
        flops = v.step_flops()
        print(
            f"{'':>16}  achieved {flops / step / 1e9:,.1f} GFLOP/s = "
            + ", ".join(f"{flops / step / p:.0%} of the {k} peak" for k, p in peaks.items())
            + f" ({flops / 1e9:,.2f} GFLOP per step: the student's training FLOPs"
            + (" + the teacher's forward)" if v.inputs.cache is None and v.inputs.teacher is not None else ")")
        )


if __name__ == "__main__":
    main()
