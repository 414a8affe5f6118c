"""Figures and the study report, built only from what run and study directories hold on disk.

`plot_runs(run_dirs, out_dir)` draws one set of figures for any number of runs — one run (the
figures `normgrow run` leaves in its run directory) or several side by side (pre vs post in a
study): the same axes, one colour per run, stage boundaries marked. `write_report` turns a
study's results rows and statistics (stats.py) into report.md and its figures.

    val_ce.png            val/ce against active-layer tokens, stage boundaries dashed
    boundary_rms.png      residual RMS at each growth boundary over training, per token class
    struct_content.png    structural / content RMS ratio at the boundaries over training
    identity.png          identity-ness of every block at the end of each stage: relative update,
                          cosine, and probe-CE change when the block is skipped
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from normgrow.config import load_config  # noqa: E402
from normgrow.rundir import read_jsonl, read_summary  # noqa: E402

COLORS = plt.rcParams["axes.prop_cycle"].by_key()["color"]
LINE_STYLES = ["-", "--", ":", "-."]


def run_label(run_dir: Path) -> str:
    cfg = load_config(str(run_dir / "config.yaml"))
    depths = "→".join(str(s.n_layer) for s in cfg.curriculum.stages)
    return f"{cfg.model.norm} {depths} ({run_dir.name})"


def _stage_lines(ax, metrics: list[dict], x_key: str, color) -> None:
    for r in metrics:
        if r["event"] == "stage_start" and r["stage"] > 0:
            ax.axvline(r[x_key], color=color, ls="--", lw=0.8, alpha=0.6)


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)
    return path


def plot_val_ce(runs: list[Path], out: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6.4, 4))
    key = None
    for i, run in enumerate(runs):
        m = read_jsonl(run / "metrics.jsonl")
        key = "val/ce" if any("val/ce" in r for r in m) else "val/nll"
        ev = [r for r in m if key in r and r["event"] != "pre_growth"]
        ax.plot([r["active_layer_tokens"] for r in ev], [r[key] for r in ev], "o-", ms=3, color=COLORS[i % 10],
                label=run_label(run))
        _stage_lines(ax, m, "active_layer_tokens", COLORS[i % 10])
    ax.set_xlabel("active-layer tokens (tokens × blocks)")
    ax.set_ylabel(f"{key} (nats/token)")
    ax.set_title("validation CE against the teacher" if key == "val/ce" else "validation NLL")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return _save(fig, out / "val_ce.png")


def _boundaries(run: Path) -> list[int]:
    """Residual indices that are growth boundaries in this run, as its growth events recorded them (runs
    written before events named their boundaries: the prefix depth, the boundary of appending)."""
    bounds = []
    for r in read_jsonl(run / "metrics.jsonl"):
        if r["event"] == "growth":
            bounds += [b for b in r.get("grow/boundaries", [r["grow/from"]]) if b not in bounds]
    return bounds


def plot_boundary_rms(runs: list[Path], out: Path) -> Path:
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=False)
    for i, run in enumerate(runs):
        diag = read_jsonl(run / "diagnostics.jsonl")
        if not diag:
            continue
        for j, b in enumerate(_boundaries(run)):
            pts = [(r["active_layer_tokens"], r["residual_rms"][b]) for r in diag if len(r["residual_rms"]) > b]
            xs = [p[0] for p in pts]
            ls = ["-", ":", "-."][j % 3]
            axes[0].plot(xs, [p[1]["all"] for p in pts], ls, color=COLORS[i % 10], marker="o", ms=2,
                         label=f"{run_label(run)} · boundary {b}")
            axes[1].plot(xs, [p[1]["structural"] for p in pts], ls, color=COLORS[i % 10], marker="^", ms=2,
                         label=f"structural · b{b} · {run.name}")
            axes[1].plot(xs, [p[1]["content"] for p in pts], ls, color=COLORS[i % 10], marker="s", ms=2, alpha=0.5,
                         label=f"content · b{b} · {run.name}")
        _stage_lines(axes[0], read_jsonl(run / "metrics.jsonl"), "active_layer_tokens", COLORS[i % 10])
    axes[0].set_title("residual RMS at the growth boundary")
    axes[1].set_title("… per token class")
    for ax in axes:
        ax.set_xlabel("active-layer tokens")
        ax.set_ylabel("RMS of the residual stream")
        lo, hi = ax.get_ylim()
        if lo > 0 and hi / lo > 20:  # pre-norm drift spans decades; post-norm stays near its gains
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    return _save(fig, out / "boundary_rms.png")


def plot_struct_content(runs: list[Path], out: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6.4, 4))
    for i, run in enumerate(runs):
        diag = read_jsonl(run / "diagnostics.jsonl")
        for j, b in enumerate(_boundaries(run)):
            pts = [(r["active_layer_tokens"], r["struct_content_ratio"][b]) for r in diag
                   if len(r["struct_content_ratio"]) > b and r["struct_content_ratio"][b] is not None]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], ["-", ":", "-."][j % 3], marker="o", ms=2,
                    color=COLORS[i % 10], label=f"{run_label(run)} · boundary {b}")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("active-layer tokens")
    ax.set_ylabel("RMS structural / RMS content")
    ax.set_title("structural-token scale drift at the boundary")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return _save(fig, out / "struct_content.png")


def plot_identity(runs: list[Path], out: Path) -> Path:
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    for i, run in enumerate(runs):
        ends = [r for r in read_jsonl(run / "diagnostics.jsonl") if r["event"] == "stage_end"]
        for j, r in enumerate(ends):
            blocks = list(range(r["n_layer"]))
            style = dict(color=COLORS[i % 10], marker="o", ms=3, alpha=0.4 + 0.6 * (j + 1) / len(ends),
                         label=f"{run.name} · end of stage {r['stage']}")
            axes[0].plot(blocks, r["rel_update"], **style)
            axes[1].plot(blocks, r["cos"], **style)
            if r.get("skip_ce_delta"):
                axes[2].plot(blocks, r["skip_ce_delta"], **style)
    for ax, title in zip(axes, ("relative update ‖B(h)−h‖/‖h‖", "cos(h, B(h))", "probe CE change when skipped")):
        ax.set_title(title)
        ax.set_xlabel("block")
        ax.grid(alpha=0.3)
    axes[2].set_yscale("symlog", linthresh=1e-3)
    axes[0].legend(fontsize=6)
    return _save(fig, out / "identity.png")


def plot_runs(runs: list[str | Path], out_dir: str | Path) -> dict[str, Path]:
    """All figures for these runs into out_dir: {figure name: file}."""
    runs = [Path(r) for r in runs]
    out = Path(out_dir)
    made = {"val_ce": plot_val_ce(runs, out)}
    if any((r / "diagnostics.jsonl").is_file() for r in runs):
        made.update(boundary_rms=plot_boundary_rms(runs, out), struct_content=plot_struct_content(runs, out),
                    identity=plot_identity(runs, out))
    return made


# ----------------------------------------------------------------------------- study report


def _fmt(x, nd: int = 4) -> str:
    return "—" if x is None or x == "" else f"{float(x):.{nd}f}"


def _ci(stat: dict, nd: int = 4) -> str:
    if stat["mean"] is None:
        return "—"
    if stat["ci95"] is None:
        return f"{stat['mean']:.{nd}f}"
    return f"{stat['mean']:.{nd}f} ± {stat['ci95']:.{nd}f}"


def plot_study_val_ce(study, rows: list[dict], study_dir: Path, out: Path) -> Path:
    """val/ce against active-layer tokens for every arm (first finished seed), stage boundaries marked."""
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
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
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    return _save(fig, out / "val_ce_vs_compute.png")


def plot_phase_gap(phase: dict, out: Path) -> Path:
    """b − a at every stage boundary, with 95% intervals when there are several seeds."""
    fig, ax = plt.subplots(figsize=(6.4, 4))
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
    return _save(fig, out / "phase_gap.png")


def _finished(rows: list[dict], arm: str) -> list[dict]:
    """An arm's finished runs, lowest seed first."""
    return sorted((r for r in rows if r["arm"] == arm and r["status"] == "ok"), key=lambda r: int(r["seed"]))


def final_diagnostics(run_dir: Path) -> dict[str, float]:
    """The scalar values of a run's last end-of-stage diagnostics record (every registered diagnostic's)."""
    ends = [r for r in read_jsonl(run_dir / "diagnostics.jsonl") if r["event"] == "stage_end"]
    if not ends:
        return {}
    skip = {"step", "tokens", "active_layer_tokens", "n_layer", "stage"}
    return {k: v for k, v in ends[-1].items()
            if k not in skip and isinstance(v, (int, float)) and not isinstance(v, bool)}


def diagnostics_table(study, rows: list[dict], study_dir: Path) -> list[str]:
    """Markdown: scalar diagnostics at the end of training, one column per arm (its lowest finished seed)."""
    cols = {arm: final_diagnostics(study_dir / ok[0]["run_dir"]) for arm in study.arms if (ok := _finished(rows, arm))}
    keys = sorted({k for v in cols.values() for k in v})
    if not keys:
        return []
    L = ["## Diagnostics at the end of training (probe batch, lowest finished seed)", "",
         "| diagnostic | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for k in keys:
        L.append(f"| {k} | " + " | ".join(_fmt(cols[a].get(k)) for a in cols) + " |")
    return L + [""]


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
        figs += [made[k] for k in ("boundary_rms", "struct_content", "identity") if k in made]
    return figs


def _header(study, rows: list[dict], study_dir: Path) -> list[str]:
    n_seeds = len(study.seeds)
    L = [f"# Study `{study.name}`", ""]
    L.append(f"{len(study.arms)} arms × {n_seeds} seed{'s' if n_seeds > 1 else ''} ({', '.join(map(str, study.seeds))}); "
             f"base preset `{study.base}`, budget scale {study.budget_scale}. Metric: final validation CE against the "
             "teacher (`val/ce`, nats/token, full vocabulary, T=1), lower is better. Regenerate with "
             f"`normgrow report {study_dir}`.")
    L.append("")
    if n_seeds < 2:
        L += ["> One seed: no confidence intervals are available; differences below are single-run values.", ""]
    cached = sorted({s["train_teacher"] for r in rows if r["status"] == "ok"
                     for s in [read_summary(study_dir / r["run_dir"])] if s and "teacher cache" in (s.get("train_teacher") or "")})
    if cached:
        L += ["> **Trained from a top-k teacher cache**, not the online teacher: " + "; ".join(f"`{c}`" for c in cached)
              + ". `val/ce` is still exact (online teacher, full vocabulary), but the training signal lumps the "
              "teacher's tail into one bucket, which shifts arms by different amounts; check the effect sizes against "
              "online runs before quoting them.", ""]
    failed = [r for r in rows if r["status"] != "ok"]
    if failed:
        L += ["**Runs that did not finish:**", ""]
        L += [f"- `{r['arm']}` seed {r['seed']}: {r['status']} — {r['error']}" for r in failed]
        L.append("")
    return L


def _arms_section(rows: list[dict], agg: dict) -> list[str]:
    L = ["## Validation CE per arm", "", "| arm | norm | curriculum | val/ce (mean ± 95% CI) | sd | val/nll | seeds |",
         "|---|---|---|---|---|---|---|"]
    for arm, a in agg["arms"].items():
        r0 = next((r for r in rows if r["arm"] == arm), None)
        L.append(f"| {arm} | {r0['norm']} | {r0['curriculum']} | {_ci(a['val_ce'])} | {_fmt(a['val_ce']['sd'])} | "
                 f"{_fmt(a['val_nll']['mean'])} | {a['val_ce']['n']}{' (failed: ' + str(a['failed']) + ')' if a['failed'] else ''} |")
    return L + [""]


def _contrasts_section(study, agg: dict) -> list[str]:
    if not agg["contrasts"]:
        return []
    L = ["## Contrasts (paired over seeds, b − a; negative = b better)", "",
         "| contrast | a | b | b − a (mean ± 95% CI) | per seed |", "|---|---|---|---|---|"]
    for name, c in agg["contrasts"].items():
        per = ", ".join(f"{d:+.4f}" for d in c["diffs"]) or "—"
        L.append(f"| {name} | {c['a']} | {c['b']} | {_ci(c) if c['mean'] is not None else '—'} | {per} |")
    L.append("")
    if study.gap_ratio:
        x, y = study.gap_ratio
        ratio = agg["gap_ratio"]
        L += [f"|{x}| / |{y}| = **{ratio:.1f}**" if ratio is not None else f"|{x}| / |{y}|: not available", ""]
    return L


def _phase_section(ph: dict | None) -> list[str]:
    if not ph:
        return []
    L = [f"## Phase-wise: `{ph['a']}` vs `{ph['b']}` at every stage boundary", "",
         f"| stage | blocks | point | {ph['a']} | {ph['b']} | {ph['b']} − {ph['a']} | leader |",
         "|---|---|---|---|---|---|---|"]
    for r in ph["rows"]:
        L.append(f"| {r['stage']} | {r['n_layer']} | {r['point']} | {r['a']:.4f} | {r['b']:.4f} | {_ci(r['diff'])} | "
                 f"{r['leader']} |")
    L.append("")
    c = ph["crossover"]
    if c:
        L.append(f"**Crossover:** the lead passes from `{c['from']}` to `{c['to']}` at stage {c['stage']} "
                 f"({c['n_layer']} blocks), i.e. once blocks are appended.")
    elif ph["rows"]:
        L.append(f"**No crossover:** `{ph['rows'][-1]['leader']}` leads at every stage end.")
    return L + [""]


def _compute_section(agg: dict) -> list[str]:
    L = ["## Compute (mean over finished seeds)", "",
         "| arm | tokens | active-layer tokens | trainable-layer tokens | est. FLOPs |", "|---|---|---|---|---|"]
    for arm, a in agg["arms"].items():
        cp = a["compute"]
        if cp["tokens"] is None:
            L.append(f"| {arm} | — | — | — | — |")
        else:
            L.append(f"| {arm} | {cp['tokens']:,.0f} | {cp['active_layer_tokens']:,.0f} | "
                     f"{cp['trainable_layer_tokens']:,.0f} | {cp['flops']:.3g} |")
    return L + [""]


def write_report(study, rows: list[dict], agg: dict, study_dir: Path) -> Path:
    """report.md (self-contained text, figures linked from plots/) and the figures."""
    study_dir = Path(study_dir)
    figs = study_figures(study, rows, agg, study_dir)
    L = _header(study, rows, study_dir)
    L += _arms_section(rows, agg)
    L += _contrasts_section(study, agg)
    L += _phase_section(agg["phase"])
    L += _compute_section(agg)
    L += diagnostics_table(study, rows, study_dir)
    L += ["## Figures", ""]
    for f in figs:
        L += [f"![{f.stem}](plots/{f.name})", ""]
    L += ["## Reproduce", "", f"`normgrow study {study_dir}/study.yaml -o {study_dir}` reruns every missing run; "
          "each run's resolved config is in `configs/`, its metrics, diagnostics and summary in `runs/`."]
    path = study_dir / "report.md"
    tmp = path.with_name("report.md.tmp")
    tmp.write_text("\n".join(L) + "\n")
    tmp.replace(path)
    return path
