"""Figures, built only from what run and study directories hold on disk.

`plot_runs(run_dirs, out_dir)` draws one set of figures for any number of runs — one run (the
figures `normgrow run` leaves in its run directory) or several side by side (pre vs post in a
study): the same axes, one colour per run, stage boundaries marked. study/report/figures.py draws a
study's with these helpers (study/report/study.py writes the text around them).

    val_ce.png            the learning curve against active-layer tokens, stage boundaries dashed: curve/ce at
                          every evaluation (the curve subset, data.curve_tokens), or val/ce for runs written
                          before curve/… was logged (curve_records)
    boundary_rms.png      residual RMS at each growth boundary over training, per token class
    struct_content.png    structural / content RMS ratio at the boundaries over training
    identity.png          identity-ness of every block at the end of each stage: relative update,
                          cosine, and probe-CE change when the block is skipped
"""

from __future__ import annotations

import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from normgrow.errors import NormgrowError
from normgrow.train.rundir import RunDir

COLORS = [f"C{i}" for i in range(10)]  # matplotlib's default colour cycle, by reference


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend, imported when a figure is drawn: the processes that
    draw none (a study's runs, `--no-plots`) never pay its import."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


LINE_STYLES = ["-", "--", ":", "-."]


def legend(ax, **kw) -> None:
    """A legend only where something is labelled (a joint run has no growth boundary to draw)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**kw)


def run_label(run_dir: Path) -> str:
    cfg = RunDir(run_dir).config()
    depths = "→".join(str(s.n_layer) for s in cfg.curriculum.stages)
    return f"{cfg.model.norm} {depths} ({run_dir.name})"


def _stage_lines(ax, metrics: list[dict], x_key: str, color) -> None:
    for r in metrics:
        if r["event"] == "stage_start" and r["stage"] > 0:
            ax.axvline(r[x_key], color=color, ls="--", lw=0.8, alpha=0.6)


def budget_axis(ax, budgets) -> None:
    """A log x axis of budget scales with a tick at each budget, labelled as written (1, 2, 4; not 2×10⁰)."""
    ax.set_xscale("log")
    ticks = sorted(set(budgets))
    ax.set_xticks(ticks, [f"{b:g}" for b in ticks])
    ax.minorticks_off()
    ax.set_xlabel("budget scale")


def save_figure(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    pyplot().close(fig)
    return path


CURVE_KEYS = ("curve/ce", "val/ce", "curve/nll", "val/nll")  # what a learning curve is drawn from, in preference
CURVE_TITLES = {
    "curve/ce": "CE against the teacher on the curve subset, at every evaluation",
    "val/ce": "validation CE against the teacher",
    "curve/nll": "NLL on the curve subset, at every evaluation",
    "val/nll": "validation NLL",
}


def curve_records(metrics: list[dict]) -> tuple[str, list[dict]]:
    """(key, records) of a run's learning curve, in the order logged: curve/ce, which every evaluation of a run logs
    on the same curve subset (stage starts and ends, interval and dense ones), else val/ce (a run written before
    curve/… existed, whose interval evaluations carried val/…), else the NLL of a run without a teacher. The
    pre_growth event repeats the previous stage's end and is left out."""
    for key in CURVE_KEYS:
        recs = [r for r in metrics if key in r and r["event"] != "pre_growth"]
        if recs:
            return key, recs
    return CURVE_KEYS[0], []


def plot_val_ce(runs: list[Path], out: Path) -> Path:
    fig, ax = pyplot().subplots(figsize=(6.4, 4))
    keys = []
    for i, run in enumerate(runs):
        m = RunDir(run).metrics()
        key, ev = curve_records(m)
        keys.append(key)
        ax.plot(
            [r["active_layer_tokens"] for r in ev],
            [r[key] for r in ev],
            "o-",
            ms=3,
            color=COLORS[i % 10],
            label=run_label(run),
        )
        _stage_lines(ax, m, "active_layer_tokens", COLORS[i % 10])
    keys = sorted(set(keys), key=CURVE_KEYS.index) or [CURVE_KEYS[0]]
    ax.set_xlabel("active-layer tokens (tokens × blocks)")
    ax.set_ylabel(f"{' | '.join(keys)} (nats/token)")
    ax.set_title(CURVE_TITLES[keys[0]] if len(keys) == 1 else "learning curves (runs logged different measures)")
    legend(ax, fontsize=7)
    ax.grid(alpha=0.3)
    return save_figure(fig, out / "val_ce.png")


def _boundaries(run: Path) -> list[tuple[int, dict[int, int]]]:
    """The run's growth boundaries, each as (its residual index in the model just grown, {stage: residual index
    of the same representation at that stage}). The representation is the output of the trained block below
    the inserted one: before its event it sits b − (blocks inserted below b) deep, and a later event that
    inserts blocks below it moves it up. For append-style growth every index is b. (Runs written before
    events named their boundaries: the prefix depth.)"""
    events = [r for r in RunDir(run).metrics() if r["event"] == "growth"]
    out: list[tuple[int, dict[int, int]]] = []
    for e in events:
        new = e.get("grow/new_blocks", list(range(e["grow/from"], e["grow/to"])))
        for b in e.get("grow/boundaries", [e["grow/from"]]):
            at = {e["stage"] - 1: b - sum(1 for p in new if p < b), e["stage"]: b}
            r = b
            for later in events:
                if later["stage"] <= e["stage"]:
                    continue
                added = set(later.get("grow/new_blocks", []))
                old_positions = [q for q in range(later["grow/to"]) if q not in added]  # where old blocks went
                r = old_positions[r - 1] + 1 if r > 0 else 0  # the output of old block r − 1
                at[later["stage"]] = r
            out.append((b, at))
    return out


def _at(records: list[dict], at: dict[int, int], key: str) -> list[tuple[float, Any]]:
    """(active-layer tokens, record[key][index]) over the records whose stage the boundary is defined at."""
    return [
        (r["active_layer_tokens"], r[key][at[r["stage"]]])
        for r in records
        if r.get("stage") in at and len(r[key]) > at[r["stage"]]
    ]


def plot_boundary_rms(runs: list[Path], out: Path) -> Path:
    fig, axes = pyplot().subplots(1, 2, figsize=(10, 4), sharey=False)
    for i, run in enumerate(runs):
        diag = RunDir(run).diagnostics()
        if not diag:
            continue
        for j, (b, at) in enumerate(_boundaries(run)):
            pts = _at(diag, at, "residual_rms")
            xs = [p[0] for p in pts]
            ls = ["-", ":", "-."][j % 3]
            axes[0].plot(
                xs,
                [p[1]["all"] for p in pts],
                ls,
                color=COLORS[i % 10],
                marker="o",
                ms=2,
                label=f"{run_label(run)} · boundary {b}",
            )
            axes[1].plot(
                xs,
                [p[1]["structural"] for p in pts],
                ls,
                color=COLORS[i % 10],
                marker="^",
                ms=2,
                label=f"structural · b{b} · {run.name}",
            )
            axes[1].plot(
                xs,
                [p[1]["content"] for p in pts],
                ls,
                color=COLORS[i % 10],
                marker="s",
                ms=2,
                alpha=0.5,
                label=f"content · b{b} · {run.name}",
            )
        _stage_lines(axes[0], RunDir(run).metrics(), "active_layer_tokens", COLORS[i % 10])
    axes[0].set_title("residual RMS at the growth boundary")
    axes[1].set_title("… per token class")
    for ax in axes:
        ax.set_xlabel("active-layer tokens")
        ax.set_ylabel("RMS of the residual stream")
        lo, hi = ax.get_ylim()
        if lo > 0 and hi / lo > 20:  # pre-norm drift spans decades; post-norm stays near its gains
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
        legend(ax, fontsize=6)
    return save_figure(fig, out / "boundary_rms.png")


def plot_struct_content(runs: list[Path], out: Path) -> Path:
    fig, ax = pyplot().subplots(figsize=(6.4, 4))
    for i, run in enumerate(runs):
        diag = RunDir(run).diagnostics()
        for j, (b, at) in enumerate(_boundaries(run)):
            pts = [p for p in _at(diag, at, "struct_content_ratio") if p[1] is not None]
            ax.plot(
                [p[0] for p in pts],
                [p[1] for p in pts],
                ["-", ":", "-."][j % 3],
                marker="o",
                ms=2,
                color=COLORS[i % 10],
                label=f"{run_label(run)} · boundary {b}",
            )
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("active-layer tokens")
    ax.set_ylabel("RMS structural / RMS content")
    ax.set_title("structural-token scale drift at the boundary")
    legend(ax, fontsize=7)
    ax.grid(alpha=0.3)
    return save_figure(fig, out / "struct_content.png")


def plot_identity(runs: list[Path], out: Path) -> Path:
    fig, axes = pyplot().subplots(1, 3, figsize=(13, 4))
    for i, run in enumerate(runs):
        ends = [r for r in RunDir(run).diagnostics() if r["event"] == "stage_end"]
        for j, r in enumerate(ends):
            blocks = list(range(r["n_layer"]))
            style = dict(
                color=COLORS[i % 10],
                marker="o",
                ms=3,
                alpha=0.4 + 0.6 * (j + 1) / len(ends),
                label=f"{run.name} · end of stage {r['stage']}",
            )
            axes[0].plot(blocks, r["rel_update"], **style)
            axes[1].plot(blocks, r["cos"], **style)
            if r.get("skip_ce_delta"):
                axes[2].plot(blocks, r["skip_ce_delta"], **style)
    for ax, title in zip(
        axes, ("relative update ‖B(h)−h‖/‖h‖", "cos(h, B(h))", "probe CE change when skipped"), strict=True
    ):
        ax.set_title(title)
        ax.set_xlabel("block")
        ax.grid(alpha=0.3)
    axes[2].set_yscale("symlog", linthresh=1e-3)
    legend(axes[0], fontsize=6)
    return save_figure(fig, out / "identity.png")


def plot_collapse(runs: list[Path], out: Path) -> Path:
    """Collapse of the residual stream at the end of training: the energy share of the direction all tokens
    share, and the mean cosine between positions, per residual index (position 0 excluded)."""
    fig, axes = pyplot().subplots(1, 2, figsize=(10, 4))
    for i, run in enumerate(runs):
        ends = [r for r in RunDir(run).diagnostics() if r["event"] == "stage_end" and "collapse_share" in r]
        if not ends:
            continue
        r = ends[-1]
        xs = list(range(len(r["collapse_share"])))
        axes[0].plot(xs, r["collapse_share"], "o-", ms=3, color=COLORS[i % 10], label=run_label(run))
        axes[1].plot(xs, r["collapse_cos"], "o-", ms=3, color=COLORS[i % 10], label=run_label(run))
    for ax, title in zip(axes, ("energy share of the mean direction", "mean cosine between positions"), strict=True):
        ax.set_title(title)
        ax.set_xlabel("residual index (0 = embeddings, i = after block i−1)")
        ax.set_ylim(-0.05, 1.05)
        ax.grid(alpha=0.3)
    legend(axes[0], fontsize=6)
    return save_figure(fig, out / "collapse.png")


def plot_runs(runs: Sequence[str | Path], out_dir: str | Path) -> dict[str, Path]:
    """All figures for these runs into out_dir: {figure name: file}."""
    runs = typing.cast(list[Path], [Path(r) for r in runs])
    for run in runs:  # before any figure is written: an empty curve would be a figure of nothing
        if not curve_records(RunDir(run).metrics())[1]:
            raise NormgrowError(f"{run}: nothing to plot yet (no evaluation in metrics.jsonl)")
    out = Path(out_dir)
    made = {"val_ce": plot_val_ce(runs, out)}
    diags = [RunDir(r).diagnostics() for r in runs]
    if any(diags):
        made.update(
            boundary_rms=plot_boundary_rms(runs, out),
            struct_content=plot_struct_content(runs, out),
            identity=plot_identity(runs, out),
        )
    if any("collapse_share" in rec for d in diags for rec in d):
        made["collapse"] = plot_collapse(runs, out)
    return made
