"""The validation set in a contrast's interval. Every run of a study is scored on one fixed validation set, so the
usual interval (over seeds) is conditional on it: it says how the contrast moves with the seed, not with the set.
Each run's final evaluation also keeps every validation sequence's mean ce (summary.json `val/ce_per_sequence`; the
mean of them is val/ce), and the same sequences are scored in every run, so per contrast (a, b):

    d[s][i]      = ce_b[s][i] − ce_a[s][i]                      sequence i, seed s (the seeds both arms finished)
    Δ            = mean over s and i of d                       the contrast the report prints
    seed term    = var_s(mean_i d[s][i]) / n                    what the usual interval holds (t, n − 1 df)
    set term     = var_i(mean_s d[s][i]) / N                    a validation set of N sequences drawn again (normal)
    both         = t_{n−1} · √(seed term + set term)            the half-width for a new seed and a new set

and the report names the larger term. With one seed there is no seed term; runs written before per-sequence ce was
kept have no set term (the section says so). Nothing here reads files.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from normgrow.study.engine.stats import t_quantile
from normgrow.study.record import RunRecord, finished

KEY = "val/ce_per_sequence"
Z95 = 1.959963984540054


@dataclass(frozen=True)
class Split:
    """A contrast's half-widths (95%): over seeds, over validation sequences, and both together."""

    delta: float
    seeds: int
    sequences: int
    seed_half: float | None  # None with one seed
    set_half: float
    both_half: float | None

    @property
    def larger(self) -> str:
        if self.seed_half is None:
            return "the validation set (one seed)"
        seed = (self.seed_half / t_quantile(self.seeds - 1)) ** 2
        return "seeds" if seed >= (self.set_half / Z95) ** 2 else "the validation set"


def _var(xs: list[float]) -> float:
    m = sum(xs) / len(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1)


def kept(summary: Mapping) -> list[float] | None:
    """A run's per-sequence ce as its summary holds it, or None when it holds none or one that cannot be its own: not
    a list of finite numbers, or not averaging to the run's val/ce (a summary.json edited by hand)."""
    xs, ce = summary.get(KEY), summary.get("val/ce")
    if not isinstance(xs, list | tuple) or not xs or not isinstance(ce, int | float):
        return None
    if not all(isinstance(x, int | float) and math.isfinite(x) for x in xs):
        return None
    return list(xs) if abs(sum(xs) / len(xs) - ce) <= 1e-9 * max(1.0, abs(ce)) else None


def split(records: list[RunRecord], a: str, b: str) -> Split | None:
    """The contrast b − a with its seed and validation-set terms (module docstring); None where fewer than two
    sequences are kept for a pair of runs."""
    ra, rb = finished(records, a), finished(records, b)
    per = {}
    for s in sorted(set(ra) & set(rb)):
        xa, xb = kept(ra[s].summary), kept(rb[s].summary)
        if xa and xb and len(xa) == len(xb) and len(xa) >= 2:
            per[s] = [y - x for x, y in zip(xa, xb, strict=True)]
    if not per or len({len(v) for v in per.values()}) != 1:
        return None
    seeds, n_seq = sorted(per), len(next(iter(per.values())))
    by_seed = [sum(per[s]) / n_seq for s in seeds]
    by_seq = [sum(per[s][i] for s in seeds) / len(seeds) for i in range(n_seq)]
    delta = sum(by_seed) / len(seeds)
    set_var = _var(by_seq) / n_seq
    if len(seeds) < 2:
        return Split(delta, 1, n_seq, None, Z95 * math.sqrt(set_var), None)
    seed_var, t = _var(by_seed) / len(seeds), t_quantile(len(seeds) - 1)
    return Split(delta, len(seeds), n_seq, t * math.sqrt(seed_var), Z95 * math.sqrt(set_var),
                 t * math.sqrt(seed_var + set_var))  # fmt: skip


def split_lines(contrasts: dict[str, list[str]], records: list[RunRecord]) -> list[str]:
    """The report's section: per contrast Δ, its half-width over seeds, over the validation set and both, and the
    larger term."""
    rows = {name: split(records, a, b) for name, (a, b) in contrasts.items()}
    if not rows:
        return []
    L = [
        "## Seeds and the validation set in the intervals",
        "",
        "Every run is scored on one fixed validation set, so the intervals above vary the seed, not the set. From each "
        "run's ce per validation sequence (the same sequences in every run): the 95% half-width over seeds (t), over "
        "the validation sequences (a set of the same size drawn again; normal), and both together (t over the seeds' "
        "degrees of freedom), with the larger term named (rules: normgrow/study/report/valsample.py).",
        "",
        "| contrast | Δ | seeds | sequences | ± seeds | ± validation set | ± both | larger term |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, sp in rows.items():
        if sp is None:
            L.append(
                f"| {name} | — | — | — | — | — | — | no per-sequence ce (runs written before it was kept, or edited) |"
            )
            continue
        seed = "—" if sp.seed_half is None else f"{sp.seed_half:.4f}"
        both = "—" if sp.both_half is None else f"{sp.both_half:.4f}"
        L.append(
            f"| {name} | {sp.delta:+.4f} | {sp.seeds} | {sp.sequences} | {seed} | {sp.set_half:.4f} | {both} | "
            f"{sp.larger} |"
        )
    return L + [""]
