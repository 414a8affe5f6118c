"""Boundary diagnostics: pure observers of a student on the fixed probe batch (DESIGN.md §3).

`diagnose(model, probe)` returns a plain dict and never changes training state (no parameter,
buffer, RNG or data-iterator change; train/eval mode is restored). Per record:

- `residual_rms[i]`, `max_abs[i]` for i = 0 … n_layer: the residual stream entering block 0
  (the embeddings, i = 0) and leaving block i−1 (i ≥ 1), per token class — `all`, `bos`,
  `whitespace`, `punct`, `content`, `structural` (= bos ∪ whitespace ∪ punct) and `first`
  (position 0 of every sequence, where attention sinks and massive activations form).
  RMS over positions p of a class: sqrt(mean_p mean_c h[p, c]²); max_abs: max_p,c |h[p, c]|.
- `struct_content_ratio[i]` = residual_rms[i].structural / residual_rms[i].content.
- identity-ness of each block b (input h = residual i=b, output B(h) = residual i=b+1), averaged
  over all probe positions: `rel_update[b]` = mean_p ‖B(h)_p − h_p‖ / ‖h_p‖, `cos[b]` = mean_p
  cos(h_p, B(h)_p), and `skip_ce_delta[b]` = probe CE with block b skipped − probe CE of the full
  model (CE against the teacher, or NLL without a teacher).
- `sink_score[b][head]` = mean attention that queries at positions ≥ 1 pay to position 0;
  `sink_share` = fraction of (layer, head) pairs whose score exceeds `sink_threshold`
  (explicit attention weights, computed only here).

The *boundary* of a growth event at prefix depth k is residual index k (the input of the first
appended block); report.py reads these records for the boundary figures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from normgrow.data import TOKEN_CLASSES
from normgrow.losses import TeacherChunks, eval_sums
from normgrow.model import Student

CLASSES = ("all", *[c for c in TOKEN_CLASSES], "structural", "first")


@dataclass
class Probe:
    """The fixed probe batch and what does not change during a run: class masks, teacher view."""

    x: torch.Tensor  # (n, T) inputs
    y: torch.Tensor  # (n, T) next tokens
    masks: dict[str, torch.Tensor]  # class → (n, T) bool
    teacher: Optional[TeacherChunks]  # teacher hidden states on x (computed once), or None
    counts: dict[str, int]


def make_probe(rows: torch.Tensor, token_classes: np.ndarray, teacher=None, device="cpu") -> Probe:
    """rows (n, T+1) from data.probe_batch; token_classes the per-id class index array."""
    x, y = rows[:, :-1].to(device), rows[:, 1:].to(device)
    cls = torch.as_tensor(token_classes, device=device)[x]  # (n, T) class index per position
    masks = {name: cls == i for i, name in enumerate(TOKEN_CLASSES)}
    masks["structural"] = masks["bos"] | masks["whitespace"] | masks["punct"]
    masks["all"] = torch.ones_like(masks["content"])
    first = torch.zeros_like(masks["content"])
    first[:, 0] = True
    masks["first"] = first
    counts = {name: int(m.sum()) for name, m in masks.items()}
    chunks = teacher.chunks(x) if teacher is not None else None
    return Probe(x, y, masks, chunks, counts)


def _class_stats(h: torch.Tensor, masks: dict[str, torch.Tensor]) -> tuple[dict, dict]:
    sq = h.float().pow(2).mean(-1)  # (n, T) mean square over channels
    amax = h.float().abs().amax(-1)  # (n, T)
    rms, mx = {}, {}
    for name in CLASSES:
        m = masks[name]
        if m.any():
            rms[name] = sq[m].mean().sqrt().item()
            mx[name] = amax[m].max().item()
        else:
            rms[name] = mx[name] = None
    return rms, mx


def identity_stats(h: torch.Tensor, out: torch.Tensor) -> tuple[float, float]:
    """(mean_p ‖out_p − h_p‖ / ‖h_p‖, mean_p cos(h_p, out_p)) over the positions p of (…, C) tensors."""
    h, out = h.float(), out.float()
    rel = ((out - h).norm(dim=-1) / h.norm(dim=-1).clamp_min(1e-12)).mean().item()
    return rel, torch.nn.functional.cosine_similarity(h, out, dim=-1).mean().item()


def _probe_ce(model: Student, h: torch.Tensor, probe: Probe, chunk: int) -> float:
    """Mean probe CE (vs the teacher) or NLL (no teacher) from the last residual h."""
    out = model.norm(h)
    s = eval_sums(out.reshape(-1, out.shape[-1]), model.lm_head.weight, probe.teacher, probe.y.reshape(-1), chunk)
    return (s["ce"] if probe.teacher is not None else s["nll"]) / s["tokens"]


@torch.no_grad()
def diagnose(model: Student, probe: Probe, sink_threshold: float = 0.3, skip_ce: bool = True,
             chunk: int = 1024) -> dict:
    """All diagnostics of `model` at its current depth on the probe batch (a plain, JSON-able dict)."""
    was_training = model.training
    model.eval()
    try:
        T = probe.x.shape[1]
        cos_t, sin_t = model.rotary(T, probe.x.device)
        res: list = []
        model.hidden(probe.x, residuals=res)  # n_layer + 1 tensors (n, T, C)
        stats = [_class_stats(h, probe.masks) for h in res]
        rms = [s[0] for s in stats]
        ratio = [r["structural"] / r["content"] if r["structural"] and r["content"] else None for r in rms]
        rel, cos, sinks = [], [], []
        for b, block in enumerate(model.layers):
            r, c = identity_stats(res[b], res[b + 1])
            rel.append(r)
            cos.append(c)
            w = block.attention_weights(res[b], cos_t, sin_t)  # (n, H, T, T)
            sinks.append(w[:, :, 1:, 0].float().mean(dim=(0, 2)).tolist())  # per head
        rec = {
            "residual_rms": rms,
            "max_abs": [s[1] for s in stats],
            "struct_content_ratio": ratio,
            "rel_update": rel,
            "cos": cos,
            "sink_score": sinks,
            "sink_share": float(np.mean([s > sink_threshold for layer in sinks for s in layer])) if sinks else 0.0,
            "counts": probe.counts,
        }
        if skip_ce:
            full = _probe_ce(model, res[-1], probe, chunk)
            deltas = []
            for b in range(model.n_layer):
                h = res[b]  # skip block b: feed its input to block b+1
                for block in model.layers[b + 1:]:
                    h = block(h, cos_t, sin_t)
                deltas.append(_probe_ce(model, h, probe, chunk) - full)
            rec["probe_ce"] = full
            rec["skip_ce_delta"] = deltas
        return rec
    finally:
        model.train(was_training)


# ----------------------------------------------------------------------------- recompute from checkpoints


def _leaves(x, prefix=""):
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _leaves(v, f"{prefix}{k}.")
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from _leaves(v, f"{prefix}{i}.")
    elif isinstance(x, (int, float)) and not isinstance(x, bool):
        yield prefix[:-1], float(x)


def max_difference(a: dict, b: dict) -> tuple[float, str]:
    """Largest |a − b| over the numeric leaves the two records share, and where."""
    lb = dict(_leaves(b))
    worst, where = 0.0, ""
    for k, v in _leaves(a):
        if k in lb and abs(v - lb[k]) > worst:
            worst, where = abs(v - lb[k]), k
    return worst, where


def diagnose_run(run_dir, log=print) -> list[dict]:
    """Recompute the diagnostics of every saved checkpoint of a run and compare them with the
    values logged during training at the same step (`normgrow diagnose RUN_DIR`). Writes
    diagnostics-recomputed.jsonl next to diagnostics.jsonl; returns one comparison per checkpoint."""
    import dataclasses
    import json
    from pathlib import Path

    from normgrow import checkpoint
    from normgrow.config import load_config
    from normgrow.data import prepare, probe_batch
    from normgrow.errors import NormgrowError
    from normgrow.teacher import load_teacher, resolve_teacher_path

    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise NormgrowError(f"{run_dir}: not a run directory (no config.yaml)")
    cfg = load_config(str(run_dir / "config.yaml"))
    ckpts = checkpoint.list_checkpoints(run_dir / "checkpoints")
    if not ckpts:
        raise NormgrowError(f"{run_dir}: has no checkpoints to diagnose")
    teacher_path = resolve_teacher_path(cfg, log=log, build=False)
    prep = prepare(cfg, teacher_path=teacher_path, log=lambda *_: None)
    teacher = (load_teacher(teacher_path, cfg.teacher.dtype, torch.device("cpu"), prep.vocab_size, prep.vocab_size)
               if teacher_path else None)
    rows, _ = probe_batch(prep, cfg.data.probe_sequences, cfg.data.seq_len)
    probe = make_probe(rows, prep.token_classes, teacher)
    logged = {}
    if (run_dir / "diagnostics.jsonl").is_file():
        for line in (run_dir / "diagnostics.jsonl").read_text().splitlines():
            r = json.loads(line)
            if r["event"] in ("stage_end", "interval"):
                logged[r["step"]] = r
    results, out_lines = [], []
    for ckpt in ckpts:
        weights, _, _, state = checkpoint.load(ckpt)
        depth = 1 + max(int(k.split(".")[1]) for k in weights if k.startswith("layers."))
        model = Student(dataclasses.replace(cfg.model), n_layer=depth, max_seq_len=cfg.data.seq_len)
        model.load_state_dict(weights)
        rec = diagnose(model, probe, cfg.diagnostics.sink_threshold, cfg.diagnostics.skip_ce, cfg.distill.chunk_tokens)
        rec = {"step": state["step"], "tokens": state["tokens"], "n_layer": depth, "checkpoint": ckpt.name, **rec}
        out_lines.append(json.dumps(rec))
        cmp = {"step": state["step"], "checkpoint": ckpt.name, "logged": state["step"] in logged}
        if cmp["logged"]:
            cmp["max_abs_diff"], cmp["where"] = max_difference(rec, logged[state["step"]])
        results.append(cmp)
        log(f"{ckpt.name}: n_layer {depth}, probe CE {rec.get('probe_ce', float('nan')):.4f}, "
            + (f"max |recomputed − logged| {cmp['max_abs_diff']:.3g}" if cmp["logged"] else "no logged record at this step"))
    tmp = run_dir / "diagnostics-recomputed.jsonl.tmp"
    tmp.write_text("".join(line + "\n" for line in out_lines))
    tmp.replace(run_dir / "diagnostics-recomputed.jsonl")
    return results
