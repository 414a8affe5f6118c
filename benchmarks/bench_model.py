"""Student forward+backward throughput against transformers' Qwen3ForCausalLM of the same shape.

    python benchmarks/bench_model.py [--n-layer 9 --d-model 256 --seq-len 256 --batch 8 --vocab 8192]

Both models are built in this process with identical weights (the pre-norm student *is* a Qwen3),
timed alternately to share the machine's noise, in float32 eager mode. Prints tokens/s of each and
the ratio student / transformers (target ≥ 1.0), plus the post-norm student for reference.
"""

import argparse
import dataclasses
import statistics
import time

import torch

from normgrow.config import ModelConfig
from normgrow.model import Student, hf_config, to_hf_state_dict


def step_time(model, idx, hf: bool) -> float:
    t0 = time.perf_counter()
    out = model(input_ids=idx).logits if hf else model(idx)
    out.float().pow(2).mean().backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - t0


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
    args = ap.parse_args()

    from transformers import Qwen3ForCausalLM

    cfg = ModelConfig(n_layer=args.n_layer, d_model=args.d_model, n_head=args.n_head, n_kv_head=args.n_kv_head,
                      d_ff=args.d_ff, vocab_size=args.vocab)
    torch.manual_seed(0)
    student = Student(cfg).train()
    post = Student(dataclasses.replace(cfg, norm="post")).train()
    hf = Qwen3ForCausalLM(hf_config(cfg, attn_implementation="sdpa")).train()
    hf.load_state_dict(to_hf_state_dict(student))
    idx = torch.randint(0, args.vocab, (args.batch, args.seq_len))
    models = {"normgrow pre": (student, False), "normgrow post": (post, False), "transformers Qwen3": (hf, True)}
    times: dict[str, list[float]] = {k: [] for k in models}
    for i in range(args.warmup + args.iters):
        for name, (m, is_hf) in models.items():
            dt = step_time(m, idx, is_hf)
            if i >= args.warmup:
                times[name].append(dt)
    tokens = args.batch * args.seq_len
    print(f"shape: n_layer={args.n_layer} d_model={args.d_model} seq_len={args.seq_len} batch={args.batch} "
          f"vocab={args.vocab} fp32 eager, torch {torch.__version__}, threads {torch.get_num_threads()}")
    tps = {k: tokens / statistics.median(v) for k, v in times.items()}
    for k, v in tps.items():
        print(f"{k:>20}: {v:10.0f} tokens/s (fwd+bwd, median of {args.iters})")
    ref = tps["transformers Qwen3"]
    print(f"ratio normgrow pre / transformers:  {tps['normgrow pre'] / ref:.3f}  (target >= 1.0)")
    print(f"ratio normgrow post / transformers: {tps['normgrow post'] / ref:.3f}")


if __name__ == "__main__":
    main()
