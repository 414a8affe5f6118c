"""The paper path's device figures in one short script (run by benchmarks/gpu_smoke.sh; < 5 min on one GPU).

    python benchmarks/gpu_smoke.py [--cpu] [--peak-tflops 989] [--steps 6]

Prints, at the paper's shapes on a CUDA device (scaled-down shapes with --cpu, or when no GPU is
present, so that the script is proven to execute anywhere):
  student step        the `paper` preset's student (9 × Qwen3-0.6B-shaped blocks, vocabulary 151,936,
                      sequences of 2,048) forward + backward + AdamW on the chunked distillation loss, bf16
                      autocast and torch.compile: tokens/s and MFU (6 · parameters · tokens/s over the peak)
  transformers Qwen3  the same shape and weights through transformers' Qwen3 trunk, with the same chunked
                      loss on its hidden states and the same optimizer, and the ratio student / transformers
  teacher forward     a Qwen3-8B-shaped model (random weights, bf16): tokens/s of its no-grad forward
  loss peak memory    the chunked loss at 4,096 tokens × 151,936 vocabulary: peak CUDA memory above inputs
Record the figures in docs/LOG.md with the device name printed first. On a GPU the figures are also kept in the
cache (`<cache>/hardware/gpu-smoke-<device>.json`): `normgrow plan` on that kind of GPU then uses the distillation
step they make (student step and teacher forward together) instead of an assumed utilization; elsewhere pass it
as `--tokens-per-hour`.
"""

import argparse
import contextlib
import statistics
import time

import torch

from normgrow.config import ModelConfig, load_config
from normgrow.data import cache_root
from normgrow.machine.hardware import matmul_peak, record_gpu_smoke
from normgrow.nn.losses import TeacherChunks, distill_loss
from normgrow.nn.model import Student, hf_config, parameters_of, to_hf_state_dict
from normgrow.teacher.load import KNOWN_SHAPES

CPU_STUDENT = dict(n_layer=2, d_model=64, n_head=4, n_kv_head=2, head_dim=16, d_ff=192, vocab_size=4096)
CPU_TEACHER = dict(n_layer=2, d_model=128, n_head=4, n_kv_head=2, head_dim=32, d_ff=384, vocab_size=4096)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, steps: int, device: torch.device) -> float:
    """Median seconds of fn() over `steps` after two warm-up calls (compilation, allocation)."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(steps):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def autocast(device: torch.device, on: bool):
    return torch.autocast(device.type, dtype=torch.bfloat16) if on else contextlib.nullcontext()


def student_steps(m: ModelConfig, batch: int, seq: int, device: torch.device, bf16: bool, compile_: bool, steps: int):
    """(normgrow tokens/s, transformers tokens/s) of a training step at this shape, same weights."""
    from transformers import Qwen3ForCausalLM

    torch.manual_seed(0)
    student = Student(m, max_seq_len=seq).to(device).train()
    hf = Qwen3ForCausalLM(hf_config(m, attn_implementation="sdpa")).to(device).train()
    hf.load_state_dict(to_hf_state_dict(student))
    idx = torch.randint(0, m.vocab_size, (batch, seq + 1), device=device)
    x, y = idx[:, :-1], idx[:, 1:]
    teacher = TeacherChunks(
        torch.randn(batch * seq, 64, device=device), torch.randn(m.vocab_size, 64, device=device) * 0.02
    )
    opt_s = torch.optim.AdamW(student.parameters(), lr=1e-4, fused=device.type == "cuda")
    opt_h = torch.optim.AdamW(hf.parameters(), lr=1e-4, fused=device.type == "cuda")
    s_fwd = torch.compile(student) if compile_ else student
    h_fwd = torch.compile(hf.model) if compile_ else hf.model

    def ours():
        with autocast(device, bf16):
            h = s_fwd(x, hidden_only=True).flatten(0, 1)
        distill_loss(
            h.float(), student.lm_head.weight, teacher, y.flatten(), n_tokens=batch * seq, chunk=512
        ).backward()
        opt_s.step()
        opt_s.zero_grad(set_to_none=True)

    def theirs():  # transformers' trunk, the same chunked distillation loss on its hidden states
        with autocast(device, bf16):
            h = h_fwd(input_ids=x).last_hidden_state.flatten(0, 1)
        distill_loss(h.float(), hf.lm_head.weight, teacher, y.flatten(), n_tokens=batch * seq, chunk=512).backward()
        opt_h.step()
        opt_h.zero_grad(set_to_none=True)

    tokens = batch * seq
    return tokens / timed(ours, steps, device), tokens / timed(theirs, steps, device)


def teacher_forward(shape: dict, batch: int, seq: int, device: torch.device, steps: int) -> float:
    from transformers import Qwen3ForCausalLM

    m = ModelConfig(**shape)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    with torch.device(device):
        model = Qwen3ForCausalLM(hf_config(m, attn_implementation="sdpa")).to(dtype).eval()
    idx = torch.randint(0, m.vocab_size, (batch, seq), device=device)

    @torch.no_grad()
    def fwd():
        model.model(input_ids=idx)  # hidden states: normgrow projects them chunk by chunk

    return batch * seq / timed(fwd, steps, device)


def loss_peak_mib(tokens: int, vocab: int, d: int, device: torch.device) -> str:
    if device.type != "cuda":
        return "n/a on the CPU (benchmarks/bench_loss_memory.py measures the resident peak there)"
    torch.manual_seed(0)
    h = torch.randn(tokens, d, device=device, requires_grad=True)
    w = (torch.randn(vocab, d, device=device) * 0.02).requires_grad_()
    t = TeacherChunks(torch.randn(tokens, d, device=device), torch.randn(vocab, d, device=device) * 0.02)
    y = torch.randint(0, vocab, (tokens,), device=device)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    distill_loss(h, w, t, y, n_tokens=tokens, chunk=512).backward()
    torch.cuda.synchronize()
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    return f"{peak:,.0f} MiB (one {tokens} × {vocab} float32 tensor: {tokens * vocab * 4 / 2**20:,.0f} MiB)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", action="store_true", help="scaled-down shapes on the CPU (also when no GPU is present)")
    ap.add_argument(
        "--peak-tflops", type=float, default=989.0, help="the device's dense bf16 peak (H100/H200 SXM: 989)"
    )
    ap.add_argument("--steps", type=int, default=6)
    a = ap.parse_args()
    gpu = torch.cuda.is_available() and not a.cpu
    device = torch.device("cuda" if gpu else "cpu")
    print(f"device: {torch.cuda.get_device_name() if gpu else 'CPU (scaled-down shapes)'}; torch {torch.__version__}")
    if gpu:
        m = load_config("paper").model
        m = ModelConfig(**{**m.__dict__, "vocab_size": 151936})
        batch, seq, teacher, t_batch = 2, 2048, KNOWN_SHAPES["Qwen/Qwen3-8B"], 2
    else:
        m, batch, seq, teacher, t_batch = ModelConfig(**CPU_STUDENT), 2, 128, CPU_TEACHER, 2
    ours, theirs = student_steps(m, batch, seq, device, bf16=gpu, compile_=gpu, steps=a.steps)
    n = parameters_of(m)
    mfu = 6 * n * ours / (a.peak_tflops * 1e12)
    peak = matmul_peak(torch.bfloat16 if gpu else torch.float32, device, n=8192 if gpu else 2048)
    print(
        f"student step ({m.n_layer} × d_model {m.d_model}, vocabulary {m.vocab_size:,}, {batch} × {seq}, "
        f"{'bf16 + compile' if gpu else 'float32 eager'}): {ours:,.0f} tokens/s = {ours * 3600:,.0f} per hour, "
        f"MFU {mfu:.1%} of {a.peak_tflops:g} TFLOP/s ({n / 1e6:,.1f}M parameters); "
        f"{6 * n * ours / peak:.1%} of the {'bf16 8192³' if gpu else 'float32 2048³'} matmul measured in this run "
        f"({peak / 1e12:,.1f} TFLOP/s)"
    )
    print(
        f"transformers Qwen3, same shape and weights: {theirs:,.0f} tokens/s; ratio normgrow / transformers "
        f"{ours / theirs:.2f}"
    )
    tf = teacher_forward(teacher, t_batch, seq, device, a.steps)
    print(f"teacher forward ({teacher['n_layer']} × d_model {teacher['d_model']}, random weights): {tf:,.0f} tokens/s")
    if gpu:  # `normgrow plan` on this kind of GPU reads it (hardware.recorded_gpu_rate)
        where = record_gpu_smoke(
            cache_root(load_config("default").data),
            torch.cuda.get_device_name(),
            ours,
            tf,
            {"student": {"n_layer": m.n_layer, "d_model": m.d_model, "batch": batch, "seq": seq}, "teacher": teacher},
        )
        print(
            f"recorded for `normgrow plan`: {where} (distillation step with the teacher online: "
            f"{3600 / (1 / ours + 1 / tf):,.0f} tokens per hour)"
        )
    print(f"chunked loss peak memory (4,096 tokens × 151,936 vocabulary): {loss_peak_mib(4096, 151936, 1024, device)}")


if __name__ == "__main__":
    main()
