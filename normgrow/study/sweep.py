"""Sweep studies: a study's arms and seeds run at every point of one or two sweep axes.

A study file may add

    sweep:
      axes:
        - key: model.d_model            # any run-config key
          values: [32, 64, 128]
          also: {model.d_ff: [96, 192, 384]}   # keys that move with it, one value per point (optional)
        - key: curriculum.growth        # an optional second axis: the grid of both
          values: [append, interleave]
      budget_rule: params               # optional: every stage budget × (N / N_ref)^budget_exponent
      budget_exponent: 1.0

Every point is a complete study of its own (`points/<label>/`: study.yaml, configs, runs, logs,
results.csv, report.md — `normgrow report points/<label>` works on it), with the study's overrides
plus the point's. The budget rule `params` scales the study's budgets by the point's non-embedding
parameters (the blocks of the full-depth student, counted on blocks built on the meta device) over
those of the first point (which keeps the study's budget as written): tokens ∝ parameters at
exponent 1 (the compute-optimal rule of thumb), a fixed budget without a rule.

The sweep's own report.md has, per contrast, a table and a figure of the contrast (b − a of val/ce,
paired over seeds) against the first axis with 95% intervals (one line per value of the second axis),
and a sentence generated from those numbers: where the sign is resolved (the interval excludes 0),
where it is not, and between which points it changes, if anywhere.

A budget ladder (`budgets: [0.5, 1, 2]`, ladder.py) is planned the same way, as a sweep over budget_scale:
one point per budget (`ladder_points`, labels `b0.5`, `b1`, …), each a complete sub-study under
`budgets/<label>/`, all jobs in one launch queue; only its report differs.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from normgrow.config import ModelConfig, RunConfig
from normgrow.nn.model import block_parameters
from normgrow.run.plots import pyplot
from normgrow.study.config import StudyConfig, complete
from normgrow.study.engine.stats import Contrast
from normgrow.study.engine.verdicts import roles_within
from normgrow.study.sections import SECTIONS, SweepConfig, arms_at, budget_label, section
from normgrow.teacher.load import teacher_shape


@dataclass(frozen=True)
class Point:
    label: str  # directory name under points/, e.g. "d_model@64" or "d_model@64+growth@interleave" (no "=": the
    # command line reads key=value arguments as overrides)
    coords: tuple  # the axis values, in axis order
    overrides: tuple[str, ...]  # run overrides of this point (axis keys and their `also` keys)


def short(key: str) -> str:
    """The last part of a dotted key (model.d_model → d_model), for labels."""
    return key.rsplit(".", 1)[-1]


def points(s: SweepConfig) -> list[Point]:
    """Every point of the grid, first axis outermost."""
    out = []
    for idx in itertools.product(*(range(len(ax.values)) for ax in s.axes)):
        over, label, coords = [], [], []
        for ax, i in zip(s.axes, idx, strict=True):
            v = ax.values[i]
            over.append(f"{ax.key}={v}")
            over.extend(f"{k}={vals[i]}" for k, vals in ax.also.items())
            label.append(f"{short(ax.key)}@{v}")
            coords.append(v)
        out.append(Point("+".join(label).replace("/", "_").replace("=", "_"), tuple(coords), tuple(over)))
    return out


def ladder_points(budgets: list[float]) -> list[Point]:
    """A budget ladder as points of a sweep over budget_scale, smallest budget first."""
    return [Point(budget_label(b), (b,), ()) for b in budgets]


def sub_points(study: StudyConfig) -> list[Point]:
    """The sub-studies of a sweep (its grid) or of a budget ladder (its budgets), in report order."""
    return ladder_points(study.budgets) if study.budgets else points(study.sweep)


def sub_root(study: StudyConfig) -> str:
    """The directory under a sweep or ladder study that holds its sub-studies: points/ or budgets/."""
    return "budgets" if study.budgets else "points"


def axis_keys(study: StudyConfig) -> list[str]:
    """The columns a sweep or ladder adds to its results.csv rows: the axis keys, or budget_scale."""
    return ["budget_scale"] if study.budgets else [ax.key for ax in study.sweep.axes]


PAPER_TOKENS_PER_PARAM = 1_000_341_504 / 141_578_496  # the paper preset's joint run over its student's blocks: 7.07


def non_embedding_params(m: ModelConfig) -> int:
    """Parameters of the full-depth student's blocks (what the budget rule scales by)."""
    return sum(block_parameters(m, i) for i in range(m.n_layer))


def budget_factor(s: SweepConfig, cfg: RunConfig, reference: RunConfig) -> float:
    """How much the point with config `cfg` multiplies the study's budgets (1 without a rule)."""
    if s.budget_rule is None:
        return 1.0
    return (non_embedding_params(cfg.model) / non_embedding_params(reference.model)) ** s.budget_exponent


# ----------------------------------------------------------------------------- the sweep's report


def capacity(cfg: RunConfig) -> dict:
    """The student's and the teacher's non-embedding parameters and their ratio (teacher None when its shape is
    unknown): what a width axis changes besides the width when the teacher stays the same."""
    student, shape = non_embedding_params(cfg.model), teacher_shape(cfg)
    teacher = non_embedding_params(shape) if shape is not None else None
    return {"student": student, "teacher": teacher, "ratio": teacher / student if teacher else None}


def capacity_lines(configs: list[tuple[str, RunConfig]]) -> list[str]:
    """A table of each point's teacher / student non-embedding parameters, and a sentence saying whether the ratio
    is the same at every point (a contrast that changes along the axis can then be attributed to the axis) or not."""
    rows = [(label, capacity(cfg)) for label, cfg in configs]
    L = [
        "## Teacher and student capacity",
        "",
        "| point | student non-embedding | teacher non-embedding | teacher / student |",
        "|---|---|---|---|",
    ]
    for label, c in rows:
        t, r = (f"{c['teacher']:,}", f"{c['ratio']:.2f}×") if c["ratio"] else ("unknown", "—")
        L.append(f"| {label} | {c['student']:,} | {t} | {r} |")
    ratios = [c["ratio"] for _, c in rows]
    if None in ratios:
        L += [
            "",
            "The teacher's shape is unknown at some point: whether the capacity ratio moves with the axis is not known.",
        ]
    elif max(ratios) / min(ratios) <= 1.05:
        L += [
            "",
            f"The teacher / student ratio is the same at every point ({min(ratios):.2f}× – {max(ratios):.2f}×): a "
            "change along the axis is not a change of the capacity gap.",
        ]
    else:
        L += [
            "",
            f"The teacher / student ratio moves from {ratios[0]:.2f}× to {ratios[-1]:.2f}× along the points: a contrast "
            "that changes along the axis may be a capacity effect, not an effect of the axis itself.",
        ]
    return L + [""]


def sign_of(c: Contrast) -> str | None:
    """'-' or '+' when the 95% interval excludes 0, None when it does not (or there is no interval)."""
    return {-1: "-", 1: "+", 0: None}[c.est.sign]


def sign_sentence(name: str, a: str, b: str, axis: str, series: list[tuple[Any, Contrast]], where: str = "") -> str:
    """One sentence, from the numbers, on the sign of contrast `name` (b − a) along an axis: where it is
    resolved, where not, and between which resolved points it changes."""
    signs = [(v, sign_of(c)) for v, c in series]
    word = {"-": f"negative ({b} better)", "+": f"positive ({a} better)"}
    resolved = [(v, s) for v, s in signs if s is not None]
    open_ = [str(v) for v, s in signs if s is None]
    head = f"{name} ({b} − {a}){where}"
    if not resolved:
        return f"{head}: the sign is undetermined at every {axis} swept (each 95% interval contains 0 or has one seed)."
    changes = [(v1, v2) for (v1, s1), (v2, s2) in zip(resolved, resolved[1:], strict=False) if s1 != s2]
    parts = []
    for s in ("-", "+"):
        at = [str(v) for v, t in resolved if t == s]
        if at:
            parts.append(f"{word[s]} at {axis} {', '.join(at)}")
    text = f"{head}: " + "; ".join(parts)
    if open_:
        text += f"; undetermined at {', '.join(open_)}"
    if changes:
        text += (
            ". The sign changes "
            + " and ".join(f"between {axis} {v1} and {v2}" for v1, v2 in changes)
            + " (both intervals exclude 0)."
        )
    else:
        text += ". No sign change is resolved along the axis."
    return text


def sweep_report_lines(
    study: StudyConfig,
    table: dict[str, list[tuple[Point, Contrast]]],
    figures: dict[str, str],
    configs: Sequence[tuple[str, RunConfig]] = (),
) -> list[str]:
    """report.md of a sweep: each point's capacity (`configs`: a run config per point label), then per contrast a
    table over the points, the figure and the generated sentences."""
    s = study.sweep
    ax0 = s.axes[0]
    L = [
        f"# Sweep study `{study.name}`",
        "",
        f"{len(study.arms)} arms × {len(study.seeds)} seeds at each of {len(points(s))} points "
        f"({' × '.join(f'{a.key} ∈ {a.values}' for a in s.axes)}); base preset `{study.base}`, budget scale "
        f"{study.budget_scale}"
        + (
            f", budgets × (N/N_first)^{s.budget_exponent} with N the non-embedding parameters"
            if s.budget_rule == "params"
            else ""
        )
        + ". Each point is a study of its own: `points/<label>/report.md`. Contrasts are b − a of the final val/ce, "
        "paired over seeds, with 95% t-intervals; a sign is *resolved* where the interval excludes 0.",
        "",
    ]
    if configs:
        L += capacity_lines(list(configs))
    for name, entries in table.items():
        a, b = study.contrasts[name]
        L += [f"## {name} ({b} − {a})", "", "| point | b − a (mean ± 95% CI) | seeds | sign |", "|---|---|---|---|"]
        for p, c in entries:
            if c.est.mean is None:
                L.append(f"| {p.label} | — | 0 | — |")
                continue
            hw = f" ± {c.est.half:.4f}" if c.est.half is not None else ""
            L.append(f"| {p.label} | {c.est.mean:+.4f}{hw} | {c.est.n} | {sign_of(c) or 'undetermined'} |")
        L.append("")
        for line in sentences(study, name, entries):
            L.append(line)
            L.append("")
        if name in figures:
            L += [f"![{name} against {ax0.key}]({figures[name]})", ""]
    return L


def sentences(study: StudyConfig, name: str, entries: list[tuple[Point, Contrast]]) -> list[str]:
    """The sign sentences of one contrast: along the first axis, once per value of the second."""
    a, b = study.contrasts[name]
    axes = study.sweep.axes
    if len(axes) == 1:
        return [sign_sentence(name, a, b, short(axes[0].key), [(p.coords[0], c) for p, c in entries])]
    out = []
    for v in axes[1].values:
        series = [(p.coords[0], c) for p, c in entries if p.coords[1] == v]
        out.append(sign_sentence(name, a, b, short(axes[0].key), series, where=f" at {short(axes[1].key)}={v}"))
    return out


def plot_contrast(study: StudyConfig, name: str, entries: list[tuple[Point, Contrast]], path: Path) -> None:
    """The contrast against the first axis with 95% intervals, one line per value of the second axis."""
    plt = pyplot()
    axes = study.sweep.axes
    fig, ax = plt.subplots(figsize=(4.8, 3.4))
    groups = [None] if len(axes) == 1 else list(axes[1].values)
    numeric = all(isinstance(v, (int, float)) for v in axes[0].values)
    for g in groups:
        sel = [(p, c) for p, c in entries if (g is None or p.coords[1] == g) and c.est.mean is not None]
        xs = [p.coords[0] if numeric else axes[0].values.index(p.coords[0]) for p, _ in sel]
        ys = [c.est.mean for _, c in sel]
        err = [c.est.half or 0.0 for _, c in sel]
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=None if g is None else f"{short(axes[1].key)}={g}")
    ax.axhline(0.0, color="0.5", lw=0.8)
    if numeric:
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(axes[0].values), [str(v) for v in axes[0].values])
    else:
        ax.set_xticks(range(len(axes[0].values)), [str(v) for v in axes[0].values])
    a, b = study.contrasts[name]
    ax.set_xlabel(axes[0].key)
    ax.set_ylabel(f"{b} − {a}  (val/ce, nats)")
    ax.set_title(name)
    if len(groups) > 1:
        ax.legend(frameon=False, fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=150)
    plt.close(fig)


def point_study(study: StudyConfig, p: Point, factor: float):
    """The study one point runs: the sweep's arms and seeds with the point's overrides and budget."""
    return dataclasses.replace(
        study,
        name=f"{study.name}@{p.label}",
        sweep=SweepConfig(),
        overrides=list(study.overrides) + list(p.overrides),
        budget_scale=study.budget_scale * factor,
    )


def rung_study(study: StudyConfig, p: Point):
    """The study one budget of a ladder runs: the ladder's arms that run there and its seeds at that absolute budget
    scale, without the contrasts, pairs, claims roles and regime checks 3 and 4 that need an arm not run there."""
    arms = arms_at(study, p.coords[0])

    def both(pair) -> bool:
        return all(a in arms for a in pair)

    contrasts = {k: pair for k, pair in study.contrasts.items() if both(pair)}
    own = {name: sec.rung(section(study, name), study, arms) for name, sec in SECTIONS.items()}
    return dataclasses.replace(
        complete(study),
        name=f"{study.name}@{p.label}",
        budgets=[],
        holdout=None,
        ladder_base=study.budgets[0] if study.ladder != "rungs" else None,
        budget_scale=p.coords[0],
        arms={name: dataclasses.replace(study.arms[name], budgets=[]) for name in arms},
        contrasts=contrasts,
        gap_ratio=study.gap_ratio if all(x in contrasts for x in study.gap_ratio) else [],
        phase=study.phase if both(study.phase) else [],
        diagnostics_pair=study.diagnostics_pair if both(study.diagnostics_pair) else [],
        claims=roles_within(study.claims, arms),
        **own,
    )
