"""Student forward+backward throughput against transformers' Qwen3ForCausalLM of the same shape.

    python benchmarks/bench_model.py [--n-layer 9 --d-model 256 --seq-len 256 --batch 8 --vocab 8192]
                                     [--modes fp32-eager,bf16-eager,bf16-compiled]

Both models are built in this process with identical weights (the pre-norm student *is* a Qwen3)
and timed alternately to share the machine's noise, in each mode: float32 eager, bfloat16 autocast
eager, bfloat16 autocast with torch.compile on both models (and float32 compiled; `*-blocks`: each block
compiled on its own, what `train.compile` does). Prints tokens/s of each, the ratio student / transformers
per mode (target ≥ 1.3 with compile on both), the post-norm student for reference, and each model's achieved
FLOP/s (6·N per token + attention) against a float32 (and bfloat16) 2048³ matmul timed in the same run. bfloat16 modes are skipped, with the reason, on a CPU without
native bfloat16 (no AMX / AVX-512-BF16: emulated bfloat16 is ~25× slower than float32 there and
says nothing about either model); `--modes` runs them anyway.
"""

import argparse
import contextlib
import dataclasses
import statistics
import time

import torch

from normgrow.config import ModelConfig
from normgrow.machine.hardware import BF16_FLAGS, cpu_info, matmul_peak, native_bf16
from normgrow.nn.model import Student, hf_config, to_hf_state_dict
from normgrow.train.stages import flops_per_token

MODES = {  # name: (autocast dtype or None, compile: False, "model" (whole model) or "blocks" (each block))
    "fp32-eager": (None, False),
    "fp32-compiled": (None, "model"),
    "fp32-blocks": (None, "blocks"),
    "bf16-eager": (torch.bfloat16, False),
    "bf16-compiled": (torch.bfloat16, "model"),
    "bf16-blocks": (torch.bfloat16, "blocks"),
}


def step_time(model, idx, hf: bool, dtype) -> float:
    ctx = torch.autocast("cpu", dtype=dtype) if dtype is not None else contextlib.nullcontext()
    t0 = time.perf_counter()
    with ctx:
        out = model(input_ids=idx).logits if hf else model(idx)
    out.float().pow(2).mean().backward()
    return time.perf_counter() - t0


def default_modes() -> tuple[list[str], str]:
    info = cpu_info()
    if info.flags & BF16_FLAGS:
        return ["fp32-eager", "bf16-eager", "bf16-compiled"], ""
    return ["fp32-eager", "fp32-compiled"], (
        f"bf16 modes skipped: {info.model} has no amx_bf16/avx512_bf16 (bfloat16 "
        "is emulated there); --modes bf16-eager,bf16-compiled runs them anyway"
    )


def run_mode(mode: str, models: dict, idx: torch.Tensor, args) -> dict[str, float]:
    """Median seconds per fwd+bwd step of every model in this mode (compiled copies for compiled modes)."""
    dtype, compiled = MODES[mode]
    if compiled == "blocks":  # normgrow's train.compile (nn/compiling.py); transformers' decoder layers the same way
        for m, is_hf in models.values():
            for layer in m.model.layers if is_hf else m.layers:
                if getattr(layer, "_compiled_call_impl", None) is None:
                    layer.compile()
    todo = {k: ((torch.compile(m) if compiled == "model" else m), is_hf) for k, (m, is_hf) in models.items()}
    times: dict[str, list[float]] = {k: [] for k in todo}
    first = {k: 0.0 for k in todo}
    for i in range(args.warmup + args.iters):
        for name, (m, is_hf) in todo.items():
            dt = step_time(m, idx, is_hf, dtype)
            models[name][0].zero_grad(set_to_none=True)
            if i >= args.warmup:
                times[name].append(dt)
            else:
                first[name] += dt
    if compiled == "blocks":
        for m, is_hf in models.values():  # back to eager for the modes after this one
            for layer in m.model.layers if is_hf else m.layers:
                layer._compiled_call_impl = None
    if compiled:
        print(f"  {mode}: warm-up incl. compile " + ", ".join(f"{k} {v:.0f} s" for k, v in first.items()))
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-layer", type=int, default=9)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-kv-head", type=int, default=2)
    ap.add_argument("--d-ff", type=int, default=768)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--modes", default=None, help=f"comma-separated, of {', '.join(MODES)}")
    args = ap.parse_args()
    modes, skipped = (args.modes.split(","), "") if args.modes else default_modes()
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        ap.error(f"--modes: unknown {', '.join(unknown)} (choose from {', '.join(MODES)})")

    from transformers import Qwen3ForCausalLM

    cfg = ModelConfig(
        n_layer=args.n_layer,
        d_model=args.d_model,
        n_head=args.n_head,
        n_kv_head=args.n_kv_head,
        d_ff=args.d_ff,
        vocab_size=args.vocab,
    )
    torch.manual_seed(0)
    student = Student(cfg).train()
    post = Student(dataclasses.replace(cfg, norm="post")).train()
    hf = Qwen3ForCausalLM(hf_config(cfg, attn_implementation="sdpa")).train()
    hf.load_state_dict(to_hf_state_dict(student))
    idx = torch.randint(0, args.vocab, (args.batch, args.seq_len))
    models = {"normgrow pre": (student, False), "normgrow post": (post, False), "transformers Qwen3": (hf, True)}
    info = cpu_info()
    print(
        f"shape: n_layer={args.n_layer} d_model={args.d_model} seq_len={args.seq_len} batch={args.batch} "
        f"vocab={args.vocab}; torch {torch.__version__}, threads {torch.get_num_threads()}; machine {info.model}, "
        f"flags {' '.join(sorted(info.flags & (BF16_FLAGS | {'avx2', 'avx512f'}))) or '-'}"
    )
    if skipped:
        print(skipped)
    tokens = args.batch * args.seq_len
    flops = flops_per_token(cfg, tuple(["pre"] * cfg.n_layer), tuple(range(cfg.n_layer)), args.seq_len) * tokens
    peaks = {None: matmul_peak(torch.float32)}
    if any(MODES[m][0] is not None for m in modes):
        peaks[torch.bfloat16] = matmul_peak(torch.bfloat16)
    print(
        f"matmul peak in this run (2048³, {torch.get_num_threads()} thread(s)): float32 {peaks[None] / 1e9:,.1f} GFLOP/s"
        + (
            f", bfloat16 {peaks[torch.bfloat16] / 1e9:,.1f} GFLOP/s"
            f"{'' if native_bf16() else ' (emulated: not a peak of this CPU)'}"
            if torch.bfloat16 in peaks
            else ""
        )
        + f"; a step of this shape is {flops / 1e9:,.2f} GFLOP (6·N per token + attention)"
    )
    for mode in modes:
        med = run_mode(mode, models, idx, args)
        ref = tokens / med["transformers Qwen3"]
        cells = "  ".join(f"{k} {tokens / v:8,.0f}" for k, v in med.items())
        print(f"{mode:>14}: tokens/s (fwd+bwd, median of {args.iters})  {cells}")
        print(
            f"{'':>14}  ratio normgrow pre / transformers {tokens / med['normgrow pre'] / ref:.3f}, "
            f"post / transformers {tokens / med['normgrow post'] / ref:.3f}  (target >= 1.3 compiled)"
        )
        peak = peaks[MODES[mode][0]]
        print(
            f"{'':>14}  achieved "
            + ", ".join(f"{k} {flops / v / 1e9:,.1f} GFLOP/s = {flops / v / peak:.0%}" for k, v in med.items())
            + f" of the {'bfloat16' if MODES[mode][0] else 'float32'} matmul peak"
        )


if __name__ == "__main__":
    main()
