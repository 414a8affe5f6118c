"""Statistics of a study, computed from plain numbers: results.csv rows and the runs' per-stage evaluations.

- Per arm: mean, sd and a 95% t-interval of the final val/ce over seeds.
- Per contrast (a, b): the paired difference b − a over the seeds both finished, with its t-interval.
- Phase-wise (two curriculum arms): their val/ce at every stage end (and just after each growth),
  per seed, the paired difference, and the stage where the leader changes.
With one seed there is no interval: `ci95` is None and the report says so instead of printing a
zero-width interval. Nothing here reads files or writes text (report.py turns these into words).
"""

from __future__ import annotations

import math
from typing import Optional

T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
       12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}


def t95(df: int) -> float:
    """Two-sided 95% Student-t quantile (tabulated; ≥ 30 degrees of freedom use 1.96 → 2.042 steps)."""
    if df in T95:
        return T95[df]
    keys = sorted(T95)
    for a, b in zip(keys, keys[1:]):
        if a < df < b:
            return T95[b]
    return 1.96


def mean_ci(values: list[float]) -> dict:
    """mean, sd, and the half-width of a 95% t-interval (None with fewer than two values)."""
    n = len(values)
    if n == 0:
        return {"n": 0, "mean": None, "sd": None, "ci95": None}
    mean = sum(values) / n
    if n < 2:
        return {"n": 1, "mean": mean, "sd": None, "ci95": None}
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return {"n": n, "mean": mean, "sd": sd, "ci95": t95(n - 1) * sd / math.sqrt(n)}


COMPUTE = ("tokens", "active_layer_tokens", "trainable_layer_tokens", "flops")


def finished(rows: list[dict], arm: str) -> dict[int, dict]:
    """The rows of an arm's finished runs, by seed."""
    return {int(r["seed"]): r for r in rows if r["arm"] == arm and r["status"] == "ok"}


def aggregate(arms: list[str], contrasts: dict[str, list[str]], gap_ratio: list[str], phase: list[str],
              rows: list[dict], stages: dict[str, list[dict]]) -> dict:
    """Every number the report shows. `rows` are results.csv's; `stages` maps a run (`<arm>-s<seed>`) to
    its summary's per-stage records (only the phase arms' are read)."""
    per_arm = {}
    for arm in arms:
        ok = finished(rows, arm)
        per_arm[arm] = {"val_ce": mean_ci([float(r["val_ce"]) for r in ok.values() if r["val_ce"] != ""]),
                        "val_nll": mean_ci([float(r["val_nll"]) for r in ok.values() if r["val_nll"] != ""]),
                        "failed": sorted(int(r["seed"]) for r in rows if r["arm"] == arm and r["status"] != "ok"),
                        "compute": {k: (sum(float(r[k]) for r in ok.values()) / len(ok) if ok else None)
                                    for k in COMPUTE}}
    per_contrast = {name: paired(rows, a, b) for name, (a, b) in contrasts.items()}
    ratio = None
    if gap_ratio:
        x, y = (per_contrast[c]["mean"] for c in gap_ratio)
        ratio = abs(x) / abs(y) if x is not None and y not in (None, 0) else None
    return {"arms": per_arm, "contrasts": per_contrast, "gap_ratio": ratio,
            "phase": phase_table(phase[0], phase[1], rows, stages) if phase else None}


def paired(rows: list[dict], a: str, b: str) -> dict:
    """b − a of final val/ce over the seeds both arms finished, with its t-interval."""
    ra, rb = finished(rows, a), finished(rows, b)
    seeds = sorted(set(ra) & set(rb))
    diffs = [float(rb[s]["val_ce"]) - float(ra[s]["val_ce"]) for s in seeds]
    return {"a": a, "b": b, "seeds": seeds, "diffs": diffs, **mean_ci(diffs)}


def phase_table(a: str, b: str, rows: list[dict], stages: dict[str, list[dict]]) -> Optional[dict]:
    """val/ce of the two phase arms at the end of every stage (and just after each growth), per seed,
    their paired differences b − a, and the stage where the leader changes (the crossover)."""
    ra, rb = finished(rows, a), finished(rows, b)
    seeds = sorted(set(ra) & set(rb))
    if not seeds:
        return {"a": a, "b": b, "rows": [], "crossover": None, "seeds": []}
    per_seed = {s: (stages[f"{a}-s{s}"], stages[f"{b}-s{s}"]) for s in seeds}
    n_stages = min(len(x) for pair in per_seed.values() for x in pair)
    out = []
    for k in range(n_stages):
        for point in (["start", "end"] if k > 0 else ["end"]):
            va = [per_seed[s][0][k][point]["val/ce"] for s in seeds]
            vb = [per_seed[s][1][k][point]["val/ce"] for s in seeds]
            diff = mean_ci([y - x for x, y in zip(va, vb)])
            out.append({"stage": k, "point": "after growth" if point == "start" else "stage end",
                        "n_layer": per_seed[seeds[0]][0][k]["n_layer"], "a": sum(va) / len(va), "b": sum(vb) / len(vb),
                        "diff": diff, "leader": b if diff["mean"] < 0 else a})
    ends = [r for r in out if r["point"] == "stage end"]
    crossover = None
    for prev, cur in zip(ends, ends[1:]):
        if cur["leader"] != prev["leader"]:
            crossover = {"stage": cur["stage"], "n_layer": cur["n_layer"], "from": prev["leader"], "to": cur["leader"]}
            break
    return {"a": a, "b": b, "rows": out, "crossover": crossover, "seeds": seeds}
