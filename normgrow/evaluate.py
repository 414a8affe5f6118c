"""Evaluation: the fixed sets a run is measured on, and the measurements the training loop logs.

    Evaluator(…) ← open_evaluator(prep, cfg, info, teacher)     built once, when the run opens
        .val        validation sequences (data.val_tokens)                   every eval, stage start and end
        .select     model-selection sequences (data.select_tokens), if any   once, at the end of the run
        .probe      the diagnostics' probe batch (rank 0, diagnostics on)    diagnostics.jsonl
    evaluate(model, teacher, val, cfg, info, kept)
        val/ce, val/kl, val/teacher_entropy (with a teacher) and val/nll: per-token means of sums over every
        validation token (losses.eval_sums), in float64, summed over ranks, so the numbers do not depend on
        the micro-batch, the ranks or the sharding

Evaluation never changes training state: the model returns to its training mode, and no random number is
drawn. Under FSDP every rank runs the same number of forwards (the sharded weights are gathered
collectively), padding with unused ones where it holds fewer validation rows (`_pad_forwards`). The teacher's
view of the validation set is kept across evaluations when it fits in KEEP_TEACHER_BYTES (same numbers,
bit for bit: tests/test_train.py).

`autocast` and `micro_batch_size` are shared with the training step (train.train_step).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from normgrow import dist, sharding
from normgrow.config import RunConfig
from normgrow.curriculum import StagePlan
from normgrow.data import Prepared, probe_batch, select_sequences, val_sequences
from normgrow.diagnostics import Probe, diagnose, make_probe
from normgrow.losses import KEEP_TEACHER_BYTES, eval_sums
from normgrow.model import Student
from normgrow.teacher import Teacher


def autocast(cfg: RunConfig, device: torch.device):
    if cfg.train.dtype == "bfloat16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def micro_batch_size(cfg: RunConfig, info: dist.DistInfo) -> int:
    return cfg.train.micro_batch_size or cfg.train.batch_size // info.world_size


# ----------------------------------------------------------------------------- the measurement


@torch.no_grad()
def evaluate(model: Student, teacher: Teacher | None, val: torch.Tensor, cfg: RunConfig,
             info: dist.DistInfo, kept: dict | None = None) -> dict[str, float]:
    """val/ce, val/kl, val/teacher_entropy (with a teacher) and val/nll on the fixed validation set. `kept`
    (a dict owned by the caller, for a set evaluated again and again) remembers the teacher's view of each
    micro-batch and its log-probabilities, so later evaluations skip the teacher (same numbers, bit for bit)."""
    was_training = model.training
    model.eval()
    rows, mb = val[info.rank :: info.world_size], micro_batch_size(cfg, info) or 1
    totals = torch.zeros(5, dtype=torch.float64)
    # sharded weights are gathered collectively by each forward: every rank runs as many of them
    pad_teacher = teacher is not None and teacher.sharded and not kept
    if sharding.is_sharded(model) or pad_teacher:
        _pad_forwards(model if sharding.is_sharded(model) else None, teacher if pad_teacher else None, val,
                      -(-len(val) // info.world_size), len(rows), mb, cfg, info)
    for i, batch in enumerate(rows.split(mb)):
        x, y = batch[:, :-1].to(info.device), batch[:, 1:].to(info.device)
        with autocast(cfg, info.device):
            h = model(x, hidden_only=True)  # through forward: FSDP gathers the root's weights in its hooks
        view = None
        if teacher is not None:
            view = kept.get(i) if kept is not None else None
            if view is None:
                view = teacher.chunks(x)
                if kept is not None:
                    view.keep, kept[i] = True, view
        s = eval_sums(h.reshape(-1, h.shape[-1]), model.lm_head.weight, view, y.reshape(-1), cfg.distill.chunk_tokens)
        totals += torch.tensor([s["ce"], s["kl"], s["teacher_entropy"], s["nll"], s["tokens"]], dtype=torch.float64)
    dist.all_reduce_sum(totals)
    model.train(was_training)
    ce, kl, ent, nll, n = totals.tolist()
    out = {"val/nll": nll / n}
    if teacher is not None:
        out.update({"val/ce": ce / n, "val/kl": kl / n, "val/teacher_entropy": ent / n})
    return out


def _pad_forwards(model: torch.nn.Module | None, teacher: Teacher | None, val: torch.Tensor, most: int,
                  mine: int, mb: int, cfg: RunConfig, info: dist.DistInfo) -> None:
    """A rank with fewer validation rows than another runs the sharded forwards (student's, teacher's) it lacks,
    on one row, unused."""
    x = val[:1, :-1].to(info.device)
    for _ in range(-(-most // mb) - -(-mine // mb)):
        if model is not None:
            with autocast(cfg, info.device):
                model(x, hidden_only=True)
        if teacher is not None:
            teacher.chunks(x)


# ----------------------------------------------------------------------------- a run's evaluation sets


@dataclass
class Evaluator:
    """The fixed sets one run is measured on and the measurements taken on them (built by open_evaluator)."""

    cfg: RunConfig
    info: dist.DistInfo
    teacher: Teacher | None  # the online teacher: validation always uses it, even when training reads a cache
    val: torch.Tensor  # (n, T + 1) validation sequences
    select: torch.Tensor | None = None  # the model-selection sequences (data.select_tokens), if any
    probe: Probe | None = None  # the diagnostics' probe batch (rank 0, diagnostics enabled)
    kept: dict | None = None  # the teacher's view of val, kept across evaluations when it fits

    def validation(self, model: Student) -> dict[str, float]:
        """val/ce, val/kl, val/teacher_entropy, val/nll on the validation set."""
        return evaluate(model, self.teacher, self.val, self.cfg, self.info, self.kept)

    def selection(self, model: Student) -> dict[str, float]:
        """select/ce, select/kl, … on the model-selection set (evaluated once: nothing is kept)."""
        metrics = evaluate(model, self.teacher, self.select, self.cfg, self.info)
        return {k.replace("val/", "select/"): v for k, v in metrics.items()}

    def probe_student(self, model: Student, plan: StagePlan) -> Student | None:
        """The student the diagnostics read (None where none run: off rank 0, or diagnostics off). A sharded
        student is gathered by every rank (a collective) into a plain copy on rank 0."""
        if sharding.is_sharded(model):
            weights = sharding.full_weights(model, rank0_only=True)
            if self.probe is not None:
                return sharding.plain_student(self.cfg, plan, weights, self.info.device)
        return model if self.probe is not None else None

    def diagnostics(self, model: Student) -> dict:
        """The diagnostics of `model` (from probe_student) on the probe batch (diagnostics.diagnose)."""
        return diagnose(model, self.probe, self.cfg.diagnostics, self.cfg.distill.chunk_tokens)


def open_evaluator(prep: Prepared, cfg: RunConfig, info: dist.DistInfo, teacher: Teacher | None) -> Evaluator:
    """The run's validation, selection and probe sets; the teacher's view of the validation set is kept when
    this rank's share of it fits in KEEP_TEACHER_BYTES."""
    val = val_sequences(prep, cfg.data.seq_len, cfg.data.val_tokens)
    select = (select_sequences(prep, cfg.data.seq_len, cfg.data.val_tokens, cfg.data.select_tokens)
              if cfg.data.select_tokens else None)
    probe = None
    if cfg.diagnostics.enabled and info.is_main:
        rows, _ = probe_batch(prep, cfg.data.probe_sequences, cfg.data.seq_len)
        probe = make_probe(rows, prep.token_classes, teacher, info.device)
    elif cfg.diagnostics.enabled and teacher is not None and teacher.sharded:
        rows, _ = probe_batch(prep, cfg.data.probe_sequences, cfg.data.seq_len)  # rank 0's teacher forward
        teacher.chunks(rows[:, :-1].to(info.device))  # on its probe gathers from every rank
    kept = None
    if teacher is not None:
        rows = len(val[info.rank :: info.world_size])
        if rows * cfg.data.seq_len * teacher.weight.shape[0] * 4 <= KEEP_TEACHER_BYTES:
            kept = {}
    return Evaluator(cfg, info, teacher, val, select, probe, kept)
