"""A study's numbers from its run records: what the report's tables, the headline, a ladder's rungs, a sweep's
points, `report --against` and `plan --pilot` show.

    contrast(records, a, b)     b − a of final val/ce over the seeds both arms finished (stats.Contrast)
    aggregate(study, records)   per arm: val/ce and val/nll over seeds, failed seeds, mean compute; every contrast;
                                the gap ratio (Fieller); the phase-wise table of the two phase arms at every stage
                                boundary (val/ce at each stage end and just after each growth, paired by seed)

`records` are the runs the statistics use (each arm's selected learning rate: record.RunRecord.kept).
"""

from __future__ import annotations

from dataclasses import dataclass

from normgrow.study.config import StudyConfig
from normgrow.study.engine.stats import Contrast, Estimate, Ratio, estimate, fieller_ratio, paired
from normgrow.study.record import COMPUTE, RunRecord, finished, values


@dataclass(frozen=True)
class ArmStats:
    val_ce: Estimate
    val_nll: Estimate
    failed: list[int]  # seeds that did not finish
    compute: dict[str, float | None]  # mean over finished seeds of tokens, active-layer tokens, …


@dataclass(frozen=True)
class PhaseRow:
    stage: int
    point: str  # "stage end", or "after growth" (the first evaluation of a stage after the first)
    n_layer: int
    a: float  # mean over seeds
    b: float
    diff: Estimate  # b − a, paired by seed
    leader: str


@dataclass(frozen=True)
class Phase:
    a: str
    b: str
    rows: list[PhaseRow]
    seeds: list[int]


@dataclass(frozen=True)
class Aggregate:
    arms: dict[str, ArmStats]
    contrasts: dict[str, Contrast]
    gap_ratio: Ratio | None
    phase: Phase | None


def contrast(records: list[RunRecord], a: str, b: str) -> Contrast:
    """b − a of final val/ce over the seeds both arms finished, with its t-interval."""
    return paired(a, b, values(records, a, "val_ce"), values(records, b, "val_ce"))


def arm_stats(records: list[RunRecord], arm: str) -> ArmStats:
    ok = finished(records, arm)
    compute = {k: (sum(r.value(k) or 0.0 for r in ok.values()) / len(ok) if ok else None) for k in COMPUTE}
    return ArmStats(
        estimate([v for r in ok.values() if (v := r.value("val_ce")) is not None]),
        estimate([v for r in ok.values() if (v := r.value("val_nll")) is not None]),
        sorted(r.seed for r in records if r.arm == arm and not r.ok),
        compute,
    )


def aggregate(study: StudyConfig, records: list[RunRecord]) -> Aggregate:
    """Every number the report's tables show, from the records the statistics use."""
    per_contrast = {name: contrast(records, a, b) for name, (a, b) in study.contrasts.items()}
    ratio = None
    if study.gap_ratio:
        x, y = (per_contrast[c] for c in study.gap_ratio)
        seeds = sorted(set(x.seeds) & set(y.seeds))
        ratio = fieller_ratio([x.at(s) for s in seeds], [y.at(s) for s in seeds])
    return Aggregate(
        {arm: arm_stats(records, arm) for arm in study.arms},
        per_contrast,
        ratio,
        phase_table(study.phase[0], study.phase[1], records) if study.phase else None,
    )


def phase_table(a: str, b: str, records: list[RunRecord]) -> Phase:
    """val/ce of the two phase arms at the end of every stage (and just after each growth), per seed, and their
    paired differences b − a."""
    ra, rb = finished(records, a), finished(records, b)
    seeds = sorted(set(ra) & set(rb))
    if not seeds:
        return Phase(a, b, [], [])
    per_seed = {s: (ra[s].summary.get("stages", []), rb[s].summary.get("stages", [])) for s in seeds}
    n_stages = min(len(x) for pair in per_seed.values() for x in pair)
    out = []
    for k in range(n_stages):
        for point in ["start", "end"] if k > 0 else ["end"]:
            va = [per_seed[s][0][k][point]["val/ce"] for s in seeds]
            vb = [per_seed[s][1][k][point]["val/ce"] for s in seeds]
            diff = estimate([y - x for x, y in zip(va, vb, strict=True)])
            out.append(
                PhaseRow(
                    k,
                    "after growth" if point == "start" else "stage end",
                    per_seed[seeds[0]][0][k]["n_layer"],
                    sum(va) / len(va),
                    sum(vb) / len(vb),
                    diff,
                    b if diff.mean is not None and diff.mean < 0 else a,
                )
            )
    return Phase(a, b, out, seeds)
