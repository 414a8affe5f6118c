"""A study's figures (plots/): validation CE against compute for every arm, the phase-wise gap at every
stage boundary, and the per-run diagnostics figures of two arms side by side (drawn by normgrow.report,
the run-level figures, so `normgrow report RUN_DIR …` and a study draw them alike)."""

from __future__ import annotations

from pathlib import Path

from normgrow.report import COLORS, LINE_STYLES, legend, plot_runs, pyplot, save_figure
from normgrow.rundir import read_jsonl


def plot_study_val_ce(study, rows: list[dict], study_dir: Path, out: Path) -> Path:
    """val/ce against active-layer tokens for every arm (first finished seed), stage boundaries marked."""
    fig, ax = pyplot().subplots(figsize=(7.5, 4.5))
    norms = sorted({r["norm"] for r in rows})  # one line style per placement, one colour per arm
    for i, arm in enumerate(study.arms):
        ok = _finished(rows, arm)
        if not ok:
            continue
        m = read_jsonl(study_dir / ok[0]["run_dir"] / "metrics.jsonl")
        ev = [r for r in m if "val/ce" in r and r["event"] != "pre_growth"]
        ls = LINE_STYLES[norms.index(ok[0]["norm"]) % len(LINE_STYLES)]
        ax.plot([r["active_layer_tokens"] for r in ev], [r["val/ce"] for r in ev], ls, marker="o", ms=2.5,
                color=COLORS[i % 10], label=f"{arm} (seed {ok[0]['seed']})")
        for r in m:
            if r["event"] == "stage_start" and r["stage"] > 0:
                ax.axvline(r["active_layer_tokens"], color=COLORS[i % 10], ls=":", lw=0.7, alpha=0.5)
    ax.set_xlabel("active-layer tokens (tokens × blocks)")
    ax.set_ylabel("val/ce (nats/token)")
    ax.set_title("validation CE against the teacher; dotted: growth events")
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
    pair = study.diagnostics_pair or study.phase
    runs = [study_dir / ok[0]["run_dir"] for arm in pair if (ok := _finished(rows, arm))]
    if runs:
        made = plot_runs(runs, plots)
        figs += [made[k] for k in ("boundary_rms", "struct_content", "identity", "collapse") if k in made]
    return figs
