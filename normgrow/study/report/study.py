"""A study's report.md: every number from the run records (record.py), the statistics (contrasts.py), the
claims' verdicts (verdicts.py), the regime checks' readings (regime.py, above the claims) and the per-run measures
(measures.py); figures from figures.py.

No sentence that states a finding is written by hand: the claims section prints the sentences
the claims generate from the numbers and their intervals, and the tables print numbers with their
intervals (or say that one seed gives none).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from normgrow import atomic
from normgrow.study.choice import RatesAt
from normgrow.study.config import StudyConfig
from normgrow.study.engine.measures import Measures
from normgrow.study.engine.stats import Estimate
from normgrow.study.engine.verdicts import NOT_TESTED, Claim, describe, study_roles
from normgrow.study.envelope import envelope_section
from normgrow.study.record import RunRecord
from normgrow.study.report.contrasts import Aggregate, Phase
from normgrow.study.report.downstream import downstream_section
from normgrow.study.report.figures import dose_response, study_figures
from normgrow.study.report.overview import opening, overview_figure, rates_line, study_lines
from normgrow.study.report.parts import Part, slot
from normgrow.study.report.parts import cautions as part_cautions
from normgrow.study.report.rates import choice_lines, confirm_lines, header_line
from normgrow.study.report.valsample import split_lines

FIGURE_NOTES = {  # a line under a figure whose reading is not evident from the figure alone
    "after_growth": "after_growth: per growth event, curve/ce minus its value at the event (the stage_start record "
    "right after it) against steps since the event, phase arms; mean over seeds, band min–max "
    "(dense window: train.dense_eval_steps).",
}
JUMP_TOLERANCE = 1e-4  # a growth event whose val/ce jump is below this in every run preserved the function


def _fmt(x, nd: int = 4) -> str:
    return "—" if x is None or x == "" else f"{float(x):.{nd}f}"


def _ci(stat: Estimate, nd: int = 4) -> str:
    if stat.mean is None:
        return "—"
    if stat.half is None:
        return f"{stat.mean:.{nd}f}"
    return f"{stat.mean:.{nd}f} ± {stat.half:.{nd}f}"


def _mean(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def _finished(records: list[RunRecord], arm: str) -> list[RunRecord]:
    return sorted((r for r in records if r.arm == arm and r.ok), key=lambda r: r.seed)


def _dtype_lines(measures: Measures) -> list[str]:
    """Which compute dtypes (student/teacher) the runs used, and a caution when they differ between runs."""
    used = sorted({m.dtype for runs in measures.values() for m in runs.values() if m.dtype})
    if not used:
        return []
    if len(used) == 1:
        return [
            f"Computed in {used[0]} (student/teacher; `dtype: auto` resolves per machine, see each run's config.yaml).",
            "",
        ]
    return [
        f"> **Caution: the runs used different compute dtypes** ({', '.join(used)}: student/teacher): a contrast "
        "between arms run at different precisions mixes the precision into the comparison; rerun them on one "
        "kind of machine or set `train.dtype` / `teacher.dtype` explicitly.",
        "",
    ]


def _header(
    study: StudyConfig,
    rows: list[RunRecord],
    all_rows: list[RunRecord],
    study_dir: Path,
    lr_choice: RatesAt | None = None,
) -> list[str]:
    n_seeds = len(study.seeds)
    L = [f"# Study `{study.name}`", ""]
    L.append(
        f"{len(study.arms)} arms × {n_seeds} seed{'s' if n_seeds > 1 else ''} ({', '.join(map(str, study.seeds))}); "
        f"base preset `{study.base}`, budget scale {study.budget_scale}. Metric: final validation CE against the "
        "teacher (`val/ce`, nats/token, full vocabulary, T=1), lower is better; intervals are 95% t-intervals "
        f"over seeds. Regenerate with `normgrow report {study_dir}`."
    )
    L.append("")
    if lr_choice:
        L += [header_line(lr_choice), ""]
    if n_seeds < 2:
        L += ["> One seed: no confidence intervals are available; every claim below is undetermined.", ""]
    # a top-k cache lumps the teacher's tail into one bucket; a full-distribution one (k = V) is the online loss
    cached = sorted(
        {
            r.summary["train_teacher"]
            for r in rows
            if r.ok and "teacher cache + tail bucket" in (r.summary.get("train_teacher") or "")
        }
    )
    if cached:
        L += [
            "> **Trained from a top-k teacher cache**, not the online teacher: "
            + "; ".join(f"`{c}`" for c in cached)
            + ". `val/ce` is still exact (online teacher, full vocabulary), but the training signal lumps the "
            "teacher's tail into one bucket, which shifts arms by different amounts; check the effect sizes against "
            "online runs before quoting them.",
            "",
        ]
    sampled = sorted({r.summary["train_teacher"] for r in rows if r.ok and _from_sampled(r.summary)})
    if sampled:
        L += [
            "> Trained from a **sampled teacher cache**: "
            + "; ".join(f"`{c}`" for c in sampled)
            + ". Its training signal is the full-vocabulary loss in expectation (unbiased), with added gradient "
            "noise; `val/ce` is exact (online teacher).",
            "",
        ]
    failed = [r for r in all_rows if not r.ok]
    if failed:
        L += ["**Runs that did not finish:**", ""]
        L += [
            f"- `{r.arm}` seed {r.seed}{' lr ' + str(r.lr) if r.selected else ''}: {r.status} — {r.error}"
            for r in failed
        ]
        L.append("")
    return L


def collapsed_arms(study: StudyConfig, measures: Measures) -> list[str]:
    """Arms whose worst block's collapse share, mean over seeds at the end of training, exceeds the threshold."""
    out = []
    for arm in study.arms:
        share = _mean([m.collapse_share for m in measures.get(arm, {}).values()])
        if share is not None and share > study.collapse_threshold:
            out.append(arm)
    return out


def _mean_kl(rows: list[RunRecord]) -> float | None:
    """The finished runs' mean val/kl: how far the arms are from their teacher."""
    return _mean([r.value("val_kl") for r in rows if r.ok])


CLAIMS_TITLE = "## The paper's claims at this scale"


def claims_section(
    study: StudyConfig, rows: list[RunRecord], claims: list[Claim], measures: Measures, title: str = CLAIMS_TITLE
) -> list[str]:
    """The claims section of a study's report (its verdicts table and sentences) under `title`; a budget ladder's
    report prints its reference budget's with a title of its own. `rows` are the runs the statistics use."""
    margin = study_roles(study.claims).margin
    return _claims_section(list(claims), collapsed_arms(study, measures), margin, _mean_kl(rows), title)


def _claims_section(
    claims: list[Claim],
    collapsed: Sequence[str] = (),
    margin: float | None = None,
    mean_kl: float | None = None,
    title: str = CLAIMS_TITLE,
) -> list[str]:
    if not claims:
        return []
    L = [
        title,
        "",
        "Each verdict is computed from this study's numbers: *supported* or *contradicted* when the 95% interval "
        "lies on one side of the paper's statement, *undetermined* when it does not (or with one seed); a "
        "*descriptive* line reports a number without a verdict (outside the Holm family and the headline).",
    ]
    if margin is not None:
        share = f", {margin / mean_kl:.1%} of the arms' mean KL to the teacher ({mean_kl:.4f})" if mean_kl else ""
        L.append(
            f"The practical margin δ is {margin:g} nats/token{share}: a claim that one arm beats another is "
            "supported only beyond δ, and contradicted when the interval excludes any advantage as large as δ "
            "(rules: docs/DESIGN.md §3.7)."
        )
    L.append("")
    if collapsed:
        L += [
            f"> **Caution: {len(collapsed)} arm(s) end collapsed** ({', '.join(f'`{a}`' for a in collapsed)}; see "
            '"Collapse of the residual stream"): verdicts that rest on them describe a collapsed regime, not the '
            "placements. A longer budget or another regime is needed before reading them as the paper's claims.",
            "",
        ]
    tested = sum(1 for c in claims if c.p is not None)
    L += [
        f"*Holm-adjusted*: the verdict after Holm's step-down adjustment across the {tested} claims tested with two "
        "or more seeds (each claim's p is the smallest two-sided α at which its verdict still holds); the headline "
        "counts these.",
        "",
        "| claim | verdict | Holm-adjusted | p | this study |",
        "|---|---|---|---|---|",
    ]
    for c in claims:
        value = (
            "—"
            if c.est.mean is None
            else (f"{c.est.mean:+.4f}" + (f" [{c.est.lo:+.4f}, {c.est.hi:+.4f}]" if c.est.lo is not None else ""))
        )
        p = "—" if c.p is None else f"{c.p:.2g}"
        verdict, holm = ("*descriptive*", "—") if c.kind == "descriptive" else (f"**{c.verdict}**", c.holm)
        L.append(f"| {c.key} | {verdict} | {holm} | {p} | {value} |")
    L.append("")
    for c in claims:
        L.append(f"- **{c.key}** — paper: {c.paper} Here: {c.sentence}")
    return L + [""]


def _arms_section(rows: list[RunRecord], agg: Aggregate, selection: dict, rates: RatesAt | None) -> list[str]:
    L = [
        "## Validation CE per arm",
        "",
        "| arm | norm | curriculum | lr | val/ce (mean ± 95% CI) | sd | val/nll | seeds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for arm, a in agg.arms.items():
        r0 = next((r for r in rows if r.arm == arm), None)
        if r0 is None:
            continue
        piloted = rates.arms if rates is not None else {}
        how = " (envelope)" if rates is not None and rates.enveloped else " (pilot)"
        lr = f"{r0.lr:g}" + (" (selected)" if arm in selection else how if arm in piloted else "")
        if arm in piloted and piloted[arm].chosen is None:
            lr = "— (no pilot rate)"
        L.append(
            f"| {arm} | {r0.norm} | {r0.curriculum} | {lr} | {_ci(a.val_ce)} | {_fmt(a.val_ce.sd)} | "
            f"{_fmt(a.val_nll.mean)} | {a.val_ce.n}{' (failed: ' + str(a.failed) + ')' if a.failed else ''} |"
        )
    return L + [""]


def _selection_section(selection: dict) -> list[str]:
    if not selection:
        return []
    L = [
        "## Learning-rate selection",
        "",
        "Each sweeping arm keeps the rate with the lowest mean CE on the model-selection set: validation-split "
        "documents after those of the validation set, so the reported `val/ce` never chose its own rate.",
        "",
        "| arm | lr | selection-set CE (mean over seeds) | seeds | kept |",
        "|---|---|---|---|---|",
    ]
    for arm, s in selection.items():
        for lr, v in s["lrs"].items():
            L.append(f"| {arm} | {lr:g} | {_fmt(v['mean'])} | {v['n']} | {'✓' if lr == s['chosen'] else ''} |")
    return L + [""]


def _contrasts_section(study: StudyConfig, agg: Aggregate) -> list[str]:
    if not agg.contrasts:
        return []
    L = [
        "## Contrasts (paired over seeds, b − a; negative = b better)",
        "",
        "| contrast | a | b | b − a (mean ± 95% CI) | per seed |",
        "|---|---|---|---|---|",
    ]
    for name, c in agg.contrasts.items():
        per = ", ".join(f"{d:+.4f}" for d in c.diffs) or "—"
        L.append(f"| {name} | {c.a} | {c.b} | {_ci(c.est) if c.est.mean is not None else '—'} | {per} |")
    L.append("")
    ratio = agg.gap_ratio
    if study.gap_ratio and ratio is not None:
        x, y = study.gap_ratio
        if ratio.ratio is None:
            L += [f"Ratio {x} / {y}: undefined ({ratio.why or 'the denominator is 0'}).", ""]
        elif ratio.lo is None:
            L += [f"Ratio {x} / {y} (signed): {ratio.ratio:+.2f}; its interval is undefined ({ratio.why}).", ""]
        else:
            L += [
                f"Ratio {x} / {y} (signed): {ratio.ratio:+.2f}, 95% interval [{ratio.lo:+.2f}, {ratio.hi:+.2f}] "
                f"(Fieller, {ratio.n} seeds).",
                "",
            ]
    return L


def _phase_section(ph: Phase | None, claims: list[Claim], measures: dict) -> list[str]:
    if not ph:
        return []
    jumps = [
        g.val_ce_jump
        for arm in (ph.a, ph.b)
        for m in measures.get(arm, {}).values()
        for g in m.growth
        if g.val_ce_jump is not None
    ]
    preserved = bool(jumps) and all(abs(j) < JUMP_TOLERANCE for j in jumps)
    rows = [r for r in ph.rows if not (preserved and r.point == "after growth")]
    L = [
        f"## Phase-wise: `{ph.a}` vs `{ph.b}` at every stage boundary",
        "",
        f"| stage | blocks | point | {ph.a} | {ph.b} | {ph.b} − {ph.a} (mean ± 95% CI) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        L.append(f"| {r.stage} | {r.n_layer} | {r.point} | {r.a:.4f} | {r.b:.4f} | {_ci(r.diff)} |")
    L.append("")
    if preserved:
        L += [
            f"Every growth event of these runs preserved the function (|val/ce jump| < {JUMP_TOLERANCE:g} in each), "
            "so the values just after growth equal the previous stage ends and are not repeated.",
            "",
        ]
    crossing = next((c for c in claims if c.key == "crossover"), None)
    if crossing is not None:
        L += [f"Crossover ({crossing.verdict}): {crossing.sentence}", ""]
    return L


def _growth_section(study: StudyConfig, measures: dict) -> list[str]:
    L = [
        "## Growth events (mean over seeds)",
        "",
        "| arm | stage | depth | init | max |Δlogit| on a fixed batch | val/ce jump |",
        "|---|---|---|---|---|---|",
    ]
    n = len(L)
    for arm in study.arms:
        runs = list(measures.get(arm, {}).values())
        events = max((len(m.growth) for m in runs), default=0)
        for k in range(events):
            gs = [m.growth[k] for m in runs if len(m.growth) > k]
            g0 = gs[0]
            L.append(
                f"| {arm} | {g0.stage} | {g0.depth_from} → {g0.depth_to} | {g0.init} | "
                f"{_mean([g.logit_max_abs_diff for g in gs]):.3g} | {_fmt(_mean([g.val_ce_jump for g in gs]))} |"
            )
    return L + [""] if len(L) > n else []


def _compute_section(agg: Aggregate, rows: list[RunRecord]) -> list[str]:
    L = [
        "## Compute and budget matching (mean over finished seeds)",
        "",
        "| arm | tokens | active-layer tokens | trainable-layer tokens | est. FLOPs | matched to |",
        "|---|---|---|---|---|---|",
    ]
    for arm, a in agg.arms.items():
        cp = a.compute
        ok = _finished(rows, arm)
        match = ""
        if ok and ok[0].matched_to:
            scales = [v for r in ok if (v := r.value("match_scale")) is not None]
            scale = _mean(scales)
            way = "upward" if scale is not None and scale >= 1 else "downward"
            match = f"{ok[0].matched_to} by active-layer tokens ({way}, ×{scale:.3f})" if scale else ok[0].matched_to
        if cp["tokens"] is None:
            L.append(f"| {arm} | — | — | — | — | {match} |")
        else:
            L.append(
                f"| {arm} | {cp['tokens']:,.0f} | {cp['active_layer_tokens']:,.0f} | "
                f"{cp['trainable_layer_tokens']:,.0f} | {cp['flops']:.3g} | {match} |"
            )
    return L + [""]


def _boundary_section(study: StudyConfig, measures: dict) -> list[str]:
    keys = [
        ("boundary_drift", "boundary RMS drift"),
        ("struct_drift", "structural/content drift (pos. 0 excl.)"),
        ("first_new_update", "first appended block ‖F(h)‖/‖h‖"),
        ("last_prefix_update", "last pre-growth block rel. update"),
    ]
    arms = [a for a in study.arms if any(m.boundary_drift is not None for m in measures.get(a, {}).values())]
    if not arms:
        return []
    L = [
        "## Boundary diagnostics of the grow arms (mean over seeds)",
        "",
        "Drifts are |log(value at the end of the stage after growth / value at growth)|, averaged over growth events. "
        "A post-norm stream's RMS is its last norm's gains by construction; the first appended block's update ratio "
        "does not depend on where the norms sit.",
        "",
        "| arm | " + " | ".join(label for _, label in keys) + " | provenance of that block |",
        "|---|" + "---|" * (len(keys) + 1),
    ]
    for arm in arms:
        runs = list(measures[arm].values())
        prov = sorted({m.last_prefix_provenance for m in runs if m.last_prefix_provenance})
        L.append(
            f"| {arm} | "
            + " | ".join(_fmt(_mean([m.value(k) for m in runs])) for k, _ in keys)
            + f" | {', '.join(prov) or '—'} |"
        )
    return L + [""]


def _collapse_section(study: StudyConfig, measures: dict) -> list[str]:
    rows, warn, collapsed = [], [], collapsed_arms(study, measures)  # one rule for this section and the claims' caution
    for arm in study.arms:
        runs = list(measures.get(arm, {}).values())
        share, cos = _mean([m.collapse_share for m in runs]), _mean([m.collapse_cos for m in runs])
        if share is None:
            continue
        rows.append(f"| {arm} | {share:.3f} | {_fmt(cos, 3)} |")
        if arm in collapsed:
            warn.append(
                f"> **Warning: `{arm}` is collapsed** — at the end of training {share:.0%} of its residual "
                f"stream's energy lies in the direction all tokens share (threshold {study.collapse_threshold:.0%}): "
                "every later block sees nearly the same input, so its results say little about the placement."
            )
    if not rows:
        return []
    L = [
        "## Collapse of the residual stream (end of training, worst block, mean over seeds)",
        "",
        "| arm | energy share of the shared direction | mean cosine between positions |",
        "|---|---|---|",
        *rows,
        "",
    ]
    return L + (
        warn + [""] if warn else [f"No arm exceeds the collapse threshold ({study.collapse_threshold:.0%}).", ""]
    )


def scalar_diagnostics(m) -> dict[str, float]:
    """The scalar values among a run's final diagnostics (every registered diagnostic's; per-block lists stay in
    the measures, where claims and figures read them by name)."""
    return {k: v for k, v in m.diagnostics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def diagnostics_table(study: StudyConfig, rows: list[RunRecord], measures: Measures) -> list[str]:
    """Markdown: scalar diagnostics at the end of training, one column per arm (its lowest finished seed)."""
    cols = {
        arm: scalar_diagnostics(measures[arm][ok[0].seed]) if ok[0].seed in measures.get(arm, {}) else {}
        for arm in study.arms
        if (ok := _finished(rows, arm))
    }
    keys = sorted({k for v in cols.values() for k in v})
    if not keys:
        return []
    L = [
        "## Diagnostics at the end of training (probe batch, lowest finished seed)",
        "",
        "| diagnostic | " + " | ".join(cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    for k in keys:
        L.append(f"| {k} | " + " | ".join(_fmt(cols[a].get(k)) for a in cols) + " |")
    return L + [""]


DOSE_TITLE = "## Dose–response: boundary scale at growth against the grow gap"
DOSE_DESCRIPTIVE = (
    "Descriptive: the boundary-scale ratio on the x axis is measured, not set (its spread is largely seed noise), and "
    "the points pool budgets; the causal test sets the scale (model.boundary_scale, the claim `dose`)."
)


def dose_section(dose: tuple[Path, str] | None) -> list[str]:
    """The dose–response figure (figures.dose_response: its path and generated sentence) as a report section; a
    study's report and a budget ladder's print it alike (the figure under the report's plots/)."""
    if dose is None:
        return []
    path, sentence = dose
    return [DOSE_TITLE, "", f"{sentence} {DOSE_DESCRIPTIVE}", "", f"![{path.stem}](plots/{path.name})", ""]


def verdict_counts(label: str, claims: list[Claim]) -> str:
    """`<label> (Holm-adjusted): n supported, …` of the claims with a verdict (a descriptive one has none)."""
    counts: dict[str, int] = {}
    for claim in claims:
        if claim.kind != "descriptive":
            counts[claim.holm] = counts.get(claim.holm, 0) + 1
    raw = sum(claim.verdict in ("supported", "contradicted") for claim in claims)
    return (
        f"{label} (Holm-adjusted): "
        + ", ".join(f"{n} {v}" for v, n in counts.items())
        + f" ({raw} decided before adjustment)"
    )


def headline(study: StudyConfig, agg: Aggregate, claims: list[Claim], collapsed: list[str]) -> list[str]:
    """The few lines a study ends with on the terminal: each contrast with its interval, the claims'
    verdicts counted, and the collapsed arms if any (all from the numbers; details in report.md)."""
    L = []
    for name, c in agg.contrasts.items():
        e = c.est
        if e.mean is None:
            L.append(f"{name} ({c.b} − {c.a}): no paired seeds finished")
            continue
        ci = f" ± {e.half:.4f} (95% CI, {e.n} seeds)" if e.half is not None else " (1 seed, no interval)"
        L.append(f"{name} ({c.b} − {c.a}, val/ce): {e.mean:+.4f}{ci}")
    inter = next((c for c in claims if c.key == "interaction" and c.verdict != NOT_TESTED), None)
    if inter is not None and inter.est.mean is not None:
        L.append(f"interaction ((grow gap) − (joint gap), val/ce): {describe(inter.est)} — {inter.verdict}")
    if claims:
        L.append(verdict_counts("paper's claims", claims))
    if collapsed:
        L.append(
            f"collapsed at the end of training (collapse share > {study.collapse_threshold}): {', '.join(collapsed)}"
        )
    return L


CAUSAL_DOSE_TITLE = "## The causal dose: the boundary stream scaled by c from each growth event on"


def opening_lines(
    study: StudyConfig, rows: list[RunRecord], claims: list[Claim], measures: Measures, lr_choice: RatesAt | None,
    parts: Sequence[Part], study_dir: Path,
) -> list[str]:  # fmt: skip
    """The report's opening: the four core arms' figure and at most six lines of what the study says."""
    figure = overview_figure(study.claims, [(study.budget_scale, rows)], study_dir / "plots")
    cautions = []
    collapsed = collapsed_arms(study, measures)
    if collapsed:
        cautions.append(f"Caution: collapsed at the end of training: {', '.join(collapsed)}.")
    cautions += part_cautions(parts)
    counts = verdict_counts("the paper's claims", claims) if claims else ""
    return opening(figure, study_lines(claims, counts, rates_line(lr_choice), cautions))


def write_report(
    study: StudyConfig,
    rows: list[RunRecord],
    agg: Aggregate,
    study_dir: Path,
    claims: list[Claim] | tuple[Claim, ...] = (),
    measures: Measures | None = None,
    selection: dict | None = None,
    all_rows: list[RunRecord] | None = None,
    lr_choice: RatesAt | None = None,
    parts: Sequence[Part] = (),
) -> Path:
    """report.md (self-contained text, figures linked from plots/) and the figures. `rows` are the runs the
    statistics use (an arm's selected learning rate only); `all_rows` every run of the study; `lr_choice` the
    learning-rate pilot's choice (pilot.py), if the study ran one; `parts` what the registered report parts add
    (parts.py: the paper's regime checks above the claims, its rivals' and dose claims after them)."""
    study_dir, measures, selection = Path(study_dir), measures or {}, selection or {}
    figs = study_figures(study, rows, agg, study_dir)
    L = _header(study, rows, all_rows if all_rows is not None else rows, study_dir, lr_choice) + _dtype_lines(measures)
    L[2:2] = opening_lines(study, rows, list(claims), measures, lr_choice, parts, study_dir)
    L += slot(parts, "above_claims")
    L += claims_section(study, rows, list(claims), measures)
    L += slot(parts, "after_claims")
    L += _arms_section(rows, agg, selection, lr_choice)
    L += choice_lines(lr_choice)
    L += envelope_section(study, all_rows if all_rows is not None else rows, lr_choice.envelope if lr_choice else None)
    L += confirm_lines(lr_choice.confirm if lr_choice else None)
    L += _selection_section(selection)
    L += _contrasts_section(study, agg)
    L += split_lines(study.contrasts, rows)
    L += downstream_section(study, study_dir)
    L += _phase_section(agg.phase, list(claims), measures)
    L += _growth_section(study, measures)
    L += _compute_section(agg, rows)
    L += _boundary_section(study, measures)
    L += dose_section(dose_response(study.claims, [(study.budget_scale, measures)], study_dir / "plots"))
    L += _collapse_section(study, measures)
    L += diagnostics_table(study, rows, measures)
    L += ["## Figures", ""]
    for f in figs:
        L += [f"![{f.stem}](plots/{f.name})", *([FIGURE_NOTES[f.stem]] if f.stem in FIGURE_NOTES else []), ""]
    L += [
        "## Reproduce",
        "",
        f"`normgrow study {study_dir}/study.yaml -o {study_dir}` reruns every missing run; "
        "each run's resolved config is in `configs/`, its metrics, diagnostics and summary in `runs/`.",
    ]
    path = study_dir / "report.md"
    atomic.write_text(path, "\n".join(L) + "\n")
    return path


def _from_sampled(summary: Mapping) -> bool:
    return (summary.get("train_teacher") or "").startswith("sampled teacher cache")
