"""A study's figures (plots/): the learning curve against compute for every arm, the phase-wise gap at every
stage boundary, the curve just after each growth event of the phase arms, and the per-run diagnostics figures
of two arms side by side (drawn by normgrow.report, the run-level figures, so `normgrow report RUN_DIR …` and
a study draw them alike).

    val_ce_vs_compute.png   curve/ce at every evaluation (val/ce for runs written before curve/…) against
                            active-layer tokens, one seed per arm, growth events dotted
    phase_gap.png           b − a of val/ce at every stage boundary of the phase arms
    after_growth.png        per growth event: curve/ce minus its value at the event (the stage_start record
                            right after it) against optimizer steps since the event, per phase arm: the mean
                            over seeds and the min–max band (after_growth_curves)
"""

from __future__ import annotations

from pathlib import Path

from normgrow.report import COLORS, CURVE_KEYS, LINE_STYLES, curve_records, legend, plot_runs, pyplot, save_figure
from normgrow.rundir import read_jsonl


def plot_study_val_ce(study, rows: list[dict], study_dir: Path, out: Path) -> Path:
    """The learning curve (report.curve_records: curve/ce at every evaluation, val/ce for older runs) against
    active-layer tokens for every arm (first finished seed), stage boundaries marked."""
    fig, ax = pyplot().subplots(figsize=(7.5, 4.5))
    norms = sorted({r["norm"] for r in rows})  # one line style per placement, one colour per arm
    keys = set()
    for i, arm in enumerate(study.arms):
        ok = _finished(rows, arm)
        if not ok:
            continue
        m = read_jsonl(study_dir / ok[0]["run_dir"] / "metrics.jsonl")
        key, ev = curve_records(m)
        keys.add(key)
        ls = LINE_STYLES[norms.index(ok[0]["norm"]) % len(LINE_STYLES)]
        ax.plot([r["active_layer_tokens"] for r in ev], [r[key] for r in ev], ls, marker="o", ms=2.5,
                color=COLORS[i % 10], label=f"{arm} (seed {ok[0]['seed']})")
        for r in m:
            if r["event"] == "stage_start" and r["stage"] > 0:
                ax.axvline(r["active_layer_tokens"], color=COLORS[i % 10], ls=":", lw=0.7, alpha=0.5)
    keys = sorted(keys, key=CURVE_KEYS.index) or ["val/ce"]
    ax.set_xlabel("active-layer tokens (tokens × blocks)")
    ax.set_ylabel(f"{' | '.join(keys)} (nats/token)")
    what = "CE on the curve subset (every evaluation)" if keys == ["curve/ce"] else "validation CE"
    ax.set_title(f"{what} against the teacher; dotted: growth", fontsize=10)
    legend(ax, fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    return save_figure(fig, out / "val_ce_vs_compute.png")


def plot_phase_gap(phase: dict, out: Path) -> Path:
    """b − a at every stage boundary, with 95% intervals when there are several seeds."""
    fig, ax = pyplot().subplots(figsize=(6.4, 4))
    rows = phase["rows"]
    labels = [f"s{r['stage']} ({r['n_layer']}b)\n{r['point']}" for r in rows]
    means = [r["diff"]["mean"] for r in rows]
    errs = [r["diff"]["ci95"] or 0.0 for r in rows]
    ax.bar(range(len(rows)), means, yerr=errs, capsize=3,
           color=[COLORS[0] if m < 0 else COLORS[3] for m in means])
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(range(len(rows)), labels, fontsize=7)
    ax.set_ylabel(f"val/ce: {phase['b']} − {phase['a']}")
    ax.set_title(f"phase-wise gap (below 0: {phase['b']} leads)")
    ax.grid(alpha=0.3, axis="y")
    return save_figure(fig, out / "phase_gap.png")


AFTER_GROWTH_EVENTS = ("stage_start", "dense", "eval", "stage_end")  # the records an after-growth curve reads


def after_growth_curves(runs: list[list[dict]]) -> dict[int, dict]:
    """The curve after each growth event, over the runs (seeds) of one arm, from their metrics.jsonl records.

    For the event opening stage s of a run: its stage's records (stage_start, dense, eval, stage_end) holding the
    run's curve key (report.curve_records), as steps since the event (the stage_start record's step) → curve
    value minus the value at the event (that stage_start record's; 0 at step 0). Over the runs: {s: {"key",
    "steps", "mean", "lo", "hi", "runs"}}, at the steps every run measured (the seeds of an arm share a schedule),
    mean and min / max over the runs; an event some run lacks is left out."""
    per_event: dict[int, list[dict[int, float]]] = {}
    keys = set()
    for m in runs:
        key, recs = curve_records(m)
        keys.add(key)
        starts = {r["stage"]: r for r in recs if r["event"] == "stage_start" and r["stage"] > 0}
        for s, start in starts.items():
            pts = {r["step"] - start["step"]: r[key] - start[key] for r in recs
                   if r["stage"] == s and r["event"] in AFTER_GROWTH_EVENTS}
            per_event.setdefault(s, []).append(pts)
    out = {}
    for s, curves in sorted(per_event.items()):
        if len(curves) < len(runs):
            continue
        steps = sorted(set.intersection(*(set(c) for c in curves)))
        vals = [[c[k] for c in curves] for k in steps]
        out[s] = {"key": " | ".join(sorted(keys, key=CURVE_KEYS.index)), "steps": steps, "runs": len(curves),
                  "mean": [sum(v) / len(v) for v in vals], "lo": [min(v) for v in vals], "hi": [max(v) for v in vals]}
    return out


def plot_after_growth(study, rows: list[dict], study_dir: Path, out: Path) -> Path | None:
    """after_growth.png: one panel per growth event, for each arm of the study's phase pair the curve minus its
    value at the event against steps since it (after_growth_curves: mean over seeds, min–max band). None when
    neither arm has a growth event."""
    curves = {}
    for arm in study.phase:
        ok = _finished(rows, arm)
        if ok:
            curves[arm] = after_growth_curves([read_jsonl(study_dir / r["run_dir"] / "metrics.jsonl") for r in ok])
    events = sorted({s for c in curves.values() for s in c})
    if not events:
        return None
    fig, axes = pyplot().subplots(1, len(events), figsize=(max(6.4, 3.6 * len(events) + 1), 4), squeeze=False)
    for ax, s in zip(axes[0], events, strict=True):
        for i, (arm, c) in enumerate(curves.items()):
            if s not in c:
                continue
            e = c[s]
            ax.plot(e["steps"], e["mean"], LINE_STYLES[i % len(LINE_STYLES)], marker="o", ms=2.5, color=COLORS[i % 10],
                    label=f"{arm} ({e['runs']} seeds)")
            ax.fill_between(e["steps"], e["lo"], e["hi"], color=COLORS[i % 10], alpha=0.2, lw=0)
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_title(f"growth into stage {s}", fontsize=9)
        ax.set_xlabel("optimizer steps since the growth event")
        ax.grid(alpha=0.3)
        legend(ax, fontsize=7)
    key = next(e["key"] for c in curves.values() for e in c.values())
    axes[0][0].set_ylabel(f"{key} − its value at the event")
    fig.suptitle(f"{key} after each growth event\nline: mean over seeds; band: min–max over seeds", fontsize=10)
    return save_figure(fig, out / "after_growth.png")


def _finished(rows: list[dict], arm: str) -> list[dict]:
    """An arm's finished runs, lowest seed first."""
    return sorted((r for r in rows if r["arm"] == arm and r["status"] == "ok"), key=lambda r: int(r["seed"]))


def study_figures(study, rows: list[dict], agg: dict, study_dir: Path) -> list[Path]:
    """The study's figures: val/ce against compute, the phase-wise gap, and the diagnostics figures of the
    diagnostics pair (or the phase arms) side by side."""
    plots = study_dir / "plots"
    figs = [plot_study_val_ce(study, rows, study_dir, plots)]
    if agg["phase"] and agg["phase"]["rows"]:
        figs.append(plot_phase_gap(agg["phase"], plots))
    if (after := plot_after_growth(study, rows, study_dir, plots)) is not None:
        figs.append(after)
    pair = study.diagnostics_pair or study.phase
    runs = [study_dir / ok[0]["run_dir"] for arm in pair if (ok := _finished(rows, arm))]
    if runs:
        made = plot_runs(runs, plots)
        figs += [made[k] for k in ("boundary_rms", "struct_content", "identity", "collapse") if k in made]
    return figs
