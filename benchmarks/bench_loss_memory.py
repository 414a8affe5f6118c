"""Peak memory of the distillation loss: chunked (normgrow.losses) vs naive full-vocabulary logits.

    python benchmarks/bench_loss_memory.py [--tokens 4096 --vocab 151936 --d-model 256 --chunk 256]

Each variant runs forward + backward of the soft-CE loss in its own subprocess; the peak resident
memory above the inputs is read from the kernel (ru_maxrss). Prints both and the ratio
chunked / naive (target <= 0.25). One (tokens x vocab) float32 tensor is printed for scale.
"""

import argparse
import json
import resource
import subprocess
import sys


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def child(kind: str, n: int, v: int, c: int, chunk: int) -> None:
    import torch
    import torch.nn.functional as F

    from normgrow.nn.losses import TeacherChunks, distill_loss

    torch.manual_seed(0)
    h = torch.randn(n, c, requires_grad=True)
    w = (torch.randn(v, c) * 0.02).requires_grad_()
    t = TeacherChunks(torch.randn(n, c), torch.randn(v, c) * 0.02)
    y = torch.randint(0, v, (n,))
    base = rss_mb()
    if kind == "chunked":
        loss = distill_loss(h, w, t, y, n_tokens=n, chunk=chunk)
    else:
        s_logp = F.log_softmax(h @ w.T, dim=-1)
        t_p = F.softmax(t.hidden @ t.weight.T, dim=-1)
        loss = -(t_p * s_logp).sum(-1).mean()
    loss.backward()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB → MiB on Linux
    print(json.dumps({"peak_above_inputs_mb": peak - base, "loss": loss.item()}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--chunk", type=int, default=256)  # distill.chunk_tokens' default
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a.child, a.tokens, a.vocab, a.d_model, a.chunk)
    res = {}
    for kind in ("chunked", "naive"):
        cmd = [
            sys.executable,
            __file__,
            "--child",
            kind,
            "--tokens",
            str(a.tokens),
            "--vocab",
            str(a.vocab),
            "--d-model",
            str(a.d_model),
            "--chunk",
            str(a.chunk),
        ]
        res[kind] = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    full = a.tokens * a.vocab * 4 / 2**20
    print(
        f"tokens={a.tokens} vocab={a.vocab} d_model={a.d_model} chunk={a.chunk}; "
        f"one (tokens x vocab) fp32 tensor = {full:,.0f} MiB"
    )
    for kind, r in res.items():
        print(f"{kind:>8}: peak {r['peak_above_inputs_mb']:8,.0f} MiB above inputs (loss {r['loss']:.6f})")
    print(
        f"ratio chunked / naive: {res['chunked']['peak_above_inputs_mb'] / res['naive']['peak_above_inputs_mb']:.3f}"
        "  (target <= 0.25)"
    )


if __name__ == "__main__":
    main()
