"""The per-run measures a study's claims, report and figures read: the claims' view of a run record
(record.RunRecord.measures), built here and nowhere else from its summary, config and diagnostics records.

    RunMeasures
        val_ce, stage_ce                 final validation CE; validation CE at every stage end
        match_scale                      how much budget matching scaled the run (None = unmatched)
        compute                          tokens, active-layer tokens, the student's training FLOPs (LM head
                                         included), the teacher's forward FLOPs and their sum `total_flops`
        dtype                            "student/teacher" compute dtypes the run resolved (`dtype: auto`
                                         depends on the machine, and so can a verdict)
        growth                           one GrowthRecord per growth event (depths, init, logit and CE jumps)
        boundary_drift, struct_drift     |log| drift of the boundary RMS and of the structural/content RMS ratio
                                         from a growth event to the end of the next stage, mean over events
        first_new_update                 the first appended block's ‖F(h)‖/‖h‖ at the end of its stage, mean
        last_prefix_*                    the last pre-growth block of the last growth event: relative update,
                                         index, provenance
        block_updates                    every block's relative update at the end of training
        collapse_share, collapse_cos     worst block (position 0 excluded) at the end of training
        diagnostics                      the whole last end-of-stage diagnostics record, by name — scalars and
                                         per-block lists alike, whatever diagnostics the run registered
        boundaries                       the summary's boundary records, one per growth event, as written
        events                           one BoundaryEvent per growth event and boundary: its indices, the
                                         training tokens at the growth event and at the end of the next stage,
                                         and the grow run's values there (read from `boundaries`)
        snapshots                        {training tokens: a few diagnostics} of every stage_end and interval
                                         record (SNAPSHOT_KEYS; residual_rms keeps all/structural/content), so a
                                         claim can read a joint run at a grow run's event tokens

`value(name)` reads a field, or else a diagnostic by its name, so a claim or a figure can use a new
diagnostic without any reader being edited. A study's measures are `{arm: {seed: RunMeasures}}`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from normgrow.config import RunConfig
from normgrow.machine.costs import teacher_flops_per_token


@dataclass
class GrowthRecord:
    stage: int  # the stage the event starts
    depth_from: int
    depth_to: int
    init: str
    logit_max_abs_diff: float  # on the fixed growth probe
    val_ce_jump: float | None  # val/ce just after − just before (None if not measured)


@dataclass
class BoundaryEvent:
    """One growth event's boundary b in a grow run: residual index b of the grown model (the stream the first
    inserted block receives, so the first inserted block is block b), `prefix` = the trained block just below
    it before growth (b − 1 for append), and the training tokens T_k at the event (the end of the stage before)
    and at the end of the stage the event starts. Values are the grow run's own, at those tokens."""

    stage: int  # the stage the event starts
    boundary: int  # residual index b (grown model); also the first inserted block's index
    prefix: int  # block index just below the boundary before growth
    tokens_at: int | None  # T_k: training tokens at the end of the stage before the event
    tokens_end: int | None  # training tokens at the end of the stage the event starts
    rms_at: float | None = None  # boundary residual RMS (class all) at T_k
    rms_end: float | None = None  # … at the end of the next stage
    rms_struct_at: float | None = None  # boundary residual RMS of the structural tokens at T_k
    ratio_at: float | None = None  # boundary structural/content RMS ratio at T_k
    ratio_end: float | None = None  # … at the end of the next stage
    new_update: float | None = None  # branch_update[b] (‖F(h)‖/‖h‖) of the first inserted block, end of its stage
    prefix_update: float | None = None  # rel_update[prefix] at T_k
    prefix_skip: float | None = None  # skip_ce_delta[prefix] at T_k (probe nats)


@dataclass
class RunMeasures:
    val_ce: float | None = None
    stage_ce: list[float] = field(default_factory=list)
    match_scale: float | None = None
    compute: dict[str, float] = field(default_factory=dict)
    dtype: str | None = None
    growth: list[GrowthRecord] = field(default_factory=list)
    boundary_drift: float | None = None
    struct_drift: float | None = None
    first_new_update: float | None = None
    last_prefix_update: float | None = None
    last_prefix_index: int | None = None
    last_prefix_provenance: str | None = None
    block_updates: list[float] | None = None
    collapse_share: float | None = None
    collapse_cos: float | None = None
    diagnostics: dict[str, Any] = field(default_factory=dict)
    boundaries: Sequence[Mapping] = ()
    events: list[BoundaryEvent] = field(default_factory=list)
    snapshots: dict[int, dict] = field(default_factory=dict)

    def value(self, name: str) -> Any:
        """A measure by name: a field of this record, else the run's final diagnostic of that name (None if absent)."""
        if name in MEASURE_NAMES:
            return getattr(self, name)
        return self.diagnostics.get(name)


MEASURE_NAMES = frozenset(f.name for f in dataclasses.fields(RunMeasures)) - {
    "diagnostics",
    "boundaries",
    "compute",
    "dtype",
    "events",
    "snapshots",
}

Measures = dict[str, dict[int, RunMeasures]]  # arm → seed → the run's measures


def _log_drift(pairs: list[tuple[float, float]]) -> float | None:
    """Mean of |log(after / before)| over (before, after) pairs: how far a scale moved, either way."""
    pairs = [(a, b) for a, b in pairs if a and b]
    return sum(abs(math.log(b / a)) for a, b in pairs) / len(pairs) if pairs else None


def _worst_block(record: dict, key: str) -> float | None:
    """The largest per-block value of a diagnostic, block 0 (the embedding's output) left out."""
    return max(record[key][1:], default=None) if key in record else None


SNAPSHOT_KEYS = ("branch_update", "rel_update", "skip_ce_delta", "struct_content_ratio")  # per-block/-index lists
SNAPSHOT_RMS = ("all", "structural", "content")  # the residual_rms classes a snapshot keeps
SNAPSHOT_EVENTS = ("stage_end", "interval")  # the diagnostics events snapshots are read from (not dense ones)


def snapshot(record: dict) -> dict:
    """The few diagnostics the mechanism claims read, from one diagnostics.jsonl record."""
    snap = {k: record[k] for k in SNAPSHOT_KEYS if k in record}
    if "residual_rms" in record:
        snap["residual_rms"] = [{c: r.get(c) for c in SNAPSHOT_RMS} for r in record["residual_rms"]]
    return snap


def _at(values: list | None, i: int):
    return values[i] if values is not None and 0 <= i < len(values) else None


def boundary_events(bounds: Sequence[Mapping], ends: dict[int, dict]) -> list[BoundaryEvent]:
    """The summary's boundary records as BoundaryEvents; `ends` = the stage_end records by stage (their tokens)."""
    out = []
    for b in bounds:
        prefix = b.get("last_prefix_block") or {}
        at, end = ends.get(b["stage"] - 1, {}), ends.get(b["stage"], {})
        ratio = b.get("struct_content_ratio") or [None, None]
        out.append(
            BoundaryEvent(
                b["stage"],
                b["boundary"],
                prefix.get("index", b["boundary"] - 1),
                at.get("tokens"),
                end.get("tokens"),
                rms_at=(b.get("rms_at_growth") or {}).get("all"),
                rms_end=(b.get("rms_end_of_next_stage") or {}).get("all"),
                rms_struct_at=(b.get("rms_at_growth") or {}).get("structural"),
                ratio_at=ratio[0],
                ratio_end=ratio[1],
                new_update=(b.get("first_new_block") or {}).get("branch_update_end"),
                prefix_update=prefix.get("rel_update"),
                prefix_skip=prefix.get("skip_ce_delta"),
            )
        )
    return out


def scale_ratios(m: Measures, arm: str | None, ref: str | None, structural: bool = False) -> dict[int, float]:
    """Per seed, the mean over growth events' boundaries (matched by stage and residual index) of log(RMS of `arm`'s boundary stream at the event /
    `ref`'s): how much larger the stream its appended blocks receive is than the reference arm's (0 = the same scale).
    `structural` reads the structural tokens' RMS instead of all tokens'. Seeds or events without the values are left
    out (an arm without diagnostics gives {})."""

    def at(ev: BoundaryEvent) -> float | None:
        return ev.rms_struct_at if structural else ev.rms_at

    out: dict[int, float] = {}
    if arm is None or ref is None:
        return out
    for seed in sorted(set(m.get(arm) or {}) & set(m.get(ref) or {})):
        refs = {(ev.stage, ev.boundary): at(ev) for ev in m[ref][seed].events}
        logs = []
        for ev in m[arm][seed].events:
            here, there = at(ev), refs.get((ev.stage, ev.boundary))
            if here and there:
                logs.append(math.log(here / there))
        if logs:
            out[seed] = sum(logs) / len(logs)
    return out


def run_compute(cfg: RunConfig | None, summary: Mapping) -> dict[str, float]:
    """The compute a run consumed: its summary's counters, plus the teacher's forward FLOPs over its tokens
    (costs.teacher_flops_per_token, from the run's resolved config; 0 for a teacher of unknown shape)."""
    counted = summary.get("compute") or {}
    if "tokens" not in counted or cfg is None:
        return {}
    teacher = teacher_flops_per_token(cfg) * counted["tokens"]
    return {
        "tokens": counted["tokens"],
        "active_layer_tokens": counted["active_layer_tokens"],
        "student_flops": counted["flops"],
        "teacher_flops": teacher,
        "total_flops": counted["flops"] + teacher,
    }


def run_measures(summary: Mapping, cfg: RunConfig | None, diagnostics: list[dict]) -> RunMeasures:
    """The measures of one run, from its summary, resolved config and diagnostics records (record.RunRecord)."""
    s = summary
    bounds = s.get("boundaries") or []
    records = [r for r in diagnostics if r["event"] in SNAPSHOT_EVENTS]
    ends = [r for r in records if r["event"] == "stage_end"]
    final = ends[-1] if ends else {}
    prefix = (bounds[-1] if bounds else {}).get("last_prefix_block") or {}
    first_new = [b["first_new_block"]["branch_update_end"] for b in bounds if "first_new_block" in b]
    growth = [
        GrowthRecord(
            st["index"],
            g["grow/from"],
            g["grow/to"],
            g["grow/init"],
            g["grow/logit_max_abs_diff"],
            g.get("grow/val_ce_jump"),
        )
        for st in s.get("stages", [])
        if (g := st.get("growth"))
    ]
    return RunMeasures(
        val_ce=s.get("val/ce"),
        stage_ce=[st["end"]["val/ce"] for st in s.get("stages", []) if "val/ce" in (st.get("end") or {})],
        match_scale=(s.get("budget_match") or {}).get("scale"),
        compute=run_compute(cfg, s),
        dtype=f"{cfg.train.dtype}/{cfg.teacher.dtype}" if cfg is not None else None,
        growth=growth,
        boundary_drift=_log_drift(
            [(b["rms_at_growth"]["all"], b["rms_end_of_next_stage"]["all"]) for b in bounds if "rms_at_growth" in b]
        ),
        struct_drift=_log_drift([tuple(b["struct_content_ratio"]) for b in bounds if "struct_content_ratio" in b]),
        first_new_update=sum(first_new) / len(first_new) if first_new else None,
        last_prefix_update=prefix.get("rel_update"),
        last_prefix_index=prefix.get("index"),
        last_prefix_provenance=prefix.get("provenance"),
        block_updates=final.get("rel_update"),
        collapse_share=_worst_block(final, "collapse_share"),
        collapse_cos=_worst_block(final, "collapse_cos"),
        diagnostics={k: v for k, v in final.items() if k not in RECORD_KEYS},
        boundaries=bounds,
        events=boundary_events(bounds, {r["stage"]: r for r in ends}),
        snapshots={r["tokens"]: snapshot(r) for r in records},
    )


RECORD_KEYS = frozenset({"event", "step", "tokens", "active_layer_tokens", "n_layer", "stage"})  # a record's
# position in the run, not a diagnostic
