"""Evaluation: the fixed sets a run is measured on, and the measurements the training loop logs.

    Evaluator(…) ← open_evaluator(prep, cfg, info, teacher)     built once, when the run opens
        .val        validation sequences (data.val_tokens)                   stage start and end (full passes)
        .curve      its first rows, the curve subset (data.curve_tokens)     every evaluation: curve/…
        .select     model-selection sequences (data.select_tokens), if any   once, at the end of the run
        .probe      the diagnostics' probe batch (rank 0, diagnostics on)    diagnostics.jsonl
    evaluate(model, teacher, val, cfg, info, kept)
        val/ce, val/kl, val/teacher_entropy (with a teacher) and val/nll: per-token means of sums over every
        validation token (losses.eval_sums), in float64, summed over ranks, so the numbers do not depend on
        the micro-batch, the ranks or the sharding
    evaluate(…, curve=n)  adds curve/ce, curve/kl, curve/teacher_entropy, curve/nll: the same means over the
        first n validation rows, summed apart in the same pass (the val/… numbers unchanged, bit for bit);
        with full=False only the micro-batches holding those rows run, and only curve/… is returned

A learning curve is drawn from curve/…, one measurement on one fixed set at every evaluation: full ones
(stage start and end: validation()) get it from their pass for free, interval and dense ones
(curve_point()) evaluate the subset alone, on the same micro-batches, so both give the same numbers.

Evaluation never changes training state: the model returns to its training mode, and no random number is
drawn. Under FSDP every rank runs the same number of forwards (the sharded weights are gathered
collectively), padding with unused ones where it holds fewer validation rows (`_pad_forwards`). The teacher's
view of the validation set is kept across evaluations when it fits in KEEP_TEACHER_BYTES (same numbers,
bit for bit: tests/train/test_train.py).

`autocast` and `micro_batch_size` are the training step's (train/step.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from normgrow.config import RunConfig
from normgrow.data import Prepared, probe_batch, select_sequences, val_sequences
from normgrow.nn.losses import KEEP_TEACHER_BYTES, eval_sums_split
from normgrow.nn.model import Student
from normgrow.parallel import dist, sharding
from normgrow.teacher.load import Teacher
from normgrow.train.diagnostics import Probe, diagnose, make_probe
from normgrow.train.growth import StagePlan, plain_student
from normgrow.train.step import autocast, micro_batch_size

# ----------------------------------------------------------------------------- the measurement


@torch.no_grad()
def evaluate(
    model: Student,
    teacher: Teacher | None,
    val: torch.Tensor,
    cfg: RunConfig,
    info: dist.DistInfo,
    kept: dict | None = None,
    curve: int | None = None,
    full: bool = True,
    per_sequence: list[float] | None = None,
) -> dict[str, float]:
    """val/ce, val/kl, val/teacher_entropy (with a teacher) and val/nll on the fixed validation set. `kept`
    (a dict owned by the caller, for a set evaluated again and again) remembers the teacher's view of each
    micro-batch and its log-probabilities, so later evaluations skip the teacher (same numbers, bit for bit).

    `curve` (a number of leading rows of val, the curve subset) adds curve/ce, curve/kl, curve/teacher_entropy
    and curve/nll: the same per-token means over those rows' tokens alone, summed apart in the same pass, so
    the val/… numbers are those of an evaluation without them, bit for bit. With `full=False` only the
    micro-batches holding curve rows are run (the last one whole, so its numbers are those of the full pass),
    and only curve/… is returned. Each rank holds its stride of val (rows rank, rank + world, …) and so its
    stride of the subset: the subset's rows of a rank are the first of its own rows. `per_sequence` (full, with a
    teacher): filled with each validation sequence's mean ce, in val's order, every rank's rows gathered."""
    was_training = model.training
    model.eval()
    rows, mb = val[info.rank :: info.world_size], micro_batch_size(cfg, info) or 1
    mine = len(range(info.rank, curve or 0, info.world_size))  # this rank's curve rows: a prefix of `rows`
    totals, head = torch.zeros(5, dtype=torch.float64), torch.zeros(5, dtype=torch.float64)
    batches = rows.split(mb) if full else rows[: -(-mine // mb) * mb].split(mb) if mine else ()
    keep = kept if full or kept else None  # kept stays all or nothing: only a full pass fills it
    # sharded weights are gathered collectively by each forward: every rank runs as many of them
    pad_teacher = teacher is not None and teacher.sharded and not kept
    if sharding.is_sharded(model) or pad_teacher:
        most = -(-len(val) // info.world_size) if full else -(-(curve or 0) // info.world_size)
        _pad_forwards(
            model if sharding.is_sharded(model) else None,
            teacher if pad_teacher else None,
            val,
            most,
            len(rows) if full else mine,
            mb,
            cfg,
            info,
        )
    seqs = _Sequences(len(val), info, mb) if per_sequence is not None and full and teacher is not None else None
    for i, batch in enumerate(batches):
        prefix = min(max(mine - i * mb, 0), len(batch)) * (batch.shape[1] - 1)  # this micro-batch's curve tokens
        tokens: list[torch.Tensor] | None = [] if seqs is not None else None
        s, c = _batch_sums(model, teacher, batch, cfg, info, keep, i, prefix, full, tokens)
        totals += torch.tensor([s[k] for k in SUMS], dtype=torch.float64)
        head += torch.tensor([c[k] for k in SUMS], dtype=torch.float64)
        if seqs is not None and tokens is not None:
            seqs.add(i, len(batch), tokens)
    dist.all_reduce_sum(totals)
    if seqs is not None and per_sequence is not None:
        per_sequence[:] = seqs.gathered()
    if curve is not None:
        dist.all_reduce_sum(head)
    model.train(was_training)
    out = _means("val", totals, teacher is not None) if full else {}
    return {**out, **_means("curve", head, teacher is not None)} if curve is not None else out


SUMS = ("ce", "kl", "teacher_entropy", "nll", "tokens")  # the order of an evaluation's sums tensor


class _Sequences:
    """Each validation sequence's mean ce, filled by the rank holding it (rows rank, rank + world, …) and gathered
    by a sum over ranks (the other ranks hold zeros there)."""

    def __init__(self, n: int, info: dist.DistInfo, mb: int):
        self.values, self.info, self.mb = torch.zeros(n, dtype=torch.float64), info, mb

    def add(self, i: int, rows: int, tokens: list[torch.Tensor]) -> None:
        """Micro-batch i's rows, from its per-token ce (row-major): this rank's rows i·mb … i·mb + rows − 1."""
        local = i * self.mb + torch.arange(rows)
        self.values[self.info.rank + self.info.world_size * local] = torch.cat(tokens).view(rows, -1).mean(1)

    def gathered(self) -> list[float]:
        dist.all_reduce_sum(self.values)
        return self.values.tolist()


def _batch_sums(
    model: Student,
    teacher: Teacher | None,
    batch: torch.Tensor,
    cfg: RunConfig,
    info: dist.DistInfo,
    keep: dict | None,
    i: int,
    prefix: int,
    full: bool,
    per_token: list[torch.Tensor] | None = None,
) -> tuple[dict, dict]:
    """One micro-batch's sums over all its tokens and over its first `prefix` tokens (the curve subset's); the
    teacher's view of micro-batch `i` is read from `keep` when kept there, and kept when `keep` is given."""
    x, y = batch[:, :-1].to(info.device), batch[:, 1:].to(info.device)
    with autocast(cfg, info.device):
        h = model(x, hidden_only=True)  # through forward: FSDP gathers the root's weights in its hooks
    view = None
    if teacher is not None:
        view = keep.get(i) if keep is not None else None
        if view is None:
            view = teacher.chunks(x)
            if keep is not None:
                view.keep, keep[i] = True, view
    chunk = cfg.distill.chunk_tokens
    upto = None if full else -(-prefix // chunk) * chunk  # a curve pass skips the chunks after the subset's
    return eval_sums_split(
        h.reshape(-1, h.shape[-1])[:upto], model.lm_head.weight, view, y.reshape(-1)[:upto], chunk, prefix, per_token
    )


def _means(prefix: str, sums: torch.Tensor, with_teacher: bool) -> dict[str, float]:
    """<prefix>/nll (and /ce, /kl, /teacher_entropy with a teacher): the per-token means of the sums."""
    ce, kl, ent, nll, n = sums.tolist()
    out = {f"{prefix}/nll": nll / n}
    if with_teacher:
        out.update({f"{prefix}/ce": ce / n, f"{prefix}/kl": kl / n, f"{prefix}/teacher_entropy": ent / n})
    return out


def _pad_forwards(
    model: torch.nn.Module | None,
    teacher: Teacher | None,
    val: torch.Tensor,
    most: int,
    mine: int,
    mb: int,
    cfg: RunConfig,
    info: dist.DistInfo,
) -> None:
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
    curve: int = 0  # the curve subset: the first `curve` rows of val (data.curve_tokens; all of them when 0)
    select: torch.Tensor | None = None  # the model-selection sequences (data.select_tokens), if any
    probe: Probe | None = None  # the diagnostics' probe batch (rank 0, diagnostics enabled)
    kept: dict | None = None  # the teacher's view of val, kept across evaluations when it fits

    def validation(self, model: Student, per_sequence: list[float] | None = None) -> dict[str, float]:
        """val/ce, val/kl, val/teacher_entropy, val/nll on the validation set, and curve/… on its curve subset
        from the same pass; `per_sequence` filled with each sequence's mean ce (evaluate)."""
        return evaluate(
            model, self.teacher, self.val, self.cfg, self.info, self.kept, self.curve or len(self.val),
            per_sequence=per_sequence,
        )  # fmt: skip

    def curve_point(self, model: Student) -> dict[str, float]:
        """curve/ce, curve/kl, curve/teacher_entropy, curve/nll on the curve subset alone (the same numbers a
        full pass gives it)."""
        return evaluate(
            model, self.teacher, self.val, self.cfg, self.info, self.kept, self.curve or len(self.val), full=False
        )

    def selection(self, model: Student) -> dict[str, float]:
        """select/ce, select/kl, … on the model-selection set (evaluated once: nothing is kept)."""
        assert self.select is not None  # scored only when data.select_tokens is set
        metrics = evaluate(model, self.teacher, self.select, self.cfg, self.info)
        return {k.replace("val/", "select/"): v for k, v in metrics.items()}

    def probe_student(self, model: Student, plan: StagePlan) -> Student | None:
        """The student the diagnostics read (None where none run: off rank 0, or diagnostics off). A sharded
        student is gathered by every rank (a collective) into a plain copy on rank 0."""
        if sharding.is_sharded(model):
            weights = sharding.full_weights(model, rank0_only=True)
            if self.probe is not None:
                return plain_student(self.cfg, plan, weights, self.info.device)
        return model if self.probe is not None else None

    def diagnostics(self, model: Student) -> dict:
        """The diagnostics of `model` (from probe_student) on the probe batch (diagnostics.diagnose)."""
        assert self.probe is not None  # probe_student returned a student
        return diagnose(model, self.probe, self.cfg.diagnostics, self.cfg.distill.chunk_tokens)


def open_evaluator(prep: Prepared, cfg: RunConfig, info: dist.DistInfo, teacher: Teacher | None) -> Evaluator:
    """The run's validation, selection and probe sets; the teacher's view of the validation set is kept when
    this rank's share of it fits in KEEP_TEACHER_BYTES."""
    val = val_sequences(prep, cfg.data.seq_len, cfg.data.val_tokens)
    select = (
        select_sequences(prep, cfg.data.seq_len, cfg.data.val_tokens, cfg.data.select_tokens)
        if cfg.data.select_tokens
        else None
    )
    probe = None
    if cfg.diagnostics.enabled and info.is_main:
        rows, _ = probe_batch(prep, cfg.data.probe_sequences, cfg.data.seq_len)
        probe = make_probe(rows, prep.token_classes, teacher, info.device)
    elif cfg.diagnostics.enabled and teacher is not None and teacher.sharded:
        rows, _ = probe_batch(prep, cfg.data.probe_sequences, cfg.data.seq_len)  # rank 0's teacher forward
        teacher.chunks(rows[:, :-1].to(info.device))  # on its probe gathers from every rank
    kept: dict | None = None
    if teacher is not None:
        n_rows = len(val[info.rank :: info.world_size])
        if n_rows * cfg.data.seq_len * teacher.weight.shape[0] * 4 <= KEEP_TEACHER_BYTES:
            kept = {}
    curve = min(math.ceil(cfg.data.curve_tokens / cfg.data.seq_len), len(val))
    return Evaluator(cfg, info, teacher, val, curve, select, probe, kept)
