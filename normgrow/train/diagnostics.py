"""Boundary diagnostics: pure observers of a student on the fixed probe batch (docs/DESIGN.md §3.6).

`diagnose(model, probe, settings)` returns a plain dict and never changes training state (no
parameter, buffer, RNG or data-iterator change; train/eval mode is restored). It runs every
diagnostic of the registry `DIAGNOSTICS` (or those in `diagnostics.include`) on one
`Observation` — the model, the probe and the residual streams, computed once — and merges the
named values they return. User code adds one with `register_diagnostic(name, fn)`; its values land
in diagnostics.jsonl and the study report without any other change.

The probe (`data.probe_batch`) is `data.probe_sequences` fixed validation rows of T inputs, each
starting T // 2 tokens before a document start: the tail of the previous document, then the
document's BOS at position T // 2 and its first tokens. So every row carries a BOS at an interior
position, which enters the `bos` and `structural` classes like any structural token, while
position 0 (a mid-document token, where attention sinks form whatever the token) is reported alone.
The built-in diagnostics:

- `residual`: `residual_rms[i]`, `max_abs[i]` for i = 0 … depth: the residual stream entering
  block 0 (the embeddings, i = 0) and leaving block i−1 (i ≥ 1), per token class — `all`, `bos`,
  `whitespace`, `punct`, `content`, `structural` (= bos ∪ whitespace ∪ punct), every one of them
  *excluding position 0*, and `first` (position 0 of every sequence alone: attention sinks and
  massive activations form there whatever the token is, so it would otherwise pass for a class's drift).
  RMS over positions p of a class: sqrt(mean_p mean_c h[p, c]²); max_abs: max_p,c |h[p, c]|.
  `struct_content_ratio[i]` = residual_rms[i].structural / residual_rms[i].content.
- `identity`: for each block b (input h = residual i=b, output B(h) = residual i=b+1), averaged
  over all probe positions: `rel_update[b]` = mean_p ‖B(h)_p − h_p‖ / ‖h_p‖ and `cos[b]` =
  mean_p cos(h_p, B(h)_p).
- `sinks`: `sink_score[b][head]` = mean attention that queries at positions ≥ 1 pay to position 0;
  `sink_share` = fraction of (layer, head) pairs whose score exceeds `sink_threshold` (explicit
  attention weights, computed only here).
- `skip_ce` (when `diagnostics.skip_ce`): `probe_ce` and `skip_ce_delta[b]` = probe CE with block b
  skipped − probe CE of the full model (CE against the teacher, or NLL without a teacher).
- `collapse`: for each residual index i, over the probe positions except position 0,
  `collapse_share[i]` = ‖mean_p h_p‖² / mean_p ‖h_p‖², the share of the stream's energy in the
  direction every token shares (1: all tokens equal; ≈ 1/N for N orthogonal tokens), and
  `collapse_cos[i]` = the mean cosine between two different positions. A collapsed stream feeds
  every later block nearly the same normalized input (docs/DESIGN.md §5.6: the regime both placements share).
- `branch`: `branch_update[b]` = mean_p sqrt(‖A_p‖² + ‖M_p‖²) / ‖h_p‖, the size of what block b's
  attention and MLP branches output relative to the stream entering it (position 0 excluded). It
  does not depend on where the norms sit, unlike the stream's RMS (a post-norm stream is a norm's
  output, its RMS the gains by construction).

The *boundaries* of a growth event are residual indices (the input of each run of inserted blocks;
the growth operator says which, train/growth.py); `boundary_summary` reads these records there.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import torch

from normgrow.config import DiagnosticsConfig
from normgrow.data import TOKEN_CLASSES
from normgrow.nn.losses import TeacherChunks, eval_sums
from normgrow.nn.model import Block, Student
from normgrow.registry import Registry

CLASSES = ("all", *[c for c in TOKEN_CLASSES], "structural", "first")


@dataclass
class Probe:
    """The fixed probe batch and what does not change during a run: class masks, teacher view."""

    x: torch.Tensor  # (n, T) inputs
    y: torch.Tensor  # (n, T) next tokens
    masks: dict[str, torch.Tensor]  # class → (n, T) bool
    teacher: TeacherChunks | None  # teacher hidden states on x (computed once), or None
    counts: dict[str, int]


def make_probe(rows: torch.Tensor, token_classes: np.ndarray, teacher=None, device="cpu") -> Probe:
    """rows (n, T+1) from data.probe_batch; token_classes the per-id class index array."""
    x, y = rows[:, :-1].to(device), rows[:, 1:].to(device)
    cls = torch.as_tensor(token_classes, device=device)[x]  # (n, T) class index per position
    first = torch.zeros_like(cls, dtype=torch.bool)
    first[:, 0] = True
    masks = {name: (cls == i) & ~first for i, name in enumerate(TOKEN_CLASSES)}  # position 0 is reported alone
    masks["structural"] = masks["bos"] | masks["whitespace"] | masks["punct"]
    masks["all"] = ~first
    masks["first"] = first
    counts = {name: int(m.sum()) for name, m in masks.items()}
    chunks = teacher.chunks(x) if teacher is not None else None
    if chunks is not None:
        chunks.keep = chunks.fits()  # the probe is scored at every diagnosis: keep its teacher log-probs
    return Probe(x, y, masks, chunks, counts)


@dataclass
class Observation:
    """What a diagnostic reads: the model (in eval mode, no grad), the probe, the residual streams
    entering every block and leaving the last (depth + 1 tensors (n, T, C)), the rotary tables."""

    model: Student
    probe: Probe
    residuals: list[torch.Tensor]
    cos: torch.Tensor
    sin: torch.Tensor
    settings: DiagnosticsConfig
    chunk_tokens: int


Diagnostic = Callable[[Observation], dict]
DIAGNOSTICS: Registry[Diagnostic] = Registry("diagnostic", field="diagnostics.include")


def register_diagnostic(name: str, fn: Diagnostic, replace: bool = False) -> Diagnostic:
    """Add a diagnostic: `fn(obs: Observation) -> dict` of JSON-able named values (use a `name/` prefix
    for the keys). It must not change the model; `diagnose` runs it in eval mode without gradients."""
    if not callable(fn):
        raise TypeError(f"diagnostic '{name}': expected a function of an Observation")
    return DIAGNOSTICS.register(name, fn, replace=replace)


def _class_stats(h: torch.Tensor, masks: dict[str, torch.Tensor]) -> tuple[dict, dict]:
    sq = h.float().pow(2).mean(-1)  # (n, T) mean square over channels
    amax = h.float().abs().amax(-1)  # (n, T)
    rms: dict[str, float | None]
    mx: dict[str, float | None]
    rms, mx = {}, {}
    for name in CLASSES:
        m = masks[name]
        if m.any():
            rms[name] = sq[m].mean().sqrt().item()
            mx[name] = amax[m].max().item()
        else:
            rms[name] = mx[name] = None
    return rms, mx


def residual(obs: Observation) -> dict:
    stats = [_class_stats(h, obs.probe.masks) for h in obs.residuals]
    rms = [s[0] for s in stats]
    ratio = [r["structural"] / r["content"] if r["structural"] and r["content"] else None for r in rms]
    return {"residual_rms": rms, "max_abs": [s[1] for s in stats], "struct_content_ratio": ratio}


def identity_stats(h: torch.Tensor, out: torch.Tensor) -> tuple[float, float]:
    """(mean_p ‖out_p − h_p‖ / ‖h_p‖, mean_p cos(h_p, out_p)) over the positions p of (…, C) tensors."""
    h, out = h.float(), out.float()
    rel = ((out - h).norm(dim=-1) / h.norm(dim=-1).clamp_min(1e-12)).mean().item()
    return rel, torch.nn.functional.cosine_similarity(h, out, dim=-1).mean().item()


def identity(obs: Observation) -> dict:
    pairs = [identity_stats(obs.residuals[b], obs.residuals[b + 1]) for b in range(obs.model.depth)]
    return {"rel_update": [p[0] for p in pairs], "cos": [p[1] for p in pairs]}


def sinks(obs: Observation) -> dict:
    scores = []
    for b, block in enumerate(typing.cast(Iterable[Block], obs.model.layers)):
        w = block.attention_weights(obs.residuals[b], obs.cos, obs.sin)  # (n, H, T, T)
        scores.append(w[:, :, 1:, 0].float().mean(dim=(0, 2)).tolist())  # per head
    share = float(np.mean([s > obs.settings.sink_threshold for layer in scores for s in layer])) if scores else 0.0
    return {"sink_score": scores, "sink_share": share}


def _probe_ce(obs: Observation, h: torch.Tensor, carried: float) -> float:
    """Mean probe CE (vs the teacher) or NLL (no teacher) from the last residual h (carrying the dose `carried`)."""
    model, probe = obs.model, obs.probe
    out = model.final(h, carried)
    s = eval_sums(
        out.reshape(-1, out.shape[-1]), model.lm_head.weight, probe.teacher, probe.y.reshape(-1), obs.chunk_tokens
    )
    return (s["ce"] if probe.teacher is not None else s["nll"]) / s["tokens"]


def skip_ce(obs: Observation) -> dict:
    if not obs.settings.skip_ce:
        return {}
    model = obs.model
    full = _probe_ce(obs, obs.residuals[-1], model.carried_at(model.depth))
    deltas = []
    for b in range(model.depth):  # skip block b: its input (carrying its dose) to block b+1
        h, carried = model.run_blocks(obs.residuals[b], b + 1, obs.cos, obs.sin, model.carried_at(b))
        deltas.append(_probe_ce(obs, h, carried) - full)
    return {"probe_ce": full, "skip_ce_delta": deltas}


def collapse(obs: Observation) -> dict:
    keep = ~obs.probe.masks["first"]
    share, cos = [], []
    for h in obs.residuals:
        x = h.float()[keep]  # (N, C), position 0 excluded
        share.append((x.mean(0).pow(2).sum() / x.pow(2).sum(-1).mean().clamp_min(1e-30)).item())
        u = torch.nn.functional.normalize(x, dim=-1)
        n = u.shape[0]
        cos.append(((u.sum(0).pow(2).sum() - u.pow(2).sum()) / max(n * (n - 1), 1)).item())  # mean over p ≠ q
    return {"collapse_share": share, "collapse_cos": cos}


def branch(obs: Observation) -> dict:
    keep = ~obs.probe.masks["first"]
    ratios = []
    for b, block in enumerate(typing.cast(Iterable[Block], obs.model.layers)):
        outs: list[torch.Tensor] = []
        hooks = [
            block.self_attn.register_forward_hook(lambda m, i, o, outs=outs: outs.append(o[0])),
            block.mlp.register_forward_hook(lambda m, i, o, outs=outs: outs.append(o)),
        ]
        try:
            block(obs.residuals[b], obs.cos, obs.sin)
        finally:
            for hook in hooks:
                hook.remove()
        update = typing.cast(torch.Tensor, sum(o.float().pow(2).sum(-1) for o in outs)).sqrt()  # (n, T)
        ratio = update / obs.residuals[b].float().norm(dim=-1).clamp_min(1e-12)
        ratios.append(ratio[keep].mean().item())
    return {"branch_update": ratios}


register_diagnostic("residual", residual)
register_diagnostic("identity", identity)
register_diagnostic("sinks", sinks)
register_diagnostic("skip_ce", skip_ce)
register_diagnostic("collapse", collapse)
register_diagnostic("branch", branch)


DEFAULT_SETTINGS = DiagnosticsConfig()


@torch.no_grad()
def diagnose(
    model: Student, probe: Probe, settings: DiagnosticsConfig = DEFAULT_SETTINGS, chunk_tokens: int = 1024
) -> dict:
    """Every selected diagnostic of `model` at its current depth on the probe batch (a plain, JSON-able dict)."""
    was_training = model.training
    model.eval()
    try:
        cos, sin = model.rotary(probe.x.shape[1], probe.x.device)
        residuals: list = []
        model.hidden(probe.x, residuals=residuals)  # depth + 1 tensors (n, T, C)
        obs = Observation(model, probe, residuals, cos, sin, settings, chunk_tokens)
        rec: dict = {}
        for name in settings.include if settings.include is not None else DIAGNOSTICS.names():
            rec.update(DIAGNOSTICS[name](obs))
        rec["counts"] = probe.counts
        return rec
    finally:
        model.train(was_training)


def boundary_summary(records: list[dict], stages: list[dict]) -> list[dict]:
    """Per growth event and boundary: the boundary residual at the event (end of the previous stage) and
    at the end of the stage that follows, per token class; the pre-final-norm hidden scale at both; the
    identity-ness and provenance of the trained block just below the boundary before growth; and the
    update ratio of the first inserted block at the end of its stage. `records` are diagnostics.jsonl's,
    `stages` the summary's (their growth records name the boundaries)."""
    ends = {r["stage"]: r for r in records if r["event"] == "stage_end"}
    out = []
    for k in sorted(ends):
        if k + 1 not in ends or k + 1 >= len(stages):
            continue
        growth = stages[k + 1].get("growth") or {}
        new = growth.get("grow/new_blocks", [])
        for b in growth.get("grow/boundaries", [ends[k]["n_layer"]]):
            # b indexes the grown model's residual stream; the same representation (the output of the trained
            # block just below the inserted one) has index b − (inserted blocks below b) before growth
            b_old = b - sum(1 for p in new if p < b)
            entry = _boundary_entry(k + 1, b, b_old, ends[k], ends[k + 1])
            if "last_prefix_block" in entry and "provenance" in stages[k]:
                entry["last_prefix_block"]["provenance"] = stages[k]["provenance"][b_old - 1]
            out.append(entry)
    return out


def _boundary_entry(stage: int, b: int, b_old: int, before: dict, after: dict) -> dict:
    """One boundary: residual index b of the grown model, b_old of the model before growth (equal for append)."""

    def pick(r: dict, i: int) -> dict:
        return {c: r["residual_rms"][i][c] for c in ("all", "structural", "content", "bos", "first")}

    entry: dict = {"stage": stage, "boundary": b}
    if "residual_rms" in before:
        entry.update(
            rms_at_growth=pick(before, b_old),
            rms_end_of_next_stage=pick(after, b),
            struct_content_ratio=[before["struct_content_ratio"][b_old], after["struct_content_ratio"][b]],
            pre_final_norm_rms=[before["residual_rms"][-1]["all"], after["residual_rms"][-1]["all"]],
        )
    if "rel_update" in before:
        entry["last_prefix_block"] = {
            "index": b_old - 1,
            "rel_update": before["rel_update"][b_old - 1],
            "cos": before["cos"][b_old - 1],
            "skip_ce_delta": (before.get("skip_ce_delta") or [None] * b_old)[b_old - 1],
        }
    if "branch_update" in after:
        entry["first_new_block"] = {"index": b, "branch_update_end": after["branch_update"][b]}
    return entry


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
